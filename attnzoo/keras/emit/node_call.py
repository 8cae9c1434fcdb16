"""The node call: a layer with no torch form (or a call its ``write`` declines) is its attnzoo node class,
imported by name and declared with its arguments as literals. A class that keeps the node's own ``forward``,
called with one tensor, is called as a torch layer is: ``y = layers.x(x)`` (``mask=x_mask`` where the tensor
has one); any other through :meth:`Node.keras_call <attnzoo.keras.nodes.Node.keras_call>`, typed:
``out, out_mask = layers.x.keras_call(a, b, input_mask=(a_mask, b_mask), padding_mask=p)``."""

from __future__ import annotations

import inspect
from typing import Any

from attnzoo.errors import ConfigError
from attnzoo.keras.code_lines import WIDTH
from attnzoo.keras.codegen import identifier, literal
from attnzoo.keras.emit.draft import PLAIN_NAME, Draft, is_ref, layer_reference, plain_keyword
from attnzoo.keras.masks import CallMasks, first_masks, kwargs_for_node
from attnzoo.keras.nodes import NODES, Node

__all__ = [
    "node_call",
    "rule_mask",
    "keras_of",
    "constructor_arguments",
    "UNKNOWN",
    "KERAS_CALL_OWN",
    "DECODING_CACHE",
]

# Node.keras_call's own parameters: a call with a Keras keyword argument of one of these names is written
# with the node protocol
KERAS_CALL_OWN = frozenset({"input_mask", "outputs"})

UNKNOWN = object()  # a node's output mask that only running it tells

# forward's keyword argument for the decoding cache (a model with nodes that decode), and the keyword each such
# node call is given it by: ``layers.x.keras_call(h, ..., cache=cache)``
DECODING_CACHE = "cache"


class _Code(str):
    """Text this module wrote as code (the masks of keyword tensors), as opposed to the graph's data, which
    is only ever written as a literal: a file's kwarg of the same name stays data."""


def rule_mask(cls: type, mask: Any) -> Any:
    """The output mask :class:`Node`'s own ``forward`` and ``output_mask`` give where the first argument's
    mask is ``mask`` (a variable, None, or a list): ``mask`` where the class supports masking and it is a
    variable, else None; :data:`UNKNOWN` for a class of its own rules."""
    if cls.forward is not Node.forward or cls.output_mask is not Node.output_mask:
        return UNKNOWN
    return mask if cls.supports_masking and isinstance(mask, str) else None


def _masks_text(masks: Any) -> str:
    if isinstance(masks, list):
        return "[" + ", ".join(_masks_text(m) for m in masks) + "]"
    return "None" if masks is None else str(masks)


def node_call(d: Draft, key: str, spec: dict[str, Any], call: dict[str, Any], plan: CallMasks) -> None:
    """Write ``call`` as a call of the node class of ``spec`` (declared as ``layers[key]``)."""
    kwargs = call["kwargs"]
    # the nodes read train/eval from the module, as Keras overrides a recorded training= by the model's call
    given = {k: v for k, v in kwargs.items() if k not in ("mask", "training")}
    if isinstance(kwargs.get("mask"), (dict, list)):
        given["mask"] = kwargs["mask"]
    keyword_masks = {k: d.mask_of.get(d.expression(kwargs[k])) for k in plan.keyword}
    masks_text = _Code("{" + ", ".join(f"{literal(k)}: {v}" for k, v in keyword_masks.items()) + "}")
    # a keyword tensor's mask that is None everywhere is as good as none given
    some = any(m is not None for m in keyword_masks.values())
    node_kwargs = kwargs_for_node(plan, given, masks_text if some else {})
    cls = NODES[spec["op"]]
    if d.decodes and (cls.decodes or cls.reads_positions) and call["id"] not in d.encoder:
        if DECODING_CACHE in node_kwargs:
            raise ConfigError(
                f"layer {keras_of(spec).get('name', key)!r} is called with a keyword argument "
                f"{DECODING_CACHE!r}, the name attnzoo passes its decoding cache by; rename that argument"
            )
        node_kwargs[DECODING_CACHE] = _Code(DECODING_CACHE)
    d.uses(cls.__module__, cls.__name__)
    declaration = f"self.layers[{literal(key)}] = {cls.__name__}({constructor_arguments(d, cls, spec)})"
    if declaration not in d.init:  # a shared layer, called more than once, is declared once
        d.init.append(declaration)
    arg_masks = first_masks(plan, d.mask(call["args"]), d.expression)
    if _typed_call(d, key, spec, cls, call, arg_masks):
        return
    outputs = d.outputs(call["id"], d.counts.get(call["id"], 1), keras_of(spec).get("name", key))
    mask_names = [d.mask_variable(name) for name in outputs]
    d.unpacked.update(outputs)
    d.unsure.update(mask_names)  # unless _known_mask says which it is
    if set(node_kwargs) & KERAS_CALL_OWN or not isinstance(call["args"], list):  # a Keras keyword keras_call
        # takes itself (a layer's own ``outputs=``), or arguments that are not a list: the node protocol
        callee = layer_reference(key)
        arguments = f"{d.expression(call['args'])}, {_kwargs_text(d, node_kwargs)}, {_masks_text(arg_masks)}"
        outputs_text, masks_text = ", ".join([*outputs, "*_"]), ", ".join([*mask_names, "*_"])
        d.body.append(f"({outputs_text}), ({masks_text}) = {callee}({arguments})")
    else:
        _keras_call(d, key, call["args"], arg_masks, node_kwargs, outputs, mask_names)
    known = _known_mask(d, cls, arg_masks)
    for name, mask_name in zip(outputs, mask_names, strict=True):
        d.mask_of[name] = mask_name if known is UNKNOWN else known
    for cleared in plan.clears:
        d.mask_of[d.expression(cleared)] = None


