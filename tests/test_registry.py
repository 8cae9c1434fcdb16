"""The registry: cards, names, listing, registration, and the torch-free promise."""

from __future__ import annotations

import json
import textwrap

import pytest

import attnzoo
from attnzoo.core.spec import parse_name
from attnzoo.errors import ConfigError, UnknownModelError

from .conftest import run_cli, run_python


def test_listing_and_card_reading_never_import_torch():
    code = textwrap.dedent(
        """
        import sys
        import attnzoo
        names = attnzoo.list_models()
        spec = attnzoo.model_info("labelwise")
        from attnzoo.cli import main
        assert main(["list"]) == 0
        assert main(["list", "label*", "--json"]) == 0
        assert main(["info", "labelwise"]) == 0
        assert main(["plugins"]) == 0
        print("TORCH", "torch" in sys.modules, len(names), spec.factory)
        """
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1].split()
    assert last[:2] == ["TORCH", "False"], proc.stdout
    assert int(last[2]) >= 2


def test_name_grammar():
    assert parse_name("labelwise") == (None, "labelwise", None)
    assert parse_name("bilstm_labelwise.wordnet") == (None, "bilstm_labelwise", "wordnet")
    assert parse_name("my-plugin:gated_pool.tag") == ("my-plugin", "gated_pool", "tag")
    for bad in ("Labelwise", "1abc", "a.b.c", "a..b", "", "a:", ":a", "a b"):
        assert parse_name(bad) is None, bad


def test_builtin_cards_are_listed_in_natural_order():
    names = attnzoo.list_models()
    assert {"labelwise", "labelwise_batched"} <= set(names)
    assert names == sorted(
        names, key=lambda n: [int(t) if t.isdigit() else t for t in __import__("re").split(r"(\d+)", n)]
    )
    assert attnzoo.list_models("label*") == [n for n in names if n.startswith("label")]
    assert "labelwise" not in attnzoo.list_models("label*", exclude="labelwise")
    assert attnzoo.list_models(provider="attnzoo") == names
    assert attnzoo.list_models(provider="nobody") == []


def test_natural_sort_puts_2_before_10():
    for n in ("zm10", "zm2", "zm1"):
        attnzoo.register(n, factory=dict)
    assert attnzoo.list_models("zm*") == ["zm1", "zm2", "zm10"]


def test_unknown_model_suggests_close_names_and_is_a_key_error():
    with pytest.raises(UnknownModelError) as err:
        attnzoo.create("labelwise_bached", num_labels=3)
    assert "labelwise_batched" in str(err.value)
    assert "labelwise_batched" in err.value.suggestions
    assert isinstance(err.value, KeyError)
    with pytest.raises(KeyError):
        attnzoo.model_info("nothing_like_it")


def test_invalid_name_is_reported_as_such():
    with pytest.raises(UnknownModelError, match="not a valid model name"):
        attnzoo.model_info("LabelWise")


def test_an_invalid_tag_is_not_a_model():
    with pytest.raises(UnknownModelError, match="no pretrained tag"):
        attnzoo.model_info("labelwise.nosuchtag")


def test_model_info_carries_the_card():
    spec = attnzoo.model_info("labelwise")
    assert spec.provider == "attnzoo"
    assert spec.factory == "attnzoo.layers.labelwise:LabelwiseAttention"
    assert spec.config["num_labels"] == "???"
    assert spec.required_keys == ["num_labels"]
    assert spec.source.endswith("labelwise.yaml")
    with pytest.raises(TypeError):
        spec.config["num_labels"] = 3  # frozen


def test_register_refuses_duplicates_unless_override():
    attnzoo.register("thing", factory=dict, config={"a": 1})
    with pytest.raises(ConfigError, match="already registered"):
        attnzoo.register("thing", factory=dict)
    attnzoo.register("thing", factory=dict, config={"a": 2}, override=True)
    assert attnzoo.model_info("thing").config["a"] == 2
    with pytest.raises(ConfigError, match="already provided by 'attnzoo'"):
        attnzoo.register("labelwise", factory=dict)


def test_override_of_a_builtin_keeps_the_old_entry_reachable():
    attnzoo.register("labelwise", factory=dict, override=True, summary="mine")
    assert attnzoo.model_info("labelwise").provider == "local"
    assert attnzoo.model_info("attnzoo:labelwise").provider == "attnzoo"
    assert "attnzoo:labelwise" in attnzoo.list_models()


def test_register_with_a_module_attr_string_imports_nothing_until_create():
    import sys

    sys.modules.pop("tests.factories", None)
    attnzoo.register("rec", factory="tests.factories:Recorder", config={"size": 1})
    assert attnzoo.model_info("rec").factory == "tests.factories:Recorder"
    assert "tests.factories" not in sys.modules
    assert attnzoo.create("rec", rate=2).kwargs["rate"] == 2.0


