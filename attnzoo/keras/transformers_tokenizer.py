"""The tokenizer's seam in the Hugging Face door: a converted keras-hub model's tokenizer written as the
files ``transformers.AutoTokenizer`` loads (:func:`write_tokenizer`).

The tokenizer is the one the model carries (:class:`~attnzoo.keras.tokenizer.PortTokenizer`, converted from
its preset folder) or a preset folder's (``tokenizer.json``, keras-hub's own config of its tokenizer, and
``assets/tokenizer/``). The folder gets:

* ``tokenizer.json``: the ``tokenizers`` library's file, the port's own, whose ids are keras-hub's; its
  post-processor adds the start token as keras-hub's preprocessor does (and a classifier's end token), so
  ``tokenizer(texts)`` (``add_special_tokens=True``, transformers' default) gives keras-hub's rows before
  padding, and ``add_special_tokens=False`` the bare tokens;
* ``tokenizer_config.json``: ``tokenizer_class`` ``PreTrainedTokenizerFast`` (it runs ``tokenizer.json`` as it
  is; a family's own class may rebuild the pipeline from its vocabulary), the special tokens the tokenizer
  holds as special, ``model_max_length`` (the preprocessor's ``sequence_length``), ``model_input_names``
  (``token_type_ids`` where the model takes segment ids), and ``split_special_tokens``: true where keras-hub
  reads ``<s>`` in a text as text (SentencePiece, WordPiece), false where it finds its unsplittable tokens
  whole (byte-level BPE);
* ``special_tokens_map.json``: those special tokens again.

A causal LM whose keras-hub class pads with id 0 without a pad token (GPT-2, Llama 3, Qwen, ...) names no
pad token: ``tokenizer.pad_token = tokenizer.eos_token`` before padding, as such models' Hugging Face
tokenizers ask. config.json gets the ids (:attr:`TokenizerWritten.special`): ``bos_token_id`` and
``eos_token_id`` (a causal LM's start and end), ``pad_token_id`` (keras-hub's pad id, where a pad token is
named: as those models' own config.json, the others give none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras.hub_tokenizers.preset import keras_hub_tokenizer, preset_tokenizer_files
from attnzoo.keras.tokenizer import PortTokenizer

__all__ = [
    "TokenizerWritten",
    "tokenizer_assets",
    "write_tokenizer",
    "hugging_face_files",
    "special_ids",
    "tokenizer_size",
    "REBUILT",
    "rebuilt_warning",
]


@dataclass(frozen=True)
class TokenizerWritten:
    """What :func:`write_tokenizer` did: ``files`` written into the folder, the ``special`` token ids it
    knows (``bos_token_id``, ``eos_token_id``, ``pad_token_id``) for config.json, ``missing``, why no
    tokenizer was written where the preset held one (empty when nothing was left behind), ``size``, one past
    the largest id it gives, and ``keras_class``, keras-hub's class of it (``size`` 0 and ``""`` for none)."""

    files: tuple[str, ...] = ()
    special: dict[str, int] = field(default_factory=dict)
    missing: str = ""
    size: int = 0  # ids the tokenizer gives: up to size - 1
    keras_class: str = ""  # keras-hub's tokenizer class ("Llama3Tokenizer")


def tokenizer_assets(preset: Path | None) -> list[str]:
    """The tokenizer files of a keras-hub preset folder (none for a ``.keras`` file or ``None``)."""
    return preset_tokenizer_files(preset)


def special_ids(tokenizer: PortTokenizer) -> dict[str, int]:
    """config.json's special token ids: a causal LM's start and end tokens, and the pad id where the tokenizer
    names a pad token. Not where the pad id is an ordinary token (GPT-2's ``!``): transformers' ``generate``
    would mask that token wherever a prompt given without ``attention_mask`` holds it, and the embedding would
    never train its row (``padding_idx``)."""
    record = tokenizer.preprocessing
    found = {"pad_token_id": record.pad_token_id} if "pad_token" in record.special_tokens else {}
    if record.task == "causal_lm":
        for key, value in (("bos_token_id", record.start_token_id), ("eos_token_id", record.end_token_id)):
            if value is not None:
                found[key] = value
    return found


