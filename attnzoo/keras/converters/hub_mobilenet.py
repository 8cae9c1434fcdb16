"""keras-hub's MobileNet family: ``MobileNetBackbone`` (MobileNetV3, keras-hub 0.32's ``mobilenet_backbone.py``)
and ``MobileNetImageClassifier`` over it, rebuilt from their arguments.

* stem: ``input_pad`` (1) -> ``input_conv`` (3x3, stride 2) -> ``input_batch_norm`` -> ``input_activation``;
* ``block_0_0``, keras-hub's ``DepthwiseConvBlock``; ``block_<s>_<b>``, its ``InvertedResidualBlock``
  of each stack; ``block_<n + 1>_0``, its ``ConvBnActBlock`` (1x1 to ``last_layer_filter``, hard swish):
  keras-hub layers, converted here as :class:`HubMobileNetBlock` (below: the same blocks in torch);
* the classifier's head: ``pooler`` (a global average kept 1x1) -> ``classifier_conv`` (1x1 to
  ``num_features``, bias, hard swish) -> ``flatten`` -> ``predictions`` (``Dense(num_classes)``).

Channel counts are rounded as keras-hub's ``adjust_channels`` rounds them (to a multiple of 8, at least 8,
one more 8 where the rounding took off more than 10%); every batch norm is ε 1e-5, momentum 0.9. Channels
last only (keras-hub reads the loading machine's image data format; channels last by default). No Hugging
Face form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnzoo.errors import WeightsError
from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, as_tensor
from attnzoo.keras.converters.hub_efficientnet import ConvBN, conv_bn_state, take
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, positive, tensor
from attnzoo.keras.hub_vision import ImageGraph, config_keys, image_classifier_graph
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["HubMobileNetBlock", "mobilenet_graph"]

KINDS = ("depthwise", "inverted", "conv_bn_act")
_EPS, _MOMENTUM = 1e-5, 0.9


class HubMobileNetBlock(Node):
    """keras-hub's MobileNetV3 blocks on channels-last images [B, H, W, C_in] -> [B, H', W', C_out]:

    * ``depthwise`` (``DepthwiseConvBlock``): ``relu(bn₁(depthwise_k,s(pad₁(x))))`` -> squeeze-excite ->
      ``bn₂(conv₁ₓ₁(·))`` -> ``+ x`` where ``residual``;
    * ``inverted`` (``InvertedResidualBlock``): ``act(bn₁(conv₁ₓ₁(x)))`` -> ``act(bn₂(depthwise_k,s(pad_p(·))))``
      -> squeeze-excite -> ``bn₃(conv₁ₓ₁(·))`` -> ``+ x`` where the stride is 1 and C_in = C_out;
    * ``conv_bn_act`` (``ConvBnActBlock``): ``act(bn(conv₁ₓ₁(x)))``;

    squeeze-excite (where the block has one): ``x * hard_sigmoid(W₂ relu(W₁ mean_hw(x) + b₁) + b₂)``."""

    op = "keras_hub_mobilenet_block"
    reads_mask = False

    def __init__(
        self,
        *,
        kind: str,
        channels: list[int],
        kernel_size: int = 1,
        strides: int = 1,
        padding: int = 0,
        squeeze: int = 0,
        activation: str = "relu",
        residual: bool = False,
    ) -> None:
        super().__init__()
        if kind not in KINDS or len(channels) != 3:
            raise ValueError(f"kind {kind!r} (one of {', '.join(KINDS)}) with channels [in, wide, out], got {channels}")
        c_in, wide, c_out = channels
        self.kind, self.act, self.pad, self.residual = kind, activation_fn(activation), padding, residual
        self.conv1 = ConvBN(c_in, wide, 1, 1, "valid", _EPS, _MOMENTUM) if kind == "inverted" else None
        self.depthwise = None
        if kind != "conv_bn_act":
            self.depthwise = ConvBN(wide, wide, kernel_size, strides, "valid", _EPS, _MOMENTUM, groups=wide)
        self.se = nn.ModuleList([nn.Conv2d(wide, squeeze, 1), nn.Conv2d(squeeze, wide, 1)]) if squeeze else None
        self.project = ConvBN(wide, c_out, 1, 1, "valid", _EPS, _MOMENTUM)

    def compute(self, x, mask):
        inputs = y = x.permute(0, 3, 1, 2)
        if self.kind == "conv_bn_act":
            return self.act(self.project(y)).permute(0, 2, 3, 1)
        if self.conv1 is not None:
            y = self.act(self.conv1(y))
        assert self.depthwise is not None
        y = self.depthwise(F.pad(y, [self.pad] * 4))
        y = torch.relu(y) if self.kind == "depthwise" else self.act(y)
        if self.se is not None:
            y = y * activation_fn("hard_sigmoid")(self.se[1](torch.relu(self.se[0](y.mean(dim=(2, 3), keepdim=True)))))
        y = self.project(y)
        return (y + inputs if self.residual else y).permute(0, 2, 3, 1)


def _kernel(arrays: list[np.ndarray], what: str) -> np.ndarray:
    kernel = take(arrays, 1, what)[0]
    if kernel.ndim != 4:
        raise Refused(f"{what}'s kernel {list(kernel.shape)} is not 4-D")
    return kernel


def _convert(record, arrays, ctx, kind: str) -> Converted:
    """A block's node from its config and its variables, in ``child_order``'s order: each convolution's
    kernel then its batch norm's gamma, beta, mean and variance, the squeeze-excite's after the depthwise."""
    c, left, state = record.config, list(arrays), {}
    spec: dict[str, Any] = {"op": HubMobileNetBlock.op, "kind": kind}
    if kind == "inverted":
        first = _kernel(left, "conv1")
        conv_bn_state(state, "conv1", first, take(left, 4, "batch_normalization1"))
    if kind != "conv_bn_act":
        depthwise = _kernel(left, "depthwise conv")
        conv_bn_state(state, "depthwise", depthwise, take(left, 4, "its batch norm"))  # [k, k, 1, C]: grouped
        stride = c.get("stride", 1)
        spec |= {"kernel_size": int(depthwise.shape[0]), "strides": stride if isinstance(stride, int) else stride[0]}
        spec["padding"] = int(c.get("padding", 1)) if kind == "inverted" else 1
    if kind != "conv_bn_act" and len(left) == 9:  # squeeze-excite: reduce, expand (kernel, bias each)
        for i, name in enumerate(("conv_reduce", "conv_expand")):
            kernel, bias = take(left, 2, name)
            state[f"se.{i}.weight"], state[f"se.{i}.bias"] = as_tensor(kernel.transpose(3, 2, 0, 1)), as_tensor(bias)
        spec["squeeze"] = int(state["se.0.weight"].shape[0])
    last = _kernel(left, "the projection")
    conv_bn_state(state, "project", last, take(left, 4, "the projection's batch norm"))
    if left:
        raise Refused(f"has {len(arrays)} variables, {len(left)} more than its settings make")
    c_in = int(first.shape[2]) if kind == "inverted" else int(last.shape[2])
    spec["channels"] = [c_in, int(last.shape[2]), int(last.shape[3])]
    if kind != "depthwise":
        spec["activation"] = activation_of(c, "activation", ctx)
    if kind == "depthwise":
        spec["residual"] = bool(c.get("residual", False))
    elif kind == "inverted":
        spec["residual"] = spec["strides"] == 1 and c_in == spec["channels"][2]
    return Converted(spec, state, [f"keras-hub {record.class_name}: convolutions and batch norms in torch"])


@keras_layer(
    "DepthwiseConvBlock",
    package="keras_hub",
    child_order=("conv1", "batch_normalization1", "se_layer", "conv2", "batch_normalization2")
    + ("se_layer/conv_reduce", "se_layer/conv_expand"),
)
def convert_depthwise_block(record, arrays, ctx):
    return _convert(record, arrays, ctx, "depthwise")


@keras_layer(
    "InvertedResidualBlock",
    package="keras_hub",
    child_order=(
        "conv1",
        "batch_normalization1",
        "conv2",
        "batch_normalization2",
        "squeeze_excite",
        "conv3",
        "batch_normalization3",
        "squeeze_excite/conv_reduce",
        "squeeze_excite/conv_expand",
    ),
)
def convert_inverted_block(record, arrays, ctx):
    return _convert(record, arrays, ctx, "inverted")


@keras_layer("ConvBnActBlock", package="keras_hub", child_order=("conv", "batch_normalization"))
def convert_conv_bn_act_block(record, arrays, ctx):
    return _convert(record, arrays, ctx, "conv_bn_act")


# -- the backbone's and the classifier's graphs ---------------------------------------------------------------
_STACKWISE = ("expansion", "num_filters", "kernel_size", "num_strides", "se_ratio", "activation", "padding")
_KEYS = ("stackwise_num_blocks", *(f"stackwise_{key}" for key in _STACKWISE), "image_shape", "input_num_filters")
_KEYS += ("output_num_filters", "depthwise_filters", "depthwise_stride", "depthwise_residual", "last_layer_filter")
_KEYS += ("squeeze_and_excite", "input_activation", "output_activation")


def adjust_channels(x: float, divisor: int = 8) -> int:
    """keras-hub's ``adjust_channels``: the nearest multiple of ``divisor``, at least ``divisor``, one more
    where the rounding took off more than 10%."""
    rounded = max(divisor, int(x + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * x else rounded


def _stacks(config: dict[str, Any], where: str) -> list[list[dict[str, Any]]]:
    """Each stack's blocks' settings, from the stackwise lists of lists."""
    counts = config.get("stackwise_num_blocks")
    if not isinstance(counts, list) or not all(isinstance(n, int) and n >= 0 for n in counts):
        raise WeightsError(f"{where}: its config's stackwise_num_blocks is {counts!r}; a list of ints")
    stacks = []
    for s, count in enumerate(counts):
        blocks = []
        for key in _STACKWISE:
            value = config.get(f"stackwise_{key}")
            if (
                not isinstance(value, list)
                or len(value) != len(counts)
                or not isinstance(value[s], list)
                or len(value[s]) != count
            ):
                raise WeightsError(
                    f"{where}: its config's stackwise_{key} is {str(value)[:80]}; {counts} items per stack"
                )
        for b in range(count):
            blocks.append({key: config[f"stackwise_{key}"][s][b] for key in _STACKWISE})
        stacks.append(blocks)
    return stacks


def mobilenet_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``MobileNetBackbone``: images [B, H, W, C] -> the stem -> ``block_0_0`` -> each stack's inverted
    residual blocks -> the last 1x1 block -> [B, H', W', last_layer_filter (adjusted)]."""
    config_keys(config, _KEYS, where)
    g = ImageGraph(config.get("dtype"), "channels_last", where)
    module = "keras_hub.src.models.mobilenet.mobilenet_backbone"
    x = images = g.images(config.get("image_shape", [None, None, 3]), where)
    channels = adjust_channels(positive(config, "input_num_filters", where, 16))
    x = g.conv(g.zero_pad(x, "input_pad", 1), "input_conv", channels, 3, 2)
    x = g.batch_norm(x, "input_batch_norm", _EPS, _MOMENTUM)
    x = g.activation(x, g.auto_name("activation"), config.get("input_activation", "hard_swish"))
    block = {"infilters": channels, "filters": positive(config, "depthwise_filters", where), "kernel_size": 3}
    block |= {"stride": positive(config, "depthwise_stride", where), "residual": bool(config.get("depthwise_residual"))}
    block |= {"squeeze_excite_ratio": config.get("squeeze_and_excite"), "name": "block_0_0"}
    x = g.hub_layer("DepthwiseConvBlock", "block_0_0", block, [tensor(x)], module)
    channels = block["filters"]
    stacks = _stacks(config, where)
    for s, blocks in enumerate(stacks, start=1):
        for b, settings in enumerate(blocks):
            filters = adjust_channels(settings["num_filters"])
            block = {"expansion": settings["expansion"], "infilters": channels, "filters": filters}
            block |= {"kernel_size": settings["kernel_size"], "stride": settings["num_strides"]}
            block |= {"squeeze_excite_ratio": settings["se_ratio"], "activation": settings["activation"]}
            block |= {"padding": settings["padding"], "name": f"block_{s}_{b}"}
            x = g.hub_layer("InvertedResidualBlock", f"block_{s}_{b}", block, [tensor(x)], module)
            channels = filters
    last = f"block_{len(stacks) + 1}_0"
    block = {"filter": adjust_channels(positive(config, "last_layer_filter", where)), "activation": "hard_swish"}
    x = g.hub_layer("ConvBnActBlock", last, {**block, "name": last}, [tensor(x)], module)
    return g.functional(str(config.get("name", "mobile_net_backbone")), {"images": images}, x)


