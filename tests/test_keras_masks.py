"""Keras's mask rules live in one module (attnzoo/keras/masks.py), and say what Keras 3 does.

The oracle is Keras itself: a probe layer records whether Keras filled its ``mask`` argument for calls
whose other arguments are tensors, nested tensors, None, numbers or empty lists; ``call_masks`` must
say the same of the same calls written as graph data.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from attnzoo.keras.masks import call_masks, first_masks, layer_mask, reads_mask

from .conftest import ROOT, require_data, run_python

REF = {"ref": ["a", 0]}
OTHER = {"ref": ["b", 0]}
# (what the probe's `other` argument is in the Keras script, the same in graph data)
CASES = {
    "alone": (None, None),
    "tensor": ("b", OTHER),
    "list_with_none": ("[b, None]", [OTHER, None]),
    "only_none": ("[None]", [None]),
    "number": ("3.0", 3.0),
    "empty_list": ("[]", []),
    "dict_of_tensors": ('{"k": b}', {"k": OTHER}),
}

PROBE = """
import json, keras, numpy as np
seen = {}
class Probe(keras.layers.Layer):
    def call(self, x, other=None, mask=None):
        seen[self.name] = mask is not None
        return x
ids = np.array([[1, 2, 0]])
a = keras.layers.Embedding(5, 4, mask_zero=True)(ids)
b = keras.ops.ones((1, 3, 4))
cases = %s
for name, other in cases.items():
    probe = Probe(name=name)
    probe(a) if other is None else probe(a, other=eval(other))
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_keras_fills_a_layers_mask_exactly_when_call_masks_says_it_does():
    import importlib.util

    require_data(importlib.util.find_spec("keras") is not None, "keras 3 (the test extra)")
    cases = {name: script for name, (script, _) in CASES.items()}
    proc = run_python(PROBE % repr(cases), env={**os.environ, "KERAS_BACKEND": "torch"}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    keras_says = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = {
        name: call_masks({"args": [REF], "kwargs": {} if data is None else {"other": data}}, object(), True).implicit
        for name, (_, data) in CASES.items()
    }
    assert ours == keras_says
    assert keras_says["alone"] and not keras_says["tensor"] and keras_says["number"]  # the oracle discriminates


def test_an_explicit_mask_takes_the_first_arguments_place_and_keras_2_always_hands_the_mask():
    call = {"args": [REF, OTHER], "kwargs": {"mask": {"ref": ["m", 0]}}}
    plan = call_masks(call, object(), True)
    assert plan.explicit == {"ref": ["m", 0]} and plan.implicit  # an explicit mask is always handed
    assert first_masks(plan, ["mask_a", "mask_b"], lambda ref: "mask_m") == ["mask_m", "mask_b"]
    several = {"args": [REF, OTHER], "kwargs": {}}
    assert not call_masks(several, object(), True).implicit and call_masks(several, object(), False).implicit


def test_a_layer_that_clears_its_inputs_masks_clears_only_tensor_inputs():
    class MultiHead:
        clears_input_masks = True

    call = {"args": [REF, OTHER], "kwargs": {"key": {"ref": ["k", 0]}, "value": None, "training": False}}
    assert call_masks(call, MultiHead(), True).clears == (REF, OTHER, {"ref": ["k", 0]})
    assert call_masks(call, object(), True).clears == ()
    assert call_masks(call, MultiHead(), True).keyword == ("key",)


def test_a_node_reads_no_mask_where_keras_3_hands_none_but_its_output_still_carries_it():
    import torch

    mask, explicit = torch.tensor([[True, False]]), torch.tensor([[True, True]])
    plan = call_masks({"args": [REF, OTHER], "kwargs": {}}, object(), True)
    from attnzoo.keras.masks import kwargs_for_node

    kwargs = kwargs_for_node(plan, {}, {})
    assert not reads_mask(kwargs)
    read, carried = layer_mask(kwargs, mask)
    assert read is None and carried is mask
    assert layer_mask({"mask": explicit}, mask) == (explicit, explicit)


def test_no_module_but_masks_py_applies_keras_mask_rules():
    """The graph's runner (model.py), the source writer (source.py) and the nodes apply the rules through
    masks.py; a converter may only declare that its layer clears its inputs' masks."""
    keras_dir = ROOT / "attnzoo" / "keras"
    for path in keras_dir.rglob("*.py"):
        if path.name == "masks.py":
            continue
        text = path.read_text()
        assert "implicit_mask" not in text, path
        reads = [m for m in re.finditer(r"clears_input_masks(?! = )", text)]  # a declaration assigns it
        assert not reads, f"{path} reads clears_input_masks; ask masks.call_masks"
