"""Keras's numeric preprocessing layers inside a model: Rescaling, Normalization, CenterCrop, Resizing (the
random augmentation layers are in :mod:`attnzoo.keras.converters.augmentation`).

Rescaling's scale and offset are its config's numbers (the emitted code writes them as literals);
Normalization's mean and variance (adapted ones are the layer's variables; given ones are in the config).
The text layers (TextVectorization and the lookups) are in :mod:`attnzoo.keras.converters.text`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import flags, plain
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.torch_layers.preprocessing import (
    KerasNormalization,
    keras_center_crop,
    keras_normalize,
    keras_resize,
)

__all__ = ["Rescaling", "Normalization", "CenterCrop", "Resizing", "config_array"]

_TORCH_LAYERS = "attnzoo.keras.torch_layers"  # where the emitted module imports a torch form from
_RESIZE_OPTIONS = {"interpolation": "bilinear", "crop_to_aspect_ratio": False, "channels_first": False}


def config_array(value: Any, what: str) -> np.ndarray:
    """A number, a (nested) list, or keras 3's serialised numpy array (``{"class_name": "__numpy__"}``)
    from a layer's config, as float32."""
    if isinstance(value, dict) and value.get("class_name") == "__numpy__":
        value = value.get("config", {}).get("value")
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise Refused(f"{what} {str(value)[:60]!r} is not a number or an array of numbers") from None
    if array.dtype == object or not np.isfinite(array).all():
        raise Refused(f"{what} {str(value)[:60]!r} is not an array of finite numbers")
    return array


class Rescaling(Node):
    """``Rescaling(scale, offset)``: ``x · scale + offset`` in the input's floating dtype (a bfloat16 model's
    bfloat16), integer images in float32 (``torch.result_type(x, 1.0)``: Keras casts to the layer's dtype); a
    scale or offset given per channel broadcasts over the last axis. The mask passes."""

    op = "rescaling"
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(self, *, scale: Any = 1.0, offset: Any = 0.0) -> None:
        super().__init__()
        # the config's numbers, not weights: the emitted code writes them as literals (write_rescaling), so
        # the state dict holds nothing; a folder saved while it held them is checked against them (constants)
        self.scale, self.offset = scale, offset

    def constants(self) -> dict[str, Tensor]:
        return {
            "scale": torch.tensor(self.scale, dtype=torch.float32),
            "offset": torch.tensor(self.offset, dtype=torch.float32),
        }

    def compute(self, x, mask):
        dtype = torch.result_type(x, 1.0)
        constants = {k: v.to(x.device, dtype) for k, v in self.constants().items()}
        return x.to(dtype) * constants["scale"] + constants["offset"]


@keras_layer("Rescaling")
def convert_rescaling(record, arrays, ctx):
    expect_variables(arrays, 0, "Rescaling")
    c = record.config
    scale, offset = config_array(c.get("scale", 1.0), "scale"), config_array(c.get("offset", 0.0), "offset")
    spec = {"op": "rescaling", "scale": scale.tolist(), "offset": offset.tolist()}
    return Converted(spec, {})


def _constant(value: Any, x: str) -> str | None:
    """A Rescaling constant from the spec as code: a plain number as itself (torch computes a Python number with
    an integer tensor in float32 and with a floating one in its dtype, as the node computes), a list of numbers
    per channel as ``torch.tensor([...], device=x.device, dtype=torch.result_type(x, 1.0))``; None for anything
    else (a nested list, a hand-edited value)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return literal(float(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        numbers = literal([float(v) for v in value])
        return f"torch.tensor({numbers}, device={x}.device, dtype=torch.result_type({x}, 1.0))"
    return None


@writes(Rescaling)
def write_rescaling(w: Writer, spec: dict[str, Any]) -> bool:
    """``Rescaling``: ``x * scale + offset`` with the spec's constants, the node's arithmetic (integer images in
    float32, a floating input in its dtype; an offset of 0 is left out: adding 0.0 changes no value, only a -0.0's
    sign); the mask passes, as the node's."""
    x = w.tensor()
    if x is None:
        return False
    scale, offset = _constant(spec.get("scale", 1.0), x), _constant(spec.get("offset", 0.0), x)
    if scale is None or offset is None:
        return False
    expression = f"{x} * {scale}"
    w.assign(expression if offset == "0.0" else f"{expression} + {offset}")
    return True


