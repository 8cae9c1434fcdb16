"""Keras's ``BatchNormalization`` as torch's batch norm: :class:`KerasBatchNorm`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["KerasBatchNorm"]

_KERAS_EPSILON = 1e-7  # keras.backend.epsilon(), which BatchNormalization adds to a masked count


class KerasBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Keras's ``BatchNormalization`` over axis 1 of a channels-first ``x`` [B, C, *spatial] (any rank, as
    ``nn.BatchNorm1d/2d/3d``), ``mask`` [B, *spatial] (True = keep) optional. Built as
    ``KerasBatchNorm(C, eps=epsilon, momentum=1 - keras_momentum)``: torch's momentum weighs the batch,
    Keras's the moving value.

    Inference (``eval()``, or ``trainable = False``, a layer Keras froze) is torch's. Training differs from
    torch's in one statistic: both normalise by the biased batch variance, but Keras moves the moving variance
    towards that biased variance, torch towards the unbiased one; and with a ``mask`` Keras's moments are over
    the kept positions (``sum / (count + 1e-7)``)::

        moving_mean = moving_mean * (1 - momentum) + mean * momentum      (the same for the variance)
        y = (x - mean) / sqrt(variance + eps) * weight + bias

    The state dict holds ``weight``, ``bias``, ``running_mean``, ``running_var`` (Keras's gamma, beta, moving
    mean and variance), no ``num_batches_tracked``, which Keras has not (so a folder saved when this layer was
    attnzoo's ``BatchNorm`` node loads as it is)."""

    def __init__(self, num_features: int, eps: float = 1e-3, momentum: float = 0.01, affine: bool = True) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine, track_running_stats=True)
        self.register_buffer("num_batches_tracked", None)  # not counted: no key in the state dict

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"KerasBatchNorm: expects [batch, channels, ...], got {list(input.shape)}")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # past _NormBase's, which adds a num_batches_tracked key to an unversioned state dict
        nn.Module._load_from_state_dict(self, state_dict, prefix, *args, **kwargs)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        self._check_input_dim(x)
        dtype = x.dtype
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        weight = None if self.weight is None else self.weight.to(work.dtype)
        bias = None if self.bias is None else self.bias.to(work.dtype)
        if not (self.training and getattr(self, "trainable", True)):
            mean, var = (t.to(work.dtype) for t in (self.running_mean, self.running_var))  # type: ignore[union-attr]
            return F.batch_norm(work, mean, var, weight, bias, False, 0.0, self.eps).to(dtype)
        axes = [0, *range(2, x.dim())]
        if mask is None or mask.dim() != x.dim() - 1:
            mean, var = work.mean(dim=axes), work.var(dim=axes, unbiased=False)
        else:
            keep = mask.unsqueeze(1).expand_as(work)
            count = keep.to(work.dtype).sum(dim=axes, keepdim=True) + _KERAS_EPSILON
            centre = torch.where(keep, work, torch.zeros_like(work)).sum(dim=axes, keepdim=True) / count
            spread = torch.where(keep, work - centre, torch.zeros_like(work)).square().sum(dim=axes, keepdim=True)
            mean, var = centre.flatten(), (spread / count).flatten()
        with torch.no_grad():
            for moving, batch in ((self.running_mean, mean), (self.running_var, var)):
                moving.lerp_(batch.detach().to(moving.dtype), self.momentum)  # type: ignore[union-attr,arg-type]
        shape = [1, -1] + [1] * (x.dim() - 2)
        factor = torch.rsqrt(var + self.eps)
        if weight is not None:
            factor = factor * weight
        out = (work - mean.reshape(shape)) * factor.reshape(shape)
        return (out if bias is None else out + bias.reshape(shape)).to(dtype)
