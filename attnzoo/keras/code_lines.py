"""Statements the source writer made, laid out in lines of at most 88 characters as ``ruff format`` lays them.

A statement that fits stays one line. One that does not is split at its last bracket pair (a call's
parentheses, a list, dict or parenthesised tuple that ends the statement): the text up to and with the
opening bracket on the first line, each element on a line of its own one indent deeper with a trailing
comma, the closing bracket on the last line; an element still too long is split the same way (where no
bracket's first line fits, the value goes in parentheses of its own, on a line between them)::

    self.layers["bidirectional"] = Bidirectional(
        forward_layer=KerasLSTM(units=4, input_size=8),
        merge_mode="concat",
    )

This is ruff's (and black's) right-hand split, and the trailing comma is its "magic trailing comma": ruff
keeps such a split whatever line length it is run with, so the written module passes ``ruff format
--check`` under ruff's defaults (88) and under a project's longer lines alike. A statement with no bracket
to split at (a long string) is left as it is. Positions come from :mod:`ast`, so a bracket or comma inside
a string never splits anything.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator
from typing import Any

__all__ = ["WIDTH", "layout", "source_segment"]

WIDTH = 88  # ruff format's default line length
_INDENT = "    "


def layout(statement: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """The lines of one statement (``target = value``, ``return value``, a bare call, a comment) at
    ``indent``, each at most ``width`` characters where the statement can be split."""
    if len(indent) + len(statement) <= width or statement.lstrip().startswith("#"):
        return [indent + statement]
    tree = ast.parse(statement).body[0]
    value = getattr(tree, "value", None)
    if value is None:
        return [indent + statement]
    start = _offset(statement, value.lineno, value.col_offset)
    lines = _split(statement[:start], statement[start:], "", indent, width)
    inner = indent + _INDENT + statement[start:]
    if len(lines) == 1 and start and len(inner) <= width:  # no bracket's first line fits: ruff's parentheses
        return [indent + statement[:start] + "(", inner, indent + ")"]
    return lines


def _split(prefix: str, expression: str, suffix: str, indent: str, width: int) -> list[str]:
    """``prefix + expression + suffix`` at ``indent``, split at the last bracket pair of ``expression`` whose
    first line fits (ruff's right-hand split, which passes over a trailing ``.movedim(1, -1)`` whose opening
    line would still be too long)."""
    whole = indent + prefix + expression + suffix
    if len(whole) <= width:
        return [whole]
    for opening, closing, elements in _bracket_pairs(expression, ast.parse(expression, mode="eval").body):
        if len(indent + prefix) + opening + 1 > width:
            continue
        inner = indent + _INDENT
        lines = [indent + prefix + expression[: opening + 1]]
        for element_prefix, element in elements:
            lines.extend(_split(element_prefix, element, ",", inner, width))
        return [*lines, indent + expression[closing:] + suffix]
    return [whole]  # nothing to split at (a long string): left as it is, as ruff leaves it


def _bracket_pairs(text: str, node: ast.expr) -> Iterator[tuple[int, int, list[tuple[str, str]]]]:
    """The bracket pairs ``text`` may be split at, last first: where each opens and closes, and its elements
    as (prefix, expression) texts (``key=`` or ``**`` before a call's argument, ``key: `` before a dict's
    value). They are the pairs on the path from the end of ``text`` inwards through calls and attributes,
    ``f(x).g(y)``'s ``(y)`` then ``(x)``; empty pairs are passed over, and a subscript is never split (a
    trailing comma there would make its index a tuple)."""
    node = _rightmost(node)
    if _end(text, node) != len(text):
        return

    def segment(part: ast.AST) -> str:
        return text[_start(text, part) : _end(text, part)]

    while True:
        if isinstance(node, ast.Call):
            parts = []
            for a in node.args:
                starred = isinstance(a, ast.Starred)
                parts.append((_start(text, a), "*" if starred else "", segment(a.value if starred else a)))  # type: ignore[attr-defined]
            for keyword in node.keywords:
                head = "**" if keyword.arg is None else f"{keyword.arg}="
                parts.append((_start(text, keyword), head, segment(keyword.value)))
            if parts:
                yield _end(text, node.func), _end(text, node) - 1, [(head, part) for _, head, part in sorted(parts)]
            node = node.func
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, (ast.List, ast.Set)) or (isinstance(node, ast.Tuple) and len(node.elts) > 1):
            opening = _start(text, node)  # an unparenthesised tuple starts at its first element, never split
            if node.elts and text[opening] in "([{":
                yield opening, _end(text, node) - 1, [("", segment(e)) for e in node.elts]
            return
        elif isinstance(node, ast.Dict):
            elements = []
            for key, item in zip(node.keys, node.values, strict=True):
                elements.append(("**", segment(item)) if key is None else (segment(key) + ": ", segment(item)))
            if elements:
                yield _start(text, node), _end(text, node) - 1, elements
            return
        else:
            return


def _rightmost(node: ast.expr) -> ast.expr:
    """The operand an operator expression ends with (``x * y.to(z)`` ends with ``y.to(z)``)."""
    while True:
        if isinstance(node, ast.BinOp):
            node = node.right
        elif isinstance(node, ast.UnaryOp):
            node = node.operand
        elif isinstance(node, ast.Compare):
            node = node.comparators[-1]
        elif isinstance(node, ast.BoolOp):
            node = node.values[-1]
        else:
            return node


def _offset(text: str, line: int, column: int) -> int:
    """A character offset into ``text`` from ast's line (1-based) and UTF-8 byte column, in time independent
    of ``text``'s length: a statement holding a 2-million-word vocabulary asks this for each word."""
    starts, lines = _line_index(text)
    return starts[line - 1] + _characters(lines[line - 1], column)


@functools.lru_cache(maxsize=8)
def _line_index(text: str) -> tuple[list[int], list[str]]:
    """Where each line of ``text`` starts (character offsets) and the lines, computed once per text."""
    lines = text.split("\n")
    return list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0)), lines


@functools.lru_cache(maxsize=8)
def _character_starts(line: str) -> Any:
    """The UTF-8 byte offset of each character of a line that is not ASCII (numpy: one pass, not a loop)."""
    import numpy as np

    data = np.frombuffer(line.encode(), dtype=np.uint8)
    return np.flatnonzero((data & 0xC0) != 0x80)  # a continuation byte is 10xxxxxx


def _characters(line: str, column: int) -> int:
    """How many characters of ``line`` its first ``column`` UTF-8 bytes hold."""
    if line.isascii():
        return column
    return int(_character_starts(line).searchsorted(column))


def source_segment(text: str, node: ast.AST) -> str:
    """``ast.get_source_segment`` of a one-statement ``text``, in time independent of its length (ast's walks
    the text a character at a time in Python: 11 s for a statement holding 100,000 words)."""
    return text[_start(text, node) : _end(text, node)]


def _start(text: str, node: ast.AST) -> int:
    return _offset(text, node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _end(text: str, node: ast.AST) -> int:
    return _offset(text, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
