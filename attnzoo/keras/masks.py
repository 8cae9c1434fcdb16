"""Keras's mask rules, written once: which mask each call of a converted graph hands its layer, which
masks the call takes from its inputs, and which of them the layer reads.

Keras keeps a mask beside a tensor (``_keras_mask``); a converted graph keeps it beside each value. For
one call (a layer applied to tensors), :func:`call_masks` reads the rules off the call's data, before
anything runs, as a :class:`CallMasks`:

* the first argument's mask is the one its layer gets, unless the call passes ``mask=`` explicitly, which
  takes its place (``explicit``);
* tensors passed by keyword bring their masks along as ``kwarg_masks`` (Keras 2's MultiHeadAttention
  ``value=``, ``key=``; ``keyword``);
* keras 3 fills a layer's ``mask`` argument only when the call has one tensor argument (``CallSpec``): an
  RNN given ``initial_state`` reads no mask, while its output still carries the input's (``implicit``
  False);
* keras 3's MultiHeadAttention (and the keras-hub blocks built on it) deletes the masks of the tensors it
  is called on: later calls on them see none (``clears``; a node says it does so with its
  ``clears_input_masks`` attribute).

A converted graph runs one way, as the module :mod:`attnzoo.keras.emit` writes: the model makes each
call's plan once (:class:`~attnzoo.keras.model.KerasModel`'s ``mask_plans``) and the emitter applies it on
the names of the emitted code, so ``forward`` and :meth:`~attnzoo.keras.model.KerasModel.trace` (the same
emitted code, returning every call's outputs) follow the same plan. A node reads what it was given through
:func:`layer_mask` and passes it on to inner layers through :func:`passed_on`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

__all__ = [
    "CallMasks",
    "call_masks",
    "kwargs_for_node",
    "first_masks",
    "layer_mask",
    "reads_mask",
    "passed_on",
    "refs_in",
]

_NO_MASK = "implicit_mask"  # the keyword (False) by which a node learns that keras 3 handed its layer no mask


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "ref" in value


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict) and not _is_ref(value):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def refs_in(value: Any) -> list[dict[str, Any]]:
    """Every ``{"ref": [call, index]}`` inside a call's data (nested lists and dicts), in order."""
    return [leaf for leaf in _leaves(value) if _is_ref(leaf)]


def _holds_tensors(value: Any) -> bool:
    """Whether keras 3 counts an argument as a tensor argument: a tensor, or a non-empty structure whose
    every leaf is a tensor or None (``keras.src.ops.operation``'s ``CallSpec``)."""
    if _is_ref(value):
        return True
    if not isinstance(value, (list, tuple, dict)) or not value:
        return False
    return all(_is_ref(v) or v is None for v in _leaves(value))


@dataclass(frozen=True)
class CallMasks:
    """The mask rules of one call (see the module docstring), over the call's data (``{"ref": ...}``)."""

    explicit: Any  # the call's own ``mask=`` (a ref, or a list of refs and None), taking the first mask's place
    keyword: tuple[str, ...]  # keyword arguments holding a tensor, whose masks go to the node as kwarg_masks
    implicit: bool  # False: keras 3 hands the layer no mask (the call has several tensor arguments)
    clears: tuple[Any, ...]  # the inputs (refs) whose masks the call deletes


def call_masks(call: dict[str, Any], node: Any, keras3: bool) -> CallMasks:
    """The rules of ``call`` (a graph call: ``args``, ``kwargs``, with refs where tensors go), run by
    ``node`` (None for a pass-through: a nested model's inputs or outputs)."""
    args, kwargs = call["args"], call["kwargs"]
    given = kwargs.get("mask")
    explicit = given if _is_ref(given) or (isinstance(given, list) and any(_is_ref(m) for m in given)) else None
    keyword = tuple(k for k, v in kwargs.items() if k != "mask" and _is_ref(v))
    tensor_arguments = sum(_holds_tensors(v) for v in args) + sum(
        _holds_tensors(v) for k, v in kwargs.items() if k != "mask"
    )
    implicit = not (keras3 and explicit is None and tensor_arguments > 1)
    clears: tuple[Any, ...] = ()
    if node is not None and getattr(node, "clears_input_masks", False):
        inputs = [*(args[:3] if isinstance(args, list) else []), kwargs.get("value"), kwargs.get("key")]
        clears = tuple(v for v in inputs if _is_ref(v))
    return CallMasks(explicit, keyword, implicit, clears)


def first_masks(plan: CallMasks, masks: list[Any], resolve: Callable[[Any], Any]) -> list[Any]:
    """The masks of the call's arguments as its node gets them: the explicit mask (``resolve``\\ d: a tensor,
    or a name in emitted code) in the first argument's place."""
    if plan.explicit is None:
        return masks
    return [resolve(plan.explicit), *masks[1:]]


def kwargs_for_node(plan: CallMasks, kwargs: dict[str, Any], keyword_masks: Any) -> dict[str, Any]:
    """``kwargs`` as the node gets them: the masks of its tensor keywords (``keyword_masks``: by keyword, or
    the text of that dict in emitted code; empty: none) as ``kwarg_masks``, and the keras 3 no-mask flag
    where the plan says so."""
    out = dict(kwargs)
    if keyword_masks:
        out["kwarg_masks"] = keyword_masks
    if not plan.implicit:
        out[_NO_MASK] = False
    return out


def reads_mask(kwargs: dict[str, Any]) -> bool:
    """Whether the layer a node runs gets a mask at all on this call (keras 3 hands none to a call with
    several tensor arguments)."""
    return kwargs.get(_NO_MASK) is not False


def layer_mask(kwargs: dict[str, Any], mask: Any) -> tuple[Tensor | None, Tensor | None]:
    """``(the mask the layer reads, the mask its output carries)`` for a node whose first argument has
    ``mask``: an explicit ``mask=`` tensor takes its place; keras 3 may hand the layer none, but the output
    still carries it."""
    explicit = kwargs.get("mask")
    if isinstance(explicit, Tensor):
        mask = explicit
    carried = mask if isinstance(mask, Tensor) else None
    return (carried if reads_mask(kwargs) else None), carried


def passed_on(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The mask keywords a wrapper (Bidirectional) passes to the layers it runs, as it was given them."""
    return {"mask": kwargs.get("mask"), _NO_MASK: kwargs.get(_NO_MASK)}
