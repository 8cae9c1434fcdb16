"""Keras's activation layers: Activation, ReLU, LeakyReLU, ELU, PReLU and Softmax (masked as Keras does)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import dim_text, dims, number
from attnzoo.keras.nodes import Node, activation_logits, writes
from attnzoo.keras.registry import Converted, keras_layer

__all__ = ["Activation", "PReLU", "Softmax", "keras_softmax", "ACTIVATION_SOURCE", "written_activation", "activated"]


class Activation(Node):
    """``Activation(name)`` and the activation layers ``ReLU``, ``LeakyReLU``, ``ELU``."""

    op = "activation"
    logits = activation_logits
    reads_mask = False  # compute never reads the mask: the emitted call passes none
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
        super().__init__()
        self.activation, self.max_value, self.negative_slope = activation, max_value, negative_slope
        self.threshold, self.alpha = threshold, alpha
        if activation not in ("relu_layer", "elu_layer"):
            self.act = activation_fn(activation)

    def compute(self, x, mask):
        if self.activation == "relu_layer":  # keras ReLU(max_value, negative_slope, threshold)
            if self.threshold == 0 and self.negative_slope == 0:  # ReLU, ReLU6: one pass, as Keras's ops.relu
                return torch.relu(x) if self.max_value is None else torch.clamp(x, 0.0, self.max_value)
            y = torch.where(x >= self.threshold, x, self.negative_slope * (x - self.threshold))
            return y if self.max_value is None else torch.clamp(y, max=self.max_value)
        if self.activation == "elu_layer":
            return torch.where(x > 0, x, self.alpha * torch.expm1(x))
        return self.act(x)


@keras_layer("Activation")
def convert_activation(record, arrays, ctx):
    expect_variables(arrays, 0, "Activation")
    return Converted({"op": "activation", "activation": activation_of(record.config, "activation", ctx)}, {})


@keras_layer("ReLU")
def convert_relu(record, arrays, ctx):
    c = record.config
    expect_variables(arrays, 0, "ReLU")
    spec = {
        "op": "activation",
        "activation": "relu_layer",
        "max_value": None if c.get("max_value") is None else float(c["max_value"]),
        "negative_slope": float(c.get("negative_slope", 0.0) or 0.0),
        "threshold": float(c.get("threshold", 0.0) or 0.0),
    }
    return Converted(spec, {})


@keras_layer("LeakyReLU")
def convert_leaky_relu(record, arrays, ctx):
    c = record.config
    expect_variables(arrays, 0, "LeakyReLU")
    slope = c.get("negative_slope", c.get("alpha", 0.3))
    return Converted({"op": "activation", "activation": "relu_layer", "negative_slope": float(slope)}, {})


@keras_layer("ELU")
def convert_elu(record, arrays, ctx):
    expect_variables(arrays, 0, "ELU")
    alpha = float(record.config.get("alpha", 1.0))
    return Converted({"op": "activation", "activation": "elu_layer", "alpha": alpha}, {})


class PReLU(Node):
    """``PReLU``: ``max(x, 0) + alpha * min(x, 0)``, ``alpha`` of the input's feature shape (shared axes 1)."""

    op = "prelu"
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(self, *, alpha_shape: list[int]) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(*alpha_shape))
        nn.init.zeros_(self.alpha)

    def compute(self, x, mask):
        return torch.relu(x) - self.alpha * torch.relu(-x)


@keras_layer("PReLU")
def convert_prelu(record, arrays, ctx):
    expect_variables(arrays, 1, "PReLU")
    return Converted({"op": "prelu", "alpha_shape": list(arrays[0].shape)}, {"alpha": as_tensor(arrays[0])})