def _typed_call(d: Draft, key: str, spec: dict[str, Any], cls: type, call: dict[str, Any], masks: list[Any]) -> bool:
    """``y = layers.x(x)``, or ``layers.x(x, mask=x_mask)`` where the tensor has a mask the class reads
    (``reads_mask``), for a node class that keeps :class:`Node`'s ``forward`` and ``output_mask`` called with
    one tensor and no other argument (its typed call, the output alone); the output's mask is the class's
    rule (:func:`rule_mask`). False: the call is not that, and is written with the node protocol."""
    if cls.forward is not Node.forward or cls.output_mask is not Node.output_mask:
        return False
    args, kwargs = call["args"], call["kwargs"]
    if len(args) != 1 or not is_ref(args[0]) or d.counts.get(call["id"], 1) != 1:
        return False
    if set(kwargs) - {"mask", "training"} or not (kwargs.get("mask") is None or is_ref(kwargs["mask"])):
        return False
    mask = masks[0] if masks else None
    if mask is not None and not isinstance(mask, str):
        return False
    x = d.expression(args[0])
    (out,) = d.outputs(call["id"], 1, keras_of(spec).get("name", key))
    given = "" if mask is None or not cls.reads_mask else f", mask={mask}"  # no mask where compute reads none
    d.body.append(f"{out} = {layer_reference(key)}({x}{given})")
    d.mask_of[out] = rule_mask(cls, mask)
    return True


def _known_mask(d: Draft, cls: type, arg_masks: list[Any]) -> Any:
    """The mask variable (or None) a node's output mask is whenever the code runs (:func:`rule_mask`), where
    that is sure: a mask variable a node call set may hold None (:data:`UNKNOWN`: the call's own output)."""
    known = rule_mask(cls, arg_masks[0] if arg_masks else None)
    return known if known is None or known is UNKNOWN or d.sure(known) else UNKNOWN


def keras_of(spec: dict[str, Any]) -> dict[str, Any]:
    """What the graph keeps of the Keras layer (its name and class), or nothing where it is not a mapping."""
    keras = spec.get("keras")
    return keras if isinstance(keras, dict) else {}


def constructor_arguments(d: Draft, cls: type, spec: dict[str, Any]) -> str:
    """A node's constructor arguments, ``key=literal``; an inner layer of a wrapper (``cls.layer_arguments``)
    as its own class's constructor; a key that is not a plain name (a hand-edited config) goes in a
    ``**{...}`` literal, so no key of the file is ever written as code. ``cls`` may be a torch module that
    takes a node's arguments (no inner layers, no dict of settings)."""
    defaults = _defaults(cls)
    items = [(k, v) for k, v in spec.items() if k not in ("op", "keras") and not _same(defaults.get(k, _NONE), v)]
    options, inner = getattr(cls, "options_argument", None), getattr(cls, "layer_arguments", ())
    if options is not None and _as_keywords(cls, spec.get(options)):  # its entries as keyword arguments
        items = [(k, v) for k, v in items if k != options] + list(spec[options].items())
    written = [
        f"{k}={_inner_layer(d, v) if k in inner else literal(v)}"
        for k, v in items
        if isinstance(k, str) and PLAIN_NAME.fullmatch(k)
    ]
    other = {k: v for k, v in items if not (isinstance(k, str) and PLAIN_NAME.fullmatch(k))}
    return ", ".join(written + ([f"**{literal(other)}"] if other else []))


_NONE = object()  # no default


