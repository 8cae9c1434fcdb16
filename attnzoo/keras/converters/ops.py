"""Keras 3 operations recorded in functional graphs (``ops.not_equal(ids, 0)``, ``x[:, -1]``, ``ops.cast``):
comparisons, arithmetic, reductions, casts, indexing and shape changes, each as one torch call."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.files import snake_case
from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused

__all__ = ["Operation", "OPERATION_NAMES", "convert_operation", "is_operation"]
__all__ += ["ELEMENTWISE", "UNARY", "REDUCE", "DTYPES"]  # the torch each operation is; keras/source.py writes it


def _index(key: Any) -> Any:
    if isinstance(key, dict) and "slice" in key:
        return slice(*key["slice"])
    if isinstance(key, dict) and key.get("ellipsis"):
        return Ellipsis
    if isinstance(key, list):
        return tuple(_index(k) for k in key)
    return key


ELEMENTWISE = {
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
UNARY = {
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
REDUCE = {
    "sum": torch.sum,
    "mean": torch.mean,
    "max": torch.amax,
    "min": torch.amin,
    "any": torch.any,
    "all": torch.all,
}
DTYPES = {
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
    options_argument = "config"

    def __init__(self, *, name: str, config: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__()
        self.name_, self.config = name, {**(config or {}), **options}

    @classmethod
    def check_values(cls, arguments: dict[str, Any]) -> str | None:
        name = arguments.get("name")
        if name not in OPERATION_NAMES:
            return f"name {str(name)[:60]!r} is no operation attnzoo runs ({', '.join(sorted(OPERATION_NAMES))})"
        options = {**(arguments.get("config") or {}), **arguments}
        dtype = options.get("dtype")
        if name == "cast" and dtype is not None and str(dtype) not in DTYPES:  # cast reads it; zeros_like may not
            return f"dtype {str(dtype)[:60]!r} is no dtype attnzoo casts to ({', '.join(DTYPES)})"
        return None

    def forward(self, args, kwargs, masks):
        name, config = self.name_, self.config
        if name in ELEMENTWISE:
            a, b = args[0], args[1]
            if not isinstance(a, Tensor):
                a = torch.as_tensor(a, device=b.device)
            out = ELEMENTWISE[name](a, b)
        elif name in UNARY:
            out = UNARY[name](args[0])
        elif name in REDUCE:
            axis = config.get("axis", kwargs.get("axis", args[1] if len(args) > 1 else None))
            keepdims = bool(config.get("keepdims", kwargs.get("keepdims", False)))
            x = args[0]
            if axis is None:
                out = REDUCE[name](x)
                out = out.reshape([1] * x.dim()) if keepdims else out
            else:
                out = REDUCE[name](x, dim=axis, keepdim=keepdims)
        elif name in ("zeros_like", "ones_like"):
            dtype = config.get("dtype", kwargs.get("dtype"))
            make = torch.zeros_like if name == "zeros_like" else torch.ones_like
            out = make(args[0], dtype=DTYPES.get(str(dtype)) if dtype else None)
        elif name == "convert_to_tensor":
            out = args[0]
        elif name == "cast":
            out = args[0].to(DTYPES[str(config.get("dtype", args[1] if len(args) > 1 else "float32"))])
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


OPERATION_NAMES = frozenset(
    [*ELEMENTWISE, *UNARY, *REDUCE, "convert_to_tensor", "cast", "get_item", "expand_dims", "squeeze"]
    + ["zeros_like", "ones_like"]
    + ["transpose", "reshape", "concatenate", "stack", "matmul", "softmax", "where"]
)


def convert_operation(record, arrays, ctx):
    """An operation's node: its snake_case name and its config (the call's constant arguments)."""
    name = snake_case(record.class_name)
    if name not in OPERATION_NAMES:
        raise Refused(f"the keras operation {record.class_name} is not supported")
    config = {k: v for k, v in record.config.items() if k != "name"}
    return Converted({"op": "operation", "name": name, "config": config}, {})


def is_operation(record: LayerRecord) -> bool:
    """A keras 3 operation: its module says so, or (a legacy .h5 records no module) its class is an
    operation's and its config is not a layer's."""
    if record.module is not None:
        return record.is_operation
    # every layer config carries "trainable"; an operation's holds its own arguments only
    return snake_case(record.class_name) in OPERATION_NAMES and "trainable" not in record.config
