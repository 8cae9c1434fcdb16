"""tf.keras 2's operation layers (``TFOpLambda``, ``SlicingOpLambda``) as Keras 3 operations.

tf.keras 2 records tensor code between layers as one layer per call: ``x + y`` becomes a ``TFOpLambda``
whose ``config["function"]`` is ``__operators__.add``, ``tf.reshape(x, s)`` one of ``reshape``, ``x[:, -1]``
a ``SlicingOpLambda`` of ``__operators__.getitem``. Its inbound node holds the tensors of the function's
first argument (a list of them for ``tf.concat``), every other argument under its TF parameter name
(``{"y": <tensor or number>, "name": None}``, ``{"slice_spec": [...]}``), and a number as first argument
as ``["_CONSTANT_VALUE", -1, number]``.

Each TF function here computes what one Keras 3 operation computes (the ``operation`` nodes of
:mod:`attnzoo.keras.converters.ops`, which the emitted module writes as torch), so the graph reads the
layer as that operation, its arguments moved where the operation reads them: ``math.multiply(x, y=2.0)``
is ``multiply(x, 2.0)``, ``reshape(x, shape=s)`` is ``reshape(x)`` with ``newshape`` s. A call this cannot
state exactly (an argument off its default, a tensor where a constant goes, an unknown function) is
refused with its reason, which the conversion reports by the layer's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TF_OP_CLASSES = ("TFOpLambda", "SlicingOpLambda")

__all__ = ["TF_OP_CLASSES", "TfOperation", "tf_operation", "supported_functions", "operation_class", "refusal"]
__all__ += ["operation_of"]

# TF function (as tf.keras 2 records it) -> the Keras 3 operation computing the same; each takes (x, y)
_BINARY = {
    "__operators__.add": "add",
    "math.add": "add",
    "math.subtract": "subtract",
    "math.multiply": "multiply",
    "math.truediv": "divide",
    "math.divide": "divide",
    "math.pow": "power",
    "math.maximum": "maximum",
    "math.minimum": "minimum",
    "math.equal": "equal",
    "math.not_equal": "not_equal",
    "math.greater": "greater",
    "math.greater_equal": "greater_equal",
    "math.less": "less",
    "math.less_equal": "less_equal",
    "math.logical_and": "logical_and",
    "math.logical_or": "logical_or",
}
_COMMUTATIVE = ("add", "multiply", "maximum", "minimum", "equal", "not_equal", "logical_and", "logical_or")
# one tensor in, nothing else (tf.nn.relu's argument is `features`, the others' `x`: the first either way)
_UNARY = {
    "math.negative": "negative",
    "math.abs": "abs",
    "math.exp": "exp",
    "math.log": "log",
    "math.sqrt": "sqrt",
    "math.square": "square",
    "math.tanh": "tanh",
    "nn.tanh": "tanh",
    "math.sigmoid": "sigmoid",
    "nn.sigmoid": "sigmoid",
    "nn.relu": "relu",
    "math.sign": "sign",
    "math.logical_not": "logical_not",
    "identity": "convert_to_tensor",
}
_REDUCE = {f"math.reduce_{name}": name for name in ("sum", "mean", "max", "min", "any", "all")}
# the TF parameters each other function takes, with the defaults a call must keep ("required" where none)
_REQUIRED = object()
_MATMUL_SWITCHES = ("transpose_a", "transpose_b", "adjoint_a", "adjoint_b", "a_is_sparse", "b_is_sparse")
_OTHER: dict[str, tuple[str, dict[str, Any]]] = {
    "reshape": ("reshape", {"shape": _REQUIRED}),
    "concat": ("concatenate", {"axis": _REQUIRED}),
    "stack": ("stack", {"axis": 0}),
    "expand_dims": ("expand_dims", {"axis": _REQUIRED}),
    "squeeze": ("squeeze", {"axis": None}),
    "transpose": ("transpose", {"perm": None, "conjugate": False}),
    "compat.v1.transpose": ("transpose", {"perm": None, "conjugate": False}),
    "linalg.matmul": ("matmul", {"b": _REQUIRED, **dict.fromkeys(_MATMUL_SWITCHES, False), "output_type": None}),
    "cast": ("cast", {"dtype": _REQUIRED}),
    "where": ("where", {"x": _REQUIRED, "y": _REQUIRED}),
    "nn.softmax": ("softmax", {"axis": None}),
    "math.softmax": ("softmax", {"axis": None}),
    "zeros_like": ("zeros_like", {"dtype": None}),
    "ones_like": ("ones_like", {"dtype": None}),
    "__operators__.getitem": ("get_item", {"slice_spec": _REQUIRED}),
}
for _name in _REDUCE:
    _OTHER[_name] = (_REDUCE[_name], {"axis": None, "keepdims": False})
# the dtypes a cast or *_like names, as the operation node knows them (converters/ops.py's DTYPES)
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool", "uint8", "int8")


@dataclass
class TfOperation:
    """A TF function's call read as the Keras 3 operation ``name`` with ``config``, called on ``args``."""

    name: str
    config: dict[str, Any]
    args: list[Any]


