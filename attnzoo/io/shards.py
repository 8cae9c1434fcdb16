"""Safetensors weights written shard by shard, as Hugging Face's folders hold them.

:func:`write_shards` takes ``(name, tensor)`` pairs one at a time (a generator that computes each tensor
when asked) and writes them into ``model.safetensors``, or, when they add up to more than
``max_shard_size`` bytes, into ``model-00001-of-0000N.safetensors`` ... with ``model.safetensors.index.json``
(``{"metadata": {"total_size": bytes}, "weight_map": {name: file}}``), the layout transformers'
``save_pretrained`` writes and ``from_pretrained`` reads. At most one shard's tensors are held at once:
a shard is written and let go before the next one is filled, so a model is never held twice in memory. A
tensor larger than ``max_shard_size`` gets a shard of its own (it cannot be split). Sizes are in bytes: an
int, or a string such as ``"5GB"`` (10⁹), ``"500MB"`` or ``"2GiB"`` (2³⁰), :func:`parse_size`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError
from attnzoo.io.atomic import ordinary

__all__ = ["parse_size", "write_shards", "SAFE_WEIGHTS", "SAFE_INDEX"]

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_size(value: Any, what: str = "max_shard_size") -> int:
    """Bytes from an int, or a string of a number and a unit (``"5GB"``, ``"200MiB"``, ``"1000"``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{what} must be at least 1 byte, got {value}")
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(f"{what} must be a number of bytes or a size such as '5GB' or '500MiB', got {value!r}")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise ConfigError(f"{what} must be at least 1 byte, got {value!r}")
    return size


def _as_written(name: Any, tensor: Any, dtype: Any, seen: set[str]) -> Any:
    """The tensor as it is written: detached, on the CPU, in ``dtype`` (floats only), contiguous. A parameter
    already in that form is written as it is, not copied."""
    import torch

    if not isinstance(name, str) or not name:
        raise ConfigError(f"a weight's name must be a non-empty str, got {name!r}")
    if name in seen:
        raise ConfigError(f"the weight {name!r} is written twice")
    if not isinstance(tensor, torch.Tensor):
        raise ConfigError(f"the weight {name!r} is a {type(tensor).__name__}, not a tensor")
    seen.add(name)
    plain = tensor.detach().to("cpu")
    if dtype is not None and plain.is_floating_point():
        plain = plain.to(dtype)
    return plain.contiguous()


def _alone(plain: Any, storages: set[int]) -> Any:
    """``plain``, or a copy of it where it shares memory with a tensor of the shard or is a view of a larger
    tensor: safetensors refuses two tensors of one file that share memory."""
    storage = plain.untyped_storage()
    if storage.nbytes() != plain.numel() * plain.element_size() or storage.data_ptr() in storages:
        return plain.clone()
    return plain


def write_shards(
    tensors: Iterable[tuple[str, Any]], directory: str | Path, *, max_shard_size: int | str, dtype: Any = None
) -> list[str]:
    """Write the ``(name, tensor)`` pairs into ``directory`` (an existing folder) as one safetensors file or
    as shards with their index (the module docstring); floating tensors are cast to ``dtype`` where given.
    Returns the names of the files written, the index last."""
    from safetensors.torch import save_file

    directory, limit = Path(directory), parse_size(max_shard_size)
    parts: list[tuple[str, list[str], int]] = []  # (the part's temporary name, its tensors, its bytes)
    shard: dict[str, Any] = {}
    size, seen, storages = 0, set[str](), set[int]()

    def flush() -> None:
        nonlocal shard, size
        if shard:
            part = f".part-{len(parts) + 1:05d}.safetensors"
            save_file(shard, str(directory / part), metadata={"format": "pt"})
            ordinary(directory / part)  # safetensors makes its files private
            parts.append((part, list(shard), size))
            shard, size = {}, 0  # let go of this shard's tensors before the next is filled
            storages.clear()

    for name, tensor in tensors:
        plain = _as_written(name, tensor, dtype, seen)
        nbytes = plain.numel() * plain.element_size()
        if shard and size + nbytes > limit:
            flush()
        plain = _alone(plain, storages)
        shard[name], size = plain, size + nbytes
        storages.add(plain.untyped_storage().data_ptr())
        del plain
    flush()
    if not parts:
        raise ConfigError("no weights to write")
    if len(parts) == 1:
        (directory / parts[0][0]).rename(directory / SAFE_WEIGHTS)
        return [SAFE_WEIGHTS]
    written: list[str] = []
    weight_map: dict[str, str] = {}
    for number, (part, names, _) in enumerate(parts, start=1):
        final = f"model-{number:05d}-of-{len(parts):05d}.safetensors"
        (directory / part).rename(directory / final)
        written.append(final)
        weight_map |= dict.fromkeys(names, final)
    index = {"metadata": {"total_size": sum(p[2] for p in parts)}, "weight_map": dict(sorted(weight_map.items()))}
    (directory / SAFE_INDEX).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return [*written, SAFE_INDEX]
