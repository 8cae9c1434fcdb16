"""Make the GPT2CausalLM fixtures of tests/test_keras_hub_decoding.py with keras 3 (torch backend) and keras-hub
(run once; the files are committed, keras-hub is no test dependency):

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_hub_decoding_fixtures.py tests/data/keras_hub_models

A tiny ``GPT2CausalLM`` (2 layers, hidden 32, 2 heads, vocabulary 100, 64 positions, ``preprocessor=None``),
every weight moved off its initial value, saved as ``model.save("gpt2_causal_lm.keras")`` and as the folder
``save_to_preset("gpt2_causal_lm_preset")`` writes (a task's: config.json of the backbone, task.json of the
task, model.weights.h5 of the backbone's weights; no task.weights.h5, the head being the tied embedding).
``decoding.npz`` holds:

* ``logits/in/<name>`` and ``logits/out``: a right-padded batch (``padding_mask`` 0 at the padding) and
  Keras's logits [B, T, 100];
* ``tied/in``, ``tied/out``: ids and the logits of ``tied_lm.keras``, a functional model of keras's own
  tied ``ReversibleEmbedding`` (its lookup and its ``reverse=True`` call: one layer called twice);
* ``greedy/<case>/ids``, ``greedy/<case>/padding_mask`` (prompts right-padded to their longest) and
  ``greedy/<case>/out`` [B, T + 32]: greedy decoding of 32 new tokens as keras-hub's ``generate_step`` does
  it (a greedy sampler; where ``padding_mask`` is 1 the prompt's token is kept). The script checks that
  Keras's model called on the whole growing sequence every step (argmax of the last real position's
  logits) decodes the same tokens; that independent loop is the oracle the tests read.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(55)
SIZES = {"vocabulary_size": 100, "num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64}
SIZES["max_sequence_length"] = 64
NEW = 32
LENGTHS = [12, 7, 1, 10]  # the logits batch: real tokens per sample, the rest padding
PROMPTS = {"same": [5, 5], "padded": [4, 9, 6]}  # prompt lengths per case


def padded(lengths: list[int], width: int) -> tuple[np.ndarray, np.ndarray]:
    mask = (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return rng.integers(1, 100, (len(lengths), width)).astype("int32") * mask, mask


def keras_greedy(model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Greedy decoding by calling the Keras model on the whole sequence so far, every step."""
    tokens = np.concatenate([ids, np.zeros((ids.shape[0], NEW), "int32")], axis=1)
    keep = np.concatenate([mask, np.zeros((ids.shape[0], NEW), "int32")], axis=1).astype(bool)
    for index in range(int(mask.sum(axis=1).min()), tokens.shape[1]):
        given = {"token_ids": tokens[:, :index], "padding_mask": np.ones((ids.shape[0], index), "int32")}
        logits = np.asarray(model.predict(given, verbose=0))
        top = np.sort(logits[:, -1], axis=-1)
        margin = np.where(keep[:, index], np.inf, top[:, -1] - top[:, -2])  # where a token is chosen
        assert (margin > 1e-3).all(), f"a near tie at {index}: greedy decoding would hang on rounding"
        chosen = logits[:, -1].argmax(axis=-1).astype("int32")
        tokens[:, index] = np.where(keep[:, index], tokens[:, index], chosen)
    return tokens


def tied_lm() -> keras.Model:
    """A user's functional model with keras's own ReversibleEmbedding, tied: ids -> embedding -> Dense ->
    LayerNormalization -> the embedding's reverse call (logits). keras lists the embedding where it is
    first called, so its second call reads layers listed after it."""
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedding = keras.layers.ReversibleEmbedding(100, 16, name="embedding")
    x = keras.layers.Dense(16, activation="gelu", name="dense")(embedding(ids))
    x = keras.layers.LayerNormalization(name="norm")(x)
    return keras.Model(ids, embedding(x, reverse=True), name="tied_lm")


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    backbone = keras_hub.models.GPT2Backbone(**SIZES)
    model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
    model.save(os.path.join(out, "gpt2_causal_lm.keras"))
    model.save_to_preset(os.path.join(out, "gpt2_causal_lm_preset"))
    expected: dict[str, np.ndarray] = {}
    ids, mask = padded(LENGTHS, max(LENGTHS))
    expected["logits/in/token_ids"], expected["logits/in/padding_mask"] = ids, mask
    expected["logits/out"] = np.asarray(model.predict({"token_ids": ids, "padding_mask": mask}, verbose=0))
    model.compile(sampler="greedy")
    for case, lengths in PROMPTS.items():
        ids, mask = padded(lengths, max(lengths))
        oracle = keras_greedy(model, ids, mask)
        width = ids.shape[1] + NEW
        full = {
            "token_ids": np.pad(ids, ((0, 0), (0, NEW))),
            "padding_mask": np.pad(mask, ((0, 0), (0, NEW))).astype(bool),
        }
        own = keras.ops.convert_to_numpy(model.generate_step(full)["token_ids"])
        assert own.shape == (len(lengths), width) and (own == oracle).all(), (case, own, oracle)
        assert len(np.unique(oracle[:, -NEW:])) > 2, f"{case}: one token repeated: {oracle}"
        expected[f"greedy/{case}/ids"], expected[f"greedy/{case}/padding_mask"] = ids, mask
        expected[f"greedy/{case}/out"] = oracle
    tied = tied_lm()
    for weight in tied.weights:
        weight.assign(rng.standard_normal(tuple(weight.shape)).astype("float32") * 0.3 + np.asarray(weight) * 0.5)
    tied.save(os.path.join(out, "tied_lm.keras"))
    expected["tied/in"] = rng.integers(0, 100, (3, 9)).astype("int32")
    expected["tied/out"] = np.asarray(tied.predict(expected["tied/in"], verbose=0))
    np.savez_compressed(os.path.join(out, "decoding.npz"), **expected)
    print(f"wrote gpt2_causal_lm to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_models")
