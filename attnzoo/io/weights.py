"""Weights files: safetensors only, every file's sha256 checked on every load, nothing overwritten.

A weights file carries what is needed to rebuild its model in the safetensors metadata (string keys):
``attnzoo.name``, ``attnzoo.factory``, ``attnzoo.config`` (JSON) and any extra JSON entries such as a
vocabulary or label names under ``attnzoo.meta.<key>``. Saved model folders (``model.safetensors`` and
``config.yaml``) are :mod:`attnzoo.io.folders`; the crash-safe writes are :mod:`attnzoo.io.atomic`.

A file's expected digest comes from its model card, its folder's ``config.yaml``, a ``FILE.sha256``
file next to it (``sha256sum`` format), or the caller; a file whose digest is unknown is refused.
Files are read once: the bytes are hashed and the tensors are views of them (nothing copied), so what is
verified is exactly what is loaded, and a load holds the weights once. Nothing here knows any particular layer.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.atomic import atomic_write, commit, discard, locked, stage
from attnzoo.io.limits import load_json

__all__ = [
    "sha256_file",
    "read_weights",
    "read_verified",
    "write_weights",
    "expected_digest",
    "as_digests",
    "plain_tensors",
    "encode_metadata",
    "decode_metadata",
    "WEIGHTS_FILE",
]

WEIGHTS_FILE = "model.safetensors"
_META_PREFIX = "attnzoo.meta."
_SHA256 = re.compile(r"[0-9a-f]{64}")  # fullmatch: "$" would take a trailing newline


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encode_metadata(
    name: str, factory: str, config: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Safetensors metadata (str -> str) that lets ``attnzoo.load(file)`` rebuild the model; a config or
    metadata value that JSON cannot hold (an object, a tensor, a set) is a ``ConfigError`` naming it."""
    meta = {
        "format": "pt",
        "attnzoo.version": "1",
        "attnzoo.name": name,
        "attnzoo.factory": factory,
        "attnzoo.config": _json(dict(config), "config", sort_keys=True),
    }
    for key, value in (extra or {}).items():
        meta[_META_PREFIX + key] = _json(value, f"metadata {key!r}")
    return meta


def _json(value: Any, what: str, *, sort_keys: bool = False) -> str:
    try:
        return json.dumps(value, sort_keys=sort_keys)
    except (TypeError, ValueError, RecursionError):
        pass
    entries = value.items() if isinstance(value, Mapping) else [("", value)]
    for key, item in entries:  # name the entry that JSON cannot hold
        try:
            json.dumps(item)
        except (TypeError, ValueError, RecursionError):
            shown = f"{what}'s {key!r}" if key else what
            raise ConfigError(
                f"cannot save the model: its {shown} is {type(item).__name__} {str(item)[:60]!r}, which a "
                f"weights file cannot hold (its metadata is JSON: strings, numbers, true/false, null, "
                f"lists and mappings of them); give a plain value"
            ) from None
    raise ConfigError(f"cannot save the model: its {what} cannot be written as JSON (mapping keys must be strings)")


