"""Text classifiers: token embedding -> BiLSTM encoder -> an attention head.

    tokens [B, T] (ids, 0 = padding)  -> embedding [B, T, E] -> BiLSTM -> H [B, T, h = 2·hidden]
    BiLSTMLabelwise   (``bilstm_labelwise``):  label-wise attention  -> logits [B, L]    multi-label
    BiLSTMAttnPool    (``bilstm_attn_pool``):  attention pooling -> Linear -> logits [B, C]   single-label

The mask defaults to ``tokens != 0``, so padding never changes a text's output. The LSTM reads each
text only up to its length (packed), so its backward direction does not start in the padding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..layers.labelwise import LabelwiseAttentionBatched
from ..layers.pooling import AttentionPooling

__all__ = ["BiLSTMEncoder", "BiLSTMLabelwise", "BiLSTMAttnPool", "check_tokens"]


def check_tokens(name: str, tokens: Tensor, vocab_size: int) -> None:
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        shape = list(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name} expects token ids of shape [batch, seq] (integers), got {shape}")


class BiLSTMEncoder(nn.Module):
    """Embedding + bidirectional LSTM. tokens [B, T], mask [B, T] -> H [B, T, 2·hidden]."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        x = self.dropout(self.embedding(tokens))
        if x.device.type == "meta":
            return self.lstm(x)[0]
        lengths = mask.sum(-1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=tokens.shape[1])
        return self.dropout(out)


class _TextModel(nn.Module):
    name = "text"

    def _mask(self, tokens: Tensor, mask: Tensor | None) -> Tensor:
        check_tokens(self.name, tokens, self.vocab_size)
        if mask is None:
            return tokens != 0
        if tuple(mask.shape) != tuple(tokens.shape):
            raise ValueError(f"{self.name} expects mask of shape {list(tokens.shape)}, got {list(mask.shape)}")
        return mask.bool()

    def example_inputs(self, batch: int = 2, seq: int = 7):
        device = self.encoder.embedding.weight.device
        tokens = torch.randint(1, self.vocab_size, (batch, seq), device=device)
        tokens[-1, seq // 2 + 1 :] = 0
        return (tokens,), {}


class BiLSTMLabelwise(_TextModel):
    """Multi-label text classifier with label-wise attention (LWAN, Chalkidis et al. 2019).

    Args: vocab_size, num_labels, embed_dim, hidden (per direction), layers, dropout.
    Shapes: ``forward(tokens [B, T], mask [B, T] = tokens != 0, return_attention=False)`` ->
    logits [B, L], or ``(logits [B, L], A [B, L, T])``.
    """

    name = "bilstm_labelwise"

    def __init__(self, vocab_size: int, num_labels: int, embed_dim: int = 128, hidden: int = 128,
                 layers: int = 1, dropout: float = 0.2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.encoder = BiLSTMEncoder(vocab_size, embed_dim, hidden, layers, dropout)
        self.head = LabelwiseAttentionBatched(num_labels, 2 * hidden)

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        mask = self._mask(tokens, mask)
        return self.head(self.encoder(tokens, mask), mask, return_attention=return_attention)


class BiLSTMAttnPool(_TextModel):
    """Single-label text classifier: BiLSTM, additive attention pooling, linear classifier.

    Args: vocab_size, num_classes, embed_dim, hidden (per direction), attention_size, layers, dropout.
    Shapes: ``forward(tokens [B, T], mask [B, T] = tokens != 0, return_attention=False)`` ->
    logits [B, C], or ``(logits [B, C], a [B, T])``.
    """

    name = "bilstm_attn_pool"

    def __init__(self, vocab_size: int, num_classes: int, embed_dim: int = 128, hidden: int = 128,
                 attention_size: int | None = None, layers: int = 1, dropout: float = 0.2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.encoder = BiLSTMEncoder(vocab_size, embed_dim, hidden, layers, dropout)
        self.pool = AttentionPooling(2 * hidden, attention_size)
        self.classifier = nn.Linear(2 * hidden, num_classes)

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        mask = self._mask(tokens, mask)
        hidden = self.encoder(tokens, mask)
        if return_attention:
            pooled, weights = self.pool(hidden, mask, return_attention=True)
            return self.classifier(pooled), weights
        return self.classifier(self.pool(hidden, mask))
