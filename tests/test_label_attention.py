"""The label-attention family against its papers' formulas, the fused core against the explicit one,
and the reference repositories' checkpoints loading as they are."""

from __future__ import annotations

import pytest
import torch

import attnzoo
from attnzoo.layers import core

from . import reference as ref

TOL = dict(atol=1e-6, rtol=1e-6)


def close(actual, expected, **tol):
    torch.testing.assert_close(actual.double(), expected.double(), **(tol or TOL))


def padded_mask(lengths, seq):
    return torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


@pytest.fixture(params=["explicit", "sdpa"])
def path(request, monkeypatch):
    """Run each test on both routes of the core: the explicit form and the fused SDPA call."""
    monkeypatch.setattr(core, "EXPLICIT_MAX_SCORES", 10**12 if request.param == "explicit" else 0)
    return request.param


def _randomise(layer, scale=0.5):
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(std=scale)


@pytest.mark.parametrize("masked", [False, True])
def test_caml_matches_its_formula(path, masked):
    head = attnzoo.create("caml", num_labels=4, hidden_size=6)
    _randomise(head)
    x = torch.randn(3, 7, 6)
    mask = padded_mask([7, 3, 5], 7) if masked else None
    expected, expected_att = ref.labelwise(
        x, head.U.weight.detach(), head.final.weight.detach(), head.final.bias.detach(), mask
    )
    close(head(x, mask), expected)
    logits, att = head(x, mask, return_attention=True)
    close(logits, expected)
    close(att, expected_att)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("attention_size", [5, 6, 9])  # d_a below, at and above h: the SDPA padding
def test_laat_matches_its_formula(path, masked, attention_size):
    head = attnzoo.create("laat", num_labels=4, hidden_size=6, attention_size=attention_size)
    _randomise(head)
    x = torch.randn(3, 7, 6)
    mask = padded_mask([7, 3, 5], 7) if masked else None
    p = {k: v.detach() for k, v in head.named_parameters()}
    expected, expected_att = ref.laat(
        x, p["first_linear.weight"], p["second_linear.weight"], p["third_linear.weight"], p["third_linear.bias"], mask
    )
    close(head(x, mask), expected)
    logits, att = head(x, mask, return_attention=True)
    close(logits, expected)
    close(att, expected_att)


def test_joint_laat_matches_its_formula(path):
    head = attnzoo.create(
        "joint_laat", num_labels=5, num_parent_labels=3, hidden_size=6, attention_size=4, projection_size=2
    )
    _randomise(head)
    x, mask = torch.randn(2, 6, 6), padded_mask([6, 4], 6)
    p = {k: v.detach() for k, v in head.named_parameters()}
    parent, _ = ref.laat(
        x,
        p["parent.first_linear.weight"],
        p["parent.second_linear.weight"],
        p["parent.third_linear.weight"],
        p["parent.third_linear.bias"],
        mask,
    )
    g = torch.sigmoid(torch.sigmoid(parent) @ p["projection.weight"].double().T)
    child, child_att = ref.laat(
        x,
        p["child.first_linear.weight"],
        p["child.second_linear.weight"],
        p["child.third_linear.weight"],
        p["child.third_linear.bias"],
        mask,
        extra=g,
    )
    logits, parents, att = head(x, mask, return_attention=True, return_parents=True)
    close(logits, child)
    close(parents, parent)
    close(att, child_att)
    close(head(x, mask), child)


@pytest.mark.parametrize("scaled", [False, True])
def test_plm_ca_matches_its_formula(path, scaled):
    head = attnzoo.create("plm_ca", num_labels=4, hidden_size=6, scaled=scaled)
    _randomise(head)
    x, mask = torch.randn(3, 7, 6), padded_mask([7, 3, 5], 7)
    p = {k: v.detach() for k, v in head.named_parameters()}
    expected, expected_att = ref.plm_ca(
        x,
        p["label_queries"],
        p["key.weight"],
        p["key.bias"],
        p["value.weight"],
        p["value.bias"],
        p["norm.weight"],
        p["norm.bias"],
        p["output.weight"],
        p["output.bias"][0],
        mask,
        scale=6**-0.5 if scaled else 1.0,
    )
    close(head(x, mask), expected)
    logits, att = head(x, mask, return_attention=True)
    close(att, expected_att)


