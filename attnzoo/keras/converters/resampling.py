"""Keras's resampling, padding and cropping: UpSampling1D/2D/3D, ZeroPadding1D/2D/3D, Cropping1D/2D/3D.

None of them supports masking in Keras, so their output carries no mask.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from attnzoo.keras.arguments import channels_first, expect_variables, ints
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import flags, rank, sizes
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["UpSampling", "SpatialPad", "margins"]


class UpSampling(Node):
    """``UpSampling1D/2D/3D(size)``: each spatial axis repeated ``size`` times ([B, *spatial, C] ->
    [B, *spatial·size, C]); ``UpSampling2D(interpolation="bilinear")`` is a half-pixel bilinear resize
    (TensorFlow's ``tf.image.resize``, torch's ``align_corners=False``)."""

    op = "upsampling"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self, *, rank: int, size: list[int], interpolation: str = "nearest", channels_first: bool = False
    ) -> None:
        super().__init__()
        self.rank, self.size, self.interpolation = rank, [int(s) for s in size], interpolation
        self.channels_first = channels_first

    def compute(self, x, mask):
        first = 2 if self.channels_first else 1
        if self.interpolation == "nearest":
            for axis, factor in enumerate(self.size):
                if factor != 1:
                    x = x.repeat_interleave(factor, dim=first + axis)
            return x
        if not self.channels_first:
            x = x.movedim(-1, 1)
        y = F.interpolate(x, scale_factor=tuple(float(s) for s in self.size), mode="bilinear", align_corners=False)
        return y if self.channels_first else y.movedim(1, -1)


_UPSAMPLING = {"UpSampling1D": 1, "UpSampling2D": 2, "UpSampling3D": 3}


@keras_layer(*_UPSAMPLING)
def convert_upsampling(record, arrays, ctx):
    rank = _UPSAMPLING[record.class_name]
    c = record.config
    expect_variables(arrays, 0, record.class_name)
    size = ints(c.get("size", 2), rank, "size")
    if any(s < 1 for s in size):
        raise Refused(f"size {size} is not positive")
    interpolation = str(c.get("interpolation", "nearest"))
    if interpolation not in ("nearest", "bilinear") or (interpolation == "bilinear" and rank != 2):
        raise Refused(f"interpolation {interpolation!r} is not supported (nearest, and bilinear for UpSampling2D, are)")
    spec = {"op": "upsampling", "rank": rank, "size": size, "interpolation": interpolation}
    spec["channels_first"] = channels_first(c)
    return Converted(spec, {})


class SpatialPad(Node):
    """``ZeroPadding1D/2D/3D`` and ``CroppingND``: ``margins`` [[before, after], ...] per spatial axis,
    positive for zeros added, negative for elements cut ([B, *spatial, C] -> [B, *spatial', C])."""

    op = "spatial_pad"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, margins: list[list[int]], channels_first: bool = False) -> None:
        super().__init__()
        self.margins = [[int(a), int(b)] for a, b in margins]
        self.channels_first = channels_first

    def compute(self, x, mask):
        rank = len(self.margins)
        if x.dim() != rank + 2:
            raise ValueError(f"expects [batch, {rank} spatial axes, channels], got {list(x.shape)}")
        first = 2 if self.channels_first else 1
        for axis, (before, after) in enumerate(self.margins):
            length = x.shape[first + axis]
            if length + before + after < 1:
                raise ValueError(f"cannot cut {-before} + {-after} from spatial axis {axis + 1} of length {length}")
        pads: list[int] = [0, 0] * (0 if self.channels_first else 1)  # F.pad lists the last axis first
        for before, after in reversed(self.margins):
            pads += [before, after]
        return F.pad(x, pads)


def margins(value: Any, rank: int, what: str) -> list[list[int]]:
    """Keras's ``padding`` / ``cropping``: an int for every side, (before, after) for 1-D, and for 2-D and
    3-D one int (symmetric) or one (before, after) pair per axis."""
    if isinstance(value, int) and not isinstance(value, bool):
        pairs = [[value, value]] * rank
    elif rank == 1 and isinstance(value, (list, tuple)) and len(value) == 2:
        pairs = [list(value)]
    elif isinstance(value, (list, tuple)) and len(value) == rank:
        pairs = [[v, v] if isinstance(v, int) else list(v) for v in value]
    else:
        raise Refused(f"{what} {value!r} is not {rank} axis amount(s)")
    if not all(len(p) == 2 and all(isinstance(a, int) and a >= 0 for a in p) for p in pairs):
        raise Refused(f"{what} {value!r} is not made of non-negative ints")
    return pairs


_PADDING = {"ZeroPadding1D": 1, "ZeroPadding2D": 2, "ZeroPadding3D": 3}
_CROPPING = {"Cropping1D": 1, "Cropping2D": 2, "Cropping3D": 3}


@keras_layer(*_PADDING, *_CROPPING)
def convert_padding_and_cropping(record, arrays, ctx):
    c = record.config
    expect_variables(arrays, 0, record.class_name)
    if record.class_name in _PADDING:
        amounts = margins(c.get("padding", 1), _PADDING[record.class_name], "padding")
    else:
        amounts = [[-a, -b] for a, b in margins(c.get("cropping", 1), _CROPPING[record.class_name], "cropping")]
    return Converted({"op": "spatial_pad", "margins": amounts, "channels_first": channels_first(c)}, {})


# -- the torch forms (no mask comes out, as the nodes') -------------------------------------------------
@writes(SpatialPad)
def write_spatial_pad(w: Writer, spec: dict[str, Any]) -> bool:
    """``ZeroPadding1D/2D/3D``: ``F.pad`` of the margins (zeros), the last axis first, as the node pads;
    ``Cropping1D/2D/3D`` (every margin a cut, at most 0): the slice of what stays, as Keras itself crops."""
    x, first, margins = w.tensor(), spec.get("channels_first", False), spec.get("margins")
    if x is None or not isinstance(margins, list) or not 1 <= len(margins) <= 3 or not flags(spec, "channels_first"):
        return False
    if not all(sizes(pair, 2, least=-(2**62)) for pair in margins):
        return False
    if all(before <= 0 and after <= 0 for before, after in margins):
        kept = [
            (literal(-before) if before else "") + ":" + (literal(after) if after else "") for before, after in margins
        ]
        w.assign(f"{x}[{':, :' if first else ':'}, {', '.join(kept)}]")
    else:
        pads = [] if first else [0, 0]  # the channels, last in Keras's layout
        for before, after in reversed(margins):
            pads += [before, after]
        w.assign(f"F.pad({x}, {literal(pads)})")
    return True


@writes(UpSampling)
def write_upsampling(w: Writer, spec: dict[str, Any]) -> bool:
    """``UpSampling1D/2D/3D``: nearest repeats each entry ``size`` times along its axis
    (``repeat_interleave``); UpSampling2D's bilinear is ``F.interpolate`` at half-pixel centres, as the node."""
    x, first, interpolation = w.tensor(), spec.get("channels_first", False), spec.get("interpolation", "nearest")
    if x is None or not rank(spec) or not sizes(spec.get("size"), spec["rank"]) or not flags(spec, "channels_first"):
        return False
    if interpolation == "nearest":
        value = x
        for axis, factor in enumerate(spec["size"]):
            if factor != 1:
                value = f"{value}.repeat_interleave({literal(factor)}, dim={(2 if first else 1) + axis})"
        w.assign(value)
    elif interpolation == "bilinear" and spec["rank"] == 2:
        scale = literal(tuple(float(s) for s in spec["size"]))
        h = x if first else f"{x}.movedim(-1, 1)"
        value = f'F.interpolate({h}, scale_factor={scale}, mode="bilinear", align_corners=False)'
        w.assign(value + ("" if first else ".movedim(1, -1)"))
    else:
        return False
    return True
