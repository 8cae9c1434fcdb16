"""A keras-hub preset folder's tokenizer and preprocessor as a :class:`~attnzoo.keras.tokenizer.PortTokenizer`
(:func:`keras_hub_tokenizer`).

``save_to_preset`` of a task with its preprocessor writes ``tokenizer.json`` (keras-hub's config of its
tokenizer class: not the ``tokenizers`` library's file of that name), ``preprocessor.json`` (the
preprocessor's class and ``sequence_length``) and the vocabulary under ``assets/tokenizer/``:
``vocabulary.spm`` (SentencePiece), ``vocabulary.json`` + ``merges.txt`` (byte-level BPE) or
``vocabulary.txt`` (WordPiece). Each file is read as data from a stranger: within
``ATTNZOO_MAX_TOKENIZER_BYTES`` (the configs within ``ATTNZOO_MAX_CONFIG_BYTES``), JSON no deeper than
``ATTNZOO_MAX_DEPTH``, every field checked; a file missing or malformed is a ``WeightsError`` naming it, a
class or an option attnzoo does not convert a ``ConfigError`` naming what does.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooWarning, ConfigError, WeightsError
from attnzoo.io.limits import load_json, read_bounded
from attnzoo.keras.hub_tokenizers.byte_pair import byte_pair_tokenizer, read_byte_pair_assets
from attnzoo.keras.hub_tokenizers.classes import PREPROCESSOR_CLASSES, TOKENIZER_CLASSES, TokenizerClass
from attnzoo.keras.hub_tokenizers.library import tokenizers_library
from attnzoo.keras.hub_tokenizers.sentencepiece import sentencepiece_tokenizer
from attnzoo.keras.hub_tokenizers.word_piece import read_word_piece_vocabulary, word_piece_tokenizer
from attnzoo.keras.tokenizer import PortTokenizer, Preprocessing

__all__ = ["keras_hub_tokenizer", "carried_tokenizer", "preset_tokenizer_files", "serialized_layer"]
__all__ += ["read_layer_config"]
__all__ += ["TOKENIZER_CONFIG", "PREPROCESSOR_CONFIG", "ASSETS"]

TOKENIZER_CONFIG = "tokenizer.json"
PREPROCESSOR_CONFIG = "preprocessor.json"
ASSETS = "assets/tokenizer"


def preset_tokenizer_files(preset: Path | None) -> list[str]:
    """The tokenizer's files a keras-hub preset folder holds (none for a ``.keras`` file or ``None``)."""
    if preset is None or not preset.is_dir():
        return []
    return [name for name in (TOKENIZER_CONFIG, ASSETS) if (preset / name).exists()]


