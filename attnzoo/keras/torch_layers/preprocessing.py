"""Keras's numeric preprocessing layers in torch: :class:`KerasNormalization` (a module: its mean and variance
are weights), :func:`keras_resize` and :func:`keras_center_crop` (functions over ``F.interpolate`` and
slicing). Images are [B, H, W, C] (``channels_first``: [B, C, H, W]), as Keras lays them out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["KerasNormalization", "keras_normalize", "keras_resize", "keras_center_crop", "aspect_window"]

KERAS_EPSILON = 1e-7  # keras.backend.epsilon(), Normalization's floor on the standard deviation


def _laid_out(stat: Tensor, axis: list[int], ndim: int) -> Tensor:
    """A statistic of the kept ``axis`` as a tensor of ``ndim`` axes (size 1 elsewhere): Keras's broadcast."""
    if stat.dim() == 0:
        return stat
    keep = sorted(a % ndim for a in axis)
    shape = [1] * ndim
    for d, size in enumerate(stat.shape):
        shape[keep[d]] = size
    return stat.reshape(shape)


def keras_normalize(x: Tensor, mean: Tensor, variance: Tensor, axis: list[int], invert: bool = False) -> Tensor:
    """Keras's ``Normalization``: ``(x - mean) / max(sqrt(variance), 1e-7)``, or with ``invert``
    ``mean + x · max(sqrt(variance), 1e-7)``; ``mean`` and ``variance`` are laid along the kept ``axis``
    of ``x`` and computed in their dtype (``x`` is cast to it, integers included)."""
    x = x.to(mean.dtype)
    mean, variance = _laid_out(mean, axis, x.dim()), _laid_out(variance, axis, x.dim())
    std = variance.sqrt().clamp(min=KERAS_EPSILON)
    return mean + x * std if invert else (x - mean) / std


class KerasNormalization(nn.Module):
    """``KerasNormalization(axis, stats_shape, invert)``: :func:`keras_normalize` with the buffers ``mean``
    and ``variance`` of shape ``stats_shape`` (Keras's adapted or given statistics)."""

    def __init__(self, *, axis: list[int], stats_shape: list[int], invert: bool = False) -> None:
        super().__init__()
        self.axis, self.invert = [int(a) for a in axis], invert
        self.register_buffer("mean", torch.zeros(stats_shape))
        self.register_buffer("variance", torch.ones(stats_shape))

    def forward(self, x: Tensor) -> Tensor:
        return keras_normalize(x, self.mean, self.variance, self.axis, self.invert)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, stats_shape={list(self.mean.shape)}, invert={self.invert}"


def aspect_window(x: Tensor, height: int, width: int) -> Tensor:
    """The largest centred window of [..., H, W] with the aspect ratio of ``height`` x ``width`` (Keras's
    ``crop_to_aspect_ratio`` and ``smart_resize``, its integer arithmetic included)."""
    h, w = x.shape[-2], x.shape[-1]
    crop_h = max(min(h, int(float(w * height) / width)), 1)
    crop_w = max(min(w, int(float(h * width) / height)), 1)
    top, left = int(float(h - crop_h) / 2), int(float(w - crop_w) / 2)
    return x[..., top : top + crop_h, left : left + crop_w]


def _images(x: Tensor, what: str) -> None:
    if x.dim() != 4:
        raise ValueError(f"{what} expects a batch of images [batch, height, width, channels], got {list(x.shape)}")


def keras_resize(
    images: Tensor,
    height: int,
    width: int,
    *,
    interpolation: str = "bilinear",
    crop_to_aspect_ratio: bool = False,
    channels_first: bool = False,
) -> Tensor:
    """Keras's ``Resizing``: [B, H, W, C] -> [B, height, width, C], ``bilinear`` (half-pixel, no
    antialiasing: ``F.interpolate(..., align_corners=False)``) or ``nearest`` (half-pixel: torch's
    ``nearest-exact``), after cutting the centred window of the target's aspect ratio with
    ``crop_to_aspect_ratio``. Integer images come back in their dtype, rounded and clipped, as Keras does."""
    _images(images, "keras_resize")
    if interpolation not in ("bilinear", "nearest"):
        raise ValueError(f"keras_resize: interpolation {interpolation!r}; bilinear or nearest")
    dtype = images.dtype
    y = images if images.is_floating_point() else images.to(torch.get_default_dtype())
    y = y if channels_first else y.movedim(-1, 1)
    if crop_to_aspect_ratio:
        y = aspect_window(y, height, width)
    if interpolation == "bilinear":
        y = F.interpolate(y, size=(height, width), mode="bilinear", align_corners=False)
    else:
        y = F.interpolate(y, size=(height, width), mode="nearest-exact")
    y = y if channels_first else y.movedim(1, -1)
    if not dtype.is_floating_point:  # Keras casts back: rounded, saturated
        info = torch.iinfo(dtype)
        y = y.round().clamp(info.min, info.max).to(dtype)
    return y


def keras_center_crop(images: Tensor, height: int, width: int, *, channels_first: bool = False) -> Tensor:
    """Keras's ``CenterCrop``: the centred ``height`` x ``width`` window, ``(H - height) // 2`` from the
    top; an image smaller than the target on either side is Keras's ``smart_resize`` instead (the largest
    centred window of the target's aspect ratio, resized bilinearly, half-pixel). Float out (integer images
    are cast to torch's default dtype)."""
    _images(images, "keras_center_crop")
    x = images if images.is_floating_point() else images.to(torch.get_default_dtype())
    x = x if channels_first else x.movedim(-1, 1)
    h, w = x.shape[-2], x.shape[-1]
    if h >= height and w >= width:
        top, left = (h - height) // 2, (w - width) // 2
        y = x[..., top : top + height, left : left + width]
    else:
        y = F.interpolate(aspect_window(x, height, width), size=(height, width), mode="bilinear", align_corners=False)
    return y if channels_first else y.movedim(1, -1)
