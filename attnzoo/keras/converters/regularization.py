"""Keras's noise layers: Dropout, SpatialDropout1D/2D/3D, GaussianDropout, GaussianNoise, AlphaDropout.

Each is the identity at inference (``model.eval()``, Keras's ``training=False``: the same tensor, with its
mask, goes on) and acts as Keras's does in training (``model.train()``), with rate p:

==================  ==============================================================================
``dropout``         ``x * keep / (1 - p)``, keep ~ Bernoulli(1 - p), drawn once per element of the noise
                    shape (SpatialDropout shares it along the spatial axes: whole channels drop)
``gaussian_dropout`` ``x * n``, n ~ N(1, p / (1 - p))
``gaussian_noise``  ``x + n``, n ~ N(0, stddev²)
``alpha_dropout``   ``a (x keep + α' (1 - keep)) + b``, α' = -1.6733 · 1.0507, a = ((1 - p)(1 + p α'²))^-½,
                    b = -a α' p (keeps SELU's mean and variance)
==================  ==============================================================================

The random numbers are torch's (``torch.manual_seed`` makes them repeatable), not Keras's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.arguments import channels_first, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["Noise", "NOISE_KINDS"]

NOISE_KINDS = ("dropout", "gaussian_dropout", "gaussian_noise", "alpha_dropout")
_TRAINING = "the identity in eval(); active in train(), as Keras's training=True"
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


class Noise(Node):
    """A Keras noise layer (see the module docstring): ``kind``, ``rate`` (the stddev for gaussian_noise),
    ``shared_axes`` (axes of the input along which one noise value is shared, Keras's noise_shape of 1)."""

    op = "noise"
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(self, *, kind: str, rate: float, shared_axes: list[int] | None = None) -> None:
        super().__init__()
        if kind not in NOISE_KINDS:
            raise ValueError(f"unknown noise kind {kind!r}; one of {', '.join(NOISE_KINDS)}")
        self.kind, self.rate, self.shared_axes = kind, float(rate), [int(a) for a in shared_axes or []]

    def _noise_shape(self, x: Tensor) -> list[int]:
        shared = {a % x.dim() for a in self.shared_axes}
        return [1 if axis in shared else size for axis, size in enumerate(x.shape)]

    def compute(self, x, mask):
        if not self.training or self.rate == 0.0:
            return x  # the same tensor: its mask goes on with it, as in Keras
        if self.kind == "gaussian_noise":
            return x + torch.randn_like(x) * self.rate
        if self.kind == "gaussian_dropout":
            return x * (1.0 + torch.randn_like(x) * math.sqrt(self.rate / (1.0 - self.rate)))
        keep = torch.rand(self._noise_shape(x), device=x.device) >= self.rate
        if self.kind == "dropout":
            if self.rate >= 1.0:
                return torch.zeros_like(x)
            return torch.where(keep, x / (1.0 - self.rate), torch.zeros_like(x))
        alpha_p = -_SELU_ALPHA * _SELU_SCALE
        a = ((1.0 - self.rate) * (1.0 + self.rate * alpha_p**2)) ** -0.5
        b = -a * alpha_p * self.rate
        kept = keep.to(x.dtype)
        return a * (x * kept + alpha_p * (1.0 - kept)) + b


def _shared_axes(record) -> list[int]:
    c = record.config
    rank = {"SpatialDropout1D": 1, "SpatialDropout2D": 2, "SpatialDropout3D": 3}.get(record.class_name)
    if rank is not None:  # whole channels drop: one value per sample and channel
        first = 2 if channels_first(c) else 1
        return list(range(first, first + rank))
    shape = c.get("noise_shape")
    if shape is None:
        return []
    if not isinstance(shape, (list, tuple)) or not all(d is None or isinstance(d, int) for d in shape):
        raise Refused(f"noise_shape {shape!r} is not a list of ints and None")
    return [axis for axis, d in enumerate(shape) if d == 1]


def _rate(record, key: str) -> float:
    value = record.config.get(key, 0.0)
    limit = math.inf if key == "stddev" else 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= limit:
        raise Refused(f"{key} {value!r} is not in [0, {limit}]")
    if key == "rate" and record.class_name != "Dropout" and float(value) >= 1.0:
        raise Refused(f"rate {value!r} must be below 1")
    return float(value)


@keras_layer("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "AlphaDropout")
def convert_dropout(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    kind = "alpha_dropout" if record.class_name == "AlphaDropout" else "dropout"
    spec = {"op": "noise", "kind": kind, "rate": _rate(record, "rate"), "shared_axes": _shared_axes(record)}
    return Converted(spec, {}, [_TRAINING])


@keras_layer("GaussianDropout")
def convert_gaussian_dropout(record, arrays, ctx):
    expect_variables(arrays, 0, "GaussianDropout")
    spec = {"op": "noise", "kind": "gaussian_dropout", "rate": _rate(record, "rate")}
    return Converted(spec, {}, [_TRAINING])


@keras_layer("GaussianNoise")
def convert_gaussian_noise(record, arrays, ctx):
    expect_variables(arrays, 0, "GaussianNoise")
    spec = {"op": "noise", "kind": "gaussian_noise", "rate": _rate(record, "stddev")}
    return Converted(spec, {}, [_TRAINING])


# -- the torch form -------------------------------------------------------------------------------------
@writes(Noise)
def write_noise(w: Writer, spec: dict[str, Any]) -> bool:
    """``Dropout`` with no shared axes: ``F.dropout(x, rate, self.training)``, torch's own dropout; shared
    along axis 1 (``SpatialDropout1D`` of a channels-last [B, T, C]: whole channels drop): ``F.dropout1d`` on
    the channels-first view, which takes 3-D inputs only (another rank is torch's error, never another
    noise); any other noise layer of rate 0: the input as it is. The mask passes on, as the node's. The
    other noise layers keep their node call."""
    x, rate, shared = w.tensor(), spec.get("rate"), spec.get("shared_axes")
    if x is None or not plain({0: rate}, float) or rate < 0:
        return False
    if spec.get("kind") == "dropout" and rate < 1 and not shared:
        w.assign(f"F.dropout({x}, {literal(rate)}, self.training)")
    elif spec.get("kind") == "dropout" and rate < 1 and shared == [1]:
        w.assign(f"F.dropout1d({x}.movedim(-1, 1), {literal(rate)}, self.training).movedim(1, -1)")
    elif rate == 0:
        w.assign(x)
    else:
        return False
    return True