def read_layer_config(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """A keras-hub layer's serialized config: its class name and arguments."""
    if not path.is_file():
        raise WeightsError(f"{path}: the {what} is missing")
    return serialized_layer(load_json(read_bounded(path, path), path, f"the {what}"), path, what)


def serialized_layer(value: Any, path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """A serialized keras-hub layer (``{"class_name": ..., "config": {...}}``), read from ``path``: its class
    name and arguments."""
    if not isinstance(value, dict) or not isinstance(value.get("class_name"), str):
        raise WeightsError(f"{path}: the {what} has no class_name (not keras-hub's)")
    config = value.get("config")
    if not isinstance(config, dict):
        raise WeightsError(f"{path}: the {what}'s config is not a mapping")
    return value["class_name"], config


def _supported(table: dict[str, Any], name: str, path: Path, what: str) -> Any:
    if name not in table:
        known = ", ".join(table)
        raise ConfigError(f"{path}: keras-hub's {name} is a {what} attnzoo does not convert; it converts {known}")
    return table[name]


def _sentencepiece(folder: Path, config: dict[str, Any]) -> tuple[Any, dict[str, int], dict[str, str]]:
    for flag in ("add_bos", "add_eos"):
        if config.get(flag, False) is not False:
            raise ConfigError(
                f"{folder.parent.parent / TOKENIZER_CONFIG}: {flag} is {config.get(flag)!r:.20}; attnzoo converts "
                f"keras-hub's presets' tokenizers, which leave the start and end tokens to the preprocessor"
            )
    tokenizer, model = sentencepiece_tokenizer(folder / "vocabulary.spm")
    unk = model.pieces[model.unk_id].text
    return tokenizer, model.ids, {"unk_token": unk}


def _byte_pair(folder: Path, config: dict[str, Any], cls: TokenizerClass) -> tuple[Any, dict[str, int], dict]:
    vocabulary, merges = read_byte_pair_assets(folder)
    unsplittable = config.get("unsplittable_tokens")
    if unsplittable is None:  # keras-hub's default: the class's special tokens
        unsplittable = [t for t in (cls.start, cls.end, cls.pad) if t is not None]
    if not isinstance(unsplittable, list) or not all(isinstance(t, str) and t for t in unsplittable):
        raise WeightsError(f"{folder}: unsplittable_tokens is {unsplittable!r:.80}, not a list of tokens")
    prefix = config.get("add_prefix_space", False)
    if not isinstance(prefix, bool):
        raise WeightsError(f"{folder}: add_prefix_space is {prefix!r:.40}, not true or false")
    tokenizer = byte_pair_tokenizer(vocabulary, merges, list(dict.fromkeys(unsplittable)), prefix)
    return tokenizer, vocabulary, {}


def _word_piece(folder: Path, config: dict[str, Any], cls: TokenizerClass) -> tuple[Any, dict[str, int], dict]:
    vocabulary = read_word_piece_vocabulary(folder / "vocabulary.txt")
    specials = [t for t in (cls.start, cls.end, cls.pad, *cls.required) if t is not None]
    tokenizer, settings = word_piece_tokenizer(vocabulary, config, specials, folder / "vocabulary.txt")
    names = {"unk_token": settings["oov_token"], "mask_token": "[MASK]"}
    return tokenizer, vocabulary, {**names, "split": not settings["special_tokens_in_strings"]}


def _classes(preset: Path) -> tuple[str, TokenizerClass, dict[str, Any], str, dict[str, Any]]:
    """The tokenizer's class, its table entry and arguments; the preprocessor's class and arguments."""
    name, config = read_layer_config(preset / TOKENIZER_CONFIG, "keras-hub tokenizer config")
    cls = _supported(TOKENIZER_CLASSES, name, preset / TOKENIZER_CONFIG, "tokenizer")
    if config.get("sequence_length") is not None:  # the preprocessor packs; a tokenizer's own length cuts first
        raise ConfigError(
            f"{preset / TOKENIZER_CONFIG}: the tokenizer pads or cuts to its own sequence_length "
            f"{config['sequence_length']!r:.20}; attnzoo converts keras-hub's presets' tokenizers, which leave it "
            f"to the preprocessor"
        )
    if name == "Llama3Tokenizer":  # its start and end tokens are arguments
        start, end = config.get("bos_token", cls.start), config.get("eos_token", cls.end)
        if not isinstance(start, str) or not isinstance(end, str):
            raise WeightsError(f"{preset / TOKENIZER_CONFIG}: bos_token / eos_token are not tokens")
        cls = TokenizerClass(cls.kind, start, end, cls.pad)
    if name == "Gemma3Tokenizer" and config.get("has_vision_tokens", True) is False:
        cls = TokenizerClass(cls.kind, cls.start, cls.end, cls.pad)
    pre_name, pre_config = read_layer_config(preset / PREPROCESSOR_CONFIG, "keras-hub preprocessor config")
    _supported(PREPROCESSOR_CLASSES, pre_name, preset / PREPROCESSOR_CONFIG, "preprocessor")
    if pre_config.get("image_converter") is not None:
        raise ConfigError(
            f"{preset / PREPROCESSOR_CONFIG}: {pre_name} has an image converter; attnzoo converts the text-only "
            f"preprocessor (its prompts' image tokens are expanded by keras-hub, not by a tokenizer)"
        )
    return name, cls, config, pre_name, pre_config


def _ids(cls: TokenizerClass, vocabulary: dict[str, int], where: Path) -> dict[str, int | None]:
    """The special tokens' ids; a token the vocabulary lacks is refused, as keras-hub refuses it."""
    for token in (cls.start, cls.end, cls.pad, *cls.required):
        if token is not None and token not in vocabulary:
            raise WeightsError(f"{where}: the special token {token!r} is not in the vocabulary")
    return {
        "start_token_id": vocabulary[cls.start] if cls.start is not None else None,
        "end_token_id": vocabulary[cls.end] if cls.end is not None else None,
        "pad_token_id": vocabulary[cls.pad] if cls.pad is not None else 0,
    }


def _post_processor(cls: TokenizerClass, task: str, ids: dict[str, int | None]) -> Any:
    """transformers' ``add_special_tokens=True``: the start token (and the end token, a classifier's) as
    keras-hub's preprocessor adds them; ``None`` where it adds none."""
    tk = tokenizers_library("converting a keras-hub tokenizer")
    start, end = cls.start, cls.end
    if task == "text_classifier" and start is not None and end is not None:
        return tk.processors.TemplateProcessing(
            single=f"{start}:0 $A:0 {end}:0",
            pair=f"{start}:0 $A:0 {end}:0 $B:1 {end}:1",
            special_tokens=[(start, ids["start_token_id"]), (end, ids["end_token_id"])],
        )
    if task == "causal_lm" and start is not None:
        return tk.processors.TemplateProcessing(
            single=f"{start}:0 $A:0", pair=f"{start}:0 $A:0 $B:1", special_tokens=[(start, ids["start_token_id"])]
        )
    return None


def _names(cls: TokenizerClass, task: str, extra: dict[str, Any], tokenizer: Any, split: bool) -> dict[str, str]:
    """transformers' names of the special tokens; where special tokens in a text are found whole (byte-level
    BPE), only those the tokenizer holds as special, so that transformers adds none keras-hub lacks. A class
    that pads with id 0 (no pad token) names id 0's token where it is a special one (Llama's ``<unk>``)."""
    held = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    pad = cls.pad if cls.pad is not None else tokenizer.id_to_token(0)
    pad = pad if cls.pad is not None or pad in held else None
    if task == "text_classifier":
        names = {"cls_token": cls.start, "sep_token": cls.end, "pad_token": pad, **extra}
    else:
        names = {"bos_token": cls.start, "eos_token": cls.end, "pad_token": pad, **extra}
    return {k: v for k, v in names.items() if isinstance(v, str) and (split or v in held)}


def _sequence_length(config: dict[str, Any], where: Path) -> int:
    length = config.get("sequence_length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise WeightsError(f"{where}: sequence_length is {length!r:.40}, not a whole number >= 1")
    return length


def keras_hub_tokenizer(preset: str | Path) -> PortTokenizer:
    """The tokenizer and preprocessor of a keras-hub preset folder, as a model's ``tokenizer``:
    ``tokenize(texts)`` gives keras-hub's ``token_ids`` and ``padding_mask`` (and ``segment_ids``).

    Converts the tokenizers of keras-hub's Gemma, Gemma 3, Llama 2, Mistral, Mixtral, Phi-3 (SentencePiece),
    Llama 3, Qwen, Qwen 3, Qwen-MoE, OPT, BLOOM, GPT-NeoX, Falcon, GPT-2 (byte-level BPE), BERT and DistilBERT
    (WordPiece), with their causal-LM or text-classifier preprocessor. Needs the ``tokenizers`` extra."""
    preset = Path(preset)
    tokenizers_library("converting a keras-hub tokenizer")
    name, cls, config, pre_name, pre_config = _classes(preset)
    pre = PREPROCESSOR_CLASSES[pre_name]
    folder = preset / ASSETS
    if cls.kind == "sentencepiece":
        tokenizer, vocabulary, extra = _sentencepiece(folder, config)
        split = True
    elif cls.kind == "byte_pair":
        tokenizer, vocabulary, extra = _byte_pair(folder, config, cls)
        split = False
    else:
        tokenizer, vocabulary, extra = _word_piece(folder, config, cls)
        split = extra.pop("split")
    ids = _ids(cls, vocabulary, folder)
    tokenizer.post_processor = _post_processor(cls, pre.task, ids)
    record = Preprocessing(
        tokenizer_class=name,
        preprocessor_class=pre_name,
        task=pre.task,
        sequence_length=_sequence_length(pre_config, preset / PREPROCESSOR_CONFIG),
        pad_mask=pre.pad_mask,
        segment_ids=pre.segment_ids,
        split_special_tokens=split,
        special_tokens=_names(cls, pre.task, extra, tokenizer, split),
        **ids,
    )
    return PortTokenizer(tokenizer.to_str().encode("utf-8"), record)


def carried_tokenizer(path: str | Path) -> PortTokenizer | None:
    """The tokenizer a model converted from ``path`` carries: a preset folder's that holds one, else
    ``None``. One that does not convert (a class attnzoo does not convert, a file missing or malformed, no
    ``tokenizers``) is left behind with a warning saying why: the model converts without it."""
    folder = Path(path)
    if not preset_tokenizer_files(folder):
        return None
    try:
        return keras_hub_tokenizer(folder)
    except (ConfigError, WeightsError) as e:
        warnings.warn(f"{folder}: the model converts without its tokenizer: {e}", AttnzooWarning, stacklevel=3)
        return None
