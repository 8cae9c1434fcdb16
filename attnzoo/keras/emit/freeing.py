"""Freeing: which variables ``forward`` no longer needs after each call, and the lines that go because
nothing reads what they assign. Names are the names Python parses (:mod:`ast`), never text in a string."""

from __future__ import annotations

import ast
from collections import Counter

from attnzoo.keras.code_lines import WIDTH

__all__ = ["names_in", "without_unread", "freed"]


def names_in(line: str) -> list[tuple[str, int, int]]:
    """The names one line of code reads or writes, with where each starts and ends in it (characters): what
    Python parses, so never text inside a string, and any identifier (tokenize's pattern misses names with
    combining marks, ``a_̈``, which the sanitiser may make)."""
    encoded = line.encode()
    found = [node for node in ast.walk(ast.parse(line)) if isinstance(node, ast.Name)]
    spans = [
        (n.id, len(encoded[: n.col_offset].decode()), len(encoded[: n.end_col_offset or 0].decode())) for n in found
    ]
    return sorted(spans, key=lambda span: span[1])  # in the order they are written


def without_unread(
    body: list[str], owners: list[str], results: list[str], names: set[str], calls: set[str]
) -> tuple[list[str], list[str]]:
    """The lines (and their owners) without the ``names`` (masks, unpacked outputs) nothing reads: an
    assignment of one goes, a place in a tuple is ``_``; a call whose result (one of ``calls``) nothing reads
    is kept, assigned to ``_``. Names are the names Python parses, never text inside a string (a layer key
    may spell a variable)."""
    counts = Counter(name for line in [*body, *results] for name, _, _ in names_in(line))
    unread = {name for name in names if counts[name] == 1}
    out, kept_owners = [], []
    for line, owner in zip(body, owners, strict=True):
        found = names_in(line)
        if found and found[0][0] in unread and found[0][1] == 0 and line.startswith(f"{found[0][0]} = "):
            continue
        if line.startswith("(") or ", " in line.split(" = ", 1)[0]:  # a tuple's places: ``(a, *_)``, ``a, b``
            for name, start, end in reversed(found):  # one line each: offsets into it, replaced from the end
                if name in unread:
                    line = line[:start] + "_" + line[end:]
        out.append(line)
        kept_owners.append(owner)
    counts = Counter(name for line in [*out, *results] for name, _, _ in names_in(line))  # without those lines
    kept = []
    for line in out:
        target = line.split(" = ")[0]
        kept.append("_" + line[len(target) :] if target in calls and counts[target] == 1 else line)
    return kept, kept_owners


def _assigned(line: str) -> list[str]:
    """The variables one line of ``forward`` assigns (none for a ``del``)."""
    statements = ast.parse(line).body  # none for a comment
    if not statements or not isinstance(statements[0], ast.Assign):
        return []
    return [n.id for target in statements[0].targets for n in ast.walk(target) if isinstance(n, ast.Name)]


def freed(body: list[str], owners: list[str], results: list[str]) -> tuple[list[str], list[str]]:
    """The lines with ``del`` statements after the block (the lines of one call) that last reads a variable,
    as a hand-written forward lets go of what it no longer needs: the memory of a tensor is reused while the
    graph runs, not held to the end (a CNN's activations would otherwise all stay alive). Never a result, an
    input or ``layers``, and nothing after the last block, where ``forward`` returns."""
    made = {name for line in body for name in _assigned(line)} - set(results) - {"_"}
    last: dict[str, int] = {}
    for i, line in enumerate(body):
        for name, _, _ in names_in(line):
            if name in made:
                last[name] = i
    ends: dict[int, list[str]] = {}  # the index of a block's last line -> the variables freed after it
    for name, i in last.items():
        while i + 1 < len(body) and owners[i + 1] == owners[i]:
            i += 1
        if i + 1 < len(body):  # after the last block, forward returns: nothing to let go of by hand
            ends.setdefault(i, []).append(name)
    lines, line_owners = [], []
    for i, (line, owner) in enumerate(zip(body, owners, strict=True)):
        lines.append(line)
        line_owners.append(owner)
        for statement in _del_statements(sorted(ends.get(i, []), key=lambda n: last[n])):
            lines.append(statement)
            line_owners.append(owner)
    return lines, line_owners


def _del_statements(names: list[str]) -> list[str]:
    """``del a, b, ...``, as many statements as keep each line within the width ruff formats to."""
    statements: list[str] = []
    for name in names:
        if statements and len(statements[-1]) + len(name) + 2 <= WIDTH - 8:
            statements[-1] += f", {name}"
        else:
            statements.append(f"del {name}")
    return statements
