"""Gated attention pooling (Ilse et al. 2018), following attnzoo's calling convention for pooling:

    a_t = softmax_t(wᵀ (tanh(V h_t) ⊙ sigmoid(U h_t)))        [B, T]   masked (True = attend)
    c   = Σ_t a_t h_t                                         [B, H]

Shapes: forward(x [B, T, H], mask [B, T] = None, return_attention=False) -> c [B, H] or (c, a).
The card says ``convention: sequence_to_vector``, so ``attnzoo check example:gated_pool`` (or
``attnzoo.testing.check_model``) proves it keeps attnzoo's promises.
"""

import torch
from torch import nn

from attnzoo.layers.core import check_input, check_mask, masked_softmax, neutralise


class GatedAttentionPooling(nn.Module):
    name = "gated_pool"

    def __init__(self, hidden_size: int, *, attention_size: int = 64):
        super().__init__()
        self.hidden_size = hidden_size
        self.V = nn.Linear(hidden_size, attention_size)
        self.U = nn.Linear(hidden_size, attention_size)
        self.w = nn.Linear(attention_size, 1, bias=False)

    def forward(self, x, mask=None, return_attention=False):
        # the shared checks: shapes, dtype and device against the weights, a boolean mask
        check_input(self.name, "x", x, ("batch", "seq", self.hidden_size), like=self.w.weight)
        mask = check_mask(self.name, mask, x.shape[0], 1, x.shape[1], like=x)  # [B, 1, T] or None
        x = neutralise(x, None if mask is None else mask[:, 0])  # padding never reaches the arithmetic
        scores = self.w(torch.tanh(self.V(x)) * torch.sigmoid(self.U(x))).squeeze(-1)  # [B, T]
        weights = masked_softmax(scores.unsqueeze(1), mask).squeeze(1)  # a fully masked row: zeros
        pooled = torch.bmm(weights.unsqueeze(1), x).squeeze(1)
        return (pooled, weights) if return_attention else pooled
