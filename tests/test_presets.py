"""The self-attention variants are cards over the attention core: what they fix cannot change, what they
and folders saved by 0.1.0's preset classes load and predict what those classes did."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

import attnzoo
from attnzoo.layers.attention import Attention

from .conftest import ROOT

SAVED = ROOT / "tests" / "data" / "saved_v0_1"
PRESETS = ["qkv_self", "mha", "gqa", "alibi_self", "rope_self", "relpos_self", "local_self", "attention"]


@pytest.mark.parametrize("name", PRESETS)
def test_a_folder_saved_by_the_old_preset_classes_loads_and_predicts_what_they_did(name):
    """Made once with 0.1.0 (commit aaeffb5), whose presets were subclasses of Attention: weights drawn
    at 0.5, outputs recorded on a padded batch."""
    recorded = load_file(SAVED / "outputs.safetensors")
    model = attnzoo.load(SAVED / name)
    assert not model.training  # a loaded model comes back ready to predict
    got = model(recorded["x"], recorded["mask"].bool())
    torch.testing.assert_close(got, recorded[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [("alibi_self", "positions", "rope"), ("mha", "layout", "qkvo"), ("alibi_causal", "causal", False)],
)
def test_what_a_preset_fixes_cannot_be_changed(name, key, value):
    with pytest.raises(attnzoo.ConfigError, match=rf"{name}: {key} is fixed .* asks for {value!r}"):
        attnzoo.create(name, **{key: value})
    with pytest.raises(attnzoo.ConfigError, match=rf"{key} is fixed .* config= asks for"):
        attnzoo.create(name, config={key: value})


def test_a_preset_takes_only_the_options_its_card_lists_and_says_where_the_others_are():
    with pytest.raises(attnzoo.ConfigError, match="unknown config key 'qk_norm'.*'attention'"):
        attnzoo.create("mha", qk_norm=True)
    layer = attnzoo.create("attention", layout="packed", qk_norm=True, embed_dim=8, num_heads=2)
    assert "q_norm.weight" in layer.state_dict()


def test_a_fixed_value_given_again_unchanged_is_accepted():
    layer = attnzoo.create("alibi_causal", config={"causal": True}, embed_dim=8, num_heads=2)
    assert layer.causal and layer.positions == "alibi"


def test_rope_self_takes_the_cores_rope_base_and_not_0_1_0s_base():
    layer = attnzoo.create("rope_self", rope_base=500.0, embed_dim=8, num_heads=2)
    assert isinstance(layer, Attention) and layer.rope_base == 500.0
    assert layer.attnzoo_config["config"]["rope_base"] == 500.0
    with pytest.raises(attnzoo.ConfigError, match="rope_self: unknown config key 'base'"):
        attnzoo.create("rope_self", base=500.0)


def test_a_0_1_0_folder_is_saved_again_under_todays_names(tmp_path):
    """Its old names are read once, on load: saved again, the folder says rope_base and query_key_value,
    and loads as the same model (the recorded outputs) without the translation."""
    recorded = load_file(SAVED / "outputs.safetensors")
    for name, key, value in [("rope_self", "rope_base", 500.0), ("attention", "layout", "query_key_value")]:
        attnzoo.save(attnzoo.load(SAVED / name), tmp_path / name)
        saved = (tmp_path / name / "config.yaml").read_text()
        assert f"{key}: {value}" in saved and "base: 500" not in saved.replace("rope_base", "") and "seed" not in saved
        again = attnzoo.load(tmp_path / name)
        torch.testing.assert_close(again(recorded["x"], recorded["mask"].bool()), recorded[name], rtol=1e-5, atol=1e-6)


def test_errors_of_a_preset_name_the_preset():
    layer = attnzoo.create("mha", embed_dim=8, num_heads=2)
    with pytest.raises(ValueError, match=r"^mha expects x of shape \[batch, seq, 8\]"):
        layer(torch.randn(2, 3, 7))


def test_return_attention_is_keyword_only():
    layer = attnzoo.create("mha", embed_dim=8, num_heads=2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(TypeError):
        layer(x, None, True)
    out, weights = layer(x, return_attention=True)
    assert weights.shape == (1, 2, 3, 3)


def test_the_old_layout_name_seed_is_only_read_from_0_1_0_folders():
    with pytest.raises(ValueError, match="query_key_value"):
        attnzoo.create("attention", layout="seed", embed_dim=8, num_heads=2)


def test_an_error_about_rope_base_names_it_as_the_card_does():
    with pytest.raises(attnzoo.ConfigError, match="rope_self: config key 'rope_base' expects float"):
        attnzoo.create("rope_self", rope_base="fast")
