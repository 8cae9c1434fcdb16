"""The Keras layers and operations of a converted model, as torch modules with Keras's semantics.

Every node is built from plain data (``op`` and its arguments, all sizes included, so it builds on the
``meta`` device) and holds its weights in torch's layouts. The graph (:mod:`attnzoo.keras.model`) calls

    node(args, kwargs, masks) -> (outputs, output_masks)

where ``args`` keeps the structure of the Keras call with tensors in place (a merge layer gets one list),
``masks`` mirrors it with each tensor's Keras mask (bool, True = keep, or None), and ``kwargs`` holds the
call's other arguments. Data layout is Keras's throughout (channels last, time on axis 1); a node
that calls a torch kernel with another layout moves the axes itself.

Masks follow Keras: a layer that supports masking passes its input mask on (``compute_mask``), one
that does not drops it, and the few that make or change masks (Embedding, Masking, merges, RNNs,
pooling) say so below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.layers.core import check_tokens

__all__ = ["Node", "NODES", "build_node", "INTEGER_DTYPES"]

# Keras's integer dtype names: an input of one of them holds ids
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class Node(nn.Module):
    """A Keras layer or operation in a converted graph."""

    op: ClassVar[str] = ""
    supports_masking: ClassVar[bool] = False  # Keras's flag: the output carries the input's mask

    def __init__(self, **args: Any) -> None:
        super().__init__()
        self.args = args

    def forward(
        self, args: list[Any], kwargs: dict[str, Any], masks: list[Any]
    ) -> tuple[list[Tensor], list[Tensor | None]]:
        x = args[0]
        y = self.compute(x, masks[0])
        return [y], [self.output_mask(x, masks[0])]

    def compute(self, x: Tensor, mask: Tensor | None) -> Tensor:
        raise NotImplementedError

    def output_mask(self, x: Any, mask: Any) -> Tensor | None:
        return mask if self.supports_masking and isinstance(mask, Tensor) else None

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.args.items() if not isinstance(v, (dict, list)) or len(v) < 6)


# -- passing, embedding, masking --------------------------------------------------------------------------
def _glorot(weight: Tensor, fan_in: int, fan_out: int) -> None:
    """Keras's glorot_uniform, the initial value of a fresh layer (a converted one loads its weights)."""
    bound = math.sqrt(6.0 / max(fan_in + fan_out, 1))
    nn.init.uniform_(weight, -bound, bound)


class Identity(Node):
    """A tensor passed on with its mask (a nested model's input or output, Dropout at inference,
    ``ConvertToTensor``); with ``mask`` given, that mask instead."""

    op = "identity"
    supports_masking = True

    def forward(self, args, kwargs, masks):
        mask = kwargs.get("mask")
        if kwargs.get("outputs"):  # a nested model's outputs, each with its own mask
            return list(args), list(masks)
        return [args[0]], [mask if isinstance(mask, Tensor) else masks[0]]


class Embedding(Node):
    """``Embedding(input_dim, output_dim, mask_zero)``: ``weight`` [input_dim, output_dim]; with
    ``mask_zero`` the output mask is ``ids != 0``."""

    op = "embedding"

    def __init__(self, *, input_dim: int, output_dim: int, mask_zero: bool = False, name: str = "embedding") -> None:
        super().__init__(input_dim=input_dim, output_dim=output_dim, mask_zero=mask_zero)
        self.name = name
        self.weight = nn.Parameter(torch.empty(input_dim, output_dim))
        self.mask_zero = mask_zero
        nn.init.uniform_(self.weight, -0.05, 0.05)  # Keras's default for a fresh layer

    def forward(self, args, kwargs, masks):
        ids = args[0]
        check_tokens(self.name, ids, self.weight.shape[0], arg="ids", rank=ids.dim() if isinstance(ids, Tensor) else 2)
        y = F.embedding(ids.long(), self.weight)
        return [y], [ids != 0 if self.mask_zero else None]


