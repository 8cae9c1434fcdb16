"""Keras's depthwise and separable convolutions: DepthwiseConv1D/2D and SeparableConv1D/2D.

A depthwise convolution convolves each input channel with ``depth_multiplier`` kernels of its own: a
grouped convolution with one group per input channel, whose output channel ``c·m + j`` is input channel
``c``'s ``j``-th kernel (the order of TensorFlow's ``depthwise_conv2d``). A separable convolution is a
depthwise one (with the strides, padding and dilation) followed by a 1x1 ``pointwise`` convolution to
``filters`` channels, then the bias and the activation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import (
    activation_of,
    agrees,
    as_tensor,
    channels_first,
    expect_variables,
    input_agrees,
    kernel_size_agrees,
    rank_of,
)
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.activation import activated, written_activation
from attnzoo.keras.converters.conv import CONV, conv_options, conv_window, convolve, pointwise, torch_padding
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.nodes import Node, glorot_uniform, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["SeparableConv"]


def _depthwise_weight(kernel: np.ndarray, rank: int) -> np.ndarray:
    """Keras's depthwise kernel [*k, in, m] as torch's grouped weight [in·m, 1, *k] (channel c·m + j)."""
    *k, channels, multiplier = kernel.shape
    moved = np.transpose(kernel, (rank, rank + 1, *range(rank)))  # [in, m, *k]
    return moved.reshape(channels * multiplier, 1, *k)


def _depthwise_kernel(record, arrays: list[np.ndarray], rank: int, what: str) -> np.ndarray:
    """The depthwise kernel [*k, in, m], checked against the config's kernel_size and the built input."""
    kernel = arrays[0]
    if kernel.ndim != rank + 2:
        raise Refused(f"{what} {list(kernel.shape)} is not {rank + 2}-D")
    kernel_size_agrees(record.config, kernel, rank)
    input_agrees(record, kernel.shape[-2], first=channels_first(record.config), what=f"its {what}")
    return kernel


def _convert_depthwise(record, arrays, ctx, rank: int) -> Converted:
    c = record.config
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 2 if use_bias else 1, record.class_name)
    kernel = _depthwise_kernel(record, arrays, rank, "depthwise kernel")
    channels, multiplier = kernel.shape[-2], kernel.shape[-1]
    agrees(c, "depth_multiplier", multiplier, "the kernel")
    padding, strides, dilation = conv_options(c, rank, causal=True)
    if use_bias and arrays[1].shape != (channels * multiplier,):
        raise Refused(f"bias {list(arrays[1].shape)} does not fit kernel {list(kernel.shape)}")
    spec = {
        "op": "conv",
        "rank": rank,
        "filters": channels * multiplier,
        "in_channels": channels,
        "kernel_size": list(kernel.shape[:rank]),
        "strides": strides,
        "dilation_rate": dilation,
        "padding": padding,
        "groups": channels,
        "activation": activation_of(c, "activation", ctx),
        "use_bias": use_bias,
        "channels_first": channels_first(c),
    }
    state = {"weight": as_tensor(_depthwise_weight(kernel, rank))}
    if use_bias:
        state["bias"] = as_tensor(arrays[1])
    return Converted(spec, state, ["a grouped convolution, one group per input channel"])


@keras_layer("DepthwiseConv1D", "DepthwiseConv2D")
def convert_depthwise_conv(record, arrays, ctx):
    """DepthwiseConv1D/2D, the rank from the class's name."""
    return _convert_depthwise(record, arrays, ctx, rank_of(record.class_name))


_SEPARABLE_KEYS = {"depthwise": "0.weight", "pointwise": "1.weight", "bias": "1.bias"}


