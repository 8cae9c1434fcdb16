"""``to_source()`` writes the stateless nodes (Keras 3's recorded operations, Concatenate, global pooling) as
torch expressions in ``forward``, with no layer declared, and the expressions compute what the nodes do:
the node the converted model runs is the reference, and the masked average pooling is checked by hand.
tests/test_emitted_layout.py counts, over the Keras fixtures, the layers the modules still declare."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import attnzoo


def _port(model, source: str):
    namespace: dict = {}
    exec(compile(source, "port.py", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace[source.split("\nclass ", 1)[1].split("(", 1)[0]]()
    port.load_state_dict(model.state_dict())
    return port.eval()


def _graph(inputs: list[tuple[str, str]], layers: dict, calls: list, outputs: list) -> dict:
    return {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": n, "name": n, "shape": [None, None, None], "dtype": d} for n, d in inputs],
        "layers": layers,
        "calls": calls,
        "outputs": outputs,
    }


def _call(name: str, *args, **kwargs) -> dict:
    return {"id": name, "layer": name, "args": list(args), "kwargs": kwargs}


def _ref(name: str) -> dict:
    return {"ref": [name, 0]}


def test_the_masked_average_pooling_written_out_gives_the_hand_computed_means():
    """Two samples of three steps, a mask from ``ids != 0``: the mean over the kept steps; a sample with no
    kept step gives 0 (the node's rule; Keras divides 0 by 0)."""
    graph = _graph(
        [("x", "float32"), ("ids", "int32")],
        {
            "not_equal": {"op": "operation", "name": "not_equal", "config": {}},
            "pool": {"op": "global_pool", "rank": 1, "kind": "average", "keepdims": False, "channels_first": False},
        },
        [_call("not_equal", _ref("ids"), 0), _call("pool", _ref("x"), mask=_ref("not_equal"))],
        [["pool", 0]],
    )
    graph["inputs"][1]["shape"] = [None, None]
    model = attnzoo.create("keras_model", graph=graph)
    source = model.to_source()
    assert "GlobalPool" not in source and "Operation" not in source and "self.layers[" not in source
    assert "not_equal = ids != 0" in source
    x = torch.tensor(
        [
            [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
            [[1.0, 1.0], [2.0, 2.0], [9.0, 9.0]],
            [[7.0, 7.0], [7.0, 7.0], [7.0, 7.0]],
        ]
    )
    ids = torch.tensor([[4, 2, 0], [0, 0, 3], [0, 0, 0]], dtype=torch.int32)
    # by hand: (1 + 3) / 2, (2 + 4) / 2; the third step alone; nothing kept: 0
    expected = torch.tensor([[2.0, 3.0], [9.0, 9.0], [0.0, 0.0]])
    with torch.no_grad():
        torch.testing.assert_close(_port(model, source)(x, ids), expected, rtol=0, atol=0)
        torch.testing.assert_close(model(x, ids), expected, rtol=0, atol=0)


# (operation name, its config, the call's arguments after the tensor "x"); each one a plain expression
OPERATIONS = [
    ("not_equal", {}, [0.5]),
    ("greater_equal", {}, [1]),
    ("subtract", {}, ["y"]),
    ("divide", {}, ["y"]),
    ("power", {}, [2]),
    ("maximum", {}, ["y"]),
    ("sqrt", {}, []),
    ("negative", {}, []),
    ("cast", {"dtype": "float64"}, []),
    ("sum", {"axis": 1, "keepdims": True}, []),
    ("max", {"axis": [1, 2], "keepdims": False}, []),
    ("expand_dims", {"axis": 1}, []),
    ("softmax", {"axis": 1}, []),
    ("transpose", {"axes": [0, 2, 1]}, []),
    ("reshape", {"newshape": [None, 12]}, []),
    ("get_item", {}, [[{"slice": [None, None, None]}, -1]]),
    ("get_item", {}, [[{"ellipsis": True}, {"slice": [1, None, 2]}]]),
    ("matmul", {}, ["yt"]),
]


@pytest.mark.parametrize("name, config, rest", OPERATIONS, ids=[f"{o[0]}{i}" for i, o in enumerate(OPERATIONS)])
def test_an_operation_written_out_computes_what_its_node_computes(name, config, rest):
    args = [_ref("x")] + [_ref(a) if a in ("y", "yt") else a for a in rest]
    layers = {"op": {"op": "operation", "name": name, "config": config}}
    calls = [_call("op", *args)]
    if "yt" in rest:  # a second tensor of the transposed shape, made by an operation too
        layers["yt"] = {"op": "operation", "name": "transpose", "config": {"axes": [0, 2, 1]}}
        calls.insert(0, _call("yt", _ref("y")))
    model = attnzoo.create(
        "keras_model", graph=_graph([("x", "float32"), ("y", "float32")], layers, calls, [["op", 0]])
    )
    source = model.to_source()
    assert "Operation" not in source and "self.layers[" not in source, source
    x, y = torch.rand(2, 3, 4) + 0.5, torch.rand(2, 3, 4) + 0.5
    x[0, 0, 0] = 1.0  # >= and > differ here
    with torch.no_grad():
        got, want = _port(model, source)(x, y), model(x, y)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_operation_the_emitter_cannot_write_exactly_stays_a_node_call():
    """A constant that is not a plain number (``True``: the emitter writes numbers only), and a cast of a
    masked tensor (``.to`` may return the tensor itself, whose mask the node's output then replaces): the
    node class, and the same outputs."""
    graph = _graph(
        [("x", "float32")],
        {
            "masking": {"op": "masking", "mask_value": 0.0},
            "add": {"op": "operation", "name": "add", "config": {}},
            "cast": {"op": "operation", "name": "cast", "config": {"dtype": "float32"}},
        },
        [_call("masking", _ref("x")), _call("add", _ref("x"), True), _call("cast", _ref("masking"))],
        [["add", 0], ["cast", 0]],
    )
    model = attnzoo.create("keras_model", graph=graph)
    source = model.to_source()
    assert source.count("= Operation(") == 2
    x = torch.rand(2, 3, 2)
    with torch.no_grad():
        for got, want in zip(_port(model, source)(x), model(x), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("axis", [1, -1])
def test_a_concatenate_of_masked_and_unmasked_tensors_writes_keras_s_mask(axis):
    """Concatenate of an Embedding's masked output and an unmasked one, then a masked average pooling over it:
    the mask the pooling reads is the one the Concatenate node makes (1e-6 on the outputs). Along the steps,
    the unmasked steps are kept; along the features, Keras's any over them keeps every step."""
    graph = _graph(
        [("ids", "int32"), ("x", "float32")],
        {
            "embedding": {"op": "embedding", "input_dim": 5, "output_dim": 3, "mask_zero": True},
            "concatenate": {"op": "concatenate", "axis": axis},
            "pool": {"op": "global_pool", "rank": 1, "kind": "average", "keepdims": False, "channels_first": False},
        },
        [
            _call("embedding", _ref("ids")),
            _call("concatenate", [_ref("embedding"), _ref("x")]),
            _call("pool", _ref("concatenate")),
        ],
        [["pool", 0]],
    )
    graph["inputs"][0]["shape"] = [None, None]
    model = attnzoo.create("keras_model", graph=graph)
    source = model.to_source()
    assert "Concatenate" not in source and "GlobalPool" not in source
    ids = torch.tensor([[1, 0, 2], [0, 0, 0]], dtype=torch.int32)
    x = torch.rand(2, 2, 3) if axis == 1 else torch.rand(2, 3, 2)
    with torch.no_grad():
        torch.testing.assert_close(_port(model, source)(ids, x), model(ids, x), rtol=0, atol=1e-6)


def test_the_written_operations_pass_ruff_format_and_check(tmp_path):
    """The modules of the operations above, as a user keeps them: ``ruff format --check`` and ``ruff check``
    (isolated: ruff's own defaults) leave them as they are."""
    for i, (name, config, rest) in enumerate(OPERATIONS):
        args = [_ref("x")] + [_ref(a) if a in ("y", "yt") else a for a in rest]
        layers = {"op": {"op": "operation", "name": name, "config": config}}
        inputs = [("x", "float32"), ("y", "float32"), ("yt", "float32")]
        model = attnzoo.create("keras_model", graph=_graph(inputs, layers, [_call("op", *args)], [["op", 0]]))
        (tmp_path / f"port_{i}.py").write_text(model.to_source(), encoding="utf-8")
    for arguments in (["format", "--isolated", "--check"], ["check", "--isolated", "--extend-select", "I"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "."], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, (arguments, result.stdout[-3000:])
