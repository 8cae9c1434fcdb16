"""One Keras conversion builds its module once: every node, the masks' plan and the emitted module are made
by ``KerasModel.__init__``, which a conversion (and ``convert-keras --logits``) runs once; the model still
carries what ``attnzoo.save`` needs, and ``logits_model`` equals a conversion with ``logits=True``."""

from __future__ import annotations

import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import logits_model
from attnzoo.keras.model import KerasModel

from .conftest import ROOT

SEQUENTIAL = ROOT / "tests" / "data" / "keras2" / "sequential.h5"  # ends in a softmax


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """Each ``KerasModel.__init__`` run, by the model's Keras name."""
    made: list[str] = []
    original = KerasModel.__init__

    def counted(self, graph):
        made.append(str(graph.get("layers", {}).keys()))
        original(self, graph)

    monkeypatch.setattr(KerasModel, "__init__", counted)
    return made


def _inputs(model) -> torch.Tensor:
    spec = model.inputs_spec[0]  # token ids below the vocabulary
    shape = [2 if i == 0 else 5 if d is None else d for i, d in enumerate(spec["shape"])]
    return torch.randint(1, spec.get("vocab", 10), shape, generator=torch.Generator().manual_seed(0))


def test_a_conversion_builds_its_module_once_and_saves_and_loads(builds, tmp_path):
    model = convert_keras_model(SEQUENTIAL)
    assert len(builds) == 1
    # what attnzoo.create gives a keras_model (the independent door), so save / load rebuild it
    assert model.attnzoo_config == attnzoo.create("keras_model", graph=model.graph).attnzoo_config
    attnzoo.save(model, tmp_path / "saved")
    again = attnzoo.load(tmp_path / "saved")
    x = _inputs(model)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)


def test_logits_reuse_the_conversion_and_equal_a_logits_conversion(builds):
    model = convert_keras_model(SEQUENTIAL)
    builds.clear()
    logits = logits_model(model)
    assert len(builds) == 1  # the logits module only: the file is not converted again
    direct = convert_keras_model(SEQUENTIAL, logits=True)
    assert logits.keras_report.outputs == direct.keras_report.outputs
    assert logits.attnzoo_config == direct.attnzoo_config
    x = _inputs(model)
    with torch.no_grad():
        got, probabilities = logits.eval()(x), model(x)
        torch.testing.assert_close(got, direct(x), rtol=0, atol=0)
        torch.testing.assert_close(torch.softmax(got, dim=-1), probabilities, rtol=1e-6, atol=1e-6)


def test_the_cli_with_logits_builds_the_module_once(builds, tmp_path):
    from attnzoo.cli import main

    out = tmp_path / "logits"
    assert main(["convert-keras", str(SEQUENTIAL), "-o", str(out), "--logits"]) == 0
    assert len(builds) == 1
    saved, direct = attnzoo.load(out), convert_keras_model(SEQUENTIAL, logits=True)
    x = _inputs(saved)
    with torch.no_grad():
        torch.testing.assert_close(saved(x), direct(x), rtol=0, atol=0)
