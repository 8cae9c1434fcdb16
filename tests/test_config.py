"""Configuration: validation against the factory signature, the precedence of the layers of config."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import attnzoo
from attnzoo.core.config import parse_overrides
from attnzoo.errors import ConfigError
from attnzoo.io.weights import write_weights

from .conftest import run_cli


@pytest.fixture
def recorder():
    attnzoo.register("rec", factory="tests.factories:Recorder", config={"size": "???", "rate": 0.25})
    return "rec"


def test_unknown_key_names_the_key_and_the_closest_valid_ones(recorder):
    with pytest.raises(ConfigError) as err:
        attnzoo.create(recorder, size=1, rat=0.1)
    message = str(err.value)
    assert "'rat'" in message and "did you mean 'rate'" in message
    assert isinstance(err.value, ValueError)


def test_unknown_key_on_a_real_layer():
    with pytest.raises(ConfigError, match="did you mean 'num_labels'"):
        attnzoo.create("labelwise", num_label=3)


def test_missing_required_value_names_it(recorder):
    with pytest.raises(ConfigError, match="missing required config value 'size'"):
        attnzoo.create(recorder)
    with pytest.raises(ConfigError, match="'num_labels'"):
        attnzoo.create("labelwise")


@pytest.mark.parametrize(
    "key, value",
    [
        ("size", "x"),
        ("size", 1.5),
        ("size", True),
        ("rate", "fast"),
        ("flag", 1),
        ("mode", "c"),
        ("sizes", [1, "two"]),
        ("name", 3),
    ],
)
def test_wrong_types_are_config_errors_not_crashes(recorder, key, value):
    # "name" is also create()'s own parameter: such keys go through config=
    with pytest.raises(ConfigError, match=f"'{key}' expects"):
        attnzoo.create(recorder, config={"size": 1, key: value})


def test_values_that_fit_are_passed_through(recorder):
    rec = attnzoo.create(recorder, size=3, rate=1, sizes=[1, 2], extra=None, mode="b")
    assert rec.kwargs == dict(size=3, rate=1.0, name="x", flag=False, mode="b", sizes=[1, 2], extra=None)
    assert isinstance(rec.kwargs["rate"], float)


def test_wrong_type_on_a_real_layer_is_caught_before_the_constructor():
    with pytest.raises(ConfigError, match="'num_labels' expects int"):
        attnzoo.create("labelwise", num_labels="x")


def test_yaml_dict_dictconfig_and_cli_pairs_give_the_same_config(recorder, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("size: 7\nrate: 0.75\nsizes: [1, 2]\n")
    as_dict = {"size": 7, "rate": 0.75, "sizes": [1, 2]}
    results = [
        attnzoo.create(recorder, config=str(path)).kwargs,
        attnzoo.create(recorder, config=path).kwargs,
        attnzoo.create(recorder, config=as_dict).kwargs,
        attnzoo.create(recorder, config=OmegaConf.create(as_dict)).kwargs,
        attnzoo.create(recorder, **parse_overrides(["size=7", "rate=0.75", "sizes=[1,2]"])).kwargs,
    ]
    assert all(r == results[0] for r in results), results
    assert results[0]["size"] == 7 and results[0]["sizes"] == [1, 2]


def test_overrides_beat_config_which_beats_the_card(recorder):
    rec = attnzoo.create(recorder, config={"size": 1, "rate": 0.5, "mode": "b"}, mode="a")
    assert rec.kwargs["rate"] == 0.5  # config beats the card's 0.25
    assert rec.kwargs["mode"] == "a"  # override beats config
    assert attnzoo.create(recorder, size=1).kwargs["rate"] == 0.25  # the card's default


def test_missing_config_file_is_a_clear_error(recorder, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        attnzoo.create(recorder, config=tmp_path / "nope.yaml")


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["size"])


@pytest.fixture
def tagged(tmp_path):
    """A local spec with one pretrained tag whose config sits between the card and the caller."""
    torch.manual_seed(0)
    source = attnzoo.create("labelwise_batched", num_labels=3, hidden_size=4, output="probs", shared_output=True)
    path = tmp_path / "lw.safetensors"
    digest = write_weights(source.state_dict(), path)
    attnzoo.register(
        "lw_tagged",
        factory="attnzoo.layers.labelwise:LabelwiseAttentionBatched",
        config={"num_labels": "???", "hidden_size": None, "output": "logits"},
        weights={
            "t": {
                "file": str(path),
                "sha256": digest,
                "config": {"num_labels": 3, "hidden_size": 4, "output": "probs", "shared_output": True},
            }
        },
    )
    return source


def test_pretrained_tag_config_sits_between_card_and_caller(tagged):
    x = torch.randn(2, 5, 4)
    model = attnzoo.create("lw_tagged", pretrained=True)
    assert model.output == "probs"  # the tag beats the card's logits
    torch.testing.assert_close(model(x), tagged(x))
    model = attnzoo.create("lw_tagged", pretrained=True, config={"output": "logits"})
    assert model.output == "logits"  # the caller beats the tag
    torch.testing.assert_close(torch.sigmoid(model(x)), tagged(x))
    assert attnzoo.create("lw_tagged.t").num_labels == 3  # a tag in the name brings its config


def test_config_conflicting_with_the_weights_is_a_config_error(tagged):
    with pytest.raises(ConfigError, match=r"num_labels=5 \(the weights have 3\).*reset_head=True"):
        attnzoo.create("lw_tagged", pretrained=True, num_labels=5)


def test_reset_head_loads_what_fits(tagged):
    with pytest.warns(UserWarning, match="re-initialised"):
        model = attnzoo.create("lw_tagged", pretrained=True, num_labels=5, reset_head=True)
    assert model.Wa.shape == (5, 4) and model.bo.shape == (5,)
    torch.testing.assert_close(model.Wo, tagged.Wo)  # the shared output vector fits and is loaded
    assert not torch.equal(model.Wa[:3], tagged.Wa)


def test_cli_pairs_reach_the_config():
    proc = run_cli("create", "labelwise", "num_labels=4", "hidden_size=8", "shared_output=true")
    assert proc.returncode == 0, proc.stderr
    assert "hidden_size=8, shared_output=True" in proc.stdout
    proc = run_cli("create", "labelwise", "num_labels=x")
    assert proc.returncode == 1 and "'num_labels' expects int" in proc.stderr


def test_a_mistyped_key_on_a_pretrained_tag_is_refused_before_its_weights_are_read(monkeypatch):
    """The config is checked first: a typo costs no fetch and no sha256 of the weights file."""
    import attnzoo.io.weights as weights_io

    reads = []
    real = weights_io.read_weights
    monkeypatch.setattr(weights_io, "read_weights", lambda *a, **k: reads.append(a) or real(*a, **k))
    with pytest.raises(ConfigError, match="unknown config key 'hiden'; did you mean 'hidden'"):
        attnzoo.create("bilstm_labelwise.wordnet", pretrained=True, hiden=3)
    with pytest.raises(ConfigError, match="dtype"):
        attnzoo.create("bilstm_labelwise.wordnet", pretrained=True, dtype="float13")
    assert reads == []
    attnzoo.create("bilstm_labelwise.wordnet", pretrained=True)
    assert len(reads) == 1
