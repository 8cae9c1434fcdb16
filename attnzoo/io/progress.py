"""Progress bars for work that takes seconds (reading a model's weights, checking it against Keras, checking an
export, downloading): a tqdm bar on stderr where stderr is a terminal, and nothing otherwise.

Nothing is drawn when stderr is not a terminal (a log, a pipe, CI), under :func:`silenced` (the command
line's ``--quiet``), or where tqdm is not installed (it comes with the ``hub`` and ``train`` extras; without
it the work runs as it does with a bar, unannounced). :func:`bar` returns an object with ``update(n)`` and
``close()`` either way, so callers never branch on it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["bar", "silenced", "showing"]

_SILENT: ContextVar[bool] = ContextVar("attnzoo_progress_silent", default=False)


class _NoBar:
    """What :func:`bar` gives where nothing is drawn."""

    def update(self, n: float = 1) -> None:
        pass

    def set_description_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def silenced(silent: bool = True) -> Iterator[None]:
    """No bar inside this block (``--quiet``); ``silent=False`` leaves things as they are."""
    token = _SILENT.set(_SILENT.get() or silent)
    try:
        yield
    finally:
        _SILENT.reset(token)


def showing() -> bool:
    """Whether a bar would be drawn now: stderr a terminal and not :func:`silenced`."""
    stream = sys.stderr
    return not _SILENT.get() and stream is not None and hasattr(stream, "isatty") and stream.isatty()


def bar(total: float | None, description: str, *, unit: str = "it", initial: float = 0, **options: Any) -> Any:
    """A tqdm bar of ``total`` steps (None: unknown) on stderr, cleared when it closes; a no-op bar where
    none is shown (see the module's docstring). ``options`` go to tqdm (``unit_scale=True`` for bytes)."""
    if not showing():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # the hub / train extras bring it; without it the work goes unannounced
        return _NoBar()
    # a terminal that reports no size (a pty nobody sized, as `script` or a test opens) would get a bar of
    # 0 columns and 0 rows, which tqdm draws as nothing: 80 x 24 there, the terminal's own size (followed)
    # otherwise
    sized = _width(sys.stderr) > 0
    return tqdm(
        total=total,
        initial=initial,
        desc=description,
        unit=unit,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=sized,
        ncols=None if sized else 80,
        nrows=None if sized else 24,
        **options,
    )


def _width(stream: Any) -> int:
    """The columns of the terminal ``stream`` writes to; 0 where it reports none."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0
