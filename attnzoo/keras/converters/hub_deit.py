"""keras-hub's DeiT family: ``DeiTBackbone`` (keras-hub 0.32's ``deit_backbone.py``) and ``DeiTImageClassifier``
over it, rebuilt from their arguments; its layers converted without keras-hub.

* ``DeiTEmbeddings``: images [B, H, W, C] (channels last) -> patches of ph x pw by a ``Conv2d`` of stride =
  kernel = patch -> [B, N, D] (row by row) -> the class token and the distillation token first -> plus the
  position table [N + 2, D].
* ``DeiTEncoder``: ViT's encoder (:class:`~attnzoo.keras.converters.hub_vit.HubViTEncoder`: pre-norm
  blocks of multi-head attention and an exact-gelu MLP, a final layer norm), read from DeiT's blocks
  (``dei_t_encoder_block``, ...), whose variables lie as ViT's do.
* the classifier: the backbone's sequence -> the class token's state (``pooling`` "token", the default) or
  the average over every token ("gap") -> ``predictions`` (``Dense(num_classes, activation)``; keras-hub's
  DeiTImageClassifier makes an ``output_dropout`` it never calls).

Channels last only, as attnzoo's ViT. No Hugging Face form.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor
from attnzoo.keras.converters.hub_vit import HubViTEmbedding, convert_vit_encoder
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, first_token, number, positive, tensor
from attnzoo.keras.hub_vision import config_keys, image_classifier_graph
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["deit_graph"]


@keras_layer("DeiTEmbeddings", package="keras_hub")
def convert_deit_embedding(record, arrays, ctx):
    """Variables: the class token, the distillation token, the positions [1, N + 2, D], then the patch
    convolution's kernel and bias."""
    c = record.config
    if c.get("data_format", "channels_last") not in (None, "channels_last"):
        raise Refused(f"data_format={c.get('data_format')!r} is not supported (only channels_last)")
    if c.get("use_mask_token"):
        raise Refused("use_mask_token=True (masked image modelling) is not supported")
    if len(arrays) != 5:
        raise Refused(f"has {len(arrays)} variables; DeiTEmbeddings has 5")
    cls, distillation, positions, kernel, bias = arrays
    spec = {"op": HubViTEmbedding.op, "channels": int(kernel.shape[2]), "hidden": int(kernel.shape[3])}
    spec |= {"patch": [int(kernel.shape[0]), int(kernel.shape[1])], "positions": int(positions.shape[1])}
    spec |= {"class_token": True, "bias": True, "distillation_token": True}
    state = {"patch.weight": as_tensor(kernel.transpose(3, 2, 0, 1)), "patch.bias": as_tensor(bias)}
    state |= {"position": as_tensor(positions[0]), "class_token": as_tensor(cls)}
    state["distillation_token"] = as_tensor(distillation)
    notes = ["keras-hub DeiTEmbeddings: nn.Conv2d patches, class and distillation tokens, positions"]
    return Converted(spec, state, notes)


# the blocks' groups in the weights file, in order (sorted as text, _10 would come before _2)
_BLOCKS = tuple(f"encoder_layers/dei_t_encoder_block{'' if i == 0 else f'_{i}'}" for i in range(256))
keras_layer("DeiTEncoder", package="keras_hub", child_order=("encoder_layers", "layer_norm", *_BLOCKS))(
    convert_vit_encoder
)

_KEYS = ("image_shape", "patch_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")
_KEYS += ("dropout_rate", "attention_dropout", "layer_norm_epsilon", "use_mha_bias", "data_format")


def deit_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``DeiTBackbone``: images [B, H, W, C] -> ``deit_patching_and_embedding`` -> ``deit_encoder`` ->
    [B, N + 2, D]."""
    config_keys(config, _KEYS, where)
    g = HubGraph(config.get("dtype"))
    shape, patch = config.get("image_shape"), config.get("patch_size")
    patch = [patch, patch] if isinstance(patch, int) else patch
    if config.get("data_format") not in (None, "channels_last"):
        raise WeightsError(f"{where}: data_format {config.get('data_format')!r}; attnzoo converts channels_last only")
    ok = isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)
    if not ok or not isinstance(patch, list) or len(patch) != 2 or not all(isinstance(v, int) and v > 0 for v in patch):
        raise WeightsError(f"{where}: image_shape {shape!r} and patch_size {patch!r} are not positive ints")
    hidden = positive(config, "hidden_dim", where)
    images = g.input("images", list(shape), "float32")
    embedding = {"image_size": shape[:2], "patch_size": patch, "hidden_dim": hidden, "num_channels": shape[2]}
    embedding |= {"data_format": "channels_last", "dropout_rate": number(config, "dropout_rate", where, 0.0)}
    x = g.hub_layer("DeiTEmbeddings", "deit_patching_and_embedding", embedding, [tensor(images)], "keras_hub")
    encoder = {key: positive(config, key, where) for key in ("num_layers", "num_heads", "intermediate_dim")}
    encoder |= {"hidden_dim": hidden, "use_mha_bias": config.get("use_mha_bias", True)}
    encoder |= {key: number(config, key, where, 0.0) for key in ("dropout_rate", "attention_dropout")}
    encoder["layer_norm_epsilon"] = number(config, "layer_norm_epsilon", where, 1e-6)
    x = g.hub_layer("DeiTEncoder", "deit_encoder", encoder, [tensor(x)], "keras_hub.src.models.deit.deit_layers")
    return g.functional(str(config.get("name", "dei_t_backbone")), {"images": images}, x)


def _deit_head(g: HubGraph, x: str, config: dict[str, Any], data_format: str, where: str) -> str:
    """The class token's state (``pooling`` "token") or the tokens' average ("gap") -> ``predictions``."""
    pooling = config.get("pooling", "token")
    if pooling == "token":
        x = first_token(g, x)
    elif pooling == "gap":
        x = g.operation("Mean", "mean", [tensor(x)], {"axis": [1], "keepdims": False})
    else:
        raise WeightsError(f"{where}: pooling {pooling!r}; keras-hub's DeiTImageClassifier pools by 'token' or 'gap'")
    settings = {"units": positive(config, "num_classes", where), "activation": config.get("activation") or "linear"}
    return g.layer("Dense", "predictions", settings, [tensor(x)])


keras_hub_model(
    "DeiTBackbone",
    family="deit",
    tasks={"DeiTImageClassifier": image_classifier_graph(("DeiTBackbone",), deit_graph, _deit_head)},
)(deit_graph)
