"""Keras 3 operations recorded in functional graphs (``ops.not_equal(ids, 0)``, ``x[:, -1]``, ``ops.cast``):
comparisons, arithmetic, reductions, casts, indexing and shape changes, each as one torch call."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import dims, number, plain
from attnzoo.keras.emit.draft import is_ref
from attnzoo.keras.files import snake_case
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["Operation", "OPERATION_NAMES", "convert_operation"]
__all__ += ["ELEMENTWISE", "UNARY", "REDUCE", "DTYPES"]  # the torch each operation is; write_operation writes it


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
        if name == "pad" and options.get("mode", "constant") != "constant":
            return f"pad's mode {str(options.get('mode'))[:60]!r} is not supported (only 'constant')"
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
        elif name == "pad":
            out = _pad(args[0], config.get("pad_width", args[1] if len(args) > 1 else None), kwargs, config)
        else:  # the converter admits only the names above
            raise ValueError(f"keras operation {name!r} is not supported")
        return [out], [None]


def _pad(x: Tensor, width: Any, kwargs: dict[str, Any], config: dict[str, Any]) -> Tensor:
    """``keras.ops.pad(x, pad_width, mode="constant", constant_values=value)``: ``pad_width`` [[before,
    after]] per axis of ``x``, the value 0 unless given."""
    if not isinstance(width, list) or len(width) != x.dim():
        raise ValueError(f"keras.ops.pad's pad_width {width!r} is not one pair per axis of a {x.dim()}-D tensor")
    value = float(kwargs.get("constant_values", config.get("constant_values", 0)) or 0)
    pads = [int(p) for pair in reversed(width) for p in pair]
    return torch.nn.functional.pad(x, pads, value=value)


OPERATION_NAMES = frozenset(
    [*ELEMENTWISE, *UNARY, *REDUCE, "convert_to_tensor", "cast", "get_item", "expand_dims", "squeeze"]
    + ["zeros_like", "ones_like"]
    + ["transpose", "reshape", "concatenate", "stack", "matmul", "softmax", "where", "pad"]
)


@keras_layer(*sorted(OPERATION_NAMES - {"pad"}), package="keras.ops")
@keras_layer("pad", package="keras.ops", call_arguments={"constant_values"})
def convert_operation(record, arrays, ctx):
    """An operation's node: its snake_case name and its config (the call's constant arguments)."""
    name = snake_case(record.class_name)
    if name not in OPERATION_NAMES:
        raise Refused(f"the keras operation {record.class_name} is not supported")
    config = {k: v for k, v in record.config.items() if k != "name"}
    return Converted({"op": "operation", "name": name, "config": config}, {})


# -- the torch form: an operation as one expression; its output carries no mask --------------------------
_OPERATORS = {"not_equal": "!=", "equal": "==", "greater": ">", "greater_equal": ">=", "less": "<"}
_OPERATORS.update({"less_equal": "<=", "add": "+", "subtract": "-", "multiply": "*"})
_OPERATORS.update({"divide": "/", "true_divide": "/"})
# the torch function each other operation calls, by name, read from the tables above: these names are code
_BINARY = {name: function.__name__ for name, function in ELEMENTWISE.items() if name not in _OPERATORS}
_UNARY = {name: function.__name__ for name, function in UNARY.items()}
_REDUCTIONS = {name: function.__name__ for name, function in REDUCE.items()}


@writes(Operation)
def write_operation(w: Writer, spec: dict[str, Any]) -> bool:
    """A keras operation (``Operation``'s forward) as one expression, where its arguments are of the types
    the node would read that way."""
    name, config = spec.get("name"), spec.get("config") or {}
    value = _operation_value(w, name, config, w.args) if isinstance(config, dict) else None
    if value is None:
        return False
    if name == "convert_to_tensor":  # the same tensor: its mask is the output's (none), as masks go by tensor
        w.forget_mask(value)
    w.assign(value)
    w.mask_is(None)
    return True


def _operation_value(w: Writer, name: Any, config: dict[str, Any], args: list[Any]) -> str | None:
    """The expression ``Operation(name, config)`` computes on ``args``, or None where it is not written."""
    refs = [is_ref(a) for a in args]
    if name in _OPERATORS or name in _BINARY:
        if len(args) != 2 or not any(refs) or not all(r or number(a) for r, a in zip(refs, args, strict=True)):
            return None
        a, b = (w.value(v) for v in args)
        if not refs[0]:  # the node makes a number on the left a tensor on the other's device
            a = f"torch.as_tensor({a}, device={b}.device)"
        return f"{a} {_OPERATORS[name]} {b}" if name in _OPERATORS else f"torch.{_BINARY[name]}({a}, {b})"
    if name in ("concatenate", "stack") and len(args) == 1 and isinstance(args[0], list) and args[0]:
        axis = config.get("axis", 0)
        if not all(is_ref(a) for a in args[0]) or not plain({0: axis}, int):
            return None
        function = "cat" if name == "concatenate" else "stack"
        return f"torch.{function}([{', '.join(w.value(a) for a in args[0])}], dim={literal(axis)})"
    if name in ("matmul", "where") and len(args) == {"matmul": 2, "where": 3}[name] and all(refs):
        return f"torch.{name}({', '.join(w.value(a) for a in args)})"
    if refs[:1] != [True] or len(args) > 2:
        return None
    return _unary_value(w, name, config, w.value(args[0]), args[1] if len(args) > 1 else None, len(args))


def _unary_value(w: Writer, name: Any, config: dict[str, Any], x: str, second: Any, count: int) -> str | None:
    """The expression of an operation of one tensor ``x`` (and ``second``, its constant argument, if any)."""
    if name in _UNARY and count == 1:
        return f"torch.{_UNARY[name]}({x})"
    if name == "convert_to_tensor" and count == 1:
        return x
    if name == "cast" and w.mask_of(x) is None:  # (.to may return x itself: then it would clear x's mask)
        dtype = config.get("dtype", "float32" if second is None else second)
        return f"{x}.to(torch.{dtype})" if isinstance(dtype, str) and dtype in DTYPES else None
    if name in _REDUCTIONS:
        axis, keepdims = config.get("axis", second), config.get("keepdims", False)
        if axis is None or not dims(axis) or not isinstance(keepdims, bool):
            return None
        return f"torch.{_REDUCTIONS[name]}({x}, dim={literal(axis)}, keepdim={keepdims})"
    if name == "squeeze" and config.get("axis", second) is None:
        return f"{x}.squeeze()"
    if name in ("expand_dims", "squeeze", "softmax"):
        axis = config.get("axis", -1 if name == "softmax" or second is None else second)
        text = {"expand_dims": "{}.unsqueeze({})", "squeeze": "{}.squeeze({})", "softmax": "torch.softmax({}, dim={})"}
        return text[name].format(x, literal(axis)) if plain({0: axis}, int) else None
    if name in ("transpose", "reshape"):
        shape = config.get("axes" if name == "transpose" else "newshape", second)
        if not isinstance(shape, list) or not shape:
            return None
        if not all(plain({0: d}, int) or (d is None and name == "reshape") for d in shape):
            return None
        sizes = ", ".join("-1" if d is None else literal(d) for d in shape)
        return f"{x}.{'permute' if name == 'transpose' else 'reshape'}({sizes})"
    if name == "get_item" and count == 2:
        keys = second if isinstance(second, list) else [second]
        texts = [_index_text(k) for k in keys]
        return f"{x}[{', '.join(t for t in texts if t is not None)}]" if texts and None not in texts else None
    return None


def _index_text(key: Any) -> str | None:
    """``get_item``'s index (:func:`_index`) as subscript text, ``:, -1``; None where it is not one of ints,
    None, slices of ints and Ellipsis."""
    if key is None or plain({0: key}, int):
        return literal(key)
    if isinstance(key, dict) and set(key) == {"ellipsis"} and key["ellipsis"] is True:
        return "..."
    if isinstance(key, dict) and set(key) == {"slice"} and isinstance(key["slice"], list):
        parts = key["slice"]
        if not 1 <= len(parts) <= 3 or not all(p is None or plain({0: p}, int) for p in parts):
            return None
        start, stop, step = ([None, *parts] if len(parts) == 1 else parts) + [None] * (3 - max(len(parts), 2))
        text = ("" if start is None else literal(start)) + ":" + ("" if stop is None else literal(stop))
        return text + ("" if step is None else ":" + literal(step))
    return None
