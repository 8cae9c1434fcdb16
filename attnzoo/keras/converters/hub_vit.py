"""keras-hub's ViT family: ``ViTBackbone`` rebuilt from its arguments, and its layers converted without
keras-hub: ``ViTPatchingAndEmbedding`` and ``ViTEncoder``.

* ``ViTPatchingAndEmbedding``: images [B, H, W, C] (channels last, as Keras) -> patches of ph x pw by a
  ``Conv2d`` of stride = kernel = patch -> [B, N, D] (row by row), the class token first where the model
  has one -> plus the position table [N (+1), D].
* ``ViTEncoder``: x [B, N, D] -> ``num_layers`` pre-norm blocks, each ``x + MHA(ln₁(x))`` then
  ``x + W₂ · gelu(W₁ · ln₂(x) + b₁) + b₂`` (exact gelu), the attention Keras's ``MultiHeadAttention`` of
  ``key_dim = D / heads`` (softmax(q kᵀ / √key_dim) v, no mask) -> a final layer norm -> [B, N, D].

Both are registered under keras-hub's names (``keras_hub>ViTEncoder``); the graph of a ``ViTBackbone`` is
rebuilt from its arguments (:func:`vit_graph`).

Hugging Face form (:data:`VIT`): ``ViTModel`` without its pooler (keras-hub's ViTBackbone has none: load it
with ``add_pooling_layer=False``), which takes ``pixel_values`` [B, C, H, W] where keras-hub takes [B, H, W, C].
The patch ``Conv2d``, the class token [1, 1, D] and the position table [1, N + 1, D] (class token first,
patches row by row in both) go as they are; the blocks are transformers' ``ViTLayer`` (pre-norm, exact gelu,
ε ``layer_norm_epsilon``). transformers' ViT always has a class token: a backbone without one is refused. A
bias keras-hub leaves out (``use_mha_bias``, ``use_mlp_bias``, ``use_patch_bias`` False) is written as zeros
where transformers' layer always has one, and ``qkv_bias`` says so for the query, key and value. The weights
carry the names of the Hub's ViT checkpoints (``encoder.layer.<i>.attention.attention.query``), which every
transformers version loads (version 5 renames them as it reads them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, positive, tensor
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import keras_attention

__all__ = [
    "HubViTEmbedding",
    "HubViTEncoder",
    "ViTBlock",
    "vit_dense",
    "patch_images",
    "vit_graph",
    "VIT",
    "encoder_tensors",
    "encoder_config",
]


class HubViTEmbedding(Node):
    """Images [B, H, W, C] -> patch embeddings (after the class token, and DeiT's distillation token) +
    positions [B, N (+1 or 2), D] (then DINOv2's ``registers`` learned tokens, unpositioned, after the
    class token: [B, N + 1 + registers, D]); no mask."""

    op = "keras_hub_vit_embedding"
    reads_mask = False

    def __init__(
        self,
        *,
        channels: int,
        hidden: int,
        patch: list[int],
        positions: int,
        class_token: bool,
        bias: bool,
        distillation_token: bool = False,
        registers: int = 0,
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(channels, hidden, tuple(patch), stride=tuple(patch), bias=bias)
        self.position = nn.Parameter(torch.zeros(positions, hidden))
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden)) if class_token else None
        # DeiT's second learned token, after the class token
        self.distillation_token = nn.Parameter(torch.zeros(1, 1, hidden)) if distillation_token else None
        self.registers = nn.Parameter(torch.zeros(1, registers, hidden)) if registers else None

    def compute(self, x, mask):
        patches = self.patch(x.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)  # [B, N, D], row by row
        tokens = [t for t in (self.class_token, self.distillation_token) if t is not None]
        if tokens:
            patches = torch.cat([*(t.expand(x.shape[0], -1, -1) for t in tokens), patches], dim=1)
        if patches.shape[1] != self.position.shape[0]:
            raise ValueError(
                f"images of {x.shape[1]}x{x.shape[2]} make {patches.shape[1]} positions; the model has "
                f"{self.position.shape[0]} (give images of the size it was built for)"
            )
        x = patches + self.position
        if self.registers is not None:  # DINOv2's register tokens go in after the positions are added
            x = torch.cat([x[:, :1], self.registers.expand(x.shape[0], -1, -1), x[:, 1:]], dim=1)
        return x


class ViTBlock(nn.Module):
    """One pre-norm ViT encoder block (the module docstring's formula)."""

    def __init__(self, hidden: int, heads: int, mlp: int, epsilon: float, mha_bias: bool, mlp_bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.norm_1 = nn.LayerNorm(hidden, eps=epsilon)
        self.query = nn.Linear(hidden, hidden, bias=mha_bias)
        self.key = nn.Linear(hidden, hidden, bias=mha_bias)
        self.value = nn.Linear(hidden, hidden, bias=mha_bias)
        self.output = nn.Linear(hidden, hidden, bias=mha_bias)
        self.norm_2 = nn.LayerNorm(hidden, eps=epsilon)
        self.dense_1 = nn.Linear(hidden, mlp, bias=mlp_bias)
        self.dense_2 = nn.Linear(mlp, hidden, bias=mlp_bias)

    def attend(self, y: Tensor, attention_dropout: float) -> Tensor:
        """The attention branch on the normed ``y`` [B, N, D], through the output projection."""
        b, n, d = y.shape
        q, k, v = (
            layer(y).reshape(b, n, self.heads, -1).transpose(1, 2) for layer in (self.query, self.key, self.value)
        )
        rate = attention_dropout if self.training else 0.0
        attended = keras_attention(q, k, v, None, scale=q.shape[-1] ** -0.5, dropout=rate)
        return self.output(attended.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: Tensor, dropout: float, attention_dropout: float) -> Tensor:
        x = x + F.dropout(self.attend(self.norm_1(x), attention_dropout), dropout, self.training)
        y = F.dropout(F.gelu(self.dense_1(self.norm_2(x))), dropout, self.training)
        return x + F.dropout(self.dense_2(y), dropout, self.training)


class HubViTEncoder(Node):
    """x [B, N, D] -> ``num_layers`` blocks -> layer norm [B, N, D]; no mask."""

    op = "keras_hub_vit_encoder"
    reads_mask = False

    def __init__(
        self,
        *,
        hidden: int,
        num_layers: int,
        num_heads: int,
        mlp_dim: int,
        layer_norm_epsilon: float = 1e-6,
        use_mha_bias: bool = True,
        use_mlp_bias: bool = True,
        dropout_rate: float = 0.0,
        attention_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.dropout, self.attention_dropout = dropout_rate, attention_dropout
        self.blocks = nn.ModuleList(
            ViTBlock(hidden, num_heads, mlp_dim, layer_norm_epsilon, use_mha_bias, use_mlp_bias)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(hidden, eps=layer_norm_epsilon)

    def compute(self, x, mask):
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, self.dropout, self.attention_dropout)
        return self.norm(x)


def _flag(config: dict[str, Any], name: str) -> bool:
    value = config.get(name, True)
    if not isinstance(value, bool):
        raise Refused(f"{name}={value!r} is not a bool")
    return value


def _pair(value: Any, name: str) -> list[int]:
    pair = [value, value] if isinstance(value, int) else value
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise Refused(f"{name}={value!r} is not a positive int or a pair of them")
    return list(pair)


@keras_layer("ViTPatchingAndEmbedding", package="keras_hub", child_order=("patch_embedding", "position_embedding"))
def convert_vit_embedding(record, arrays, ctx):
    c = record.config
    if c.get("data_format", "channels_last") != "channels_last":
        raise Refused(f"data_format={c.get('data_format')!r} is not supported (only channels_last)")
    token, bias = _flag(c, "use_class_token"), _flag(c, "use_patch_bias")
    expected = int(token) + 2 + int(bias)
    if len(arrays) != expected:
        raise Refused(f"has {len(arrays)} variables; with these settings ViTPatchingAndEmbedding has {expected}")
    patch = _pair(c.get("patch_size"), "patch_size")
    kernel = arrays[int(token)]
    if list(kernel.shape[:2]) != patch:
        raise Refused(f"patch_embedding's kernel {list(kernel.shape)} is not of patch size {patch}")
    positions = arrays[-1]
    spec = {
        "op": HubViTEmbedding.op,
        "channels": int(kernel.shape[2]),
        "hidden": int(kernel.shape[3]),
        "patch": patch,
        "positions": int(positions.shape[0]),
        "class_token": token,
        "bias": bias,
    }
    state = {"patch.weight": as_tensor(kernel.transpose(3, 2, 0, 1)), "position": as_tensor(positions)}
    if bias:
        state["patch.bias"] = as_tensor(arrays[int(token) + 1])
    if token:
        state["class_token"] = as_tensor(arrays[0])
    return Converted(spec, state, ["keras-hub ViTPatchingAndEmbedding: nn.Conv2d patches, class token, positions"])


# the blocks' groups in the weights file, in order (keras names them by class: vi_t_encoder_block, ..._1, ...;
# sorted as text, _10 would come before _2)
_BLOCKS = tuple(f"encoder_layers/vi_t_encoder_block{'' if i == 0 else f'_{i}'}" for i in range(256))


def vit_dense(prefix: str, arrays: list[np.ndarray], bias: bool) -> dict[str, Tensor]:
    """A Keras kernel [D_in, ...] (or the attention output's [heads, key_dim, D], whose heads are the inputs)
    and bias as ``nn.Linear``'s ``weight`` [out, in] and ``bias``."""
    kernel = arrays[0]
    if kernel.ndim == 3 and prefix.endswith("output"):
        matrix = kernel.reshape(-1, kernel.shape[-1])
    else:
        matrix = kernel.reshape(kernel.shape[0], -1)
    state = {f"{prefix}.weight": as_tensor(matrix.T)}
    if bias:
        state[f"{prefix}.bias"] = as_tensor(arrays[1].reshape(-1))
    return state


@keras_layer("ViTEncoder", package="keras_hub", child_order=("encoder_layers", "layer_norm", *_BLOCKS))
def convert_vit_encoder(record, arrays, ctx):
    c = record.config
    mha_bias, mlp_bias = _flag(c, "use_mha_bias"), _flag(c, "use_mlp_bias")
    layers, heads = c.get("num_layers"), c.get("num_heads")
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads)):
        raise Refused(f"num_layers={layers!r} and num_heads={heads!r} are not positive ints")
    m, p = 1 + int(mha_bias), 1 + int(mlp_bias)
    per_block = 4 + 4 * m + 2 * p
    if len(arrays) != layers * per_block + 2:
        raise Refused(
            f"has {len(arrays)} variables; {layers} blocks of {per_block} and a layer norm make "
            f"{layers * per_block + 2}"
        )
    hidden, mlp = int(arrays[0].shape[0]), int(arrays[4 + 4 * m].shape[1])
    if hidden % heads:
        raise Refused(f"hidden size {hidden} is not a multiple of num_heads {heads}")
    state: dict[str, Tensor] = {}
    for i in range(layers):
        block, at = arrays[i * per_block : (i + 1) * per_block], f"blocks.{i}"
        state |= {f"{at}.norm_1.weight": as_tensor(block[0]), f"{at}.norm_1.bias": as_tensor(block[1])}
        state |= {f"{at}.norm_2.weight": as_tensor(block[2]), f"{at}.norm_2.bias": as_tensor(block[3])}
        for j, name in enumerate(("key", "output", "query", "value")):  # the file's (sorted) order
            state |= vit_dense(f"{at}.{name}", block[4 + j * m : 4 + (j + 1) * m], mha_bias)
        state |= vit_dense(f"{at}.dense_1", block[4 + 4 * m : 4 + 4 * m + p], mlp_bias)
        state |= vit_dense(f"{at}.dense_2", block[4 + 4 * m + p :], mlp_bias)
    state |= {"norm.weight": as_tensor(arrays[-2]), "norm.bias": as_tensor(arrays[-1])}
    spec = {
        "op": HubViTEncoder.op,
        "hidden": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "mlp_dim": mlp,
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "use_mha_bias": mha_bias,
        "use_mlp_bias": mlp_bias,
        "dropout_rate": float(c.get("dropout_rate", 0.0) or 0.0),
        "attention_dropout": float(c.get("attention_dropout", 0.0) or 0.0),
    }
    return Converted(spec, state, [f"keras-hub ViTEncoder: {layers} pre-norm blocks of SDPA and an exact-gelu MLP"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _vit_config(m: HubSource) -> dict[str, Any]:
    embedding, encoder = m.spec("vit_patching_and_embedding"), m.spec("vit_encoder")
    if not embedding.get("class_token"):
        m.refuse("it has no class token (use_class_token=False), and transformers' ViT always prepends one")
    shape = m.arguments.get("image_shape")
    return {
        **encoder_config(encoder),
        "image_size": list(shape[:2]) if isinstance(shape, list) else shape,
        "patch_size": list(embedding["patch"]),
        "num_channels": int(embedding["channels"]),
    }


_VIT_BLOCK = (
    ("layernorm_before", "norm_1"),
    ("attention.attention.query", "query"),
    ("attention.attention.key", "key"),
    ("attention.attention.value", "value"),
    ("attention.output.dense", "output"),
    ("layernorm_after", "norm_2"),
    ("intermediate.dense", "dense_1"),
    ("output.dense", "dense_2"),
)


def encoder_tensors(m: HubSource, layer: str, base: str = "") -> Tensors:
    """transformers' ViT-style encoder weights (``<base>encoder.layer.<i>...``, then ``<base>layernorm``) from
    the converted encoder ``layer`` (:class:`HubViTEncoder`); a bias keras-hub has not is zeros, except the
    query's, key's and value's, which ``qkv_bias`` leaves out. Shared with DeiT."""
    for i in range(int(m.spec(layer)["num_layers"])):
        for theirs, ours in _VIT_BLOCK:
            at = f"{layer}.blocks.{i}.{ours}"
            weight = m.tensor(f"{at}.weight")
            yield f"{base}encoder.layer.{i}.{theirs}.weight", weight
            if m.holds(f"{at}.bias"):
                yield f"{base}encoder.layer.{i}.{theirs}.bias", m.tensor(f"{at}.bias")
            elif ours not in ("query", "key", "value"):  # qkv_bias=False leaves those three out
                yield f"{base}encoder.layer.{i}.{theirs}.bias", weight.new_zeros(weight.shape[0])
    yield f"{base}layernorm.weight", m.tensor(f"{layer}.norm.weight")
    yield f"{base}layernorm.bias", m.tensor(f"{layer}.norm.bias")


def encoder_config(encoder: Any) -> dict[str, Any]:
    """config.json's entries of a converted :class:`HubViTEncoder` spec (ViT's and DeiT's)."""
    return {
        "hidden_size": int(encoder["hidden"]),
        "num_hidden_layers": int(encoder["num_layers"]),
        "num_attention_heads": int(encoder["num_heads"]),
        "intermediate_size": int(encoder["mlp_dim"]),
        "hidden_act": "gelu",
        "hidden_dropout_prob": float(encoder.get("dropout_rate", 0.0)),
        "attention_probs_dropout_prob": float(encoder.get("attention_dropout", 0.0)),
        "layer_norm_eps": float(encoder["layer_norm_epsilon"]),
        "qkv_bias": bool(encoder.get("use_mha_bias", True)),
    }


def _vit_tensors(m: HubSource) -> Tensors:
    """transformers' ViT weights (the Hub checkpoints' names); a bias keras-hub has not is zeros."""
    position = m.tensor("vit_patching_and_embedding.position")
    patch = m.tensor("vit_patching_and_embedding.patch.weight")
    yield "embeddings.cls_token", m.tensor("vit_patching_and_embedding.class_token")
    yield "embeddings.position_embeddings", position[None]
    yield "embeddings.patch_embeddings.projection.weight", patch
    bias = "vit_patching_and_embedding.patch.bias"
    yield (
        "embeddings.patch_embeddings.projection.bias",
        (m.tensor(bias) if m.holds(bias) else patch.new_zeros(len(patch))),
    )
    yield from encoder_tensors(m, "vit_encoder")


VIT = TransformersForm(
    "vit", {"backbone": "ViTModel"}, _vit_config, _vit_tensors, load_with={"backbone": {"add_pooling_layer": False}}
)


# -- the family's model ------------------------------------------------------------------------------------
def patch_images(g: HubGraph, config: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """A patch-embedding backbone's (ViT's, DeiT's) checked ``image_shape`` [H, W, C] (channels last) and
    ``patch_size`` (an int or [ph, pw]): its ``images`` input in ``g`` and its embedding layer's settings
    (``image_size``, ``patch_size``, ``hidden_dim``, ``num_channels``)."""
    shape, patch = config.get("image_shape"), config.get("patch_size")
    patch = [patch, patch] if isinstance(patch, int) else patch
    if config.get("data_format") not in (None, "channels_last"):
        raise WeightsError(f"{where}: data_format {config.get('data_format')!r}; attnzoo converts channels_last only")
    ok = isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)
    if not ok or not isinstance(patch, list) or len(patch) != 2 or not all(isinstance(v, int) and v > 0 for v in patch):
        raise WeightsError(f"{where}: image_shape {shape!r} and patch_size {patch!r} are not positive ints")
    hidden = positive(config, "hidden_dim", where)
    images = g.input("images", list(shape), "float32")
    return images, {"image_size": shape[:2], "patch_size": patch, "hidden_dim": hidden, "num_channels": shape[2]}


@keras_hub_model("ViTBackbone", family="vit", transformers=VIT)
def vit_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``ViTBackbone``: images [B, H, W, C] -> ``vit_patching_and_embedding`` (patches, class token,
    positions) -> ``vit_encoder`` (pre-norm blocks, final layer norm) -> [B, N (+1), D]."""
    g = HubGraph(config.get("dtype"))
    images, embedding = patch_images(g, config, where)
    hidden = embedding["hidden_dim"]
    embedding |= {key: config.get(key, True) for key in ("use_class_token", "use_patch_bias")}
    module = "keras_hub.src.models.vit.vit_layers"
    x = g.hub_layer("ViTPatchingAndEmbedding", "vit_patching_and_embedding", embedding, [tensor(images)], module)
    encoder = {key: config.get(key) for key in ("num_layers", "num_heads", "mlp_dim", "layer_norm_epsilon")}
    encoder |= {key: config.get(key, True) for key in ("use_mha_bias", "use_mlp_bias")}
    encoder |= {key: config.get(key, 0.0) for key in ("dropout_rate", "attention_dropout")}
    x = g.hub_layer("ViTEncoder", "vit_encoder", {"hidden_dim": hidden, **encoder}, [tensor(x)], module)
    return g.functional(str(config.get("name", "vit_backbone")), {"images": images}, x)
