"""The conformance kit over the whole registry: every variant, every property, one test each.

A new card is tested the day it is registered: its convention and example are all the kit needs, so
adding one layer file and one card adds one test per property here (``pytest -k NAME`` selects that
variant's). The formula tests against independent references live in test_layers.py and friends.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

import attnzoo
from attnzoo.conventions import convention_names, get_convention
from attnzoo.errors import PluginWarning
from attnzoo.testing import PROPERTIES, check_model

NAMES = attnzoo.list_models()

CASES = [
    pytest.param(name, prop, id=f"{name}-{prop}", marks=[pytest.mark.slow] if PROPERTIES[prop].slow else [])
    for name in NAMES
    for prop in PROPERTIES
]


@pytest.mark.parametrize("name, prop", CASES)
def test_variant_keeps_the_promise(name, prop):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose
        report = check_model(name, only=[prop], slow=PROPERTIES[prop].slow)
    result = report[prop]
    if result.status == "failed":
        pytest.fail(f"{name} breaks {prop!r}: {result.reason}")
    if result.status in ("skipped", "exempt"):
        pytest.skip(f"{result.status}: {result.reason}")
    assert report.ok


@pytest.mark.parametrize("name", NAMES)
def test_card_is_complete(name):
    spec = attnzoo.model_info(name)
    assert spec.summary and spec.reference, f"{name}: card needs a summary and a reference"
    assert spec.convention in convention_names(), f"{name}: convention {spec.convention!r} is not a known one"
    get_convention(spec.convention)
    module, _, attr = spec.factory.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    doc = (factory.__doc__ or "") + (importlib.import_module(module).__doc__ or "")
    assert "[" in doc and "]" in doc, f"{name}: docstrings must state shapes"
    for prop, reason in spec.exempt.items():
        assert prop in PROPERTIES and len(reason) > 20, f"{name}: exempt {prop!r} needs a known property and a reason"


def test_raise_for_failures_and_the_table_give_every_reason_whole():
    from attnzoo.testing.report import FAILED, PASSED, Report, Result, format_table

    reason = "masked position 3 changed output 0 by 0.5 " + "while the padding held NaN; " * 12 + "END-OF-REASON"
    report = Report(
        "my_layer",
        "sequence_to_labels",
        [Result("my_layer", "builds", PASSED), Result("my_layer", "masked_values", FAILED, reason)],
    )
    assert "END-OF-REASON" in format_table([report], width=60)  # the table for people wraps it, whole
    with pytest.raises(AssertionError) as caught:
        report.raise_for_failures()
    assert "END-OF-REASON" in str(caught.value) and "masked_values" in str(caught.value)
    assert " ".join(str(caught.value).split()).count(" ".join(reason.split())) == 1


def test_an_in_process_convention_is_held_by_the_registry_and_survives_a_plugin_reload(monkeypatch):
    from attnzoo.conventions import register_convention
    from attnzoo.core import registry

    flat = get_convention("sequence_to_sequence")
    register_convention("my_flat_copy", flat)
    assert get_convention("my_flat_copy") is flat and "my_flat_copy" in convention_names()
    assert registry.REGISTRY.snapshot().collected["attnzoo_register_conventions"]["my_flat_copy"] is flat
    before = registry.table_version()
    monkeypatch.setenv("ATTNZOO_BLOCK_PLUGINS", "nobody")  # the switches change: a new snapshot
    assert registry.table_version() != before
    assert get_convention("my_flat_copy") is flat
    # one policy for every plugin table (attnzoo/core/tables.py): a built-in name is kept, with a warning
    other = get_convention("sequence_to_labels")
    register_convention("sequence_to_sequence", other)
    with pytest.warns(PluginWarning, match="'local' registers the calling convention 'sequence_to_sequence', which"):
        assert get_convention("sequence_to_sequence") is flat
    register_convention("sequence_to_sequence", flat, override=True)  # on purpose: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        assert get_convention("sequence_to_sequence") is flat
