"""attnzoo bench: the measurement itself is timing (checked by benchmarks/, never asserted here); what the
tests check is what a user sees: the progress while it runs, the table, and errors."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from attnzoo.tools.bench import Case, run

from .conftest import ROOT, run_cli


def test_run_reports_every_step_as_it_starts():
    events: list[str] = []
    cases = [
        Case("mha", {"embed_dim": 8, "num_heads": 2}, batch=2, seq=4),
        Case("gqa", {"embed_dim": 8, "num_heads": 2}, batch=2, seq=4),
    ]
    results = run(cases, rounds=2, min_run_time=0.01, memory=False, progress=events.append)
    assert [m.case.name for m in results] == ["mha", "gqa"] and all(m.median_ms > 0 for m in results)
    assert events[:2] == ["building mha", "building gqa"]
    rounds = [e for e in events if e.startswith("round ")]
    assert rounds == ["round 1/2: mha", "round 1/2: gqa", "round 2/2: mha", "round 2/2: gqa"]  # alternating


@pytest.mark.slow
def test_bench_shows_progress_on_a_terminal_and_nothing_elsewhere():
    args = ["bench", "mha", "embed_dim=8", "num_heads=2", "--batch", "2", "--seq", "4", "--rounds", "2", "--no-memory"]
    piped = run_cli(*args)
    assert piped.returncode == 0, piped.stderr
    assert "round" not in piped.stderr and "building" not in piped.stderr  # logs stay clean
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [sys.executable, "-m", "attnzoo", *args], stdout=subprocess.PIPE, stderr=follower, cwd=ROOT, timeout=300
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.returncode == 0
    text = seen.decode(errors="replace")
    assert "round 2/2: mha" in text and "building mha" in text
    assert "MEDIAN ms" in proc.stdout.decode()


@pytest.mark.slow
def test_bench_json_is_one_record_per_case():
    proc = run_cli(
        "bench",
        "mha",
        "embed_dim=8",
        "num_heads=2",
        "--batch",
        "2",
        "--seq",
        "4",
        "--rounds",
        "1",
        "--no-memory",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    assert record["name"] == "mha" and record["rounds"] == 1 and record["median_ms"] > 0
