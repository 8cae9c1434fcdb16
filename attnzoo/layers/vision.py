"""Attention blocks of convolutional networks: ``x [B, C, H, W]`` in, the same shape out.

With N = H·W positions, σ the sigmoid and GAP / GMP global average / max pooling over positions::

    se             a = σ(W2 relu(W1 GAP(x)))                        out = a ⊙ x        (per channel)     Hu et al. 2018
    eca            a = σ(conv1d_k(GAP(x)))   k from C (odd)          out = a ⊙ x        (per channel)     Wang et al. 2020
    cbam           a_c = σ(MLP(GAP x) + MLP(GMP x)), x' = a_c ⊙ x,
                   a_s = σ(conv7x7([mean_c x'; max_c x']))          out = a_s ⊙ x'                        Woo et al. 2018
    coord_attn     [y_h; y_w] = h_swish(BN(conv1x1([pool_W x; pool_H x]))),
                   out = x ⊙ σ(conv_h y_h) ⊙ σ(conv_w y_w)         (per row and column)                  Hou et al. 2021
    non_local      y = softmax_N(θ(x)ᵀ φ(x)) g(x)   (1x1 convs to C/2)
                   out = x + BN(W_z y)             (BN γ = 0 at init: the block starts as the identity)  Wang et al. 2018
    external_attn  A = softmax_N(x M_kᵀ), A = A / Σ_S A   (two normalisations)
                   out = A M_v        M_k, M_v [S, C]: linear memories shared by all samples            Guo et al. 2021

All take ``channels`` C (required: a network knows its widths) and check that the input has them.
The BatchNorm of ``coord_attn`` and ``non_local`` uses batch statistics while training, as the papers do;
in eval mode each sample is independent.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import attend, check_input, check_positive

__all__ = [
    "SqueezeExcitation",
    "EfficientChannelAttention",
    "CBAM",
    "CoordinateAttention",
    "NonLocalBlock",
    "ExternalAttention",
]


class _ImageBlock(nn.Module):
    name = "image_block"

    def __init__(self, channels: int) -> None:
        super().__init__()
        check_positive(self.name, "channels", channels, allow_none=False)
        self.channels = channels

    def _check(self, x: Tensor) -> None:
        like = next(iter(self.parameters()))
        check_input(self.name, "x", x, ("batch", self.channels, "height", "width"), like=like)
        if 0 in x.shape[2:]:
            raise ValueError(f"{self.name} expects a non-empty image, got x of shape {list(x.shape)}")

    def extra_repr(self) -> str:
        return f"channels={self.channels}"


class SqueezeExcitation(_ImageBlock):
    """Squeeze-and-excitation (Hu et al. 2018): channel gates from the global average.

    Args: ``channels`` C, ``reduction`` r (hidden width max(1, C // r)). Shapes: ``[B, C, H, W]`` in and out.
    """

    name = "se"

    def __init__(self, channels: int, *, reduction: int = 16) -> None:
        super().__init__(channels)
        check_positive(self.name, "reduction", reduction, allow_none=False)
        self.reduction = reduction
        hidden = max(1, channels // reduction)
        self.fc1 = nn.Linear(channels, hidden)
        self.fc2 = nn.Linear(hidden, channels)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        gates = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean(dim=(2, 3))))))  # [B, C]
        return x * gates[:, :, None, None]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reduction={self.reduction}"


def eca_kernel_size(channels: int, gamma: int = 2, b: int = 1) -> int:
    """ECA's adaptive kernel: the odd number nearest |(log2 C + b) / γ| (rounding up)."""
    t = int(abs((math.log2(channels) + b) / gamma))
    return t if t % 2 else t + 1


class EfficientChannelAttention(_ImageBlock):
    """Efficient channel attention (Wang et al. 2020): a 1-D convolution across the channel descriptors,
    no dimensionality reduction.

    Args: ``channels`` C, ``kernel_size`` k (None: ECA's adaptive choice from C; odd).
    Shapes: ``[B, C, H, W]`` in and out.
    """

    name = "eca"

    def __init__(self, channels: int, *, kernel_size: int | None = None) -> None:
        super().__init__(channels)
        check_positive(self.name, "kernel_size", kernel_size)
        k = kernel_size or eca_kernel_size(channels)
        if k % 2 == 0:
            raise ValueError(f"{self.name}: kernel_size must be odd (it is centred on each channel), got {k}")
        self.kernel_size = k
        self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        descriptor = x.mean(dim=(2, 3)).unsqueeze(1)  # [B, 1, C]
        gates = torch.sigmoid(self.conv(descriptor)).squeeze(1)  # [B, C]
        return x * gates[:, :, None, None]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel_size={self.kernel_size}"


class CBAM(_ImageBlock):
    """Convolutional block attention module (Woo et al. 2018): channel attention, then spatial attention.

    Args: ``channels`` C, ``reduction`` r of the shared channel MLP, ``kernel_size`` of the spatial
    convolution (7). Shapes: ``[B, C, H, W]`` in and out. (The spatial convolution has no BatchNorm.)
    """

    name = "cbam"

    def __init__(self, channels: int, *, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels)
        check_positive(self.name, "reduction", reduction, allow_none=False)
        check_positive(self.name, "kernel_size", kernel_size, allow_none=False)
        if kernel_size % 2 == 0:
            raise ValueError(f"{self.name}: kernel_size must be odd, got {kernel_size}")
        self.reduction, self.kernel_size = reduction, kernel_size
        hidden = max(1, channels // reduction)
        self.fc1 = nn.Linear(channels, hidden)
        self.fc2 = nn.Linear(hidden, channels)
        self.spatial = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)

        def mlp(v: Tensor) -> Tensor:
            return self.fc2(F.relu(self.fc1(v)))

        channel = torch.sigmoid(mlp(x.mean(dim=(2, 3))) + mlp(x.amax(dim=(2, 3))))  # [B, C]
        x = x * channel[:, :, None, None]
        pooled = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)  # [B, 2, H, W]
        return x * torch.sigmoid(self.spatial(pooled))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reduction={self.reduction}, kernel_size={self.kernel_size}"


class CoordinateAttention(_ImageBlock):
    """Coordinate attention (Hou et al. 2021): gates per row and per column from direction-aware pooling.

    Args: ``channels`` C, ``reduction`` r (hidden width max(8, C // r)). Shapes: ``[B, C, H, W]`` in and out.
    """

    name = "coord_attn"

    def __init__(self, channels: int, *, reduction: int = 32) -> None:
        super().__init__(channels)
        check_positive(self.name, "reduction", reduction, allow_none=False)
        self.reduction = reduction
        hidden = max(8, channels // reduction)
        self.conv1 = nn.Conv2d(channels, hidden, 1)
        self.bn = nn.BatchNorm2d(hidden)
        self.conv_h = nn.Conv2d(hidden, channels, 1)
        self.conv_w = nn.Conv2d(hidden, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        height = x.shape[2]
        along_h = x.mean(dim=3, keepdim=True)  # [B, C, H, 1]
        along_w = x.mean(dim=2, keepdim=True).transpose(2, 3)  # [B, C, W, 1]
        y = F.hardswish(self.bn(self.conv1(torch.cat([along_h, along_w], dim=2))))
        y_h, y_w = y[:, :, :height], y[:, :, height:]
        gate_h = torch.sigmoid(self.conv_h(y_h))  # [B, C, H, 1]
        gate_w = torch.sigmoid(self.conv_w(y_w.transpose(2, 3)))  # [B, C, 1, W]
        return x * gate_h * gate_w

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reduction={self.reduction}"


class NonLocalBlock(_ImageBlock):
    """Non-local block, embedded Gaussian (Wang et al. 2018): every position attends to every other.

    Args: ``channels`` C, ``inter_channels`` (None: C // 2, at least 1). Shapes: ``[B, C, H, W]`` in and
    out. The attention over the N = H·W positions is one fused SDPA call (scale 1, as the paper's
    softmax of dot products); the output BatchNorm starts at γ = 0, so the block starts as the identity.
    """

    name = "non_local"

    def __init__(self, channels: int, *, inter_channels: int | None = None) -> None:
        super().__init__(channels)
        check_positive(self.name, "inter_channels", inter_channels)
        inner = inter_channels or max(1, channels // 2)
        self.inter_channels = inner
        self.theta = nn.Conv2d(channels, inner, 1)
        self.phi = nn.Conv2d(channels, inner, 1)
        self.g = nn.Conv2d(channels, inner, 1)
        self.w_z = nn.Conv2d(inner, channels, 1)
        self.bn = nn.BatchNorm2d(channels)
        nn.init.zeros_(self.bn.weight)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        batch, _, height, width = x.shape

        def positions(conv: nn.Module) -> Tensor:
            return conv(x).flatten(2).transpose(1, 2).unsqueeze(1)  # [B, 1, N, C']

        y, _ = attend(positions(self.theta), positions(self.phi), positions(self.g), scale=1.0)
        y = y.squeeze(1).transpose(1, 2).reshape(batch, self.inter_channels, height, width)
        return x + self.bn(self.w_z(y))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, inter_channels={self.inter_channels}"


class ExternalAttention(_ImageBlock):
    """External attention (Guo et al. 2021): two small learned memories replace self-attention's keys and
    values, shared by all samples; cost linear in the number of positions.

        A = softmax over positions of x M_kᵀ [B, N, S], then each row divided by its sum over S (the double
        normalisation); out = A M_v [B, N, C]

    Args: ``channels`` C, ``memory_size`` S (64). Shapes: ``[B, C, H, W]`` in and out.
    """

    name = "external_attn"

    def __init__(self, channels: int, *, memory_size: int = 64) -> None:
        super().__init__(channels)
        check_positive(self.name, "memory_size", memory_size, allow_none=False)
        self.memory_size = memory_size
        self.memory_key = nn.Linear(channels, memory_size, bias=False)
        self.memory_value = nn.Linear(memory_size, channels, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        batch, channels, height, width = x.shape
        tokens = x.flatten(2).transpose(1, 2)  # [B, N, C]
        work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        logits = self.memory_key(tokens).to(work)  # [B, N, S]
        # softmax over positions, then each row divided by its sum over the memory, done in log space:
        # p / Σ_s p = softmax_S(log p), log p = logits - logsumexp_N(logits); no 0 / 0 when the first
        # softmax underflows a whole row
        attn = torch.softmax(logits - torch.logsumexp(logits, dim=1, keepdim=True), dim=2)
        out = self.memory_value(attn.to(x.dtype))
        return out.transpose(1, 2).reshape(batch, channels, height, width)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, memory_size={self.memory_size}"
