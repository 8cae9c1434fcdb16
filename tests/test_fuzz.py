"""Fuzzing with hypothesis: names, configs and tensors for every registered model.

The promise under test: whatever comes in, attnzoo answers with a result or with one of its own
errors (``AttnzooError``, or the ``ValueError`` of an input check that names the variant), never a raw
exception from deep inside torch, and never NaN from finite inputs.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import attnzoo  # noqa: E402
from attnzoo.conventions import get_convention, sample_inputs  # noqa: E402
from attnzoo.core.create import resolve_factory  # noqa: E402
from attnzoo.errors import AttnzooError, UnknownModelError  # noqa: E402

NAMES = attnzoo.list_models()


def fuzz(examples: int) -> settings:
    """Settings for a bounded, repeatable run: the same examples every time (CI must not be flaky)."""
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
    )


@fuzz(300)
@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(r"[a-z:._\-]{0,30}", fullmatch=True),
        st.sampled_from([n + suffix for n in NAMES[:5] for suffix in (".x", ".", ":", "..y", ".wordnet")]),
    )
)
def test_any_name_is_a_spec_or_a_short_unknown_model_error(name):
    try:
        spec = attnzoo.model_info(name)
    except UnknownModelError as e:
        assert isinstance(e, KeyError) and len(str(e)) < 600 and "\n" not in str(e)
    else:
        assert spec.name in name


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.sampled_from([10**12, -(10**9), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.text(max_size=8),
    st.lists(st.integers(0, 4), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)


def _keys(name):
    spec = attnzoo.model_info(name)
    params = inspect.signature(resolve_factory(spec)).parameters
    return [k for k in params if k not in ("device", "dtype")] + ["no_such_key"]


@pytest.mark.parametrize("name", NAMES)
def test_any_config_builds_or_is_a_config_error(name):
    spec = attnzoo.model_info(name)
    examples = 6 if spec.kind == "model" else 25

    @fuzz(examples)
    @given(st.dictionaries(st.sampled_from(_keys(name)), VALUES, max_size=3))
    def run(extra):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model = attnzoo.create(name, config={**spec.example, **extra})
            except AttnzooError as e:
                assert "\n" not in str(e).strip() or "config" in str(e)
                return
        assert isinstance(model, torch.nn.Module)

    run()


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool, torch.complex64]


@pytest.mark.parametrize("name", NAMES)
def test_any_tensor_gives_a_result_or_a_value_error(name):
    spec = attnzoo.model_info(name)
    convention = get_convention(spec.convention).for_config(spec.example)
    torch.manual_seed(0)
    model = attnzoo.create(name, config=dict(spec.example)).eval()
    valid = sample_inputs(model, convention, seq=convention.seq)
    with torch.no_grad():
        model(*valid.call_arguments()[0], **valid.call_arguments()[1])  # sizes fixed

    @fuzz(15 if spec.kind == "model" else 60)
    @given(st.data())
    def run(data):
        # one input changed per example, so that one fault cannot hide behind another's error
        slot = data.draw(st.sampled_from(convention.slots), label="input")
        tensor = valid.tensors[slot.name]
        change = data.draw(st.sampled_from(["shape", "rank", "dtype", "values"]), label="change")
        if change == "shape" and tensor.dim():
            axis = data.draw(st.integers(0, tensor.dim() - 1))
            size = data.draw(st.integers(0, 9))
            shape = list(tensor.shape)
            shape[axis] = size
            tensor = (
                torch.zeros(shape, dtype=tensor.dtype)
                if size == 0
                else (tensor.narrow(axis, 0, 1).expand(*shape[:axis], size, *shape[axis + 1 :]).clone())
            )
        elif change == "rank":
            tensor = tensor[0] if data.draw(st.booleans()) and tensor.dim() else tensor.unsqueeze(0)
        elif change == "dtype":
            tensor = tensor.to(data.draw(st.sampled_from(DTYPES)))
        elif tensor.is_floating_point():
            tensor = tensor * data.draw(st.sampled_from([0.0, -1.0, 1e3, 1e-30]))
        elif tensor.dtype == torch.bool:
            tensor = ~tensor
        tensors = {**valid.tensors, slot.name: tensor}
        sample = valid.with_tensors(**tensors)
        args, kwargs = sample.call_arguments(return_attention=data.draw(st.booleans()))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with torch.no_grad():
                    out = model(*args, **kwargs)
            except (ValueError, AttnzooError) as e:
                message = str(e)
                assert message and len(message) < 2000
                return
        finite_in = all(not t.is_floating_point() or torch.isfinite(t).all() for t in tensors.values())
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if finite_in and all(t.dtype != torch.float16 for t in tensors.values()):
            for o in outs:
                if isinstance(o, torch.Tensor) and o.is_floating_point():
                    assert torch.isfinite(o).all(), "finite inputs gave a non-finite output"

    run()
