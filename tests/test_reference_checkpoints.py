"""Reference checkpoints, for real: each reference model rebuilt here from its repository's math and parameter
names (written in these tests' own words, not copied), saved exactly the way its code saves, converted with
one call, and compared on unpadded input.

* caml-mimic ``ConvAttnPool``: ``embed``, ``conv`` (padding kernel // 2: an even kernel gives T + 1
  windows), ``U``, ``final``; ``torch.save(model.state_dict())``.
* aehrc/LAAT ``RNN`` + ``AttentionLayer``: ``embedding.embeddings``, ``rnn`` (packed, time-major),
  ``attention.linear`` (unused), ``attention.{first,second,third}_linears.<level>``, ``linears``,
  ``projection_linears``; ``Trainer.save_checkpoint({'epoch', 'state_dict', 'optimiser', ...})``.
* MiuLab/PLM-ICD ``RobertaForMultilabelClassification``: ``roberta.*`` and the LAAT head over the
  flattened chunks (``laat``) or within each chunk, logits max over chunks (``laat-split``).
* medical-coding-reproducibility ``LAAT``, ``CAML``: ``embed``, ``rnn`` / ``conv``, ``attention.*``;
  ``{'model', 'optimizer', ...}``.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.interop.convert import convert_checkpoint

from .conftest import run_cli

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def _tokens(batch, seq, vocab):
    return torch.randint(1, vocab, (batch, seq))


# -- caml-mimic --------------------------------------------------------------------------------------------------
class CamlReference(nn.Module):
    """ConvAttnPool: H = tanh(conv(E)) over all T + 1 - k % 2 windows, A = softmax(U H), y = <final_l, A_l H> + b."""

    def __init__(self, vocab, labels, kernel, filters=6, embed=5, with_descriptions=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, padding_idx=0)
        self.conv = nn.Conv1d(embed, filters, kernel_size=kernel, padding=int(math.floor(kernel / 2)))
        self.U = nn.Linear(filters, labels)
        self.final = nn.Linear(filters, labels)
        if with_descriptions:  # the description regulariser (DR-CAML), used in training only
            self.desc_embedding = nn.Embedding(vocab, embed, padding_idx=0)
            self.label_conv = nn.Conv1d(embed, filters, kernel_size=kernel)
            self.label_fc1 = nn.Linear(filters, filters)

    def forward(self, x):
        h = torch.tanh(self.conv(self.embed(x).transpose(1, 2)).transpose(1, 2))
        alpha = torch.softmax(self.U.weight.matmul(h.transpose(1, 2)), dim=2)
        return self.final.weight.mul(alpha.matmul(h)).sum(dim=2).add(self.final.bias), alpha


@pytest.mark.parametrize("kernel", [3, 10, 4])
def test_caml_checkpoint_converts_and_predicts_what_caml_predicts(tmp_path, kernel):
    reference = CamlReference(vocab=40, labels=7, kernel=kernel, with_descriptions=kernel == 10).eval()
    path = tmp_path / "model_best_prec_at_8.pth"
    torch.save(reference.state_dict(), path)  # persistence.py: torch.save(model.cpu().state_dict(), ...)
    model, converted = convert_checkpoint(path, "caml", "conv_caml", output=tmp_path / "caml.safetensors")
    assert converted.config["kernel_size"] == kernel and "U.bias" in converted.dropped
    assert ("desc_embedding.weight" in converted.dropped) == (kernel == 10)
    x = _tokens(3, 12, 40)
    want, want_att = reference(x)
    for m in (model, attnzoo.load(tmp_path / "caml.safetensors").eval()):
        got, att = m(x, return_attention=True)
        torch.testing.assert_close(got, want, **TOL)
        torch.testing.assert_close(att, want_att, **TOL)  # 13 windows for an even kernel, as CAML
    # a padded batch: attnzoo masks the windows over padding; CAML attends over them (see the docs)
    padded = torch.cat([x[:1, :8], torch.zeros(1, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded), reference(x[:1, :8])[0], **TOL)
    everywhere = torch.ones_like(padded, dtype=torch.bool)  # CAML's own behaviour on the padded batch
    torch.testing.assert_close(model(padded, mask=everywhere), reference(padded)[0], **TOL)


def test_a_data_parallel_checkpoint_converts(tmp_path):
    reference = CamlReference(vocab=20, labels=3, kernel=3).eval()
    torch.save({f"module.{k}": v for k, v in reference.state_dict().items()}, tmp_path / "dp.pt")
    model, _ = convert_checkpoint(tmp_path / "dp.pt", "caml", "conv_caml")
    x = _tokens(2, 7, 20)
    torch.testing.assert_close(model(x), reference(x)[0], **TOL)


# -- aehrc/LAAT ------------------------------------------------------------------------------------------------
class LaatReference(nn.Module):
    """RNN + AttentionLayer (label mode, hierarchical joint mode): per level l,
    Z = tanh(W_l H), A = softmax_T(U_l Z), v = A H, y_l = <w_l, [v; g_{l-1}]> + b_l,
    g_l = sigmoid(P_l sigmoid(y_l)) for the next level."""

    def __init__(self, vocab, labels, hidden=4, embed=5, d_a=6, projection=5):
        super().__init__()
        self.embedding = nn.Module()
        self.embedding.embeddings = nn.Embedding(vocab, embed)
        self.rnn = nn.LSTM(embed, hidden, num_layers=1, bidirectional=True)  # time-major, as the reference
        size = 2 * hidden
        self.attention = nn.Module()
        self.attention.linear = nn.Linear(size, size, bias=False)  # created, never used
        self.attention.first_linears = nn.ModuleList([nn.Linear(size, d_a, bias=False) for _ in labels])
        self.attention.second_linears = nn.ModuleList([nn.Linear(d_a, n, bias=False) for n in labels])
        self.attention.third_linears = nn.ModuleList(
            [nn.Linear(size + (projection if level else 0), n) for level, n in enumerate(labels)]
        )
        self.linears = nn.ModuleList(
            [nn.Linear(size + (projection if level else 0), n) for level, n in enumerate(labels)]
        )
        self.projection_linears = nn.ModuleList([nn.Linear(n, projection, bias=False) for n in labels])
        for module in self.modules():  # spread the values so that a mix-up of tensors cannot hide
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.3)

    def forward(self, tokens, lengths):
        embeds = self.embedding.embeddings(tokens)
        packed = pack_padded_sequence(embeds, lengths, batch_first=True)
        out = pad_packed_sequence(self.rnn(packed)[0])[0].permute(1, 0, 2)  # [B, T, 2h]
        previous, outputs = None, []
        for level in range(len(self.attention.first_linears)):
            z = torch.tanh(self.attention.first_linears[level](out))
            a = torch.softmax(self.attention.second_linears[level](z), 1).transpose(1, 2)
            v = a @ out
            if previous is not None:
                v = torch.cat([v, previous.unsqueeze(1).expand(-1, v.shape[1], -1)], dim=2)
            third = self.attention.third_linears[level]
            y = third.weight.mul(v).sum(dim=2).add(third.bias)
            previous = torch.sigmoid(self.projection_linears[level](torch.sigmoid(y)))
            outputs.append(y)
        return outputs


def _save_like_laat(model, path):
    """Trainer.save_checkpoint: the whole training state, the weights under 'state_dict'."""
    optimiser = torch.optim.Adam(model.parameters())
    torch.save(
        {
            "epoch": 7,
            "state_dict": model.state_dict(),
            "optimiser": optimiser.state_dict(),
            "lr_scheduler": {"last_epoch": 7},
            "test_scores": {"micro_f1": 0.5},
        },
        path,
    )


@pytest.mark.slow
def test_laat_checkpoint_converts_and_predicts_what_laat_predicts(tmp_path):
    reference = LaatReference(vocab=30, labels=[6]).eval()
    path = tmp_path / "checkpoint.pkl"
    _save_like_laat(reference, path)
    proc = run_cli(
        "convert-checkpoint",
        str(path),
        "--from",
        "laat",
        "--model",
        "bilstm_laat",
        "-o",
        str(tmp_path / "laat.safetensors"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "left out attention.linear.weight" in proc.stdout and "left out linears.0.weight" in proc.stdout
    model = attnzoo.load(tmp_path / "laat.safetensors").eval()
    x = _tokens(3, 9, 30)
    (want,) = reference(x, torch.tensor([9, 9, 9]))
    torch.testing.assert_close(model(x), want, **TOL)
    # a padded text: the reference reads it packed too; only the attention over padding differs
    padded = torch.cat([x[:1, :5], torch.zeros(1, 4, dtype=torch.long)], dim=1)
    (alone,) = reference(x[:1, :5], torch.tensor([5]))
    torch.testing.assert_close(model(padded), alone, **TOL)
    head, _ = convert_checkpoint(path, "laat", "laat")  # the head alone, over hidden states
    assert head.attention_size == 6 and head.hidden_size == 8


@pytest.mark.parametrize("projection", [5, 128])
def test_jointlaat_checkpoint_converts_for_any_projection_size(tmp_path, projection):
    reference = LaatReference(vocab=30, labels=[3, 6], projection=projection).eval()
    path = tmp_path / "checkpoint.pkl"
    _save_like_laat(reference, path)
    model, converted = convert_checkpoint(path, "laat", "bilstm_joint_laat", output=tmp_path / "joint.safetensors")
    assert converted.config["projection_size"] == projection and converted.config["num_parent_labels"] == 3
    assert "projection_linears.1.weight" in converted.dropped
    x = _tokens(2, 8, 30)
    parents, children = reference(x, torch.tensor([8, 8]))
    got_children, got_parents = model(x, return_parents=True)
    torch.testing.assert_close(got_children, children, **TOL)
    torch.testing.assert_close(got_parents, parents, **TOL)
    torch.testing.assert_close(attnzoo.load(tmp_path / "joint.safetensors").eval()(x), children, **TOL)


# -- PLM-ICD -----------------------------------------------------------------------------------------------------
def _plm_icd_state(hidden, labels):
    """What save_pretrained writes for RobertaForMultilabelClassification (laat modes): encoder and head."""
    head = {
        "first_linear.weight": torch.randn(hidden, hidden) * 0.3,
        "second_linear.weight": torch.randn(labels, hidden) * 0.3,
        "third_linear.weight": torch.randn(labels, hidden) * 0.3,
        "third_linear.bias": torch.randn(labels),
    }
    encoder = {
        "roberta.embeddings.word_embeddings.weight": torch.randn(50, hidden),
        "roberta.encoder.layer.0.attention.self.query.weight": torch.randn(hidden, hidden),
        "roberta.encoder.layer.0.attention.self.query.bias": torch.randn(hidden),
    }
    return {**encoder, **head}, head


def _plm_icd_logits(head, hidden_output, split):
    """The reference's forward after the encoder: hidden_output [B, C, S, h]."""
    batch, chunks, size, h = hidden_output.shape
    x = hidden_output.view(batch * chunks, size, h) if split else hidden_output.view(batch, chunks * size, h)
    weights = torch.tanh(x @ head["first_linear.weight"].T)
    att = torch.softmax(weights @ head["second_linear.weight"].T, dim=1).transpose(1, 2)
    logits = head["third_linear.weight"].mul(att @ x).sum(dim=2).add(head["third_linear.bias"])
    return logits.view(batch, chunks, -1).max(dim=1).values if split else logits


