"""Make the keras-hub Backbone fixtures of tests/test_keras_hub_models.py with keras 3 (torch backend) and
keras-hub (run once; the files are committed, keras-hub is no test dependency):

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_hub_models_fixtures.py tests/data/keras_hub_models

Each case is a tiny keras-hub Backbone (2 layers, hidden 32, 2 heads, vocabulary 100, 16 positions), every
weight moved off its initial value, saved as ``model.save("<case>.keras")`` (whose config keeps only the
constructor's arguments) and as the folder ``backbone.save_to_preset("<case>_preset")`` writes
(config.json, model.weights.h5, metadata.json); ``bert_classifier``, a ``BertTextClassifier`` of 3
classes over such a BERT (and DistilBERT's, with softmax, and RoBERTa's, with hidden_dim 24), and
``user_model``, a functional model calling a DistilBertBackbone, as ``.keras`` only.
``expected.npz`` holds the inputs, token ids padded on the right with ``padding_mask`` 0 there (one sample
unpadded, one with one real token), and Keras's outputs: ``<case>/in/<name>``, ``<case>/out/<name>``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
SIZES = {"vocabulary_size": 100, "num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64}
SIZES["max_sequence_length"] = 16
BATCH, LENGTH = 4, 12
LENGTHS = [12, 7, 1, 10]  # real tokens per sample; the rest is padding


def inputs(segments: bool) -> dict[str, np.ndarray]:
    padding = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    found = {"token_ids": rng.integers(1, 100, (BATCH, LENGTH)).astype("int32") * padding, "padding_mask": padding}
    if segments:
        found["segment_ids"] = (rng.integers(0, 2, (BATCH, LENGTH)) * padding).astype("int32")
    return found


def user_model():
    """keras-io's fine-tuning form: a functional model of the user's calling a backbone on its own inputs."""
    backbone = keras_hub.models.DistilBertBackbone(**SIZES)
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding = keras.Input((None,), dtype="int32", name="padding_mask")
    sequence = backbone({"token_ids": ids, "padding_mask": padding})
    pooled = keras.layers.Dense(3, activation="softmax")(sequence[:, 0, :])
    return keras.Model([ids, padding], {"sequence_output": sequence, "pooled_output": pooled})


CASES = {
    "bert": (lambda: keras_hub.models.BertBackbone(**SIZES), True),
    "distil_bert": (lambda: keras_hub.models.DistilBertBackbone(**SIZES), False),
    "roberta": (lambda: keras_hub.models.RobertaBackbone(**SIZES), False),
    "gpt2": (lambda: keras_hub.models.GPT2Backbone(**SIZES), False),
    "bert_classifier": (
        lambda: keras_hub.models.BertTextClassifier(keras_hub.models.BertBackbone(**SIZES), 3, preprocessor=None),
        True,
    ),
    "distil_bert_classifier": (
        lambda: keras_hub.models.DistilBertTextClassifier(
            keras_hub.models.DistilBertBackbone(**SIZES), 3, preprocessor=None, activation="softmax"
        ),
        False,
    ),
    "roberta_classifier": (
        lambda: keras_hub.models.RobertaTextClassifier(
            keras_hub.models.RobertaBackbone(**SIZES), 3, preprocessor=None, hidden_dim=24
        ),
        False,
    ),
    "user_model": (user_model, False),
}


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, (make, segments) in CASES.items():
        model = make()
        for weight in model.weights:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
        model.save(os.path.join(out, f"{name}.keras"))
        if isinstance(model, keras_hub.models.Backbone):  # a task's preset folder holds its backbone's config
            model.save_to_preset(os.path.join(out, f"{name}_preset"))
        given = inputs(segments)
        outputs = model.predict(given, verbose=0)
        if not isinstance(outputs, dict):
            outputs = {"logits" if "classifier" in name else "sequence_output": outputs}
        for key, value in given.items():
            expected[f"{name}/in/{key}"] = value
        for key, value in outputs.items():
            expected[f"{name}/out/{key}"] = np.asarray(value)
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)
    print(f"wrote {len(CASES)} cases to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_models")
