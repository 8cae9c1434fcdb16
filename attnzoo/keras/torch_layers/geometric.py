"""Keras's geometric augmentation layers in torch: ``KerasRandomRotation``, ``KerasRandomZoom`` and
``KerasRandomTranslation``, an affine map per image (the matrices are in
:mod:`attnzoo.keras.converters.augmentation`'s docstring) sampled as keras 3's ``affine_transform`` and
``map_coordinates`` do (:func:`affine_sample`), in every fill mode and interpolation. The identity at
inference (integer images as floats)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attnzoo.keras.torch_layers.augmentation import KerasAugmentation, uniform_draws

__all__ = ["affine_sample", "FILL_MODES", "KerasRandomRotation", "KerasRandomZoom", "KerasRandomTranslation"]

FILL_MODES = ("reflect", "wrap", "constant", "nearest")


def _mirror(index: Tensor, size: int) -> Tensor:
    s = size - 1
    return (index + s).remainder(2 * s).sub(s).abs() if s > 0 else torch.zeros_like(index)


_FIXERS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "constant": lambda i, n: i.clamp(0, n - 1),  # the value is replaced by fill_value; any valid index does
    "nearest": lambda i, n: i.clamp(0, n - 1),
    "wrap": lambda i, n: i.remainder(n),
    "reflect": lambda i, n: torch.div(_mirror(2 * i + 1, 2 * n + 1) - 1, 2, rounding_mode="floor"),
}


def affine_sample(
    images: Tensor, matrix: Tensor, interpolation: str = "bilinear", fill_mode: str = "reflect", fill_value: float = 0.0
) -> Tensor:
    """[B, H, W, C] images moved by ``matrix`` [B, 6] = ``(a0, a1, a2, b0, b1, b2)``: output pixel (row y,
    column x) samples the input at row ``b1 y + b0 x + b2``, column ``a1 y + a0 x + a2`` (Keras's order of
    sums). ``nearest`` rounds half to even; ``bilinear`` weighs the four neighbours. A neighbour outside the
    image is ``fill_value`` (``constant``: each neighbour on its own), the edge pixel (``nearest``), the
    other side (``wrap``) or its mirror about the edge (``reflect``: ``d c b a | a b c d | d c b a``)."""
    b, h, w, c = images.shape
    rows = torch.arange(h, device=images.device, dtype=matrix.dtype).view(1, h, 1)
    cols = torch.arange(w, device=images.device, dtype=matrix.dtype).view(1, 1, w)
    a0, a1, a2, b0, b1, b2 = (matrix[:, k].view(b, 1, 1) for k in range(6))
    at_row, at_col = rows * b1 + cols * b0 + b2, rows * a1 + cols * a0 + a2

    def neighbours(coordinate: Tensor) -> list[tuple[Tensor, Tensor | float]]:
        if interpolation == "nearest":
            return [(coordinate.round().long(), 1.0)]
        lower = coordinate.floor()
        upper_weight = coordinate - lower
        return [(lower.long(), 1 - upper_weight), (lower.long() + 1, upper_weight)]

    flat = images.reshape(b, h * w, c)
    fix = _FIXERS[fill_mode]
    out: Tensor | None = None
    for i, wy in neighbours(at_row):
        for j, wx in neighbours(at_col):
            where = (fix(i, h) * w + fix(j, w)).reshape(b, h * w, 1).expand(b, h * w, c)
            value = flat.gather(1, where).reshape(b, h, w, c)
            if fill_mode == "constant":
                inside = ((i >= 0) & (i < h) & (j >= 0) & (j < w)).unsqueeze(-1)
                value = torch.where(inside, value, torch.full_like(value, fill_value))
            weight = wy * wx
            term = weight.unsqueeze(-1).to(value.dtype) * value if isinstance(weight, Tensor) else value
            out = term if out is None else out + term
    assert out is not None
    return out


class _Affine(KerasAugmentation):
    """A geometric augmentation: ``matrix(batch, height, width, like)`` [B, 6] for ``affine_sample``."""

    def _sampled(self, interpolation: str, fill_mode: str, fill_value: float, channels_first: bool) -> None:
        """How the moved image is read back (the settings every geometric augmentation shares)."""
        if interpolation not in ("bilinear", "nearest") or fill_mode not in FILL_MODES:
            raise ValueError(f"interpolation {interpolation!r}, fill_mode {fill_mode!r}: not Keras's")
        self.interpolation, self.fill_mode, self.fill_value = interpolation, fill_mode, float(fill_value)
        self.channels_first = channels_first

    def matrix(self, batch: int, height: int, width: int, like: Tensor) -> Tensor:
        raise NotImplementedError

    def transform(self, images: Tensor) -> Tensor:
        b, h, w, _ = images.shape
        matrix = self.matrix(b, h, w, images)
        return affine_sample(images, matrix, self.interpolation, self.fill_mode, self.fill_value)


class KerasRandomRotation(_Affine):
    """``RandomRotation(factor)``: θ ~ U(360° · lower, 360° · upper) per image, counter-clockwise for
    positive θ, about the image's centre (see the module docstring)."""

    def __init__(
        self, *, factor: list[float], interpolation: str, fill_mode: str, fill_value: float, channels_first: bool
    ) -> None:
        super().__init__()
        self._sampled(interpolation, fill_mode, fill_value, channels_first)
        self.factor = (float(factor[0]), float(factor[1]))

    def matrix(self, batch, height, width, like):
        angle = uniform_draws(batch, (self.factor[0] * 360.0, self.factor[1] * 360.0), like)
        angle = angle * torch.tensor(math.pi / 180.0, dtype=torch.float32)
        cx, cy = 0.5 * (width - 1.0), 0.5 * (height - 1.0)
        cos, sin = angle.cos(), angle.sin()
        a2 = cx - cx * cos - cy * -sin
        b2 = cy - cx * sin - cy * cos
        return torch.stack([cos, -sin, a2, sin, cos, b2], dim=1)


