"""Tables for people fit the terminal by wrapping: ``attnzoo info``, ``list`` (``--pretrained``'s metrics
too) and ``check`` never run two columns together and never cut a word; a long cell goes on under
itself; a multi-line reason starts on its property's row; ``--json`` is always whole. The width comes
from the terminal (COLUMNS here)."""

from __future__ import annotations

import json
import re

import pytest

from attnzoo.cli.common import metrics_text
from attnzoo.io.tables import columns
from attnzoo.testing.report import FAILED, PASSED, Report, Result, format_table

from .conftest import run_cli

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "a",
    "label-wise",
    "attention",
    "head",
    "reads",
    "every",
    "token",
]


def _words(text: str) -> list[str]:
    return text.split()


def test_wrapped_columns_keep_every_word_and_their_alignment():
    rows = [("a", " ".join(WORDS[:n]), "x" * n) for n in range(1, len(WORDS), 3)]
    rows.append(("longer_name", "supercalifragilistic " + " ".join(WORDS), "end"))
    for width in (30, 45, 80, 200):
        lines = columns(["NAME", "TEXT", "TAIL"], rows, width=width, wrap=(1,))
        start = lines[0].index("TEXT")
        tail = lines[0].index("TAIL")
        got: list[list[str]] = []
        for line in lines[1:]:
            if line[:start].strip():  # a new row: its name, then its text from the TEXT column
                got.append([])
            else:  # a continuation: nothing left of the TEXT column
                assert line[:start] == " " * start
            got[-1] += _words(line[start:tail])
            assert len(line) <= max(width, start + len("supercalifragilistic") + 2 + len("TAIL") + 20)
        assert got == [_words(r[1]) for r in rows]  # every word, whole, in order
        if width >= 80:
            assert all(len(line) <= width for line in lines)


def test_a_word_longer_than_the_room_is_kept_whole_and_columns_never_touch():
    lines = columns(["K", "V"], [("max_relative_position", "default 16"), ("x", "a" * 50)], width=20)
    assert lines[1].startswith("max_relative_position  default")
    assert "a" * 50 in lines[2]


def test_one_long_word_does_not_stop_the_other_rows_from_wrapping():
    # a checkout cloned into a deep folder gives `info` a source path wider than the terminal: that line
    # alone may run past the width, the summary above it still wraps
    path = "/" + "x" * 70 + "/registry/attention.yaml"
    summary = "The composable attention core; the card picks heads and positions"
    lines = columns(None, [("summary:", summary), ("source:", path)], width=40)
    assert [line for line in lines if len(line) > 40] == ["source:   " + path]
    words = [line.split()[1:] if line.startswith("summary:") else line.split() for line in lines[:-1]]
    assert " ".join(" ".join(w) for w in words) == summary


def test_a_failing_reason_is_never_cut_and_reads_from_its_first_line():
    reason = "\nmasked position 3 changed output 0 by 0.5 " + "while the padding held NaN; " * 12 + "END-OF-REASON"
    report = Report(
        "my_layer",
        "sequence_to_labels",
        [Result("my_layer", "builds", PASSED), Result("my_layer", "masked_values", FAILED, reason)],
    )
    for whole in (False, True):
        table = format_table([report], width=70, whole=whole)
        row = next(line for line in table.splitlines() if "masked_values" in line)
        assert row.split("failed", 1)[1].split()[:3] == ["masked", "position", "3"]
        assert " ".join(_words(table)).count(" ".join(_words(reason))) == 1
        assert "…" not in table and all(len(line) <= 70 for line in table.splitlines())


def _cli(*args: str, columns_: int) -> str:
    proc = run_cli(*args, env={"COLUMNS": str(columns_)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_info_never_runs_a_name_into_its_value_nor_cuts_a_description():
    out = _cli("info", "attention", columns_=60)
    assert re.search(r"max_relative_position  +default 16", out)
    assert "inferred on the first call" in " ".join(out.split())  # the whole meaning of context_dim's null
    # the card's path is one word as long as the checkout's folder: it stays whole (nothing is cut), so its
    # line is the one allowed past the width, whatever folder the repository was cloned into
    path = next(line.split()[1] for line in out.splitlines() if line.strip().startswith("source:"))
    assert path.endswith("attention.yaml") and path in out
    assert all(len(line) <= 60 for line in out.splitlines() if " " in line.strip() and path not in line)
    assert "…" not in out.replace("sha256", "")


def test_list_wraps_summaries_and_pretrained_metrics_instead_of_cutting():
    data = json.loads(_cli("list", "--pretrained", "--json", columns_=60))
    for width in (60, 100):  # at 60 the longest metric alone is wider than the room: it stays whole
        out = _cli("list", "--pretrained", columns_=width)
        assert "…" not in out and (width < 100 or all(len(line) <= width for line in out.splitlines()))
        words = _words(out)
        for entry in data:
            for word in _words(metrics_text(entry["metrics"])) + _words(entry["dataset"]):
                assert word in words, f"{word!r} of {entry['name']} is missing or cut"
    listed = json.loads(_cli("list", "--json", columns_=40))
    out = _cli("list", columns_=60)
    assert "…" not in out
    words = _words(out)
    assert all(w in words for entry in listed for w in _words(entry["summary"]))


def test_json_is_whole_whatever_the_width():
    narrow = json.loads(_cli("info", "attention", "--json", columns_=20))
    wide = json.loads(_cli("info", "attention", "--json", columns_=400))
    assert narrow == wide and len(narrow["summary"]) > 20


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [[], ["--verbose"]])
def test_check_wraps_a_cards_exemption_reason_to_the_terminal(verbose):
    out = _cli("check", "bilstm_labelwise", "--property", "export", *verbose, columns_=72)
    row = next(line for line in out.splitlines() if " export " in line)
    assert row.split("exempt", 1)[1].split()[:2] == ["torch.export", "specialises"]
    assert "pad inputs to that length" in " ".join(out.split()) and "…" not in out
    assert all(len(line) <= 72 for line in out.splitlines())
