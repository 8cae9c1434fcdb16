"""A node's ``args`` are the data it was built from: :func:`~attnzoo.keras.nodes.build_node` records them
(a copy of the spec less its ``op``) and no node class restates its constructor's arguments to do it.

The specs come from the converter (the committed Keras files of tests/data and models Keras builds in the
oracle subprocess); the statement checked is the contract itself, ``node.args == spec - {"op"}``, for every
node of every graph, wrapped layers included.
"""

from __future__ import annotations

import ast
import copy
import re

import pytest
import torch

import attnzoo.keras  # noqa: F401 - registers every node class (NODES)
from attnzoo.keras import convert_keras_model
from attnzoo.keras.nodes import NODES, Node, build_node

from .conftest import ROOT
from .test_keras_models import convert_both, oracle  # noqa: F401 - the Keras subprocess fixture, shared

DATA = ROOT / "tests" / "data"
# committed files that between them build 40 of the ops, each converted in a fraction of a second
COMMITTED = [
    "keras2/keras_io_vision.h5",
    "keras2/keras_io_sequences.h5",
    "keras2/masked_bidirectional.h5",
    "keras2/mha_fully_masked.h5",
    "keras2/same_padding.h5",
    "keras_structured/structured.keras",
    "keras_structured/hashing.h5",
    "keras_hub/positions.h5",
    "keras_hub/classifier.h5",
    "keras_live/next_frame.keras",
    "keras_live/numeric_preprocessing.h5",
    "keras_text/characters.keras",
    "hostile/base.keras",
    "keras_augment/geometry.keras",
    "keras_augment/stats.keras",
    "keras_hub_models/gpt2.keras",
    "keras_hub_models/llama.keras",
    "keras_hub_models/vit.keras",
    # keras-hub's families (their own layers' nodes)
    *(f"keras_hub_lm/{family}/backbone.keras" for family in ("bloom", "falcon", "gemma", "gpt_neox", "mistral")),
    *(f"keras_hub_lm/{family}/backbone.keras" for family in ("mixtral", "phi3_su", "qwen_moe")),
    "keras_hub_encoders/deberta_v3.keras",
    "keras_hub_route/dinov2.keras",
    "keras_hub_encoders/f_net.keras",
    "keras_hub_encoders/bert_masked_lm_preset",
    "keras_hub_seq2seq/t5/preset",
    *(f"keras_hub_vision/efficientnet/{file}.keras" for file in ("backbone", "classifier")),
    "keras_hub_vision/mobilenet/backbone.keras",
]
# the oracle's models that build the rest (merges and shapes, a nested model, keras.applications' layers)
ORACLE = {"shapes_and_merges": [[3, 1]], "shared_and_nested": [[2, 3]], "applications_layers": [[2, 1]]}


def _check(node, spec: dict, where: str, ops: set[str]) -> None:
    """``node.args`` is ``spec`` less ``op`` (and the graph's ``keras`` record, which is not the node's);
    a wrapped layer's spec (a value with an ``op``) is the data of the child node of that name."""
    expected = {k: v for k, v in spec.items() if k not in ("op", "keras")}
    assert type(node) is NODES[spec["op"]], where
    assert node.args == expected, f"{where}: args {node.args} are not its spec {expected}"
    ops.add(spec["op"])
    for key, value in expected.items():
        if isinstance(value, dict) and "op" in value:
            _check(getattr(node, key), value, f"{where}.{key}", ops)


def _check_model(model, what: str) -> set[str]:
    """Every node of the converted model, and the same spec built again by build_node, records its spec. A
    layer the emitted module declares as torch's own class (``nn.Linear`` for a Dense) is no node: the
    model holds that class, and the node build_node makes of its spec records the spec."""
    ops: set[str] = set()
    for key, spec in model.graph["layers"].items():
        layer = model.layers[key]
        if isinstance(layer, Node):
            _check(layer, spec, f"{what}: {key}", ops)
        else:
            # torch's own class, or a named module of attnzoo.keras.torch_layers where Keras's semantics differ
            # (KerasBatchNorm, KerasNormalization)
            torch_class = next(c for c in type(layer).__mro__ if c.__module__.startswith("torch.nn."))
            ours = type(layer).__module__.startswith("attnzoo.keras.torch_layers.")
            assert ours or torch_class is not torch.nn.Module, (what, key, type(layer))
        _check(build_node({k: v for k, v in spec.items() if k != "keras"}), spec, f"{what}: {key} (again)", ops)
    return ops


@pytest.mark.parametrize("name", COMMITTED)
def test_every_node_of_a_committed_file_records_the_spec_it_was_built_from(name):
    model = convert_keras_model(DATA / name)
    assert _check_model(model, name)
    # a node the module still calls takes typed tensors and keywords (keras_call), never the lists of the
    # node protocol: ``layers.x([a], {...}, [a_mask])``
    assert not re.search(r"layers(\.\w+|\[[^\]]+\])\(\[", model.code), name


