"""keras-hub's ResNet family: ``ResNetBackbone`` (ResNet, ResNetV2 and ResNet-vd, keras-hub 0.32's
``resnet_backbone.py``) and ``ResNetImageClassifier`` over it, rebuilt from their arguments as graphs of
plain Keras layers (``Conv2D`` without bias, ``BatchNormalization`` ε 1e-5 momentum 0.9, ``relu``,
``ZeroPadding2D``, ``MaxPooling2D``, ``AveragePooling2D``, ``Add``), which convert through attnzoo's own
converters; the layers carry keras-hub's names, so the weights file's groups are found as they are.

* stem: ``conv1_pad`` ((k₀ - 1) // 2) -> ``conv1_conv`` (stride 2) -> for each further input convolution
  ``conv<i>_bn``, ``conv<i>_relu``, ``conv<i+1>_conv`` (same); without pre-activation the last
  ``conv<n>_bn`` and ``conv<n>_relu``; then a 3x3 max pool of stride 2 over a zero pad of 1 (``pool1_pad``),
  or with pre-activation over ``ops.pad`` of -inf.
* stacks ``stack<s>_block<b>``: ``basic_block`` (two 3x3 convolutions), ``bottleneck_block`` (1x1, 3x3,
  1x1 to 4 x filters), ``*_vd`` (the shortcut of a strided block average-pooled 2x2 then a stride-1 1x1
  convolution); the first block of a stack has a convolution shortcut (``_0_conv``), except a basic
  stack's first; a strided 3x3 convolution is zero-padded then valid. ResNet (``use_pre_activation``
  False): post-activation blocks, ``_add`` then ``_out`` relu; ResNetV2: ``_pre_activation_bn`` / ``_relu``
  first, ``_out`` the sum, and ``post_bn``, ``post_relu`` after the stacks.

``data_format``: keras-hub's ResNetBackbone does not write it into its config (keras-hub reads a saved
model in the loading machine's ``keras.config.image_data_format()``, by default channels_last); a config
that names it is read as it says.

Hugging Face form (:data:`RESNET`): transformers' ``ResNetModel`` / ``ResNetForImageClassification`` (its
pooler, an average, then ``classifier.1``) compute keras-hub's ResNet v1 of one layout only, so the rest is
refused by name: ``use_pre_activation=True`` (ResNetV2), ``block_type`` ``*_vd``, a stem other than one 7x7
convolution (``ResNetEmbeddings``: 7x7 of stride 2, padded 3, then a 3x3 max pool of stride 2 padded 1,
which after a relu equals keras-hub's zero pad), a stack after the first of stride other than 2 (the first:
1 or 2, ``downsample_in_first_stage``), a first block whose input is as wide as its output and not strided
(keras-hub gives it a 1x1 shortcut convolution where transformers adds the input as it is), a classifier
pooled by "max" or whose ``predictions`` end in an activation. A strided 3x3 convolution is keras-hub's
zero pad of 1 then a valid one, which is transformers' symmetric padding of 1 (kernel // 2) at every
size; a bottleneck strides its 3x3 convolution (``downsample_in_bottleneck`` False). transformers takes
``pixel_values`` [B, C, H, W] and returns [B, C, H', W']. The classifier's ``output_dropout`` has no place in
``ResNetForImageClassification`` (equal in eval, where it is the identity).
"""

from __future__ import annotations

from typing import Any

import torch

from attnzoo.errors import WeightsError
from attnzoo.keras.converters.hub_bert import labels
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_vision import ImageGraph, config_keys, image_classifier_graph, int_list
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["resnet_graph", "RESNET"]

_KEYS = ("input_conv_filters", "input_conv_kernel_sizes", "stackwise_num_filters", "stackwise_num_blocks")
_KEYS += ("stackwise_num_strides", "block_type", "use_pre_activation", "image_shape", "data_format")
_BLOCKS = ("basic_block", "bottleneck_block", "basic_block_vd", "bottleneck_block_vd")


def _bn(g: ImageGraph, x: str, name: str) -> str:
    return g.batch_norm(x, name, epsilon=1e-5, momentum=0.9)


