"""keras-hub's EfficientNet family: ``EfficientNetBackbone`` (keras-hub 0.32's ``efficientnet_backbone.py``,
EfficientNet and EfficientNetV2) and ``EfficientNetImageClassifier`` over it, rebuilt from their arguments.

* stem: ``stem_conv_pad`` (1, where ``include_stem_padding``) -> ``stem_conv`` (3x3, stride 2,
  ``stem_conv_padding``) -> ``stem_bn`` -> ``stem_activation``; then each stack's blocks
  ``block<stack><a, b, ...>_``, the filters rounded as keras-hub rounds them (``width`` x filters to a
  multiple of ``depth_divisor``, at least ``min_depth``) and the repeats ``ceil(depth x repeats)``; then
  ``top_conv`` (1x1 to ``num_features``, rounded) -> ``top_bn`` -> ``top_activation``.
* block type ``v1`` is plain Keras layers (built here): ``expand_conv`` 1x1 (expansion above 1), the
  depthwise ``dwconv`` over a zero pad of k // 2, squeeze-excite (``se_squeeze`` global average ->
  ``se_reshape`` -> ``se_reduce`` (activation) -> ``se_expand`` (sigmoid) -> ``se_excite`` multiply),
  ``project`` 1x1, ``project_bn``, the residual ``add`` where the block keeps its stride and width.
* block types ``unfused`` (``MBConvBlock``), ``fused`` (``FusedMBConvBlock``) and ``cba`` (``CBABlock``)
  are keras-hub layers, converted here as :class:`HubMBConv` (below: the same blocks in torch).

Each block's dropout (``noise_shape`` (None, 1, 1, 1): a whole sample's residual branch) is the identity
at inference and drops samples in training, as Keras's. keras-hub 0.32's ``get_config`` leaves out
``num_features``: a saved backbone is rebuilt with keras-hub's default, 1280, unless its config names it
(as keras-hub itself does when it loads the file). Channels last only, as keras-hub's blocks (their batch
norms take axis 3). No Hugging Face form.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, as_tensor
from attnzoo.keras.converters.conv import convolve
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import number, positive, tensor
from attnzoo.keras.hub_vision import ImageGraph, config_keys, image_classifier_graph
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.torch_layers.batch_norm import KerasBatchNorm

__all__ = ["HubMBConv", "ConvBN", "take", "conv_bn_state", "efficientnet_graph"]

KINDS = ("cba", "fused", "unfused")


class ConvBN(nn.Module):
    """A bias-free convolution (``padding`` Keras's, on a channels-first input) and its batch norm."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, padding: str, eps: float, mom: float, groups=1):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c_out, c_in // groups, kernel, kernel))
        self.norm = KerasBatchNorm(c_out, eps=eps, momentum=1.0 - mom)
        self.kernel, self.stride, self.padding, self.groups = kernel, stride, padding, groups

    def forward(self, x: Tensor) -> Tensor:
        k, s = [self.kernel] * 2, [self.stride] * 2
        y = convolve(
            x, self.weight, None, padding=self.padding, kernel_size=k, strides=s, dilation=[1, 1], groups=self.groups
        )
        return self.norm(y)


class HubMBConv(Node):
    """keras-hub's ``CBABlock`` (``kind`` "cba"), ``FusedMBConvBlock`` ("fused") and ``MBConvBlock``
    ("unfused") on channels-last images [B, H, W, C_in] -> [B, H', W', C_out]:

    * cba: ``act(bn(conv_k,s(pad(x))))``;
    * fused: ``act(bn₁(conv_k,s(pad(x))))`` to C_in x expansion -> squeeze-excite -> ``bn₂(conv_p(pad(·)))``
      (p = ``projection_kernel_size``) -> the projection activation where the expansion is 1;
    * unfused: [``act(bn₁(conv₁ₓ₁(x)))`` where the expansion is above 1] -> ``act(bn₂(depthwise_k,s(·)))``
      ('same') -> squeeze-excite -> ``bn₃(conv_p(pad(·)))`` (p = 1, or k without expansion);

    squeeze-excite (ratio r > 0): ``x * sigmoid(W₂ act(W₁ mean_hw(x) + b₁) + b₂)`` (W₁ to max(1, int(C_in r)));
    then ``+ x`` where the stride is 1, C_in = C_out and not ``nores`` (after the sample dropout)."""

    op = "keras_hub_mbconv"
    reads_mask = False

    def __init__(
        self,
        *,
        kind: str,
        input_filters: int,
        output_filters: int,
        kernel_size: int,
        strides: int,
        expand_ratio: int = 1,
        se_ratio: float = 0.0,
        activation: str = "silu",
        projection_activation: str | None = None,
        projection_kernel_size: int = 1,
        batch_norm_epsilon: float = 1e-3,
        batch_norm_momentum: float = 0.9,
        dropout: float = 0.0,
        nores: bool = False,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        self.kind, self.act = kind, activation_fn(activation)
        self.projection_act = activation_fn(projection_activation) if projection_activation else None
        self.residual = strides == 1 and input_filters == output_filters and not nores
        self.dropout = float(dropout)
        eps, mom, k = batch_norm_epsilon, batch_norm_momentum, kernel_size
        wide = input_filters * expand_ratio
        self.pad = k // 2
        if kind == "cba":
            self.conv1 = ConvBN(input_filters, output_filters, k, strides, "valid", eps, mom)
            return
        self.expand_ratio = expand_ratio
        if kind == "fused":
            self.conv1 = ConvBN(input_filters, wide, k, strides, "valid", eps, mom)
            self.project_kernel = projection_kernel_size
        else:
            self.conv1 = ConvBN(input_filters, wide, 1, 1, "same", eps, mom) if expand_ratio != 1 else None
            self.depthwise = ConvBN(wide, wide, k, strides, "same", eps, mom, groups=wide)
            self.project_kernel = 1 if expand_ratio != 1 else k
        self.se = None
        if 0 < se_ratio <= 1:
            squeezed = max(1, int(input_filters * se_ratio))
            self.se = nn.ModuleList([nn.Conv2d(wide, squeezed, 1), nn.Conv2d(squeezed, wide, 1)])
        self.project = ConvBN(wide, output_filters, self.project_kernel, 1, "valid", eps, mom)

    def _excite(self, x: Tensor) -> Tensor:
        if self.se is None:
            return x
        squeezed = x.mean(dim=(2, 3), keepdim=True)
        return x * torch.sigmoid(self.se[1](self.act(self.se[0](squeezed))))

    def compute(self, x, mask):
        inputs = x.permute(0, 3, 1, 2)
        if self.kind == "cba":
            y = self.act(self.conv1(F.pad(inputs, [self.pad] * 4)))
        elif self.kind == "fused":
            y = self._excite(self.act(self.conv1(F.pad(inputs, [self.pad] * 4))))
            y = self.project(F.pad(y, [self.project_kernel // 2] * 4))
            if self.expand_ratio == 1 and self.projection_act is not None:
                y = self.projection_act(y)
        else:
            y = self.act(self.conv1(inputs)) if self.conv1 is not None else inputs
            y = self._excite(self.act(self.depthwise(y)))
            y = self.project(F.pad(y, [self.project_kernel // 2] * 4))
        if self.residual:
            if self.training and self.dropout > 0:  # a whole sample's branch, as noise_shape (None, 1, 1, 1)
                keep = torch.rand(y.shape[0], 1, 1, 1, device=y.device) >= self.dropout
                y = torch.where(keep, y / (1.0 - self.dropout), torch.zeros_like(y))
            y = y + inputs
        return y.permute(0, 2, 3, 1)


def take(arrays: list[np.ndarray], count: int, what: str) -> list[np.ndarray]:
    if len(arrays) < count:
        raise Refused(f"has too few variables for its {what}")
    taken = arrays[:count]
    del arrays[:count]
    return taken


def conv_bn_state(
    state: dict[str, Tensor], at: str, kernel: np.ndarray, norm: list[np.ndarray], depthwise=False
) -> None:
    """Keras's kernel [k, k, in, out] (a depthwise one's [k, k, C, 1]) and gamma, beta, mean, variance."""
    layout = (2, 3, 0, 1) if depthwise else (3, 2, 0, 1)
    state[f"{at}.weight"] = as_tensor(kernel.transpose(layout))
    for name, array in zip(("weight", "bias", "running_mean", "running_var"), norm, strict=True):
        state[f"{at}.norm.{name}"] = as_tensor(array)


def _int(c: dict[str, Any], key: str, default: int | None = None) -> int:
    value = c.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Refused(f"{key} {value!r} is not a positive int")
    return value


@keras_layer("CBABlock", "FusedMBConvBlock", "MBConvBlock", package="keras_hub")
def convert_mbconv(record, arrays, ctx):
    """The block's settings and weights: its sub-layers' variables in the file's (sorted) order, ``bn1``,
    ``bn2``, ``bn3``, ``conv1``, ``depthwise``, ``output_conv``, ``se_conv1``, ``se_conv2``, each where the
    block has it."""
    c, kind = record.config, {"CBABlock": "cba", "FusedMBConvBlock": "fused"}.get(record.class_name, "unfused")
    if c.get("data_format", "channels_last") != "channels_last":
        raise Refused(f"data_format {c.get('data_format')!r}: keras-hub's blocks normalise axis 3 (channels last)")
    spec: dict[str, Any] = {"op": HubMBConv.op, "kind": kind, "strides": _int(c, "strides", 1)}
    for key in ("input_filters", "output_filters", "kernel_size"):
        spec[key] = _int(c, key)
    spec["activation"] = activation_of(c, "activation", ctx, "swish")
    spec["batch_norm_epsilon"] = float(c.get("batch_norm_epsilon", 1e-3))
    spec["batch_norm_momentum"] = float(c.get("batch_norm_momentum", 0.9))
    spec["dropout"], spec["nores"] = float(c.get("dropout", 0.0) or 0.0), bool(c.get("nores", False))
    if kind != "cba":
        spec["expand_ratio"], spec["se_ratio"] = _int(c, "expand_ratio", 1), float(c.get("se_ratio", 0.0) or 0.0)
    if kind == "fused":
        spec["projection_kernel_size"] = _int(c, "projection_kernel_size", 1)
        if c.get("projection_activation"):
            spec["projection_activation"] = activation_of(c, "projection_activation", ctx)
    left = list(arrays)
    state: dict[str, Tensor] = {}
    se = kind != "cba" and 0 < spec["se_ratio"] <= 1
    expand = kind == "fused" or (kind == "unfused" and spec["expand_ratio"] != 1)
    names = {"cba": ["bn1"], "fused": ["bn1", "bn2"]}.get(kind, ["bn1"] * expand + ["bn2", "bn3"])
    norms = {name: take(left, 4, name) for name in names}  # an unbuilt layer (no expansion: bn1) has none
    if kind == "cba":
        conv_bn_state(state, "conv1", take(left, 1, "conv1")[0], norms["bn1"])
    else:
        if expand:
            conv_bn_state(state, "conv1", take(left, 1, "conv1")[0], norms["bn1"])
        if kind == "unfused":
            conv_bn_state(state, "depthwise", take(left, 1, "depthwise")[0], norms["bn2"], depthwise=True)
        conv_bn_state(state, "project", take(left, 1, "output_conv")[0], norms["bn2" if kind == "fused" else "bn3"])
        if se:
            for i, (kernel, bias) in enumerate((take(left, 2, "se_conv1"), take(left, 2, "se_conv2"))):
                state[f"se.{i}.weight"], state[f"se.{i}.bias"] = (
                    as_tensor(kernel.transpose(3, 2, 0, 1)),
                    as_tensor(bias),
                )
    if left:
        raise Refused(f"has {len(arrays)} variables, {len(left)} more than its settings make")
    return Converted(spec, state, [f"keras-hub {record.class_name}: convolutions and batch norms in torch"])


# -- the backbone's graph -----------------------------------------------------------------------------------
_STACKWISE = ("kernel_sizes", "num_repeats", "input_filters", "output_filters", "expansion_ratios")
_STACKWISE += ("squeeze_and_excite_ratios", "strides", "block_types", "width_coefficients", "depth_coefficients")
_KEYS = tuple(f"stackwise_{key}" for key in _STACKWISE) + ("stackwise_force_input_filters", "stackwise_nores_option")
_KEYS += ("dropout", "depth_divisor", "min_depth", "input_shape", "data_format", "activation", "include_stem_padding")
_KEYS += ("use_depth_divisor_as_min_depth", "cap_round_filter_decrease", "stem_conv_padding", "num_features")
_KEYS += ("batch_norm_momentum", "batch_norm_epsilon", "projection_activation")


def _round_filters(filters: float, width: float, config: dict[str, Any]) -> int:
    """keras-hub's ``round_filters``: ``filters x width`` to the nearest multiple of ``depth_divisor``, at
    least ``min_depth`` (the divisor where ``use_depth_divisor_as_min_depth``), one divisor more where
    ``cap_round_filter_decrease`` and the rounding took off more than 10%."""
    divisor, least = int(config.get("depth_divisor", 8)), int(config.get("min_depth", 8))
    least = divisor if config.get("use_depth_divisor_as_min_depth") else least
    filters *= width
    rounded = max(least, int(filters + divisor / 2) // divisor * divisor)
    if config.get("cap_round_filter_decrease") and rounded < 0.9 * filters:
        rounded += divisor
    return int(rounded)


def _v1_block(g: ImageGraph, x: str, s: dict[str, Any], name: str) -> str:
    """``_apply_efficientnet_block``: keras-hub's EfficientNet (v1) block as plain Keras layers."""
    act, eps, wide = s["activation"], s["batch_norm_epsilon"], s["input_filters"] * s["expand_ratio"]
    y = x
    if s["expand_ratio"] != 1:
        y = g.conv(y, name + "expand_conv", wide, 1, 1, "same")
        y = g.activation(g.batch_norm(y, name + "expand_bn", eps, 0.99, axis=3), name + "expand_activation", act)
    y = g.zero_pad(y, name + "dwconv_pad", s["kernel_size"] // 2)
    settings = {"kernel_size": [s["kernel_size"]] * 2, "strides": [s["strides"]] * 2, "padding": "valid"}
    settings |= {"data_format": "channels_last", "depth_multiplier": 1, "activation": "linear", "use_bias": False}
    y = g.layer("DepthwiseConv2D", name + "dwconv", settings, [tensor(y)])
    y = g.activation(g.batch_norm(y, name + "dwconv_bn", eps, 0.99, axis=3), name + "dwconv_activation", act)
    if 0 < s["se_ratio"] <= 1:
        se = g.layer(
            "GlobalAveragePooling2D",
            name + "se_squeeze",
            {"data_format": "channels_last", "keepdims": False},
            [tensor(y)],
        )
        se = g.layer("Reshape", name + "se_reshape", {"target_shape": [1, 1, wide]}, [tensor(se)])
        squeezed = max(1, int(s["input_filters"] * s["se_ratio"]))
        se = g.conv(se, name + "se_reduce", squeezed, 1, 1, "same", use_bias=True, activation=act)
        se = g.conv(se, name + "se_expand", wide, 1, 1, "same", use_bias=True, activation="sigmoid")
        y = g.layer("Multiply", name + "se_excite", {}, [[tensor(y), tensor(se)]])
    y = g.batch_norm(
        g.conv(y, name + "project", s["output_filters"], 1, 1, "same"), name + "project_bn", eps, 0.99, axis=3
    )
    if s["projection_activation"]:
        y = g.activation(y, name + "projection_activation", s["projection_activation"])
    if s["strides"] == 1 and s["input_filters"] == s["output_filters"]:
        if s["dropout"] > 0:
            y = g.layer("Dropout", name + "drop", {"rate": s["dropout"], "noise_shape": [None, 1, 1, 1]}, [tensor(y)])
        y = g.add([y, x], name + "add")
    return y


def _lists(config: dict[str, Any], where: str) -> dict[str, list[Any]]:
    """The stackwise lists, each of one item per stack (the force and nores options at least that long)."""
    lists = {key: config.get(f"stackwise_{key}") for key in _STACKWISE}
    lists["force_input_filters"] = config.get("stackwise_force_input_filters", [0] * 7)
    lists["nores_option"] = config.get("stackwise_nores_option", [False] * 7)
    stacks = len(lists["kernel_sizes"]) if isinstance(lists["kernel_sizes"], list) else 0
    for key, value in lists.items():
        short = key in ("force_input_filters", "nores_option")
        if not isinstance(value, list) or not stacks or (len(value) < stacks if short else len(value) != stacks):
            raise WeightsError(f"{where}: its config's stackwise_{key} is {value!r}; one item per stack ({stacks})")
    bad = sorted(set(lists["block_types"]) - {"v1", *KINDS})
    if bad:
        raise WeightsError(f"{where}: block type(s) {bad}; keras-hub's are v1, {', '.join(KINDS)}")
    return lists


_CLASSES = {"cba": "CBABlock", "fused": "FusedMBConvBlock", "unfused": "MBConvBlock"}
_MODULES = {"cba": "cba", "fused": "fusedmbconv", "unfused": "mbconv"}


def _block(g: ImageGraph, x: str, kind: str, s: dict[str, Any], name: str) -> str:
    if kind == "v1":
        return _v1_block(g, x, s, name)
    drop = {"cba": ("expand_ratio", "se_ratio", "projection_activation"), "unfused": ("projection_activation",)}
    block = {key: value for key, value in s.items() if key not in drop.get(kind, ())}
    block |= {"data_format": "channels_last", "nores": s["nores"]}
    if kind == "fused":
        block["projection_kernel_size"] = 1
    module = f"keras_hub.src.models.efficientnet.{_MODULES[kind]}"
    return g.hub_layer(_CLASSES[kind], name, block, [tensor(x)], module)


def efficientnet_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``EfficientNetBackbone``: images [B, H, W, C] -> the stem -> each stack's blocks -> ``top_conv``,
    ``top_bn``, ``top_activation`` -> [B, H', W', num_features (rounded)]."""
    config_keys(config, _KEYS, where)
    if config.get("data_format", "channels_last") != "channels_last":
        raise WeightsError(f"{where}: data_format {config.get('data_format')!r}; keras-hub's blocks are channels last")
    g, lists = ImageGraph(config.get("dtype"), "channels_last", where), _lists(config, where)
    act, projection = config.get("activation", "swish"), config.get("projection_activation")
    eps = number(config, "batch_norm_epsilon", where, 1e-5)
    mom = number(config, "batch_norm_momentum", where, 0.9)
    x = images = g.images(config.get("input_shape", [None, None, 3]), where)
    if config.get("include_stem_padding", True):
        x = g.zero_pad(x, "stem_conv_pad", 1)
    stem = _round_filters(lists["input_filters"][0], lists["width_coefficients"][0], config)
    x = g.conv(x, "stem_conv", stem, 3, 2, config.get("stem_conv_padding", "valid"))
    x = g.activation(g.batch_norm(x, "stem_bn", eps, mom), "stem_activation", act)
    total, done = float(sum(lists["num_repeats"])), 0
    for i, kind in enumerate(lists["block_types"]):
        width = lists["width_coefficients"][i]
        filters_in = _round_filters(lists["input_filters"][i], width, config)
        filters_out = _round_filters(lists["output_filters"][i], width, config)
        for j in range(int(math.ceil(lists["depth_coefficients"][i] * lists["num_repeats"][i]))):
            filters_in = filters_out if j > 0 else filters_in
            if lists["force_input_filters"][i] > 0:
                filters_in = _round_filters(lists["force_input_filters"][i], width, config)
            settings = {"input_filters": filters_in, "output_filters": filters_out}
            settings |= {"kernel_size": lists["kernel_sizes"][i], "strides": lists["strides"][i] if j == 0 else 1}
            settings |= {
                "expand_ratio": lists["expansion_ratios"][i],
                "se_ratio": lists["squeeze_and_excite_ratios"][i],
            }
            settings |= {"activation": act, "projection_activation": projection, "batch_norm_momentum": mom}
            settings |= {"batch_norm_epsilon": eps, "nores": bool(lists["nores_option"][i])}
            settings["dropout"] = number(config, "dropout", where, 0.2) * done / total
            x = _block(g, x, kind, settings, f"block{i + 1}{chr(j + 97)}_")
            done += 1
    top = _round_filters(positive(config, "num_features", where, 1280), lists["width_coefficients"][-1], config)
    x = g.conv(x, "top_conv", top, 1, 1, "same")
    x = g.activation(g.batch_norm(x, "top_bn", eps, mom), "top_activation", act)
    return g.functional(str(config.get("name", "efficient_net_backbone")), {"images": images}, x)


keras_hub_model(
    "EfficientNetBackbone",
    family="efficientnet",
    tasks={"EfficientNetImageClassifier": image_classifier_graph(("EfficientNetBackbone",), efficientnet_graph)},
)(efficientnet_graph)
