"""Keras's normalisation layers: LayerNormalization and BatchNormalization (training and inference)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import KerasWeightsWarning
from attnzoo.keras.arguments import as_tensor, expect_shape, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import flags, plain, sizes
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["LayerNorm", "BatchNorm"]

_KERAS_EPSILON = 1e-7  # keras.backend.epsilon(), which BatchNormalization adds to a masked count


def _broadcast_shape(ndim: int, axes: Sequence[int], sizes: Sequence[int]) -> list[int]:
    shape = [1] * ndim
    for axis, size in zip(axes, sizes, strict=True):
        shape[axis] = size
    return shape


class LayerNorm(Node):
    """``LayerNormalization(axis, epsilon, center, scale, rms_scaling)``, computed in float32 at least."""

    op = "layer_norm"
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(
        self, *, axis: list[int], shape: list[int], epsilon: float, center: bool, scale: bool, rms_scaling: bool = False
    ) -> None:
        super().__init__()
        self.axis, self.shape, self.epsilon, self.rms_scaling = list(axis), list(shape), epsilon, rms_scaling
        self.weight = nn.Parameter(torch.empty(*shape)) if scale else None
        self.bias = nn.Parameter(torch.empty(*shape)) if center and not rms_scaling else None
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def compute(self, x, mask):
        dtype = x.dtype
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        axes = sorted(a % x.dim() for a in self.axis)
        shape = _broadcast_shape(x.dim(), axes, [x.shape[a] for a in axes])
        gamma = None if self.weight is None else self.weight.to(work.dtype).reshape(shape)
        beta = None if self.bias is None else self.bias.to(work.dtype).reshape(shape)
        if self.rms_scaling:  # keras 3 scales by the variance here, not the mean square
            variance = work.var(dim=axes, keepdim=True, unbiased=False)
            out = work * torch.rsqrt(variance + self.epsilon)
            out = out if gamma is None else out * gamma
        else:
            mean = work.mean(dim=axes, keepdim=True)
            variance = (work - mean).square().mean(dim=axes, keepdim=True)
            out = (work - mean) * torch.rsqrt(variance + self.epsilon)
            if gamma is not None:
                out = out * gamma
            if beta is not None:
                out = out + beta
        return out.to(dtype)


@keras_layer("LayerNormalization")
def convert_layer_norm(record, arrays, ctx):
    c = record.config
    axis = c.get("axis", -1)
    axes = [axis] if isinstance(axis, int) else list(axis)
    scale, center = bool(c.get("scale", True)), bool(c.get("center", True))
    rms = bool(c.get("rms_scaling", False))
    count = int(scale) + int(center and not rms)
    expect_variables(arrays, (count, int(scale) + int(center)), "LayerNormalization")
    shape = list(arrays[0].shape) if arrays else []
    if record.build_shape is not None:  # Keras makes gamma and beta of the input's size on the axes
        rank = len(record.build_shape)
        if any(not -rank <= a < rank for a in axes):
            raise Refused(f"axis {axis!r} is outside its input of shape {record.build_shape}")
        shape = [record.build_shape[a % rank] for a in axes]
    for name, array in zip(("gamma", "beta") if scale else ("beta",), arrays, strict=False):
        expect_shape(array, shape, name)
    spec = {"op": "layer_norm", "axis": axes, "shape": shape, "epsilon": float(c.get("epsilon", 1e-3))}
    spec.update(center=center, scale=scale, rms_scaling=rms)
    state: dict[str, torch.Tensor] = {}
    at = 0
    if scale:
        state["weight"] = as_tensor(arrays[at])
        at += 1
    if center and not rms:
        state["bias"] = as_tensor(arrays[at])
    return Converted(spec, state)


class BatchNorm(Node):
    """``BatchNormalization(axis, momentum, epsilon, center, scale)`` as Keras 3 computes it.

    Inference (``eval()``, or a layer Keras had ``trainable=False``)::

        y = (x - moving_mean) / sqrt(moving_variance + epsilon) * gamma + beta

    Training (``train()``): the same with the batch's mean and biased variance over every axis but
    ``axis`` (over the kept steps only when the input carries a [B, T] mask: ``sum / (count + 1e-7)``),
    and the moving statistics move towards them: ``moving = moving * momentum + batch * (1 - momentum)``.
    torch's ``nn.BatchNorm`` differs on both counts (unbiased variance; ``momentum`` weighs the batch).
    Computed in float32 at least.
    """

    op = "batch_norm"
    supports_masking = True

    def __init__(
        self,
        *,
        axis: int,
        features: int,
        epsilon: float,
        center: bool,
        scale: bool,
        momentum: float = 0.99,
    ) -> None:
        super().__init__()
        self.axis, self.epsilon, self.momentum = axis, epsilon, momentum
        self.weight = nn.Parameter(torch.empty(features)) if scale else None
        self.bias = nn.Parameter(torch.empty(features)) if center else None
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _batch_moments(self, x: Tensor, mask: Tensor | None, axes: list[int]) -> tuple[Tensor, Tensor]:
        if mask is None or mask.dim() != x.dim() - 1:
            return x.mean(dim=axes), x.var(dim=axes, unbiased=False)
        keep = mask.unsqueeze(-1).expand_as(x)
        count = keep.to(x.dtype).sum(dim=axes, keepdim=True) + _KERAS_EPSILON
        mean = torch.where(keep, x, torch.zeros_like(x)).sum(dim=axes, keepdim=True) / count
        variance = torch.where(keep, x - mean, torch.zeros_like(x)).square().sum(dim=axes, keepdim=True) / count
        return mean.flatten(), variance.flatten()

    def compute(self, x, mask):
        dtype = x.dtype
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        axis = self.axis % x.dim()
        shape = [1] * x.dim()
        shape[axis] = -1
        if self.training and getattr(self, "trainable", True):
            mean, variance = self._batch_moments(work, mask, [a for a in range(x.dim()) if a != axis])
            with torch.no_grad():
                m = self.momentum
                self.running_mean.mul_(m).add_(mean.detach().to(self.running_mean.dtype), alpha=1 - m)
                self.running_var.mul_(m).add_(variance.detach().to(self.running_var.dtype), alpha=1 - m)
        elif axis in (1, x.dim() - 1) and x.dim() > 1:  # inference, with the channels where torch's kernel reads
            channels_first = work if axis == 1 else work.movedim(-1, 1)  # a view: NHWC is torch's channels_last
            mean, var, weight, bias = (
                None if t is None else t.to(work.dtype)  # no copy where the dtypes agree (a half model: float)
                for t in (self.running_mean, self.running_var, self.weight, self.bias)
            )
            y = F.batch_norm(channels_first, mean, var, weight, bias, False, 0.0, self.epsilon)
            return (y if axis == 1 else y.movedim(1, -1)).to(dtype)
        else:  # inference on another axis: y = x * factor + shift, one pass over x
            factor = torch.rsqrt(self.running_var.to(work.dtype) + self.epsilon)
            if self.weight is not None:
                factor = factor * self.weight.to(work.dtype)
            shift = -self.running_mean.to(work.dtype) * factor
            if self.bias is not None:
                shift = shift + self.bias.to(work.dtype)
            return torch.addcmul(shift.reshape(shape), work, factor.reshape(shape)).to(dtype)
        factor = torch.rsqrt(variance + self.epsilon)
        if self.weight is not None:
            factor = factor * self.weight.to(work.dtype)
        out = (work - mean.reshape(shape)) * factor.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.to(work.dtype).reshape(shape)
        return out.to(dtype)


@keras_layer("BatchNormalization")
def convert_batch_norm(record, arrays, ctx):
    c = record.config
    axis = c.get("axis", -1)
    if isinstance(axis, list):
        if len(axis) != 1:
            raise Refused(f"axis {axis!r}: one axis is supported")
        axis = axis[0]
    if c.get("renorm"):
        raise Refused("renorm=True (batch renormalisation) is not supported")
    scale, center = bool(c.get("scale", True)), bool(c.get("center", True))
    expect_variables(arrays, 2 + int(scale) + int(center), "BatchNormalization")
    momentum = c.get("momentum", 0.99)
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0.0 <= momentum <= 1.0:
        raise Refused(f"momentum {momentum!r} is not in [0, 1]")
    features: int | None = int(arrays[-1].shape[0]) if arrays[-1].ndim == 1 else None
    if record.build_shape is not None and -len(record.build_shape) <= axis < len(record.build_shape):
        features = record.build_shape[axis]  # Keras makes every variable of the input's size on the axis
    names = ["gamma"] * scale + ["beta"] * center + ["moving_mean", "moving_variance"]
    for name, array in zip(names, arrays, strict=True):
        expect_shape(array, [features], name)
    variance = arrays[-1]
    if (variance < 0).any():
        channels = np.flatnonzero(variance < 0)
        warnings.warn(
            f"BatchNormalization {record.key!r}: moving_variance is negative at channel(s) "
            f"{channels[:8].tolist()} (lowest {float(variance.min()):g}); Keras loads and runs it too, and at "
            f"inference a channel whose variance + epsilon is below zero is NaN in both",
            KerasWeightsWarning,
            stacklevel=2,
        )
    spec = {"op": "batch_norm", "axis": int(axis), "features": int(arrays[-1].shape[0]), "momentum": float(momentum)}
    spec.update(epsilon=float(c.get("epsilon", 1e-3)), center=center, scale=scale)
    state: dict[str, torch.Tensor] = {}
    at = 0
    if scale:
        state["weight"], at = as_tensor(arrays[at]), at + 1
    if center:
        state["bias"], at = as_tensor(arrays[at]), at + 1
    state["running_mean"], state["running_var"] = as_tensor(arrays[at]), as_tensor(arrays[at + 1])
    notes = ["eval(): the moving statistics; train(): batch statistics (biased variance), moving ones updated"]
    return Converted(spec, state, notes)


# -- the torch form -------------------------------------------------------------------------------------
@writes(LayerNorm)
def write_layer_norm(w: Writer, spec: dict[str, Any]) -> bool:
    """``LayerNormalization`` over the last axis: ``nn.LayerNorm`` with Keras's epsilon (``weight`` is Keras's
    gamma, ``bias`` its beta; ``bias=False`` where Keras has no offset), ``F.layer_norm`` where it has neither
    scale nor offset. The mask passes, as the node's. keras 3's ``rms_scaling`` (a division by the variance)
    and an offset alone have no torch layer: the node stays."""
    x = w.tensor()
    if x is None or spec.get("axis") != [-1] or not sizes(spec.get("shape"), 1) or not plain(spec, float, "epsilon"):
        return False
    if not flags(spec, "center", "scale", "rms_scaling") or spec.get("rms_scaling", False):
        return False
    if not spec.get("scale", True) and spec.get("center", True):
        return False
    size, epsilon = literal(spec["shape"][0]), literal(spec["epsilon"])
    if spec.get("scale", True):
        bias = "" if spec.get("center", True) else ", bias=False"
        layer = w.declare(f"nn.LayerNorm({size}, eps={epsilon}{bias})")
        w.assign(f"{layer}({x})")
    else:
        w.assign(f"F.layer_norm({x}, ({size},), eps={epsilon})")
    return True


@writes(BatchNorm)
def write_batch_norm(w: Writer, spec: dict[str, Any]) -> bool:
    """``BatchNormalization`` over the channels (Keras's last axis, or axis 1): torch's batch norm on the
    channels-first view, :class:`~attnzoo.keras.torch_layers.KerasBatchNorm` (``nn.BatchNorm*d`` with Keras's
    moving variance and masked moments in training), ``eps`` Keras's epsilon, ``momentum`` 1 - Keras's; the
    input's mask goes in (Keras's moments over the kept steps) and passes on, as the node's. A scale without
    an offset, or the other way round, has no torch layer: the node stays."""
    x, axis = w.tensor(), spec.get("axis")
    if x is None or axis not in (-1, 1) or not plain(spec, int, "features") or not plain(spec, float, "epsilon"):
        return False
    if not flags(spec, "center", "scale") or spec.get("center", True) != spec.get("scale", True):
        return False
    momentum = spec.get("momentum", 0.99)
    if not plain({"momentum": momentum}, float) or (w.explicit is not None and w.mask is None):
        return False
    mask = w.mask
    if axis == 1 and mask is not None:  # Keras's masked moments read the mask along the last axis
        return False
    norm = w.imports("attnzoo.keras.torch_layers", "KerasBatchNorm")
    affine = "" if spec.get("scale", True) else ", affine=False"
    layer = w.declare(
        f"{norm}({literal(spec['features'])}, eps={literal(spec['epsilon'])}, "
        f"momentum={literal(round(1.0 - float(momentum), 12))}{affine})"
    )
    masked = "" if mask is None else f", mask={mask}"
    w.assign(f"{layer}({x}{masked})" if axis == 1 else f"{layer}({x}.movedim(-1, 1){masked}).movedim(1, -1)")
    return True