@pytest.mark.parametrize(
    "name, kw", [("caml", {}), ("laat", {"attention_size": 8}), ("plm_ca", {}), ("lwan", {}), ("labelwise_batched", {})]
)
def test_fused_path_equals_explicit_path_and_chunking(monkeypatch, name, kw):
    head = attnzoo.create(name, num_labels=37, hidden_size=16, **kw)
    x, mask = torch.randn(3, 11, 16, requires_grad=True), padded_mask([11, 4, 0], 11)
    monkeypatch.setattr(core, "EXPLICIT_MAX_SCORES", 0)
    fused = head(x, mask)
    grad_fused = torch.autograd.grad(fused.square().sum(), x)[0]
    explicit, weights = head(x, mask, return_attention=True)
    grad_explicit = torch.autograd.grad(explicit.square().sum(), x)[0]
    close(fused, explicit)
    close(grad_fused, grad_explicit)
    head.chunk_size = 5  # 37 labels in 8 chunks
    chunked, chunked_weights = head(x, mask, return_attention=True)
    close(chunked, explicit)
    close(chunked_weights, weights)
    assert torch.all(weights[2] == 0)  # the empty document attends to nothing


@pytest.mark.parametrize("name", ["caml", "laat", "plm_ca", "lwan", "joint_laat"])
def test_a_documents_output_does_not_depend_on_its_batchs_padding(path, name):
    kw = {"num_parent_labels": 3} if name == "joint_laat" else {}
    head = attnzoo.create(name, num_labels=6, hidden_size=8, **kw)
    doc = torch.randn(1, 5, 8)
    alone = head(doc)
    padded = torch.cat([doc, torch.randn(1, 20, 8) * 10], dim=1)
    long_batch = torch.cat([padded, torch.randn(1, 25, 8)])
    out = head(long_batch, padded_mask([5, 25], 25))
    close(out[:1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["conv_caml", "bilstm_laat", "bilstm_plm_ca"])
def test_full_models_are_padding_invariant(name):
    model = attnzoo.create(name, vocab_size=30, num_labels=5, embed_dim=8, hidden=6).eval()
    text = torch.randint(1, 30, (1, 9))
    padded = torch.cat([text, torch.zeros(1, 15, dtype=torch.long)], dim=1)
    close(model(padded), model(text), atol=1e-5, rtol=1e-5)


# -- reference checkpoints ------------------------------------------------------------------------------------
def test_caml_reference_state_dict_loads():
    L, d = 5, 7
    state = {
        "U.weight": torch.randn(L, d),
        "U.bias": torch.randn(L),  # nn.Linear's unused bias
        "final.weight": torch.randn(L, d),
        "final.bias": torch.randn(L),
    }
    head = attnzoo.create("caml", num_labels=L)  # lazy: the sizes come from the checkpoint
    head.load_state_dict(state)
    x, mask = torch.randn(2, 6, d), padded_mask([6, 2], 6)
    expected, _ = ref.labelwise(x, state["U.weight"], state["final.weight"], state["final.bias"], mask)
    close(head(x, mask), expected)


def test_caml_full_model_from_the_reference_repository_layout():
    """CAML's repository keeps embed, conv, U, final at the top level of its model."""
    vocab, E, filters, L = 20, 6, 4, 3
    model = attnzoo.create(
        "conv_caml", vocab_size=vocab, num_labels=L, embed_dim=E, hidden=filters, kernel_size=3
    ).eval()
    theirs = {
        "embed.weight": torch.randn(vocab, E),
        "conv.weight": torch.randn(filters, E, 3),
        "conv.bias": torch.randn(filters),
        "U.weight": torch.randn(L, filters),
        "U.bias": torch.randn(L),
        "final.weight": torch.randn(L, filters),
        "final.bias": torch.randn(L),
    }
    theirs["embed.weight"][0] = 0
    renamed = {
        {
            "embed.weight": "encoder.embedding.weight",
            "conv.weight": "encoder.conv.weight",
            "conv.bias": "encoder.conv.bias",
        }.get(k, "head." + k): v
        for k, v in theirs.items()
    }
    model.load_state_dict(renamed)
    tokens = torch.tensor([[3, 5, 7, 2, 9]])
    emb = theirs["embed.weight"][tokens]
    conv = torch.nn.functional.conv1d(emb.transpose(1, 2), theirs["conv.weight"], theirs["conv.bias"], padding=1)
    h = torch.tanh(conv.transpose(1, 2))
    expected, _ = ref.labelwise(h, theirs["U.weight"], theirs["final.weight"], theirs["final.bias"])
    close(model(tokens), expected)


@pytest.mark.parametrize("layout", ["laat", "plm_icd"])
def test_laat_and_plm_icd_state_dicts_load(layout):
    L, h, d_a = 5, 8, 6
    w, u, w3, b3 = torch.randn(d_a, h), torch.randn(L, d_a), torch.randn(L, h), torch.randn(L)
    if layout == "laat":
        state = {
            "attention.first_linears.0.weight": w,
            "attention.second_linears.0.weight": u,
            "attention.third_linears.0.weight": w3,
            "attention.third_linears.0.bias": b3,
        }
    else:
        state = {
            "first_linear.weight": w,
            "second_linear.weight": u,
            "third_linear.weight": w3,
            "third_linear.bias": b3,
        }
    head = attnzoo.create("laat", num_labels=L, attention_size=d_a)
    head.load_state_dict(state)
    x, mask = torch.randn(2, 6, h), padded_mask([6, 3], 6)
    expected, _ = ref.laat(x, w, u, w3, b3, mask)
    close(head(x, mask), expected)
    # an initialised head takes the same layout
    again = attnzoo.create("laat", num_labels=L, attention_size=d_a, hidden_size=h)
    again.load_state_dict(state)
    close(again(x, mask), expected)


def test_joint_laat_loads_the_laat_repository_levels():
    L1, L, h, d_a, p = 3, 5, 8, 6, 4
    head = attnzoo.create(
        "joint_laat", num_labels=L, num_parent_labels=L1, attention_size=d_a, projection_size=p, hidden_size=h
    )
    state = {}
    for level, labels, width in ((0, L1, h), (1, L, h + p)):
        state[f"attention.first_linears.{level}.weight"] = torch.randn(d_a, h)
        state[f"attention.second_linears.{level}.weight"] = torch.randn(labels, d_a)
        state[f"attention.third_linears.{level}.weight"] = torch.randn(labels, width)
        state[f"attention.third_linears.{level}.bias"] = torch.randn(labels)
    state["projection.weight"] = torch.randn(p, L1)
    head.load_state_dict(dict(state))
    assert torch.equal(head.child.second_linear.weight, state["attention.second_linears.1.weight"])
    assert torch.equal(head.parent.third_linear.bias, state["attention.third_linears.0.bias"])


def test_a_checkpoint_for_other_sizes_is_refused_clearly():
    head = attnzoo.create("laat", num_labels=5, attention_size=6, hidden_size=8)
    state = {
        "first_linear.weight": torch.randn(6, 8),
        "second_linear.weight": torch.randn(7, 6),
        "third_linear.weight": torch.randn(7, 8),
        "third_linear.bias": torch.randn(7),
    }
    with pytest.raises(RuntimeError, match="second_linear.weight.*torch.Size\\(\\[7, 6\\]\\)"):
        head.load_state_dict(state)
