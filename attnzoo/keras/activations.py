"""Keras's activation functions by name, as torch functions, version by version.

Two names changed meaning between Keras 2 and Keras 3, so a converted layer names the version-exact
function: ``hard_sigmoid`` is ``clip(0.2 x + 0.5, 0, 1)`` in Keras 2 and ``relu6(x + 3) / 6`` in Keras
3 (``hard_sigmoid_keras2`` below), and ``leaky_relu``'s default slope is 0.3 in Keras 2 and 0.2 in
Keras 3 (the layer configs carry the slope, so only the bare activation name is affected).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ACTIVATIONS", "activation", "canonical_activation"]


def _hard_sigmoid_k3(x: Tensor) -> Tensor:
    return F.relu6(x + 3.0) / 6.0


def _hard_sigmoid_k2(x: Tensor) -> Tensor:
    return torch.clamp(0.2 * x + 0.5, 0.0, 1.0)


def _hard_silu(x: Tensor) -> Tensor:
    return x * F.relu6(x + 3.0) / 6.0


def _squareplus(x: Tensor) -> Tensor:
    return (x + torch.sqrt(x * x + 4.0)) / 2.0


def _sparse_plus(x: Tensor) -> Tensor:
    return torch.where(x <= -1, torch.zeros_like(x), torch.where(x >= 1, x, (x + 1) ** 2 / 4))


def _soft_shrink(x: Tensor) -> Tensor:
    return F.softshrink(x, 0.5)


def _hard_shrink(x: Tensor) -> Tensor:
    return F.hardshrink(x, 0.5)


def _log_sigmoid(x: Tensor) -> Tensor:
    return F.logsigmoid(x)


def _exponential(x: Tensor) -> Tensor:
    return torch.exp(x)


def _linear(x: Tensor) -> Tensor:
    return x


def _softsign(x: Tensor) -> Tensor:
    return x / (1.0 + torch.abs(x))


def _gelu(x: Tensor) -> Tensor:
    return F.gelu(x)


def _gelu_tanh(x: Tensor) -> Tensor:
    # keras-hub's gelu_approximate: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    return F.gelu(x, approximate="tanh")


def _celu(x: Tensor) -> Tensor:
    return F.celu(x, 1.0)


def _elu(x: Tensor) -> Tensor:
    return F.elu(x, 1.0)


def _softplus(x: Tensor) -> Tensor:
    # log(1 + exp(x)) without torch's linear cut-off above 20, which differs from it by up to 2e-9
    return torch.logaddexp(x, torch.zeros_like(x))


def _softmax(x: Tensor) -> Tensor:
    return torch.softmax(x, dim=-1)


def _log_softmax(x: Tensor) -> Tensor:
    return torch.log_softmax(x, dim=-1)


def _relu6(x: Tensor) -> Tensor:
    return F.relu6(x)


def _leaky_k3(x: Tensor) -> Tensor:
    return F.leaky_relu(x, 0.2)


def _leaky_k2(x: Tensor) -> Tensor:
    return F.leaky_relu(x, 0.3)


def _mish(x: Tensor) -> Tensor:
    return x * torch.tanh(_softplus(x))


def _hard_tanh(x: Tensor) -> Tensor:
    return torch.clamp(x, -1.0, 1.0)


def _tanh_shrink(x: Tensor) -> Tensor:
    return x - torch.tanh(x)


def _selu(x: Tensor) -> Tensor:
    return F.selu(x)


def _silu(x: Tensor) -> Tensor:
    return F.silu(x)


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "linear": _linear,
    "relu": torch.relu,
    "relu6": _relu6,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "softplus": _softplus,
    "softsign": _softsign,
    "selu": _selu,
    "elu": _elu,
    "celu": _celu,
    "gelu": _gelu,
    "gelu_approximate": _gelu_tanh,
    "silu": _silu,
    "swish": _silu,
    "exponential": _exponential,
    "hard_sigmoid": _hard_sigmoid_k3,
    "hard_sigmoid_keras2": _hard_sigmoid_k2,
    "hard_silu": _hard_silu,
    "hard_swish": _hard_silu,
    "hard_tanh": _hard_tanh,
    "hard_shrink": _hard_shrink,
    "soft_shrink": _soft_shrink,
    "sparse_plus": _sparse_plus,
    "squareplus": _squareplus,
    "tanh_shrink": _tanh_shrink,
    "mish": _mish,
    "log_sigmoid": _log_sigmoid,
    "leaky_relu": _leaky_k3,
    "leaky_relu_keras2": _leaky_k2,
}

# names that mean something else in Keras 2 than in Keras 3
_KERAS2 = {"hard_sigmoid": "hard_sigmoid_keras2", "leaky_relu": "leaky_relu_keras2"}
# activations keras-hub registers, by their registered names
_KERAS_HUB = {"keras_hub>gelu_approximate": "gelu_approximate"}


def canonical_activation(value: object, major: int) -> str | None:
    """The name in :data:`ACTIVATIONS` of a Keras activation as a config stores it (``"relu"``, None for
    linear), for a file written by Keras ``major``; None when it is not a built-in activation."""
    if value is None:
        return "linear"
    if isinstance(value, dict):  # keras 3 may store {"class_name": "function", "config": "relu"}
        inner = value.get("config")
        value = inner if isinstance(inner, str) else value.get("class_name")
    if not isinstance(value, str):
        return None
    name = _KERAS_HUB.get(value, value.lower())
    if major < 3 and name in _KERAS2:
        name = _KERAS2[name]
    return name if name in ACTIVATIONS else None


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """The torch function of a canonical activation name."""
    return ACTIVATIONS[name]
