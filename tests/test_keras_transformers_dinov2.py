"""keras-hub's DINOV2Backbone through the Hugging Face door (attnzoo.keras.to_transformers) as transformers'
``Dinov2Model`` (``Dinov2WithRegistersModel`` with register tokens).

The slow tier writes a folder for the DINOv2 fixture (tests/data/keras_hub_route: a .keras file and its
save_to_preset folder, made by keras-hub 0.32) and loads both in ONE child process where keras, keras_hub and
attnzoo cannot be imported, with transformers' AutoModel, feeding the images Keras saw transposed to
pixel_values [B, C, H, W]; ``last_hidden_state`` must be Keras's saved output (expected.npz) within 1e-5 and
``pooler_output`` its class token's state; a backbone with register tokens (the weights of a seeded
transformers ``Dinov2WithRegistersModel``) loads as that class and gives its states and the converted model's.
The fast tier checks the files and a refusal.
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnzoo.errors import ExportError
from attnzoo.keras import convert_keras_model, to_transformers

from .conftest import ROOT
from .test_keras_hub_dinov2 import PEER_IMAGES, keras_file, peer
from .test_keras_transformers_folder import run_loader

DATA = ROOT / "tests" / "data" / "keras_hub_route"
EXPECTED = dict(np.load(DATA / "expected.npz"))
FILES = {"dinov2": "dinov2.keras", "dinov2_preset": "dinov2_preset"}


@cache
def converted(file: str):
    return convert_keras_model(DATA / file)


def test_a_dinov2_backbone_is_written_as_dinov2_model_with_keras_s_sizes(tmp_path):
    folder = to_transformers(converted("dinov2.keras"), tmp_path / "dinov2")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Dinov2Model"] and config["model_type"] == "dinov2"
    # the fixture's DINOV2Backbone(patch_size=4, 2 layers, hidden 32, 2 heads, intermediate 64, 16 x 16 x 3)
    assert (config["image_size"], config["patch_size"], config["num_channels"]) == (16, 4, 3)
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (32, 2, 2)
    assert (config["mlp_ratio"], config["layer_norm_eps"], config["use_mask_token"]) == (2, 1e-6, False)
    tensors = load_file(folder / "model.safetensors")
    assert tensors["embeddings.position_embeddings"].shape == (1, 16 // 4 * (16 // 4) + 1, 32)
    assert tensors["encoder.layer.1.layer_scale2.lambda1"].shape == (32,)
    assert "embeddings.mask_token" not in tensors


def test_an_intermediate_size_that_is_no_whole_multiple_of_the_width_is_refused(tmp_path):
    from attnzoo.keras.converters.hub_dinov2 import DINOV2
    from attnzoo.keras.transformers_form import HubSource

    specs = {"embeddings": {"patch": [4, 4], "channels": 3}, "encoder": {"hidden": 32, "mlp_dim": 48}}
    with pytest.raises(ExportError, match=r"intermediate_dim 48 is not a whole multiple of hidden_dim 32"):
        DINOV2.config(HubSource("DINOV2Backbone", "backbone", {"image_shape": [16, 16, 3]}, specs, {}))


def test_register_tokens_are_written_as_dinov2_with_registers_model(tmp_path):
    """A file of a seeded transformers Dinov2WithRegistersModel's weights (3 register tokens, SwiGLU): the
    folder names that class (AutoModel loads it as such) and holds its register tokens, and a mask token of
    zeros, which the class always has."""
    state = peer().state_dict()
    keras_file(state, tmp_path / "registers.keras")
    folder = to_transformers(tmp_path / "registers.keras", tmp_path / "registers")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Dinov2WithRegistersModel"]
    assert config["model_type"] == "dinov2_with_registers" and config["num_register_tokens"] == 3
    assert "use_mask_token" not in config  # Dinov2WithRegistersConfig has no such setting
    tensors = load_file(folder / "model.safetensors")
    torch.testing.assert_close(tensors["embeddings.register_tokens"], state["embeddings.register_tokens"])
    torch.testing.assert_close(tensors["embeddings.cls_token"], state["embeddings.cls_token"])
    assert tensors["embeddings.mask_token"].shape == (1, 16) and not tensors["embeddings.mask_token"].any()
    import transformers

    assert type(transformers.AutoModel.from_pretrained(folder)).__name__ == "Dinov2WithRegistersModel"


def _job(name: str, source, tmp_path, pixels: np.ndarray, specs: list, given: dict) -> None:
    """``source``'s folder written to ``tmp_path / name``, loaded by the child with AutoModel on ``pixels``."""
    to_transformers(source, tmp_path / name)
    given[f"{name}/pixel_values"] = np.ascontiguousarray(pixels)
    spec = {"name": name, "folder": str(tmp_path / name), "auto": "AutoModel", "kwargs": {}, "generate": []}
    specs.append({**spec, "inputs": ["pixel_values"], "outputs": ["last_hidden_state", "pooler_output"]})


