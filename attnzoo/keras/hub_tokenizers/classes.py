"""keras-hub's tokenizer and preprocessor classes that convert, with what each fixes that its files do not
say: the kind of vocabulary, the special tokens (the class's constructor sets them, keras-hub 0.32), and what
its preprocessor returns.

A tokenizer's special tokens: ``start`` (the packer's start value, ``None`` where the class has none: Qwen's),
``end``, ``pad`` (``None`` where the class pads with id 0 whatever token that is, ``pad_token_id = 0``) and
``required`` (further tokens the class looks up, so that a vocabulary without them is refused as keras-hub
refuses it). A preprocessor's ``task``: ``causal_lm`` (``generate_preprocess``: the start token, no end token,
the mask 1 on the tokens) or ``text_classifier`` (its call: start, the text, end, ``segment_ids`` where it
returns them); ``pad_mask``: the mask is ``token_ids != pad id`` (keras-hub's ``compute_padding_mask``) rather
than the packer's.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenizerClass", "PreprocessorClass", "TOKENIZER_CLASSES", "PREPROCESSOR_CLASSES"]


@dataclass(frozen=True)
class TokenizerClass:
    kind: str  # "sentencepiece", "byte_pair" or "word_piece"
    start: str | None
    end: str | None
    pad: str | None
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreprocessorClass:
    task: str  # "causal_lm" or "text_classifier"
    segment_ids: bool = False
    pad_mask: bool = False


def _sp(start: str, end: str, pad: str | None, *required: str) -> TokenizerClass:
    return TokenizerClass("sentencepiece", start, end, pad, required)


def _bpe(start: str | None, end: str, pad: str | None = None) -> TokenizerClass:
    return TokenizerClass("byte_pair", start, end, pad)


_BERT = TokenizerClass("word_piece", "[CLS]", "[SEP]", "[PAD]", ("[MASK]",))
_GEMMA3_IMAGE = ("<img>", "<start_of_image>", "<end_of_image>")  # with has_vision_tokens (its default)

TOKENIZER_CLASSES: dict[str, TokenizerClass] = {
    "GemmaTokenizer": _sp("<bos>", "<eos>", "<pad>"),
    "Gemma3Tokenizer": _sp("<bos>", "<eos>", "<pad>", *_GEMMA3_IMAGE),
    "LlamaTokenizer": _sp("<s>", "</s>", None),
    "MistralTokenizer": _sp("<s>", "</s>", None),
    "MixtralTokenizer": _sp("<s>", "</s>", None),
    "Phi3Tokenizer": _sp("<s>", "<|endoftext|>", None),
    "Llama3Tokenizer": _bpe("<|begin_of_text|>", "<|end_of_text|>"),  # or its config's bos_token, eos_token
    "QwenTokenizer": _bpe(None, "<|endoftext|>"),
    "Qwen3Tokenizer": _bpe(None, "<|im_end|>", "<|endoftext|>"),
    "Qwen3MoeTokenizer": _bpe(None, "<|im_end|>", "<|endoftext|>"),
    "QwenMoeTokenizer": _bpe(None, "<|endoftext|>"),
    "OPTTokenizer": _bpe("</s>", "</s>", "<pad>"),
    "BloomTokenizer": _bpe("<s>", "</s>", "<pad>"),
    "GPTNeoXTokenizer": _bpe("<|endoftext|>", "<|endoftext|>"),
    "FalconTokenizer": _bpe("<|endoftext|>", "<|endoftext|>"),
    "GPT2Tokenizer": _bpe("<|endoftext|>", "<|endoftext|>"),
    "BertTokenizer": _BERT,
    "DistilBertTokenizer": _BERT,
}

_CAUSAL = PreprocessorClass("causal_lm")
PREPROCESSOR_CLASSES: dict[str, PreprocessorClass] = {
    **{
        f"{family}CausalLMPreprocessor": _CAUSAL
        for family in (
            "Gemma",
            "Llama",
            "Llama3",
            "Mistral",
            "Mixtral",
            "Phi3",
            "Qwen",
            "Qwen3",
            "Qwen3Moe",
            "QwenMoe",
            "OPT",
            "Bloom",
            "GPTNeoX",
            "Falcon",
            "GPT2",
        )
    },
    "Gemma3CausalLMPreprocessor": PreprocessorClass("causal_lm", pad_mask=True),  # text only (no image_converter)
    "BertTextClassifierPreprocessor": PreprocessorClass("text_classifier", segment_ids=True, pad_mask=True),
    "DistilBertTextClassifierPreprocessor": PreprocessorClass("text_classifier", pad_mask=True),
}
