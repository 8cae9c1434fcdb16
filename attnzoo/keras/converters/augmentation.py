"""Keras's random image augmentation layers: the identity at inference (``model.eval()``), Keras's random
transformation in training (``model.train()``), each image of the batch drawn on its own.

Images are [B, H, W, C] (``channels_first``: [B, C, H, W]) or one image without its batch axis. The
geometric layers (RandomRotation, RandomZoom, RandomTranslation: :mod:`attnzoo.keras.converters.affine`)
move pixels through an affine map from each output pixel ``(x, y)`` (column, row) to the input point
``(a0 x + a1 y + a2, b0 x + b1 y + b2)``:

=====================  ===========================================================================
``RandomRotation``     angle θ ~ U(360° · factor): ``a0 = b1 = cos θ``, ``a1 = -sin θ``, ``b0 = sin θ``
                       about the centre ``((W - 1) / 2, (H - 1) / 2)``
``RandomZoom``         ``a0 = zx``, ``b1 = zy``, ``a2 = (W - 1) / 2 · (1 - zx)``, ``b2 = (H - 1) / 2 ·
                       (1 - zy)``; ``zy ~ U(1 + height_factor)``, ``zx ~ U(1 + width_factor)`` (``zy``
                       when ``width_factor`` is None): above 1 zooms out
``RandomTranslation``  ``a2 = -W · u``, ``b2 = -H · v``; ``v ~ U(height_factor)``, ``u ~ U(width_factor)``
``RandomContrast``     ``(x - m) · f + m`` (``m`` each channel's mean over the image), f ~ U(1 - lower,
                       1 + upper), clipped to ``value_range``
``RandomBrightness``   ``x + δ · (hi - lo)``, δ ~ U(factor), clipped to ``value_range = (lo, hi)``
``RandomCrop``         one window of the target size at a uniform offset for the batch (an image not
                       larger on both axes: its centred window of the target's aspect ratio, resized)
``RandomHeight/Width`` (Keras 2) the batch resized to ``int(H · f)`` rows (columns), f ~ U(1 + factor)
=====================  ===========================================================================

Keras's factor conventions are kept, its odd ones too: keras 3's RandomContrast turns ``factor=0.2`` into
``(0, 0.2)``, so contrast only grows, in [1, 1.2]. The random numbers are torch's (``torch.manual_seed``
makes them repeatable), not Keras's; a factor range of zero width gives Keras's transformation exactly.
``KerasModel.augmentation(False)`` makes every layer here the identity in training too, for data
augmented before the model. RandomFlip is here too; GaussianNoise and GaussianDropout are noise layers
(:mod:`attnzoo.keras.converters.regularization`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.keras.arguments import channels_first, expect_variables
from attnzoo.keras.converters.preprocessing import aspect_window
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["RandomAugmentation", "AUGMENT_NOTE", "factor_range", "uniform_draws", "as_float"]

AUGMENT_NOTE = "the identity at inference; Keras's random {} in training (model.train())"


def as_float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def uniform_draws(batch: int, bounds: tuple[float, float], like: Tensor) -> Tensor:
    """[batch] draws from U(lower, upper), float32 (Keras's transformation matrices are float32)."""
    lower, upper = bounds
    return lower + (upper - lower) * torch.rand(batch, device=like.device, dtype=torch.float32)


class RandomAugmentation(Node):
    """A Keras random augmentation layer: ``transform(images)`` of [B, H, W, C] float images in training
    (``self.training`` and ``self.augment``), ``inference(x)`` otherwise. ``augment`` is
    ``KerasModel.augmentation``'s switch."""

    channels_first: bool = False
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self) -> None:
        super().__init__()
        self.augment = True

    def inference(self, x: Tensor) -> Tensor:
        return as_float(x)  # Keras casts its images to the layer's float dtype

    def transform(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def compute(self, x, mask):
        if not (self.training and self.augment):
            return self.inference(x)
        if x.dim() not in (3, 4):
            raise ValueError(f"expects images [batch, height, width, channels], got {list(x.shape)}")
        y = as_float(x)
        y = y.unsqueeze(0) if x.dim() == 3 else y
        y = self.transform(y.movedim(1, -1) if self.channels_first else y)
        y = y.movedim(-1, 1) if self.channels_first else y
        return y.squeeze(0) if x.dim() == 3 else y


class _PixelValues(RandomAugmentation):
    """An augmentation of the pixels' values (``factor``), clipped to ``value_range``; at inference the input
    as it is (its dtype too)."""

    def __init__(self, *, factor: list[float], value_range: list[float], channels_first: bool = False) -> None:
        super().__init__()
        self.factor, self.value_range = (
            (float(factor[0]), float(factor[1])),
            (float(value_range[0]), float(value_range[1])),
        )
        self.channels_first = channels_first

    def inference(self, x):
        return x


class RandomContrast(_PixelValues):
    """``RandomContrast(factor, value_range)``: each image's distance from its per-channel mean scaled by
    f ~ U(1 - factor[0], 1 + factor[1]), clipped to ``value_range``. At inference the input as it is
    (its dtype too)."""

    op = "random_contrast"

    def transform(self, images):
        f = uniform_draws(images.shape[0], (1.0 - self.factor[0], 1.0 + self.factor[1]), images).to(images.dtype)
        mean = images.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)  # Keras's order: rows, then columns
        return ((images - mean) * f.view(-1, 1, 1, 1) + mean).clamp(*self.value_range)