class Masking(Node):
    """``Masking(mask_value)``: a step whose features all equal ``mask_value`` is masked and zeroed."""

    op = "masking"
    supports_masking = True

    def __init__(self, *, mask_value: float = 0.0) -> None:
        super().__init__(mask_value=mask_value)
        self.mask_value = mask_value

    def forward(self, args, kwargs, masks):
        x = args[0]
        keep = (x != self.mask_value).any(dim=-1)
        return [x * keep.unsqueeze(-1).to(x.dtype)], [keep]


# -- dense, activations ---------------------------------------------------------------------------------
class Dense(Node):
    """``Dense(units, activation, use_bias)`` on the last axis of any rank: ``weight`` [units, in]."""

    op = "dense"
    supports_masking = True

    def __init__(self, *, units: int, in_features: int, activation: str = "linear", use_bias: bool = True) -> None:
        super().__init__(units=units, in_features=in_features, activation=activation, use_bias=use_bias)
        self.weight = nn.Parameter(torch.empty(units, in_features))
        self.bias = nn.Parameter(torch.empty(units)) if use_bias else None
        _glorot(self.weight, in_features, units)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.act = activation_fn(activation)

    def compute(self, x, mask):
        return self.act(F.linear(x, self.weight, self.bias))


class Activation(Node):
    """``Activation(name)`` and the activation layers ``ReLU``, ``LeakyReLU``, ``ELU``."""

    op = "activation"
    supports_masking = True

    def __init__(
        self,
        *,
        activation: str = "linear",
        max_value: float | None = None,
        negative_slope: float = 0.0,
        threshold: float = 0.0,
        alpha: float = 1.0,
    ) -> None:
        super().__init__(
            activation=activation, max_value=max_value, negative_slope=negative_slope, threshold=threshold, alpha=alpha
        )
        self.name_, self.max_value, self.negative_slope, self.threshold, self.alpha = (
            activation,
            max_value,
            negative_slope,
            threshold,
            alpha,
        )
        if activation not in ("relu_layer", "elu_layer"):
            self.act = activation_fn(activation)

    def compute(self, x, mask):
        if self.name_ == "relu_layer":  # keras ReLU(max_value, negative_slope, threshold)
            y = torch.where(x >= self.threshold, x, self.negative_slope * (x - self.threshold))
            return y if self.max_value is None else torch.clamp(y, max=self.max_value)
        if self.name_ == "elu_layer":
            return torch.where(x > 0, x, self.alpha * torch.expm1(x))
        return self.act(x)


class PReLU(Node):
    """``PReLU``: ``max(x, 0) + alpha * min(x, 0)``, ``alpha`` of the input's feature shape (shared axes 1)."""

    op = "prelu"
    supports_masking = True

    def __init__(self, *, alpha_shape: list[int]) -> None:
        super().__init__(alpha_shape=alpha_shape)
        self.alpha = nn.Parameter(torch.empty(*alpha_shape))
        nn.init.zeros_(self.alpha)

    def compute(self, x, mask):
        return torch.relu(x) - self.alpha * torch.relu(-x)


class Softmax(Node):
    """``Softmax(axis)``, masked as keras 3 does: masked entries get -1e9 (-3e4 in float16) and are zero."""

    op = "softmax"
    supports_masking = True

    def __init__(self, *, axis: int | list[int] = -1, keras3: bool = True) -> None:
        super().__init__(axis=axis, keras3=keras3)
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.keras3 = keras3

    def forward(self, args, kwargs, masks):
        x = args[0]
        mask = kwargs.get("mask")  # Softmax's mask argument is a score mask, not the sequence mask
        if not isinstance(mask, Tensor):
            mask = masks[0] if isinstance(masks[0], Tensor) and masks[0].dim() == x.dim() else None
        return [_keras_softmax(x, mask, self.axis, zero_masked=self.keras3)], [self.output_mask(x, masks[0])]


def _keras_softmax(x: Tensor, mask: Tensor | None, axis: int | list[int], *, zero_masked: bool) -> Tensor:
    if mask is not None:
        large = -3e4 if x.dtype == torch.float16 else -1e9
        x = torch.where(mask.bool(), x, torch.full_like(x, large))
    if isinstance(axis, list):
        out = torch.exp(x - torch.logsumexp(x, dim=axis, keepdim=True))
    else:
        out = torch.softmax(x, dim=axis)
    if mask is not None and zero_masked:
        out = torch.where(mask.bool(), out, torch.zeros_like(out))
    return out


