"""Issue 58: untrusted files stay data, second pass. Every file attnzoo reads is read in bounded time and
memory (sizes, depths, node counts, downloads), every hand-edited value of a converted folder is refused
at load naming the layer, the key and the value, and every name a file brings is printed escaped."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from attnzoo.errors import ConfigError
from attnzoo.train.predict import Label, Prediction
from attnzoo.train.recipe import load_recipe, resolved_recipe

HOSTILE_LABEL = "\x1b]0;PWNED\x07\x1b[2J"


# -- names stay names ---------------------------------------------------------------------------------------
def test_predict_renders_label_names_from_the_run_escaped():
    label = Label(id=HOSTILE_LABEL, name=HOSTILE_LABEL, probability=0.9, above_threshold=True, description="\u202eg")
    text = Prediction(text="t", output="multilabel", tokens=["t"], labels=[label], threshold=0.5).render()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    # the escape written as text, as printable writes it: the name is still shown
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in text and "\\u202eg" in text


def test_every_verb_prints_names_from_files_escaped(capsys):
    from attnzoo.cli.common import say

    say(f"note: layer {HOSTILE_LABEL!s} fixed\nsecond line")
    out = capsys.readouterr().out
    assert out == "note: layer \\x1b]0;PWNED\\x07\\x1b[2J fixed\nsecond line\n"


@pytest.mark.parametrize("tag", ["../../../escape", "a/b", "a\\b", "..", "", "x\x1b[2J", "/abs", 3])
def test_a_recipe_tag_that_is_no_name_is_refused_naming_it(tmp_path, tag):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": "tiny", "tag": tag, "data": {"train": "t.csv"}}))
    with pytest.raises(ConfigError, match=r"recipe r\.yaml: tag .* is not a name; a tag holds letters") as e:
        load_recipe(recipe)
    assert repr(tag) in str(e.value)


def test_a_recipe_tag_is_never_an_interpolation(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "hunter2")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: tiny\ntag: ${oc.env:ATTNZOO_TEST_SECRET}\ndata: {train: t.csv}\n")
    with pytest.raises(ConfigError, match=r"recipe r\.yaml: tag '\$\{oc.env:ATTNZOO_TEST_SECRET\}' is an interp") as e:
        load_recipe(recipe)
    assert "hunter2" not in str(e.value)
    # the command line's recipe (flags and overrides) goes through the same door
    with pytest.raises(ConfigError, match="is an interpolation"):
        resolved_recipe(OmegaConf.create({"model": "tiny", "tag": "${oc.env:ATTNZOO_TEST_SECRET}"}), "here")


def test_a_recipe_tag_that_is_a_name_names_the_run_folder(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": "tiny", "tag": "v1.2_final-3", "data": {"train": "t.csv"}}))
    assert load_recipe(recipe)["tag"] == "v1.2_final-3"
