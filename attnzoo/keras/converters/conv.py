"""Keras's convolutions: Conv1D, Conv2D and Conv3D, with TensorFlow's ``same`` padding and ``causal`` 1-D
padding (the transposed, depthwise and separable ones are in their own files)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import (
    activation_of,
    agrees,
    as_tensor,
    channels_first,
    expect_variables,
    input_agrees,
    ints,
    kernel_size_agrees,
    rank_of,
)
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.activation import activated, written_activation
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.nodes import Node, activation_logits, glorot_uniform, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = [
    "Conv",
    "conv_window",
    "torch_padding",
    "same_padding",
    "conv_padding",
    "padded",
    "CONV",
    "conv_options",
    "to_keras_layout",
]

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def same_padding(length: Any, kernel: int, stride: int, dilation: int) -> tuple[Any, Any]:
    """TensorFlow's 'same' padding (what Keras means on every backend): output ceil(L / s), total pad
    ``max((ceil(L / s) - 1) * s + (k - 1) * d + 1 - L, 0)``, the extra on the right.

    ``length`` may be a symbolic size (a graph being exported): the pad is then computed from it in the
    graph, with no branch on its value, so an exported file pads right at every length. The ``max`` is
    needed only when the window is narrower than the stride (otherwise the total is never negative)."""
    out = (length + stride - 1) // stride
    total = (out - 1) * stride + (kernel - 1) * dilation + 1 - length
    if (kernel - 1) * dilation + 1 < stride:
        total = torch.sym_max(total, 0) if isinstance(total, torch.SymInt) else max(total, 0)
    left = total // 2
    return left, total - left


def padded(x: Tensor, pads: list[Any], value: float = 0.0) -> Tensor:
    """``F.pad(x, pads)``, skipped where every pad is a known 0; a symbolic pad is applied without asking
    its value (asking would fix the exported graph at the traced size)."""
    if all(isinstance(p, int) and p == 0 for p in pads):
        return x
    return F.pad(x, pads, value=value)


def conv_padding(x: Tensor, padding: str, kernel_size: list[int], strides: list[int], dilation: list[int]) -> list[int]:
    """``F.pad``'s list (last axis first) for Keras's ``padding`` of a channels-first ``x`` [B, C, *spatial]."""
    pads: list[int] = []
    for axis in reversed(range(len(kernel_size))):
        length = x.shape[2 + axis]
        k, s, d = kernel_size[axis], strides[axis], dilation[axis]
        if padding == "same":
            pads += list(same_padding(length, k, s, d))
        elif padding == "causal":
            pads += [(k - 1) * d, 0]
        else:
            pads += [0, 0]
    return pads


def convolve(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    *,
    padding: str,
    kernel_size: list[int],
    strides: list[int],
    dilation: list[int],
    groups: int = 1,
) -> Tensor:
    """torch's convolution of a channels-first ``x`` [B, C, *spatial] with Keras's ``padding``. A pad of
    known size, the same on both sides of every axis (``same`` at stride 1 and an odd kernel), goes to the
    convolution itself, which reads the border without a padded copy of ``x``; any other (TensorFlow's extra
    pad on the right, ``causal``, a size known only in an exported graph) through :func:`padded`."""
    conv = CONV[len(kernel_size)]
    pads = conv_padding(x, padding, kernel_size, strides, dilation)
    if all(isinstance(p, int) for p in pads) and pads[0::2] == pads[1::2]:
        inside = tuple(reversed(pads[0::2]))  # F.pad lists the last axis first, the convolution the first
        return conv(x, weight, bias, stride=strides, padding=inside, dilation=dilation, groups=groups)
    return conv(padded(x, pads), weight, bias, stride=strides, dilation=dilation, groups=groups)


def pointwise(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """A 1x1 convolution at stride 1 of channels-last ``x`` [B, *spatial, C]: a matrix product over the last
    axis, ``weight`` [filters, C, 1, ...]. (torch's CPU convolution copies a channels-last input for a 1x1
    kernel; the product reads it as it lies.)"""
    return F.linear(x, weight.flatten(1), bias)


def to_keras_layout(y: Tensor, channels_first: bool, act: Callable[[Tensor], Tensor]) -> Tensor:
    """A convolution's channels-first torch output [B, C, *spatial] back in Keras's layout, then its
    activation: Keras applies it to the layer's output as Keras lays it out, so softmax and log_softmax
    run over Keras's last axis (the channels, or the last spatial axis under ``channels_first``), never
    over torch's inner layout."""
    return act(y if channels_first else y.movedim(1, -1))