def test_register_validates_names_and_factories():
    with pytest.raises(ConfigError, match="invalid model name"):
        attnzoo.register("Bad-Name", factory=dict)
    with pytest.raises(ConfigError, match="factory"):
        attnzoo.register("nofactory")
    with pytest.raises(ConfigError, match="factory must be"):
        attnzoo.register("badfactory", factory="no colon here")


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def test_bad_cards_are_reported_by_file_name_and_do_not_hide_the_others(tmp_path, monkeypatch):
    _write(
        tmp_path / "good.yaml",
        """
        name: good
        factory: collections:OrderedDict
        config: {a: 1}
    """,
    )
    _write(
        tmp_path / "nofactory.yaml",
        """
        name: nofactory
        config: {a: 1}
    """,
    )
    _write(
        tmp_path / "unknownkey.yaml",
        """
        name: unknownkey
        factory: collections:OrderedDict
        sumary: typo
    """,
    )
    _write(
        tmp_path / "Bad-Name.yaml",
        """
        name: Bad-Name
        factory: collections:OrderedDict
    """,
    )
    _write(tmp_path / "notyaml.yaml", "name: [unclosed\n")
    _write(
        tmp_path / "mismatch.yaml",
        """
        name: other
        factory: collections:OrderedDict
    """,
    )
    monkeypatch.setenv("ATTNZOO_REGISTRY_DIR", str(tmp_path))
    with pytest.warns(UserWarning) as record:
        names = attnzoo.list_models()
    assert names == ["good"]
    text = "\n".join(str(w.message) for w in record)
    for card in ("nofactory.yaml", "unknownkey.yaml", "Bad-Name.yaml", "notyaml.yaml", "mismatch.yaml"):
        assert card in text, card
    assert "did you mean 'summary'" in text
    problems = attnzoo.list_plugins()[0].problems
    assert len(problems) == 5


def test_cli_list_info_json_and_exit_codes():
    proc = run_cli("list", "label*", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == ["labelwise", "labelwise_batched"]
    assert all(r["provider"] == "attnzoo" for r in rows)

    proc = run_cli("info", "labelwise", "--json")
    card = json.loads(proc.stdout)
    assert card["required"] == ["num_labels"] and card["config"]["hidden_size"] is None

    proc = run_cli("info", "labelwise_bached")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "labelwise_batched" in proc.stderr
    assert "Traceback" not in proc.stderr

    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr

    proc = run_cli("create", "labelwise", "num_labels")  # not key=value
    assert proc.returncode == 2 and "key=value" in proc.stderr

    proc = run_cli("info", "labelwise_bached", "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_cli_create_builds_and_runs_a_dummy_forward():
    proc = run_cli("create", "labelwise", "num_labels=50")
    assert proc.returncode == 0, proc.stderr
    assert "LabelwiseAttention" in proc.stdout
    assert "dummy forward: ([2, 7, 16] float32, [2, 7] bool) -> [2, 50] float32" in proc.stdout
    # 50 labels x (Wa 16 + Wo 16) + 50 biases
    assert "parameters: 1,650" in proc.stdout


@pytest.mark.parametrize("page", ["catalogue.md", "pretrained.md"])
def test_generated_docs_are_in_step_with_the_registry(page):
    from pathlib import Path

    from attnzoo.tools.catalogue import PAGES

    text = (Path(__file__).resolve().parents[1] / "docs" / page).read_text()
    assert text == PAGES[page](), f"docs/{page} is stale: run python -m attnzoo.tools.catalogue"


@pytest.mark.parametrize("name", attnzoo.list_models(provider="attnzoo"))
def test_every_constructor_argument_is_listed_with_what_null_means(name):
    """The AST reading of the factory (torch-free, for attnzoo info) agrees with inspect on the imported
    factory, and no argument that defaults to None leaves its meaning unsaid."""
    import inspect

    from attnzoo.core.create import resolve_factory
    from attnzoo.core.signatures import constructor_arguments

    spec = attnzoo.model_info(name)
    read = constructor_arguments(spec)
    real = inspect.signature(resolve_factory(spec)).parameters
    expected = [
        (
            p.name,
            p.default is inspect.Parameter.empty,
            None if p.default is inspect.Parameter.empty else repr(p.default),
        )
        for p in real.values()
        if p.name not in ("device", "dtype") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    assert [(a.name, a.required, None if a.required else repr(eval(a.default))) for a in read] == expected
    assert all(a.null for a in read if a.default == "None"), [
        a.name for a in read if a.default == "None" and not a.null
    ]
    assert set(spec.config) <= {a.name for a in read}  # a card says its options in the factory's words
