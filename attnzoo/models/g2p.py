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

``G2PEnsemble`` (registry ``g2p_ensemble``) holds N such models trained apart (other seeds) and decodes
with the mean of their next-phoneme distributions, p(y_t | ·) = (1/N) Σ_n p_n(y_t | ·): each member keeps
its own encoder states and decoder state, the search is the one above over the mixed log-probabilities.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.layers.core import check_positive, check_probability, check_tokens, neutralise, positive_error
from attnzoo.layers.scores import Seq2SeqAttention
from attnzoo.models.text import run_packed, token_mask

__all__ = ["G2PSeq2Seq", "G2PEnsemble", "BOS", "EOS", "MAX_BEAM"]

# The widest beam decoding accepts: [words x beam x phonemes] scores per step, and a beam of 10^9 asked
# for terabytes before failing. Beams of 4-10 are usual for G2P.
MAX_BEAM = 1024

BOS, EOS = 1, 2

# the decoder's state between steps: LSTM (h, c) [1, B, Hd] and, with input feeding, h̃ [B, Hd]
DecoderState = tuple[Tensor, Tensor, Tensor | None]


class _Decoding(nn.Module):
    """Greedy and beam-search decoding over four hooks a model provides: ``_start`` (encode the letters),
    ``_next`` (log-probabilities [N, P] of the next phoneme, the attention row [N, 1, S], the new state),
    ``_expand`` (the encoder memory's rows, picked by an index) and ``_reorder`` (the state's rows)."""

    name = "g2p"
    num_letters: int

    def _like(self) -> Tensor:  # a parameter: the device and floating dtype inputs are checked against
        raise NotImplementedError

    def _start(self, letters: Tensor, mask: Tensor) -> tuple[Any, Any]:
        raise NotImplementedError

    def _next(self, step: Tensor, memory: Any, mask: Tensor, state: Any) -> tuple[Tensor, Tensor, Any]:
        raise NotImplementedError

    def _expand(self, memory: Any, rows: Tensor) -> Any:
        raise NotImplementedError

    def _reorder(self, state: Any, rows: Tensor) -> Any:
        raise NotImplementedError

    @torch.no_grad()
    def generate(
        self, letters: Tensor, max_len: int = 32, *, beam_size: int = 1, length_penalty: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        """Decode letters [B, S] -> (phoneme ids [B, U] ending at </s>, 0-padded after it; A [B, U, S]).

        ``beam_size`` 1 is greedy. With a beam, each word keeps its ``beam_size`` best prefixes by summed
        log-probability; a prefix that emits </s> is finished and scored ``log p / length ** length_penalty``
        (length counts </s>); decoding stops when every word has ``beam_size`` finished hypotheses whose
        best cannot be beaten by a live prefix, or at ``max_len``; the best finished one is returned."""
        mask = token_mask(self.name, letters, None, self.num_letters, like=self._like())
        for name, value in (("beam_size", beam_size), ("max_len", max_len)):
            error = positive_error(self.name, name, value, allow_none=False)
            if error is not None:
                raise error
        if beam_size > MAX_BEAM:
            raise ValueError(
                f"{self.name}: beam_size {beam_size} is above {MAX_BEAM}; every step scores beam_size times the "
                f"phoneme vocabulary's continuations per word, so memory grows with it; use at most {MAX_BEAM}"
            )
        memory, state = self._start(letters, mask)
        if beam_size == 1:
            return self._greedy(memory, mask, state, max_len)
        return self._beam(memory, mask, state, max_len, beam_size, float(length_penalty))

    def _greedy(self, memory: Any, mask: Tensor, state: Any, max_len: int) -> tuple[Tensor, Tensor]:
        batch = mask.shape[0]
        step = torch.full((batch, 1), BOS, dtype=torch.long, device=mask.device)
        outputs, maps = [], []
        finished = torch.zeros(batch, dtype=torch.bool, device=mask.device)
        for _ in range(max_len):
            logp, weights, state = self._next(step, memory, mask, state)
            step = logp.argmax(-1, keepdim=True).masked_fill(finished.unsqueeze(1), 0)
            outputs.append(step)
            maps.append(weights.masked_fill(finished[:, None, None], 0.0))
            finished |= step.squeeze(1) == EOS
            if bool(finished.all()):
                break
        return torch.cat(outputs, 1), torch.cat(maps, 1)

    def _beam(
        self, memory: Any, mask: Tensor, state: Any, max_len: int, beam: int, length_penalty: float
    ) -> tuple[Tensor, Tensor]:
        batch, seq = mask.shape
        device = mask.device
        # every word's prefixes side by side: row b * beam + k
        rows = torch.arange(batch, device=device).repeat_interleave(beam)
        memory, mask, state = self._expand(memory, rows), mask[rows], self._reorder(state, rows)
        scores = torch.full((batch, beam), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one live prefix (<s>) to start with
        tokens = torch.full((batch * beam, 0), 0, dtype=torch.long, device=device)
        maps = torch.zeros(batch * beam, 0, seq, dtype=self._like().dtype, device=device)
        step = torch.full((batch * beam, 1), BOS, dtype=torch.long, device=device)
        best: list[list[tuple[float, Tensor, Tensor]]] = [[] for _ in range(batch)]
        for length in range(1, max_len + 1):
            logp, weights, state = self._next(step, memory, mask, state)
            vocab = logp.shape[-1]
            logp = logp.float().clone()
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
            state = self._reorder(state, order)
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
        alignment = maps.new_zeros(batch, width, seq)
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


class G2PSeq2Seq(_Decoding):
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
        logits, weights = self._teacher_forced(letters, phonemes_in, self._checked_mask(letters, phonemes_in, mask))
        return (logits, weights) if return_attention else logits

    def _checked_mask(self, letters: Tensor, phonemes_in: Tensor, mask: Tensor | None) -> Tensor:
        """Check forward's inputs; the letters' mask [B, S] (``letters != 0`` when none is given)."""
        like = self.out.weight
        mask = token_mask(self.name, letters, mask, self.num_letters, like=like)
        check_tokens(self.name, phonemes_in, self.num_phonemes, "phonemes_in", like=like)
        if phonemes_in.shape[0] != letters.shape[0]:
            raise ValueError(
                f"{self.name} expects phonemes_in with the letters' batch size {letters.shape[0]}, "
                f"got {list(phonemes_in.shape)}"
            )
        return mask

    def _teacher_forced(self, letters: Tensor, phonemes_in: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        encoded, state = self.encode(letters, mask)
        logits, weights, _ = self.decode_step(phonemes_in, encoded, mask, state)
        return logits, weights

    # decoding hooks (see _Decoding)
    def _like(self) -> Tensor:
        return self.out.weight

    def _start(self, letters: Tensor, mask: Tensor) -> tuple[Tensor, DecoderState]:
        return self.encode(letters, mask)

    def _next(self, step: Tensor, memory: Tensor, mask: Tensor, state: DecoderState):
        logits, weights, state = self.decode_step(step, memory, mask, state)
        return torch.log_softmax(logits.squeeze(1).float(), dim=-1), weights, state

    def _expand(self, memory: Tensor, rows: Tensor) -> Tensor:
        return memory[rows]

    def _reorder(self, state: DecoderState, rows: Tensor) -> DecoderState:
        h, c, feed = state
        return h[:, rows], c[:, rows], None if feed is None else feed[rows]


class G2PEnsemble(_Decoding):
    """``members`` G2PSeq2Seq models of one configuration (the other arguments are theirs), decoded with
    the mean of their next-phoneme distributions. The members are trained apart (``attnzoo train`` with
    other seeds) and joined with :func:`attnzoo.train.ensemble.join_weights`; their state dicts sit under
    ``members.N.``.

    Shapes: ``forward(letters [B, S], phonemes_in [B, U], mask=None, return_attention=False)`` ->
    log of the mean probability [B, U, P] (logits whose softmax is the ensemble's distribution), or with
    ``return_attention`` also the members' mean attention [B, U, S].
    """

    name = "g2p_ensemble"

    def __init__(
        self,
        num_letters: int,
        num_phonemes: int,
        *,
        members: int = 3,
        embed_dim: int = 64,
        hidden: int = 128,
        decoder_hidden: int = 256,
        score: str = "general",
        dropout: float = 0.1,
        input_feeding: bool = False,
        encoder_layers: int = 1,
    ) -> None:
        super().__init__()
        check_positive(self.name, "members", members, allow_none=False)
        self.num_letters, self.num_phonemes = num_letters, num_phonemes
        self.members = nn.ModuleList(
            G2PSeq2Seq(
                num_letters,
                num_phonemes,
                embed_dim=embed_dim,
                hidden=hidden,
                decoder_hidden=decoder_hidden,
                score=score,
                dropout=dropout,
                input_feeding=input_feeding,
                encoder_layers=encoder_layers,
            )
            for _ in range(members)
        )
        for member in self.members:  # input errors name the ensemble
            member.name = member.attention.name = self.name

    def _mix(self, logps: list[Tensor]) -> Tensor:
        """log((1/N) Σ_n p_n) from the members' log-probabilities, without leaving log space."""
        return torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))

    def forward(self, letters: Tensor, phonemes_in: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        mask = self.members[0]._checked_mask(letters, phonemes_in, mask)  # once: the members share the inputs
        outputs = [m._teacher_forced(letters, phonemes_in, mask) for m in self.members]
        dtype = torch.promote_types(outputs[0][0].dtype, torch.float32)  # half mixes in float32, float64 stays
        logits = self._mix([torch.log_softmax(logits, dim=-1, dtype=dtype) for logits, _ in outputs])
        logits = logits.to(outputs[0][0].dtype)
        if not return_attention:
            return logits
        return logits, torch.stack([weights for _, weights in outputs]).mean(0)

    def _like(self) -> Tensor:
        return self.members[0].out.weight

    def _start(self, letters: Tensor, mask: Tensor):
        starts = [m.encode(letters, mask) for m in self.members]
        return [memory for memory, _ in starts], [state for _, state in starts]

    def _next(self, step: Tensor, memory: list[Tensor], mask: Tensor, state: list[DecoderState]):
        steps = [m._next(step, mem, mask, s) for m, mem, s in zip(self.members, memory, state, strict=True)]
        weights = torch.stack([w for _, w, _ in steps]).mean(0)
        return self._mix([logp for logp, _, _ in steps]), weights, [s for _, _, s in steps]

    def _expand(self, memory: list[Tensor], rows: Tensor) -> list[Tensor]:
        return [mem[rows] for mem in memory]

    def _reorder(self, state: list[DecoderState], rows: Tensor) -> list[DecoderState]:
        return [m._reorder(s, rows) for m, s in zip(self.members, state, strict=True)]
