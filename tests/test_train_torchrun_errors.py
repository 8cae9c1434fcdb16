"""torchrun's failures said once (slow tier: real processes): an error raised in rank 0 is attnzoo's one line,
printed before torchrun's report, and the other ranks, whose collectives break when rank 0 leaves, say nothing
of their own on the terminal (what they raised goes to torchrun's error file, which its report shows)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .conftest import ROOT, TORCHRUN


@pytest.mark.slow
def test_an_error_in_rank_0_is_one_line_before_torchrun_s_report_and_the_other_rank_is_silent(tmp_path):
    rows = ["text,labels", "first row,", *(f"row number {i},l{i % 2}" for i in range(1, 12))]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")  # row 0 (rank 0's) has an empty label
    cmd = [*TORCHRUN, "train", "--model", "bilstm_labelwise", "--train", str(tmp_path / "train.csv")]
    cmd += ["--task", "single_label", "--no-baseline", "--batch-size", "2", "--output", str(tmp_path / "run")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    ours = [i for i, line in enumerate(lines) if line.startswith("attnzoo:")]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert "attnzoo: error: " in lines[ours[0]] and "line 2, column 'labels': empty label" in lines[ours[0]]
    report = next(i for i, line in enumerate(lines) if "ChildFailedError" in line or "Failures:" in line)
    assert ours[0] < report
    assert "Traceback" not in "\n".join(lines[: ours[0]])


def test_a_rank_but_the_first_writes_its_error_to_torchrun_s_error_file_not_the_terminal(tmp_path, monkeypatch, capsys):
    from attnzoo.cli.app import main

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["train", str(tmp_path / "missing.yaml")]) == 1
    assert capsys.readouterr().err == ""
    assert "missing.yaml" in json.loads(error_file.read_text())["message"]["message"]  # torchrun's report shows it
    monkeypatch.setenv("RANK", "0")
    assert main(["train", str(tmp_path / "missing.yaml")]) == 1
    assert capsys.readouterr().err.startswith("attnzoo: error: recipe ")
