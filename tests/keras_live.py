"""The models of tests/keras_live_cases.py and Keras's outputs on them: committed under
tests/data/keras_live (made by ``KERAS_BACKEND=torch python tests/keras_live_cases.py tests/data/keras_live
CASE ...``), and made again by the installed Keras in the slow tier (:func:`live_cases`), so that the
fast tier needs no Keras import and the slow one follows Keras's releases."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from .conftest import ROOT, require_data

ATOL = RTOL = 1e-5
COMMITTED = ROOT / "tests" / "data" / "keras_live"


def live_cases(folder: Path, names: list[str]) -> Path:
    """``<name>.keras``, ``<name>.h5`` and ``<name>.npz`` (inputs and Keras's outputs) for each case."""
    have = importlib.util.find_spec("keras") is not None and importlib.util.find_spec("h5py") is not None
    require_data(have, "keras 3 and h5py (the test extra)")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    script = ROOT / "tests" / "keras_live_cases.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), *names], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def assert_matches(model, folder: Path, name: str) -> None:
    """The converted model's outputs on the case's inputs: Keras's shapes, within 1e-5 (ints exactly)."""
    io = dict(np.load(folder / f"{name}.npz"))
    inputs = [torch.from_numpy(io[f"in/{i}"]) for i in range(sum(k.startswith("in/") for k in io))]
    with torch.no_grad():
        got = model(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    want = [io[f"out/{k}"] for k in range(sum(k.startswith("out/") for k in io))]
    assert len(got) == len(want), f"{name}: {len(got)} outputs, Keras has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g = g.numpy()
        assert g.shape == w.shape, f"{name} output {k}: shape {g.shape}, Keras {w.shape}"
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")
        else:
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=f"{name} output {k}")
