"""attnzoo.predict: text in, named and ranked labels out, with the model's own vocabulary; warnings for
unknown tokens; the CLI prints the same; the heat map carries a colour bar, probabilities and the threshold."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.io.text import Vocabulary, tokenize
from attnzoo.train.attention_map import attention_figure
from attnzoo.train.predict import UnknownTokensWarning

from .conftest import run_cli

LABELWISE = "bilstm_labelwise.wordnet"
CAT = "a large wild cat with a striped coat"


@pytest.fixture(scope="module")
def model():
    return attnzoo.create(LABELWISE, pretrained=True).eval()


def _probabilities(model, text):
    """Independently of predict: tokenise, look up, run, sigmoid."""
    meta = model.attnzoo_metadata
    vocab = Vocabulary.from_json(meta["vocab"])
    with torch.no_grad():
        return torch.sigmoid(model(torch.tensor([vocab.encode(tokenize(text))])))[0]


def test_two_texts_give_two_named_ranked_results_and_unknown_words_warn(model):
    with pytest.warns(UnknownTokensWarning, match="2 of the 2 tokens"):
        cat, gibberish = attnzoo.predict(LABELWISE, [CAT, "xyzzy qwerty"])
    probs = _probabilities(model, CAT)
    ids = model.attnzoo_metadata["labels"]
    assert [label.id for label in cat.labels] == [ids[i] for i in probs.argsort(descending=True)[:5].tolist()]
    for label in cat.labels:
        assert label.probability == pytest.approx(float(probs[ids.index(label.id)]), abs=1e-6)
        assert label.name == label.id.split(".n.")[0].replace("_", " ") and label.description
    assert [label.probability for label in cat.labels] == sorted(
        (label.probability for label in cat.labels), reverse=True
    )
    assert "animal" in {label.name for label in cat.labels} or "vertebrate" in {label.name for label in cat.labels}
    assert cat.unknown == 0 and not cat.warnings
    assert gibberish.unknown == 2 and gibberish.warnings and gibberish.tokens == ["xyzzy", "qwerty"]


def test_threshold_top_and_attention(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known text warns about nothing
        result = attnzoo.predict(model, CAT, top=None, threshold=0.9, return_attention=True)
    probs = _probabilities(model, CAT)
    assert len(result.labels) == len(model.attnzoo_metadata["labels"])
    assert [label.above_threshold for label in result.labels] == [label.probability >= 0.9 for label in result.labels]
    assert sum(label.above_threshold for label in result.labels) == int((probs >= 0.9).sum())
    assert result.attention.shape == (len(result.labels), len(tokenize(CAT)))
    torch.testing.assert_close(result.attention.sum(-1), torch.ones(len(result.labels)))
    default = attnzoo.predict(model, CAT)
    assert default.threshold == pytest.approx(model.attnzoo_metadata["threshold"])
    with pytest.raises(ConfigError, match="top"):
        attnzoo.predict(model, CAT, top=0)
    with pytest.raises(ConfigError, match="threshold"):
        attnzoo.predict(model, CAT, threshold=1.5)
    with pytest.raises(ConfigError, match="vocabulary"):
        attnzoo.predict(attnzoo.create("labelwise", num_labels=3), CAT)


@pytest.mark.slow
def test_the_cli_prints_what_python_returns():
    proc = run_cli("predict", LABELWISE, "xyzzy", "qwerty", "--json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    with pytest.warns(UnknownTokensWarning):
        expected = attnzoo.predict(LABELWISE, "xyzzy qwerty").to_dict()
    assert [(row["id"], round(row["probability"], 6)) for row in printed["labels"]] == [
        (row["id"], round(row["probability"], 6)) for row in expected["labels"]
    ]
    assert printed["warnings"] and "phonemes" not in printed
    shown = run_cli("predict", LABELWISE, CAT, "--above-threshold")
    lines = [line for line in shown.stdout.splitlines() if line[:1] in "* " and "  " in line]
    assert lines and all(line.startswith("*") for line in lines)
    g2p = json.loads(run_cli("predict", "g2p_seq2seq.cmudict", "cat", "--beam", "5", "--json").stdout)
    assert g2p["phonemes"] == ["K", "AE1", "T"] and "labels" not in g2p


def test_the_heat_map_has_a_colour_bar_probabilities_and_the_threshold(model):
    pytest.importorskip("matplotlib")
    result = attnzoo.predict(model, CAT, top=None, threshold=0.6, return_attention=True)
    figure = attention_figure(result, title="a title long enough to be wrapped onto more than one line " * 3)
    heat, bar = figure.axes
    rows = [tick.get_text() for tick in heat.get_yticklabels()]
    assert rows[0] == f"{result.labels[0].name}  {result.labels[0].probability:.2f}"
    above = sum(label.above_threshold for label in result.labels)
    assert [line.get_ydata()[0] for line in heat.get_lines()] == [above - 0.5]
    assert "\n" in heat.get_title() and bar.get_ylabel() == "attention weight"


def test_a_run_folder_predicts_like_its_model(tmp_path, model):
    attnzoo.save(model, tmp_path / "run")
    assert [label.id for label in attnzoo.predict(tmp_path / "run", CAT).labels] == [
        label.id for label in attnzoo.predict(model, CAT).labels
    ]


def test_texts_with_dollar_signs_are_drawn_as_written_not_as_mathtext(tmp_path):
    """A text is the figure's title and its tokens the tick labels: "$x^$" is a mathtext error and
    "$5 and a dog $7" math italics unless every dollar is escaped. Escaped, no label is math text whatever
    matplotlib's settings (``text.usetex`` ignores ``parse_math``; a tick label matplotlib makes anew does
    not inherit it), and each shows its text as written."""
    pytest.importorskip("matplotlib")
    from matplotlib.cbook import is_math_text

    title = "bilstm_labelwise: a cat costs $5 and a dog $7, $x^$"
    result = attnzoo.predict("bilstm_labelwise", "a cat costs $5 and a dog $7", return_attention=True)
    figure = attention_figure(result, title=title)
    figure.canvas.draw()  # mathtext would fail here on "$x^$"
    texts = [figure.axes[0].title, *figure.axes[0].get_xticklabels(), *figure.axes[0].get_yticklabels()]
    drawn = [t.get_text() for t in texts if "$" in t.get_text()]
    assert len(drawn) == 3 and not any(is_math_text(t) for t in drawn), drawn
    assert drawn[0].replace(r"\$", "$") == title  # what matplotlib shows for an escaped dollar
    assert attnzoo.plot_attention(result, tmp_path / "a.png", title="$x^$").stat().st_size > 0


def test_predict_on_the_command_line_refuses_text_that_is_not_utf8():
    proc = run_cli("predict", "bilstm_labelwise", "a dog \udcff")  # the byte 0xff, as argv carries it
    assert proc.returncode == 2 and "the text is not valid UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.filterwarnings("ignore::attnzoo.train.predict.UnknownTokensWarning")
@pytest.mark.parametrize("name", [LABELWISE, "bilstm_attn_pool.wordnet_lex"])
def test_many_texts_are_batched_and_each_equals_its_own_unpadded_forward(name):
    """150 texts of 1..40 words go through in padded batches; every text's probabilities and attention must
    equal a forward of that text alone, unpadded (what predict did one text at a time)."""
    model = attnzoo.create(name, pretrained=True).eval()
    meta = model.attnzoo_metadata
    vocab = Vocabulary.from_json(meta["vocab"])
    words = ["the", "dog", "ran", "across", "a", "green", "field", "under", "an", "oak", "while", "cats"] * 2
    texts = [" ".join(words[(i * 7) % len(words) :] + words)[: 1 + (i * 13) % 200] for i in range(150)]
    texts = [t if t.strip() else "dog" for t in texts]
    calls = []
    hook = model.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    try:
        got = attnzoo.predict(model, texts, top=None, return_attention=True)
    finally:
        hook.remove()
    assert len(calls) <= 3, f"{len(calls)} forwards for 150 texts: predict is not batching"
    squash = torch.sigmoid if meta["output"] == "multilabel" else (lambda z: torch.softmax(z, -1))
    for text, prediction in zip(texts, got, strict=True):
        ids = torch.tensor([vocab.encode(tokenize(text)[:64])])
        with torch.no_grad():
            logits, attention = model(ids, return_attention=True)
        probs = squash(logits[0])
        for label in prediction.labels:
            assert label.probability == pytest.approx(float(probs[meta["labels"].index(label.id)]), abs=1e-5)
        order = [meta["labels"].index(label.id) for label in prediction.labels]
        expected = attention[0, order] if meta["output"] == "multilabel" else attention[0:1]
        torch.testing.assert_close(prediction.attention, expected, atol=1e-5, rtol=1e-4)


def test_a_text_without_words_is_refused_before_any_forward(model):
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ConfigError, match="no words"):
            attnzoo.predict(model, [CAT] * 100 + ["  ...  "[:2]])
    finally:
        hook.remove()
    assert not calls


def test_the_readme_s_snippet_prints_the_labels_the_model_decides_then_the_five_best(model, capsys):
    """The README's words against what its snippet prints: the first line holds exactly the labels whose
    probability (computed here without predict) is at or above the threshold stored with the weights; the
    second the five best, best first, whatever their probability."""
    import ast

    from .conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Text in, labels out", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})
    decided, best = (ast.literal_eval(line) for line in capsys.readouterr().out.splitlines())
    meta = model.attnzoo_metadata
    names = [info["name"] for info in meta["label_info"]]
    probs = _probabilities(model, CAT)
    threshold = float(meta["threshold"])
    order = probs.argsort(descending=True).tolist()
    assert decided == [names[i] for i in order if probs[i] >= threshold]
    assert [name for name, _ in best] == [names[i] for i in order[:5]]
    assert [p for _, p in best] == [round(float(probs[i]), 2) for i in order[:5]]
