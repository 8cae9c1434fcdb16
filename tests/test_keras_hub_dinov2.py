"""keras-hub's DINOV2Backbone converts without keras-hub: patches by a strided Conv2d, the class token, the
position table, pre-norm encoder blocks with layer scale, a final layer norm.

The tiny DINOv2 was made once with keras 3 (torch backend) and keras-hub 0.32 (tests/keras_hub_route_fixtures.py),
every weight moved off its initial value, saved as a .keras file and a ``save_to_preset`` folder. Keras's
outputs (of the reloaded file: keras-hub's load recomputes the interpolated position table from the position
table) are in expected.npz; the converted model must agree within 1e-5.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_route"
EXPECTED = dict(np.load(DATA / "expected.npz"))
IMAGES = torch.from_numpy(EXPECTED["dinov2/in/images"])


@pytest.mark.usefixtures("without_keras_hub")
@pytest.mark.parametrize("name", ["dinov2.keras", "dinov2_preset"])
def test_a_dinov2_backbone_predicts_what_keras_predicts(name):
    model = convert_keras_model(DATA / name)
    assert model.input_names == ["images"]
    with torch.no_grad():
        got = model(IMAGES).numpy()
    assert got.shape == (2, 17, 32)  # the class token and 4 x 4 patches
    np.testing.assert_allclose(got, EXPECTED["dinov2/out/output"], atol=1e-5, rtol=0)


def test_a_converted_dinov2_saves_and_loads_and_trains(tmp_path):
    model = attnzoo.load(attnzoo.save(convert_keras_model(DATA / "dinov2.keras"), tmp_path / "saved"))
    with torch.no_grad():
        np.testing.assert_allclose(model(IMAGES).numpy(), EXPECTED["dinov2/out/output"], atol=1e-5, rtol=0)
    model.train()
    model(IMAGES).square().mean().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and g.abs().sum() > 0 for g in grads.values()), [n for n, g in grads.items() if g is None]


def _preset_with(tmp_path, **changes):
    """The fixture's preset folder with its backbone's arguments changed."""
    folder = shutil.copytree(DATA / "dinov2_preset", tmp_path / "preset")
    config = json.loads((folder / "config.json").read_text())
    config["config"] |= changes
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"drop_path_rate": 0.1}, "drop_path_rate=0.1: attnzoo converts DINOv2 with drop_path_rate 0 only"),
    ],
)
def test_a_configuration_attnzoo_does_not_compute_is_refused_by_name(tmp_path, changes, message):
    with pytest.raises(WeightsError, match=message):
        convert_keras_model(_preset_with(tmp_path, **changes))


PEER_IMAGES = torch.randn(2, 8, 8, 3, generator=torch.Generator().manual_seed(1))

# -- register tokens and SwiGLU: no keras-hub fixture has them; transformers' DINOv2 is the peer ---------------
PEER = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "mlp_ratio": 4, "image_size": 8}
PEER |= {"patch_size": 4, "num_register_tokens": 3, "use_swiglu_ffn": True, "layer_norm_eps": 1e-6}


def peer(registers: int = 3):
    """A seeded transformers Dinov2WithRegistersModel (SwiGLU, ``registers`` register tokens; Dinov2Model
    where 0), every weight moved."""
    import transformers

    torch.manual_seed(0)
    if registers:
        config = transformers.Dinov2WithRegistersConfig(**(PEER | {"num_register_tokens": registers}))
        model = transformers.Dinov2WithRegistersModel(config).eval()
    else:
        config = transformers.Dinov2Config(**{k: v for k, v in PEER.items() if k != "num_register_tokens"})
        model = transformers.Dinov2Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def keras_file(state: dict, path, registers: int = 3, image: int = 8) -> None:
    """keras-hub 0.32's DINOV2Backbone file of transformers' weights ``state``: its arguments and its
    weights under keras-hub's groups (dinov2_layers.py: own variables by creation, trainable first), its
    position table made for 8 x 8 images, its ``image_shape`` ``image`` x ``image``."""
    import h5py

    s = {key: value.numpy() for key, value in state.items()}
    buffer, heads = io.BytesIO(), PEER["num_attention_heads"]
    with h5py.File(buffer, "w") as f:
        e = "layers/dinov2_embedding"
        own = ["cls_token", "mask_token", *(["register_tokens"] if registers else [])]
        own += ["position_embeddings", "position_embeddings"]
        for i, name in enumerate(own):  # the interpolated table (made for the same size) then the table
            f[f"{e}/vars/{i}"] = s[f"embeddings.{name}"]
        f[f"{e}/patch_embeddings/projection/vars/0"] = s["embeddings.patch_embeddings.projection.weight"].transpose(
            2, 3, 1, 0
        )
        f[f"{e}/patch_embeddings/projection/vars/1"] = s["embeddings.patch_embeddings.projection.bias"]
        for i in range(PEER["num_hidden_layers"]):
            at, t = f"layers/dinov2_encoder/layers/dinov2_layer{'_' + str(i) if i else ''}", f"encoder.layer.{i}"
            for keras, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
                w, b = s[f"{t}.attention.{theirs}.weight"], s[f"{t}.attention.{theirs}.bias"]
                f[f"{at}/attention/attention/{keras}_dense/vars/0"] = w.T.reshape(16, heads, -1)
                f[f"{at}/attention/attention/{keras}_dense/vars/1"] = b.reshape(heads, -1)
            f[f"{at}/attention/attention/output_dense/vars/0"] = s[f"{t}.attention.o_proj.weight"].T.reshape(
                heads, -1, 16
            )
            f[f"{at}/attention/attention/output_dense/vars/1"] = s[f"{t}.attention.o_proj.bias"]
            f[f"{at}/layer_scale1/vars/0"] = s[f"{t}.layer_scale1.lambda1"]
            f[f"{at}/layer_scale2/vars/0"] = s[f"{t}.layer_scale2.lambda1"]
            gate_up = [s[f"{t}.mlp.{n}_proj.weight"].T for n in ("gate", "up")]  # keras-hub's x1 (silu'd), x2
            f[f"{at}/mlp/weights_in/vars/0"] = np.concatenate(gate_up, axis=1)
            f[f"{at}/mlp/weights_in/vars/1"] = np.concatenate([s[f"{t}.mlp.{n}_proj.bias"] for n in ("gate", "up")])
            f[f"{at}/mlp/weights_out/vars/0"] = s[f"{t}.mlp.down_proj.weight"].T
            f[f"{at}/mlp/weights_out/vars/1"] = s[f"{t}.mlp.down_proj.bias"]
            for n in ("norm1", "norm2"):
                f[f"{at}/{n}/vars/0"], f[f"{at}/{n}/vars/1"] = s[f"{t}.{n}.weight"], s[f"{t}.{n}.bias"]
        f["layers/layer_normalization/vars/0"] = s["layernorm.weight"]
        f["layers/layer_normalization/vars/1"] = s["layernorm.bias"]
    arguments = {"name": "dinov2_backbone", "trainable": True, "dtype": "float32", "patch_size": 4}
    arguments |= {"num_layers": 2, "hidden_dim": 16, "num_heads": heads, "intermediate_dim": 64}
    arguments |= {"layer_scale_init_value": 1.0, "num_register_tokens": registers}
    arguments["use_mask_token"] = True
    arguments |= {"use_swiglu_ffn": True, "dropout_rate": 0.0, "drop_path_rate": 0.0, "image_shape": [image, image, 3]}
    arguments |= {"position_embedding_shape": [8, 8, 3], "antialias_in_interpolation": False}
    arguments["apply_layernorm"] = False
    record = {"module": "keras_hub.src.models.dinov2.dinov2_backbone", "class_name": "DINOV2Backbone"}
    record |= {"config": arguments, "registered_name": "keras_hub>DINOV2Backbone"}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(record))
        z.writestr("model.weights.h5", buffer.getvalue())


def test_register_tokens_and_swiglu_compute_what_transformers_dinov2_with_registers_computes(tmp_path):
    model = peer()
    keras_file(model.state_dict(), tmp_path / "dinov2.keras")
    with torch.no_grad():
        want = model(pixel_values=PEER_IMAGES.permute(0, 3, 1, 2)).last_hidden_state
        got = convert_keras_model(tmp_path / "dinov2.keras")(PEER_IMAGES)
    assert got.shape == want.shape == (2, 1 + 3 + 4, 16)  # the class token, 3 registers, 2 x 2 patches
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_a_position_table_made_for_another_image_size_is_resized_as_transformers_dinov2_resizes_it(tmp_path):
    """The table made for 8 x 8 images (2 x 2 patches), the backbone built for 16 x 16 (4 x 4): keras-hub's
    load resizes it bicubically, transformers' Dinov2 on 16 x 16 pixel values too."""
    model = peer(registers=0)
    keras_file(model.state_dict(), tmp_path / "dinov2.keras", registers=0, image=16)
    images = torch.randn(2, 16, 16, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(pixel_values=images.permute(0, 3, 1, 2)).last_hidden_state
        got = convert_keras_model(tmp_path / "dinov2.keras")(images)
    assert got.shape == want.shape == (2, 1 + 16, 16)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
