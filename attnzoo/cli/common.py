"""What every verb of the ``attnzoo`` command shares: exit codes, the usage error, tables and JSON on
stdout, one-line messages, argument types and the one parser of ``key=value`` overrides."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from attnzoo.errors import AttnzooError, without_colour

USAGE_ERROR = 2
FAILURE = 1


class UsageError(Exception):
    """A command line that cannot be run as written (exit status 2)."""


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, stretch: int = -1) -> None:
    """Print rows under headers in aligned columns; the ``stretch`` column is cut to fit the terminal."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    stretch %= len(headers)
    fixed = sum(w + 2 for i, w in enumerate(widths) if i != stretch)
    widths[stretch] = max(len(headers[stretch]), min(widths[stretch], terminal_width() - fixed - 1))

    def line(values: Sequence[str]) -> str:
        parts = []
        for i, v in enumerate(values):
            if len(v) > widths[i]:
                v = v[: max(widths[i] - 1, 0)] + "…"
            parts.append(v.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    print(line(headers))
    for row in cells:
        print(line(row))


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


def config_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs as a config dict (values parsed as YAML); a malformed pair is a usage error."""
    from attnzoo.core.config import parse_overrides

    try:
        return parse_overrides(list(pairs))
    except AttnzooError as e:
        raise UsageError(str(e)) from None


MAX_MESSAGE = 600  # characters of one error line; the rest is behind --debug


def one_line(message: object, limit: int = MAX_MESSAGE) -> str:
    """A message as one line of at most ``limit`` characters (listings joined with '; '), without terminal
    colour codes when standard error is not a terminal (a log, a pipe)."""
    text = str(message)
    if not (sys.stderr is not None and sys.stderr.isatty()):
        text = without_colour(text)
    lines = [" ".join(line.split()) for line in text.splitlines()]
    text = "; ".join(line for line in lines if line)
    if len(text) > limit:
        text = text[: limit - 45].rstrip() + " … (run again with --debug for all of it)"
    return text