class Conv(Node):
    """``Conv1D`` / ``Conv2D`` / ``Conv3D`` (and ``DepthwiseConv1D/2D``, grouped by input channel):
    [B, *spatial, in] -> [B, *spatial', filters], ``weight`` [filters, in / groups, *kernel] (torch's
    layout; Keras stores [*kernel, in / groups, filters]). Padding ``valid``, ``same`` (TensorFlow's,
    extra on the right) and, for 1-D, ``causal`` (all on the left)."""

    op = "conv"
    logits = activation_logits
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self,
        *,
        rank: int,
        filters: int,
        in_channels: int,
        kernel_size: list[int],
        strides: list[int],
        dilation_rate: list[int],
        padding: Literal["valid", "same", "causal"] = "valid",
        groups: int = 1,
        activation: str = "linear",
        use_bias: bool = True,
        channels_first: bool = False,
    ) -> None:
        super().__init__()
        self.rank, self.padding, self.groups, self.channels_first = rank, padding, groups, channels_first
        self.kernel_size, self.strides, self.dilation = list(kernel_size), list(strides), list(dilation_rate)
        self.weight = nn.Parameter(torch.empty(filters, in_channels // groups, *kernel_size))
        self.bias = nn.Parameter(torch.empty(filters)) if use_bias else None
        receptive = math.prod(kernel_size)
        glorot_uniform(self.weight, in_channels // groups * receptive, filters * receptive)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.activation = activation
        self.act = activation_fn(activation)

    def compute(self, x, mask):
        if not self.channels_first and self.groups == 1 and all(k == 1 for k in self.kernel_size + self.strides):
            return self.act(pointwise(x, self.weight, self.bias))  # no padding, no change of layout
        if not self.channels_first:
            x = x.movedim(-1, 1)
        y = convolve(
            x,
            self.weight,
            self.bias,
            padding=self.padding,
            kernel_size=self.kernel_size,
            strides=self.strides,
            dilation=self.dilation,
            groups=self.groups,
        )
        return to_keras_layout(y, self.channels_first, self.act)


def conv_options(c: Mapping[str, Any], rank: int, *, causal: bool = True) -> tuple[str, list[int], list[int]]:
    """A convolution config's ``padding`` (``causal`` for 1-D where allowed), ``strides`` and
    ``dilation_rate``, checked."""
    padding = str(c.get("padding", "valid")).lower()
    if padding not in ("valid", "same") and not (padding == "causal" and rank == 1 and causal):
        raise Refused(f"padding {padding!r} is not supported")
    strides = ints(c.get("strides", 1), rank, "strides")
    dilation = ints(c.get("dilation_rate", 1), rank, "dilation_rate")
    if any(s > 1 for s in strides) and any(d > 1 for d in dilation):
        raise Refused("strides and dilation_rate both above 1 (Keras refuses this too)")
    return padding, strides, dilation


def _convert_conv(record, arrays, ctx, rank: int):
    c = record.config
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 2 if use_bias else 1, record.class_name)
    kernel = arrays[0]
    if kernel.ndim != rank + 2:
        raise Refused(f"kernel {list(kernel.shape)} is not {rank + 2}-D")
    agrees(c, "filters", kernel.shape[-1], "the kernel")
    kernel_size_agrees(c, kernel, rank)
    padding, strides, dilation = conv_options(c, rank)
    groups = int(c.get("groups", 1) or 1)
    input_agrees(record, kernel.shape[-2] * groups, first=channels_first(c))
    spec = {
        "op": "conv",
        "rank": rank,
        "filters": kernel.shape[-1],
        "in_channels": kernel.shape[-2] * groups,
        "kernel_size": list(kernel.shape[:rank]),
        "strides": strides,
        "dilation_rate": dilation,
        "padding": padding,
        "groups": groups,
        "activation": activation_of(c, "activation", ctx),
        "use_bias": use_bias,
        "channels_first": channels_first(c),
    }
    # keras [*kernel, in / groups, filters] -> torch [filters, in / groups, *kernel]
    weight = np.transpose(kernel, (rank + 1, rank, *range(rank)))
    state = {"weight": as_tensor(weight)}
    if use_bias:
        state["bias"] = as_tensor(arrays[1])
    return Converted(spec, state)


@keras_layer("Conv1D", "Conv2D", "Conv3D", "Convolution1D", "Convolution2D", "Convolution3D")
def convert_conv(record, arrays, ctx):
    """Conv1D/2D/3D, the rank from the class's name."""
    return _convert_conv(record, arrays, ctx, rank_of(record.class_name))


# -- the torch form -------------------------------------------------------------------------------------
def conv_window(spec: dict[str, Any], rank: Any) -> bool:
    """Whether a convolution spec's ``kernel_size``, ``strides`` and ``dilation_rate`` are ``rank`` plain ints."""
    windows = (spec.get("kernel_size"), spec.get("strides"), spec.get("dilation_rate"))
    return all(isinstance(v, (list, tuple)) and len(v) == rank and plain(dict(enumerate(v)), int) for v in windows)


def torch_padding(w: Writer, spec: dict[str, Any], h: str) -> tuple[str, str]:
    """Keras's padding of the convolution ``spec`` for torch's ``nn.Conv*d`` on the channels-first ``h``:
    the constructor's ``padding`` text (torch's ``"same"`` where it is centred: Keras's "same" at stride 1
    pads (k - 1) * d in all, the extra one on the right as torch's does, and torch reads the border without
    a padded copy where the two sides are equal) and the input as the layer is called with it (``F.pad`` by
    :func:`conv_padding`, TensorFlow's extra one on the right by the input's length; ``causal`` pads the
    left)."""
    k, s, d = spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    symmetric = all((a - 1) * b % 2 == 0 for a, b in zip(k, d, strict=True))
    inside = spec.get("padding") == "same" and all(v == 1 for v in s) and symmetric
    if spec.get("padding") == "same" and not inside:
        pads = w.imports("attnzoo.keras.converters.conv", "conv_padding")
        w.assign(h)
        return "", f'F.pad({w.out}, {pads}({w.out}, "same", {literal(k)}, {literal(s)}, {literal(d)}))'
    if spec.get("padding") == "causal":
        return "", f"F.pad({h}, [{(k[0] - 1) * d[0]}, 0])"
    return (', padding="same"' if inside else ""), h


@writes(Conv)
def write_conv(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.Conv1d/2d/3d`` on the channels-first view, with Keras's padding (:func:`torch_padding`). Back in
    Keras's layout before the activation (a softmax runs over Keras's last axis). No mask comes out, as the
    node's."""
    x, rank = w.tensor(), spec.get("rank")
    if x is None or rank not in (1, 2, 3) or not plain(spec, int, "in_channels", "filters", "groups"):
        return False
    if not conv_window(spec, rank) or not written_activation(spec):
        return False
    k, s, d = spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    groups = f", groups={literal(spec['groups'])}" if spec.get("groups", 1) != 1 else ""
    first = spec.get("channels_first", False)
    padding, h = torch_padding(w, spec, x if first else f"{x}.movedim(-1, 1)")
    layer = w.declare(
        f"nn.Conv{rank}d({literal(spec['in_channels'])}, {literal(spec['filters'])}, "
        f"kernel_size={literal(k)}, stride={literal(s)}{padding}, dilation={literal(d)}{groups}{bias})"
    )
    activated(w, f"{layer}({h})" + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    return True
