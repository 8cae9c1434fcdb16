"""Make the fixtures of tests/test_keras_transformers_folder.py that the other keras-hub fixtures do not hold,
with keras 3 (torch backend) and keras-hub (run once; the files are committed, keras-hub is no test
dependency):

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_transformers_fixtures.py tests/data/keras_hub_models

``roberta_classifier_default.keras``: a ``RobertaTextClassifier`` of 3 classes with keras-hub's defaults (its
``pooled_dense`` as wide as the backbone, which transformers' RoBERTa head needs; the committed
``roberta_classifier.keras`` has ``hidden_dim=24`` and is refused), over the backbone sizes of
keras_hub_models_fixtures.py; its inputs are padded on the right with RoBERTa's pad id, 1, as keras-hub's
preprocessor pads them, and its real tokens are drawn from 3 .. 99 (no special token). Every weight is moved
off its initial value. ``transformers_expected.npz`` holds ``<case>/in/<name>`` and ``<case>/out/logits``.

(A tied ``LlamaCausalLM``, ``tie_word_embeddings=True``, is no fixture: keras-hub 0.32's
``LlamaBackbone.get_config`` leaves the argument out, so its file reloads untied, in Keras too.)
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(7)
BATCH, LENGTH, LENGTHS = 4, 12, [12, 7, 1, 10]
ROBERTA = {"vocabulary_size": 100, "num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64}
ROBERTA["max_sequence_length"] = 16


def moved(model):
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
    return model


def padded(pad: int, low: int) -> dict[str, np.ndarray]:
    """Ids padded on the right with ``pad`` (``padding_mask`` 0 there); real ids drawn from ``low`` .. 99."""
    mask = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    ids = np.where(mask == 1, rng.integers(low, 100, (BATCH, LENGTH)), pad).astype("int32")
    return {"token_ids": ids, "padding_mask": mask}


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    cases = {
        "roberta_classifier_default": (
            keras_hub.models.RobertaTextClassifier(keras_hub.models.RobertaBackbone(**ROBERTA), 3, preprocessor=None),
            padded(1, 3),
        ),
    }
    for name, (model, given) in cases.items():
        moved(model)
        model.save(os.path.join(out, f"{name}.keras"))
        expected |= {f"{name}/in/{key}": value for key, value in given.items()}
        expected[f"{name}/out/logits"] = np.asarray(model.predict(given, verbose=0))
    np.savez_compressed(os.path.join(out, "transformers_expected.npz"), **expected)
    print(f"wrote {len(cases)} cases to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_models")
