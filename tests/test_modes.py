"""Models come back in the mode users expect: trained weights ready to predict (eval, as Hugging Face's
``from_pretrained``), a fresh model ready to train (train, as timm's and torchvision's ``create_model``)."""

from __future__ import annotations

import torch

import attnzoo


def _modes(model: torch.nn.Module) -> set[bool]:
    return {m.training for m in model.modules()}


def test_pretrained_models_come_back_in_eval_mode_and_predict_deterministically():
    model = attnzoo.create("bilstm_labelwise.wordnet", pretrained=True)
    assert _modes(model) == {False}
    ids = torch.randint(1, 200, (2, 12))
    with torch.no_grad():
        assert torch.equal(model(ids), model(ids))  # dropout off: two calls agree


def test_a_fresh_model_comes_back_in_train_mode():
    assert _modes(attnzoo.create("bilstm_labelwise", vocab_size=50, num_labels=3)) == {True}
    assert _modes(attnzoo.create("labelwise", num_labels=3)) == {True}


def test_loaded_and_weights_given_models_come_back_in_eval_mode(tmp_path):
    model = attnzoo.create("bilstm_labelwise", vocab_size=50, num_labels=3, dropout=0.5)
    attnzoo.save(model, tmp_path / "run")
    assert model.training  # saving does not touch the caller's model
    assert _modes(attnzoo.load(tmp_path / "run")) == {False}
    again = attnzoo.create("bilstm_labelwise", weights=tmp_path / "run")
    assert _modes(again) == {False}
    assert _modes(again.train()) == {True}  # and train() gives training back
