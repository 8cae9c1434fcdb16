"""One plan, printed and run: a converted Keras model runs the ``forward`` its ``to_source()`` prints.

References: the printed text itself (``inspect.getsource`` of the function that runs, a traceback's line),
the committed review classifier's predictions that Keras made (tests/data/keras_docs/expected.npz), the
embedding table read by hand, and object lifetimes seen through weak references."""

from __future__ import annotations

import copy
import inspect
import pickle
import traceback
import weakref

import numpy as np
import pytest
import torch
from torch import nn

from attnzoo.errors import ConfigError
from attnzoo.keras import convert_keras_model
from attnzoo.keras.codegen import check_source

from .conftest import ROOT

FOLDER = ROOT / "tests" / "data" / "keras_docs"


@pytest.fixture(scope="module")
def model():
    return convert_keras_model(FOLDER / "review_classifier.keras").eval()


@pytest.fixture(scope="module")
def expected():
    return np.load(FOLDER / "expected.npz")


def test_the_forward_that_runs_is_the_printed_one_text_for_text(model):
    source = model.to_source()
    assert model.code == source
    printed_forward = "    def forward(" + source.split("    def forward(", 1)[1]
    assert inspect.getsource(model.compiled_forward) == printed_forward
    # and the model's forward calls it: a call of the compiled function is seen at each model call
    calls = []
    original = model.compiled_forward

    def count(frame, event, arg):
        if event == "call" and frame.f_code is original.__code__:
            calls.append(frame.f_code.co_filename)
        return None

    ids = torch.tensor([[3, 4, 5, 0]])
    import sys

    sys.settrace(count)
    try:
        with torch.no_grad():
            model(ids)
    finally:
        sys.settrace(None)
    assert len(calls) == 1 and calls[0].startswith("<attnzoo port ReviewClassifier")


def test_the_compiled_port_predicts_what_keras_did(model, expected):
    with torch.no_grad():
        got = model(torch.from_numpy(expected["ids"]))
    np.testing.assert_allclose(got.numpy(), expected["predictions"], rtol=0, atol=1e-6)


def test_the_layers_are_torch_s_own_where_the_module_declares_them_and_hold_the_converted_weights(model):
    assert type(model.layers["embedding"]) is nn.Embedding
    assert type(model.layers["positive"]) is nn.Linear
    assert set(model.state_dict()) >= {"layers.embedding.weight", "layers.positive.weight", "layers.positive.bias"}
    # saved weights load as they are into the printed module, whose forward gives the model's outputs
    namespace: dict = {}
    exec(compile(model.code, "port.py", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace["ReviewClassifier"]()
    port.load_state_dict(model.state_dict())
    ids = torch.tensor([[7, 1, 0, 0], [2, 9, 4, 3]])
    with torch.no_grad():
        torch.testing.assert_close(port.eval()(ids), model(ids), rtol=0, atol=0)


def test_trace_gives_every_call_s_outputs_from_the_same_forward(model):
    ids = torch.tensor([[7, 1, 0, 0], [2, 9, 4, 3]])
    with torch.no_grad():
        values = model.trace(ids)
        out = model(ids)
    table = model.layers["embedding"].weight
    torch.testing.assert_close(values["embedding"][0], table[ids], rtol=0, atol=0)  # the table read by hand
    torch.testing.assert_close(values["not_equal"][0], ids != 0, rtol=0, atol=0)
    torch.testing.assert_close(values["positive"][0], out, rtol=0, atol=0)
    assert list(values) == ["ids"] + [call["id"] for call in model.calls]


def test_the_forward_lets_go_of_each_tensor_after_its_last_reader(model):
    """The Dense at the end runs when the embedding's output (read only by the BiLSTM) is already freed, as
    a hand-written forward frees it; the pooled input it reads is alive."""
    seen: dict[str, weakref.ref] = {}
    alive_at_dense: dict[str, bool] = {}

    def keep(name):
        def hook(module, inputs, output):
            seen[name] = weakref.ref(output)

        return hook

    def check(module, inputs):
        alive_at_dense.update({name: ref() is not None for name, ref in seen.items()})

    handles = [
        model.layers["embedding"].register_forward_hook(keep("embedding")),
        model.layers["positive"].register_forward_pre_hook(check),
    ]
    try:
        with torch.no_grad():
            model(torch.tensor([[7, 1, 0, 0], [2, 9, 4, 3]]))
    finally:
        for handle in handles:
            handle.remove()
    assert alive_at_dense == {"embedding": False}


def test_an_error_names_the_keras_layer_and_the_traceback_shows_the_emitted_line(model):
    bad = copy.deepcopy(model)
    bad.layers["positive"] = nn.Linear(5, 1)  # a layer that cannot read the pooled 24 features
    with pytest.raises(ValueError, match=r"layer 'positive' \(Dense\)") as caught:
        bad(torch.tensor([[7, 1, 0, 0]]))
    assert caught.value.__cause__ is None
    # the traceback of the underlying error, where the model's run does not translate it, shows the line
    with pytest.raises(RuntimeError) as raw:
        bad.compiled_forward(bad, torch.tensor([[7, 1, 0, 0]]))
    text = "".join(traceback.format_exception(raw.value))
    assert "positive = torch.sigmoid(layers.positive(pool))" in text


def test_a_copied_or_pickled_model_runs_the_same_forward(model):
    ids = torch.tensor([[7, 1, 0, 0], [2, 9, 4, 3]])
    with torch.no_grad():
        want = model(ids)
        for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):  # noqa: S301 - our own object
            torch.testing.assert_close(other(ids), want, rtol=0, atol=0)
            assert other.code == model.code


@pytest.mark.parametrize(
    "statement",
    ["del torch", "del layers", "del self.layers", "del pool_keep[0]", "del KERAS_NAMES", "del unknown_name"],
)
def test_the_source_checker_lets_forward_delete_only_its_own_variables(model, statement):
    check_source(model.code)  # the module as written, its own del statements included
    assert "        del pool\n" not in model.code and "        del embedding\n" in model.code
    edited = model.code.replace("        return positive\n", f"        {statement}\n        return positive\n")
    assert edited != model.code
    with pytest.raises(ConfigError, match="del"):
        check_source(edited)
