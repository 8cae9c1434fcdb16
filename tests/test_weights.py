"""Weights: safetensors with checksums, save/load round trips, and nothing overwritten or half-loaded."""

from __future__ import annotations

import hashlib

import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.io.weights import read_weights, write_weights


def _model():
    torch.manual_seed(0)
    model = attnzoo.create("labelwise", num_labels=4, hidden_size=6)
    return model


def test_save_and_load_round_trip(tmp_path):
    model = _model()
    folder = attnzoo.save(model, tmp_path / "m")
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "model.safetensors"]
    again = attnzoo.load(folder)
    x, mask = torch.randn(3, 5, 6), torch.tensor([[1] * 5, [1, 1, 0, 0, 0], [0] * 5]).bool()
    torch.testing.assert_close(again(x, mask), model(x, mask), rtol=0, atol=0)
    assert type(again) is type(model) and again.num_labels == 4


def test_lazy_model_saved_after_its_first_call_round_trips(tmp_path):
    model = attnzoo.create("labelwise_batched", num_labels=3)
    with pytest.raises(WeightsError, match="first forward"):
        attnzoo.save(model, tmp_path / "early")
    x = torch.randn(2, 4, 10)
    expected = model(x)
    again = attnzoo.load(attnzoo.save(model, tmp_path / "late"))
    torch.testing.assert_close(again(x), expected, rtol=0, atol=0)


def test_save_refuses_to_overwrite_unless_asked(tmp_path):
    model = _model()
    folder = attnzoo.save(model, tmp_path / "m")
    before = (folder / "model.safetensors").read_bytes()
    other = attnzoo.create("labelwise", num_labels=4, hidden_size=6)
    with pytest.raises(WeightsError, match="overwrite=True"):
        attnzoo.save(other, folder)
    assert (folder / "model.safetensors").read_bytes() == before
    attnzoo.save(other, folder, overwrite=True)
    assert (folder / "model.safetensors").read_bytes() != before


def test_loaded_file_is_exactly_the_file_that_was_verified(tmp_path):
    tensors = {"a": torch.arange(6.0).reshape(2, 3)}
    path = tmp_path / "w.safetensors"
    digest = write_weights(tensors, path, metadata={"k": "v"})
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "w.safetensors.sha256").read_text().split() == [digest, "w.safetensors"]
    loaded, meta = read_weights(path, sha256=None)  # finds the sidecar
    torch.testing.assert_close(loaded["a"], tensors["a"])
    assert meta["k"] == "v"


def test_write_weights_refuses_to_overwrite(tmp_path):
    path = tmp_path / "w.safetensors"
    write_weights({"a": torch.zeros(2)}, path)
    with pytest.raises(WeightsError, match="already exists"):
        write_weights({"a": torch.ones(2)}, path)


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_damaged_weights_name_the_file_and_both_digests(tmp_path, damage):
    model = _model()
    folder = attnzoo.save(model, tmp_path / "m")
    path = folder / "model.safetensors"
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:  # another valid model's file under this name
        other = attnzoo.save(attnzoo.create("labelwise", num_labels=4, hidden_size=6), tmp_path / "o")
        data = (other / "model.safetensors").read_bytes()
    path.write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(WeightsError) as err:
        attnzoo.load(folder)
    message = str(err.value)
    assert str(path) in message and expected in message and actual in message


def test_missing_file_says_where_it_looked(tmp_path):
    with pytest.raises(WeightsError, match="looked for .*nothere.safetensors"):
        read_weights(tmp_path / "nothere.safetensors", sha256="0" * 64)


def test_a_file_without_a_known_digest_is_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    write_weights({"a": torch.zeros(2)}, path, sidecar=False)
    with pytest.raises(WeightsError, match="no sha256 is known"):
        read_weights(path, sha256=None)


def test_pickle_files_are_refused(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"a": torch.zeros(2)}, path)
    with pytest.raises(WeightsError, match="only .safetensors"):
        read_weights(path, sha256="0" * 64)


def test_a_file_that_does_not_fit_loads_nothing(tmp_path):
    model = _model()
    tensors = dict(model.state_dict())
    del tensors["bo"]
    tensors["extra"] = torch.zeros(1)
    path = tmp_path / "bad.safetensors"
    write_weights(tensors, path)
    with pytest.raises(WeightsError, match=r"missing from the file: bo.*not in the model: extra"):
        attnzoo.create("labelwise", num_labels=4, hidden_size=6, weights=path)