class RandomBrightness(_PixelValues):
    """``RandomBrightness(factor, value_range)``: each image shifted by δ · (hi - lo), δ ~ U(factor),
    clipped to ``value_range = (lo, hi)``. At inference the input as it is. Integer images are shifted as
    floats (keras 3 casts δ to the image's integer dtype, dropping its fraction)."""

    op = "random_brightness"

    def transform(self, images):
        lo, hi = self.value_range
        delta = uniform_draws(images.shape[0], self.factor, images).to(images.dtype) * (hi - lo)
        return (images + delta.view(-1, 1, 1, 1)).clamp(lo, hi)


def _fit_window(images: Tensor, height: int, width: int, keras2: bool) -> Tensor:
    """Keras's crop of [B, H, W, C] images not larger than the target, resized to it (bilinear, half-pixel,
    no antialiasing) where the window is not that size already. Keras 2's ``smart_resize``: the centred
    window of the target's aspect ratio. keras 3 finds that window's corner but cuts ``height`` x ``width``
    from it (what the image holds of that), as its ``transform_images`` does."""
    x = images.movedim(-1, 1)
    if keras2:
        window = aspect_window(x, height, width)
    else:
        h, w = x.shape[-2], x.shape[-1]
        crop_h = max(min(h, int(float(w * height) / width)), 1)
        crop_w = max(min(w, int(float(h * width) / height)), 1)
        top, left = int(float(h - crop_h) / 2), int(float(w - crop_w) / 2)
        window = x[..., top : top + height, left : left + width]
    if tuple(window.shape[-2:]) != (height, width):
        window = F.interpolate(window, size=(height, width), mode="bilinear", align_corners=False)
    return window.movedim(1, -1)


class RandomCrop(RandomAugmentation):
    """``RandomCrop(height, width)``: in training one ``height`` x ``width`` window of the batch at a
    uniform offset (keras 3: where the image is larger on both axes; Keras 2: at least as large), else
    :func:`_fit_window`. At inference keras 3 returns the input as it is (its declared output shape is the
    crop's, but its ``call`` crops in training only); Keras 2 returns :func:`_fit_window`."""

    op = "random_crop"

    def __init__(self, *, height: int, width: int, channels_first: bool = False, keras2: bool = False) -> None:
        super().__init__()
        self.height, self.width, self.channels_first, self.keras2 = int(height), int(width), channels_first, keras2

    def inference(self, x):
        if not self.keras2:
            return x
        y = as_float(x).movedim(1, -1) if self.channels_first else as_float(x)
        y = _fit_window(y, self.height, self.width, keras2=True)
        return y.movedim(-1, 1) if self.channels_first else y

    def transform(self, images):
        h, w = images.shape[1], images.shape[2]
        fits = (h >= self.height and w >= self.width) if self.keras2 else (h > self.height and w > self.width)
        if not fits:
            return _fit_window(images, self.height, self.width, self.keras2)
        top = int(torch.randint(0, h - self.height + 1, ()))
        left = int(torch.randint(0, w - self.width + 1, ()))
        return images[:, top : top + self.height, left : left + self.width]