def supported_functions() -> list[str]:
    """The TF functions read as operations, as ``tf.<function>`` (what a refusal lists)."""
    return sorted(f"tf.{name}" for name in [*_BINARY, *_UNARY, *_OTHER])


def operation_of(function: str) -> str:
    """The Keras 3 operation a TF function (``tf.math.add``) is read as (``add``)."""
    name = function.removeprefix("tf.")
    found = _BINARY.get(name) or _UNARY.get(name) or _OTHER.get(name, ("",))[0]
    if not found:
        raise KeyError(f"{function!r} is not read as an operation; these are: {', '.join(supported_functions())}")
    return found


def refusal(reason: str) -> str:
    """The whole refusal of a TF operation layer: why, what is read, what to do."""
    return (
        f"{reason}. tf.keras 2 wrote this TF call as a layer; attnzoo reads these TF functions as operations: "
        f"{', '.join(supported_functions())}. Compute it with Keras layers instead (or keras.ops in Keras 3) and "
        f"save the model again, or make it a custom layer and register its converter (attnzoo_register_keras_layers, "
        f"docs/keras-migration.md)"
    )


def operation_class(name: str) -> str:
    """The Keras 3 class name of operation ``name`` (``get_item`` -> ``GetItem``): what Keras 3 records."""
    return "".join(part.capitalize() for part in name.split("_"))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(_number(v) and float(v).is_integer() for v in value)


def tf_operation(
    function: Any, args: list[Any], kwargs: dict[str, Any], is_tensor: Callable[[Any], bool]
) -> TfOperation | str:
    """The Keras 3 operation a tf.keras 2 operation layer's call is, or why it is not one (a sentence).
    ``is_tensor`` tells the graph's tensors (its refs) from constants."""
    if not isinstance(function, str):
        return f"its config names no TF function ({str(function)[:40]})"
    given = {k: v for k, v in kwargs.items() if k != "name"}  # the op's name in TF's graph: nothing computed
    if len(args) != 1:
        return f"tf.{function} is called on {len(args)} positional arguments; tf.keras 2 records one"
    first = args[0]
    if function in _BINARY or function in _UNARY:
        wanted = {"y": _REQUIRED} if function in _BINARY else {}
        extra = sorted(set(given) - set(wanted))
        if extra:
            return f"tf.{function} with argument(s) {', '.join(extra)}, which the operation does not take"
        operands = [first, given["y"]] if function in _BINARY else [first]
        if "y" in wanted and "y" not in given:
            return f"tf.{function} is recorded without its second operand"
        if not any(is_tensor(v) for v in operands) or not all(is_tensor(v) or _number(v) for v in operands):
            shown = ", ".join(str(v)[:30] for v in operands if not is_tensor(v))
            return f"tf.{function} on a constant that is not one number ({shown}); only tensors and numbers are read"
        name = (_BINARY if function in _BINARY else _UNARY)[function]
        if name in _COMMUTATIVE and not is_tensor(operands[0]):  # 0.5 * x as x * 0.5: the same, bit for bit
            operands.reverse()
        return TfOperation(name, {}, operands)
    if function not in _OTHER:
        return f"tf.{function} is not a TF function attnzoo reads"
    name, defaults = _OTHER[function]
    extra = sorted(set(given) - set(defaults))
    missing = sorted(k for k, v in defaults.items() if v is _REQUIRED and k not in given)
    changed = sorted(k for k, v in defaults.items() if v is not _REQUIRED and k in given and given[k] != v)
    if extra or missing:
        return f"tf.{function} is recorded with argument(s) {', '.join(extra + missing)} it does not take or lacks"
    settings = {k: given.get(k, v) for k, v in defaults.items()}
    return _other(function, name, first, settings, changed, is_tensor)


