"""One exception hierarchy for everything attnzoo raises on purpose.

Every message says what was expected, what was found, and what to do next. The subclasses also derive
from the built-in exception a caller would naturally catch (``KeyError`` for an unknown name,
``ValueError`` for a bad value), so ``except KeyError`` keeps working for code that does not know
attnzoo.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "AttnzooError",
    "UnknownModelError",
    "UnknownConventionError",
    "ConfigError",
    "WeightsError",
    "PluginError",
    "DataError",
    "ExportError",
    "UnsupportedKerasLayerError",
    "UsageError",
    "PropertyTimeout",
    "AttnzooWarning",
    "UnknownTokensWarning",
    "ThresholdWarning",
    "PluginWarning",
    "ReinitializedWarning",
    "StaleCacheWarning",
    "KerasWeightsWarning",
    "close_matches",
    "without_colour",
    "extra_import_message",
]


class AttnzooError(Exception):
    """Base class of every error attnzoo raises on purpose."""


class UnknownModelError(AttnzooError, KeyError):
    """A model name that is not registered (or a pretrained tag the model does not have)."""

    def __init__(self, message: str, *, name: str = "", suggestions: Iterable[str] = ()):
        super().__init__(message)
        self.name = name
        self.suggestions = list(suggestions)

    def __str__(self) -> str:  # KeyError would repr() the message, quotes and all
        return str(self.args[0]) if self.args else ""


class UnknownConventionError(AttnzooError, KeyError):
    """A calling convention that no one registered (a card's ``convention:``, ``get_convention(name)``)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ConfigError(AttnzooError, ValueError):
    """A configuration that cannot build the model: unknown key, missing value, wrong type, conflict."""


class WeightsError(AttnzooError):
    """A weights file that is missing, corrupted, of the wrong digest or does not fit the model."""


class PluginError(AttnzooError):
    """A plugin that failed to import or whose hook raised (raised only in strict plugin mode)."""


class DataError(ConfigError):
    """Data that cannot be used as it is: a data set not installed or not the pinned version, a file that
    is missing or changed since training, a row that cannot be read (the message names file, line and
    column)."""


class ExportError(AttnzooError):
    """A model that cannot be exported, or whose export does not reproduce it."""


class UnsupportedKerasLayerError(WeightsError):
    """Layers of a Keras model that no converter takes; ``layers`` lists them (name, class, shapes, why)."""

    def __init__(self, message: str, layers: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.layers = layers


class UsageError(AttnzooError):
    """A command line that does not parse or does not make sense; the ``attnzoo`` command exits 2 with it
    (a plugin's verb raises it for its own usage errors)."""


class PropertyTimeout(AttnzooError):
    """A conformance property that ran past its time limit (``ATTNZOO_CHECK_TIMEOUT``)."""


class AttnzooWarning(UserWarning):
    """Something worth knowing that did not stop attnzoo: a name collision, a skipped card."""


class UnknownTokensWarning(AttnzooWarning):
    """Most of a text's tokens are unknown to the model's vocabulary: its prediction says little."""


class ThresholdWarning(AttnzooWarning):
    """The multi-label decision threshold was tuned on too little validation data to be trusted."""


class PluginWarning(AttnzooWarning):
    """A plugin that failed or was skipped (outside strict mode), or whose command name another provider
    already registered."""


class ReinitializedWarning(AttnzooWarning):
    """Weights loaded into a model of another shape (a new head): the parameters whose shapes differ were
    initialised afresh, not loaded."""


class StaleCacheWarning(AttnzooWarning):
    """A Hub folder's config that could not be read afresh: the copy cached earlier is used."""


class KerasWeightsWarning(AttnzooWarning):
    """A Keras file's weights that Keras itself loads and runs, but that make the model's outputs NaN or
    infinite: a variable holding NaN or an infinity, a BatchNormalization moving variance below zero. The
    converted model computes what Keras computes; the warning names the layer."""


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``word`` (for "did you mean" messages), best first."""
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


_COLOUR_CODES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # CSI sequences: colours, bold, cursor moves


def without_colour(text: str) -> str:
    """``text`` without terminal colour codes (torch colours parts of some of its messages): for a message
    that goes to a log, a pipe or a file."""
    return _COLOUR_CODES.sub("", text)


def extra_import_message(what: str, extra: str, error: BaseException, *packages: str) -> str:
    """The message for an optional import that failed: ``what`` the caller needed, then why.

    Where one of ``packages`` is absent (or too old to have a name imported from it), the fix is the
    extra's pip command: ``"{what}: pip install 'attnzoo[{extra}]'"``. Where it is there but its import
    raised for another reason (a torchvision built for another torch, a dependency of its own missing),
    the pip command fixes nothing, so the message carries the underlying exception's type and first line
    and the module whose import raised it, found at the end of the chain of causes (transformers' lazy
    module wraps the real error in one of its own).
    """
    root = error
    while root.__cause__ is not None:  # explicit causes only: a __context__ may be the caller's own
        root = root.__cause__
    top = {p.partition(".")[0] for p in packages}
    name = (getattr(root, "name", None) or "").partition(".")[0]
    if isinstance(root, ImportError) and name in top:
        if isinstance(root, ModuleNotFoundError):
            return f"{what}: pip install 'attnzoo[{extra}]'"
        return f"{what} ({_first_line(root)}): pip install 'attnzoo[{extra}]'"
    raiser = _importing(root)
    return (
        f"{what}, which is installed but failed to import: {type(root).__name__}: {_first_line(root)} "
        f'(raised while importing {raiser}); `python -c "import {raiser.partition(".")[0]}"` shows the '
        f"whole error (pip install 'attnzoo[{extra}]' does not fix it)"
    )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0].strip() if lines else "(no message)"


def _importing(error: BaseException) -> str:
    """The module whose top-level code was running when ``error`` was raised: the innermost ``<module>``
    frame of its traceback (else the innermost frame's module)."""
    tb, found, last = error.__traceback__, "", ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        last = module or last
        if tb.tb_frame.f_code.co_name == "<module>" and module:
            found = module
        tb = tb.tb_next
    return found or last or type(error).__module__
