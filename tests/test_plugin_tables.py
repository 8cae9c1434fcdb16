"""One collision policy for every table plugins add to (attnzoo/core/tables.py): the first registration of
a name wins, a later one by another provider is skipped with one PluginWarning naming both, and
``override=True`` replaces on purpose. Here for the table itself, the CLI's verbs and the conventions; the
models' table keeps the loser reachable as ``provider:name`` (tests/test_plugins.py)."""

from __future__ import annotations

import warnings

import pytest

from attnzoo.core.tables import PluginTable
from attnzoo.errors import AttnzooWarning, PluginWarning


def test_the_first_registration_wins_and_a_later_one_warns_once_naming_both():
    table: PluginTable[int] = PluginTable("widget")
    assert table.register_for("attnzoo")("a", 1)
    with pytest.warns(PluginWarning) as caught:
        assert not table.register_for("plug")("a", 2)
    assert len(caught) == 1 and issubclass(caught[0].category, AttnzooWarning)
    assert "'plug' registers the widget 'a', which 'attnzoo' provides; the first is kept" in str(caught[0].message)
    assert table["a"] == 1 and table.provider("a") == "attnzoo"


def test_override_replaces_on_purpose_without_a_warning_and_order_is_kept():
    table: PluginTable[int] = PluginTable("widget")
    table.add("b", 1, provider="attnzoo")
    table.add("a", 2, provider="attnzoo")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert table.add("b", 3, provider="plug", override=True)
    assert table.items() == [("b", 3), ("a", 2)] and table.provider("b") == "plug"
    assert "c" not in table and table.get("c", "none") == "none" and len(table) == 2


def test_a_check_refuses_an_entry_before_it_is_added():
    def check(name, value):
        if value < 0:
            raise ValueError(f"{name}: negative")

    table: PluginTable[int] = PluginTable("widget")
    with pytest.raises(ValueError, match="x: negative"):
        table.register_for("plug", check)("x", -1)
    assert "x" not in table


def test_the_cli_verbs_follow_the_policy(monkeypatch):
    """A verb registered twice: built-in first, so the plugin's 'list' is skipped with the warning; an
    override=True verb of a new name is simply added."""
    from attnzoo.cli import app
    from attnzoo.core.registry import REGISTRY

    def fake_each_plugin(hook, arguments):
        register = arguments("impostor")["register"]
        register("list", lambda args: 0, help="an impostor")
        register("hello", lambda args: 0, help="new", override=True)

    monkeypatch.setattr(REGISTRY, "each_plugin", fake_each_plugin)
    with pytest.warns(PluginWarning, match="'impostor' registers the command 'list', which 'attnzoo' provides"):
        table = app.commands()
    assert table["list"].provider == "attnzoo" and table["hello"].provider == "impostor"
