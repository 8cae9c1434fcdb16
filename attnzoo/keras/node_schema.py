"""What a node takes: every argument of a converted graph's layer checked when the graph is built, before
any tensor is made, against the node class's own signature (its type hints are the schema) and the rules
every layer shares by argument name (sizes are positive, rates are fractions, activations are known).

A converted folder's ``config.yaml`` may be edited by hand or come from a stranger, so each value is
checked where it enters: ``Dense(units="four")``, ``strides: [1.5]``, ``epsilon: "1e-3"``, an activation
that is no Keras activation, a cast to a dtype torch has not, a 100,000-digit int. The error names the
layer, the key and the value, and what the key takes; nothing fails later at forward time that the load
could have refused.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import types
import typing
from typing import Any

from attnzoo.errors import ConfigError

__all__ = ["check_arguments", "SIZES", "FRACTIONS", "NON_NEGATIVE", "MAX_INT"]

# arguments that are sizes (each item of a list of them too): at least 1
SIZES = frozenset(
    ["units", "filters", "in_features", "in_channels", "input_dim", "output_dim", "num_heads", "input_size"]
    + ["kernel_size", "strides", "dilation_rate", "pool_size", "depth_multiplier", "groups", "size"]
)
FRACTIONS = frozenset(["dropout", "recurrent_dropout", "momentum"])  # in [0, 1] (a noise's rate may be a stddev)
NON_NEGATIVE = frozenset(["epsilon", "layer_norm_epsilon"])  # finite and >= 0
ACTIVATION_ARGUMENTS = frozenset(["activation", "recurrent_activation"])
MAX_INT = 1 << 40  # no size, axis or count of a layer comes near it; a larger int is no layer's value


@functools.cache
def _schema(cls: type) -> tuple[dict[str, Any], frozenset[str], bool]:
    """The class's type hints, its required keyword arguments, and whether it takes any others."""
    parameters = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
    required = frozenset(
        n for n, p in parameters.items() if n != "self" and p.default is p.empty and p.kind is p.KEYWORD_ONLY
    )
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    return {n: hints.get(n, Any) for n in parameters if n != "self"}, required, open_ended


def _conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` (plain data: what YAML or JSON gives) is of type ``hint``."""
    origin, inner = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return True
    if hint is type(None) or hint is None:
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in inner)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        item = inner[0] if inner else Any
        if item is str and isinstance(value, (list, tuple)):  # a vocabulary: millions of items, checked at C speed
            return all(isinstance(v, str) for v in value)
        return isinstance(value, (list, tuple)) and all(_conforms(v, item) for v in value)
    if origin in (dict, typing.Mapping) or hint is dict:
        return isinstance(value, dict) and all(_conforms(v, inner[1] if inner else Any) for v in value.values())
    if origin is typing.Literal:
        return value in inner
    return isinstance(value, dict) if isinstance(hint, type) and hasattr(hint, "op") else True  # a Node: its data


def _type_text(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    text = str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return text.replace("attnzoo.keras.nodes.Node", "a layer's data").replace("NoneType", "None")


def _ints(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):  # strings passed over without a call each (a vocabulary's millions)
        return [v for item in value if not isinstance(item, str) for v in _ints(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _ints(item)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def _rule(key: str, value: Any) -> str | None:
    """What the rules every layer shares say of ``key: value`` (None: nothing wrong)."""
    if any(abs(v) > MAX_INT for v in _ints(value)):
        bits = max(v.bit_length() for v in _ints(value))  # str() of a 100,000-digit int is itself refused
        return f"holds an integer of {bits:,} bits, past {MAX_INT.bit_length() - 1}; no layer takes one"
    if key in SIZES and value is not None:
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, numbers.Real) and v < 1 for v in items):
            return "must be at least 1 (a size)"
    if key in FRACTIONS and isinstance(value, numbers.Real) and not 0.0 <= value <= 1.0:
        return "must be between 0 and 1"
    if key in NON_NEGATIVE and isinstance(value, numbers.Real) and not (math.isfinite(value) and value >= 0):
        return "must be a finite number >= 0"
    if key in ACTIVATION_ARGUMENTS and isinstance(value, str):
        from attnzoo.keras.activations import ACTIVATIONS

        if value not in ACTIVATIONS and value not in ("relu_layer", "elu_layer"):
            return f"is no activation attnzoo knows ({', '.join(sorted(ACTIVATIONS))})"
    return None


def check_arguments(cls: type, arguments: dict[str, Any], where: str) -> None:
    """Refuse, with a ``ConfigError`` naming ``where`` (the layer), the key and the value, an argument
    ``cls`` does not take, a missing one, a value of the wrong type or outside what the key takes."""
    hints, required, open_ended = _schema(cls)
    op = getattr(cls, "op", cls.__name__)

    def refuse(key: str, value: Any, problem: str) -> ConfigError:
        try:
            shown = repr(value)
        except ValueError:  # an int past Python's 4,300 digits has no repr
            shown = "<a number too long to show>"
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return ConfigError(f"keras_model: {where} ({op}): {key} {shown} {problem}")

    missing = sorted(required - set(arguments))
    if missing:
        raise ConfigError(f"keras_model: {where} ({op}): missing {', '.join(missing)}; the layer needs them")
    for key, value in arguments.items():
        if not isinstance(key, str) or (key not in hints and not open_ended):
            known = ", ".join(sorted(hints))
            raise ConfigError(f"keras_model: {where} ({op}): takes no argument {str(key)[:60]!r} (it takes {known})")
        if key in hints and not _conforms(value, hints[key]):
            raise refuse(key, value, f"is not {_type_text(hints[key])}")
        problem = _rule(key, value)
        if problem is not None:
            raise refuse(key, value, problem)
    problem = cls.check_values(arguments)  # type: ignore[attr-defined]
    if problem is not None:
        raise ConfigError(f"keras_model: {where} ({op}): {problem}")
