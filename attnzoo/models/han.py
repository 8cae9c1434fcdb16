"""Hierarchical attention network (registry ``han``; Yang et al. 2016): words into sentences into a document.

    tokens [B, S, W] (S sentences of W words; 0 = padding) -> embedding          [B, S, W, E]
    word BiGRU over each sentence, h_it                                           [B·S, W, 2·word_hidden]
    word attention:     u_it = tanh(W_w h_it + b_w),  α_it = softmax_t(u_itᵀ u_w),  s_i = Σ_t α_it h_it
    sentence BiGRU over the s_i, h_i                                              [B, S, 2·sentence_hidden]
    sentence attention: u_i = tanh(W_s h_i + b_s),    β_i = softmax_i(u_iᵀ u_s),    v = Σ_i β_i h_i
    Linear                                                                         logits [B, L]

Masks at both levels: ``mask`` [B, S, W] (default ``tokens != 0``) says which words are real; a sentence
is real if any of its words is. Each GRU reads its sequences up to their lengths (right padding at both
levels), and both attentions ignore padding, so neither padded words nor padded sentences change a
document's output. With ``return_attention`` the weights are ``β_i α_it`` [B, S, W]: each document's
attention over its words (summing to one), the product of the two levels.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnzoo.layers.core import check_mask, check_positive, check_probability, check_tokens, neutralise, tracing
from attnzoo.layers.pooling import AttentionPooling
from attnzoo.models.text import run_packed

__all__ = ["HierarchicalAttentionNetwork"]


def _right_padded(name: str, mask: Tensor, what: str) -> None:
    if (
        mask.shape[-1] > 1
        and mask.device.type != "meta"
        and not tracing()
        and bool((mask[..., 1:] & ~mask[..., :-1]).any())
    ):
        raise ValueError(
            f"{name} reads {what} up to their lengths, so the real ones must come first (right "
            f"padding); the mask has padding before a real position"
        )


class HierarchicalAttentionNetwork(nn.Module):
    """Args: ``vocab_size``, ``num_classes``, ``embed_dim`` (100), ``word_hidden`` and ``sentence_hidden``
    (GRU units per direction, 50), ``attention_size`` (100, both levels), ``dropout`` (before the classifier).

    Shapes: ``forward(tokens [B, S, W], mask [B, S, W] = tokens != 0, return_attention=False)`` ->
    logits [B, L], or ``(logits, A [B, S, W])`` (see the module doc).
    """

    name = "han"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 100,
        word_hidden: int = 50,
        sentence_hidden: int = 50,
        attention_size: int = 100,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for key, value in (
            ("vocab_size", vocab_size),
            ("num_classes", num_classes),
            ("embed_dim", embed_dim),
            ("word_hidden", word_hidden),
            ("sentence_hidden", sentence_hidden),
            ("attention_size", attention_size),
        ):
            check_positive(self.name, key, value, allow_none=False)
        check_probability(self.name, "dropout", dropout)
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.word_gru = nn.GRU(embed_dim, word_hidden, batch_first=True, bidirectional=True)
        self.word_attention = AttentionPooling(2 * word_hidden, attention_size=attention_size)
        self.sentence_gru = nn.GRU(2 * word_hidden, sentence_hidden, batch_first=True, bidirectional=True)
        self.sentence_attention = AttentionPooling(2 * sentence_hidden, attention_size=attention_size)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * sentence_hidden, num_classes)
        # the attention layers' input errors are this model's
        self.word_attention.name = self.sentence_attention.name = self.name

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        check_tokens(self.name, tokens, self.vocab_size, rank=3, like=self.embedding.weight)
        batch, sentences, words = tokens.shape
        if mask is None:
            mask = tokens != 0
        else:
            if not isinstance(mask, Tensor) or tuple(mask.shape) != tuple(tokens.shape):
                shape = list(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(
                    f"{self.name} expects mask of shape {list(tokens.shape)} (True = real word), got {shape}"
                )
            mask = check_mask(
                self.name, mask.reshape(batch, sentences * words), batch, 1, sentences * words, like=tokens
            )[:, 0].reshape(batch, sentences, words)
        _right_padded(self.name, mask, "the words of each sentence")
        sentence_mask = mask.any(dim=-1)  # [B, S]
        _right_padded(self.name, sentence_mask, "the sentences of each document")

        x = neutralise(self.embedding(tokens), mask)  # [B, S, W, E]
        flat_mask = mask.reshape(batch * sentences, words)
        h = run_packed(self.word_gru, x.reshape(batch * sentences, words, x.shape[-1]), flat_mask)
        sentence_vectors, alpha = self.word_attention(h, flat_mask, return_attention=True)
        sentence_vectors = sentence_vectors.reshape(batch, sentences, sentence_vectors.shape[-1])
        hs = run_packed(self.sentence_gru, sentence_vectors, sentence_mask)
        document, beta = self.sentence_attention(hs, sentence_mask, return_attention=True)
        logits = self.classifier(self.dropout(document))
        if not return_attention:
            return logits
        return logits, beta.unsqueeze(-1) * alpha.reshape(batch, sentences, words)
