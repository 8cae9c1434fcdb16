"""Keras's merge layers: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate and Dot, with the
masks Keras gives them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.emit.draft import is_ref
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, keras_layer

__all__ = ["Merge", "Concatenate", "Dot"]


def _ranked(xs: Sequence[Tensor]) -> list[Tensor]:
    """Keras's merge broadcasting: lower-rank inputs gain axes at position 1 until the ranks agree."""
    top = max(x.dim() for x in xs)
    out = []
    for x in xs:
        while x.dim() < top:
            x = x.unsqueeze(1)
        out.append(x)
    return out


class Merge(Node):
    """``Add``, ``Subtract``, ``Multiply``, ``Average``, ``Maximum``, ``Minimum``; the output mask is the OR
    of the input masks (None unless every input has one). Keras 3 (``keras3``) also masks the values of
    Multiply, Maximum and Minimum: a masked step of one input is the identity of the operation (1 for
    Multiply, the other input for Maximum / Minimum), and Multiply's output is 0 where every input is
    masked. Keras 2 computes them plainly. ``same_rank``: Keras built the layer for inputs of one rank (keras
    3's build_config says so), so no axes are inserted and the torch form is plain broadcasting."""

    op = "merge"
    supports_masking = True

    def __init__(self, *, mode: str, keras3: bool = True, same_rank: bool = False) -> None:
        super().__init__()
        self.mode, self.keras3, self.same_rank = mode, keras3, same_rank

    def forward(self, args, kwargs, masks):
        xs = _ranked(list(args[0]))
        ms = list(masks[0]) if isinstance(masks[0], (list, tuple)) else [None] * len(xs)
        every = bool(ms) and all(isinstance(m, Tensor) for m in ms)
        mask = None
        if every:
            mask = ms[0]
            for m in ms[1:]:
                mask = mask | m
        if self.keras3 and self.mode == "multiply":
            out, full = None, None
            for x, m in zip(xs, ms, strict=True):
                if isinstance(m, Tensor):
                    wide = m.unsqueeze(-1).expand_as(x)
                    x = torch.where(wide, x, torch.ones_like(x))
                    full = wide if full is None else full | wide
                out = x if out is None else out * x
            if every and full is not None:
                out = torch.where(full, out, torch.zeros_like(out))
            return [out], [mask]
        if self.keras3 and self.mode in ("maximum", "minimum"):
            fn = torch.maximum if self.mode == "maximum" else torch.minimum
            out = xs[0]
            running = ms[0].unsqueeze(-1).expand_as(out) if isinstance(ms[0], Tensor) else None
            for x, m in zip(xs[1:], ms[1:], strict=True):
                wide = m.unsqueeze(-1).expand_as(x) if isinstance(m, Tensor) else None
                if wide is not None:
                    x = torch.where(wide, x, out)
                if running is not None:
                    out = torch.where(running, out, x)
                running = running | wide if (running is not None and wide is not None) else None
                out = fn(out, x)
            return [out], [mask]
        out = xs[0]
        for x in xs[1:]:
            if self.mode in ("add", "average"):
                out = out + x
            elif self.mode == "subtract":
                out = out - x
            elif self.mode == "multiply":
                out = out * x
            elif self.mode == "maximum":
                out = torch.maximum(out, x)
            else:
                out = torch.minimum(out, x)
        if self.mode == "average":
            out = out / len(xs)
        return [out], [mask]


_MERGES = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Average": "average"}
_MERGES.update({"Maximum": "maximum", "Minimum": "minimum"})


