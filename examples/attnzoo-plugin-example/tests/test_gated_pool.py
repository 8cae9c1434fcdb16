"""attnzoo's conformance kit on this plugin's variant: one test per promise (pytest -k masked_values)."""

import pytest

from attnzoo.testing import check_model, property_names


@pytest.mark.parametrize("prop", property_names())
def test_gated_pool_keeps_attnzoo_promises(prop):
    check_model("example:gated_pool", only=[prop]).raise_for_failures()
