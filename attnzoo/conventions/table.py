"""The table of conventions: the built-in ones and those plugins add through the
``attnzoo_register_conventions(register)`` hook or :func:`register_convention`; :func:`get_convention` finds
both, and :func:`sample_inputs` builds a model's inputs under its convention."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch

from attnzoo.conventions.base import Convention, Sample
from attnzoo.conventions.builtin import BUILTIN
from attnzoo.core import registry
from attnzoo.core.tables import PluginTable
from attnzoo.errors import UnknownConventionError

__all__ = ["CONVENTIONS", "get_convention", "register_convention", "convention_names", "model_config", "sample_inputs"]

CONVENTIONS: dict[str, Convention] = {c.name: c for c in BUILTIN}
HOOK = "attnzoo_register_conventions"


def _check(name: str, convention: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a convention's name is a non-empty string, got {name!r}")


def register_convention(name: str, convention: Convention | str, *, override: bool = False) -> None:
    """Add a convention (a :class:`Convention` or ``"module:attr"`` naming one) in this process; plugins
    add theirs through the ``attnzoo_register_conventions(register)`` hook. One table holds the built-in,
    the plugins' and these, under one policy (attnzoo/core/tables.py): a name already held is kept, with a
    warning, unless ``override=True``."""
    _check(name, convention)
    registry.REGISTRY.add_item(HOOK, name, convention, override=override)


def _table() -> PluginTable[Any]:
    """The built-in conventions, then the plugins', then this process's (collected on first use)."""
    return registry.REGISTRY.collected(HOOK, what="calling convention", builtins=CONVENTIONS, check=_check)


def _resolve(value: Convention | str | type) -> Convention:
    if isinstance(value, str):
        module, _, attr = value.partition(":")
        value = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    if isinstance(value, type):
        value = value()
    if not isinstance(value, Convention):
        raise TypeError(f"a convention must be an attnzoo.testing.Convention, got {type(value).__name__}")
    return value


def convention_names() -> list[str]:
    return sorted(_table())


def get_convention(name: str) -> Convention:
    """The convention called ``name``: built in, or added by a plugin or in this process."""
    table = _table()
    if name in table:
        return _resolve(table[name])
    known = ", ".join(convention_names())
    raise UnknownConventionError(f"unknown calling convention {name!r}; known: {known}")


def model_config(model: Any) -> dict[str, Any]:
    """The config a model was built with (``attnzoo.create`` records it), or {}."""
    info = getattr(model, "attnzoo_config", None)
    return dict(info.get("config") or {}) if isinstance(info, Mapping) else {}


def _model_dtype_device(model: Any) -> tuple[torch.dtype | None, Any]:
    for tensor in [*getattr(model, "parameters", lambda: [])(), *getattr(model, "buffers", lambda: [])()]:
        if tensor.is_floating_point():
            return tensor.dtype, tensor.device
    return None, None


def sample_inputs(
    model: Any, convention: str | Convention, *, config: Mapping[str, Any] | None = None, **kwargs: Any
) -> Sample:
    """Inputs for ``model`` under its convention, in its dtype and on its device (see :meth:`Convention.sample`)."""
    conv = get_convention(convention) if isinstance(convention, str) else convention
    dtype, device = _model_dtype_device(model)
    kwargs.setdefault("dtype", dtype)
    kwargs.setdefault("device", device)
    config = dict(model_config(model) if config is None else config)
    sizer = getattr(model, "size", None)  # a lazy layer that has seen a batch knows its sizes now
    if callable(sizer):
        for key, value in list(config.items()):
            if value is None:
                try:
                    known = sizer(key)
                except Exception:  # noqa: BLE001 - a model's own size() may not know every key
                    known = None
                if isinstance(known, int) and not isinstance(known, bool):
                    config[key] = known
    return conv.for_config(config).sample(config, **kwargs)
