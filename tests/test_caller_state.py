"""Helpers that must switch a caller's model give it back as it was: ``predict``, ``tokenizer``, ``export``
and the conformance kit restore every submodule's train/eval mode, every parameter's requires_grad and
torch's grad mode; ``bench`` leaves the caller's thread count and random generators alone.

Called in the middle of training, a helper that leaves the model in eval mode silently turns dropout off
for every later step; the tests give models mixed modes (a training model with a frozen, eval-mode part)
so that restoring with one ``model.train()`` would not pass either.
"""

from __future__ import annotations

import pytest
import torch

import attnzoo
from attnzoo.testing import check_model
from attnzoo.tools.bench import Case
from attnzoo.tools.bench import run as bench_run


def _state(model: torch.nn.Module) -> tuple[dict[str, bool], dict[str, bool]]:
    return (
        {name or "<root>": m.training for name, m in model.named_modules()},
        {name: p.requires_grad for name, p in model.named_parameters()},
    )


def _mixed(model: torch.nn.Module) -> torch.nn.Module:
    """Train mode at the root, one child in eval mode with its parameters frozen."""
    model.train()
    child = next(m for m in model.children() if any(True for _ in m.parameters()))
    child.eval()
    for p in child.parameters():
        p.requires_grad_(False)
    return model


@pytest.fixture
def trained():
    return _mixed(attnzoo.create("bilstm_labelwise.wordnet", pretrained=True))


def test_predict_gives_the_callers_model_back_in_its_modes(trained):
    before = _state(trained)
    assert any(before[0].values()) and not all(before[0].values())
    with torch.enable_grad():
        attnzoo.predict(trained, "a large wild cat with a striped coat")
        assert torch.is_grad_enabled()
    assert _state(trained) == before


def test_predict_inside_no_grad_leaves_grad_off(trained):
    with torch.no_grad():
        attnzoo.predict(trained, ["a dog", "a small bird"])
        assert not torch.is_grad_enabled()
    assert _state(trained)[0]["<root>"] is True


def test_the_tokenizer_of_a_module_leaves_its_mode_alone(trained):
    before = _state(trained)
    attnzoo.tokenizer(trained)
    assert _state(trained) == before


def test_predict_in_train_mode_gives_the_eval_result():
    """Restoring the mode must not mean predicting in it: dropout stays off while predict runs."""
    model = attnzoo.create("bilstm_labelwise.wordnet", pretrained=True)
    text = "a large wild cat with a striped coat"
    reference = attnzoo.predict(model.eval(), text, top=None)
    model.train()
    for module in model.modules():  # make a dropout that would show: half the activations dropped
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.5
    again = attnzoo.predict(model, text, top=None)
    assert model.training
    got = {label.id: label.probability for label in again.labels}
    assert all(got[label.id] == pytest.approx(label.probability, abs=1e-6) for label in reference.labels)


def test_export_gives_the_callers_model_back_in_its_modes(tmp_path):
    layer = _mixed(attnzoo.create("attention", embed_dim=8, num_heads=2, dropout=0.1))
    before = _state(layer)
    attnzoo.export(layer, tmp_path / "layer.pt2")
    assert _state(layer) == before


def test_the_kit_gives_a_factorys_shared_module_back_as_it_was():
    """A factory may return the caller's own module; the kit casts it (dtypes), trains it (train_step)
    and switches its modes, and must put everything back."""
    layer = _mixed(attnzoo.create("attention", embed_dim=8, num_heads=2, dropout=0.1))
    before = _state(layer)
    weights = {k: v.clone() for k, v in layer.state_dict().items()}
    report = check_model(
        lambda **_: layer, convention="sequence_to_sequence", only=["dtypes", "train_step", "masked_values"]
    )
    assert report["train_step"].status == "passed", report
    assert _state(layer) == before
    after = layer.state_dict()
    assert all(after[k].dtype == torch.float32 and torch.equal(after[k], weights[k]) for k in weights)
    assert all(p.grad is None for p in layer.parameters())


def test_bench_leaves_the_callers_threads_and_random_state_alone():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    bench_run(
        [Case("dot", batch=1, seq=4)],
        rounds=1,
        min_run_time=0.001,
        memory=False,
        threads=threads + 1,
    )
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected)


def test_evaluate_file_gives_the_callers_model_back_in_its_modes(trained, tmp_path):
    from attnzoo.train.evaluate import evaluate_file

    labels = trained.attnzoo_metadata["labels"]
    (tmp_path / "test.csv").write_text(
        f"text,labels\na large wild cat with a striped coat,{labels[0]}\na small bird that sings,{labels[1]}\n"
    )
    before = _state(trained)
    scores = evaluate_file(trained, tmp_path / "test.csv")
    assert scores["rows"] == 2
    assert _state(trained) == before