@pytest.mark.slow
def test_every_op_records_its_spec_in_the_oracle_s_models_and_the_files(oracle, tmp_path):  # noqa: F811
    ops: set[str] = set()
    for name, batches in ORACLE.items():
        folder = convert_both(oracle, tmp_path / name, name=name, seed=3, batches=batches)
        ops |= _check_model(convert_keras_model(folder / "model.keras"), name)
    for name in COMMITTED:
        ops |= _check_model(convert_keras_model(DATA / name), name)
    # Keras 2's RandomHeight, which keras 3 (the oracle) does not have and no committed file holds: its spec
    # as the converter writes it, built
    from attnzoo.keras.converters.augmentation import convert_random_resize
    from attnzoo.keras.graph import LayerPath, LayerRecord
    from attnzoo.keras.registry import Context

    config = {"name": "random_height", "factor": [-0.2, 0.3], "interpolation": "nearest"}
    record = LayerRecord("RandomHeight", LayerPath(("h",), ("h",), (0,)), "h", None, "keras.layers", config)
    spec = convert_random_resize(record, [], Context(major=2, where="test")).spec
    _check(build_node(dict(spec)), spec, "RandomHeight", ops)
    # a folder saved when Keras 2's RandomBrightness / RandomContrast converted as the identity (no converter
    # writes this op now; such folders still load)
    legacy = {"op": "augmentation", "keras_class": "RandomBrightness"}
    _check(build_node(dict(legacy)), legacy, "a saved Augmentation", ops)
    assert ops == set(NODES), f"no fixture here builds {sorted(set(NODES) - ops)}: add one that does"


def test_args_are_a_copy_the_spec_s_later_changes_do_not_reach():
    spec = {"op": "permute", "dims": [2, 1]}
    node = build_node(spec)
    spec["dims"].append(3)
    spec["extra"] = True
    assert node.args == {"dims": [2, 1]}
    assert spec == {"op": "permute", "dims": [2, 1, 3], "extra": True}  # build_node took nothing from it


def test_the_repr_lists_the_arguments_in_the_constructor_s_order_whatever_the_spec_s():
    """A saved config's keys come back sorted; the repr reads as the constructor call either way."""
    written = {"op": "dense", "units": 3, "in_features": 2, "activation": "relu", "use_bias": False}
    shuffled = {"use_bias": False, "op": "dense", "activation": "relu", "in_features": 2, "units": 3}
    for spec in (written, shuffled):
        text = repr(build_node(copy.deepcopy(spec)))
        assert text == "Dense(units=3, in_features=2, activation='relu', use_bias=False)"


def test_no_node_class_passes_arguments_to_super_init():
    """The house rule behind ``args``: a class in attnzoo/keras/converters calls plain ``super().__init__()``
    (build_node records the arguments; a restated copy could drift from the constructor's)."""
    offenders, calls = [], 0
    for path in sorted((ROOT / "attnzoo" / "keras" / "converters").glob("*.py")):
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            inner = call.func.value
            if call.func.attr == "__init__" and isinstance(inner, ast.Call) and ast.unparse(inner) == "super()":
                calls += 1
                if call.args or call.keywords:
                    offenders.append(f"{path.name}:{call.lineno}: {ast.unparse(call)}")
    assert calls >= 40, "the walk finds the node classes' super().__init__ calls"
    assert not offenders, "node classes record arguments themselves:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "shape, axis", [([2, 5, 4, 3], -1), ([2, 3, 5, 4], 1), ([2, 5, 3, 4], 2), ([6, 3], -1), ([2, 7, 3], 2)]
)
def test_batch_norm_at_inference_is_keras_s_formula_on_any_axis(shape, axis):
    """y = (x - moving_mean) / sqrt(moving_variance + epsilon) * gamma + beta along ``axis``, written out in
    float64: the channels-last and channels-first cases go through torch's kernel, other axes do not."""
    import torch

    features = shape[axis]
    node = build_node(
        {"op": "batch_norm", "axis": axis, "features": features, "epsilon": 1e-3, "center": True, "scale": True}
    ).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in (node.weight, node.bias, node.running_mean):
            tensor.copy_(torch.randn(features, generator=g))
        node.running_var.copy_(torch.rand(features, generator=g) + 0.1)
    x = torch.randn(*shape, generator=g)
    view = [1] * len(shape)
    view[axis] = -1
    mean, var, gamma, beta = (
        t.double().reshape(view) for t in (node.running_mean, node.running_var, node.weight, node.bias)
    )
    want = (x.double() - mean) / torch.sqrt(var + 1e-3) * gamma + beta
    with torch.no_grad():
        got = node.compute(x, None)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)
    assert got.dtype == torch.float32 and got.shape == x.shape


def test_batch_norm_at_inference_of_a_bfloat16_model_computes_in_float32_and_returns_bfloat16():
    import torch

    spec = {"op": "batch_norm", "axis": -1, "features": 3, "epsilon": 1e-3, "center": True, "scale": True}
    node = build_node(spec).eval()
    with torch.no_grad():
        node.running_var.copy_(torch.tensor([0.5, 2.0, 4.0]))
        node.running_mean.copy_(torch.tensor([1.0, -1.0, 0.25]))
    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(1))
    want = (x.double() - node.running_mean.double()) / torch.sqrt(node.running_var.double() + 1e-3)
    with torch.no_grad():
        got = node.to(torch.bfloat16).compute(x.to(torch.bfloat16), None)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want, rtol=0.02, atol=0.02)


def test_a_node_class_that_says_it_reads_no_mask_never_names_compute_s_mask():
    """``reads_mask = False`` keeps the mask out of the emitted typed call (``layers.x(x)``): true only where
    the class's ``compute`` never names its mask parameter (read from its source), and said of some classes."""
    import inspect
    import textwrap

    silent = [cls for cls in NODES.values() if not cls.reads_mask]
    assert len(silent) > 10
    for cls in silent:
        compute = ast.parse(textwrap.dedent(inspect.getsource(cls.compute))).body[0]
        assert isinstance(compute, ast.FunctionDef)
        mask = compute.args.args[2].arg
        named = {node.id for node in ast.walk(compute) if isinstance(node, ast.Name)}
        assert mask not in named, f"{cls.__name__}.compute reads {mask!r} but says reads_mask = False"
