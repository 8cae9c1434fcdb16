"""Where the built-in model cards and weight files live.

In a built wheel they are copied into the package as ``attnzoo/_registry`` and ``attnzoo/_weights``
(see ``pyproject.toml``); in an editable install or a source checkout they are the repository's
top-level ``registry/`` and ``weights/``. ``ATTNZOO_REGISTRY_DIR`` / ``ATTNZOO_WEIGHTS_DIR`` point
elsewhere (tests use them for broken cards).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cards_dir", "weights_dir"]

_PACKAGE = Path(__file__).resolve().parent.parent  # attnzoo/


def _locate(env: str, packaged: str, checkout: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    inside = _PACKAGE / packaged
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / checkout


def cards_dir() -> Path:
    """The folder of built-in ``*.yaml`` model cards."""
    return _locate("ATTNZOO_REGISTRY_DIR", "_registry", "registry")


def weights_dir() -> Path:
    """The folder of built-in ``*.safetensors`` weight files."""
    return _locate("ATTNZOO_WEIGHTS_DIR", "_weights", "weights")
