"""Plain-text tables that fit a width by wrapping, never by cutting a word or running columns together.

    print("\\n".join(columns(["NAME", "SUMMARY"], rows, width=80)))

``attnzoo list``, ``info``, ``check`` and the other verbs print their tables through this; ``--json`` is
for programs and always whole. Cells hold text from cards, plugins and files: every control character in
them is shown escaped (:func:`attnzoo.io.text.printable`), except the line breaks that lay a cell out on
several lines.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from attnzoo.io.text import printable

__all__ = ["columns", "GAP"]

GAP = 2  # spaces between two columns


def _lines(text: str, width: int) -> list[str]:
    """``text`` on lines of at most ``width`` characters, broken between words only (a word longer than
    the width stays whole), its own line breaks kept."""
    out: list[str] = []
    for paragraph in text.split("\n"):
        out += textwrap.wrap(paragraph, width, break_long_words=False, break_on_hyphens=False) or [""]
    return out


def _shown(cell: object) -> str:
    """A cell as a terminal may show it: its line breaks kept (they lay the cell out), every other control
    character escaped."""
    return "\n".join(printable(line) for line in str(cell).split("\n"))


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def columns(
    headers: Sequence[str] | None,
    rows: Sequence[Sequence[object]],
    *,
    width: int,
    wrap: Sequence[int] = (-1,),
    minimum: Sequence[int] = (),
) -> list[str]:
    """The lines of ``rows`` under ``headers`` (None: no header line) in aligned columns, ``GAP`` spaces
    apart, fitting ``width`` where the words allow.

    The columns in ``wrap`` (indices; default the last) give up room when the table is too wide, the
    widest first, down to their longest word; their cells then go on as many lines as they need, each
    continuation line starting in the cell's own column. The other columns keep their full width.
    ``minimum`` gives columns a least width (to align tables printed one after another). A line stays
    longer than ``width`` only where a single word is (the terminal then wraps it; nothing is cut).
    """
    cells = [[_shown(c) for c in row] for row in rows]
    count = len(headers) if headers is not None else max((len(r) for r in cells), default=0)
    header = [_shown(h) for h in headers] if headers is not None else [""] * count
    wrapped = {i % count for i in wrap} if count else set()
    least = list(minimum) + [0] * (count - len(minimum))
    natural = [
        max([len(header[i]), least[i]] + [len(line) for r in cells for line in r[i].split("\n")]) for i in range(count)
    ]
    floor = [
        max([len(header[i]), least[i]] + [_longest_word(r[i]) for r in cells]) if i in wrapped else natural[i]
        for i in range(count)
    ]
    # in the last column, a word longer than the room left for it runs past the width on its own line; it
    # does not widen the column for every row (a long path in one row must not stop the others wrapping).
    # Elsewhere it would run into the next column, so there the longest word sets the floor.
    last = count - 1
    if last in wrapped:
        room = width - sum(natural[:last]) - GAP * last
        fitting = [len(w) for r in cells for w in r[last].split() if len(w) <= room]
        if fitting and room >= max(len(header[last]), least[last]):
            floor[last] = max([len(header[last]), least[last]] + fitting)
    widths = list(natural)
    excess = sum(widths) + GAP * (count - 1) - width
    while excess > 0:
        give = [i for i in wrapped if widths[i] > floor[i]]
        if not give:
            break
        widest = max(give, key=lambda i: widths[i])
        cut = min(excess, widths[widest] - floor[widest])
        widths[widest] -= cut
        excess -= cut
    out = []
    for row in ([header] if headers is not None else []) + cells:
        parts = [_lines(cell, widths[i]) if i in wrapped else cell.split("\n") for i, cell in enumerate(row)]
        for n in range(max(len(p) for p in parts)):
            line = (" " * GAP).join((p[n] if n < len(p) else "").ljust(widths[i]) for i, p in enumerate(parts))
            out.append(line.rstrip())
    return out