def decode_metadata(meta: Mapping[str, str], *, where: Any = "weights file") -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`: ``{"name", "factory", "config", "extra"}``, as plain JSON
    data (never interpreted: ``${...}`` in a value stays a string)."""

    def parse(key: str) -> Any:  # nesting and numbers bounded (attnzoo.io.limits): a file from a stranger
        try:
            return load_json(meta[key], where, f"metadata {key!r}")
        except WeightsError as e:
            raise WeightsError(f"{e}; the file was not written by attnzoo or was edited") from None

    config = parse("attnzoo.config") if "attnzoo.config" in meta else None
    if config is not None and not isinstance(config, dict):
        raise WeightsError(f"{where}: metadata 'attnzoo.config' is not a mapping of config values")
    out: dict[str, Any] = {
        "name": meta.get("attnzoo.name"),
        "factory": meta.get("attnzoo.factory"),
        "config": config,
        "extra": {},
    }
    for key in meta:
        if key.startswith(_META_PREFIX):
            out["extra"][key[len(_META_PREFIX) :]] = parse(key)
    return out


def _header(data: bytes | bytearray, path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (a JSON object) and where its tensors' bytes start."""
    try:
        (length,) = struct.unpack("<Q", data[:8])
        if length > len(data) - 8:
            raise ValueError(f"header of {length} bytes in a file of {len(data)}")
        header = json.loads(bytes(data[8 : 8 + length]))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("__metadata__ is not a mapping of strings")
    except (struct.error, ValueError, UnicodeDecodeError, RecursionError) as e:
        raise WeightsError(f"{path}: not a safetensors file ({e}); attnzoo reads only .safetensors weights") from None
    return header, 8 + length


def _header_metadata(data: bytes | bytearray, path: Path) -> dict[str, str]:
    return dict(_header(data, path)[0].get("__metadata__") or {})


# safetensors' dtype names -> torch's (by name: this module does not import torch until it reads a file)
_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip


def _tensors_of(data: bytearray, path: Path) -> dict[str, Any]:
    """The tensors of the safetensors bytes ``data``, each a view of its bytes: nothing is copied, so a load
    holds the file's bytes once (what was hashed is what is loaded). The header is checked as safetensors
    checks it: known dtypes, shapes of non-negative ints, byte ranges that fit their shapes and tile the data
    in order, without a gap or an overlap. A tensor whose bytes are not aligned to its type is copied."""
    import math

    import torch

    header, start = _header(data, path)
    entries = [(name, entry) for name, entry in header.items() if name != "__metadata__"]
    try:
        entries.sort(key=lambda item: item[1]["data_offsets"][0])
        tensors, at = {}, 0
        for name, entry in entries:
            dtype = getattr(torch, _DTYPES.get(entry["dtype"], "?"), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{name!r} has dtype {str(entry['dtype'])[:20]!r}, which safetensors does not define")
            shape, (begin, end) = entry["shape"], entry["data_offsets"]
            if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in [*shape, begin, end]):
                raise ValueError(f"{name!r} has shape {shape} and data_offsets {[begin, end]}, not counts")
            size = math.prod(shape) * dtype.itemsize
            if begin != at or end - begin != size:
                raise ValueError(f"{name!r} spans bytes {begin}..{end}, but {size} bytes from byte {at} are its")
            at = end
            offset = start + begin
            if size == 0:
                tensors[name] = torch.empty(shape, dtype=dtype)
            elif offset % dtype.itemsize:  # not aligned to its type (an odd-sized bool tensor before it): copied
                tensors[name] = torch.frombuffer(data[offset : offset + size], dtype=dtype).view(shape)
            else:
                tensors[name] = torch.frombuffer(data, dtype=dtype, count=size // dtype.itemsize, offset=offset)
                tensors[name] = tensors[name].view(shape)
        if start + at != len(data):
            raise ValueError(f"its tensors end at byte {start + at} of {len(data)}")
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        reason = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
        raise WeightsError(f"{path}: cannot read it as safetensors ({reason})") from None
    return tensors


def _read_once(path: Path) -> bytearray:
    """The file's bytes, read into one buffer that the tensors will view (``bytes`` could not be viewed)."""
    data = bytearray(path.stat().st_size)
    with open(path, "rb") as f:
        read = f.readinto(data)
        if read != len(data) or f.read(1):  # the file changed under the reader
            raise WeightsError(f"{path}: changed while it was read; read it again")
    return data


def as_digests(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``sha256=`` as a tuple of lower-case hex digests: one, several, or none."""
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if isinstance(values, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in values):
        return tuple(v.lower() for v in values if v)
    raise ConfigError(
        f"sha256 must be a hex digest string (64 characters, as sha256sum prints it) or a list of them, "
        f"got {type(value).__name__}"
    )


def expected_digest(path: Path) -> tuple[str, ...]:
    """The digests recorded next to a file in ``FILE.sha256`` (one or more ``sha256sum`` lines). A saved
    folder's ``config.yaml`` records its weights' digest too: :func:`attnzoo.io.folders.recorded_digests`
    reads both."""
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        lines = [line.split() for line in sidecar.read_text(errors="replace").splitlines()]
        return tuple(parts[0].lower() for parts in lines if parts and _SHA256.fullmatch(parts[0].lower()))
    return ()


def read_weights(
    path: str | Path, *, sha256: str | Iterable[str] | None, what: str = "weights"
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read a safetensors file after checking its full sha256; returns ``(tensors, metadata)``.

    ``sha256`` is the expected digest (or several acceptable ones); None looks for one next to the file
    (see module docstring). A missing file, an unknown or wrong digest, or an unreadable file is a
    ``WeightsError``.
    """
    tensors, metadata, _ = read_verified(Path(path), as_digests(sha256), what)
    return tensors, metadata


def read_verified(path: Path, expected: tuple[str, ...], what: str) -> tuple[dict[str, Any], dict[str, str], str]:
    if not path.is_file():
        raise WeightsError(f"{what} file not found: looked for {path.resolve()}")
    if path.suffix != ".safetensors":
        raise WeightsError(f"{path.name}: attnzoo loads only .safetensors weights (no pickle); convert the file first")
    expected = expected or expected_digest(path)
    if not expected:
        raise WeightsError(
            f"{path}: no sha256 is known for this file, and attnzoo checks every load; pass sha256=..., or "
            f"write it next to the file: sha256sum {path.name} > {path.name}.sha256"
        )
    data = _read_once(path)
    actual = hashlib.sha256(data).hexdigest()
    if actual not in expected:
        raise WeightsError(
            f"{path}: sha256 mismatch, expected {' or '.join(expected)} but the file has {actual}; the file is "
            f"corrupted, truncated or not the one its card describes (nothing was loaded)"
            + _cache_advice(path, expected)
        )
    metadata = _header_metadata(data, path)
    return _tensors_of(data, path), metadata, actual


def _cache_advice(path: Path, expected: tuple[str, ...]) -> str:
    """For a file in attnzoo's download cache, how to get the right one back (it is never fetched again
    while a file is in its place)."""
    from attnzoo.io.sources import cache_home  # the cache is the sources' business; asked only here

    home = cache_home().resolve()
    if home not in (path.resolve(), *path.resolve().parents) and home not in (
        path.absolute(),
        *path.absolute().parents,
    ):
        return ""
    return (
        f"; it is attnzoo's cached copy and changed after it was fetched: `attnzoo cache clear {expected[0]}` "
        f"removes it, and the next load fetches it again"
    )


# -- writing ------------------------------------------------------------------------------------------------


def plain_tensors(tensors: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def write_weights(
    tensors: Mapping[str, Any],
    path: str | Path,
    *,
    metadata: Mapping[str, str] | None = None,
    overwrite: bool = False,
    sidecar: bool = True,
) -> str:
    """Write tensors to a safetensors file (plus ``FILE.sha256``) and return the file's sha256.

    Refuses to replace an existing file unless ``overwrite=True``. Tensors that share memory (tied
    weights) are written as separate copies, which safetensors requires. Whenever the writer is killed,
    the file and its sidecar agree: while a file is replaced, the sidecar lists both digests.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not overwrite:
        raise WeightsError(f"{path} already exists; pass overwrite=True (or --overwrite) to replace it")
    if path.suffix != ".safetensors":
        raise WeightsError(
            f"{path.name}: attnzoo writes weights as .safetensors files (and loads nothing else); name the "
            f"output NAME.safetensors"
        )
    plain = plain_tensors(tensors)
    side = path.with_name(path.name + ".sha256")
    if sidecar and side.exists() and not path.exists() and not overwrite:  # someone's own digest file
        raise WeightsError(
            f"{side} already exists (and {path.name} does not); it is not attnzoo's to replace: move it, or pass "
            f"overwrite=True (--overwrite)"
        )
    with locked(path.parent):
        tmp = stage(path, lambda t: save_file(plain, t, metadata=dict(metadata or {})))
        try:
            digest = sha256_file(tmp)
            old = expected_digest(path) if path.exists() else ()
            if sidecar and old:  # both digests while the file is replaced
                lines = "".join(f"{d}  {path.name}\n" for d in (digest, *old))
                atomic_write(side, lambda t: Path(t).write_text(lines))
        except BaseException:
            discard(tmp)
            raise
        commit(tmp, path)
        if sidecar:
            atomic_write(side, lambda t: Path(t).write_text(f"{digest}  {path.name}\n"))
    return digest
