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

__all__ = [
    "AttnzooError",
    "UnknownModelError",
    "UnknownConventionError",
    "ConfigError",
    "WeightsError",
    "PluginError",
    "DataError",
    "ExportError",
    "close_matches",
    "without_colour",
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


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``word`` (for "did you mean" messages), best first."""
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


_COLOUR_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def without_colour(text: str) -> str:
    """``text`` without terminal colour codes (torch colours parts of some of its messages): for a message
    that goes to a log, a pipe or a file."""
    return _COLOUR_CODES.sub("", text)
