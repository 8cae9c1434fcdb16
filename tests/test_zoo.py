"""Properties every registered variant must have, parametrised over the registry itself.

A new card is tested the day it is registered: it must appear in CONFIGS below (a small config that
builds it), or the first test fails and says so.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

import attnzoo

# the smallest config that builds each variant (sizes left lazy where the card allows it)
CONFIGS: dict[str, dict] = {
    "labelwise": dict(num_labels=3),
    "labelwise_batched": dict(num_labels=3),
    "keras_attn": dict(num_classes=2),
    "attn_pool": dict(attention_size=5),
    "qkv_self": dict(num_heads=2),
    "dot": dict(scaled=True),
    "general": {},
    "additive": dict(attention_size=5),
    "seq2seq_attn": dict(score="additive"),
    "cnn_bilstm_attn": dict(num_classes=3, backbone="test_resnet", lstm_hidden=8),
    "bilstm_labelwise": dict(vocab_size=50, num_labels=3, embed_dim=8, hidden=4),
    "bilstm_attn_pool": dict(vocab_size=50, num_classes=3, embed_dim=8, hidden=4),
    "g2p_seq2seq": dict(num_letters=20, num_phonemes=12, embed_dim=8, hidden=4, decoder_hidden=6),
    "keras_dot": dict(use_scale=True, score_mode="concat"),
    "keras_additive": {},
    "keras_mha": dict(num_heads=2, key_dim=3, value_dim=4, output_shape=5),
    "lwan": dict(num_labels=3),
    "caml": dict(num_labels=3),
    "laat": dict(num_labels=3, attention_size=5),
    "joint_laat": dict(num_labels=3, num_parent_labels=2, attention_size=5, projection_size=2),
    "plm_ca": dict(num_labels=3),
    "conv_caml": dict(vocab_size=50, num_labels=3, embed_dim=8, hidden=4, kernel_size=3),
    "bilstm_laat": dict(vocab_size=50, num_labels=3, embed_dim=8, hidden=4, attention_size=5),
    "bilstm_joint_laat": dict(vocab_size=50, num_labels=3, embed_dim=8, hidden=4, attention_size=5,
                              num_parent_labels=2),
    "bilstm_plm_ca": dict(vocab_size=50, num_labels=3, embed_dim=8, hidden=4),
}

NAMES = attnzoo.list_models()


def build(name, **kw):
    torch.manual_seed(0)
    model = attnzoo.create(name, **CONFIGS[name], **kw)
    return model.eval()


def run(model, inputs, kwargs):
    with torch.no_grad():
        return model(*inputs, **kwargs)


def flatten(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def test_every_registered_variant_has_a_test_config():
    missing = [n for n in NAMES if n not in CONFIGS]
    assert not missing, f"add a small config for {missing} to tests/test_zoo.py CONFIGS"


@pytest.mark.parametrize("name", NAMES)
def test_card_is_complete(name):
    spec = attnzoo.model_info(name)
    assert spec.summary and spec.reference, f"{name}: card needs a summary and a reference"
    import importlib

    module, _, attr = spec.factory.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    doc = factory.__doc__ or ""
    module_doc = importlib.import_module(module).__doc__ or ""
    assert "[" in doc + module_doc and "]" in doc + module_doc, f"{name}: docstrings must state shapes"


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_gives_identical_outputs(name, tmp_path):
    model = build(name)
    inputs, kwargs = model.example_inputs()
    expected = run(model, inputs, kwargs)
    fresh = attnzoo.create(name, **CONFIGS[name]).eval()  # lazy where the card allows it
    fresh.load_state_dict(model.state_dict())
    for a, b in zip(flatten(run(fresh, inputs, kwargs)), flatten(expected)):
        assert torch.equal(a, b)
    again = attnzoo.load(attnzoo.save(model, tmp_path / name)).eval()
    for a, b in zip(flatten(run(again, inputs, kwargs)), flatten(expected)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_runs_on_the_meta_device(name):
    model = attnzoo.create(name, **CONFIGS[name], device="meta").eval()
    inputs, kwargs = model.example_inputs()
    if any(True for _ in model.parameters()):  # example inputs follow the layer's own device
        assert all(t.device.type == "meta" for t in inputs if isinstance(t, torch.Tensor))
    else:
        inputs = tuple(t.to("meta") for t in inputs)
        kwargs = {k: v.to("meta") for k, v in kwargs.items()}
    reference = build(name)
    ref_inputs, ref_kwargs = reference.example_inputs()
    expected = flatten(run(reference, ref_inputs, ref_kwargs))
    outputs = flatten(run(model, inputs, kwargs))
    assert [o.shape for o in outputs] == [e.shape for e in expected]
    assert all(o.device.type == "meta" for o in outputs)
    assert all(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_forward_is_finite_and_close(name, dtype):
    reference = build(name)
    inputs, kwargs = reference.example_inputs()
    expected = flatten(run(reference, inputs, kwargs))
    model = build(name)
    model.load_state_dict(reference.state_dict())
    model = model.to(getattr(torch, dtype))
    half = tuple(t.to(getattr(torch, dtype)) if t.is_floating_point() else t for t in inputs)
    outputs = flatten(run(model, half, kwargs))
    for o, e in zip(outputs, expected):
        assert o.dtype == getattr(torch, dtype) and torch.isfinite(o).all()
        torch.testing.assert_close(o.float(), e, atol=0.15, rtol=0.1)


@pytest.mark.parametrize("name", [n for n in NAMES if attnzoo.model_info(n).kind == "layer"])
def test_gradcheck_in_float64_for_inputs_and_parameters(name):
    model = build(name, dtype="float64")
    inputs, kwargs = model.example_inputs(batch=2, seq=4)
    run(model, inputs, kwargs)  # materialise lazy sizes first
    params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    leaves = [t.detach().double().requires_grad_() if t.is_floating_point() else t for t in inputs]
    names = list(params)

    def f(*flat):
        state = dict(zip(names, flat[: len(names)]))
        out = functional_call(model, state, tuple(flat[len(names):]), kwargs)
        return tuple(flatten(out))

    assert torch.autograd.gradcheck(f, (*params.values(), *leaves), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in NAMES if attnzoo.model_info(n).kind == "model"])
def test_models_train_one_step(name):
    model = build(name).train()
    inputs, kwargs = model.example_inputs()
    out = flatten(model(*inputs, **kwargs))[0]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    out.sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert len(changed) > len(before) // 2


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_works_under_torch_compile(name):
    torch._dynamo.reset()
    model = build(name)
    inputs, kwargs = model.example_inputs()
    expected = flatten(run(model, inputs, kwargs))  # eager first: lazy sizes are set outside the graph
    compiled = torch.compile(model)
    outputs = flatten(run(compiled, inputs, kwargs))
    for o, e in zip(outputs, expected):
        torch.testing.assert_close(o, e, atol=1e-5, rtol=1e-5)
