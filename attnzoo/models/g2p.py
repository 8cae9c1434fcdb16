"""Grapheme-to-phoneme with Luong attention (registry ``g2p_seq2seq``).

    letters [B, S] -> embedding -> BiLSTM encoder            -> h̄ [B, S, 2·hidden]
    phonemes so far [B, U] -> embedding -> LSTM decoder        -> h  [B, U, decoder_hidden]
    seq2seq_attn (Luong, score general): c_t = Σ_s a_ts h̄_s,  h̃_t = tanh(Wc [c_t; h_t])
    Linear                                                     -> logits [B, U, num_phonemes]

With ``input_feeding`` (Luong et al. 2015, section 3.3) the decoder reads [embedding(y_{t-1}); h̃_{t-1}],
so it knows what it attended to one step before; training then runs the decoder step by step. Without
it a whole teacher-forced target is one LSTM call and one attention call. ``generate`` decodes greedily
(``beam_size=1``) or with beam search, scoring a finished hypothesis by its log-probability divided by
``length ** length_penalty``. The attention weights [B, U, S] are the alignment of phonemes to letters.
Ids: 0 is padding in both vocabularies; the target vocabulary has ``<s>`` = 1 and ``</s>`` = 2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..layers.core import check_positive, check_probability, check_tokens, neutralise
from ..layers.scores import Seq2SeqAttention
from .text import run_packed, token_mask

__all__ = ["G2PSeq2Seq", "BOS", "EOS"]

BOS, EOS = 1, 2

# the decoder's state between steps: LSTM (h, c) [1, B, Hd] and, with input feeding, h̃ [B, Hd]
DecoderState = tuple[Tensor, Tensor, Tensor | None]


class G2PSeq2Seq(nn.Module):
    """Args: num_letters, num_phonemes (vocabulary sizes, specials included), embed_dim, hidden (encoder,
    per direction), decoder_hidden, score (dot | general | additive), dropout (also between stacked encoder
    layers), input_feeding, encoder_layers (stacked BiLSTM layers; 1 is the shipped model's layout).

    Shapes: ``forward(letters [B, S], phonemes_in [B, U], mask [B, S] = letters != 0,
    return_attention=False)`` -> logits [B, U, P], or ``(logits, A [B, U, S])``.
    """

    name = "g2p_seq2seq"

    def __init__(
        self,
        num_letters: int,
        num_phonemes: int,
        *,
        embed_dim: int = 64,
        hidden: int = 128,
        decoder_hidden: int = 256,
        score: str = "general",
        dropout: float = 0.1,
        input_feeding: bool = False,
        encoder_layers: int = 1,
    ) -> None:
        super().__init__()
        for key, value in (
            ("num_letters", num_letters),
            ("num_phonemes", num_phonemes),
            ("embed_dim", embed_dim),
            ("hidden", hidden),
            ("decoder_hidden", decoder_hidden),
            ("encoder_layers", encoder_layers),
        ):
            check_positive(self.name, key, value, allow_none=False)
        check_probability(self.name, "dropout", dropout)
        self.num_letters, self.num_phonemes = num_letters, num_phonemes
        self.input_feeding = bool(input_feeding)
        self.letter_embedding = nn.Embedding(num_letters, embed_dim, padding_idx=0)
        self.encoder = nn.LSTM(
            embed_dim,
            hidden,
            num_layers=encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if encoder_layers > 1 else 0.0,
        )
        self.bridge = nn.Linear(2 * hidden, 2 * decoder_hidden)  # mean encoder state -> decoder (h0, c0)
        self.phoneme_embedding = nn.Embedding(num_phonemes, embed_dim, padding_idx=0)
        decoder_input = embed_dim + (decoder_hidden if self.input_feeding else 0)
        self.decoder = nn.LSTM(decoder_input, decoder_hidden, batch_first=True)
        self.attention = Seq2SeqAttention(
            score, decoder_size=decoder_hidden, encoder_size=2 * hidden, output_size=decoder_hidden
        )
        self.attention.name = self.name  # its input errors are this model's
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(decoder_hidden, num_phonemes)

    def encode(self, letters: Tensor, mask: Tensor) -> tuple[Tensor, DecoderState]:
        """Encoder states [B, S, 2·hidden] and the decoder's first state (h0, c0, h̃0 = 0)."""
        x = neutralise(self.dropout(self.letter_embedding(letters)), mask)
        encoded = run_packed(self.encoder, x, mask)
        mean = (encoded * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        h0, c0 = torch.tanh(self.bridge(mean)).chunk(2, dim=-1)
        feed = h0.new_zeros(h0.shape) if self.input_feeding else None
        return encoded, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous(), feed)

    def decode_step(self, phonemes: Tensor, encoded: Tensor, mask: Tensor, state: DecoderState):
        """Decode ``phonemes`` [B, U] (teacher-forced, or U = 1 while generating) from ``state``:
        (logits [B, U, P], weights [B, U, S], the state after the last step)."""
        h, c, feed = state
        embedded = self.dropout(self.phoneme_embedding(phonemes))
        if not self.input_feeding:
            hidden, (h, c) = self.decoder(embedded, (h, c))
            attended, weights = self.attention(hidden, encoded, mask)
            return self.out(self.dropout(attended)), weights, (h, c, None)
        outputs, maps = [], []
        for t in range(phonemes.shape[1]):  # each step reads the attentional state of the one before
            hidden, (h, c) = self.decoder(torch.cat([embedded[:, t : t + 1], feed.unsqueeze(1)], dim=-1), (h, c))
            attended, weights = self.attention(hidden, encoded, mask)
            feed = attended.squeeze(1)
            outputs.append(attended)
            maps.append(weights)
        attended, weights = torch.cat(outputs, 1), torch.cat(maps, 1)
        return self.out(self.dropout(attended)), weights, (h, c, feed)

    def forward(self, letters: Tensor, phonemes_in: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        like = self.out.weight
        mask = token_mask(self.name, letters, mask, self.num_letters, like=like)
        check_tokens(self.name, phonemes_in, self.num_phonemes, "phonemes_in", like=like)
        if phonemes_in.shape[0] != letters.shape[0]:
            raise ValueError(
                f"{self.name} expects phonemes_in with the letters' batch size {letters.shape[0]}, "
                f"got {list(phonemes_in.shape)}"
            )
        encoded, state = self.encode(letters, mask)
        logits, weights, _ = self.decode_step(phonemes_in, encoded, mask, state)
        return (logits, weights) if return_attention else logits

    @torch.no_grad()
    def generate(
        self, letters: Tensor, max_len: int = 32, *, beam_size: int = 1, length_penalty: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        """Decode letters [B, S] -> (phoneme ids [B, U] ending at </s>, 0-padded after it; A [B, U, S]).

        ``beam_size`` 1 is greedy. With a beam, each word keeps its ``beam_size`` best prefixes by summed
        log-probability; a prefix that emits </s> is finished and scored ``log p / length ** length_penalty``
        (length counts </s>); decoding stops when every word has ``beam_size`` finished hypotheses whose
        best cannot be beaten by a live prefix, or at ``max_len``; the best finished one is returned."""
        mask = token_mask(self.name, letters, None, self.num_letters, like=self.out.weight)
        check_positive(self.name, "beam_size", beam_size, allow_none=False)
        check_positive(self.name, "max_len", max_len, allow_none=False)
        encoded, state = self.encode(letters, mask)
        if beam_size == 1:
            return self._greedy(encoded, mask, state, max_len)
        return self._beam(encoded, mask, state, max_len, beam_size, float(length_penalty))

    def _greedy(self, encoded: Tensor, mask: Tensor, state: DecoderState, max_len: int) -> tuple[Tensor, Tensor]:
        batch = encoded.shape[0]
        step = torch.full((batch, 1), BOS, dtype=torch.long, device=encoded.device)
        outputs, maps = [], []
        finished = torch.zeros(batch, dtype=torch.bool, device=encoded.device)
        for _ in range(max_len):
            logits, weights, state = self.decode_step(step, encoded, mask, state)
            step = logits.argmax(-1).masked_fill(finished.unsqueeze(1), 0)
            outputs.append(step)
            maps.append(weights.masked_fill(finished[:, None, None], 0.0))
            finished |= step.squeeze(1) == EOS
            if bool(finished.all()):
                break
        return torch.cat(outputs, 1), torch.cat(maps, 1)

    def _beam(
        self, encoded: Tensor, mask: Tensor, state: DecoderState, max_len: int, beam: int, length_penalty: float
    ) -> tuple[Tensor, Tensor]:
        batch, seq = encoded.shape[0], encoded.shape[1]
        device = encoded.device
        # every word's prefixes side by side: row b * beam + k
        encoded, mask = encoded.repeat_interleave(beam, 0), mask.repeat_interleave(beam, 0)
        h, c, feed = state
        state = (
            h.repeat_interleave(beam, 1),
            c.repeat_interleave(beam, 1),
            None if feed is None else feed.repeat_interleave(beam, 0),
        )
        scores = torch.full((batch, beam), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one live prefix (<s>) to start with
        tokens = torch.full((batch * beam, 0), 0, dtype=torch.long, device=device)
        maps = encoded.new_zeros(batch * beam, 0, seq)
        step = torch.full((batch * beam, 1), BOS, dtype=torch.long, device=device)
        best: list[list[tuple[float, Tensor, Tensor]]] = [[] for _ in range(batch)]
        for length in range(1, max_len + 1):
            logits, weights, state = self.decode_step(step, encoded, mask, state)
            vocab = logits.shape[-1]
            logp = torch.log_softmax(logits.squeeze(1).float(), dim=-1)
            logp[:, : BOS + 1] = float("-inf")  # padding and <s> are never emitted
            total = (scores.view(-1, 1) + logp).view(batch, beam * vocab)
            top, index = total.topk(2 * beam, dim=1)  # room for beam live ones after the finished
            origin, symbol = index // vocab, index % vocab
            rows = torch.arange(batch, device=device).unsqueeze(1) * beam + origin  # [B, 2·beam]
            new_scores = torch.full((batch, beam), float("-inf"), device=device)
            chosen = torch.zeros(batch, beam, dtype=torch.long, device=device)
            chosen_symbol = torch.zeros(batch, beam, dtype=torch.long, device=device)
            top_l, rows_l, symbol_l = top.tolist(), rows.tolist(), symbol.tolist()
            for b in range(batch):
                kept = 0
                for score, row, sym in zip(top_l[b], rows_l[b], symbol_l[b], strict=True):
                    if score == float("-inf"):
                        break
                    if sym == EOS:
                        if len(best[b]) < beam or score / length**length_penalty > best[b][-1][0]:
                            ids = torch.cat([tokens[row], tokens.new_tensor([EOS])])
                            best[b].append(
                                (score / length**length_penalty, ids, torch.cat([maps[row], weights[row]], 0))
                            )
                            best[b].sort(key=lambda item: -item[0])
                            del best[b][beam:]
                    elif kept < beam:
                        new_scores[b, kept], chosen[b, kept], chosen_symbol[b, kept] = score, row, sym
                        kept += 1
            scores = new_scores
            order = chosen.view(-1)
            tokens = torch.cat([tokens[order], chosen_symbol.view(-1, 1)], 1)
            maps = torch.cat([maps[order], weights[order]], 1)
            h, c, feed = state
            state = (h[:, order], c[:, order], None if feed is None else feed[order])
            step = chosen_symbol.view(-1, 1)
            # a word is done when its worst kept hypothesis beats what any live prefix could still reach
            # (scores only fall as a prefix grows; the length divisor can grow to max_len ** penalty)
            reach = scores.max(dim=1).values.tolist()
            if all(
                len(best[b]) == beam
                and (
                    reach[b] == float("-inf")
                    or best[b][-1][0] >= self._bound(reach[b], length, max_len, length_penalty)
                )
                for b in range(batch)
            ):
                break
        out_ids, out_maps = [], []
        for b in range(batch):
            if best[b]:
                _, ids, alignment = best[b][0]
            else:  # nothing finished within max_len: the best live prefix
                row = b * beam + int(scores[b].argmax())
                ids, alignment = tokens[row], maps[row]
            out_ids.append(ids)
            out_maps.append(alignment)
        width = max(len(ids) for ids in out_ids)
        ids = torch.zeros(batch, width, dtype=torch.long, device=device)
        alignment = encoded.new_zeros(batch, width, seq)
        for b, (row_ids, row_map) in enumerate(zip(out_ids, out_maps, strict=True)):
            ids[b, : len(row_ids)] = row_ids
            alignment[b, : len(row_ids)] = row_map
        return ids, alignment

    @staticmethod
    def _bound(live: float, length: int, max_len: int, length_penalty: float) -> float:
        """The best normalised score a live prefix with summed log-probability ``live`` could still end with."""
        if length_penalty <= 0:
            return live / (length + 1) ** length_penalty
        return live / max_len**length_penalty
