"""A converted model takes its inputs as Keras names them (attnzoo/keras/inputs.py): by keyword, as the dict
Keras takes, or in Keras's flat order (a dict's entries by sorted key), mixed as Python binds a call; the
emitted module's ``forward`` has the same keywords. An input whose values cannot be what it is (token ids
where the padding mask goes, ids past their table) is refused naming it.

Oracles: Keras's own outputs for the keras-hub BERT (a dict of inputs) and for a user's functional model of
two inputs (``keras.Model([token_ids, padding_mask], ...)`` over a DistilBERT backbone), both in
tests/data/keras_hub_models/expected.npz (tests/keras_hub_models_fixtures.py made them).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import warnings

import numpy as np
import pytest
import safetensors.torch
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.inputs import input_names, tracing, value_rules

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_models"
EXPECTED = dict(np.load(DATA / "expected.npz"))


def _inputs(case: str) -> dict[str, torch.Tensor]:
    return {k.split("/")[-1]: torch.from_numpy(v) for k, v in EXPECTED.items() if k.startswith(f"{case}/in/")}


def _assert_keras(got, case: str) -> None:
    wanted = sorted(k.split("/")[-1] for k in EXPECTED if k.startswith(f"{case}/out/"))
    got = got if isinstance(got, dict) else dict(zip(("pooled_output", "sequence_output"), got, strict=True))
    assert sorted(got) == wanted
    for name in wanted:
        np.testing.assert_allclose(got[name].numpy(), EXPECTED[f"{case}/out/{name}"], atol=1e-5, rtol=0, err_msg=name)


@pytest.fixture(scope="module")
def bert():
    return convert_keras_model(DATA / "bert.keras").eval()


@pytest.fixture(scope="module")
def user_model():
    """A functional model of two inputs, [token_ids, padding_mask], in that order."""
    return convert_keras_model(DATA / "user_model.keras").eval()


# -- by name, as the dict, in Keras's order ------------------------------------------------------------------
def test_bert_takes_keywords_the_dict_keras_s_order_and_a_bool_mask_and_gives_keras_s_outputs(bert):
    x = _inputs("bert")
    ids, mask, segments = x["token_ids"], x["padding_mask"], x["segment_ids"]
    assert bert.input_names == ["padding_mask", "segment_ids", "token_ids"]  # Keras's flat order: sorted keys
    with torch.no_grad():
        for call in (
            lambda: bert(token_ids=ids, padding_mask=mask, segment_ids=segments),
            lambda: bert({"token_ids": ids, "segment_ids": segments, "padding_mask": mask}),
            lambda: bert(mask, segments, ids),
            lambda: bert(mask, token_ids=ids, segment_ids=segments),  # the first names by position
            lambda: bert(token_ids=ids, padding_mask=mask.bool(), segment_ids=segments),  # cast as Keras casts it
            lambda: bert(token_ids=ids.long().numpy(), padding_mask=mask.numpy(), segment_ids=segments.numpy()),
        ):
            _assert_keras(call(), "bert")


def test_a_swapped_order_is_refused_naming_the_input_it_reached(bert):
    """token_ids where padding_mask goes (the order a user writes them in): the padding mask holds ids."""
    x = _inputs("bert")
    with pytest.raises(ValueError, match=r"input 'padding_mask' is a padding mask .* from 0 to \d+") as caught:
        bert(x["token_ids"], x["padding_mask"], x["segment_ids"])
    message = str(caught.value)
    assert "Keras's order (padding_mask, segment_ids, token_ids)" in message
    assert "model(padding_mask=..., segment_ids=..., token_ids=...)" in message
    bert.checks_values = False  # unchecked, the swapped order runs to outputs far from Keras's
    try:
        with torch.no_grad():
            swapped = bert(x["token_ids"], x["padding_mask"], x["segment_ids"])
    finally:
        bert.checks_values = True
    gap = np.abs(swapped["sequence_output"].numpy() - EXPECTED["bert/out/sequence_output"]).max()
    assert gap > 2.0


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        ("segment_ids", lambda t: t + 1, r"input 'segment_ids' holds ids from 1 to 2, .* table it indexes has 2 rows"),
        (
            "token_ids",
            lambda t: t - 1,
            r"input 'token_ids' holds ids from -1 to .* has 100 rows; pass ids in \[0, 100\)",
        ),
        ("token_ids", lambda t: t + 100, r"input 'token_ids' holds ids from 100 to"),
        ("padding_mask", lambda t: -t, r"input 'padding_mask' is a padding mask .* values from -1 to 0"),
    ],
)
def test_values_an_input_cannot_hold_are_refused_naming_it(bert, name, change, match):
    x = _inputs("bert")
    with pytest.raises(ValueError, match=match) as caught:
        bert(**{**x, name: change(x[name])})
    assert "Keras's order" not in str(caught.value)  # given by name: no order to blame


def test_a_float_padding_mask_is_refused_saying_what_a_padding_mask_takes(bert):
    x = _inputs("bert")
    with pytest.raises(ValueError, match=r"'padding_mask' as a padding mask of 1 and 0 \(ints or bools\)"):
        bert(**{**x, "padding_mask": x["padding_mask"].float()})


def test_unknown_missing_and_twice_given_names_are_clear_errors(bert):
    x = _inputs("bert")
    listing = r"its inputs, in Keras's order: 'padding_mask', 'segment_ids', 'token_ids'"
    with pytest.raises(ValueError, match=r"no input 'token_id' \(did you mean 'token_ids'\?\), given in the call; "):
        bert(token_id=x["token_ids"], padding_mask=x["padding_mask"], segment_ids=x["segment_ids"])
    with pytest.raises(ValueError, match=r"missing input\(s\) 'padding_mask', 'segment_ids'; " + listing):
        bert(token_ids=x["token_ids"])
    with pytest.raises(ValueError, match=r"got input 'padding_mask' twice: as positional input 1"):
        bert(x["padding_mask"], padding_mask=x["padding_mask"])
    with pytest.raises(ValueError, match=r"takes 3 input\(s\), got 4 positionally"):
        bert(*x.values(), x["token_ids"])
    with pytest.raises(ValueError, match=r"no input 'segments' .*given in the dict; missing 'segment_ids'"):
        bert({"token_ids": x["token_ids"], "padding_mask": x["padding_mask"], "segments": x["segment_ids"]})


def test_the_padding_mask_and_the_ids_are_known_by_what_they_feed(bert, user_model):
    """The padding mask by the keras-hub layer that takes it (through the nested backbone's input too), the ids
    by the Embedding table they index (the segment table: 2 rows)."""
    rules = dict(zip(input_names(bert.graph), value_rules(bert.graph), strict=True))
    assert {k: (r.kind, r.high) for k, r in rules.items() if r} == {
        "padding_mask": ("padding mask", 2),
        "segment_ids": ("ids", 2),
        "token_ids": ("ids", 100),
    }
    graph = {**user_model.graph, "inputs": [dict(s, name=f"in{i}") for i, s in enumerate(user_model.graph["inputs"])]}
    assert [r and r.kind for r in value_rules(graph)] == ["ids", "padding mask"]  # not by its name: by its use


# -- a functional model of two inputs ------------------------------------------------------------------------
def test_a_functional_model_of_two_inputs_takes_them_by_name_as_a_dict_and_in_order(user_model):
    x = _inputs("user_model")
    ids, mask = x["token_ids"], x["padding_mask"]
    assert user_model.input_names == ["token_ids", "padding_mask"]  # the list's order
    with torch.no_grad():
        for call in (
            lambda: user_model(padding_mask=mask, token_ids=ids),
            lambda: user_model({"padding_mask": mask, "token_ids": ids}),  # keras 3 takes a list model's by name
            lambda: user_model(ids, mask),
            lambda: user_model(ids, padding_mask=mask.bool()),
        ):
            _assert_keras(call(), "user_model")
    with pytest.raises(ValueError, match=r"input 'padding_mask' is a padding mask .*Keras's order \(token_ids, pad"):
        user_model(mask, ids)


# -- the emitted module ----------------------------------------------------------------------------------------
def _parameters(model) -> list[str]:
    namespace: dict = {}
    exec(compile(model.code, "port.py", "exec"), namespace)  # noqa: S102 - the code under test
    cls = namespace[model.emitted.class_name]
    return list(inspect.signature(cls.forward).parameters)[1:]


def test_the_emitted_forward_names_its_parameters_as_keras_names_the_inputs(bert, user_model):
    assert _parameters(bert) == ["padding_mask", "segment_ids", "token_ids"]
    assert _parameters(user_model) == ["token_ids", "padding_mask"]
    assert list(inspect.signature(bert.compiled_forward).parameters)[1:] == ["padding_mask", "segment_ids", "token_ids"]


def test_the_module_to_source_writes_runs_standalone_on_keywords(bert, tmp_path):
    """Written to a file, imported, given the saved folder's model.safetensors, called with keywords."""
    folder = attnzoo.save(bert, tmp_path / "port")
    (tmp_path / "bert_port.py").write_text(bert.to_source(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("bert_port", tmp_path / "bert_port.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bert_port"] = module
    try:
        spec.loader.exec_module(module)
        port = module.BertBackbone()
        port.load_state_dict(safetensors.torch.load_file(folder / "model.safetensors"))
        with torch.no_grad():
            got = port.eval()(**_inputs("bert"))
    finally:
        del sys.modules["bert_port"]
    _assert_keras(got, "bert")


def _two_inputs(first: str) -> object:
    """A graph of two float inputs added, the first named ``first``."""
    graph = {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [
            {"id": "a", "name": first, "shape": [None, 3], "dtype": "float32"},
            {"id": "b", "name": "b", "shape": [None, 3], "dtype": "float32"},
        ],
        "layers": {"add": {"op": "operation", "name": "add", "config": {}}},
        "calls": [{"id": "add", "layer": "add", "args": [{"ref": ["a", 0]}, {"ref": ["b", 0]}], "kwargs": {}}],
        "outputs": [["add", 0]],
    }
    return attnzoo.create("keras_model", graph=graph)


def test_a_name_that_is_no_python_name_is_reached_by_the_dict_and_the_error_says_so():
    model = _two_inputs("first input")
    x, y = torch.ones(2, 3), torch.full((2, 3), 2.0)
    torch.testing.assert_close(model({"first input": x, "b": y}), x + y)
    torch.testing.assert_close(model(x, b=y), x + y)
    with pytest.raises(ValueError, match=r"'first input' is no Python name: pass it in the dict Keras takes"):
        model(b=y)
    assert _parameters(model) == ["first_input", "b"]  # the emitted module's, made a name by codegen.identifier
    assert '"first_input": "first input"' in model.code  # KERAS_NAMES keeps Keras's


# -- traces, decoding, the switch ------------------------------------------------------------------------------
def test_an_export_holds_no_value_check_and_names_its_inputs_as_before(bert):
    """Traced with values eager would refuse (a padding mask of 2s): nothing is read, nothing recorded."""
    x = _inputs("bert")
    args = (x["padding_mask"] * 2, x["segment_ids"], x["token_ids"])
    program = torch.export.export(bert, args)
    assert not any("aminmax" in str(node.target) for node in program.graph.nodes)
    assert [n.name for n in program.graph.nodes if n.op == "placeholder"][-3:] == ["inputs_0", "inputs_1", "inputs_2"]


def test_tracing_is_seen_under_compile_jit_trace_and_make_fx():
    """What the value checks skip under: a trace records no read of the values."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(x):
        return x + int(tracing())

    zero = torch.zeros(1)
    assert step(zero).item() == 0  # eager
    assert torch.compile(step, backend="eager")(zero).item() == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jit.trace's re-run in eager differs, as it must
        assert torch.jit.trace(step, zero, check_trace=False)(zero).item() == 1
    assert make_fx(step)(zero)(zero).item() == 1


def test_checks_values_off_reads_no_values_and_generate_checks_the_prompt_once():
    model = convert_keras_model(DATA / "gpt2_causal_lm.keras").eval()
    ids = torch.randint(1, 100, (2, 5), generator=torch.Generator().manual_seed(0))
    assert model.generate(ids, 3).shape == (2, 8) and model.checks_values
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0  # the first step runs the shortest prompt's 3 tokens
    ids[1, 4] = 100  # past the table, at a prompt position a later step runs
    with pytest.raises(ValueError, match=r"input 'token_ids' holds ids from \d+ to 100"):
        model.generate(ids, 3, padding_mask=mask)
    assert model.checks_values  # restored
    model.checks_values = False
    with torch.no_grad():
        model(token_ids=ids.clamp(max=99), padding_mask=torch.full_like(ids, 2))  # not read: keras-hub takes it
    model.checks_values = True
    with pytest.raises(ValueError, match=r"input 'padding_mask' is a padding mask"):
        model(token_ids=ids.clamp(max=99), padding_mask=torch.full_like(ids, 2))
