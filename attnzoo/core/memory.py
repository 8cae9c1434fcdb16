"""Whether a model's parameters fit in this machine's memory, checked before anything is allocated."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from attnzoo.errors import ConfigError

__all__ = ["check_memory", "available_bytes"]


def available_bytes() -> int | None:
    """Memory this machine can still give (Linux MemAvailable; elsewhere free physical pages), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_memory(model: Any, name: str, kwargs: Mapping[str, Any], dtype: Any) -> None:
    """Refuse, before anything is allocated, a model whose parameters cannot fit in this machine's memory."""
    from torch.nn.parameter import is_lazy

    named = [
        *getattr(model, "named_parameters", lambda: [])(),
        *getattr(model, "named_buffers", lambda: [])(),
    ]
    sized = {key: t.numel() * (dtype or t.dtype).itemsize for key, t in named if not is_lazy(t)}
    need = sum(sized.values())
    available = available_bytes()
    if available is not None and need > available:
        sizes = ", ".join(f"{k}={v}" for k, v in kwargs.items() if isinstance(v, int) and not isinstance(v, bool))
        largest = max(sized, key=lambda k: sized[k])  # the tensor (and so the layer) that asks the most
        raise ConfigError(
            f"{name}{f' with {sizes}' if sizes else ''} needs {_gib(need)} for its parameters, more than the "
            f"{_gib(available)} this machine has available (the largest, {largest[:120]}, "
            f"{_gib(sized[largest])}); choose smaller sizes"
        )