def _as_keywords(cls: type, options: Any) -> bool:
    """Whether a node's dict of settings can be written as keyword arguments: plain names only, none of
    them private, a keyword or one of the constructor's own parameters."""
    if not isinstance(options, dict):
        return False
    own = set(inspect.signature(cls.__init__).parameters)
    return all(plain_keyword(k) for k in options) and not (own & set(options))


def _defaults(cls: type) -> dict[str, Any]:
    """The constructor's keyword defaults: an argument that equals its default is not written."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _same(default: Any, value: Any) -> bool:
    """``value`` is the default itself: equal and of the same type (``1`` is not ``True``, nor ``1.0``)."""
    return default is not _NONE and type(default) is type(value) and default == value


def _inner_layer(d: Draft, spec: Any) -> str:
    """A wrapper's inner layer, ``Recurrent(cell="lstm", ...)``: the class is the one its op names (never text
    from the file), its arguments written as a node's are; data that names no node stays a literal."""
    op = spec.get("op") if isinstance(spec, dict) else None
    if not isinstance(op, str) or op not in NODES:
        return literal(spec)
    cls = NODES[op]
    d.uses(cls.__module__, cls.__name__)
    return f"{cls.__name__}({constructor_arguments(d, cls, spec)})"


def _keras_call(
    d: Draft,
    key: str,
    args: list[Any],
    masks: list[Any],
    kwargs: dict[str, Any],
    outputs: list[str],
    mask_names: list[str],
) -> None:
    """``out, out_mask = layers.x.keras_call(args..., input_mask=..., keyword=...)`` (two tuples for more
    than one output read)."""
    reference = layer_reference(key)
    if len(reference) > 40:  # a long key (a nested model's path) is bound first, as Writer.declare binds it:
        # ruff would split the call's line at the key's brackets
        bound = identifier("layer", d.used)
        d.body.append(f"{bound} = {reference}")
        reference = bound
    callee = f"{reference}.keras_call"
    arguments = _call_arguments(d, args, masks, kwargs, len(outputs))
    if len(outputs) == 1:
        targets = f"{outputs[0]}, {mask_names[0]}"
    else:
        targets = f"({', '.join(outputs)}), ({', '.join(mask_names)})"
    if len(f"        {targets} = {callee}(") <= WIDTH:
        d.body.append(f"{targets} = {callee}({arguments})")
    else:  # long names: what the call returns first, then a line per tensor, so no line is longer than ruff's
        returned = identifier("returned", d.used)
        d.returned.add(returned)
        d.body.append(f"{returned} = {callee}({arguments})")
        for i, (name, mask_name) in enumerate(zip(outputs, mask_names, strict=True)):
            at = "" if len(outputs) == 1 else f"[{i}]"
            d.body += [f"{name} = {returned}[0]{at}", f"{mask_name} = {returned}[1]{at}"]


def _kwargs_text(d: Draft, kwargs: dict[str, Any]) -> str:
    parts = []
    for k, v in kwargs.items():
        parts.append(f"{literal(k)}: {v if isinstance(v, _Code) else d.expression(v)}")
    return "{" + ", ".join(parts) + "}"


def _call_arguments(d: Draft, args: list[Any], masks: list[Any], kwargs: dict[str, Any], outputs: int) -> str:
    """The arguments of :meth:`Node.keras_call <attnzoo.keras.nodes.Node.keras_call>`: the call's arguments,
        ``input_mask=`` where one of their masks is not None (one argument's mask, or a tuple of one per
        argument), the keyword arguments (a key that is not a plain name in a ``**{...}`` literal, so no key of
        the file is ever written as code), and ``outputs=`` where more than one is read. (A keyword of
    keras_call's own names never reaches here: :data:`KERAS_CALL_OWN`.)"""
    parts = [d.expression(a) for a in args]
    if any(text != "None" for text in map(_masks_text, _leaves(masks))):
        given = _masks_text(masks[0]) if len(masks) == 1 else "(" + ", ".join(map(_masks_text, masks)) + ")"
        parts.append(f"input_mask={given}")
    plain, other = [], []
    for k, v in kwargs.items():
        value = v if isinstance(v, _Code) else d.expression(v)
        if plain_keyword(k):
            plain.append(f"{k}={value}")
        else:
            other.append(f"{literal(k)}: {value}")
    parts += plain + ([f"**{{{', '.join(other)}}}"] if other else [])
    return ", ".join(parts + ([f"outputs={outputs}"] if outputs > 1 else []))


def _leaves(value: Any) -> list[Any]:
    return [leaf for item in value for leaf in _leaves(item)] if isinstance(value, list) else [value]
