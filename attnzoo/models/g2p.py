"""Grapheme-to-phoneme with Luong attention (registry ``g2p_seq2seq``).

    letters [B, S] -> embedding -> BiLSTM encoder            -> h̄ [B, S, 2·hidden]
    phonemes so far [B, U] -> embedding -> LSTM decoder        -> h  [B, U, decoder_hidden]
    seq2seq_attn (Luong, score general): c_t = Σ_s a_ts h̄_s,  h̃_t = tanh(Wc [c_t; h_t])
    Linear                                                     -> logits [B, U, num_phonemes]

The decoder is not input-fed, so a whole teacher-forced target is one LSTM call and one attention call
in training; ``generate`` decodes greedily one step at a time with the same modules. The attention
weights [B, U, S] are the alignment of phonemes to letters. Ids: 0 is padding in both vocabularies;
the target vocabulary has ``<s>`` = 1 and ``</s>`` = 2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..layers.core import check_positive, check_probability, check_tokens, neutralise
from ..layers.scores import Seq2SeqAttention
from .text import run_packed, token_mask

__all__ = ["G2PSeq2Seq", "BOS", "EOS"]

BOS, EOS = 1, 2


class G2PSeq2Seq(nn.Module):
    """Args: num_letters, num_phonemes (vocabulary sizes, specials included), embed_dim, hidden (encoder,
    per direction), decoder_hidden, score (dot | general | additive), dropout.

    Shapes: ``forward(letters [B, S], phonemes_in [B, U], mask [B, S] = letters != 0,
    return_attention=False)`` -> logits [B, U, P], or ``(logits, A [B, U, S])``.
    """

    name = "g2p_seq2seq"

    def __init__(self, num_letters: int, num_phonemes: int, *, embed_dim: int = 64, hidden: int = 128,
                 decoder_hidden: int = 256, score: str = "general", dropout: float = 0.1) -> None:
        super().__init__()
        for key, value in (("num_letters", num_letters), ("num_phonemes", num_phonemes), ("embed_dim", embed_dim),
                           ("hidden", hidden), ("decoder_hidden", decoder_hidden)):
            check_positive(self.name, key, value, allow_none=False)
        check_probability(self.name, "dropout", dropout)
        self.num_letters, self.num_phonemes = num_letters, num_phonemes
        self.letter_embedding = nn.Embedding(num_letters, embed_dim, padding_idx=0)
        self.encoder = nn.LSTM(embed_dim, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, 2 * decoder_hidden)  # mean encoder state -> decoder (h0, c0)
        self.phoneme_embedding = nn.Embedding(num_phonemes, embed_dim, padding_idx=0)
        self.decoder = nn.LSTM(embed_dim, decoder_hidden, batch_first=True)
        self.attention = Seq2SeqAttention(score, decoder_size=decoder_hidden, encoder_size=2 * hidden,
                                          output_size=decoder_hidden)
        self.attention.name = self.name  # its input errors are this model's
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(decoder_hidden, num_phonemes)

    def encode(self, letters: Tensor, mask: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        x = neutralise(self.dropout(self.letter_embedding(letters)), mask)
        encoded = run_packed(self.encoder, x, mask)
        mean = (encoded * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        h0, c0 = torch.tanh(self.bridge(mean)).chunk(2, dim=-1)
        return encoded, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous())

    def decode_step(self, phonemes: Tensor, encoded: Tensor, mask: Tensor, state):
        hidden, state = self.decoder(self.dropout(self.phoneme_embedding(phonemes)), state)
        attended, weights = self.attention(hidden, encoded, mask)
        return self.out(self.dropout(attended)), weights, state

    def forward(self, letters: Tensor, phonemes_in: Tensor, mask: Tensor | None = None,
                return_attention: bool = False):
        like = self.out.weight
        mask = token_mask(self.name, letters, mask, self.num_letters, like=like)
        check_tokens(self.name, phonemes_in, self.num_phonemes, "phonemes_in", like=like)
        if phonemes_in.shape[0] != letters.shape[0]:
            raise ValueError(f"{self.name} expects phonemes_in with the letters' batch size {letters.shape[0]}, "
                             f"got {list(phonemes_in.shape)}")
        encoded, state = self.encode(letters, mask)
        logits, weights, _ = self.decode_step(phonemes_in, encoded, mask, state)
        return (logits, weights) if return_attention else logits

    @torch.no_grad()
    def generate(self, letters: Tensor, max_len: int = 32) -> tuple[Tensor, Tensor]:
        """Greedy decoding: letters [B, S] -> (phoneme ids [B, U] ending at </s> or 0-padded, A [B, U, S])."""
        mask = letters != 0
        encoded, state = self.encode(letters, mask)
        step = torch.full((letters.shape[0], 1), BOS, dtype=torch.long, device=letters.device)
        outputs, maps = [], []
        finished = torch.zeros(letters.shape[0], dtype=torch.bool, device=letters.device)
        for _ in range(max_len):
            logits, weights, state = self.decode_step(step, encoded, mask, state)
            step = logits.argmax(-1)
            step = step.masked_fill(finished.unsqueeze(1), 0)
            outputs.append(step)
            maps.append(weights)
            finished |= step.squeeze(1) == EOS
            if bool(finished.all()):
                break
        return torch.cat(outputs, 1), torch.cat(maps, 1)