@pytest.mark.parametrize("suffix", [".bin", ".safetensors"])
@pytest.mark.parametrize("split", [False, True])
def test_plm_icd_head_converts_in_both_modes(tmp_path, suffix, split):
    state, head = _plm_icd_state(hidden=8, labels=5)
    path = tmp_path / f"model{suffix}"
    if suffix == ".bin":
        torch.save(state, path)
    else:
        from safetensors.torch import save_file

        save_file(state, str(path))
    config = {"split_size": 4} if split else {}
    layer, converted = convert_checkpoint(path, "plm-icd", "laat", config=config, output=tmp_path / "head.safetensors")
    assert converted.config["attention_size"] == 8 and all(k.startswith("roberta.") for k in converted.dropped)
    hidden_output = torch.randn(2, 3, 4, 8)  # 3 chunks of 4 positions
    want = _plm_icd_logits(head, hidden_output, split)
    for m in (layer, attnzoo.load(tmp_path / "head.safetensors")):
        torch.testing.assert_close(m(hidden_output.view(2, 12, 8)), want, **TOL)


# -- medical-coding-reproducibility ------------------------------------------------------------------------------
def test_medical_coding_laat_and_caml_convert(tmp_path):
    # LAAT: embed, rnn (packed batch-first), attention.{first,second,third}_linear; checkpoint {'model', ...}
    embed, rnn = nn.Embedding(30, 5, padding_idx=0), nn.LSTM(5, 4, bidirectional=True)
    attention = {
        "first_linear.weight": torch.randn(6, 8) * 0.3,
        "second_linear.weight": torch.randn(7, 6) * 0.3,
        "third_linear.weight": torch.randn(7, 8) * 0.3,
        "third_linear.bias": torch.randn(7),
    }
    state = {
        "embed.weight": embed.weight.data,
        **{f"rnn.{k}": v for k, v in rnn.state_dict().items()},
        **{f"attention.{k}": v for k, v in attention.items()},
    }
    path = tmp_path / "laat.pt"
    torch.save({"model": state, "optimizer": {}, "scaler": {}, "epoch": 3}, path)
    model, _ = convert_checkpoint(path, "medical-coding", "bilstm_laat")
    x = _tokens(2, 6, 30)
    out = pad_packed_sequence(
        rnn(pack_padded_sequence(embed(x), torch.tensor([6, 6]), batch_first=True))[0], batch_first=True
    )[0]
    att = torch.softmax(
        torch.tanh(out @ attention["first_linear.weight"].T) @ attention["second_linear.weight"].T, dim=1
    ).transpose(1, 2)
    want = attention["third_linear.weight"].mul(att @ out).sum(2).add(attention["third_linear.bias"])
    torch.testing.assert_close(model(x), want, **TOL)

    # CAML: embed, conv (kernel 4: T + 1 windows), attention.first_linear (U) and second_linear (final)
    reference = CamlReference(vocab=30, labels=5, kernel=4).eval()
    renamed = {
        "embed.weight": reference.embed.weight,
        "conv.weight": reference.conv.weight,
        "conv.bias": reference.conv.bias,
        "attention.first_linear.weight": reference.U.weight,
        "attention.first_linear.bias": reference.U.bias,
        "attention.second_linear.weight": reference.final.weight,
        "attention.second_linear.bias": reference.final.bias,
    }
    torch.save({"model": {k: v.detach() for k, v in renamed.items()}}, tmp_path / "caml.pt")
    model, _ = convert_checkpoint(tmp_path / "caml.pt", "medical-coding", "conv_caml")
    torch.testing.assert_close(model(x), reference(x)[0], **TOL)


