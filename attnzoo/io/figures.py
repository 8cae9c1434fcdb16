"""Pictures written to files: matplotlib's pyplot on the Agg backend, which needs no display.

matplotlib is optional (the train and docs extras bring it); without it, or with one that fails to import,
drawing is a ``ConfigError`` that says which (:func:`attnzoo.errors.extra_import_message`).
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import ConfigError, extra_import_message

__all__ = ["pyplot"]


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed), or a ConfigError saying how to get it."""
    try:
        import matplotlib
    except Exception as e:
        raise ConfigError(extra_import_message("drawing needs matplotlib", "train", e, "matplotlib")) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
