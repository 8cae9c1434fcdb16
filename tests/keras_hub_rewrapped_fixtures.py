"""Make the fixtures of tests/test_keras_hub_rewrapped.py with keras 3 (torch backend) and keras-hub 0.32 (run
once; the files are committed, keras-hub is no test dependency):

    PYTHONHASHSEED=0 KERAS_BACKEND=torch python tests/keras_hub_rewrapped_fixtures.py tests/data/keras_hub_rewrapped

keras-hub causal LMs re-wrapped as a plain functional graph, ``keras.Model(lm.inputs, lm.outputs)``, and saved
as ``<case>.keras``: the graph calls the backbone's ``token_embedding`` twice (on the ids inside the nested
backbone, then with ``reverse=True`` on its last state for the logits), so the file's config lists that layer
twice and its weights once. Tiny models built from constructor arguments (no download, preprocessor None),
every weight moved off its initial value (``w = rng.standard_normal(shape) * 0.3 + w * 0.5``, the seed derived
from the case's name):

* ``gpt2``: ``GPT2CausalLM`` over a ``GPT2Backbone`` (vocabulary 50, 2 layers of 2 heads, hidden 16,
  intermediate 32, max length 16);
* ``opt``: ``OPTCausalLM`` over an ``OPTBackbone`` of the same sizes, whose ``token_embedding`` is held inside
  the backbone's ``embeddings`` (a ``TokenAndPositionEmbedding``), so the file has no group of its own for it;
* ``keras_shared``: plain Keras, a nested functional ``encoder`` whose ``Embedding`` ``table`` the outer graph
  calls again (:func:`keras_shared`); its output [3, 8, 16] is stored as ``logits`` too.

(A tied ``LlamaCausalLM`` is left out: keras-hub 0.32's ``LlamaBackbone.get_config`` does not write
``tie_word_embeddings``, so its saved backbone reads as untied, one table short.)

``expected.npz`` holds each case's right-padded batch ``<case>/in/token_ids`` and ``<case>/in/padding_mask``
[3, 8] (lengths 8, 5, 1) and Keras's logits ``<case>/out/logits`` [3, 8, 50]: ``predict`` of the model in
memory, since keras 3.15's ``load_model`` refuses these files itself (it rebuilds the outer listing as a second
layer and finds no weights for it).
"""

from __future__ import annotations

import os
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

M = keras_hub.models
VOCAB, LENGTH, LENGTHS = 50, 8, [8, 5, 1]
SIZES = {"num_layers": 2, "num_heads": 2, "hidden_dim": 16, "intermediate_dim": 32, "max_sequence_length": 16}
CASES = {
    "gpt2": lambda: M.GPT2CausalLM(M.GPT2Backbone(vocabulary_size=VOCAB, **SIZES), preprocessor=None),
    "opt": lambda: M.OPTCausalLM(M.OPTBackbone(vocabulary_size=VOCAB, **SIZES), preprocessor=None),
    "keras_shared": lambda: keras_shared(),
}


def keras_shared():
    """Plain Keras (no keras-hub): a nested functional ``encoder`` (ids -> ``Embedding`` ``table`` -> ``Dense``)
    whose ``table`` the outer graph calls again on the ids, the two added: ids [B, T] -> [B, T, 16]."""
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    table = keras.layers.Embedding(VOCAB, 16, name="table")
    encoder = keras.Model(ids, keras.layers.Dense(16, name="mix")(table(ids)), name="encoder")
    outer = keras.Input((None,), dtype="int32", name="token_ids")
    return keras.Model(outer, keras.layers.Add(name="add")([encoder(outer), table(outer)]))


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    padding = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    for name, make in CASES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        keras.utils.set_random_seed(zlib.crc32(name.encode()))
        lm = make()
        for weight in lm.weights:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
        graph = lm if name == "keras_shared" else keras.Model(lm.inputs, lm.outputs)
        graph.save(os.path.join(out, f"{name}.keras"))
        given = {"token_ids": rng.integers(1, VOCAB, padding.shape).astype("int32") * padding, "padding_mask": padding}
        if name == "keras_shared":
            del given["padding_mask"]
        logits = np.asarray(graph.predict(given, verbose=0))
        assert np.array_equal(logits, np.asarray(lm.predict(given, verbose=0))), name
        expected |= {f"{name}/in/{k}": v for k, v in given.items()} | {f"{name}/out/logits": logits}
        print(f"{name}: {type(lm).__name__} -> {logits.shape}, {[layer.name for layer in graph.layers]}")
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)
    print(f"with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_rewrapped")
