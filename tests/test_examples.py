"""The README's first command: examples/tour.py runs the registry's main job on the built-in cards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_tour_runs_end_to_end():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tour.py")], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "reloaded outputs equal: True" in out, out[-2000:]
    assert "bilstm_labelwise.wordnet: 'a large wild animal of the cat family with a striped coat' ->" in out
    assert "g2p_seq2seq.cmudict: 'attention' -> AH0 T EH1 N SH AH0 N" in out, out[-2000:]