# -- shape -------------------------------------------------------------------------------------------------
class Flatten(Node):
    """``Flatten``: [B, ...] -> [B, prod(...)] (channels_first inputs move their channels last first)."""

    op = "flatten"

    def __init__(self, *, channels_first: bool = False) -> None:
        super().__init__(channels_first=channels_first)
        self.channels_first = channels_first

    def compute(self, x, mask):
        if self.channels_first and x.dim() > 2:
            x = x.movedim(1, -1)
        return x.reshape(x.shape[0], -1)


class Reshape(Node):
    op = "reshape"

    def __init__(self, *, target_shape: list[int]) -> None:
        super().__init__(target_shape=target_shape)
        self.target_shape = [int(d) for d in target_shape]

    def compute(self, x, mask):
        return x.reshape(x.shape[0], *self.target_shape)


class Permute(Node):
    op = "permute"

    def __init__(self, *, dims: list[int]) -> None:
        super().__init__(dims=dims)
        self.dims = [int(d) for d in dims]

    def compute(self, x, mask):
        return x.permute(0, *self.dims)


class RepeatVector(Node):
    op = "repeat_vector"

    def __init__(self, *, n: int) -> None:
        super().__init__(n=n)
        self.n = n

    def compute(self, x, mask):
        return x.unsqueeze(1).expand(-1, self.n, -1)