class Normalization(Node):
    """``Normalization(axis, invert)``: ``(x - mean) / max(sqrt(variance), 1e-7)`` (``invert``:
    ``mean + x · max(sqrt(variance), 1e-7)``), ``mean`` and ``variance`` of shape ``stats_shape`` laid
    along the kept ``axis`` (Keras's broadcast); the mask passes."""

    op = "normalization"
    reads_mask = False  # compute never reads the mask: the emitted call passes none
    supports_masking = True

    def __init__(self, *, axis: list[int], stats_shape: list[int], invert: bool = False) -> None:
        super().__init__()
        self.axis, self.invert = [int(a) for a in axis], invert
        self.register_buffer("mean", torch.zeros(stats_shape))
        self.register_buffer("variance", torch.ones(stats_shape))

    def compute(self, x, mask):
        return keras_normalize(x, self.mean, self.variance, self.axis, self.invert)


@writes(Normalization)
def write_normalization(w: Writer, spec: dict[str, Any]) -> bool:
    """``Normalization``: :class:`~attnzoo.keras.torch_layers.KerasNormalization`, a torch module holding
    the node's ``mean`` and ``variance`` buffers; the mask passes, as the node's."""
    x = w.tensor()
    if x is None:
        return False
    layer = w.declare(w.construct(_TORCH_LAYERS, KerasNormalization, spec))
    w.assign(f"{layer}({x})")
    return True


@keras_layer("Normalization")
def convert_normalization(record, arrays, ctx):
    c = record.config
    axis = c.get("axis", -1)
    axis = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    if not all(isinstance(a, int) for a in axis):
        raise Refused(f"axis {c.get('axis')!r} is not a list of ints")
    if c.get("mean") is not None:  # given in the config: no variables
        expect_variables(arrays, 0, "Normalization with mean and variance in its config")
        mean, variance = config_array(c["mean"], "mean"), config_array(c.get("variance"), "variance")
        notes = ["mean and variance from the config"]
    else:  # adapted: mean, variance and count are the layer's variables
        expect_variables(arrays, 3, "an adapted Normalization (mean, variance, count)")
        mean, variance = arrays[0].astype(np.float32), arrays[1].astype(np.float32)
        notes = ["the adapted mean and variance"]
    if mean.shape != variance.shape or mean.ndim > len(axis):
        raise Refused(f"mean {list(mean.shape)} and variance {list(variance.shape)} do not fit axis {axis}")
    if (variance < 0).any():
        raise Refused("a variance is negative")
    spec = {"op": "normalization", "axis": axis, "stats_shape": list(mean.shape), "invert": bool(c.get("invert"))}
    return Converted(spec, {"mean": as_tensor(mean), "variance": as_tensor(variance)}, notes)


class CenterCrop(Node):
    """``CenterCrop(height, width)`` of [B, H, W, C] images (channels_first: [B, C, H, W]): the centred
    window, ``(H - height) // 2`` from the top; an image smaller than the target on either side is
    Keras's ``smart_resize`` instead (the largest centred window of the target's aspect ratio, resized
    bilinearly, half-pixel)."""

    op = "center_crop"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, height: int, width: int, channels_first: bool = False) -> None:
        super().__init__()
        self.height, self.width, self.channels_first = int(height), int(width), channels_first

    def compute(self, x, mask):
        return keras_center_crop(x, self.height, self.width, channels_first=self.channels_first)