# config.json's model types whose tokenizer transformers 5's AutoTokenizer builds again as its own class from
# tokenizer.json's vocabulary, with that class's pipeline, whatever tokenizer_config.json names (transformers'
# MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, where the class is not TokenizersBackend)
REBUILT = {"qwen2": "Qwen2Tokenizer"}


def rebuilt_warning(model_type: str) -> str:
    """What the door says where transformers' AutoTokenizer would not run ``tokenizer.json`` as it is ("" if
    it does)."""
    name = REBUILT.get(model_type)
    if name is None:
        return ""
    return (
        f"transformers' AutoTokenizer loads a {model_type} folder's tokenizer as its {name}, whatever "
        f"tokenizer_config.json names: it cuts words with its own pattern (each digit alone, runs of spaces "
        f"apart) and NFC-normalises, so its ids differ from keras-hub's on such texts; "
        f"PreTrainedTokenizerFast.from_pretrained(folder) runs tokenizer.json as it is, with keras-hub's ids"
    )


def tokenizer_size(tokenizer: PortTokenizer) -> int:
    """One past the largest id ``tokenizer.json`` gives: its model's vocabulary (a token -> id mapping, or
    SentencePiece's list of pieces) and its added tokens."""
    data = json.loads(tokenizer.tokenizer_json)
    vocabulary = data.get("model", {}).get("vocab") or {}
    ids = list(vocabulary.values()) if isinstance(vocabulary, dict) else [len(vocabulary) - 1]
    ids += [token["id"] for token in data.get("added_tokens") or []]
    return max(ids, default=-1) + 1


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def hugging_face_files(tokenizer: PortTokenizer) -> dict[str, bytes]:
    """The files transformers' ``AutoTokenizer`` loads (the module docstring): name -> bytes."""
    record = tokenizer.preprocessing
    names = ["input_ids", "attention_mask"]
    if record.segment_ids:
        names.insert(1, "token_type_ids")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **record.special_tokens,
        "model_max_length": record.sequence_length,
        "model_input_names": names,
        "split_special_tokens": record.split_special_tokens,
        "padding_side": "right",
        "truncation_side": "right",
        "clean_up_tokenization_spaces": False,
        "keras_hub_tokenizer": record.tokenizer_class,
        "keras_hub_preprocessor": record.preprocessor_class,
    }
    return {
        "tokenizer.json": tokenizer.tokenizer_json,
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json(dict(record.special_tokens)),
    }


def _tokenizer(source: Path | PortTokenizer | None) -> tuple[PortTokenizer | None, str]:
    """The tokenizer to write, or why there is none ("" where the source holds no tokenizer)."""
    if source is None or isinstance(source, PortTokenizer):
        return source, ""
    found = preset_tokenizer_files(Path(source))
    if not found:
        return None, ""
    try:
        return keras_hub_tokenizer(Path(source)), ""
    except (ConfigError, WeightsError) as e:
        return None, f"{source} holds a keras-hub tokenizer ({', '.join(found)}) that is not written: {e}"


def write_tokenizer(source: Path | PortTokenizer | None, directory: Path) -> TokenizerWritten:
    """Write a tokenizer into the Hugging Face folder ``directory`` as transformers' files.

    ``source``: the tokenizer a converted model carries, or a keras-hub preset folder (``None``, or a folder
    without a tokenizer, writes nothing). A preset's tokenizer that does not convert is left behind, and the
    result says why in ``missing`` (the door warns)."""
    tokenizer, missing = _tokenizer(source)
    if tokenizer is None:
        return TokenizerWritten(missing=missing)
    files = hugging_face_files(tokenizer)
    for name, data in files.items():
        (Path(directory) / name).write_bytes(data)
    return TokenizerWritten(
        files=tuple(files),
        special=special_ids(tokenizer),
        size=tokenizer_size(tokenizer),
        keras_class=tokenizer.preprocessing.tokenizer_class,
    )
