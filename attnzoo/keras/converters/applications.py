"""The layer classes ``keras.applications`` define for their own models (keras 3.15's
``keras/src/applications``): ConvNeXt's ``LayerScale`` and ``StochasticDepth``, InceptionResNetV2's
``CustomScaleLayer``. Every other layer those models hold is a ``keras.layers`` class.

==================  =========================================================================================
``LayerScale``      ``x * gamma``, ``gamma`` [projection_dim] on the last axis
``StochasticDepth`` the identity at inference; in training ``x / keep * floor(keep + u)``, keep = 1 - rate,
                    u ~ U[0, 1) drawn once per sample (a whole residual branch drops, as Keras's)
``CustomScaleLayer`` ``inputs[0] + inputs[1] * scale``
==================  =========================================================================================

A legacy .h5 records no module, so there these bare class names are taken for Keras's classes, as
Keras's own ``keras.layers`` names are.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["LayerScale", "StochasticDepth", "ScaledSum"]


class LayerScale(Node):
    """ConvNeXt's ``LayerScale``: [..., C] * ``gamma`` [C]."""

    op = "layer_scale"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, projection_dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(projection_dim))

    def compute(self, x, mask):
        return x * self.gamma


@keras_layer("LayerScale")
def convert_layer_scale(record, arrays, ctx):
    expect_variables(arrays, 1, "LayerScale")
    gamma = arrays[0]
    if gamma.ndim != 1:
        raise Refused(f"gamma {list(gamma.shape)} is not 1-D")
    return Converted({"op": "layer_scale", "projection_dim": int(gamma.shape[0])}, {"gamma": as_tensor(gamma)})


class StochasticDepth(Node):
    """ConvNeXt's ``StochasticDepth(drop_path_rate)``: the identity in eval(); in train() each sample's
    whole input is dropped with probability ``rate`` and the kept ones scaled by 1 / (1 - rate)."""

    op = "stochastic_depth"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, rate: float) -> None:
        super().__init__()
        self.rate = float(rate)

    def compute(self, x: Tensor, mask):
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        u = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), device=x.device, dtype=x.dtype)
        return x / keep * torch.floor(keep + u)


@keras_layer("StochasticDepth")
def convert_stochastic_depth(record, arrays, ctx):
    expect_variables(arrays, 0, "StochasticDepth")
    rate = record.config.get("drop_path_rate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) < 1.0:
        raise Refused(f"drop_path_rate {rate!r} is not in [0, 1)")
    return Converted(
        {"op": "stochastic_depth", "rate": float(rate)},
        {},
        ["the identity in eval(); drops whole samples in train(), as Keras's training=True"],
    )


class ScaledSum(Node):
    """InceptionResNetV2's ``CustomScaleLayer(scale)``: ``[x, r] -> x + r * scale``."""

    op = "scaled_sum"

    def __init__(self, *, scale: float) -> None:
        super().__init__()
        self.scale = float(scale)

    def forward(self, args, kwargs, masks):
        inputs = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        if len(inputs) != 2:
            raise ValueError(f"CustomScaleLayer takes [shortcut, residual], got {len(inputs)} tensors")
        return [inputs[0] + inputs[1] * self.scale], [None]


@keras_layer("CustomScaleLayer")
def convert_custom_scale(record, arrays, ctx):
    expect_variables(arrays, 0, "CustomScaleLayer")
    scale = record.config.get("scale")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise Refused(f"scale {scale!r} is not a number")
    return Converted({"op": "scaled_sum", "scale": float(scale)}, {})
