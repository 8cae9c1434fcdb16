"""The tokenizer a converted keras-hub model carries (:class:`PortTokenizer`): texts in, the dict keras-hub's
preprocessor returns out, as torch tensors.

A port's tokenizer is two files, written by ``attnzoo.save`` beside ``config.yaml`` and ``model.safetensors``
(the model's ``attnzoo_files``) and read back by ``attnzoo.load``:

* ``tokenizer.json``: the ``tokenizers`` library's file (:mod:`attnzoo.keras.hub_tokenizers` writes it from
  keras-hub's assets), the same file the Hugging Face folder holds; its post-processor adds the start (and
  end) token as keras-hub's preprocessor does, for transformers' ``add_special_tokens=True``;
* ``preprocessing.json``: what keras-hub's preprocessor adds around the tokens (:class:`Preprocessing`).

:meth:`PortTokenizer.tokenize` runs the tokenizer without its post-processor and packs each row as the
preprocessor does: for a causal LM what ``generate_preprocess`` gives (the start token, no end token, the
tokens cut to ``sequence_length``, right-padded with the pad id, ``padding_mask`` 1 on the tokens); for a text
classifier what its call gives (start, tokens, end; ``segment_ids`` zeros where the model takes them; the mask
``token_ids != pad id``, as keras-hub computes it). The ``tokenizers`` library is imported at the first call,
so a folder loads, and its model runs, without it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.limits import load_json
from attnzoo.keras.hub_tokenizers.library import tokenizers_library

__all__ = ["PortTokenizer", "Preprocessing", "CarriesTokenizer", "TOKENIZER_FILE", "PREPROCESSING_FILE", "TASKS"]

TOKENIZER_FILE = "tokenizer.json"
PREPROCESSING_FILE = "preprocessing.json"
TASKS = ("causal_lm", "text_classifier")
FORMAT = 1


@dataclass(frozen=True)
class Preprocessing:
    """``preprocessing.json``: keras-hub's classes (``tokenizer_class``, ``preprocessor_class``), the ``task``
    (:data:`TASKS`), the ``sequence_length`` rows are packed to, the special ids (``start_token_id`` and
    ``end_token_id`` ``None`` where the class has none), whether the mask is ``token_ids != pad id``
    (``pad_mask``), whether ``segment_ids`` are returned, whether special tokens in a text are tokenized as
    text (``split_special_tokens``: keras-hub finds none in a text but byte-pair's unsplittable tokens), and
    ``special_tokens``: transformers' names of the tokens ``tokenizer.json`` holds as special."""

    tokenizer_class: str
    preprocessor_class: str
    task: str
    sequence_length: int
    pad_token_id: int
    start_token_id: int | None = None
    end_token_id: int | None = None
    pad_mask: bool = False
    segment_ids: bool = False
    split_special_tokens: bool = True
    special_tokens: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return (json.dumps({"format": FORMAT, **asdict(self)}, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Preprocessing:
        """The record in ``data``, every field checked: a file edited by hand or by a stranger is a
        ``WeightsError`` naming the field."""
        value = load_json(data, where, "the preprocessing record")
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise WeightsError(f"{where}: not an attnzoo preprocessing record of format {FORMAT}")
        fields = {key: value.get(key) for key in cls.__dataclass_fields__ if key in value}
        _check(fields, where)
        return cls(**fields)


def _check(fields: dict[str, Any], where: str) -> None:
    def whole(key: str, low: int, optional: bool = False) -> None:
        given = fields.get(key)
        if optional and given is None:
            return
        if isinstance(given, bool) or not isinstance(given, int) or not low <= given < 1 << 31:
            raise WeightsError(f"{where}: {key} is {given!r:.40}, not a whole number >= {low}")

    for key in ("tokenizer_class", "preprocessor_class"):
        if not isinstance(fields.get(key), str):
            raise WeightsError(f"{where}: {key} is {fields.get(key)!r:.40}, not a class name")
    if fields.get("task") not in TASKS:
        raise WeightsError(f"{where}: task is {fields.get('task')!r:.40}, not one of {', '.join(TASKS)}")
    whole("sequence_length", 1)
    whole("pad_token_id", 0)
    whole("start_token_id", 0, optional=True)
    whole("end_token_id", 0, optional=True)
    for key in ("pad_mask", "segment_ids", "split_special_tokens"):
        if not isinstance(fields.get(key, False), bool):
            raise WeightsError(f"{where}: {key} is {fields.get(key)!r:.40}, not true or false")
    special = fields.get("special_tokens", {})
    if not isinstance(special, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in special.items()):
        raise WeightsError(f"{where}: special_tokens is not a mapping of names to tokens")


def _texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        return [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, (bytes, bytearray)):
        raise ConfigError(f"tokenize takes a str or a list of str, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"tokenize takes a list of str; item {index} is a {type(text).__name__}")
    return list(texts)


class PortTokenizer:
    """keras-hub's tokenizer and preprocessor of a converted model (see the module docstring).

    ``tokenizer_json``: the ``tokenizers`` library's file, as bytes; ``preprocessing``: its record."""

    def __init__(self, tokenizer_json: bytes, preprocessing: Preprocessing) -> None:
        self.tokenizer_json = bytes(tokenizer_json)
        self.preprocessing = preprocessing
        self._backend: Any = None

    @classmethod
    def from_files(cls, files: Mapping[str, bytes], where: str = "the saved folder") -> PortTokenizer:
        """The tokenizer of a saved folder's files (``tokenizer.json``, ``preprocessing.json``)."""
        missing = [name for name in (TOKENIZER_FILE, PREPROCESSING_FILE) if name not in files]
        if missing:
            raise WeightsError(f"{where}: the tokenizer needs {' and '.join(missing)} beside it")
        record = Preprocessing.from_json(files[PREPROCESSING_FILE], f"{where}/{PREPROCESSING_FILE}")
        return cls(files[TOKENIZER_FILE], record)

    def files(self) -> dict[str, bytes]:
        """What ``attnzoo.save`` writes of it: file name -> bytes."""
        return {TOKENIZER_FILE: self.tokenizer_json, PREPROCESSING_FILE: self.preprocessing.to_json()}

    @property
    def sequence_length(self) -> int:
        return self.preprocessing.sequence_length

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` (read from ``tokenizer.json`` at first use, its ids checked)."""
        if self._backend is None:
            tk = tokenizers_library("tokenizing with a port's tokenizer")
            try:
                backend = tk.Tokenizer.from_str(self.tokenizer_json.decode("utf-8"))
            except Exception as e:  # the library's own words: which field of the file it could not read
                shown = " ".join(str(e).split())[:200]
                raise WeightsError(f"{TOKENIZER_FILE} is not a tokenizers file ({shown})") from None
            backend.encode_special_tokens = self.preprocessing.split_special_tokens
            size = backend.get_vocab_size(with_added_tokens=True)
            record = self.preprocessing
            for key in ("start_token_id", "end_token_id", "pad_token_id"):
                given = getattr(record, key)
                if given is not None and given >= size:
                    raise WeightsError(f"{PREPROCESSING_FILE}: {key} {given} is past the {size:,} tokens")
            self._backend = backend
        return self._backend

    def encode(self, texts: Any) -> list[list[int]]:
        """Each text's token ids, no start, end or padding (keras-hub's ``tokenizer(texts)``)."""
        return [e.ids for e in self.backend.encode_batch(_texts(texts), add_special_tokens=False)]

    def tokenize(self, texts: Any, *, sequence_length: int | None = None) -> dict[str, Any]:
        """``token_ids``, ``padding_mask`` (and ``segment_ids`` where the model takes them), int64 tensors
        [B, sequence_length], as keras-hub's preprocessor packs them (the module docstring)."""
        return self.pack(self.encode(texts), sequence_length=sequence_length)

    def pack(self, encoded: Sequence[Sequence[int]], *, sequence_length: int | None = None) -> dict[str, Any]:
        """:meth:`tokenize` of texts already :meth:`encode`-d: each row of ids packed as the preprocessor
        packs it (start and end tokens, cut, padded; the masks)."""
        import torch

        record = self.preprocessing
        length = record.sequence_length if sequence_length is None else sequence_length
        least = 2 if record.task == "text_classifier" else 1
        if isinstance(length, bool) or not isinstance(length, int) or length < least:
            raise ConfigError(f"sequence_length must be a whole number >= {least}, got {length!r:.40}")
        head = [record.start_token_id] if record.start_token_id is not None else []
        tail = [record.end_token_id] if record.task == "text_classifier" and record.end_token_id is not None else []
        rows = [head + list(ids[: length - len(head) - len(tail)]) + tail for ids in encoded]
        pad = record.pad_token_id
        token_ids = torch.tensor([row + [pad] * (length - len(row)) for row in rows], dtype=torch.int64)
        token_ids = token_ids.reshape(len(rows), length)
        if record.pad_mask:
            mask = (token_ids != pad).to(torch.int64)
        else:
            lengths = torch.tensor([len(row) for row in rows], dtype=torch.int64)
            mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.int64)
        out = {"token_ids": token_ids, "padding_mask": mask}
        if record.segment_ids:
            out["segment_ids"] = torch.zeros_like(token_ids)
        return out

    def __repr__(self) -> str:
        r = self.preprocessing
        return f"PortTokenizer({r.tokenizer_class}, {r.task}, sequence_length={r.sequence_length})"


def no_tokenizer(what: str) -> ConfigError:
    """The error of ``tokenize`` on a model that carries no tokenizer: how to get one."""
    return ConfigError(
        f"{what} carries no tokenizer: convert the keras-hub preset folder that holds it (save_to_preset of the "
        f"task with its preprocessor writes tokenizer.json and assets/tokenizer/), or attach one: "
        f"model.tokenizer = attnzoo.keras.keras_hub_tokenizer('PRESET_FOLDER')"
    )


class CarriesTokenizer:
    """What a converted model gets of its keras-hub tokenizer: ``tokenizer`` (a :class:`PortTokenizer` or
    ``None``), ``tokenize(texts)``, and ``attnzoo_files``, the tokenizer's files that ``attnzoo.save`` writes
    beside the weights and ``attnzoo.load`` gives back (:mod:`attnzoo.io.carried`)."""

    @property
    def tokenizer(self) -> PortTokenizer | None:
        return self.__dict__.get("_port_tokenizer")

    @tokenizer.setter
    def tokenizer(self, value: PortTokenizer | None) -> None:
        if value is not None and not isinstance(value, PortTokenizer):
            raise ConfigError(
                f"a converted model's tokenizer is a PortTokenizer (attnzoo.keras.keras_hub_tokenizer(PRESET)) or "
                f"None, got {type(value).__name__}"
            )
        self.__dict__["_port_tokenizer"] = value

    def tokenize(self, texts: Any, *, sequence_length: int | None = None) -> dict[str, Any]:
        """``texts`` (a str or a list of str) as keras-hub's preprocessor gives them: ``token_ids``,
        ``padding_mask`` (and ``segment_ids`` where the model takes them), int64 tensors [B, sequence_length],
        right-padded (:meth:`PortTokenizer.tokenize`); ``sequence_length`` defaults to the preprocessor's."""
        if self.tokenizer is None:
            raise no_tokenizer(f"this {type(self).__name__}")
        return self.tokenizer.tokenize(texts, sequence_length=sequence_length)

    @property
    def attnzoo_files(self) -> dict[str, bytes]:
        return self.tokenizer.files() if self.tokenizer is not None else {}

    @attnzoo_files.setter
    def attnzoo_files(self, files: Mapping[str, bytes]) -> None:
        # both files or none: one left out on load (it no longer matched its record, which was said) takes both
        whole = all(name in files for name in (TOKENIZER_FILE, PREPROCESSING_FILE))
        self.tokenizer = PortTokenizer.from_files(files) if whole else None
