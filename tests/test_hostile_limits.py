"""Issue 58: untrusted files stay data, second pass. Every file attnzoo reads is read in bounded time and
memory (sizes, depths, node counts, downloads), every hand-edited value of a converted folder is refused
at load naming the layer, the key and the value, and every name a file brings is printed escaped."""

from __future__ import annotations

from attnzoo.train.predict import Label, Prediction

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
