"""``attnzoo convert-keras --list``: what converts, against the pages whose tables are checked against the
converter itself (docs/keras-layers.md by tests/test_keras_docs_table.py, docs/keras-hub.md by
tests/test_keras_hub_families.py), so the listing and the docs cannot drift apart."""

from __future__ import annotations

import json
import re

from attnzoo.cli import main

from .conftest import ROOT
from .test_keras_docs_table import GRAPH_CLASSES, table_rows


def test_the_listing_names_every_class_of_the_docs_tables_and_parses_as_json(capsys):
    assert main(["convert-keras", "--list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    names = {entry["name"] for entry in entries}
    assert {"LSTM", "Conv2D", "MultiHeadAttention", "BertBackbone", "tf.math.add", "get_item"} <= names
    documented = {name for classes, _, _ in table_rows() for name in classes} - GRAPH_CLASSES
    hub_page = (ROOT / "docs" / "keras-hub.md").read_text(encoding="utf-8")
    documented |= set(re.findall(r"^\| `(\w+)` \| \w+ \|", hub_page, flags=re.M))
    assert not sorted(documented - names), sorted(documented - names)
    by_name = {(entry["kind"], entry["name"]): entry for entry in entries}
    assert "attnzoo.keras.converters.recurrent.convert_rnn" in by_name[("Keras layer", "LSTM")]["route"]
    assert "Hugging Face class BertModel" in by_name[("keras-hub model", "BertBackbone")]["notes"]
    assert by_name[("tf.keras 2 op", "tf.math.truediv")]["route"] == "the keras 3 operation divide"
    assert all(entry["route"] for entry in entries)
    # the table for people: one line per entry under its kind, and --list converts nothing
    assert main(["convert-keras", "--list"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^  LSTM +recurrent converter", text, flags=re.M) and "keras-hub models (" in text
    assert len([line for line in text.splitlines() if line.startswith("  ")]) == len(entries)
    assert main(["convert-keras", "--list", "model.keras"]) == 2
    assert "--list converts nothing" in capsys.readouterr().err
