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

Channels last only, as attnzoo's ViT.

Hugging Face form (:data:`DEIT`): the backbone as ``DeiTModel`` without its pooler (keras-hub's DeiTBackbone
has none: load it with ``add_pooling_layer=False``), a classifier of ``pooling`` "token" as
``DeiTForImageClassification`` (its ``classifier`` reads the class token's state, as keras-hub's
``predictions`` does). Both take ``pixel_values`` [B, C, H, W] where keras-hub takes [B, H, W, C]. The patch
``Conv2d``, the class and distillation tokens [1, 1, D] and the position table [1, N + 2, D] (class token,
distillation token, then the patches row by row in both) go as they are; the blocks are ViT's
(:func:`~attnzoo.keras.converters.hub_vit.encoder_tensors`; ``use_mha_bias`` False is ``qkv_bias`` False and
a zero attention-output bias), ε ``layer_norm_epsilon``. Refused: a "gap" classifier (the average over
every token: no transformers DeiT class pools so), a classifier whose ``predictions`` end in an activation
(transformers returns the logits before it).
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor
from attnzoo.keras.converters.hub_bert import labels
from attnzoo.keras.converters.hub_vit import (
    HubViTEmbedding,
    convert_vit_encoder,
    encoder_config,
    encoder_tensors,
    patch_images,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, first_token, number, positive, tensor
from attnzoo.keras.hub_vision import config_keys, image_classifier_graph
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["deit_graph", "DEIT"]


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
    images, embedding = patch_images(g, config, where)
    hidden = embedding["hidden_dim"]
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


# -- the family's Hugging Face form -------------------------------------------------------------------------
_CLASSIFIER = "DeiTForImageClassification"


def _deit_config(m: HubSource) -> dict[str, Any]:
    embedding, encoder = m.spec("deit_patching_and_embedding"), m.spec("deit_encoder")
    config = {**encoder_config(encoder), "image_size": list(m.arguments["image_shape"][:2])}
    config |= {"patch_size": list(embedding["patch"]), "num_channels": int(embedding["channels"])}
    if m.kind == "task":
        if not m.has("get_item", task=True):  # the class token's state; "gap" averages with a Mean
            m.refuse(
                f"it pools by 'gap' (the average over every token), and transformers' {_CLASSIFIER} reads the "
                "class token's state (pooling 'token'); no transformers DeiT class averages the tokens"
            )
        m.dense_is_linear("predictions", _CLASSIFIER)
        config |= labels(m, "predictions")
    return config


def _deit_tensors(m: HubSource) -> Tensors:
    """transformers' DeiT weights (the Hub checkpoints' names, ``deit.``-prefixed in the classifier)."""
    base = "deit." if m.kind == "task" else ""
    at = "deit_patching_and_embedding"
    yield f"{base}embeddings.cls_token", m.tensor(f"{at}.class_token")
    yield f"{base}embeddings.distillation_token", m.tensor(f"{at}.distillation_token")
    yield f"{base}embeddings.position_embeddings", m.tensor(f"{at}.position")[None]
    yield f"{base}embeddings.patch_embeddings.projection.weight", m.tensor(f"{at}.patch.weight")
    yield f"{base}embeddings.patch_embeddings.projection.bias", m.tensor(f"{at}.patch.bias")
    yield from encoder_tensors(m, "deit_encoder", base)
    if m.kind == "task":
        yield "classifier.weight", m.tensor("predictions.weight", task=True)
        yield "classifier.bias", m.tensor("predictions.bias", task=True)


DEIT = TransformersForm(
    "deit",
    {"backbone": "DeiTModel", "task": _CLASSIFIER},
    _deit_config,
    _deit_tensors,
    load_with={"backbone": {"add_pooling_layer": False}},
)


keras_hub_model(
    "DeiTBackbone",
    family="deit",
    tasks={"DeiTImageClassifier": image_classifier_graph(("DeiTBackbone",), deit_graph, _deit_head)},
    transformers=DEIT,
)(deit_graph)