class KerasRandomZoom(_Affine):
    """``RandomZoom(height_factor, width_factor)``: the image scaled about its centre by ``zy`` ~ U(1 +
    height_factor) and ``zx`` ~ U(1 + width_factor) (``zx = zy`` without a width factor); a factor above
    0 zooms out."""

    def __init__(
        self,
        *,
        height_factor: list[float],
        width_factor: list[float] | None,
        interpolation: str,
        fill_mode: str,
        fill_value: float,
        channels_first: bool,
    ) -> None:
        super().__init__()
        self._sampled(interpolation, fill_mode, fill_value, channels_first)
        self.height_factor = (float(height_factor[0]), float(height_factor[1]))
        self.width_factor = None if width_factor is None else (float(width_factor[0]), float(width_factor[1]))

    def matrix(self, batch, height, width, like):
        zy = uniform_draws(batch, (1.0 + self.height_factor[0], 1.0 + self.height_factor[1]), like)
        zx = (
            zy
            if self.width_factor is None
            else uniform_draws(batch, (1.0 + self.width_factor[0], 1.0 + self.width_factor[1]), like)
        )
        zero = torch.zeros_like(zx)
        x_offset, y_offset = (width - 1.0) / 2.0 * (1.0 - zx), (height - 1.0) / 2.0 * (1.0 - zy)
        return torch.stack([zx, zero, x_offset, zero, zy, y_offset], dim=1)


class KerasRandomTranslation(_Affine):
    """``RandomTranslation(height_factor, width_factor)``: the image moved down by ``H · v`` and right by
    ``W · u`` pixels, ``v`` ~ U(height_factor), ``u`` ~ U(width_factor) (fractions of the size)."""

    def __init__(
        self,
        *,
        height_factor: list[float],
        width_factor: list[float],
        interpolation: str,
        fill_mode: str,
        fill_value: float,
        channels_first: bool,
    ) -> None:
        super().__init__()
        self._sampled(interpolation, fill_mode, fill_value, channels_first)
        self.height_factor = (float(height_factor[0]), float(height_factor[1]))
        self.width_factor = (float(width_factor[0]), float(width_factor[1]))

    def matrix(self, batch, height, width, like):
        dy = uniform_draws(batch, self.height_factor, like) * height
        dx = uniform_draws(batch, self.width_factor, like) * width
        one, zero = torch.ones_like(dx), torch.zeros_like(dx)
        return torch.stack([one, zero, -dx, zero, one, -dy], dim=1)
