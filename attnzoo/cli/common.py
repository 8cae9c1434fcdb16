"""What every verb of the ``attnzoo`` command shares: exit codes, the usage error, tables and JSON on
stdout, one-line messages, argument types and the one parser of ``key=value`` overrides."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnzoo.errors import AttnzooError, UsageError, without_colour
from attnzoo.io.text import printable

USAGE_ERROR = 2
FAILURE = 1


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, wrap: Sequence[int] = (-1,)) -> None:
    """Print rows under headers in aligned columns that fit the terminal: the ``wrap`` columns (default
    the last) go on several lines rather than cutting a word (see :func:`attnzoo.io.tables.columns`)."""
    from attnzoo.io.tables import columns

    print("\n".join(columns(headers, rows, width=terminal_width(), wrap=wrap)))


def print_fields(fields: Sequence[tuple[str, Any]], *, indent: int = 2) -> None:
    """``name  value`` lines, the values aligned after the longest name and wrapped to the terminal, each
    continuation under its value (``attnzoo info``'s card fields)."""
    from attnzoo.io.tables import columns

    for line in columns(None, fields, width=terminal_width() - indent):
        print(" " * indent + line)


def say(text: object, **print_args: Any) -> None:
    """Print ``text`` line by line through :func:`~attnzoo.io.text.printable`: what a verb prints that holds
    a name from a file (a label, a layer, a checkpoint's key, a model's repr) is shown, never sent, whatever
    terminal escapes it carries; its line breaks stay line breaks."""
    print("\n".join(printable(line) for line in str(text).split("\n")), **print_args)


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def metrics_text(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {value}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def config_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs as a config dict (values parsed as YAML); a malformed pair is a usage error."""
    from attnzoo.core.config import parse_overrides

    try:
        return parse_overrides(list(pairs))
    except AttnzooError as e:
        raise UsageError(str(e)) from None


MAX_MESSAGE = 600  # characters of one error line; the rest is behind --debug


def one_line(message: object, limit: int = MAX_MESSAGE) -> str:
    """A message as one line of at most ``limit`` characters (listings joined with '; '), for a terminal:
    without colour codes (Keras wraps its errors in ANSI bold, torch colours parts of its own, which a pipe
    or a log shows as junk), and every other control character escaped (:func:`attnzoo.io.text.printable`:
    a name from a file or a plugin may hold escapes that retitle or clear the terminal)."""
    lines = [" ".join(line.split()) for line in without_colour(str(message)).splitlines()]
    text = printable("; ".join(line for line in lines if line))
    if len(text) > limit:
        text = text[: limit - 45].rstrip() + " … (run again with --debug for all of it)"
    return text


@dataclass
class Variants:
    """What ``bench`` and ``check`` were told to run: the names (or patterns, or folders) in order, the
    settings shared by all (``key=value``) and each one's own (``NAME:key=value``, or a YAML file)."""

    names: list[str]
    shared: dict[str, Any]
    own: dict[str, dict[str, Any]]

    def config(self, name: str, given_as: str | None = None) -> dict[str, Any]:
        """The settings of ``name`` (matched against its own settings' names and patterns, and against
        ``given_as``, the pattern it came from): the shared ones, then its own on top."""
        from fnmatch import fnmatchcase

        from attnzoo.core.config import merge_config

        mine = [cfg for key, cfg in self.own.items() if fnmatchcase(name, key) or key == given_as]
        return merge_config(self.shared, *mine)


def parse_variants(tokens: Sequence[str], *, everything: bool = False) -> Variants:
    """``NAME``, ``key=value`` (every variant), ``NAME:key=value`` (that variant only; a provider-qualified
    name keeps its colon: ``my_plugin:layer:key=value``) and ``FILE.yaml`` (``NAME: {key: value, ...}``
    per variant) -> :class:`Variants`. A setting for a variant that is not named is a usage error, unless
    no name means every variant (``everything``: ``attnzoo check``) and none is named."""
    names: list[str] = []
    shared: list[str] = []
    own: dict[str, list[str]] = {}
    from_files: dict[str, dict[str, Any]] = {}
    for token in tokens:
        key, equals, value = token.partition("=")
        if equals and ":" in key:
            variant, _, key = key.rpartition(":")
            own.setdefault(variant, []).append(f"{key}={value}")
        elif equals:
            shared.append(token)
        elif token.endswith((".yaml", ".yml")) and not _is_folder(token):
            for name, settings in _variants_file(token).items():
                names += [name] if name not in names else []
                from_files[name] = {**from_files.get(name, {}), **settings}
        else:
            names.append(token)
    unknown = [v for v in own if not any(_matches(n, v) for n in names)]
    if unknown and not (everything and not names):
        raise UsageError(
            f"{unknown[0]}:... sets a key for {unknown[0]!r}, which is not among the variants named "
            f"({', '.join(names) or 'none'}); name it too, e.g. `{unknown[0]} {unknown[0]}:key=value`"
        )
    mine = {name: {**from_files.get(name, {}), **config_overrides(pairs)} for name, pairs in own.items()}
    for name, settings in from_files.items():
        mine.setdefault(name, settings)
    return Variants(names, config_overrides(shared), mine)


def _is_folder(token: str) -> bool:
    from pathlib import Path

    return Path(token).is_dir()


def _matches(name: str, variant: str) -> bool:
    from fnmatch import fnmatchcase

    return name == variant or fnmatchcase(name, variant) or fnmatchcase(variant, name)


def _variants_file(path: str) -> dict[str, dict[str, Any]]:
    """A YAML file of variants: ``NAME: {key: value, ...}`` (or ``NAME:`` alone, for the card's settings)."""
    from pathlib import Path

    from attnzoo.core.config import user_config

    if not Path(path).is_file():
        raise UsageError(f"{path}: no such file (a YAML file of variants: `NAME: {{key: value, ...}}` per variant)")
    try:
        data = user_config(path)
    except AttnzooError as e:
        raise UsageError(f"{e} (a YAML file of variants: `NAME: {{key: value, ...}}` per variant)") from None
    for name, settings in data.items():
        if settings is not None and not isinstance(settings, dict):
            raise UsageError(
                f"{path}: {name!r} should map to its settings ({{key: value, ...}}), got {type(settings).__name__}"
            )
    return {name: dict(settings or {}) for name, settings in data.items()}
