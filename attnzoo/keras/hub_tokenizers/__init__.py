"""keras-hub's tokenizers as the ``tokenizers`` library's: a preset folder's tokenizer assets become a
``tokenizer.json`` that gives keras-hub's ids, the tokenizer a converted model carries
(:class:`~attnzoo.keras.tokenizer.PortTokenizer`) and the one the Hugging Face folder holds.

One module per kind of vocabulary, each saying what keras-hub computes and how it is written for
``tokenizers``: :mod:`~attnzoo.keras.hub_tokenizers.sentencepiece` (Gemma, Llama 2, Mistral, Phi-3),
:mod:`~attnzoo.keras.hub_tokenizers.byte_pair` (GPT-2, Llama 3, Qwen, OPT, BLOOM, GPT-NeoX, Falcon) and
:mod:`~attnzoo.keras.hub_tokenizers.word_piece` (BERT, DistilBERT); :mod:`~attnzoo.keras.hub_tokenizers.classes`
lists keras-hub's classes and their special tokens, :mod:`~attnzoo.keras.hub_tokenizers.preset` reads a preset
folder (:func:`~attnzoo.keras.hub_tokenizers.preset.keras_hub_tokenizer`, also ``attnzoo.keras.keras_hub_tokenizer``).
``tokenizers`` is an optional import (``attnzoo[tokenizers]``). The package imports none of its modules.
"""
