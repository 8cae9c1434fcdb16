"""Which input of a converted Keras model is which: its inputs by name, as Keras's dict or in Keras's flat
order, bound to the one flat order the emitted ``forward`` takes, and their values checked against what
each input is.

Names. An input goes by the name Keras calls it by: its key in Keras's dict of inputs (``token_ids``), else
its ``keras.Input``'s name. :func:`input_names` lists them in Keras's flat order (``model.inputs``: a dict's
entries by sorted key, nested lists depth first), the order of the emitted ``forward``'s parameters, which
are these names made Python names by :func:`~attnzoo.keras.codegen.identifier`.

Binding (:func:`bind`), as Python binds a call: positional arguments fill the first names in that order,
keywords the rest; a name given twice, an unknown one (with the closest names) or a missing one is a
``ValueError`` that lists the model's inputs. One mapping alone is the dict Keras takes: keyed by the dict's
keys for a model of a dict of inputs (nested values nested), by the names for any other (as keras 3 takes
a list model's inputs by name). A model of nested lists also takes them nested, as Keras does
(``model(a, [b, c])``). A name that is no Python identifier (Keras takes any string) is reached by the dict.

Values (:func:`value_rules`, :func:`check_values`): ids that index an Embedding (``vocab`` in the graph's
input record: the smallest table that reads them) must lie in [0, vocab); a padding mask (an input some
layer takes as its ``padding_mask``, as keras-hub's do, or one named ``padding_mask``) holds 0 and 1 only.
A swapped order shows there: token ids where the padding mask goes are refused, naming the input. One
reduction per checked input and one read of the results (a device sync on CUDA) per call; under tracing
(``torch.compile``, ``torch.export``, ``torch.jit.trace``, torch.fx) nothing is read, so an exported
program holds no check.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnzoo.errors import close_matches
from attnzoo.keras.hub_graph import DECODER_INPUTS, ENCODER_INPUTS
from attnzoo.keras.masks import refs_in
from attnzoo.keras.nodes import INTEGER_DTYPES

__all__ = ["ValueRule", "input_names", "value_rules", "bind", "by_name", "check_values", "tracing", "encoder_calls"]


@dataclass(frozen=True)
class ValueRule:
    """What an integer input's values must be: in [0, ``high``). ``kind`` is ``"ids"`` (rows of an embedding
    table of ``high`` rows) or ``"padding mask"`` (``high`` 2: 1 at a token, 0 at padding)."""

    kind: str
    high: int


def _ref(value: Any) -> str | None:
    """The call id a graph argument ``{"ref": [call, 0]}`` reads, or None."""
    ref = value.get("ref") if isinstance(value, Mapping) else None
    if isinstance(ref, Sequence) and len(ref) == 2 and ref[1] == 0:
        return str(ref[0])
    return None


def input_names(graph: Mapping[str, Any]) -> list[str]:
    """Each input's name, in the graph's (Keras's flat) order: its key where it is an entry of Keras's dict of
    inputs, else its ``keras.Input``'s name."""
    names = [str(spec.get("name", spec.get("id"))) for spec in graph["inputs"]]
    structure = graph.get("input_structure")
    if isinstance(structure, Mapping):
        for key, leaf in structure.items():
            if isinstance(leaf, int) and 0 <= leaf < len(names):
                names[leaf] = str(key)
    return names


def encoder_calls(graph: Mapping[str, Any]) -> set[str]:
    """The calls of an encoder-decoder LM's graph (one taking keras-hub's ``encoder_token_ids`` and
    ``decoder_token_ids``) that compute from its encoder inputs alone, the same at every step of a decoding
    (the encoder); none for any other graph."""
    names = input_names(graph)
    if not {ENCODER_INPUTS[0], DECODER_INPUTS[0]} <= set(names):
        return set()
    fixed = {spec["id"] for spec, name in zip(graph["inputs"], names, strict=True) if name in ENCODER_INPUTS}
    for call in graph["calls"]:
        read = {str(ref["ref"][0]) for ref in refs_in([call["args"], call["kwargs"]])}
        if read and read <= fixed:
            fixed.add(call["id"])
    return fixed - {spec["id"] for spec in graph["inputs"]}


def _padding_masks(graph: Mapping[str, Any]) -> set[str]:
    """The ids of the inputs some call takes as a ``*padding_mask`` keyword (keras-hub's layers: ``padding_mask``,
    ``decoder_padding_mask``), directly or passed on by a nested model's input."""
    inputs = {str(spec.get("id")) for spec in graph["inputs"]}
    source: dict[str, str] = {i: i for i in inputs}  # a call id that is an input, or passes one on -> the input
    found = set()
    for call in graph.get("calls") or []:
        args, kwargs = call.get("args") or [], call.get("kwargs") or {}
        first = _ref(args[0]) if args else None
        if call.get("layer") is None and first in source:
            source[str(call.get("id"))] = source[first]
        for name, value in kwargs.items() if isinstance(kwargs, Mapping) else ():
            if str(name).endswith("padding_mask") and _ref(value) in source:
                found.add(source[str(_ref(value))])
    return found


def value_rules(graph: Mapping[str, Any]) -> list[ValueRule | None]:
    """Each input's :class:`ValueRule`, in the graph's order; None for an input whose values go unchecked
    (features, texts, a bool mask, ids no Embedding bounds)."""
    masks = _padding_masks(graph)
    rules: list[ValueRule | None] = []
    for spec, name in zip(graph["inputs"], input_names(graph), strict=True):
        if str(spec.get("dtype")) not in INTEGER_DTYPES:
            rules.append(None)
        elif str(spec.get("id")) in masks or "padding_mask" in (name, spec.get("name")):
            rules.append(ValueRule("padding mask", 2))
        elif isinstance(spec.get("vocab"), int) and spec["vocab"] > 0:
            rules.append(ValueRule("ids", int(spec["vocab"])))
        else:
            rules.append(None)
    return rules


def _python_name(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _listing(names: list[str]) -> str:
    """The inputs as a message lists them, with how to reach a name that is no Python identifier."""
    text = f"its inputs, in Keras's order: {', '.join(map(repr, names))}"
    odd = [name for name in names if not _python_name(name)]
    if odd:
        text += (
            f"; {', '.join(map(repr, odd))} {'is' if len(odd) == 1 else 'are'} no Python name: pass "
            f"{'it' if len(odd) == 1 else 'them'} in the dict Keras takes, model({{{odd[0]!r}: ..., ...}})"
        )
    return text


def by_name(names: list[str]) -> str:
    """A call of the model by name, as a message shows it: ``model(token_ids=..., padding_mask=...)`` (the
    first three names), or the dict where one of them is no Python name."""
    first, more = names[:3], ", ..." if len(names) > 3 else ""
    if all(_python_name(name) for name in first):
        return f"model({', '.join(f'{name}=...' for name in first)}{more})"
    return f"model({{{', '.join(f'{name!r}: ...' for name in first)}{more}}})"


def _unknown(key: Any, names: list[str], form: str, missing: Sequence[str] = ()) -> ValueError:
    """The error for a name (a keyword, or a key of the dict given) that no input has; ``missing``: the
    inputs the call left out (the one left out is the likeliest meant, however it is spelt)."""
    near = close_matches(str(key), names) or (list(missing) if len(missing) == 1 else [])
    hint = f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""
    left = f"; missing {', '.join(map(repr, missing))}" if missing else ""
    return ValueError(f"keras_model has no input {str(key)[:80]!r}{hint}, given in the {form}{left}; {_listing(names)}")


_MISSING = object()


def _by_name(names: list[str], positional: Sequence[Any], named: Mapping[Any, Any], form: str) -> list[Any]:
    """``positional`` on the first names, ``named`` on theirs: the inputs in flat order."""
    if len(positional) > len(names):
        raise ValueError(
            f"keras_model takes {len(names)} input(s), got {len(positional)} positionally; {_listing(names)}"
        )
    given = list(positional) + [_MISSING] * (len(names) - len(positional))
    where = {}
    for i, name in enumerate(names):
        where.setdefault(name, i)  # (a name Keras gives twice, nested, is reached positionally)
    unknown = [key for key in named if not isinstance(key, str) or key not in where]
    for key, value in named.items():
        i = where.get(key) if isinstance(key, str) else None
        if i is None:
            continue
        if given[i] is not _MISSING:
            raise ValueError(
                f"keras_model got input {key!r} twice: as positional input {i + 1} (Keras's order fills "
                f"{', '.join(map(repr, names[: len(positional)]))} first) and by name; give each input once"
            )
        given[i] = value
    missing = [name for name, value in zip(names, given, strict=True) if value is _MISSING]
    if unknown:
        raise _unknown(unknown[0], names, form, missing)
    if missing:
        raise ValueError(
            f"keras_model is missing input(s) {', '.join(map(repr, missing))}; {_listing(names)}. Pass each by "
            f"name ({by_name(names)}), as the dict Keras takes, or all of them positionally in Keras's order"
        )
    return given


def _flatten(structure: Any, given: Any, where: str = "") -> list[tuple[int, Any]]:
    """``given``, nested as ``structure`` (whose leaves are flat positions), as (position, value) pairs."""
    if isinstance(structure, int):
        return [(structure, given)]
    if isinstance(structure, Mapping):
        if not isinstance(given, Mapping) or set(given) != set(structure):
            raise ValueError(
                f"keras_model takes {where or 'its inputs'} as a dict keyed {', '.join(map(repr, structure))}"
            )
        return [pair for key, inner in structure.items() for pair in _flatten(inner, given[key], f"{where}[{key!r}]")]
    if not isinstance(given, (list, tuple)) or len(given) != len(structure):
        raise ValueError(f"keras_model takes {where or 'its inputs'} as a list of {len(structure)}")
    return [
        pair
        for i, (inner, item) in enumerate(zip(structure, given, strict=True))
        for pair in _flatten(inner, item, f"{where}[{i}]")
    ]


def _in_order(pairs: list[tuple[int, Any]]) -> list[Any]:
    return [value for _, value in sorted(pairs, key=lambda pair: pair[0])]


def bind(names: list[str], structure: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    """The inputs of a call ``model(*args, **kwargs)`` in the graph's flat order (see the module docstring):
    ``names`` from :func:`input_names`, ``structure`` the graph's ``input_structure`` (None for a flat list)."""
    if not kwargs and len(args) == 1 and isinstance(args[0], Mapping):
        given = args[0]
        if isinstance(structure, Mapping) and not all(isinstance(leaf, int) for leaf in structure.values()):
            unknown = [key for key in given if key not in structure]  # a dict of nested values: Keras's nesting
            if unknown:
                raise _unknown(unknown[0], list(structure), "dict")
            return _in_order(_flatten(structure, given))
        return _by_name(names, [], given, "dict")
    if any(isinstance(x, Mapping) for x in args):
        raise ValueError(
            f"keras_model takes one dict of inputs alone, or tensors by position and name; {_listing(names)}"
        )
    if not kwargs and isinstance(structure, list) and len(args) != len(names):
        return _in_order(_flatten(structure, list(args)))
    return _by_name(names, args, kwargs, "call")


def tracing() -> bool:
    """Whether torch is tracing or compiling the call (``torch.compile``, ``torch.export``, ``torch.jit.trace``,
    torch.fx): a trace has no values to read, and what it records runs without the checks."""
    from torch.fx._symbolic_trace import is_fx_symbolic_tracing  # torch.fx's own flag (make_fx too)

    return torch.compiler.is_compiling() or torch.jit.is_tracing() or is_fx_symbolic_tracing()


def _readable(x: Any) -> bool:
    """Whether ``x`` holds values to read: a plain tensor, not on ``meta`` (a fake tensor, or another subclass
    that stands for values elsewhere, holds none here)."""
    return type(x) is Tensor and not x.is_meta


def check_values(
    inputs: Sequence[Any],
    rules: Sequence[ValueRule | None],
    names: list[str],
    positional: int,
    *,
    decoding: bool = False,
) -> None:
    """Refuse, naming it, an input whose values break its :class:`ValueRule` (``inputs`` checked tensors in the
    graph's order; ``positional``: how many the caller gave by position, whose order a message then shows);
    while ``decoding`` (a call given a decoding cache, whose layers read no padding), a padding mask with a 0
    (an encoder's aside). One ``aminmax`` per checked input and one read of them all; nothing under
    :func:`tracing`."""
    if tracing():
        return
    checked = [
        (name, x, rule)
        for name, x, rule in zip(names, inputs, rules, strict=True)
        if rule is not None and _readable(x) and x.numel() and not x.is_floating_point()
    ]
    if not checked:
        return
    # one aminmax an input, one stack (it promotes int32 and int64 alike) and one read of them all
    bounds = torch.stack([bound for _, x, _ in checked for bound in torch.aminmax(x)]).tolist()
    for (name, _, rule), low, high in zip(checked, bounds[0::2], bounds[1::2], strict=True):
        if decoding and rule.kind == "padding mask" and low == 0 and name not in ENCODER_INPUTS:
            raise ValueError(
                f"keras_model: input {name!r} holds padding (a 0), but a call given cache= computes every token "
                f"it is given, after the ones cached: its layers read no padding. Give each call real tokens only "
                f"(generate pads prompts on the right and decodes from the shortest one's end), or call without "
                f"cache"
            )
        if low >= 0 and high < rule.high:
            continue
        if rule.kind == "padding mask":
            what = (
                f"is a padding mask (1 at a token, 0 at padding), but holds values from {low} to {high}; pass 0 "
                f"and 1 (or a bool mask)"
            )
        else:
            what = (
                f"holds ids from {low} to {high}, but the embedding table it indexes has {rule.high} rows; pass "
                f"ids in [0, {rule.high})"
            )
        order = ""
        if positional > 1:
            order = (
                f". Given by position, inputs go in Keras's order ({', '.join(names)}): was another input meant? "
                f"Pass them by name, {by_name(names)}"
            )
        raise ValueError(f"keras_model: input {name!r} {what}{order}")