@pytest.mark.slow
def test_transformers_dinov2_model_loads_the_folders_and_gives_keras_s_states(tmp_path):
    specs, given = [], {}
    for name, file in FILES.items():
        _job(name, DATA / file, tmp_path, EXPECTED["dinov2/in/images"].transpose(0, 3, 1, 2), specs, given)
    peer_pixels = PEER_IMAGES.permute(0, 3, 1, 2)
    # SwiGLU: a file of a seeded transformers Dinov2Model's weights (tests/test_keras_hub_dinov2.py)
    swiglu = peer(registers=0)
    keras_file(swiglu.state_dict(), tmp_path / "swiglu.keras", registers=0)
    _job("swiglu", tmp_path / "swiglu.keras", tmp_path, peer_pixels.numpy(), specs, given)
    # a position table made for 8 x 8 images, the backbone built for 16 x 16: the resized table is written
    resized = peer(registers=0)
    keras_file(resized.state_dict(), tmp_path / "resized.keras", registers=0, image=16)
    resized_pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    _job("resized", tmp_path / "resized.keras", tmp_path, resized_pixels.numpy(), specs, given)
    # register tokens: a seeded transformers Dinov2WithRegistersModel's weights; AutoModel loads that class
    registers = peer()
    keras_file(registers.state_dict(), tmp_path / "registers.keras")
    _job("registers", tmp_path / "registers.keras", tmp_path, peer_pixels.numpy(), specs, given)
    out = run_loader(tmp_path, specs, given)
    assert out["blocked"].all()
    with torch.no_grad():
        swiglu_states = swiglu(pixel_values=peer_pixels).last_hidden_state.numpy()
        resized_states = resized(pixel_values=resized_pixels).last_hidden_state.numpy()
        register_states = registers(pixel_values=peer_pixels).last_hidden_state.numpy()
        converted_states = convert_keras_model(tmp_path / "registers.keras")(PEER_IMAGES).numpy()
    # the register model's folder gives the converted model's states (and, below, the peer's)
    worst = float(np.abs(out["registers/last_hidden_state"] - converted_states).max())
    print(f"registers against the converted model: max difference {worst:.3g}")
    assert worst <= 1e-5, worst
    cases = [*((name, EXPECTED["dinov2/out/output"]) for name in FILES), ("swiglu", swiglu_states)]
    for name, want in [*cases, ("resized", resized_states), ("registers", register_states)]:
        assert json.loads(str(out[f"{name}/loading"])) == {}, name  # no missing, unexpected or mismatched weight
        got = out[f"{name}/last_hidden_state"]
        assert got.shape == want.shape
        worst = float(np.abs(got - want).max())
        print(f"{name} through the folder: max difference {worst:.3g}")
        assert worst <= 1e-5, worst
        assert np.abs(out[f"{name}/pooler_output"] - want[:, 0]).max() <= 1e-5
