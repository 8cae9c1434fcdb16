"""keras-hub's DINOv2 family: ``DINOV2Backbone`` (keras-hub 0.32's ``dinov2_backbone.py``) rebuilt from its
arguments; its layers converted without keras-hub.

* ``DINOV2Embedding``: images [B, H, W, C] (channels last) -> patches of p x p by a ``Conv2d`` of stride =
  kernel = p -> [B, N, D] (row by row) -> the class token first -> plus the position table [N + 1, D] ->
  the register tokens (``num_register_tokens``, unpositioned) after the class token -> [B, 1 + R + N, D]
  (ViT's :class:`~attnzoo.keras.converters.hub_vit.HubViTEmbedding`). The mask token is never used by the
  backbone's graph (it passes no masks), so it is dropped.
* ``DINOV2Encoder``: x [B, N, D] -> ``num_layers`` pre-norm blocks with layer scale, each
  ``x + γ₁ ⊙ MHA(ln₁(x))`` then ``x + γ₂ ⊙ (W₂ · gelu(W₁ · ln₂(x) + b₁) + b₂)`` (exact gelu, ε 1e-6),
  the attention Keras's ``MultiHeadAttention`` of ``key_dim = D / heads`` (softmax(q kᵀ / √key_dim) v) ->
  [B, N, D]; with ``use_swiglu_ffn`` the feed-forward is ``W₂ · (silu(a) ⊙ b) + b₂`` of
  ``[a, b] = W₁ · ln₂(x) + b₁``, of keras-hub's width ``(int(intermediate_dim · 2/3) + 7) // 8 · 8``.
  The backbone's ``layernorm`` (``LayerNormalization``, ε 1e-6) follows as a Keras layer.

The position table: keras-hub keeps two, ``position_embeddings`` (made for ``position_embedding_shape``) and
``interpolated_position_embeddings`` (for ``image_shape``), and on load recomputes the second from the first;
attnzoo reads the first and resizes it as that load does (:func:`_resized`). Refused by name:
``drop_path_rate`` > 0 (keras-hub's ``DINOV2DropPath`` scales by a uniform draw it never floors).

Hugging Face form (:data:`DINOV2`): ``Dinov2Model``, which takes ``pixel_values`` [B, C, H, W] where
keras-hub takes [B, H, W, C], and whose ``last_hidden_state`` is the backbone's output. The patch ``Conv2d``,
the class token [1, 1, D] and the position table [1, N + 1, D] go as they are (transformers, as keras-hub,
uses the table as it is for images of the size it was made for: the resized one is written, with
``image_size`` the backbone's); the blocks carry the Hub's DINOv2
checkpoints' names (``encoder.layer.<i>.attention.attention.query``, ``layer_scale1.lambda1``), ε 1e-6,
``mlp_ratio`` = ``intermediate_dim`` / ``hidden_dim`` (refused where that is not a whole number), SwiGLU's
``mlp.weights_in`` and ``mlp.weights_out`` as the Hub's checkpoints name them. The mask token, which attnzoo
drops, is not written: ``use_mask_token`` is False.

A backbone with register tokens is transformers' ``Dinov2WithRegistersModel`` instead (config.json's
``model_type`` ``dinov2_with_registers`` and ``architectures`` say so, ``num_register_tokens`` R): the same
blocks under the same names, the tokens [1, R, D] as ``embeddings.register_tokens``, which it too puts after
the class token once the positions are added, unpositioned. Its configuration has no ``use_mask_token``: it
always holds ``embeddings.mask_token`` [1, D], read only when given ``bool_masked_pos`` (an input the backbone
has not), which is written as zeros (its own initial value).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor
from attnzoo.keras.converters.hub_vit import HubViTEmbedding, ViTBlock, vit_dense
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.hub_vision import config_keys
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["HubDINOv2Encoder", "dinov2_graph", "DINOV2"]

EPSILON = 1e-6  # keras-hub 0.32 fixes every DINOv2 layer norm's ε


def _unsupported(config: dict[str, Any]) -> str | None:
    """Why attnzoo does not compute this DINOv2 configuration (backbone or layer arguments), or None."""
    if config.get("drop_path_rate", 0.0):
        return f"drop_path_rate={config['drop_path_rate']!r}: attnzoo converts DINOv2 with drop_path_rate 0 only"
    if config.get("data_format") not in (None, "channels_last"):
        return f"data_format {config.get('data_format')!r}: attnzoo converts channels_last only"
    return None


def _resized(table: np.ndarray, c: dict[str, Any], patch: int) -> np.ndarray:
    """The position table [1, 1 + n², D] (made for ``position_embedding_shape``) as keras-hub's load makes it
    for ``image_shape``: the class token's row kept, the n x n patch rows resized bicubically (torch's
    ``interpolate``, corners unaligned, ``antialias_in_interpolation``: what keras-hub's load computes on
    Keras's torch backend, and transformers' Dinov2 on an image of another size) to the image's patch grid.
    The table itself where both shapes are the same (keras-hub copies it)."""
    image, source = c.get("image_shape"), c.get("position_embedding_shape")
    if not all(isinstance(v, (list, tuple)) and len(v) >= 2 for v in (image, source)):
        raise Refused(f"image_shape {image!r} and position_embedding_shape {source!r} are not (height, width)")
    if list(image)[:2] == list(source)[:2]:
        return table
    side, hidden = round((table.shape[1] - 1) ** 0.5), table.shape[2]
    if side * side != table.shape[1] - 1:
        raise Refused(f"the position table's {table.shape[1] - 1} patch rows are not a square grid")
    grid = torch.from_numpy(np.ascontiguousarray(table[:, 1:], dtype=np.float32))
    grid = grid.reshape(1, side, side, hidden).permute(0, 3, 1, 2)
    size = (int(image[0]) // patch, int(image[1]) // patch)
    antialias = bool(c.get("antialias_in_interpolation", False))
    grid = F.interpolate(grid, size=size, mode="bicubic", align_corners=False, antialias=antialias)
    rows = grid.permute(0, 2, 3, 1).reshape(1, -1, hidden).numpy().astype(table.dtype)
    return np.concatenate([table[:, :1], rows], axis=1)


@keras_layer("DINOV2Embedding", package="keras_hub")
def convert_dinov2_embedding(record, arrays, ctx):
    """Variables: the class token, the mask token (where ``use_mask_token``), the register tokens (where
    ``num_register_tokens`` > 0), the interpolated table, the position table [1, N + 1, D], then the patch
    convolution's kernel and bias."""
    c = record.config
    why = _unsupported(c)
    if why:
        raise Refused(why)
    registers = c.get("num_register_tokens", 0)
    if not isinstance(registers, int) or registers < 0:
        raise Refused(f"num_register_tokens={registers!r} is not an int >= 0")
    expected = 5 + int(bool(c.get("use_mask_token", True))) + int(registers > 0)
    if len(arrays) != expected:
        raise Refused(f"has {len(arrays)} variables; with these settings DINOV2Embedding has {expected}")
    cls, kernel, bias = arrays[0], arrays[-2], arrays[-1]
    positions = _resized(arrays[-3], c, int(kernel.shape[0]))
    spec = {"op": HubViTEmbedding.op, "channels": int(kernel.shape[2]), "hidden": int(kernel.shape[3])}
    spec |= {"patch": [int(kernel.shape[0]), int(kernel.shape[1])], "positions": int(positions.shape[1])}
    spec |= {"class_token": True, "bias": True, "registers": registers}
    state = {"patch.weight": as_tensor(kernel.transpose(3, 2, 0, 1)), "patch.bias": as_tensor(bias)}
    state |= {"position": as_tensor(positions[0]), "class_token": as_tensor(cls)}
    if registers:
        state["registers"] = as_tensor(arrays[-5])  # before the interpolated table and the position table
    return Converted(spec, state, ["keras-hub DINOV2Embedding: nn.Conv2d patches, class token, position table"])


