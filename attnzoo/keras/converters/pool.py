"""Keras's pooling: Max/AveragePooling1D/2D/3D and GlobalMax/GlobalAveragePooling1D/2D/3D (the 1-D average
masked)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnzoo.keras.arguments import channels_first, expect_variables, ints
from attnzoo.keras.converters.conv import padded, same_padding
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["Pool", "GlobalPool"]


_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVERAGE = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


class Pool(Node):
    """``MaxPooling1D/2D/3D`` and ``AveragePooling1D/2D/3D``; ``same`` padding as TensorFlow: max ignores the
    padding, average divides by the real elements of each window."""

    op = "pool"

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
