"""Bytes and files, below the core: ``weights`` (the safetensors codec, sha256 checks, crash-safe writes,
saved model folders), ``sources`` (where weights bytes come from: bundled, URL, the Hugging Face Hub, the
cache) and ``text`` (words to ids: the vocabulary and tokenizer of trained text models). It imports only
``attnzoo.errors``; importing it does not import torch.
"""