# -- what must be refused -------------------------------------------------------------------------------------
def test_a_checkpoint_that_does_not_fit_is_refused_with_a_listing(tmp_path):
    reference = LaatReference(vocab=30, labels=[3, 6]).eval()
    _save_like_laat(reference, tmp_path / "joint.pkl")
    with pytest.raises(WeightsError, match="2 label levels: convert it into bilstm_joint_laat"):
        convert_checkpoint(tmp_path / "joint.pkl", "laat", "bilstm_laat")
    state = {**reference.state_dict(), "extra.weight": torch.zeros(2)}
    torch.save(state, tmp_path / "odd.pth")
    with pytest.raises(WeightsError, match=r"keys the laat layout does not explain.*extra.weight \[2\]"):
        convert_checkpoint(tmp_path / "odd.pth", "laat", "bilstm_joint_laat")
    with pytest.raises(WeightsError, match=r"does not fit bilstm_joint_laat .*projection_size"):
        convert_checkpoint(tmp_path / "joint.pkl", "laat", "bilstm_joint_laat", config={"projection_size": 9})


def test_only_the_restricted_unpickler_is_ever_used(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"state_dict": {"w": torch.zeros(1)}, "evil": Payload()}, tmp_path / "evil.pth")
    with pytest.raises(WeightsError, match=r"weights_only=True.*never runs a full unpickler"):
        convert_checkpoint(tmp_path / "evil.pth", "caml", "caml")