# -- convolution and pooling ----------------------------------------------------------------------------
def _same_padding(length: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's 'same' padding (what Keras means on every backend): output ceil(L / s), extra on the right."""
    out = -(-length // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - length, 0)
    return total // 2, total - total // 2


class Conv(Node):
    """``Conv1D`` / ``Conv2D``: ``weight`` [filters, in / groups, *kernel] (torch's layout; Keras stores
    [*kernel, in / groups, filters]). Padding ``valid``, ``same`` (TensorFlow's, extra on the right) and,
    for 1-D, ``causal`` (all on the left)."""

    op = "conv"

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
        groups: int = 1,
        activation: str = "linear",
        use_bias: bool = True,
        channels_first: bool = False,
    ) -> None:
        super().__init__(
            rank=rank,
            filters=filters,
            in_channels=in_channels,
            kernel_size=kernel_size,
            strides=strides,
            dilation_rate=dilation_rate,
            padding=padding,
            groups=groups,
            activation=activation,
            use_bias=use_bias,
            channels_first=channels_first,
        )
        self.rank, self.padding, self.groups, self.channels_first = rank, padding, groups, channels_first
        self.kernel_size, self.strides, self.dilation = list(kernel_size), list(strides), list(dilation_rate)
        self.weight = nn.Parameter(torch.empty(filters, in_channels // groups, *kernel_size))
        self.bias = nn.Parameter(torch.empty(filters)) if use_bias else None
        receptive = math.prod(kernel_size)
        _glorot(self.weight, in_channels // groups * receptive, filters * receptive)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.act = activation_fn(activation)

    def compute(self, x, mask):
        if not self.channels_first:
            x = x.movedim(-1, 1)
        pads: list[int] = []
        for axis in reversed(range(self.rank)):  # F.pad takes the last axis first
            length = x.shape[2 + axis]
            k, s, d = self.kernel_size[axis], self.strides[axis], self.dilation[axis]
            if self.padding == "same":
                pads += list(_same_padding(length, k, s, d))
            elif self.padding == "causal":
                pads += [(k - 1) * d, 0]
            else:
                pads += [0, 0]
        if any(pads):
            x = F.pad(x, pads)
        conv = F.conv1d if self.rank == 1 else F.conv2d
        y = conv(x, self.weight, self.bias, stride=self.strides, dilation=self.dilation, groups=self.groups)
        y = self.act(y)
        return y if self.channels_first else y.movedim(1, -1)


class Pool(Node):
    """``MaxPooling1D/2D`` and ``AveragePooling1D/2D``; ``same`` padding as TensorFlow: max ignores the
    padding, average divides by the real elements of each window."""

    op = "pool"

    def __init__(
        self,
        *,
        rank: int,
        kind: str,
        pool_size: list[int],
        strides: list[int],
        padding: str = "valid",
        channels_first: bool = False,
    ) -> None:
        super().__init__(
            rank=rank, kind=kind, pool_size=pool_size, strides=strides, padding=padding, channels_first=channels_first
        )
        self.rank, self.kind, self.padding, self.channels_first = rank, kind, padding, channels_first
        self.pool_size, self.strides = list(pool_size), list(strides)

    def compute(self, x, mask):
        if not self.channels_first:
            x = x.movedim(-1, 1)
        pads: list[int] = []
        if self.padding == "same":
            for axis in reversed(range(self.rank)):
                pads += list(_same_padding(x.shape[2 + axis], self.pool_size[axis], self.strides[axis], 1))
        if self.kind == "max":
            if any(pads):
                x = F.pad(x, pads, value=float("-inf"))
            pool = F.max_pool1d if self.rank == 1 else F.max_pool2d
            y = pool(x, self.pool_size, self.strides)
        else:
            pool = F.avg_pool1d if self.rank == 1 else F.avg_pool2d
            if any(pads):
                ones = F.pad(torch.ones_like(x[:1, :1]), pads)
                summed = pool(F.pad(x, pads), self.pool_size, self.strides)
                y = summed / pool(ones, self.pool_size, self.strides)
            else:
                y = pool(x, self.pool_size, self.strides)
        return y if self.channels_first else y.movedim(1, -1)


class GlobalPool(Node):
    """``GlobalAverage/MaxPooling1D/2D``; the 1-D average is masked (sum over kept steps / their count;
    Keras divides 0 by 0 for a sample with no kept step, attnzoo returns 0 there)."""

    op = "global_pool"

    def __init__(self, *, rank: int, kind: str, keepdims: bool = False, channels_first: bool = False) -> None:
        super().__init__(rank=rank, kind=kind, keepdims=keepdims, channels_first=channels_first)
        self.rank, self.kind, self.keepdims, self.channels_first = rank, kind, keepdims, channels_first

    def compute(self, x, mask):
        axes = list(range(2, 2 + self.rank)) if self.channels_first else list(range(1, 1 + self.rank))
        if self.kind == "max":
            return x.amax(dim=axes, keepdim=self.keepdims)
        if mask is not None and self.rank == 1:
            keep = mask.unsqueeze(1 if self.channels_first else 2)
            summed = torch.where(keep, x, torch.zeros_like(x)).sum(dim=axes, keepdim=self.keepdims)
            count = keep.to(x.dtype).sum(dim=axes, keepdim=self.keepdims)
            return summed / count.clamp(min=1)
        return x.mean(dim=axes, keepdim=self.keepdims)


# -- normalisation ------------------------------------------------------------------------------------
def _broadcast_shape(ndim: int, axes: Sequence[int], sizes: Sequence[int]) -> list[int]:
    shape = [1] * ndim
    for axis, size in zip(axes, sizes, strict=True):
        shape[axis] = size
    return shape


class LayerNorm(Node):
    """``LayerNormalization(axis, epsilon, center, scale, rms_scaling)``, computed in float32 at least."""

    op = "layer_norm"
    supports_masking = True

    def __init__(
        self, *, axis: list[int], shape: list[int], epsilon: float, center: bool, scale: bool, rms_scaling: bool = False
    ) -> None:
        super().__init__(axis=axis, shape=shape, epsilon=epsilon, center=center, scale=scale, rms_scaling=rms_scaling)
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
        sizes = [x.shape[a] for a in axes]
        gamma = (
            None if self.weight is None else self.weight.to(work.dtype).reshape(_broadcast_shape(x.dim(), axes, sizes))
        )
        beta = None if self.bias is None else self.bias.to(work.dtype).reshape(_broadcast_shape(x.dim(), axes, sizes))
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


class BatchNorm(Node):
    """``BatchNormalization`` at inference: ``(x - moving_mean) / sqrt(moving_variance + epsilon) * gamma
    + beta`` along ``axis``."""

    op = "batch_norm"
    supports_masking = True

    def __init__(self, *, axis: int, features: int, epsilon: float, center: bool, scale: bool) -> None:
        super().__init__(axis=axis, features=features, epsilon=epsilon, center=center, scale=scale)
        self.axis, self.epsilon = axis, epsilon
        self.weight = nn.Parameter(torch.empty(features)) if scale else None
        self.bias = nn.Parameter(torch.empty(features)) if center else None
        self.register_buffer("running_mean", torch.empty(features))
        self.register_buffer("running_var", torch.empty(features))
        nn.init.zeros_(self.running_mean)
        nn.init.ones_(self.running_var)
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def compute(self, x, mask):
        shape = [1] * x.dim()
        shape[self.axis % x.dim()] = -1
        factor = torch.rsqrt(self.running_var + self.epsilon)
        if self.weight is not None:
            factor = factor * self.weight
        out = (x - self.running_mean.reshape(shape)) * factor.reshape(shape)
        return out if self.bias is None else out + self.bias.reshape(shape)


# -- merging ----------------------------------------------------------------------------------------------
def _ranked(xs: Sequence[Tensor]) -> list[Tensor]:
    """Keras's merge broadcasting: lower-rank inputs gain axes at position 1 until the ranks agree."""
    top = max(x.dim() for x in xs)
    out = []
    for x in xs:
        while x.dim() < top:
            x = x.unsqueeze(1)
        out.append(x)
    return out


class Merge(Node):
    """``Add``, ``Subtract``, ``Multiply``, ``Average``, ``Maximum``, ``Minimum``; the output mask is the OR
    of the input masks (None unless every input has one). Keras 3 (``keras3``) also masks the values of
    Multiply, Maximum and Minimum: a masked step of one input is the identity of the operation (1 for
    Multiply, the other input for Maximum / Minimum), and Multiply's output is 0 where every input is
    masked. Keras 2 computes them plainly."""

    op = "merge"
    supports_masking = True

    def __init__(self, *, mode: str, keras3: bool = True) -> None:
        super().__init__(mode=mode, keras3=keras3)
        self.mode, self.keras3 = mode, keras3

    def forward(self, args, kwargs, masks):
        xs = _ranked(list(args[0]))
        ms = list(masks[0]) if isinstance(masks[0], (list, tuple)) else [None] * len(xs)
        every = bool(ms) and all(isinstance(m, Tensor) for m in ms)
        mask = None
        if every:
            mask = ms[0]
            for m in ms[1:]:
                mask = mask | m
        if self.keras3 and self.mode == "multiply":
            out, full = None, None
            for x, m in zip(xs, ms, strict=True):
                if isinstance(m, Tensor):
                    wide = m.unsqueeze(-1).expand_as(x)
                    x = torch.where(wide, x, torch.ones_like(x))
                    full = wide if full is None else full | wide
                out = x if out is None else out * x
            if every and full is not None:
                out = torch.where(full, out, torch.zeros_like(out))
            return [out], [mask]
        if self.keras3 and self.mode in ("maximum", "minimum"):
            fn = torch.maximum if self.mode == "maximum" else torch.minimum
            out = xs[0]
            running = ms[0].unsqueeze(-1).expand_as(out) if isinstance(ms[0], Tensor) else None
            for x, m in zip(xs[1:], ms[1:], strict=True):
                wide = m.unsqueeze(-1).expand_as(x) if isinstance(m, Tensor) else None
                if wide is not None:
                    x = torch.where(wide, x, out)
                if running is not None:
                    out = torch.where(running, out, x)
                running = running | wide if (running is not None and wide is not None) else None
                out = fn(out, x)
            return [out], [mask]
        out = xs[0]
        for x in xs[1:]:
            if self.mode in ("add", "average"):
                out = out + x
            elif self.mode == "subtract":
                out = out - x
            elif self.mode == "multiply":
                out = out * x
            elif self.mode == "maximum":
                out = torch.maximum(out, x)
            else:
                out = torch.minimum(out, x)
        if self.mode == "average":
            out = out / len(xs)
        return [out], [mask]


class Concatenate(Node):
    """``Concatenate(axis)``; the mask as Keras builds it: each input's mask broadcast to its shape (all
    True where it has none), concatenated along ``axis``, then ANY over the last axis."""

    op = "concatenate"
    supports_masking = True

    def __init__(self, *, axis: int = -1) -> None:
        super().__init__(axis=axis)
        self.axis = axis

    def forward(self, args, kwargs, masks):
        xs = list(args[0])
        out = torch.cat(xs, dim=self.axis)
        ms = list(masks[0]) if isinstance(masks[0], (list, tuple)) else [None] * len(xs)
        if all(m is None for m in ms):
            return [out], [None]
        full = []
        for x, m in zip(xs, ms, strict=True):
            if m is None:
                full.append(torch.ones_like(x, dtype=torch.bool))
            else:
                while m.dim() < x.dim():
                    m = m.unsqueeze(-1)
                full.append(m.expand_as(x))
        return [out], [torch.cat(full, dim=self.axis).any(dim=-1)]


class Dot(Node):
    """``Dot(axes, normalize)``: the batched dot product of two inputs over the given axes (after an L2
    normalisation along them when ``normalize``); no output mask."""

    op = "dot"

    def __init__(self, *, axes: list[int], normalize: bool = False) -> None:
        super().__init__(axes=axes, normalize=normalize)
        self.axes, self.normalize = list(axes), normalize

    def forward(self, args, kwargs, masks):
        a, b = args[0][0], args[0][1]
        ax_a, ax_b = self.axes[0] % a.dim(), self.axes[1] % b.dim()
        if self.normalize:
            a = F.normalize(a, dim=ax_a, eps=1e-12)
            b = F.normalize(b, dim=ax_b, eps=1e-12)
        # move the contracted axis last in a and first (after the batch) in b, then a batched matmul
        a2 = a.movedim(ax_a, -1)
        b2 = b.movedim(ax_b, 1)
        a_rest, b_rest = a2.shape[1:-1], b2.shape[2:]
        out = torch.bmm(a2.reshape(a.shape[0], -1, a2.shape[-1]), b2.reshape(b.shape[0], b2.shape[1], -1))
        out = out.reshape(a.shape[0], *a_rest, *b_rest)
        if out.dim() == 1:
            out = out.unsqueeze(-1)
        return [out], [None]


# -- wrappers -------------------------------------------------------------------------------------------
class TimeDistributed(Node):
    """``TimeDistributed(layer)``: the inner layer on every step, as one call over batch x time."""

    op = "time_distributed"
    supports_masking = True

    def __init__(self, *, layer: dict[str, Any]) -> None:
        super().__init__(layer=layer)
        self.layer = build_node(layer)

    def compute(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        (y,), _ = self.layer([x.reshape(b * t, *x.shape[2:])], {}, [None])
        return y.reshape(b, t, *y.shape[1:])


# -- keras 3 operations recorded in functional graphs ---------------------------------------------------
def _index(key: Any) -> Any:
    if isinstance(key, dict) and "slice" in key:
        return slice(*key["slice"])
    if isinstance(key, dict) and key.get("ellipsis"):
        return Ellipsis
    if isinstance(key, list):
        return tuple(_index(k) for k in key)
    return key


_ELEMENTWISE = {
    "not_equal": torch.ne,
    "equal": torch.eq,
    "greater": torch.gt,
    "greater_equal": torch.ge,
    "less": torch.lt,
    "less_equal": torch.le,
    "add": torch.add,
    "subtract": torch.sub,
    "multiply": torch.mul,
    "divide": torch.true_divide,
    "true_divide": torch.true_divide,
    "power": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
}
_UNARY = {
    "logical_not": torch.logical_not,
    "negative": torch.neg,
    "abs": torch.abs,
    "absolute": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "square": torch.square,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "sign": torch.sign,
}
_REDUCE = {
    "sum": torch.sum,
    "mean": torch.mean,
    "max": torch.amax,
    "min": torch.amin,
    "any": torch.any,
    "all": torch.all,
}
_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
}


class Operation(Node):
    """A keras 3 operation (``ops.*`` on symbolic tensors, which a functional model records as a node):
    comparisons, arithmetic, reductions, casts, indexing, shape changes. Its output carries no mask."""

    op = "operation"

    def __init__(self, *, name: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(name=name, config=config or {})
        self.name_, self.config = name, dict(config or {})

    def forward(self, args, kwargs, masks):
        name, config = self.name_, self.config
        if name in _ELEMENTWISE:
            a, b = args[0], args[1]
            if not isinstance(a, Tensor):
                a = torch.as_tensor(a, device=b.device)
            out = _ELEMENTWISE[name](a, b)
        elif name in _UNARY:
            out = _UNARY[name](args[0])
        elif name in _REDUCE:
            axis = config.get("axis", kwargs.get("axis", args[1] if len(args) > 1 else None))
            keepdims = bool(config.get("keepdims", kwargs.get("keepdims", False)))
            x = args[0]
            if axis is None:
                out = _REDUCE[name](x)
                out = out.reshape([1] * x.dim()) if keepdims else out
            else:
                out = _REDUCE[name](x, dim=axis, keepdim=keepdims)
        elif name in ("zeros_like", "ones_like"):
            dtype = config.get("dtype", kwargs.get("dtype"))
            make = torch.zeros_like if name == "zeros_like" else torch.ones_like
            out = make(args[0], dtype=_DTYPES.get(str(dtype)) if dtype else None)
        elif name == "convert_to_tensor":
            out = args[0]
        elif name == "cast":
            out = args[0].to(_DTYPES[str(config.get("dtype", args[1] if len(args) > 1 else "float32"))])
        elif name == "get_item":
            out = args[0][_index(args[1])]
        elif name == "expand_dims":
            out = args[0].unsqueeze(int(config.get("axis", args[1] if len(args) > 1 else -1)))
        elif name == "squeeze":
            axis = config.get("axis", args[1] if len(args) > 1 else None)
            out = args[0].squeeze() if axis is None else args[0].squeeze(axis)
        elif name == "transpose":
            axes = config.get("axes", args[1] if len(args) > 1 else None)
            out = args[0].permute(*axes) if axes is not None else args[0].permute(*reversed(range(args[0].dim())))
        elif name == "reshape":
            shape = config.get("newshape", args[1] if len(args) > 1 else None)
            out = args[0].reshape([-1 if d is None else d for d in shape])
        elif name == "concatenate":
            out = torch.cat(list(args[0]), dim=int(config.get("axis", 0)))
        elif name == "stack":
            out = torch.stack(list(args[0]), dim=int(config.get("axis", 0)))
        elif name == "matmul":
            out = torch.matmul(args[0], args[1])
        elif name == "softmax":
            out = torch.softmax(args[0], dim=int(config.get("axis", -1)))
        elif name == "where":
            out = torch.where(args[0], args[1], args[2])
        else:  # the converter admits only the names above
            raise ValueError(f"keras operation {name!r} is not supported")
        return [out], [None]


# -- registry of node types -----------------------------------------------------------------------------
NODES: dict[str, type[Node]] = {}


def _register(*classes: type[Node]) -> None:
    for cls in classes:
        NODES[cls.op] = cls


_register(
    Identity,
    Embedding,
    Masking,
    Dense,
    Activation,
    PReLU,
    Softmax,
    Flatten,
    Reshape,
    Permute,
    RepeatVector,
    Conv,
    Pool,
    GlobalPool,
    LayerNorm,
    BatchNorm,
    Merge,
    Concatenate,
    Dot,
    TimeDistributed,
    Operation,
)

OPERATION_NAMES = frozenset(
    [*_ELEMENTWISE, *_UNARY, *_REDUCE, "convert_to_tensor", "cast", "get_item", "expand_dims", "squeeze"]
    + ["zeros_like", "ones_like"]
    + ["transpose", "reshape", "concatenate", "stack", "matmul", "softmax", "where"]
)


def build_node(spec: dict[str, Any]) -> nn.Module:
    """A node from its data (``{"op": ..., **arguments}``); recurrent ops and zoo layers included."""
    from attnzoo.keras import rnn, zoo  # noqa: F401 - they register their node types

    spec = dict(spec)
    op = spec.pop("op")
    if op not in NODES:
        raise ValueError(f"unknown node op {op!r}; known: {', '.join(sorted(NODES))}")
    return NODES[op](**spec)
