"""Weights on disk: safetensors only, every file's sha256 checked on every load, nothing overwritten.

A weights file carries what is needed to rebuild its model in the safetensors metadata (string keys):
``attnzoo.name``, ``attnzoo.factory``, ``attnzoo.config`` (JSON) and any extra JSON entries such as a
vocabulary or label names under ``attnzoo.meta.<key>``. A saved model folder holds ``model.safetensors``
and ``config.yaml`` (name, factory, config, and the file's sha256).

A file's expected digest comes from its model card, its folder's ``config.yaml``, a ``FILE.sha256``
file next to it (``sha256sum`` format), or the caller; a file whose digest is unknown is refused.
Files are read once: the bytes are hashed and then deserialised from memory, so what is verified is
exactly what is loaded. Nothing here knows any particular layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import WeightsError

__all__ = [
    "sha256_file",
    "read_weights",
    "write_weights",
    "expected_digest",
    "save",
    "read_folder",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "encode_metadata",
    "decode_metadata",
]

CONFIG_FILE = "config.yaml"
WEIGHTS_FILE = "model.safetensors"
_META_PREFIX = "attnzoo.meta."


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encode_metadata(name: str, factory: str, config: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Safetensors metadata (str -> str) that lets ``attnzoo.load(file)`` rebuild the model."""
    meta = {
        "format": "pt",
        "attnzoo.version": "1",
        "attnzoo.name": name,
        "attnzoo.factory": factory,
        "attnzoo.config": json.dumps(dict(config), sort_keys=True),
    }
    for key, value in (extra or {}).items():
        meta[_META_PREFIX + key] = json.dumps(value)
    return meta


def decode_metadata(meta: Mapping[str, str]) -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`: ``{"name", "factory", "config", "extra"}``."""
    out: dict[str, Any] = {
        "name": meta.get("attnzoo.name"),
        "factory": meta.get("attnzoo.factory"),
        "config": json.loads(meta["attnzoo.config"]) if "attnzoo.config" in meta else None,
        "extra": {},
    }
    for key, value in meta.items():
        if key.startswith(_META_PREFIX):
            out["extra"][key[len(_META_PREFIX):]] = json.loads(value)
    return out


def _header_metadata(data: bytes, path: Path) -> dict[str, str]:
    try:
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise WeightsError(f"{path}: not a safetensors file ({e}); attnzoo reads only .safetensors weights") from None
    return dict(header.get("__metadata__") or {})


def expected_digest(path: Path) -> str | None:
    """The digest recorded next to a file: ``FILE.sha256`` or its folder's ``config.yaml``."""
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        text = sidecar.read_text().split()
        return text[0].lower() if text else None
    folder_config = path.parent / CONFIG_FILE
    if path.name == WEIGHTS_FILE and folder_config.is_file():
        return read_folder(path.parent).get("sha256")
    return None


def read_weights(path: str | Path, *, sha256: str | None, what: str = "weights") -> tuple[dict[str, Any], dict[str, str]]:
    """Read a safetensors file after checking its full sha256; returns ``(tensors, metadata)``.

    ``sha256`` is the expected digest; None looks for one next to the file (see module docstring).
    A missing file, an unknown or wrong digest, or an unreadable file is a ``WeightsError``.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load as load_bytes

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{what} file not found: looked for {path.resolve()}")
    if path.suffix != ".safetensors":
        raise WeightsError(f"{path.name}: attnzoo loads only .safetensors weights (no pickle); convert the file first")
    expected = sha256 or expected_digest(path)
    if expected is None:
        raise WeightsError(
            f"{path}: no sha256 is known for this file, and attnzoo checks every load; pass sha256=..., or "
            f"write it next to the file: sha256sum {path.name} > {path.name}.sha256"
        )
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected.lower():
        raise WeightsError(
            f"{path}: sha256 mismatch, expected {expected.lower()} but the file has {actual}; the file is "
            f"corrupted, truncated or not the one its card describes (nothing was loaded)"
        )
    metadata = _header_metadata(data, path)
    try:
        tensors = load_bytes(data)
    except SafetensorError as e:
        raise WeightsError(f"{path}: cannot read it as safetensors ({e})") from None
    return tensors, metadata


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: no half-written file survives."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a saved model is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    weights) are written as separate copies, which safetensors requires.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not overwrite:
        raise WeightsError(f"{path} already exists; pass overwrite=True (or --overwrite) to replace it")
    plain = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    _atomic_write(path, lambda tmp: save_file(plain, tmp, metadata=dict(metadata or {})))
    digest = sha256_file(path)
    if sidecar:
        side = path.with_name(path.name + ".sha256")
        _atomic_write(side, lambda tmp: Path(tmp).write_text(f"{digest}  {path.name}\n"))
    return digest


def read_folder(directory: str | Path) -> dict[str, Any]:
    """The ``config.yaml`` of a saved model folder as a plain dict."""
    import yaml

    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise WeightsError(f"{directory} is not a saved attnzoo model: {CONFIG_FILE} not found in it")
    data = yaml.safe_load(config_path.read_text())
    if not isinstance(data, dict) or "name" not in data:
        raise WeightsError(f"{config_path}: expected name, factory, config and sha256")
    return data


def save(model: Any, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Save a model built by ``attnzoo.create`` (or ``attnzoo.load``) to a folder.

    The folder gets ``model.safetensors`` (config and provenance in its metadata) and ``config.yaml``.
    An existing, non-empty folder is refused unless ``overwrite=True``: nothing a user saved is replaced
    without being asked. A model whose lazy sizes are not yet known (no forward yet, no sizes given)
    cannot be saved, because its parameters do not exist yet.
    """
    import yaml

    info = getattr(model, "attnzoo_config", None)
    if not isinstance(info, Mapping) or "name" not in info:
        raise WeightsError(
            "save() needs a model built by attnzoo.create() or attnzoo.load(): it records the name and config "
            "that rebuild it; register your own module with attnzoo.register() and create it from there"
        )
    from torch.nn.parameter import is_lazy

    state = model.state_dict()
    lazy = [k for k, v in state.items() if is_lazy(v)]
    if lazy:
        raise WeightsError(
            f"cannot save {info['name']!r} yet: {', '.join(lazy[:3])} have no size until the first forward; "
            "run one batch through it first or create it with its sizes given"
        )
    meta_tensors = [k for k, v in state.items() if v.device.type == "meta"]
    if meta_tensors:
        raise WeightsError(f"cannot save {info['name']!r}: {', '.join(meta_tensors[:3])} are on the meta device (no data)")
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())) and not overwrite:
        raise WeightsError(f"{directory} already exists and is not empty; pass overwrite=True to replace its model")
    extra = dict(getattr(model, "attnzoo_metadata", None) or {})
    metadata = encode_metadata(info["name"], info["factory"], info["config"], extra)
    digest = write_weights(state, directory / WEIGHTS_FILE, metadata=metadata, overwrite=True, sidecar=False)
    record = {"name": info["name"], "factory": info["factory"], "config": dict(info["config"]), "sha256": digest}
    _atomic_write(directory / CONFIG_FILE, lambda tmp: Path(tmp).write_text(yaml.safe_dump(record, sort_keys=False)))
    return directory
