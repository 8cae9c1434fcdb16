"""Keras's reshaping layers: Flatten, Reshape, Permute, RepeatVector."""

from __future__ import annotations

from typing import Any

from attnzoo.keras.arguments import channels_first, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["Flatten", "Reshape", "Permute", "RepeatVector"]


class Flatten(Node):
    """``Flatten``: [B, ...] -> [B, prod(...)] (channels_first inputs move their channels last first)."""

    op = "flatten"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, channels_first: bool = False) -> None:
        super().__init__()
        self.channels_first = channels_first

    def compute(self, x, mask):
        if self.channels_first and x.dim() > 2:
            x = x.movedim(1, -1)
        return x.reshape(x.shape[0], -1)


@keras_layer("Flatten")
def convert_flatten(record, arrays, ctx):
    expect_variables(arrays, 0, "Flatten")
    return Converted({"op": "flatten", "channels_first": channels_first(record.config)}, {})


class Reshape(Node):
    """``Reshape(target_shape)``: [B, ...] -> [B, *target_shape] (one entry may be -1)."""

    op = "reshape"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, target_shape: list[int]) -> None:
        super().__init__()
        self.target_shape = [int(d) for d in target_shape]

    def compute(self, x, mask):
        return x.reshape(x.shape[0], *self.target_shape)


@keras_layer("Reshape")
def convert_reshape(record, arrays, ctx):
    shape = record.config.get("target_shape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise Refused(f"target_shape {shape!r} is not a list of ints")
    return Converted({"op": "reshape", "target_shape": list(shape)}, {})


class Permute(Node):
    """``Permute(dims)``: the non-batch axes in the order ``dims`` (1-based, as Keras counts them)."""

    op = "permute"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, dims: list[int]) -> None:
        super().__init__()
        self.dims = [int(d) for d in dims]

    def compute(self, x, mask):
        return x.permute(0, *self.dims)


@keras_layer("Permute")
def convert_permute(record, arrays, ctx):
    dims = record.config.get("dims")
    if not isinstance(dims, (list, tuple)) or sorted(dims) != list(range(1, len(dims) + 1)):
        raise Refused(f"dims {dims!r} is not a permutation of 1..n")
    return Converted({"op": "permute", "dims": list(dims)}, {})


class RepeatVector(Node):
    """``RepeatVector(n)``: [B, F] -> [B, n, F]."""

    op = "repeat_vector"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, n: int) -> None:
        super().__init__()
        self.n = n

    def compute(self, x, mask):
        return x.unsqueeze(1).expand(-1, self.n, -1)


@keras_layer("RepeatVector")
def convert_repeat_vector(record, arrays, ctx):
    n = record.config.get("n")
    if not isinstance(n, int) or n < 1:
        raise Refused(f"n {n!r} is not a positive int")
    return Converted({"op": "repeat_vector", "n": n}, {})


# -- the torch form -------------------------------------------------------------------------------------
@writes(Flatten, Reshape, Permute, RepeatVector)
def write_reshaping(w: Writer, spec: dict[str, Any]) -> bool:
    """``reshape`` of each sample (Flatten of channels-first data in Keras's channels-last order), ``permute``
    of the non-batch axes, RepeatVector's ``unsqueeze(1).expand``. No mask comes out, as the nodes'."""
    x, op = w.tensor(), spec["op"]
    if x is None:
        return False
    if op == "flatten":
        h = f"{x}.movedim(1, -1)" if spec.get("channels_first") else x
        w.assign(f"{h}.reshape({x}.shape[0], -1)")
    elif op == "reshape":
        w.assign(f"{x}.reshape({x}.shape[0], {', '.join(map(literal, spec['target_shape']))})")
    elif op == "permute":
        w.assign(f"{x}.permute(0, {', '.join(map(literal, spec['dims']))})")
    else:  # repeat_vector
        w.assign(f"{x}.unsqueeze(1).expand(-1, {literal(spec['n'])}, -1)")
    return True