class RandomResize(RandomAugmentation):
    """Keras 2's ``RandomHeight`` (``axis="height"``) and ``RandomWidth``: the batch resized on that axis
    to ``int(size · f)``, f ~ U(1 + factor[0], 1 + factor[1]) drawn once per batch, ``bilinear``
    (half-pixel, no antialiasing) or ``nearest`` (half-pixel)."""

    op = "random_resize"

    def __init__(
        self, *, axis: str, factor: list[float], interpolation: str = "bilinear", channels_first: bool = False
    ) -> None:
        super().__init__()
        if axis not in ("height", "width") or interpolation not in ("bilinear", "nearest"):
            raise ValueError(f"axis {axis!r}, interpolation {interpolation!r}: not RandomHeight/RandomWidth's")
        self.axis, self.factor, self.interpolation = axis, (float(factor[0]), float(factor[1])), interpolation
        self.channels_first = channels_first

    def transform(self, images):
        h, w = images.shape[1], images.shape[2]
        f = float(uniform_draws(1, (1.0 + self.factor[0], 1.0 + self.factor[1]), images))
        size = (int(f * h), w) if self.axis == "height" else (h, int(f * w))
        mode = {"bilinear": "bilinear", "nearest": "nearest-exact"}[self.interpolation]
        extra = {"align_corners": False} if mode == "bilinear" else {}
        return F.interpolate(images.movedim(-1, 1), size=size, mode=mode, **extra).movedim(1, -1)


_FLIPS = {"horizontal": (True, False), "vertical": (False, True), "horizontal_and_vertical": (True, True)}


class RandomFlip(RandomAugmentation):
    """``RandomFlip``: in training each image of the batch is flipped with probability 1/2, left-right
    (``horizontal``: the width axis) and/or up-down (``vertical``: the height axis). keras 3 draws one coin
    per image for both axes (``horizontal_and_vertical`` turns an image by 180 degrees or leaves it);
    Keras 2 draws one coin per axis."""

    op = "random_flip"

    def __init__(self, *, mode: str, channels_first: bool = False, coin_per_axis: bool = False) -> None:
        super().__init__()
        if mode not in _FLIPS:
            raise ValueError(f"RandomFlip mode {mode!r}; one of {', '.join(_FLIPS)}")
        self.mode, self.channels_first, self.coin_per_axis = mode, channels_first, coin_per_axis

    def transform(self, images):
        coin = torch.rand(images.shape[0], 1, 1, 1, device=images.device) <= 0.5
        horizontal, vertical = _FLIPS[self.mode]
        if horizontal:
            images = torch.where(coin, images.flip(2), images)
        if vertical:
            if self.coin_per_axis:
                coin = torch.rand(images.shape[0], 1, 1, 1, device=images.device) <= 0.5
            images = torch.where(coin, images.flip(1), images)
        return images


class Augmentation(RandomAugmentation):
    """An augmentation layer of a folder saved before attnzoo converted its transformation (its config has
    only ``keras_class``): the identity at inference, and in training an error unless
    ``model.augmentation(False)``."""

    op = "augmentation"

    def __init__(self, *, keras_class: str) -> None:
        super().__init__()
        self.keras_class = keras_class

    def transform(self, images):
        raise ValueError(
            f"{self.keras_class} augments its input in training, and this folder was saved without its "
            f"settings; convert the Keras file again to train with it, or call model.augmentation(False) to "
            f"train without it (data augmented before the model)"
        )


# -- converters -------------------------------------------------------------------------------------------


