"""Make tests/data/keras_hub_lm/bert/classifier.keras: the BertTextClassifier of ``bert/classifier_preset``
(keras-hub's task folder, whose head attnzoo reads only from a ``.keras`` file) saved as ``task.save`` writes
it, without its preprocessor; the preset's tokenizer travels beside it (``keras_hub_tokenizer``). Run once
with keras-hub (committed; keras-hub is no test dependency):

    PYTHONPATH=$PWD KERAS_BACKEND=torch python tests/keras_hub_train_fixtures.py

The script checks that the saved classifier gives the preset's logits (``expected.npz``'s ``right/logits``,
within 1e-5) and that the file loads back to the same.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "keras_hub_lm", "bert")


def main() -> None:
    import keras
    import keras_hub

    task = keras_hub.models.TextClassifier.from_preset(os.path.join(HERE, "classifier_preset"))
    plain = keras_hub.models.BertTextClassifier(backbone=task.backbone, num_classes=3, preprocessor=None)
    plain.output_dense.set_weights(task.output_dense.get_weights())
    expected = dict(np.load(os.path.join(HERE, "expected.npz")))
    inputs = {k: expected[f"right/{k}"] for k in ("token_ids", "padding_mask", "segment_ids")}
    out = keras.ops.convert_to_numpy(plain(inputs, training=False))
    assert np.abs(out - expected["right/logits"]).max() < 1e-5  # the same weights; oneDNN's sums may differ
    path = os.path.join(HERE, "classifier.keras")
    plain.save(path)
    again = keras.saving.load_model(path)
    assert np.array_equal(keras.ops.convert_to_numpy(again(inputs, training=False)), out)
    print(f"wrote {path} ({os.path.getsize(path):,} bytes)")


if __name__ == "__main__":
    sys.exit(main())