class _ScaledBlock(nn.Module):
    """ViT's pre-norm block (``inner``) with DINOv2's layer scale γ₁, γ₂ [D] on each branch and, where
    ``swiglu``, the feed-forward ``W₂ · (silu(a) ⊙ b) + b₂`` of ``[a, b] = W₁ · ln₂(x) + b₁`` (``W₁`` [2 mlp, D])
    (the module docstring)."""

    def __init__(self, hidden: int, heads: int, mlp: int, swiglu: bool) -> None:
        super().__init__()
        self.inner = ViTBlock(hidden, heads, mlp, EPSILON, True, True)
        if swiglu:  # keras-hub's weights_in holds a and b side by side
            self.inner.dense_1 = nn.Linear(hidden, 2 * mlp)
        self.swiglu = swiglu
        self.scale_1 = nn.Parameter(torch.ones(hidden))
        self.scale_2 = nn.Parameter(torch.ones(hidden))

    def forward(self, x: Tensor, dropout: float) -> Tensor:
        # keras-hub's DINOV2Attention drops its output at the rate of its attention probabilities; the MLP none
        b = self.inner
        x = x + self.scale_1 * F.dropout(b.attend(b.norm_1(x), dropout), dropout, self.training)
        y = b.dense_1(b.norm_2(x))
        if self.swiglu:
            gate, up = y.chunk(2, dim=-1)
            y = F.silu(gate) * up
        else:
            y = F.gelu(y)
        return x + self.scale_2 * b.dense_2(y)


