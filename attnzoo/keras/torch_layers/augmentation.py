"""Keras's random image augmentation layers in torch: modules that are the identity at inference
(``eval()``) and Keras's random transformation in training (``train()``), each image of the batch drawn
on its own (the formulas are in :mod:`attnzoo.keras.converters.augmentation`'s docstring). Images are
[B, H, W, C] (``channels_first``: [B, C, H, W]) or one image without its batch axis. ``augment = False``
makes a layer the identity in training too (``KerasModel.augmentation(False)`` sets it on each).

The random numbers are torch's (``torch.manual_seed`` makes them repeatable), not Keras's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.torch_layers.preprocessing import aspect_window

__all__ = [
    "KerasAugmentation",
    "KerasRandomContrast",
    "KerasRandomBrightness",
    "KerasRandomCrop",
    "KerasRandomResize",
    "KerasRandomFlip",
    "as_float",
    "uniform_draws",
    "FLIPS",
]


def as_float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def uniform_draws(batch: int, bounds: tuple[float, float], like: Tensor) -> Tensor:
    """[batch] draws from U(lower, upper), float32 (Keras's transformation matrices are float32)."""
    lower, upper = bounds
    return lower + (upper - lower) * torch.rand(batch, device=like.device, dtype=torch.float32)


class KerasAugmentation(nn.Module):
    """A Keras random augmentation layer: ``transform(images)`` of [B, H, W, C] float images in training
    (``self.training`` and ``self.augment``), ``inference(x)`` otherwise. ``augment`` is
    ``KerasModel.augmentation``'s switch."""

    channels_first: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.augment = True

    def inference(self, x: Tensor) -> Tensor:
        return as_float(x)  # Keras casts its images to the layer's float dtype

    def transform(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        if not (self.training and self.augment):
            return self.inference(x)
        if x.dim() not in (3, 4):
            raise ValueError(f"expects images [batch, height, width, channels], got {list(x.shape)}")
        y = as_float(x)
        y = y.unsqueeze(0) if x.dim() == 3 else y
        y = self.transform(y.movedim(1, -1) if self.channels_first else y)
        y = y.movedim(-1, 1) if self.channels_first else y
        return y.squeeze(0) if x.dim() == 3 else y


class _PixelValues(KerasAugmentation):
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


class KerasRandomContrast(_PixelValues):
    """``RandomContrast(factor, value_range)``: each image's distance from its per-channel mean scaled by
    f ~ U(1 - factor[0], 1 + factor[1]), clipped to ``value_range``. At inference the input as it is
    (its dtype too). ``one_factor``: Keras 2's, one f for the whole batch (``tf.image.random_contrast``);
    its ``value_range`` is [0, 255], fixed."""

    def __init__(
        self,
        *,
        factor: list[float],
        value_range: list[float],
        channels_first: bool = False,
        one_factor: bool = False,
    ) -> None:
        super().__init__(factor=factor, value_range=value_range, channels_first=channels_first)
        self.one_factor = one_factor

    def transform(self, images):
        bounds = (1.0 - self.factor[0], 1.0 + self.factor[1])
        f = uniform_draws(1 if self.one_factor else images.shape[0], bounds, images).to(images.dtype)
        mean = images.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)  # Keras's order: rows, then columns
        return ((images - mean) * f.view(-1, 1, 1, 1) + mean).clamp(*self.value_range)


class KerasRandomBrightness(_PixelValues):
    """``RandomBrightness(factor, value_range)``: each image shifted by δ · (hi - lo), δ ~ U(factor),
    clipped to ``value_range = (lo, hi)``. At inference the input as it is. Integer images are shifted as
    floats (keras 3 casts δ to the image's integer dtype, dropping its fraction)."""

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


class KerasRandomCrop(KerasAugmentation):
    """``RandomCrop(height, width)``: in training one ``height`` x ``width`` window of the batch at a
    uniform offset (keras 3: where the image is larger on both axes; Keras 2: at least as large), else
    :func:`_fit_window`. At inference keras 3 returns the input as it is (its declared output shape is the
    crop's, but its ``call`` crops in training only); Keras 2 returns :func:`_fit_window`."""

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


class KerasRandomResize(KerasAugmentation):
    """Keras 2's ``RandomHeight`` (``axis="height"``) and ``RandomWidth``: the batch resized on that axis
    to ``int(size · f)``, f ~ U(1 + factor[0], 1 + factor[1]) drawn once per batch, ``bilinear``
    (half-pixel, no antialiasing) or ``nearest`` (half-pixel)."""

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


FLIPS = {"horizontal": (True, False), "vertical": (False, True), "horizontal_and_vertical": (True, True)}


class KerasRandomFlip(KerasAugmentation):
    """``RandomFlip``: in training each image of the batch is flipped with probability 1/2, left-right
    (``horizontal``: the width axis) and/or up-down (``vertical``: the height axis). keras 3 draws one coin
    per image for both axes (``horizontal_and_vertical`` turns an image by 180 degrees or leaves it);
    Keras 2 draws one coin per axis."""

    def __init__(self, *, mode: str, channels_first: bool = False, coin_per_axis: bool = False) -> None:
        super().__init__()
        if mode not in FLIPS:
            raise ValueError(f"RandomFlip mode {mode!r}; one of {', '.join(FLIPS)}")
        self.mode, self.channels_first, self.coin_per_axis = mode, channels_first, coin_per_axis

    def transform(self, images):
        coin = torch.rand(images.shape[0], 1, 1, 1, device=images.device) <= 0.5
        horizontal, vertical = FLIPS[self.mode]
        if horizontal:
            images = torch.where(coin, images.flip(2), images)
        if vertical:
            if self.coin_per_axis:
                coin = torch.rand(images.shape[0], 1, 1, 1, device=images.device) <= 0.5
            images = torch.where(coin, images.flip(1), images)
        return images
