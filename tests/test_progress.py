"""Progress bars (issue 67): a tqdm bar on stderr where stderr is a terminal (a pty here, as a user's shell
gives), none under ``--quiet`` and none where stderr is piped (a log, CI)."""

from __future__ import annotations

import os
import pty
import select
import sys

import pytest

from attnzoo.cli import main

from .conftest import ROOT

FILE = ROOT / "tests" / "data" / "keras_live" / "mixed_float16.keras"


def _read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _on_a_terminal(monkeypatch, argv: list[str]) -> str:
    """What ``attnzoo argv`` writes to stderr when stderr is a terminal."""
    pytest.importorskip("tqdm")
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", buffering=1, encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        assert stream.isatty()
        assert main(argv) == 0
        stream.flush()
        return _read_all(master)
    finally:
        monkeypatch.undo()
        stream.close()
        os.close(master)


def test_a_bar_on_a_terminal_none_with_quiet_and_none_piped(tmp_path, monkeypatch, capsys):
    drawn = _on_a_terminal(monkeypatch, ["convert-keras", str(FILE), "-o", str(tmp_path / "a")])
    assert "reading mixed_float16.keras" in drawn and "%|" in drawn and "layer" in drawn, drawn
    quiet = _on_a_terminal(monkeypatch, ["convert-keras", str(FILE), "-o", str(tmp_path / "b"), "--quiet"])
    assert "%|" not in quiet and "reading" not in quiet, quiet
    assert main(["convert-keras", str(FILE), "-o", str(tmp_path / "c")]) == 0  # stderr captured: no terminal
    assert "reading" not in capsys.readouterr().err