class HubDINOv2Encoder(Node):
    """x [B, N, D] -> dropout (keras-hub's embedding dropout) -> ``num_layers`` layer-scaled blocks ->
    [B, N, D]; no mask."""

    op = "keras_hub_dinov2_encoder"
    reads_mask = False

    def __init__(
        self,
        *,
        hidden: int,
        num_layers: int,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        swiglu: bool = False,
    ) -> None:
        super().__init__()
        self.dropout = dropout_rate
        self.blocks = nn.ModuleList(_ScaledBlock(hidden, num_heads, mlp_dim, swiglu) for _ in range(num_layers))

    def compute(self, x, mask):
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, self.dropout)
        return x


# the blocks' groups in the weights file, in order (sorted as text, _10 would come before _2)
_BLOCKS = tuple(f"layers/dinov2_layer{'' if i == 0 else f'_{i}'}" for i in range(256))
_PER_BLOCK = 18  # 4 attention denses x 2, 2 layer scales, fc1 and fc2 x 2, 2 layer norms x 2


@keras_layer("DINOV2Encoder", package="keras_hub", child_order=("layers", *_BLOCKS))
def convert_dinov2_encoder(record, arrays, ctx):
    c = record.config
    why = _unsupported(c)
    if why:
        raise Refused(why)
    layers, heads = c.get("num_layers"), c.get("num_heads")
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads)):
        raise Refused(f"num_layers={layers!r} and num_heads={heads!r} are not positive ints")
    if len(arrays) != layers * _PER_BLOCK:
        raise Refused(f"has {len(arrays)} variables; {layers} blocks of {_PER_BLOCK} make {layers * _PER_BLOCK}")
    hidden, mlp = int(arrays[0].shape[0]), int(arrays[12].shape[0])  # fc2's (weights_out's) kernel [mlp, D]
    if hidden % heads:
        raise Refused(f"hidden size {hidden} is not a multiple of num_heads {heads}")
    state: dict[str, Tensor] = {}
    for i in range(layers):
        block, at = arrays[i * _PER_BLOCK : (i + 1) * _PER_BLOCK], f"blocks.{i}.inner"
        for j, name in enumerate(("key", "output", "query", "value")):  # the file's (sorted) order
            state |= vit_dense(f"{at}.{name}", block[2 * j : 2 * j + 2], True)
        state |= {f"blocks.{i}.scale_1": as_tensor(block[8]), f"blocks.{i}.scale_2": as_tensor(block[9])}
        state |= vit_dense(f"{at}.dense_1", block[10:12], True) | vit_dense(f"{at}.dense_2", block[12:14], True)
        state |= {f"{at}.norm_1.weight": as_tensor(block[14]), f"{at}.norm_1.bias": as_tensor(block[15])}
        state |= {f"{at}.norm_2.weight": as_tensor(block[16]), f"{at}.norm_2.bias": as_tensor(block[17])}
    spec = {"op": HubDINOv2Encoder.op, "hidden": hidden, "num_layers": layers, "num_heads": heads, "mlp_dim": mlp}
    spec["dropout_rate"] = float(c.get("dropout_rate", 0.0) or 0.0)
    spec["swiglu"] = bool(c.get("use_swiglu_ffn", False))
    return Converted(spec, state, [f"keras-hub DINOV2Encoder: {layers} pre-norm layer-scaled blocks"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _dinov2_config(m: HubSource) -> dict[str, Any]:
    embedding, encoder = m.spec("embeddings"), m.spec("encoder")
    hidden, swiglu = int(encoder["hidden"]), bool(encoder.get("swiglu"))
    # SwiGLU's width is keras-hub's (and transformers') rounding of intermediate_dim, which the spec holds
    mlp = int(m.arguments["intermediate_dim"]) if swiglu else int(encoder["mlp_dim"])
    if mlp % hidden:
        m.refuse(f"intermediate_dim {mlp} is not a whole multiple of hidden_dim {hidden}: Dinov2Config's mlp_ratio")
    dropout = float(encoder.get("dropout_rate", 0.0))
    config = {"hidden_size": hidden, "num_hidden_layers": int(encoder["num_layers"]), "mlp_ratio": mlp // hidden}
    config |= {"num_attention_heads": int(encoder["num_heads"]), "hidden_act": "gelu", "layer_norm_eps": EPSILON}
    config |= {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout, "qkv_bias": True}
    config |= {"image_size": int(m.arguments["image_shape"][0]), "patch_size": int(embedding["patch"][0])}
    config |= {"num_channels": int(embedding["channels"]), "use_swiglu_ffn": swiglu}
    config |= {"drop_path_rate": 0.0, "layerscale_value": float(m.arguments.get("layer_scale_init_value", 1.0))}
    registers = int(embedding.get("registers") or 0)
    if not registers:
        return config | {"use_mask_token": False}
    # the door writes the form's own class first; with registers it is this form's other class
    config |= {"model_type": "dinov2_with_registers", "architectures": ["Dinov2WithRegistersModel"]}
    return config | {"num_register_tokens": registers}


_DINOV2_BLOCK = (
    ("norm1", "inner.norm_1"),
    ("attention.attention.query", "inner.query"),
    ("attention.attention.key", "inner.key"),
    ("attention.attention.value", "inner.value"),
    ("attention.output.dense", "inner.output"),
    ("norm2", "inner.norm_2"),
    ("mlp.fc1", "inner.dense_1"),
    ("mlp.fc2", "inner.dense_2"),
)


def _dinov2_tensors(m: HubSource) -> Tensors:
    """transformers' DINOv2 weights (the Hub checkpoints' names)."""
    yield "embeddings.cls_token", m.tensor("embeddings.class_token")
    yield "embeddings.position_embeddings", m.tensor("embeddings.position")[None]
    yield "embeddings.patch_embeddings.projection.weight", m.tensor("embeddings.patch.weight")
    yield "embeddings.patch_embeddings.projection.bias", m.tensor("embeddings.patch.bias")
    if m.spec("embeddings").get("registers"):  # Dinov2WithRegistersModel (the module docstring)
        yield "embeddings.register_tokens", m.tensor("embeddings.registers")
        yield "embeddings.mask_token", torch.zeros_like(m.tensor("embeddings.class_token")[0])
    swiglu = bool(m.spec("encoder").get("swiglu"))
    for i in range(int(m.spec("encoder")["num_layers"])):
        at = f"encoder.layer.{i}"
        for theirs, ours in _DINOV2_BLOCK:
            if swiglu:  # the Hub's SwiGLU checkpoints' names (transformers 5 splits weights_in as it loads)
                theirs = {"mlp.fc1": "mlp.weights_in", "mlp.fc2": "mlp.weights_out"}.get(theirs, theirs)
            yield f"{at}.{theirs}.weight", m.tensor(f"encoder.blocks.{i}.{ours}.weight")
            yield f"{at}.{theirs}.bias", m.tensor(f"encoder.blocks.{i}.{ours}.bias")
        yield f"{at}.layer_scale1.lambda1", m.tensor(f"encoder.blocks.{i}.scale_1")
        yield f"{at}.layer_scale2.lambda1", m.tensor(f"encoder.blocks.{i}.scale_2")
    yield "layernorm.weight", m.tensor("layernorm.weight")
    yield "layernorm.bias", m.tensor("layernorm.bias")


DINOV2 = TransformersForm("dinov2", {"backbone": "Dinov2Model"}, _dinov2_config, _dinov2_tensors)


_KEYS = ("patch_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim", "layer_scale_init_value")
_KEYS += ("num_register_tokens", "use_mask_token", "use_swiglu_ffn", "dropout_rate", "drop_path_rate")
_KEYS += ("image_shape", "position_embedding_shape", "antialias_in_interpolation", "apply_layernorm", "data_format")


@keras_hub_model("DINOV2Backbone", family="dinov2", transformers=DINOV2)
def dinov2_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``DINOV2Backbone``: images [B, H, W, C] -> ``embeddings`` (patches, class token, positions, registers) ->
    ``encoder`` (layer-scaled blocks) -> ``layernorm`` -> [B, 1 + registers + N, D]."""
    config_keys(config, _KEYS, where)
    why = _unsupported(config)
    if why:
        raise WeightsError(f"{where}: {why}")
    shape, table = config.get("image_shape"), config.get("position_embedding_shape", [518, 518, 3])
    ok = isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)
    if not ok or shape[0] != shape[1]:
        raise WeightsError(f"{where}: image_shape {shape!r} is not [size, size, channels] of positive ints")
    g = HubGraph(config.get("dtype"))
    hidden, patch = positive(config, "hidden_dim", where), positive(config, "patch_size", where)
    dropout = number(config, "dropout_rate", where, 0.0)
    registers = config.get("num_register_tokens", 0)
    if not isinstance(registers, int) or registers < 0:
        raise WeightsError(f"{where}: num_register_tokens {registers!r} is not an int >= 0")
    images = g.input("images", list(shape), "float32")
    embedding = {"hidden_dim": hidden, "patch_size": patch, "image_shape": shape[:2], "num_register_tokens": registers}
    embedding |= {"use_mask_token": bool(config.get("use_mask_token", True)), "dropout_rate": dropout}
    embedding |= {"position_embedding_shape": list(table)[:2], "data_format": "channels_last"}
    embedding["antialias_in_interpolation"] = bool(config.get("antialias_in_interpolation", False))
    module = "keras_hub.src.models.dinov2.dinov2_layers"
    x = g.hub_layer("DINOV2Embedding", "embeddings", embedding, [tensor(images)], module)
    encoder = {key: positive(config, key, where) for key in ("num_layers", "num_heads", "intermediate_dim")}
    encoder |= {"hidden_dim": hidden, "dropout_rate": dropout, "use_swiglu_ffn": bool(config.get("use_swiglu_ffn"))}
    x = g.hub_layer("DINOV2Encoder", "encoder", encoder, [tensor(x)], module)
    x = g.layer("LayerNormalization", "layernorm", {"axis": [-1], "epsilon": EPSILON}, [tensor(x)])
    return g.functional(str(config.get("name", "dinov2_backbone")), {"images": images}, x)