def _other(
    function: str, name: str, first: Any, settings: dict[str, Any], changed: list[str], is_tensor: Callable[[Any], bool]
) -> TfOperation | str:
    """The functions of ``_OTHER``: their settings checked and moved into the operation's config."""
    off = [k for k in changed if k not in ("perm", "axis", "keepdims", "dtype")]
    if off:  # transpose_b=True, conjugate=True, ...: the operation has no such switch
        return f"tf.{function} with {', '.join(f'{k}={settings[k]!r}' for k in off)}, which attnzoo does not read"
    if name in ("concatenate", "stack"):
        tensors = first if isinstance(first, list) else [first]
        if not tensors or not all(is_tensor(t) for t in tensors) or not _number(settings["axis"]):
            return f"tf.{function} of {str(first)[:40]} along {settings['axis']!r}: tensors along one axis are read"
        return TfOperation(name, {"axis": int(settings["axis"])}, [tensors])
    if not is_tensor(first):
        return f"tf.{function} of the constant {str(first)[:40]}: only a tensor as first argument is read"
    if name == "get_item":
        key = _key(settings["slice_spec"])
        if isinstance(key, str):
            return f"a slice {key}"
        return TfOperation(name, {}, [first, key])
    if name in ("matmul", "where"):
        others = [settings["b"]] if name == "matmul" else [settings["x"], settings["y"]]
        if not all(is_tensor(t) for t in others):
            return f"tf.{function} of a constant: only tensors are read"
        return TfOperation(name, {}, [first, *others])
    if name in ("cast", "zeros_like", "ones_like"):
        dtype = settings["dtype"]
        if dtype is None:
            return TfOperation(name, {}, [first])
        if dtype not in _DTYPES:
            return f"tf.{function} to dtype {str(dtype)[:30]}; the dtypes read: {', '.join(_DTYPES)}"
        return TfOperation(name, {"dtype": dtype}, [first])
    return _shaped(function, name, first, settings)


def _shaped(function: str, name: str, first: Any, settings: dict[str, Any]) -> TfOperation | str:
    """reshape, transpose, expand_dims, squeeze, softmax and the reductions: an axis, axes or a shape."""
    if name == "reshape":
        shape = settings["shape"]
        if not _ints(shape) or not shape:
            return f"tf.reshape to {str(shape)[:40]}: only a constant list of ints is read"
        return TfOperation(name, {"newshape": [int(d) for d in shape]}, [first])
    if name == "transpose":
        perm = settings["perm"]
        if perm is None:
            return TfOperation(name, {}, [first])
        if not _ints(perm) or not perm:
            return f"tf.{function} with perm {str(perm)[:40]}: only a constant list of ints is read"
        return TfOperation(name, {"axes": [int(d) for d in perm]}, [first])
    axis = settings["axis"]
    axes_ok = axis is None or (_number(axis) and float(axis).is_integer()) or (_ints(axis) and bool(axis))
    if not axes_ok or (name in ("expand_dims", "softmax") and isinstance(axis, list)):
        return f"tf.{function} along {str(axis)[:40]}: only a constant axis is read"
    axis = [int(a) for a in axis] if isinstance(axis, list) else None if axis is None else int(axis)
    if name == "softmax":
        return TfOperation(name, {"axis": -1 if axis is None else axis}, [first])
    if name in ("expand_dims", "squeeze"):
        return TfOperation(name, {} if axis is None else {"axis": axis}, [first])
    keepdims = settings["keepdims"]
    if not isinstance(keepdims, bool):
        return f"tf.{function} with keepdims {keepdims!r}"
    return TfOperation(name, {"axis": axis, "keepdims": keepdims}, [first])


def _key(spec: Any) -> Any:
    """A ``slice_spec`` as ``get_item``'s key (ops.py's ``_index`` form), or why not (a str)."""
    if isinstance(spec, list):
        keys = [_key(item) for item in spec]
        bad = next((k for k in keys if isinstance(k, str)), None)
        return bad if bad is not None else keys
    if spec is None or (_number(spec) and float(spec).is_integer()):
        return None if spec is None else int(spec)  # None: a new axis, as in TF
    if isinstance(spec, dict) and spec.get("class_name") == "__ellipsis__":
        return {"ellipsis": True}
    if isinstance(spec, dict) and set(spec) == {"start", "stop", "step"}:
        parts = [spec["start"], spec["stop"], spec["step"]]
        if not all(p is None or (_number(p) and float(p).is_integer()) for p in parts):
            return f"with {str(spec)[:60]}: only constant int bounds are read"
        if parts[2] is not None and parts[2] <= 0:
            return f"with step {parts[2]}: torch slices forward only"
        return {"slice": [None if p is None else int(p) for p in parts]}
    return f"with {str(spec)[:60]}: only ints, slices, None and ... are read"