@writes(CenterCrop)
def write_center_crop(w: Writer, spec: dict[str, Any]) -> bool:
    """``CenterCrop``: :func:`~attnzoo.keras.torch_layers.keras_center_crop` (a slice, or Keras's resize of
    an image smaller than the target), declaring nothing; no mask, as the node's."""
    x = w.tensor()
    if x is None or not plain(spec, int, "height", "width") or not flags(spec, "channels_first"):
        return False
    crop = w.imports(_TORCH_LAYERS, "keras_center_crop")
    first = ", channels_first=True" if spec.get("channels_first") else ""
    w.assign(f"{crop}({x}, {literal(spec['height'])}, {literal(spec['width'])}{first})")
    return True


@keras_layer("CenterCrop")
def convert_center_crop(record, arrays, ctx):
    expect_variables(arrays, 0, "CenterCrop")
    c = record.config
    height, width = c.get("height"), c.get("width")
    if not all(isinstance(v, int) and v > 0 for v in (height, width)):
        raise Refused(f"height {height!r} and width {width!r} are not positive ints")
    first = c.get("data_format", "channels_last") == "channels_first"
    return Converted({"op": "center_crop", "height": height, "width": width, "channels_first": first}, {})


class Resizing(Node):
    """``Resizing(height, width, interpolation)`` of [B, H, W, C] images: ``bilinear`` (half-pixel, no
    antialiasing) or ``nearest`` (half-pixel: torch's ``nearest-exact``), after cutting the centred window
    of the target's aspect ratio with ``crop_to_aspect_ratio``. Integer images come back in their dtype,
    rounded and clipped, as Keras does."""

    op = "resizing"
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self,
        *,
        height: int,
        width: int,
        interpolation: str = "bilinear",
        crop_to_aspect_ratio: bool = False,
        channels_first: bool = False,
    ) -> None:
        super().__init__()
        self.size, self.interpolation = (int(height), int(width)), interpolation
        self.crop, self.channels_first = crop_to_aspect_ratio, channels_first

    @classmethod
    def check_values(cls, arguments: dict[str, Any]) -> str | None:
        interpolation = arguments.get("interpolation", "bilinear")
        if interpolation not in ("bilinear", "nearest"):
            return f"interpolation {str(interpolation)[:40]!r} is not bilinear or nearest"
        return None

    def compute(self, x, mask):
        return keras_resize(
            x,
            *self.size,
            interpolation=self.interpolation,
            crop_to_aspect_ratio=self.crop,
            channels_first=self.channels_first,
        )


@writes(Resizing)
def write_resizing(w: Writer, spec: dict[str, Any]) -> bool:
    """``Resizing``: :func:`~attnzoo.keras.torch_layers.keras_resize` (``F.interpolate`` with Keras's
    half-pixel sampling, integer images rounded back), declaring nothing; no mask, as the node's."""
    x = w.tensor()
    if x is None or not plain(spec, int, "height", "width"):
        return False
    resize = w.imports(_TORCH_LAYERS, "keras_resize")
    options = {k: v for k, v in spec.items() if k in _RESIZE_OPTIONS and v != _RESIZE_OPTIONS[k]}
    given = "".join(f", {k}={literal(v)}" for k, v in options.items())
    w.assign(f"{resize}({x}, {literal(spec['height'])}, {literal(spec['width'])}{given})")
    return True


@keras_layer("Resizing")
def convert_resizing(record, arrays, ctx):
    expect_variables(arrays, 0, "Resizing")
    c = record.config
    height, width = c.get("height"), c.get("width")
    if not all(isinstance(v, int) and v > 0 for v in (height, width)):
        raise Refused(f"height {height!r} and width {width!r} are not positive ints")
    interpolation = c.get("interpolation", "bilinear")
    if interpolation not in ("bilinear", "nearest"):
        raise Refused(f"interpolation {interpolation!r} is not supported (bilinear and nearest are)")
    for key in ("pad_to_aspect_ratio", "antialias"):
        if c.get(key):
            raise Refused(f"{key}=True is not supported")
    spec = {"op": "resizing", "height": height, "width": width, "interpolation": interpolation}
    spec["crop_to_aspect_ratio"] = bool(c.get("crop_to_aspect_ratio", False))
    spec["channels_first"] = c.get("data_format", "channels_last") == "channels_first"
    return Converted(spec, {})
