"""Keras's transposed convolutions: Conv1DTranspose, Conv2DTranspose and Conv3DTranspose.

Keras (TensorFlow, JAX, and keras 3's torch backend alike) computes a transposed convolution as the full
one, of length ``(L - 1)·s + k_eff`` per axis (``k_eff = (k - 1)·d + 1``), cut to a window that the
padding decides: ``valid`` keeps the full length and adds ``output_padding`` zeros' worth on the right
(by default ``max(k_eff, s) - k_eff``, so the length is ``(L - 1)·s + max(k_eff, s)``); ``same`` makes it
``L·s``, cutting ``k_eff - 1 - left`` on the left where ``left = min(ceil(p / 2), k_eff - 1)`` and
``p = s + k_eff - 2`` (with ``output_padding`` given, ``p = k_eff + k_eff mod 2 - 2 + output_padding``).
torch's own ``padding`` is symmetric, so the node runs torch's full transposed convolution and cuts (or
pads) each side itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

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
from attnzoo.keras.converters.conv import conv_options, to_keras_layout
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import flags, plain, rank, sizes
from attnzoo.keras.nodes import Node, glorot_uniform, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["ConvTranspose", "transpose_window"]

_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def transpose_window(
    kernel: int, stride: int, dilation: int, padding: str, output_padding: int | None
) -> tuple[int, int]:
    """How much Keras cuts from the left and from the right of the full transposed convolution of one
    axis (a negative amount is zeros added)."""
    k = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(k, stride) - k if output_padding is None else output_padding
        left, right = k - 1, k - 1 + extra
    else:
        total = stride + k - 2 if output_padding is None else k + k % 2 - 2 + output_padding
        left = min(total // 2 + total % 2, k - 1)
        right = total - left
    return k - 1 - left, k - 1 - right


class ConvTranspose(Node):
    """``Conv1DTranspose`` / ``Conv2DTranspose`` / ``Conv3DTranspose``: [B, *spatial, in] ->
    [B, *spatial', filters] with Keras's output window (module docstring); ``weight`` [in, filters,
    *kernel] (torch's layout; Keras stores [*kernel, filters, in]), ``bias`` [filters]."""

    op = "conv_transpose"
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
        padding: str = "valid",
        output_padding: list[int] | None = None,
        activation: str = "linear",
        use_bias: bool = True,
        channels_first: bool = False,
    ) -> None:
        super().__init__()
        self.rank, self.padding, self.channels_first = rank, padding, channels_first
        self.kernel_size, self.strides, self.dilation = list(kernel_size), list(strides), list(dilation_rate)
        self.output_padding = None if output_padding is None else list(output_padding)
        self.weight = nn.Parameter(torch.empty(in_channels, filters, *kernel_size))
        self.bias = nn.Parameter(torch.empty(filters)) if use_bias else None
        receptive = math.prod(kernel_size)
        glorot_uniform(self.weight, in_channels * receptive, filters * receptive)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.activation = activation
        self.act = activation_fn(activation)

    def compute(self, x, mask):
        if not self.channels_first:
            x = x.movedim(-1, 1)
        y = _TRANSPOSE[self.rank](x, self.weight, None, stride=self.strides, dilation=self.dilation)
        cuts: list[int] = []
        for axis in reversed(range(self.rank)):
            extra = None if self.output_padding is None else self.output_padding[axis]
            left, right = transpose_window(
                self.kernel_size[axis], self.strides[axis], self.dilation[axis], self.padding, extra
            )
            cuts += [-left, -right]  # F.pad cuts where the amount is negative
        if any(cuts):
            y = F.pad(y, cuts)
        if self.bias is not None:
            y = y + self.bias.view(-1, *[1] * self.rank)
        return to_keras_layout(y, self.channels_first, self.act)


def _convert(record, arrays, ctx, rank: int) -> Converted:
    c = record.config
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 2 if use_bias else 1, record.class_name)
    kernel = arrays[0]
    if kernel.ndim != rank + 2:
        raise Refused(f"kernel {list(kernel.shape)} is not {rank + 2}-D")
    agrees(c, "filters", kernel.shape[-2], "the kernel")
    kernel_size_agrees(c, kernel, rank)
    input_agrees(record, kernel.shape[-1], first=channels_first(c))
    padding, strides, dilation = conv_options(c, rank, causal=False)
    output_padding = c.get("output_padding")
    if output_padding is not None:
        output_padding = ints(output_padding, rank, "output_padding")
        if any(p >= s for p, s in zip(output_padding, strides, strict=True)):
            raise Refused(f"output_padding {output_padding} must be below strides {strides} (Keras refuses it too)")
    if use_bias and arrays[1].shape != (kernel.shape[-2],):
        raise Refused(f"bias {list(arrays[1].shape)} does not fit kernel {list(kernel.shape)}")
    spec = {
        "op": "conv_transpose",
        "rank": rank,
        "filters": kernel.shape[-2],
        "in_channels": kernel.shape[-1],
        "kernel_size": list(kernel.shape[:rank]),
        "strides": strides,
        "dilation_rate": dilation,
        "padding": padding,
        "output_padding": output_padding,
        "activation": activation_of(c, "activation", ctx),
        "use_bias": use_bias,
        "channels_first": channels_first(c),
    }
    # keras [*kernel, filters, in] -> torch [in, filters, *kernel]
    state = {"weight": as_tensor(np.transpose(kernel, (rank + 1, rank, *range(rank))))}
    if use_bias:
        state["bias"] = as_tensor(arrays[1])
    return Converted(spec, state)