@keras_layer(*_MERGES)
def convert_merge(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    spec = {"op": "merge", "mode": _MERGES[record.class_name], "keras3": ctx.major >= 3}
    if record.build_ranks is not None and len(set(record.build_ranks)) == 1:
        spec["same_rank"] = True
    return Converted(spec, {})


class Concatenate(Node):
    """``Concatenate(axis)``; the mask as Keras builds it: each input's mask broadcast to its shape (all
    True where it has none), concatenated along ``axis``, then ANY over the last axis."""

    op = "concatenate"
    supports_masking = True

    def __init__(self, *, axis: int = -1) -> None:
        super().__init__()
        self.axis = axis

    def forward(self, args, kwargs, masks):
        xs = list(args[0])
        out = torch.cat(xs, dim=self.axis)
        ms = list(masks[0]) if isinstance(masks[0], (list, tuple)) else [None] * len(xs)
        if all(m is None for m in ms):
            return [out], [None]
        full = []
        for x, m in zip(xs, ms, strict=True):
            if m is None:
                full.append(torch.ones_like(x, dtype=torch.bool))
            else:
                while m.dim() < x.dim():
                    m = m.unsqueeze(-1)
                full.append(m.expand_as(x))
        return [out], [torch.cat(full, dim=self.axis).any(dim=-1)]


@keras_layer("Concatenate")
def convert_concatenate(record, arrays, ctx):
    expect_variables(arrays, 0, "Concatenate")
    return Converted({"op": "concatenate", "axis": int(record.config.get("axis", -1))}, {})


class Dot(Node):
    """``Dot(axes, normalize)``: the batched dot product of two inputs over the given axes (after an L2
    normalisation along them when ``normalize``); no output mask."""

    op = "dot"

    def __init__(self, *, axes: list[int], normalize: bool = False) -> None:
        super().__init__()
        self.axes, self.normalize = list(axes), normalize

    def forward(self, args, kwargs, masks):
        a, b = args[0][0], args[0][1]
        ax_a, ax_b = self.axes[0] % a.dim(), self.axes[1] % b.dim()
        if self.normalize:
            a = F.normalize(a, dim=ax_a, eps=1e-12)
            b = F.normalize(b, dim=ax_b, eps=1e-12)
        # move the contracted axis last in a and first (after the batch) in b, then a batched matmul
        a2 = a.movedim(ax_a, -1)
        b2 = b.movedim(ax_b, 1)
        a_rest, b_rest = a2.shape[1:-1], b2.shape[2:]
        out = torch.bmm(a2.reshape(a.shape[0], -1, a2.shape[-1]), b2.reshape(b.shape[0], b2.shape[1], -1))
        out = out.reshape(a.shape[0], *a_rest, *b_rest)
        if out.dim() == 1:
            out = out.unsqueeze(-1)
        return [out], [None]


@keras_layer("Dot")
def convert_dot(record, arrays, ctx):
    expect_variables(arrays, 0, "Dot")
    axes = record.config.get("axes", -1)
    axes = [axes, axes] if isinstance(axes, int) else list(axes)
    return Converted({"op": "dot", "axes": axes, "normalize": bool(record.config.get("normalize", False))}, {})


# -- the torch form -------------------------------------------------------------------------------------
_INFIX = {"add": " + ", "subtract": " - ", "multiply": " * ", "average": " + "}


@writes(Merge)
def write_merge(w: Writer, spec: dict[str, Any]) -> bool:
    """``a + b``, ``a - b``, ``a * b``, ``(a + b) / 2``, ``torch.maximum(a, b)``, ``torch.minimum(a, b)`` where
    Keras built the layer for inputs of one rank (``same_rank``: torch's broadcasting is Keras's; at lower
    ranks the node inserts axes, and stays); the output mask is the OR of the inputs' masks, None unless each
    has one, as the node's. keras 3's Multiply, Maximum and Minimum of a masked input read the mask (the node
    stays), and so does a merge of a mask that may hold None when the code runs."""
    mode, found = spec.get("mode"), _masked_list(w)
    if found is None or spec.get("same_rank") is not True or mode not in (*_INFIX, "maximum", "minimum"):
        return False
    names, masks = found
    if len(names) < 2 or not all(m is None or w.sure(m) for m in masks):
        return False
    if any(m is not None for m in masks) and spec.get("keras3", True) and mode in ("multiply", "maximum", "minimum"):
        return False
    if mode in _INFIX:
        expression = _INFIX[mode].join(names)
        if mode == "average":
            expression = f"({expression}) / {literal(len(names))}"
    else:
        expression = names[0]
        for name in names[1:]:
            expression = f"torch.{mode}({expression}, {name})"
    w.assign(expression)
    kept = [m for m in masks if m is not None]
    if len(kept) < len(masks):
        w.mask_is(None)
        return True
    either = kept[0]
    for mask in kept[1:]:
        either = f"torch.logical_or({either}, {mask})"
    w.mask_from(either)
    return True


@writes(Concatenate)
def write_concatenate(w: Writer, spec: dict[str, Any]) -> bool:
    """``torch.cat``; the mask as Keras builds it (each input's mask widened to the input, all True where it
    has none, concatenated along the axis, then any over the last axis), where every mask surely holds a
    tensor (a node call's output mask may be None: the node stays)."""
    axis, found = spec.get("axis", -1), _masked_list(w)
    if found is None or not plain({0: axis}, int):
        return False
    names, masks = found
    if not all(m is None or w.sure(m) for m in masks):
        return False
    w.assign(f"torch.cat([{', '.join(names)}], dim={literal(axis)})")
    if all(m is None for m in masks):
        w.mask_is(None)
        return True
    wide = [
        f"torch.ones_like({x}, dtype=torch.bool)"
        if m is None
        else f"{m}.reshape({m}.shape + (1,) * ({x}.dim() - {m}.dim())).expand_as({x})"
        for x, m in zip(names, masks, strict=True)
    ]
    w.mask_from(f"torch.cat([{', '.join(wide)}], dim={literal(axis)}).any(dim=-1)")
    return True


def _masked_list(w: Writer) -> tuple[list[str], list[str | None]] | None:
    """The tensors (the call's one argument, a list of them) and the masks the node gets for them (each
    one's, or all None where the node gets no list of masks), or None where the call is not that."""
    args = w.args
    if len(args) != 1 or not isinstance(args[0], list) or not args[0] or not all(is_ref(a) for a in args[0]):
        return None
    names = [w.value(a) for a in args[0]]
    masks = [w.mask_of(name) for name in names]
    if w.explicit is not None:  # the call's mask= in the list's place, resolved as the graph resolves it
        explicit = w.explicit
        if not isinstance(explicit, list):
            return names, [None] * len(names)
        if len(explicit) != len(names) or not all(m is None or is_ref(m) for m in explicit):
            return None
        masks = [None if m is None else w.value(m) for m in explicit]
    return names, masks