class Softmax(Node):
    """``Softmax(axis)``, masked as keras 3 does: masked entries get -1e9 (-3e4 in float16) and are zero."""

    op = "softmax"
    supports_masking = True

    @classmethod
    def logits(cls, spec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The layer is the softmax: an identity in its place gives the logits."""
        return "softmax", {"op": "identity", "keras": spec["keras"]}

    def __init__(self, *, axis: int | list[int] = -1, keras3: bool = True) -> None:
        super().__init__()
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.keras3 = keras3

    def forward(self, args, kwargs, masks):
        x = args[0]
        mask = kwargs.get("mask")  # Softmax's mask argument is a score mask, not the sequence mask
        if not isinstance(mask, Tensor):
            mask = masks[0] if isinstance(masks[0], Tensor) and masks[0].dim() == x.dim() else None
        return [keras_softmax(x, mask, self.axis, zero_masked=self.keras3)], [self.output_mask(x, masks[0])]


def keras_softmax(x: Tensor, mask: Tensor | None, axis: int | list[int], *, zero_masked: bool) -> Tensor:
    """Keras's masked softmax: masked scores become -1e9 (-3e4 in float16) before the softmax, as Keras
    writes them (so a fully masked row is uniform, as in Keras), and keras 3 zeroes them after."""
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


@keras_layer("Softmax", call_arguments=())
def convert_softmax(record, arrays, ctx):
    expect_variables(arrays, 0, "Softmax")
    return Converted({"op": "softmax", "axis": record.config.get("axis", -1), "keras3": ctx.major >= 3}, {})


# -- the torch forms ------------------------------------------------------------------------------------
# each activation the emitted module writes as torch, as an expression of its argument ({}), over Keras's
# last axis; a layer with another activation keeps its node call
ACTIVATION_SOURCE = {
    "linear": "{}",
    "relu": "torch.relu({})",
    "sigmoid": "torch.sigmoid({})",
    "tanh": "torch.tanh({})",
    "softmax": "torch.softmax({}, dim=-1)",
    "log_softmax": "torch.log_softmax({}, dim=-1)",
    "softplus": "torch.logaddexp({0}, torch.zeros_like({0}))",
    "silu": "F.silu({})",
    "swish": "F.silu({})",
    "selu": "F.selu({})",
    "elu": "F.elu({})",
    "gelu": "F.gelu({})",
    "gelu_approximate": 'F.gelu({}, approximate="tanh")',
    "relu6": "F.relu6({})",
    "exponential": "torch.exp({})",
}


def written_activation(spec: dict) -> bool:
    """Whether a layer's ``activation`` (linear where absent) is one :data:`ACTIVATION_SOURCE` writes."""
    activation = spec.get("activation", "linear")
    return isinstance(activation, str) and activation in ACTIVATION_SOURCE


def activated(w: Writer, value: str, activation: str) -> None:
    """``out = activation(value)``, the value computed once (some activations read their argument twice)."""
    template = ACTIVATION_SOURCE[activation]
    if template.count("{") > 1:
        w.assign(value)
        value = w.out
    w.assign(template.format(value))


@writes(Activation)
def write_activation(w: Writer, spec: dict) -> bool:
    """``Activation(name)``: the activation's expression. ``ReLU`` (its max_value, negative_slope and
    threshold), ``LeakyReLU`` and ``ELU`` layers: the node's formula. The mask passes on, as the node's."""
    x = w.tensor()
    if x is None:
        return False
    kind = spec.get("activation")
    if isinstance(kind, str) and kind in ACTIVATION_SOURCE:
        activated(w, x, kind)
        return True
    slope, threshold = spec.get("negative_slope", 0.0), spec.get("threshold", 0.0)
    top, alpha = spec.get("max_value"), spec.get("alpha", 1.0)
    if kind not in ("relu_layer", "elu_layer") or w.explicit is not None:
        return False
    if not all(number(v) for v in (slope, threshold, alpha)) or not (top is None or number(top)):
        return False
    if kind == "elu_layer":
        value = f"torch.where({x} > 0, {x}, {literal(alpha)} * torch.expm1({x}))"
    elif slope == 0 and threshold == 0:  # ReLU, ReLU6: one pass, as the node
        value = f"torch.relu({x})" if top is None else f"torch.clamp({x}, 0.0, {literal(top)})"
    else:
        # x - 0.0 is x, bit for bit (-0.0 and NaN too): LeakyReLU is written without it
        below = f"{literal(slope)} * " + (f"({x} - {literal(threshold)})" if threshold else x)
        value = f"torch.where({x} >= {literal(threshold)}, {x}, {below})"
        value = value if top is None else f"torch.clamp({value}, max={literal(top)})"
    w.assign(value)
    return True


@writes(Softmax)
def write_softmax(w: Writer, spec: dict) -> bool:
    """``Softmax(axis)`` of an input with no mask (a mask would mask the scores: the node's rules):
    ``torch.softmax``, over several axes ``exp(x - logsumexp(x))`` as the node. No mask comes out."""
    axis, x = spec.get("axis", -1), w.tensor()
    if x is None or w.explicit is not None or not dims(axis) or w.mask_of(x) is not None:
        return False
    if isinstance(axis, int):
        w.assign(f"torch.softmax({x}, dim={literal(axis)})")
    else:
        w.assign(f"torch.exp({x} - torch.logsumexp({x}, dim={dim_text(axis)}, keepdim=True))")
    w.mask_is(None)
    return True
