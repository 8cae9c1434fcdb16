"""Bytes and files, below the core: ``weights`` (the safetensors codec and its sha256 checks), ``folders``
(saved model folders), ``atomic`` (crash-safe writes), ``sources`` (where weights bytes come from:
bundled, URL, the Hugging Face Hub, the cache), ``text`` (words to ids: the vocabulary and tokenizer
of trained text models) and ``tables`` (plain-text tables that wrap to a width). It imports only
``attnzoo.errors``; importing it does not import torch.
"""
