"""What the conformance kit says about a variant: one :class:`Result` per property, gathered in a :class:`Report`."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Result", "Report", "PASSED", "FAILED", "EXEMPT", "SKIPPED"]

PASSED, FAILED, EXEMPT, SKIPPED = "passed", "failed", "exempt", "skipped"


@dataclass(frozen=True)
class Result:
    """One property of one variant: ``status`` is passed, failed (``reason`` says what broke), exempt (the
    card's reason) or skipped (why it did not run)."""

    variant: str
    property: str
    status: str
    reason: str = ""
    seconds: float = 0.0

    @builtins.property  # the field above is named property
    def failed(self) -> bool:
        return self.status == FAILED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Report:
    """Every property's result for one variant, in the kit's order.

    ``report.ok`` is False when any property failed; ``str(report)`` is a table; ``report["masked_values"]``
    is one result; ``report.raise_for_failures()`` raises an ``AssertionError`` holding the table, for
    a plugin author's pytest.
    """

    variant: str
    convention: str = ""
    results: list[Result] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results)

    def __getitem__(self, prop: str) -> Result:
        for result in self.results:
            if result.property == prop:
                return result
        raise KeyError(f"{self.variant}: no result for property {prop!r}")

    def counts(self) -> dict[str, int]:
        out = {PASSED: 0, FAILED: 0, EXEMPT: 0, SKIPPED: 0}
        for result in self.results:
            out[result.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "convention": self.convention,
            "ok": self.ok,
            "results": [r.to_dict() for r in self.results],
        }

    def table(self) -> str:
        return format_table([self])

    def __str__(self) -> str:
        return self.table()

    def raise_for_failures(self) -> None:
        """Raise an ``AssertionError`` holding the table with every failing property's reason in full."""
        if not self.ok:
            raise AssertionError(
                f"{self.variant} breaks {len(self.failures)} promise(s) of attnzoo:\n{format_table([self], whole=True)}"
            )


def format_table(reports: list[Report], width: int = 120, *, variant_width: int = 0, whole: bool = False) -> str:
    """One row per variant and property: VARIANT, PROPERTY, STATUS, REASON, then a line of totals. A reason
    wider than its column goes on under itself, broken between words, never cut; ``whole`` keeps a
    multi-line reason's own line breaks (otherwise its lines are joined into one paragraph). Either way
    the reason starts on its property's row. ``variant_width`` keeps the first column aligned across
    tables printed one by one."""
    from attnzoo.io.tables import columns

    rows = [
        (r.variant, res.property, res.status, res.reason.strip() if whole else " ".join(res.reason.split()))
        for r in reports
        for res in r.results
    ]
    lines = columns(
        ("VARIANT", "PROPERTY", "STATUS", "REASON"),
        rows,
        width=width,
        wrap=(3,),
        minimum=(variant_width, len("batch_independence"), 7, 0),
    )
    total = {PASSED: 0, FAILED: 0, EXEMPT: 0, SKIPPED: 0}
    for report in reports:
        for status, n in report.counts().items():
            total[status] += n
    lines.append(", ".join(f"{n} {status}" for status, n in total.items()))
    return "\n".join(lines)
