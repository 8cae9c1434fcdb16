"""Keras's pooling: Max/AveragePooling1D/2D/3D and GlobalMax/GlobalAveragePooling1D/2D/3D (the 1-D average
masked)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnzoo.keras.arguments import channels_first, expect_variables, ints
from attnzoo.keras.code_lines import WIDTH
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.conv import padded, same_padding
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import dim_text, flags, rank, sizes
from attnzoo.keras.emit.draft import is_ref
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["Pool", "GlobalPool"]


_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVERAGE = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


class Pool(Node):
    """``MaxPooling1D/2D/3D`` and ``AveragePooling1D/2D/3D``; ``same`` padding as TensorFlow: max ignores the
    padding, average divides by the real elements of each window."""

    op = "pool"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self,
        *,
        rank: int,
        kind: str,
        pool_size: list[int],
        strides: list[int],
        padding: str = "valid",
        channels_first: bool = False,
    ) -> None:
        super().__init__()
        self.rank, self.kind, self.padding, self.channels_first = rank, kind, padding, channels_first
        self.pool_size, self.strides = list(pool_size), list(strides)

    def compute(self, x, mask):
        if not self.channels_first:
            x = x.movedim(-1, 1)
        pads: list[int] = []
        if self.padding == "same":
            for axis in reversed(range(self.rank)):
                pads += list(same_padding(x.shape[2 + axis], self.pool_size[axis], self.strides[axis], 1))
        if self.kind == "max":
            y = _MAX[self.rank](padded(x, pads, float("-inf")), self.pool_size, self.strides)
        elif all(isinstance(p, int) and p == 0 for p in pads):
            y = _AVERAGE[self.rank](x, self.pool_size, self.strides)
        else:  # the mean of the real elements of each window
            pool = _AVERAGE[self.rank]
            ones = padded(torch.ones_like(x[:1, :1]), pads)
            y = pool(padded(x, pads), self.pool_size, self.strides) / pool(ones, self.pool_size, self.strides)
        return y if self.channels_first else y.movedim(1, -1)


_POOLS = {
    "MaxPooling3D": (3, "max"),
    "AveragePooling3D": (3, "average"),
    "MaxPool3D": (3, "max"),
    "AvgPool3D": (3, "average"),
    "MaxPooling1D": (1, "max"),
    "MaxPooling2D": (2, "max"),
    "AveragePooling1D": (1, "average"),
    "AveragePooling2D": (2, "average"),
    "MaxPool1D": (1, "max"),
    "MaxPool2D": (2, "max"),
    "AvgPool1D": (1, "average"),
    "AvgPool2D": (2, "average"),
}


@keras_layer(*_POOLS)
def convert_pool(record, arrays, ctx):
    rank, kind = _POOLS[record.class_name]
    c = record.config
    expect_variables(arrays, 0, record.class_name)
    size = ints(c.get("pool_size", 2), rank, "pool_size")
    strides = c.get("strides")
    strides = size if strides is None else ints(strides, rank, "strides")
    padding = str(c.get("padding", "valid")).lower()
    if padding not in ("valid", "same"):
        raise Refused(f"padding {padding!r} is not supported")
    spec = {"op": "pool", "rank": rank, "kind": kind, "pool_size": size, "strides": strides, "padding": padding}
    spec["channels_first"] = channels_first(c)
    return Converted(spec, {})


class GlobalPool(Node):
    """``GlobalAverage/MaxPooling1D/2D/3D``; the 1-D average is masked (sum over kept steps / their count;
    Keras divides 0 by 0 for a sample with no kept step, attnzoo returns 0 there)."""

    op = "global_pool"

    def __init__(self, *, rank: int, kind: str, keepdims: bool = False, channels_first: bool = False) -> None:
        super().__init__()
        self.rank, self.kind, self.keepdims, self.channels_first = rank, kind, keepdims, channels_first

    def compute(self, x, mask):
        axes = list(range(2, 2 + self.rank)) if self.channels_first else list(range(1, 1 + self.rank))
        if self.kind == "max":
            return x.amax(dim=axes, keepdim=self.keepdims)
        if mask is not None and self.rank == 1:
            keep = mask.unsqueeze(1 if self.channels_first else 2)
            summed = torch.where(keep, x, torch.zeros_like(x)).sum(dim=axes, keepdim=self.keepdims)
            count = keep.to(x.dtype).sum(dim=axes, keepdim=self.keepdims)
            return summed / count.clamp(min=1)
        return x.mean(dim=axes, keepdim=self.keepdims)


_GLOBAL_POOLS = {
    "GlobalAveragePooling3D": (3, "average"),
    "GlobalMaxPooling3D": (3, "max"),
    "GlobalAvgPool3D": (3, "average"),
    "GlobalMaxPool3D": (3, "max"),
    "GlobalAveragePooling1D": (1, "average"),
    "GlobalAveragePooling2D": (2, "average"),
    "GlobalMaxPooling1D": (1, "max"),
    "GlobalMaxPooling2D": (2, "max"),
    "GlobalAvgPool1D": (1, "average"),
    "GlobalAvgPool2D": (2, "average"),
    "GlobalMaxPool1D": (1, "max"),
    "GlobalMaxPool2D": (2, "max"),
}


@keras_layer(*_GLOBAL_POOLS)
def convert_global_pool(record, arrays, ctx):
    rank, kind = _GLOBAL_POOLS[record.class_name]
    c = record.config
    expect_variables(arrays, 0, record.class_name)
    spec = {"op": "global_pool", "rank": rank, "kind": kind, "keepdims": bool(c.get("keepdims", False))}
    spec["channels_first"] = channels_first(c)
    notes = ["a sample with every step masked gives 0 here, NaN (0 / 0) in Keras"] if kind == "average" else []
    return Converted(spec, {}, notes)


# -- the torch forms (no mask comes out, as the nodes') -------------------------------------------------
@writes(Pool)
def write_pool(w: Writer, spec: dict[str, Any]) -> bool:
    """``MaxPooling`` / ``AveragePooling`` 1D/2D/3D: ``F.max_poolNd`` / ``F.avg_poolNd``. Keras's "same" at
    stride 1 with an odd window pads ``(k - 1) / 2`` on each side: torch's own padding, which max pooling
    never picks and average pooling leaves out of the count (``count_include_pad=False``), as Keras does;
    other "same" max pooling pads by the input's length with -inf (TensorFlow's, the extra one on the right).
    An average over "same" padding that may be uneven counts only the real entries: no torch padding does."""
    x = w.tensor()
    if x is None or not rank(spec) or spec.get("kind") not in ("max", "average") or not flags(spec, "channels_first"):
        return False
    n, k, s, padding = spec["rank"], spec.get("pool_size"), spec.get("strides"), spec.get("padding", "valid")
    if not sizes(k, n) or not sizes(s, n) or padding not in ("valid", "same"):
        return False
    first, average = spec.get("channels_first", False), spec["kind"] == "average"
    if padding == "same" and average and not _centred(k, s):
        return False
    h = x if first else f"{x}.movedim(-1, 1)"
    options = ""
    if padding == "same" and _centred(k, s):
        options = f", padding={literal([(v - 1) // 2 for v in k])}" + (", count_include_pad=False" if average else "")
    elif padding == "same":  # max pooling only
        pads = w.imports("attnzoo.keras.converters.conv", "conv_padding")
        w.assign(h)
        margins = f'{pads}({w.out}, "same", {literal(k)}, {literal(s)}, {literal([1] * n)})'
        h = f'F.pad({w.out}, {margins}, value=-float("inf"))'
    value = f"F.{'avg' if average else 'max'}_pool{n}d({h}, {literal(k)}, {literal(s)}{options})"
    w.assign(value + ("" if first else ".movedim(1, -1)"))
    return True


def _centred(kernel: list[int], strides: list[int]) -> bool:
    """Whether Keras's "same" pads each axis equally on both sides whatever the input's length: stride 1 and
    an odd window (``k - 1`` in all)."""
    return all(s == 1 and k % 2 == 1 for k, s in zip(kernel, strides, strict=True))


@writes(GlobalPool)
def write_global_pool(w: Writer, spec: dict[str, Any]) -> bool:
    """``GlobalPool``: a max or mean over the steps; the 1-D average with a mask is the sum over the kept
    steps over their count (at least 1), as the node computes it."""
    n, kind, x = spec.get("rank"), spec.get("kind"), w.tensor()
    keepdims, first = spec.get("keepdims", False), spec.get("channels_first", False)
    if n not in (1, 2, 3) or kind not in ("average", "max") or not isinstance(n, int) or x is None:
        return False
    if not isinstance(keepdims, bool) or not isinstance(first, bool):
        return False
    axes = list(range(2, 2 + n)) if first else list(range(1, 1 + n))
    dims = f"dim={dim_text(axes[0] if n == 1 else axes)}" + (", keepdim=True" if keepdims else "")
    masked = kind == "average" and n == 1 and (w.mask is not None or w.explicit is not None)
    if kind == "max":
        w.assign(f"{x}.amax({dims})")
    elif not masked:
        w.assign(f"{x}.mean({dims})")
    else:
        mask = w.mask
        if not (is_ref(w.explicit) or w.explicit is None) or not w.sure(mask):
            return False
        keep = w.let("keep", f"{mask}.unsqueeze({1 if first else 2})")
        w.assign(f"torch.where({keep}, {x}, torch.zeros_like({x})).sum({dims})")
        divided = f"{w.out} / {keep}.to({x}.dtype).sum({dims}).clamp(min=1)"
        if len(f"        {w.out} = {divided}") <= WIDTH:
            w.assign(divided)
        else:  # long names: the count on a line of its own, so each statement splits as ruff splits it
            count = w.let("count", f"{keep}.sum({dims})")
            w.assign(f"torch.div({w.out}, {count}.clamp(min=1))")
    return True