@keras_layer(
    "Conv1DTranspose",
    "Conv2DTranspose",
    "Conv3DTranspose",
    "Convolution1DTranspose",
    "Convolution2DTranspose",
    "Convolution3DTranspose",
)
def convert_conv_transpose(record, arrays, ctx):
    """Conv1D/2D/3DTranspose, the rank from the class's name."""
    return _convert(record, arrays, ctx, rank_of(record.class_name))


# -- the torch form -------------------------------------------------------------------------------------
@writes(ConvTranspose)
def write_conv_transpose(w: Writer, spec: dict[str, Any]) -> bool:
    """``Conv1D/2D/3DTranspose``: ``nn.ConvTransposeNd`` whose symmetric ``padding`` and ``output_padding``
    cut the full transposed convolution where Keras cuts it (see :func:`_transpose_padding`); the node's
    ``weight`` [in, filters, *kernel] is torch's layout. No mask comes out, as the node's."""
    x = w.tensor()
    if x is None or not _writable(spec):
        return False
    n, k, s, d = spec["rank"], spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    padding, extra, crops = _transpose_padding(spec) or ([0] * n, [0] * n, [0] * n)
    options = f", padding={literal(padding)}" if any(padding) else ""
    options += f", output_padding={literal(extra)}" if any(extra) else ""
    options += f", dilation={literal(d)}" if any(v != 1 for v in d) else ""
    options += "" if spec.get("use_bias", True) else ", bias=False"
    layer = w.declare(
        f"nn.ConvTranspose{n}d({literal(spec['in_channels'])}, "
        f"{literal(spec['filters'])}, kernel_size={literal(k)}, stride={literal(s)}{options})"
    )
    first = spec.get("channels_first", False)
    h = x if first else f"{x}.movedim(-1, 1)"
    cut = ""
    if any(crops):  # Keras cuts more on the right: torch's symmetric cut, then the rest off the end
        cut = "[:, :, " + ", ".join(f":-{literal(c)}" if c else ":" for c in crops) + "]"
    activated(w, f"{layer}({h}){cut}" + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    return True


def _writable(spec: dict[str, Any]) -> bool:
    """Whether the spec's values are of the types torch's form computes with, and torch's padding gives
    Keras's window."""
    if (
        not rank(spec)
        or not plain(spec, int, "in_channels", "filters")
        or not flags(spec, "use_bias", "channels_first")
    ):
        return False
    n, output_padding = spec["rank"], spec.get("output_padding")
    if not all(sizes(spec.get(k), n) for k in ("kernel_size", "strides", "dilation_rate")):
        return False
    if spec.get("padding", "valid") not in ("valid", "same") or not written_activation(spec):
        return False
    if output_padding is not None and not sizes(output_padding, n, least=0):
        return False
    return _transpose_padding(spec) is not None


def _transpose_padding(spec: dict[str, Any]) -> tuple[list[int], list[int], list[int]] | None:
    """torch's ``padding`` and ``output_padding`` per axis, and what to cut off the end after, that give
    Keras's window of the full transposed convolution, or None where none do. torch cuts ``padding`` from
    each side and gives back ``output_padding`` (< max(stride, dilation)) on the right; Keras cuts ``left``
    and ``right`` (:func:`transpose_window`). Where ``0 <= left - right < max(stride, dilation)``, torch's
    own arguments say it; where Keras cuts more from the right ("same" with an odd total), torch cuts
    ``left`` from each side and the written call slices the remaining ``right - left`` off the end."""
    padding, extra, crops = [], [], []
    output_padding = spec.get("output_padding")
    for axis in range(spec["rank"]):
        k, s, d = spec["kernel_size"][axis], spec["strides"][axis], spec["dilation_rate"][axis]
        given = None if output_padding is None else output_padding[axis]
        left, right = transpose_window(k, s, d, spec.get("padding", "valid"), given)
        if left < 0 or left - right >= max(s, d):
            return None
        padding.append(left)
        extra.append(max(left - right, 0))
        crops.append(max(right - left, 0))
    return padding, extra, crops
