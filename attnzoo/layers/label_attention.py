"""The label-attention family: every head is attention with a learned label matrix as the query.

    LWAN (Chalkidis et al. 2019)   A = softmax_T(H Waᵀ),  y_l = <Wo_l, A_l H> + bo_l      Wa, Wo [L, h], bo [L]

H is the encoder output [B, T, h]; A [B, L, T] is masked over T (True = attend). All heads route
through ``core.label_attention``: without ``return_attention`` they never keep a [B, L, T] tensor for
backward at scale, and with it the weights are materialised ``chunk_size`` labels at a time.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .keras_layers import KerasVar
from .labelwise import LabelwiseAttentionBatched

__all__ = ["LWAN", "keras_he_normal_"]


def keras_he_normal_(tensor: torch.Tensor) -> torch.Tensor:
    """Keras's ``he_normal`` on a 2-D weight: truncated normal (±2σ) with σ = sqrt(2 / fan_in), where
    Keras takes fan_in = shape[0] (its kernels are [in, out]), corrected for the truncation."""
    std = math.sqrt(2.0 / tensor.shape[0]) / 0.87962566103423978
    return nn.init.trunc_normal_(tensor, std=std, a=-2 * std, b=2 * std)


class LWAN(LabelwiseAttentionBatched):
    """LabelWiseAttention of Chalkidis et al. 2019, the Keras original of seed 004.

    Args: ``num_labels``, ``hidden_size`` (None: inferred), ``output`` ("logits" | "probs"; the Keras
    layer returns probabilities), ``chunk_size``. Initialisation as the original: Wa, Wo he_normal,
    bo zeros. The original ignores padding; here ``mask`` [B, T] is applied when given.

    Shapes: ``forward(x [B, T, h], mask [B, T] = None, return_attention=False)`` -> logits [B, L]
    (or probabilities), or ``(…, A [B, L, T])``.
    """

    name = "lwan"

    def __init__(self, num_labels: int, hidden_size: int | None = None, output: str = "logits",
                 chunk_size: int | None = None, device=None, dtype=None) -> None:
        super().__init__(num_labels, hidden_size, shared_output=False, output=output, chunk_size=chunk_size,
                         device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if self.has_uninitialized_params():
            return
        with torch.no_grad():
            keras_he_normal_(self.Wa)
            keras_he_normal_(self.Wo)
            nn.init.zeros_(self.bo)

    def keras_layout(self) -> list[KerasVar]:
        return [KerasVar("Wa", "vars/0", "Wa"), KerasVar("Wo", "vars/1", "Wo"), KerasVar("bo", "vars/2", "bo")]