def factor_range(value: Any, what: str, bounds: tuple[float, float]) -> list[float]:
    """Keras's ``factor``: a number f within ``bounds`` is ``(max(-|f|, bounds[0]), |f|)``; a pair is sorted
    as it is (keras 3's RandomContrast: ``0.2`` is ``(0, 0.2)``, ``(-0.2, 0.2)`` stays)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not bounds[0] <= float(value) <= bounds[1]:
            raise Refused(f"{what} {value!r} is outside [{bounds[0]}, {bounds[1]}]")
        lower, upper = max(-abs(float(value)), bounds[0]), abs(float(value))
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        lower, upper = sorted(float(v) for v in value)
    else:
        raise Refused(f"{what} {value!r} is not a number or a pair of numbers")
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise Refused(f"{what} {value!r} is not finite")
    return [lower, upper]


def _value_range(record) -> list[float]:
    value = record.config.get("value_range", (0, 255))
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
        raise Refused(f"value_range {value!r} is not a pair of numbers")
    return sorted(float(v) for v in value)


def _keras2_refusal(record, ctx) -> Converted | None:
    """Keras 2's RandomContrast and RandomBrightness drew their factors otherwise (one per batch, no
    value_range in some releases): the identity at inference, and training refused, as before."""
    if ctx.major >= 3:
        return None
    notes = [
        f"the identity at inference; Keras {ctx.major}'s random transformation is not converted (an error in training)"
    ]
    return Converted({"op": "augmentation", "keras_class": record.class_name}, {}, notes)


@keras_layer("RandomContrast")
def convert_random_contrast(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomContrast")
    legacy = _keras2_refusal(record, ctx)
    if legacy is not None:
        return legacy
    factor = factor_range(record.config.get("factor"), "factor", (0.0, 1.0))
    spec = {"op": "random_contrast", "factor": factor, "value_range": _value_range(record)}
    spec["channels_first"] = channels_first(record.config)
    return Converted(spec, {}, [AUGMENT_NOTE.format("contrast")])


@keras_layer("RandomBrightness")
def convert_random_brightness(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomBrightness")
    legacy = _keras2_refusal(record, ctx)
    if legacy is not None:
        return legacy
    factor = factor_range(record.config.get("factor"), "factor", (-1.0, 1.0))
    spec = {"op": "random_brightness", "factor": factor, "value_range": _value_range(record)}
    spec["channels_first"] = channels_first(record.config)
    return Converted(spec, {}, [AUGMENT_NOTE.format("brightness")])


@keras_layer("RandomCrop")
def convert_random_crop(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomCrop")
    c = record.config
    height, width = c.get("height"), c.get("width")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (height, width)):
        raise Refused(f"height {height!r} and width {width!r} are not positive ints")
    spec = {"op": "random_crop", "height": height, "width": width, "channels_first": channels_first(c)}
    spec["keras2"] = ctx.major < 3
    note = "a centred crop" if ctx.major < 3 else "the identity, as keras 3's call is"
    return Converted(spec, {}, [f"at inference {note}; a random crop in training (model.train())"])


@keras_layer("RandomHeight", "RandomWidth")
def convert_random_resize(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    c = record.config
    axis = "height" if record.class_name == "RandomHeight" else "width"
    interpolation = c.get("interpolation", "bilinear")
    if interpolation not in ("bilinear", "nearest"):
        raise Refused(f"interpolation {interpolation!r} is not converted (bilinear and nearest are)")
    factor = factor_range(c.get("factor"), "factor", (-1.0, math.inf))
    spec = {"op": "random_resize", "axis": axis, "factor": factor, "interpolation": interpolation}
    spec["channels_first"] = channels_first(c)
    return Converted(spec, {}, [AUGMENT_NOTE.format(f"{axis} resize")])


@keras_layer("RandomFlip")
def convert_random_flip(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    mode = str(record.config.get("mode", "horizontal_and_vertical"))
    if mode not in _FLIPS:
        raise Refused(f"mode {mode!r} is not one of {', '.join(_FLIPS)}")
    spec = {"op": "random_flip", "mode": mode, "coin_per_axis": ctx.major < 3}
    spec["channels_first"] = channels_first(record.config)
    notes = ["the identity at inference; in training each image flipped with probability 1/2, as Keras does"]
    return Converted(spec, {}, notes)