class SeparableConv(Node):
    """``SeparableConv1D/2D``: [B, *spatial, in] -> depthwise (``depthwise`` [in·m, 1, *kernel], groups =
    in) -> pointwise (``pointwise`` [filters, in·m, 1...]) + ``bias`` -> activation -> [B, *spatial',
    filters]."""

    op = "separable_conv"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self,
        *,
        rank: int,
        filters: int,
        in_channels: int,
        depth_multiplier: int,
        kernel_size: list[int],
        strides: list[int],
        dilation_rate: list[int],
        padding: str = "valid",
        activation: str = "linear",
        use_bias: bool = True,
        channels_first: bool = False,
    ) -> None:
        super().__init__()
        self.rank, self.padding, self.channels_first, self.groups = rank, padding, channels_first, in_channels
        self.kernel_size, self.strides, self.dilation = list(kernel_size), list(strides), list(dilation_rate)
        middle = in_channels * depth_multiplier
        self.depthwise = nn.Parameter(torch.empty(middle, 1, *kernel_size))
        self.pointwise = nn.Parameter(torch.empty(filters, middle, *[1] * rank))
        self.bias = nn.Parameter(torch.empty(filters)) if use_bias else None
        receptive = math.prod(kernel_size)
        glorot_uniform(self.depthwise, receptive, depth_multiplier * receptive)
        glorot_uniform(self.pointwise, middle, filters)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.activation = activation
        self.act = activation_fn(activation)

    @classmethod
    def torch_key(cls, key: str) -> str:
        """Keys as the torch form's ``nn.Sequential`` of two convolutions holds them: ``depthwise`` ->
        ``0.weight``, ``pointwise`` -> ``1.weight``, ``bias`` -> ``1.bias``."""
        return _SEPARABLE_KEYS[key]

    def compute(self, x, mask):
        if not self.channels_first:
            x = x.movedim(-1, 1)
        y = convolve(
            x,
            self.depthwise,
            None,
            padding=self.padding,
            kernel_size=self.kernel_size,
            strides=self.strides,
            dilation=self.dilation,
            groups=self.groups,
        )
        if self.channels_first:
            return self.act(CONV[self.rank](y, self.pointwise, self.bias))
        return self.act(pointwise(y.movedim(1, -1), self.pointwise, self.bias))


def _convert_separable(record, arrays, ctx, rank: int) -> Converted:
    c = record.config
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 3 if use_bias else 2, record.class_name)
    depthwise = _depthwise_kernel(record, arrays, rank, "depthwise kernel")
    pointwise = arrays[1]
    channels, multiplier = depthwise.shape[-2], depthwise.shape[-1]
    if pointwise.shape[:-1] != (1,) * rank + (channels * multiplier,):
        raise Refused(f"pointwise kernel {list(pointwise.shape)} does not fit depthwise {list(depthwise.shape)}")
    filters = pointwise.shape[-1]
    agrees(c, "filters", filters, "the pointwise kernel")
    agrees(c, "depth_multiplier", multiplier, "the depthwise kernel")
    padding, strides, dilation = conv_options(c, rank, causal=True)
    spec = {
        "op": "separable_conv",
        "rank": rank,
        "filters": filters,
        "in_channels": channels,
        "depth_multiplier": multiplier,
        "kernel_size": list(depthwise.shape[:rank]),
        "strides": strides,
        "dilation_rate": dilation,
        "padding": padding,
        "activation": activation_of(c, "activation", ctx),
        "use_bias": use_bias,
        "channels_first": channels_first(c),
    }
    # keras pointwise [1.., in·m, filters] -> torch [filters, in·m, 1..]
    state = {
        "depthwise": as_tensor(_depthwise_weight(depthwise, rank)),
        "pointwise": as_tensor(np.transpose(pointwise, (rank + 1, rank, *range(rank)))),
    }
    if use_bias:
        if arrays[2].shape != (filters,):
            raise Refused(f"bias {list(arrays[2].shape)} does not fit {filters} filters")
        state["bias"] = as_tensor(arrays[2])
    return Converted(spec, state)


@keras_layer("SeparableConv1D", "SeparableConv2D", "SeparableConvolution1D", "SeparableConvolution2D")
def convert_separable_conv(record, arrays, ctx):
    """SeparableConv1D/2D, the rank from the class's name."""
    return _convert_separable(record, arrays, ctx, rank_of(record.class_name))


# -- the torch form -------------------------------------------------------------------------------------
@writes(SeparableConv)
def write_separable_conv(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.Sequential`` of the depthwise ``nn.Conv1d/2d`` (``groups`` = the input channels, no bias; Keras's
    strides, dilation and padding, :func:`~attnzoo.keras.converters.conv.torch_padding`) and the pointwise
    1x1 ``nn.Conv1d/2d`` (with the bias), on the channels-first view; back in Keras's layout before the
    activation. No mask comes out, as the node's."""
    x, rank = w.tensor(), spec.get("rank")
    if x is None or rank not in (1, 2) or not plain(spec, int, "in_channels", "filters", "depth_multiplier"):
        return False
    if not conv_window(spec, rank) or not written_activation(spec):
        return False
    channels, middle = spec["in_channels"], spec["in_channels"] * spec["depth_multiplier"]
    first = spec.get("channels_first", False)
    padding, h = torch_padding(w, spec, x if first else f"{x}.movedim(-1, 1)")
    k, s, d = (literal(spec[key]) for key in ("kernel_size", "strides", "dilation_rate"))
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    layer = w.declare(
        f"nn.Sequential(nn.Conv{rank}d({literal(channels)}, {literal(middle)}, kernel_size={k}, stride={s}{padding}, "
        f"dilation={d}, groups={literal(channels)}, bias=False), "
        f"nn.Conv{rank}d({literal(middle)}, {literal(spec['filters'])}, kernel_size=1{bias}))"
    )
    activated(w, f"{layer}({h})" + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    return True
