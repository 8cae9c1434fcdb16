"""The conformance kit: every variant proves itself by the same named properties.

    >>> from attnzoo.testing import check_model
    >>> report = check_model("labelwise")          # the card's convention and example
    >>> report.ok, report["masked_values"].status
    (True, 'passed')
    >>> print(report)                               # one row per property

A plugin author checks a variant in a few lines of pytest::

    from attnzoo.testing import check_model

    def test_my_layer_keeps_attnzoo_promises():
        check_model("my_plugin:my_layer").raise_for_failures()

or one test per property, so that ``pytest -k masked_values`` selects one::

    import pytest
    from attnzoo.testing import check_model, property_names

    @pytest.mark.parametrize("prop", property_names())
    def test_my_layer(prop):
        check_model("my_plugin:my_layer", only=[prop]).raise_for_failures()

The properties and what each promises are listed in :mod:`attnzoo.testing.properties`; inputs come
from the variant's calling convention (:mod:`attnzoo.conventions`). ``attnzoo check`` runs the same
kit from the command line.
"""

from attnzoo.conventions import Convention, Sample, Slot, get_convention, register_convention, sample_inputs
from attnzoo.testing.kit import check_model, check_property, property_names
from attnzoo.testing.properties import PROPERTIES
from attnzoo.testing.report import Report, Result, format_table
from attnzoo.testing.subject import Failure, NotApplicable, Subject

__all__ = [
    "check_model",
    "check_property",
    "property_names",
    "PROPERTIES",
    "Report",
    "Result",
    "format_table",
    "Subject",
    "Failure",
    "NotApplicable",
    "Convention",
    "Slot",
    "Sample",
    "get_convention",
    "register_convention",
    "sample_inputs",
]
