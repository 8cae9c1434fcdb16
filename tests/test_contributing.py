"""One file + one card: a variant added that way is tested by the existing suite, unedited.

The test copies the repository, adds docs/contributing.md's worked example (cosine attention: one
layer file, one card, convention query_key, empty example), regenerates the generated pages with the
one command the page names, and runs the suite's tests for it in a fresh interpreter. Then it breaks
the variant (its mask ignored) and expects the suite to fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT

LAYER = '''
"""Cosine attention: e_ij = s · cos(q_i, k_j), a score that ignores the vectors' lengths.

Shapes: forward(query [B, Tq, d], key [B, Tk, d], value [B, Tk, Dv] = key, mask [B, Tk] = None)
-> (context [B, Tq, Dv], weights [B, Tq, Tk]).
"""

import torch
import torch.nn.functional as F

from .scores import ScoreAttention


class CosineAttention(ScoreAttention):
    name = "cosine"
    same_size = True  # compares query and key feature by feature

    def __init__(self, *, scale: float = 10.0):
        super().__init__()
        self.scale = scale
{forward}
    def score(self, query, key):
        dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        q = F.normalize(query.to(dtype), dim=-1, eps=1e-6)
        k = F.normalize(key.to(dtype), dim=-1, eps=1e-6)
        return (self.scale * q @ k.transpose(-2, -1)).to(query.dtype)
'''

IGNORES_MASK = """
    def forward(self, query, key, value=None, mask=None):
        return super().forward(query, key, value, None)
"""

CARD = """\
name: cosine
kind: layer
factory: attnzoo.layers.cosine:CosineAttention
summary: Cosine attention, e = s cos(q, k)
reference: docs/contributing.md's worked example
convention: query_key
example: {}
config:
  scale: 10.0
"""


def _copy_repo(target):
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", "runs")
    for part in (
        "attnzoo",
        "registry",
        "weights",
        "tests",
        "docs",
        "examples",
        "pyproject.toml",
        "README.md",
        "mkdocs.yml",
    ):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=ignore)
        else:
            shutil.copy2(source, target / part)


def _pytest(repo, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    env["PYTHONPATH"] = str(repo)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=repo,
        env=env,
        timeout=900,
    )


@pytest.mark.slow
def test_one_layer_file_and_one_card_get_the_suite_and_a_broken_mask_fails_it(tmp_path):
    repo = tmp_path / "repo"
    _copy_repo(repo)
    (repo / "attnzoo" / "layers" / "cosine.py").write_text(textwrap.dedent(LAYER.format(forward="")))
    (repo / "registry" / "cosine.yaml").write_text(CARD)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    catalogue = [sys.executable, "-m", "attnzoo.tools.catalogue"]
    subprocess.run(catalogue, check=True, cwd=repo, env=env, capture_output=True)

    proc = _pytest(repo, "-k", "cosine or generated_docs", "tests/")
    assert proc.returncode == 0, proc.stdout[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 5, summary

    (repo / "attnzoo" / "layers" / "cosine.py").write_text(textwrap.dedent(LAYER.format(forward=IGNORES_MASK)))
    proc = _pytest(repo, "-k", "cosine", "tests/test_conformance.py")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "cosine-masked_values" in proc.stdout and "cosine-padding" in proc.stdout


KERAS_MODEL = """
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras, numpy as np
from keras import layers
x = keras.Input((None, 4), name="features")
h = layers.Dense(3)(x)
y = layers.UnitNormalization()(h)
model = keras.Model(x, y)
model.save(sys.argv[1] + "/unit.keras")
data = np.random.default_rng(0).standard_normal((2, 5, 4)).astype("float32")
data[1, 2] = 0.0
np.savez(sys.argv[1] + "/unit.npz", x=data, y=keras.ops.convert_to_numpy(model(data)))
"""

CONVERT = """
import sys, numpy as np, torch
from attnzoo.keras import convert_keras_model
from attnzoo.errors import UnsupportedKerasLayerError
try:
    model = convert_keras_model(sys.argv[1] + "/unit.keras")
except UnsupportedKerasLayerError as e:
    print("REFUSED", e)
    raise SystemExit(0)
io = np.load(sys.argv[1] + "/unit.npz")
with torch.no_grad():
    got = model(torch.from_numpy(io["x"])).numpy()
print("MAX", float(np.abs(got - io["y"]).max()))
"""


def _worked_keras_example() -> str:
    text = (ROOT / "docs" / "contributing.md").read_text()
    start = text.index("# attnzoo/keras/converters/unit_norm.py")
    return text[start : text.index("```", start)]


@pytest.mark.slow
def test_a_keras_class_is_one_file_in_the_converters(tmp_path):
    import importlib.util

    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed (the test extra brings it)")
    repo = tmp_path / "repo"
    _copy_repo(repo)
    keras_env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    made = subprocess.run(
        [sys.executable, "-c", KERAS_MODEL, str(tmp_path)], capture_output=True, text=True, env=keras_env
    )
    assert made.returncode == 0, made.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    before = subprocess.run(
        [sys.executable, "-c", CONVERT, str(tmp_path)], capture_output=True, text=True, env=env, cwd=repo
    )
    assert "REFUSED" in before.stdout and "UnitNormalization" in before.stdout, before.stdout + before.stderr

    converters = repo / "attnzoo" / "keras" / "converters"
    (converters / "unit_norm.py").write_text(_worked_keras_example())
    # ... and its name in the family list (docs/contributing.md: one file, one line)
    families = (converters / "__init__.py").read_text()
    (converters / "__init__.py").write_text(
        families.replace('    "wrappers",\n', '    "wrappers",\n    "unit_norm",\n')
    )
    after = subprocess.run(
        [sys.executable, "-c", CONVERT, str(tmp_path)], capture_output=True, text=True, env=env, cwd=repo
    )
    assert after.returncode == 0 and "MAX" in after.stdout, after.stdout + after.stderr
    assert float(after.stdout.split("MAX")[1]) <= 1e-6
