"""The keras-hub benchmarks run, and what they compare is the same model: each script refuses to time (exit
status 1) unless the converted keras-hub model gives transformers' outputs with the same weights (BERT's
sequence and pooled outputs on the real tokens, GPT-2's, Llama's and Gemma's logits) and, for decoding, the
same greedy tokens cached, uncached and from transformers' own ``generate``. Slow tier: they build models of
hidden 256."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("script", "gap"),
    [
        ("keras_hub_bert", "max_gap_on_real_tokens"),
        ("keras_hub_decoding", "logits_max_gap"),
        ("keras_hub_lm_decoding", "logits_max_gap"),
    ],
)
def test_a_keras_hub_benchmark_compares_the_same_model(script, gap):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((ROOT / "benchmarks" / "results" / f"{script}-quick.json").read_text())
    assert all(row[gap] < 1e-4 for row in result["rows"])
