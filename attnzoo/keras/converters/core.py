"""Keras's core layers: Embedding, Masking, Dense, and the layers that pass a tensor on (Identity,
ActivityRegularization, a nested model's inputs and outputs)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, agrees, as_tensor, expect_variables, input_agrees, refuse_options
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.activation import activated, written_activation
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.nodes import Node, activation_logits, glorot_uniform, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.layers.core import check_tokens

__all__ = ["Identity", "Embedding", "Masking", "Dense"]


class Identity(Node):
    """A tensor passed on with its mask (a nested model's input or output, ``ConvertToTensor``, Keras's
    ``Identity`` and ``ActivityRegularization``); with ``mask`` given, that mask instead."""

    op = "identity"
    supports_masking = True

    def forward(self, args, kwargs, masks):
        mask = kwargs.get("mask")
        if kwargs.get("outputs"):  # a nested model's outputs, each with its own mask
            return list(args), list(masks)
        return [args[0]], [mask if isinstance(mask, Tensor) else masks[0]]


@keras_layer("Identity", "ActivityRegularization")
def convert_identity(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    notes = ["the activity regularisation is a training loss term; add it to your loss"]
    return Converted({"op": "identity"}, {}, notes if record.class_name == "ActivityRegularization" else [])


class Embedding(Node):
    """``Embedding(input_dim, output_dim, mask_zero)``: ``weight`` [input_dim, output_dim]; with
    ``mask_zero`` the output mask is ``ids != 0``."""

    op = "embedding"
    ids_below, casts_to_ids = "input_dim", True

    def __init__(self, *, input_dim: int, output_dim: int, mask_zero: bool = False, name: str = "embedding") -> None:
        super().__init__()
        self.name = name
        self.weight = nn.Parameter(torch.empty(input_dim, output_dim))
        self.mask_zero = mask_zero
        nn.init.uniform_(self.weight, -0.05, 0.05)  # Keras's default for a fresh layer

    def forward(self, args, kwargs, masks):
        ids = args[0]
        # check_tokens says "expects {arg} ids in [0, n)": the argument is the input, whose values are ids
        check_tokens(
            self.name, ids, self.weight.shape[0], arg="input", rank=ids.dim() if isinstance(ids, Tensor) else 2
        )
        y = F.embedding(ids.long(), self.weight)
        return [y], [ids != 0 if self.mask_zero else None]


@keras_layer("Embedding")
def convert_embedding(record, arrays, ctx):
    c = record.config
    expect_variables(arrays, 1, "Embedding")
    table = arrays[0]
    if table.ndim != 2:
        raise Refused(f"embeddings {list(table.shape)} is not 2-D")
    agrees(c, "input_dim", table.shape[0], "the embeddings table")
    agrees(c, "output_dim", table.shape[1], "the embeddings table")
    spec = {"op": "embedding", "input_dim": table.shape[0], "output_dim": table.shape[1]}
    spec["mask_zero"] = bool(c.get("mask_zero", False))
    return Converted(spec, {"weight": as_tensor(table)})


class Masking(Node):
    """``Masking(mask_value)``: a step whose features all equal ``mask_value`` is masked and zeroed."""

    op = "masking"
    supports_masking = True

    def __init__(self, *, mask_value: float = 0.0) -> None:
        super().__init__()
        self.mask_value = mask_value

    def forward(self, args, kwargs, masks):
        x = args[0]
        keep = (x != self.mask_value).any(dim=-1)
        return [x * keep.unsqueeze(-1).to(x.dtype)], [keep]


@keras_layer("Masking")
def convert_masking(record, arrays, ctx):
    expect_variables(arrays, 0, "Masking")
    value = record.config.get("mask_value", 0.0)
    if not isinstance(value, (int, float)):
        raise Refused(f"mask_value {value!r} is not a number")
    return Converted({"op": "masking", "mask_value": float(value)}, {})


class Dense(Node):
    """``Dense(units, activation, use_bias)`` on the last axis of any rank: ``weight`` [units, in]."""

    op = "dense"
    logits = activation_logits
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(self, *, units: int, in_features: int, activation: str = "linear", use_bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(units, in_features))
        self.bias = nn.Parameter(torch.empty(units)) if use_bias else None
        glorot_uniform(self.weight, in_features, units)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self.activation = activation
        self.act = activation_fn(activation)

    def compute(self, x, mask):
        return self.act(F.linear(x, self.weight, self.bias))


@keras_layer("Dense")
def convert_dense(record, arrays, ctx):
    c = record.config
    refuse_options(c, lora_rank=None)
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 2 if use_bias else 1, "Dense")
    kernel = arrays[0]
    if kernel.ndim != 2:
        raise Refused(f"kernel {list(kernel.shape)} is not 2-D")
    agrees(c, "units", kernel.shape[1], "the kernel")
    input_agrees(record, kernel.shape[0])
    if use_bias and arrays[1].shape != (kernel.shape[1],):
        raise Refused(f"bias {list(arrays[1].shape)} does not fit kernel {list(kernel.shape)}")
    spec = {"op": "dense", "units": kernel.shape[1], "in_features": kernel.shape[0]}
    spec.update(activation=activation_of(c, "activation", ctx), use_bias=use_bias)
    state = {"weight": as_tensor(kernel.T)}
    if use_bias:
        state["bias"] = as_tensor(arrays[1])
    return Converted(spec, state)


# -- the torch forms ------------------------------------------------------------------------------------
@writes(Embedding)
def write_embedding(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.Embedding(input_dim, output_dim)`` of the ids as longs; with ``mask_zero`` the mask ``ids != 0``."""
    x = w.tensor()
    if x is None or not plain(spec, int, "input_dim", "output_dim"):
        return False
    layer = w.declare(f"nn.Embedding({literal(spec['input_dim'])}, {literal(spec['output_dim'])})")
    w.assign(f"{layer}({x}.long())")
    if spec.get("mask_zero"):
        w.mask_from(f"{x} != 0")
    else:
        w.mask_is(None)
    return True


@writes(Masking)
def write_masking(w: Writer, spec: dict[str, Any]) -> bool:
    """The mask (a step with any feature other than ``mask_value``), then the input with masked steps zeroed."""
    x = w.tensor()
    if x is None:
        return False
    keep = w.mask_from(f"({x} != {literal(spec.get('mask_value', 0.0))}).any(dim=-1)")
    w.assign(f"{x} * {keep}.unsqueeze(-1).to({x}.dtype)")
    return True


@writes(Dense)
def write_dense(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.Linear(in_features, units)`` and its activation; the mask passes on, as the node's."""
    x = w.tensor()
    if x is None or not plain(spec, int, "in_features", "units") or not written_activation(spec):
        return False
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    layer = w.declare(f"nn.Linear({literal(spec['in_features'])}, {literal(spec['units'])}{bias})")
    activated(w, f"{layer}({x})", spec.get("activation", "linear"))
    return True
