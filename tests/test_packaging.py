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
