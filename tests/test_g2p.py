"""The G2P model's decoder: input feeding against the recurrence written out step by step, and beam search
against exhaustive search over every output sequence of a tiny model."""

from __future__ import annotations

import itertools

import pytest
import torch

import attnzoo
from attnzoo.models.g2p import BOS, EOS


def _model(input_feeding: bool, phonemes: int = 12, seed: int = 0):
    torch.manual_seed(seed)
    model = attnzoo.create(
        "g2p_seq2seq",
        num_letters=9,
        num_phonemes=phonemes,
        embed_dim=5,
        hidden=4,
        decoder_hidden=6,
        input_feeding=input_feeding,
    ).eval()
    with torch.no_grad():  # sharper distributions than the initialisation gives, so that search matters
        model.out.weight.mul_(6.0)
    return model


def _lstm_cell(lstm, x, h, c):
    gates = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
    i, f, g, o = gates.chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def test_input_feeding_is_luongs_recurrence():
    """h_t = LSTM([emb(y_{t-1}); h̃_{t-1}]), a_t = softmax_s(h_t W ē_s), h̃_t = tanh(Wc [Σ a_ts ē_s; h_t])."""
    model = _model(True)
    letters = torch.tensor([[3, 4, 5, 6, 0], [7, 8, 2, 0, 0]])
    phonemes = torch.tensor([[BOS, 4, 5, 6], [BOS, 7, 3, 0]])
    logits, weights = model(letters, phonemes, return_attention=True)

    mask = letters != 0
    encoded, (h, c, _) = model.encode(letters, mask)
    h, c = h[0], c[0]
    feed = torch.zeros_like(h)
    W, Wc = model.attention.attention.weight, model.attention.combine.weight
    for t in range(phonemes.shape[1]):
        x = torch.cat([model.phoneme_embedding(phonemes[:, t]), feed], -1)
        h, c = _lstm_cell(model.decoder, x, h, c)
        scores = torch.einsum("bd,de,bse->bs", h, W, encoded).masked_fill(~mask, float("-inf"))
        a = scores.softmax(-1)
        feed = torch.tanh(torch.cat([torch.einsum("bs,bse->be", a, encoded), h], -1) @ Wc.T)
        torch.testing.assert_close(weights[:, t], a, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(logits[:, t], model.out(feed), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_greedy_decoding_follows_the_teacher_forced_argmax(input_feeding):
    model = _model(input_feeding)
    letters = torch.tensor([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
    ids, alignment = model.generate(letters, max_len=6)
    for b in range(2):
        row = ids[b].tolist()
        length = row.index(EOS) + 1 if EOS in row else len(row)
        prefix = torch.tensor([[BOS] + row[: length - 1]])
        logits, weights = model(letters[b : b + 1], prefix, return_attention=True)
        assert logits[0].argmax(-1).tolist() == row[:length]
        torch.testing.assert_close(alignment[b, :length], weights[0], atol=1e-6, rtol=1e-5)
        assert not ids[b, length:].any()


def _exhaustive(model, letters, max_len, penalty):
    """Every sequence of real symbols (ids 3..P-1) of length < max_len followed by </s>, scored by teacher
    forcing: the best by log p / (length incl. </s>) ** penalty."""
    symbols = range(3, model.num_phonemes)
    best = (float("-inf"), None)
    for n in range(max_len):
        for body in itertools.product(symbols, repeat=n):
            target = list(body) + [EOS]
            logits = model(letters, torch.tensor([[BOS] + list(body)]))
            logp = torch.log_softmax(logits[0], -1)[torch.arange(len(target)), target].sum().item()
            score = logp / len(target) ** penalty
            if score > best[0]:
                best = (score, target)
    return best


@pytest.mark.parametrize("input_feeding", [False, True])
@pytest.mark.parametrize("penalty", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", [1, 5])  # initialisations whose optimum under a length penalty is long
def test_a_wide_beam_finds_the_exhaustive_optimum(input_feeding, penalty, seed):
    model = _model(input_feeding, phonemes=6, seed=seed)  # symbols 3, 4, 5 and </s>
    for letters in ([[3, 4, 5]], [[6, 7, 8, 3]], [[2, 2]]):
        letters = torch.tensor(letters)
        score, target = _exhaustive(model, letters, max_len=4, penalty=penalty)
        ids, alignment = model.generate(letters, max_len=4, beam_size=27, length_penalty=penalty)
        assert ids[0].tolist()[: len(target)] == target, (letters, score)
        assert alignment.shape == (1, ids.shape[1], letters.shape[1])


def test_beams_in_a_batch_are_independent_and_narrow_beams_never_beat_the_optimum():
    model = _model(True, phonemes=6)
    letters = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 3], [2, 2, 0, 0]])
    together, _ = model.generate(letters, max_len=4, beam_size=5)
    for b in range(3):
        alone, _ = model.generate(letters[b : b + 1, : int((letters[b] != 0).sum())], max_len=4, beam_size=5)
        assert together[b, : alone.shape[1]].tolist() == alone[0].tolist()
    with pytest.raises(ValueError, match="beam_size"):
        model.generate(letters, beam_size=0)
    with pytest.raises(ValueError, match="beam_size 1000000000 is above 1024"):  # not a 3 TB allocation
        model.generate(letters, beam_size=10**9)


def test_a_stacked_encoder_reads_each_word_as_if_alone():
    """encoder_layers=2: the encoding of a padded word equals the two-layer BiLSTM run on the word alone
    (no padding anywhere), so padding reaches neither direction of either layer."""
    torch.manual_seed(0)
    model = attnzoo.create(
        "g2p_seq2seq", num_letters=9, num_phonemes=12, embed_dim=5, hidden=4, decoder_hidden=6, encoder_layers=2
    ).eval()
    assert model.encoder.num_layers == 2 and hasattr(model.encoder, "weight_ih_l1_reverse")
    letters = torch.tensor([[3, 4, 5, 6, 7], [7, 8, 2, 0, 0]])
    encoded, _ = model.encode(letters, letters != 0)
    for row, length in ((0, 5), (1, 3)):
        alone, _ = model.encoder(model.letter_embedding(letters[row : row + 1, :length]))
        torch.testing.assert_close(encoded[row, :length], alone[0], atol=1e-6, rtol=1e-5)


# -- the ensemble ----------------------------------------------------------------------------------------------
def _ensemble(input_feeding: bool, phonemes: int = 12, seeds=(0, 1)):
    """A g2p_ensemble whose members are the _model()s of ``seeds`` (so each can also be run alone)."""
    singles = [_model(input_feeding, phonemes, seed) for seed in seeds]
    ensemble = attnzoo.create(
        "g2p_ensemble",
        num_letters=9,
        num_phonemes=phonemes,
        members=len(seeds),
        embed_dim=5,
        hidden=4,
        decoder_hidden=6,
        input_feeding=input_feeding,
    ).eval()
    for slot, single in zip(ensemble.members, singles, strict=True):
        slot.load_state_dict(single.state_dict())
    return ensemble, singles


@pytest.mark.parametrize("input_feeding", [False, True])
def test_the_ensemble_is_the_mean_of_its_members_distributions(input_feeding):
    """softmax(ensemble logits) = (1/N) Σ_n softmax(member_n logits); the attention is the members' mean."""
    ensemble, singles = _ensemble(input_feeding, seeds=(0, 1, 2))
    letters = torch.tensor([[3, 4, 5, 6, 0], [7, 8, 2, 0, 0]])
    phonemes = torch.tensor([[BOS, 4, 5, 6], [BOS, 7, 3, 0]])
    logits, weights = ensemble(letters, phonemes, return_attention=True)
    outputs = [m(letters, phonemes, return_attention=True) for m in singles]
    mean = sum(logit.softmax(-1) for logit, _ in outputs) / 3
    torch.testing.assert_close(logits.softmax(-1), mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights, sum(w for _, w in outputs) / 3, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_copies_decodes_as_the_model_alone(beam):
    """The mean of N equal distributions is that distribution: ids and alignments are the single model's."""
    ensemble, singles = _ensemble(True, seeds=(3, 3))
    letters = torch.tensor([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
    ids, alignment = ensemble.generate(letters, max_len=6, beam_size=beam)
    alone_ids, alone_alignment = singles[0].generate(letters, max_len=6, beam_size=beam)
    assert ids.tolist() == alone_ids.tolist()
    torch.testing.assert_close(alignment, alone_alignment, atol=1e-6, rtol=1e-5)


def test_ensemble_greedy_decoding_follows_the_mixture_argmax():
    ensemble, singles = _ensemble(False, seeds=(0, 4))
    letters = torch.tensor([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
    ids, _ = ensemble.generate(letters, max_len=6)
    for b in range(2):
        row = ids[b].tolist()
        length = row.index(EOS) + 1 if EOS in row else len(row)
        prefix = torch.tensor([[BOS] + row[: length - 1]])
        mixture = sum(m(letters[b : b + 1], prefix).softmax(-1) for m in singles)
        assert mixture[0].argmax(-1).tolist() == row[:length]


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_a_wide_ensemble_beam_finds_the_exhaustive_optimum(penalty):
    ensemble, _ = _ensemble(False, phonemes=6, seeds=(1, 5))
    for letters in ([[3, 4, 5]], [[6, 7, 8, 3]]):
        letters = torch.tensor(letters)
        score, target = _exhaustive(ensemble, letters, max_len=4, penalty=penalty)
        ids, _ = ensemble.generate(letters, max_len=4, beam_size=27, length_penalty=penalty)
        assert ids[0].tolist()[: len(target)] == target, (letters, score)


def test_an_ensemble_names_itself_in_input_errors():
    ensemble, _ = _ensemble(False)
    with pytest.raises(ValueError, match="g2p_ensemble"):
        ensemble.generate(torch.tensor([[3, 40]]))  # a letter id outside the vocabulary of 9
    with pytest.raises(ValueError, match="members"):
        attnzoo.create("g2p_ensemble", num_letters=9, num_phonemes=12, members=0)


def test_an_ensemble_output_name_is_checked_before_any_work_and_nan_members_are_refused(tmp_path):
    import time

    from attnzoo.errors import ConfigError
    from attnzoo.train.ensemble import join_weights

    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"joined.pt: an ensemble is written as a .safetensors file"):
        join_weights(["no-such-member", "another"], tmp_path / "joined.pt", verbose=False)
    assert time.perf_counter() - start < 5 and not (tmp_path / "joined.pt").exists()
    with pytest.raises(ConfigError, match="the folder .*missing does not exist"):
        join_weights(["a", "b"], tmp_path / "missing" / "joined.safetensors", verbose=False)
    model = attnzoo.create("g2p_seq2seq", pretrained=True)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    attnzoo.save(model, tmp_path / "broken")
    with pytest.raises(ConfigError, match=r"member broken has NaN or infinite weights"):
        join_weights(["g2p_seq2seq", str(tmp_path / "broken")], tmp_path / "j.safetensors", verbose=False)
    assert not (tmp_path / "j.safetensors").exists()
