"""How ``attnzoo convert-keras --check`` judges a difference between the port and Keras, so that it never
refuses a right port and still catches a wrong one.

Where. Only where Keras's output is defined by the inputs: an output (or a layer's output) of one value per
position of a padded sequence, ``[batch, length, ...]``, of a model that declares its padding (a padding
mask or a bool mask input, an ``Embedding(mask_zero=True)``, ``Masking``), is compared at the kept
positions only; every other output everywhere Keras's output is finite.

How close. Within ``tolerance * max(1, |y|max)`` of Keras's output ``y``: a tolerance relative to the
output's scale (float32 rounds logits of 40 at 4e-6, a probability at 1e-7). Where the float32 port is
farther, the port runs again in float64 (the exact computation, to float32's eyes): the float32 difference
is then float32's rounding if the float64 port is within the tolerance of Keras, plus a few times the
float32 port's own distance from its float64 run (Keras's float32 rounding is of the size of the port's:
the same sums in another order). A port changed by 1e-3 is as far from Keras in float64 as in float32, and
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Difference", "difference", "SLACK"]

SLACK = 4.0  # how many of the port's own float32 roundings Keras's float32 rounding may reach
_EPS32 = float(np.finfo(np.float32).eps)


@dataclass
class Difference:
    """One output's comparison: ``value`` max |port - Keras| and ``scale`` max |Keras| at the compared
    positions; ``float64`` max |float64 port - Keras| and ``rounding`` max |float32 port - float64 port|
    where the float64 port ran."""

    value: float
    scale: float
    float64: float | None = None
    rounding: float | None = None

    def allowed(self, tolerance: float) -> float:
        """The tolerance at this output's scale: ``tolerance * max(1, |y|max)``."""
        return tolerance * max(1.0, self.scale)

    def within(self, tolerance: float) -> bool:
        """Within the tolerance, or (with the float64 run) float32's rounding and nothing else."""
        allowed = self.allowed(tolerance)
        if self.value <= allowed:
            return True
        if self.float64 is None or self.rounding is None:
            return False
        return self.float64 <= allowed + SLACK * max(self.rounding, _EPS32 * self.scale)

    def to_dict(self) -> dict[str, Any]:
        return {"difference": self.value, "scale": self.scale, "float64": self.float64, "rounding": self.rounding}


def _array(value: Any) -> np.ndarray:
    """A port's tensor or Keras's array as numpy (bfloat16 widened to float32: numpy has no bfloat16)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    value = np.asarray(value)
    return value.astype(np.float32) if value.dtype.kind == "V" or str(value.dtype) == "bfloat16" else value


def _kept(array: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """The values of ``array`` at the kept positions where it holds one value per position of the padded
    inputs (its first two axes are theirs), else all of it."""
    if keep is not None and array.ndim >= 2 and array.shape[:2] == keep.shape:
        return array[keep]
    return array


def difference(ours: Any, theirs: Any, keep: np.ndarray | None = None, double: Any = None) -> Difference:
    """``ours`` (the float32 port) against ``theirs`` (Keras) where Keras's output is finite, at the kept
    positions of ``keep`` ([batch, length] bool, or None: everywhere); ``double`` the float64 port's same
    output, where it ran. A shape that differs is an infinite difference."""
    mine, want = _array(ours), _array(theirs)
    if mine.shape != want.shape or (double is not None and _array(double).shape != want.shape):
        return Difference(float("inf"), 0.0)
    mine, want = _kept(mine, keep), _kept(want, keep)
    finite = np.isfinite(want)
    if not finite.any():
        return Difference(0.0, 0.0)
    mine64, want64 = mine[finite].astype(np.float64), want[finite].astype(np.float64)
    result = Difference(float(np.abs(mine64 - want64).max()), float(np.abs(want64).max()))
    if double is not None:
        exact = _kept(_array(double), keep)[finite].astype(np.float64)
        result.float64 = float(np.abs(exact - want64).max())
        result.rounding = float(np.abs(mine64 - exact).max())
    return result
