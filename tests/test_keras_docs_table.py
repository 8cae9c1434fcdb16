"""docs/keras-layers.md's table says what the converter does: every row against the converter itself.

For each row of the table, the Keras classes it names (its first column) are checked against the converter:

- "converts": each class has a converter of attnzoo's (``keras>Class``, or keras-hub's ``keras_hub>Class``
  for the keras-hub row), and every class attnzoo converts is named in some row (under its own name, or
  the one Keras aliases it to: ``AvgPool1D`` is ``AveragePooling1D``);
- "refused": the classes the paragraph under the table names as refused have no converter, and the options
  it names are refused by the converter of their class;
- behaviour in training: every note of the converter's per-layer report (what ``convert-keras`` prints under
  the layer) that speaks of training is quoted, word for word, in the row's last column, so a row cannot say
  "an error in training" where the report says "flipped with probability 1/2". The fast tier asks each
  converter for its notes on a layer of the class with its default config; the slow tier reads the report
  of every committed Keras file and of a tiny Keras model made of each class that Keras builds alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnzoo.keras.graph import LayerPath, LayerRecord
from attnzoo.keras.registry import Context, Refused, builtin, builtin_names

from .conftest import ROOT

PAGE = ROOT / "docs" / "keras-layers.md"
# the shorthands the first column uses, written out (a new shorthand must be added here)
SHORTHANDS = {
    "SpatialDropout1D/2D/3D": ["SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D"],
    "Max/AveragePooling1D/2D/3D": [f"{k}Pooling{d}D" for k in ("Max", "Average") for d in (1, 2, 3)],
    "GlobalAverage/MaxPooling1D/2D/3D": [f"Global{k}Pooling{d}D" for k in ("Max", "Average") for d in (1, 2, 3)],
    "UpSampling1D/2D/3D": [f"UpSampling{d}D" for d in (1, 2, 3)],
    "ZeroPadding1D/2D/3D": [f"ZeroPadding{d}D" for d in (1, 2, 3)],
    "Cropping1D/2D/3D": [f"Cropping{d}D" for d in (1, 2, 3)],
    "SeparableConv1D/2D": ["SeparableConv1D", "SeparableConv2D"],
    "DepthwiseConv1D/2D": ["DepthwiseConv1D", "DepthwiseConv2D"],
}
# read by the graph itself, not by a converter: the model's inputs, and tf.keras 2's tensor code between layers
# (attnzoo/keras/tf_ops.py reads each as the keras 3 operation it is)
GRAPH_CLASSES = {"InputLayer", "TFOpLambda", "SlicingOpLambda"}
TRAINING = re.compile(r"\btrain(ing|\(\))?\b")


def _flat(text: str) -> str:
    return " ".join(text.split())


def table_rows() -> list[tuple[list[str], str, str]]:
    """(the Keras classes of the first column, ``keras>`` or ``keras_hub>``, the last column) of each row."""
    text = PAGE.read_text(encoding="utf-8").split("## The table", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| Keras |"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        classes: list[str] = []
        for token in re.findall(r"`([^`]+)`", cells[0]):
            if "/" in token:
                assert token in SHORTHANDS, f"{token!r}: write the shorthand out in SHORTHANDS"
                classes += SHORTHANDS[token]
            elif re.fullmatch(r"[A-Z][A-Za-z0-9]*", token):
                classes.append(token)
        prefix = "keras_hub>" if cells[0].startswith("keras-hub's") else "keras>"
        rows.append((classes, prefix, _flat(cells[-1])))
    return rows


def _keras_name(alias: str) -> str:
    """The name Keras's docs give a class it also exports under an alias (``keras.layers.AvgPool1D is
    keras.layers.AveragePooling1D``, ``Convolution2D`` is ``Conv2D``)."""
    name = re.sub(r"AvgPool(?=\d)", "AveragePooling", alias.replace("Convolution", "Conv"))
    return re.sub(r"MaxPool(?=\d)", "MaxPooling", name)


def _converter(prefix: str, name: str):
    found = builtin(prefix + name)
    return found.convert if found is not None else None


def _default_notes(name: str, convert, config: dict | None = None) -> list[str] | None:
    """The converter's report notes for a layer of ``name`` with ``config`` and no variables (None where the
    class needs variables or settings to convert)."""
    record = LayerRecord(name, LayerPath((name,), (name,), (0,)), name, None, "keras.layers", dict(config or {}))
    try:
        return list(convert(record, [], Context(major=3, where="docs table")).notes)
    except Exception:  # noqa: BLE001 - a class that needs its variables or settings: the slow tier's
        return None


def test_the_table_s_rows_name_classes_the_converter_takes():
    rows = table_rows()
    assert len([r for r in rows if not r[0]]) == 3  # the operations, the models, your own layer
    named = set()
    for classes, prefix, _ in rows:
        for name in classes:
            named.add(name)
            assert name in GRAPH_CLASSES or _converter(prefix, name) is not None, f"{prefix}{name}: no converter"
    # and every class attnzoo converts is in the table, under its own name or the one Keras aliases it to
    missing = sorted(n for n in builtin_names() if _keras_name(n) not in named)
    assert not missing, f"converted but in no row of {PAGE.name}: {missing}"


def test_what_the_page_calls_refused_has_no_converter_or_is_refused():
    text = _flat(PAGE.read_text(encoding="utf-8").split("Refused, by name,", 1)[1].split("\n\n", 1)[0])
    assert "`Lambda`" in text and "GroupNormalization" in text
    for name in ("Lambda", "GroupNormalization"):
        assert builtin(f"keras>{name}") is None
    for example, config in {
        "`MultiHeadAttention(use_gate=True)`": {"num_heads": 2, "key_dim": 4, "use_gate": True},
        '`TextVectorization(output_mode="multi_hot")`': {"output_mode": "multi_hot", "vocabulary": ["a", "b"]},
    }.items():
        assert example in text
        name = example.strip("`").split("(")[0]
        record = LayerRecord(name, LayerPath((name,), (name,), (0,)), name, None, "keras.layers", config)
        with pytest.raises(Refused):
            builtin(f"keras>{name}").convert(record, [], Context(major=3, where="docs table"))


# a note on one call of the layer, not on its class (a call the file makes with training=True, which the report
# says for any layer: docs/keras-migration.md says it once)
CALL_NOTE = "called with training=True"


def _assert_quoted(row_text: str, name: str, notes: list[str]) -> bool:
    training = [n for n in notes if TRAINING.search(n) and not n.startswith(CALL_NOTE)]
    for note in training:
        assert _flat(note) in row_text, f"{name}: the report says {note!r}; its row says {row_text!r}"
    return bool(training)


def test_each_row_quotes_the_report_s_notes_on_training():
    compared = set()
    for classes, prefix, text in table_rows():
        for name in classes:
            convert = _converter(prefix, name)
            notes = _default_notes(name, convert) if convert is not None else None
            if notes is not None and _assert_quoted(text, name, notes):
                compared.add(name)
    # the layers whose training differs from inference and that convert from their defaults (RandomRotation
    # and the other geometric augmentations need their factors: the slow tier reads them from real files)
    assert {"RandomFlip", "Dropout", "GaussianNoise", "StochasticDepth"} <= compared, compared


def test_the_random_flip_row_is_the_converter_s_own_words():
    """The row a user tripped on: RandomFlip flips in training, and so do the other augmentations now."""
    rows = {name: text for classes, _, text in table_rows() for name in classes}
    assert "in training each image flipped with probability 1/2" in rows["RandomFlip"]
    assert "an error in training" not in rows["RandomFlip"]
    assert "Keras's random rotation in training (model.train())" in rows["RandomRotation"]


def _report_rows(path: Path) -> list[dict]:
    from attnzoo.keras import convert_keras_model

    return convert_keras_model(path).keras_report.rows


@pytest.mark.slow
def test_each_row_quotes_the_report_of_real_files(tmp_path):
    """The report of every committed Keras file that converts, and of a tiny Keras 3 model of each class
    in the table that Keras builds with its defaults on an image, a sequence or a volume."""
    import warnings

    from attnzoo.errors import AttnzooError

    rows = {(prefix + name).removeprefix("keras>"): text for classes, prefix, text in table_rows() for name in classes}
    seen: dict[str, list[list[str]]] = {}
    files = sorted(p for p in (ROOT / "tests" / "data").rglob("*") if p.suffix in (".keras", ".h5"))
    for path in [*files, *_tiny_keras_models(tmp_path, rows)]:
        if "hostile" in path.parts:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = _report_rows(path)
        except AttnzooError:
            continue  # the files of refusals (a stateful ConvLSTM, an h5 without its vocabulary)
        for row in report:
            seen.setdefault(row["class"], []).append(row["notes"])
    compared = set()
    for name, notes_of_layers in seen.items():
        if name in rows:
            for notes in notes_of_layers:
                if _assert_quoted(rows[name], name, notes):
                    compared.add(name)
    assert {"BatchNormalization", "Dropout", "RandomFlip", "RandomBrightness"} <= compared, compared
    assert len(set(seen) & set(rows)) >= 60, sorted(set(rows) - set(seen))


def _tiny_keras_models(folder: Path, rows: dict[str, str]) -> list[Path]:
    """One ``.keras`` file per class of the table that Keras builds with its defaults (keras 3, torch)."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    made = []
    for name in sorted(n for n in rows if ">" not in n):
        layer_class = getattr(keras.layers, name, None)
        if layer_class is None:
            continue
        for shape in ((6, 4), (8, 8, 3), (4, 4, 4, 2)):
            try:
                inputs = keras.Input(shape)
                model = keras.Model(inputs, layer_class()(inputs))
            except Exception:  # noqa: BLE001 - a class that needs settings, or another rank: not made here
                continue
            path = folder / f"{name}.keras"
            model.save(path)
            made.append(path)
            break
    return made


def test_the_keras_guide_s_pages_stay_short_enough_to_search():
    """The guide was one page of 6,900 words; each of its pages stays at 2,500 words at most, and the first
    page, where old links land, links every other."""
    first = (ROOT / "docs" / "keras-migration.md").read_text(encoding="utf-8")
    for name in (
        "keras-migration",
        "keras-layers",
        "keras-hub",
        "keras-hub-lm",
        "keras-hub-seq2seq",
        "keras-hub-vision",
        "keras-hub-tokenizer",
        "keras-hub-transformers",
        "keras-hub-training",
        "keras-training",
        "keras-source",
        "keras-deploy",
    ):
        words = len((ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8").split())
        assert words <= 2500, f"{name}.md: {words} words"
        assert f"]({name}.md)" in first, name