def _mobilenet_head(g: HubGraph, x: str, config: dict[str, Any], data_format: str, where: str) -> str:
    """MobileNetImageClassifier's head: ``pooler`` (average, kept 1x1) -> ``classifier_conv`` (1x1 to
    ``num_features``, hard swish) -> ``flatten`` -> ``predictions``."""
    x = g.layer("GlobalAveragePooling2D", "pooler", {"data_format": data_format, "keepdims": True}, [tensor(x)])
    conv = {"filters": positive(config, "num_features", where, 1024), "kernel_size": [1, 1], "strides": [1, 1]}
    conv |= {"padding": "valid", "data_format": data_format, "dilation_rate": [1, 1], "groups": 1}
    x = g.layer("Conv2D", "classifier_conv", {**conv, "activation": "hard_silu", "use_bias": True}, [tensor(x)])
    x = g.layer("Flatten", "flatten", {"data_format": data_format}, [tensor(x)])
    return g.layer("Dense", "predictions", {"units": positive(config, "num_classes", where)}, [tensor(x)])


keras_hub_model(
    "MobileNetBackbone",
    family="mobilenet",
    tasks={
        "MobileNetImageClassifier": image_classifier_graph(
            ("MobileNetBackbone",), mobilenet_graph, _mobilenet_head, ("num_features",)
        )
    },
)(mobilenet_graph)