def test_weights_file_with_metadata_rebuilds_alone(tmp_path):
    model = _model()
    folder = attnzoo.save(model, tmp_path / "m")
    # the file alone (with a sidecar digest) carries name and config
    single = tmp_path / "single.safetensors"
    single.write_bytes((folder / "model.safetensors").read_bytes())
    (tmp_path / "single.safetensors.sha256").write_text(hashlib.sha256(single.read_bytes()).hexdigest())
    again = attnzoo.load(single)
    assert again.num_labels == 4 and again.hidden_size == 6


def test_meta_device_and_dtype_strings():
    model = attnzoo.create("labelwise_batched", num_labels=8, hidden_size=32, device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())
    model = attnzoo.create("labelwise_batched", num_labels=8, hidden_size=32, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    with pytest.raises(attnzoo.ConfigError, match="dtype must be"):
        attnzoo.create("labelwise_batched", num_labels=8, dtype="float8")


def test_lazy_layer_loads_state_and_moves_before_its_first_call():
    source = attnzoo.create("labelwise", num_labels=3, hidden_size=5)
    lazy = attnzoo.create("labelwise", num_labels=3)
    lazy.load_state_dict(source.state_dict())  # the seed's bug: a size mismatch here
    x = torch.randn(2, 4, 5)
    torch.testing.assert_close(lazy(x), source(x))
    moved = attnzoo.create("labelwise", num_labels=3).to(torch.float64)
    assert moved(x.double()).dtype == torch.float64


def test_device_strings_resolve_or_fail_clearly():
    model = attnzoo.create("attn_pool", hidden_size=4, device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(model.parameters()).device.type == expected
    assert (
        next(attnzoo.create("attn_pool", hidden_size=4, device=torch.device("cpu")).parameters()).device.type == "cpu"
    )
    if not torch.cuda.is_available():
        with pytest.raises(attnzoo.ConfigError, match=r"cannot place the model on 'cuda:1'.*this machine has cpu"):
            attnzoo.create("attn_pool", hidden_size=4, device="cuda:1")
    with pytest.raises(attnzoo.ConfigError, match="no plugin places"):
        attnzoo.create("attn_pool", hidden_size=4, device="tpu-of-dreams")


@pytest.mark.parametrize(
    "name, config", [("qkv_self", {}), ("labelwise", {"num_labels": 3}), ("keras_mha", {"num_heads": 2, "key_dim": 3})]
)
def test_a_lazy_layers_state_dict_can_be_taken_before_its_first_call(name, config):
    from torch.nn.parameter import is_lazy

    state = attnzoo.create(name, **config).state_dict()
    assert state and all(is_lazy(v) for k, v in state.items() if k != "bo")


def test_a_yaml_alias_bomb_in_config_yaml_is_refused_at_once(tmp_path):
    """A few hundred bytes of nested aliases expand into billions of nodes; attnzoo.save writes none."""
    import time

    import attnzoo
    from attnzoo.errors import WeightsError

    layer = attnzoo.create("labelwise", num_labels=2, hidden_size=4)
    folder = attnzoo.save(layer, tmp_path / "m")
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 10)]
    original = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text("\n".join(lines) + "\n" + original)
    started = time.perf_counter()
    with pytest.raises(WeightsError, match="uses YAML aliases"):
        attnzoo.load(folder)
    assert time.perf_counter() - started < 5


def test_write_weights_refuses_other_suffixes_and_a_users_own_digest_file(tmp_path):
    import torch

    from attnzoo.errors import WeightsError
    from attnzoo.io.weights import write_weights

    tensors = {"w": torch.ones(2)}
    with pytest.raises(WeightsError, match="name the output NAME.safetensors"):
        write_weights(tensors, tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()
    mine = tmp_path / "out.safetensors.sha256"
    mine.write_text("my own notes\n")
    with pytest.raises(WeightsError, match="not attnzoo's to replace"):
        write_weights(tensors, tmp_path / "out.safetensors")
    assert mine.read_text() == "my own notes\n" and not (tmp_path / "out.safetensors").exists()
    write_weights(tensors, tmp_path / "out.safetensors", overwrite=True)  # asked for: replaced
    assert mine.read_text() != "my own notes\n"