def test_create_with_weights_applies_reference_layouts(tmp_path):
    """A head state dict in LAAT's names loads through create(weights=...) as through load_state_dict."""
    from attnzoo.io.weights import write_weights

    head = attnzoo.create("laat", num_labels=4, hidden_size=6, attention_size=3)
    renamed = {
        "attention.first_linears.0.weight": head.first_linear.weight,
        "attention.second_linears.0.weight": head.second_linear.weight,
        "attention.third_linears.0.weight": head.third_linear.weight,
        "attention.third_linears.0.bias": head.third_linear.bias,
    }
    write_weights({k: v.detach() for k, v in renamed.items()}, tmp_path / "laat_layout.safetensors")
    again = attnzoo.create(
        "laat", num_labels=4, hidden_size=6, attention_size=3, weights=tmp_path / "laat_layout.safetensors"
    )
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(again(x), head(x))


def test_hostile_checkpoints_are_refused_with_a_clear_error(tmp_path):
    """NaN weights, odd ranks, integer keys and a truncated safetensors file: each a WeightsError, never a
    model whose logits are NaN or an internal error."""
    from safetensors.torch import save_file

    reference = LaatReference(vocab=30, labels=[3]).eval()
    state = reference.state_dict()
    nan = {**state, "embedding.embeddings.weight": state["embedding.embeddings.weight"].clone().fill_(float("nan"))}
    torch.save(nan, tmp_path / "nan.pth")
    with pytest.raises(WeightsError, match=r"hold NaN or inf \(embedding\.embeddings\.weight"):
        convert_checkpoint(tmp_path / "nan.pth", "laat", "bilstm_laat")
    lstm = next(k for k in state if k.endswith("weight_hh_l0"))
    torch.save({**state, lstm: torch.zeros(8)}, tmp_path / "flat.pth")
    with pytest.raises(WeightsError, match=r"weight_hh_l0 has shape \[8\]"):
        convert_checkpoint(tmp_path / "flat.pth", "laat", "bilstm_laat")
    torch.save({**state, "embedding.embeddings.weight": torch.tensor(1.0)}, tmp_path / "scalar.pth")
    with pytest.raises(WeightsError, match="embedding.embeddings.weight has shape"):
        convert_checkpoint(tmp_path / "scalar.pth", "laat", "bilstm_laat")
    torch.save({0: torch.zeros(2), 1: torch.zeros(3)}, tmp_path / "int_keys.pth")
    with pytest.raises(WeightsError, match="keyed by parameter names"):
        convert_checkpoint(tmp_path / "int_keys.pth", "laat", "bilstm_laat")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "whole.safetensors"))
    data = (tmp_path / "whole.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        convert_checkpoint(tmp_path / "cut.safetensors", "laat", "bilstm_laat")
    proc = run_cli(
        "convert-checkpoint",
        str(tmp_path / "nan.pth"),
        "--from",
        "laat",
        "--model",
        "bilstm_laat",
        "-o",
        str(tmp_path / "o.safetensors"),
    )
    assert proc.returncode == 1 and "NaN" in proc.stderr and not (tmp_path / "o.safetensors").exists()