def _block(g: ImageGraph, x: str, filters: int, stride: int, shortcut_conv: bool, kind: str, pre: bool, name: str):
    """One residual block of ``kind`` (``resnet_backbone.py``'s ``apply_<kind>``) -> its output's name."""
    bottleneck, vd = kind.startswith("bottleneck"), kind.endswith("_vd")
    out = 4 * filters if bottleneck else filters
    x_pre = g.activation(_bn(g, x, f"{name}_pre_activation_bn"), f"{name}_pre_activation_relu") if pre else None
    shortcut = x
    if shortcut_conv:
        source = x_pre if x_pre is not None else x
        if vd and x_pre is None and stride > 1:
            source = g.pool(x, g.auto_name("average_pooling2d"), "average", 2, stride, "same")
        shortcut = g.conv(source, f"{name}_0_conv", out, 1, 1 if vd else stride)
        shortcut = shortcut if pre else _bn(g, shortcut, f"{name}_0_bn")
    x = x_pre if x_pre is not None else x
    convs = [(filters, 1, 1), (filters, 3, stride), (out, 1, 1)] if bottleneck else [(filters, 3, stride), (out, 3, 1)]
    for i, (width, kernel, step) in enumerate(convs, start=1):
        if step > 1:
            x = g.zero_pad(x, f"{name}_{i}_pad", (kernel - 1) // 2)
        x = g.conv(x, f"{name}_{i}_conv", width, kernel, step, "valid" if step > 1 or kernel == 1 else "same")
        if i < len(convs):
            x = g.activation(_bn(g, x, f"{name}_{i}_bn"), f"{name}_{i}_relu")
    if pre:
        return g.add([shortcut, x], f"{name}_out")
    x = g.add([shortcut, _bn(g, x, f"{name}_{len(convs)}_bn")], f"{name}_add")
    return g.activation(x, f"{name}_out")


def _stem(g: ImageGraph, x: str, filters: list[int], kernels: list[int], pre: bool) -> str:
    x = g.zero_pad(x, "conv1_pad", (kernels[0] - 1) // 2)
    x = g.conv(x, "conv1_conv", filters[0], kernels[0], 2)
    for i in range(1, len(filters)):
        x = g.activation(_bn(g, x, f"conv{i}_bn"), f"conv{i}_relu")
        x = g.conv(x, f"conv{i + 1}_conv", filters[i], kernels[i], 1, "same")
    if pre:
        x = g.pad(x, 1, float("-inf"))
    else:
        x = g.activation(_bn(g, x, f"conv{len(filters)}_bn"), f"conv{len(filters)}_relu")
        x = g.zero_pad(x, "pool1_pad", 1)
    return g.pool(x, "pool1_pool", "max", 3, 2)


def resnet_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``ResNetBackbone``: images [B, H, W, C] (any H, W where ``image_shape`` leaves them None) -> the stem
    -> the stacks -> (ResNetV2: ``post_bn``, ``post_relu``) -> [B, H / 32, W / 32, channels]."""
    config_keys(config, _KEYS, where)
    g = ImageGraph(config.get("dtype"), config.get("data_format"), where)
    filters = int_list(config, "input_conv_filters", where)
    kernels = int_list(config, "input_conv_kernel_sizes", where, len(filters))
    widths = int_list(config, "stackwise_num_filters", where)
    blocks = int_list(config, "stackwise_num_blocks", where, len(widths))
    strides = int_list(config, "stackwise_num_strides", where, len(widths))
    kind, pre = config.get("block_type"), config.get("use_pre_activation", False)
    if kind not in _BLOCKS or not isinstance(pre, bool):
        raise WeightsError(f"{where}: block_type {kind!r} (one of {', '.join(_BLOCKS)}), use_pre_activation {pre!r}")
    images = g.images(config.get("image_shape", [None, None, 3]), where)
    x = _stem(g, images, filters, kernels, pre)
    for s, (width, count, stride) in enumerate(zip(widths, blocks, strides, strict=True)):
        for b in range(count):
            first = b == 0 and (kind != "basic_block" or s > 0)
            x = _block(g, x, width, stride if b == 0 else 1, first, kind, pre, f"stack{s}_block{b}")
    if pre:
        x = g.activation(_bn(g, x, "post_bn"), "post_relu")
    return g.functional(str(config.get("name", "res_net_backbone")), {"images": images}, x)


# -- the family's Hugging Face form -------------------------------------------------------------------------
_MODEL = "transformers' ResNetModel"


def _resnet_layout(m: HubSource) -> tuple[str, list[int]]:
    """transformers' ``layer_type`` and the stacks' strides, or the refusal naming what differs."""
    a = m.arguments
    kind, strides = a.get("block_type"), list(a.get("stackwise_num_strides") or [])
    if a.get("use_pre_activation"):
        m.refuse(f"use_pre_activation=True (ResNetV2: pre-activation blocks); {_MODEL} is post-activation (v1)")
    if kind not in ("basic_block", "bottleneck_block"):
        m.refuse(
            f"block_type {kind!r}: {_MODEL} has basic_block and bottleneck_block only (a strided shortcut is a "
            "strided 1x1 convolution there, not ResNet-vd's average pool and 1x1 convolution)"
        )
    filters, kernels = list(a.get("input_conv_filters") or []), list(a.get("input_conv_kernel_sizes") or [])
    if len(filters) != 1 or kernels != [7]:
        m.refuse(f"its stem has {len(filters)} convolutions of kernels {kernels}; {_MODEL}'s is one 7x7 convolution")
    if not strides or strides[0] not in (1, 2) or any(s != 2 for s in strides[1:]):
        m.refuse(f"stackwise_num_strides {strides}: {_MODEL} strides its first stack 1 or 2 and every other 2")
    widths = [(4 if kind == "bottleneck_block" else 1) * w for w in a["stackwise_num_filters"]]
    for s, (before, width) in enumerate(zip([filters[0], *widths[:-1]], widths, strict=True)):
        if before == width and strides[s] == 1 and (s > 0 or kind == "bottleneck_block"):
            m.refuse(
                f"stack {s}'s first block maps {width} channels to {width} unstrided: keras-hub gives it a 1x1 "
                f"shortcut convolution where {_MODEL} adds the input as it is"
            )
    return ("bottleneck" if kind == "bottleneck_block" else "basic"), strides


def _resnet_config(m: HubSource) -> dict[str, Any]:
    layer_type, strides = _resnet_layout(m)
    width = 4 if layer_type == "bottleneck" else 1
    stem = m.tensor("conv1_conv.weight")
    config = {"num_channels": int(stem.shape[1]), "embedding_size": int(stem.shape[0])}
    config |= {"hidden_sizes": [width * w for w in m.arguments["stackwise_num_filters"]]}
    config |= {"depths": list(m.arguments["stackwise_num_blocks"]), "layer_type": layer_type, "hidden_act": "relu"}
    config |= {"downsample_in_first_stage": strides[0] == 2, "downsample_in_bottleneck": False}
    if m.kind == "task":
        if m.spec("pooler", task=True).get("kind") != "average":
            m.refuse("its pooler is not an average ('max' pooling); ResNetForImageClassification averages")
        m.dense_is_linear("predictions", "ResNetForImageClassification")
        config |= labels(m, "predictions")
    return config


_BATCH_NORM = ("weight", "bias", "running_mean", "running_var")


def _conv_bn(m: HubSource, theirs: str, conv: str, bn: str) -> Tensors:
    weight = m.tensor(f"{conv}.weight")
    yield f"{theirs}.convolution.weight", weight
    for name in _BATCH_NORM:
        yield f"{theirs}.normalization.{name}", m.tensor(f"{bn}.{name}")
    # torch's step count, which Keras does not keep; it is read only by a BatchNorm2d of momentum=None
    yield f"{theirs}.normalization.num_batches_tracked", torch.zeros((), dtype=torch.long, device=weight.device)


def _resnet_tensors(m: HubSource) -> Tensors:
    """transformers' ResNet weights (the Hub checkpoints' names, ``resnet.``-prefixed in the classifier)."""
    base = "resnet." if m.kind == "task" else ""
    yield from _conv_bn(m, f"{base}embedder.embedder", "conv1_conv", "conv1_bn")
    convs = 3 if m.arguments["block_type"] == "bottleneck_block" else 2
    for s, count in enumerate(m.arguments["stackwise_num_blocks"]):
        for b in range(count):
            ours, theirs = f"stack{s}_block{b}", f"{base}encoder.stages.{s}.layers.{b}"
            if m.holds(f"{ours}_0_conv.weight"):
                yield from _conv_bn(m, f"{theirs}.shortcut", f"{ours}_0_conv", f"{ours}_0_bn")
            for i in range(1, convs + 1):
                yield from _conv_bn(m, f"{theirs}.layer.{i - 1}", f"{ours}_{i}_conv", f"{ours}_{i}_bn")
    if m.kind == "task":
        yield "classifier.1.weight", m.tensor("predictions.weight", task=True)
        yield "classifier.1.bias", m.tensor("predictions.bias", task=True)


RESNET = TransformersForm(
    "resnet",
    {"backbone": "ResNetModel", "task": "ResNetForImageClassification"},
    _resnet_config,
    _resnet_tensors,
)


keras_hub_model(
    "ResNetBackbone",
    family="resnet",
    tasks={"ResNetImageClassifier": image_classifier_graph(("ResNetBackbone",), resnet_graph)},
    transformers=RESNET,
)(resnet_graph)
