"""Make the Llama fixtures of tests/test_keras_hub_llama.py with keras 3 (torch backend) and keras-hub (run
once; the files are committed, keras-hub is no test dependency):

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_hub_llama_fixtures.py tests/data/keras_hub_models

A tiny ``LlamaBackbone`` (2 layers, hidden 32, 4 query heads and 2 key/value heads of 8, intermediate 64,
vocabulary 100, RMSNorm epsilon 1e-6) and a ``LlamaCausalLM`` over another one (preprocessor None), every
weight moved off its initial value, saved as ``llama.keras``, ``llama_preset/`` (``save_to_preset``) and
``llama_causal_lm.keras``. ``llama_expected.npz`` holds a right-padded batch (``padding_mask`` 0 on the
padding; one sample unpadded, one of one real token) and Keras's outputs on it (``backbone/...``,
``causal_lm/...``), and ``greedy/prompt`` [2, 5] with ``greedy/tokens`` [2, 32]: Keras's greedy
continuation, each token the argmax of the causal LM's logits at the last position with the whole
sequence so far given again (no cache: the oracle is the plain forward).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
SIZES = {"vocabulary_size": 100, "num_layers": 2, "num_query_heads": 4, "num_key_value_heads": 2}
SIZES.update(hidden_dim=32, intermediate_dim=64, layer_norm_epsilon=1e-6)
BATCH, LENGTH, STEPS = 4, 12, 32
LENGTHS = [12, 7, 1, 10]


def moved(model):
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
    return model


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    padding = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    given = {"token_ids": rng.integers(1, 100, (BATCH, LENGTH)).astype("int32") * padding, "padding_mask": padding}
    expected = {f"in/{k}": v for k, v in given.items()}
    backbone = moved(keras_hub.models.LlamaBackbone(**SIZES))
    backbone.save(os.path.join(out, "llama.keras"))
    backbone.save_to_preset(os.path.join(out, "llama_preset"))
    expected["backbone/sequence_output"] = np.asarray(backbone.predict(given, verbose=0))
    lm = keras_hub.models.LlamaCausalLM(moved(keras_hub.models.LlamaBackbone(**SIZES)), preprocessor=None)
    lm.save(os.path.join(out, "llama_causal_lm.keras"))
    expected["causal_lm/logits"] = np.asarray(lm.predict(given, verbose=0))
    tokens = rng.integers(1, 100, (2, 5)).astype("int32")
    expected["greedy/prompt"] = tokens.copy()
    for _ in range(STEPS):
        logits = np.asarray(lm.predict({"token_ids": tokens, "padding_mask": np.ones_like(tokens)}, verbose=0))
        tokens = np.concatenate([tokens, logits[:, -1].argmax(-1).astype("int32")[:, None]], axis=1)
    expected["greedy/tokens"] = tokens[:, 5:]
    np.savez_compressed(os.path.join(out, "llama_expected.npz"), **expected)
    print(f"wrote Llama fixtures to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


def task_preset(out: str) -> None:
    """``llama_causal_lm_preset/``: the committed ``llama_causal_lm.keras`` loaded by keras-hub and saved
    with ``save_to_preset`` (made later than the rest, by ``--task-preset``; same weights, same outputs)."""
    lm = keras.saving.load_model(os.path.join(out, "llama_causal_lm.keras"))
    lm.save_to_preset(os.path.join(out, "llama_causal_lm_preset"))
    print(f"wrote {out}/llama_causal_lm_preset with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


def padded_greedy(out: str) -> None:
    """``llama_padded_greedy.npz``: right-padded prompts of 4, 9 and 6 tokens without a near tie (``ids``,
    ``padding_mask``) and ``out``, Keras's greedy decoding of 32 new tokens by the committed
    ``llama_causal_lm.keras`` called on the whole sequence every step, from the shortest prompt's end, each
    row keeping its own prompt's tokens (keras_hub_decoding_fixtures.keras_greedy, the GPT-2 oracle). Made
    later than the rest, by ``--padded-greedy``."""
    from keras_hub_decoding_fixtures import keras_greedy, padded

    lm = keras.saving.load_model(os.path.join(out, "llama_causal_lm.keras"))
    for _ in range(5):  # prompts drawn again where Keras's logits nearly tie (keras_greedy refuses those)
        ids, mask = padded([4, 9, 6], 9)
        try:
            tokens = keras_greedy(lm, ids, mask)
            break
        except AssertionError as tie:
            print(tie)
    else:
        raise SystemExit("five draws of prompts nearly tied; no padded fixture written")
    np.savez_compressed(os.path.join(out, "llama_padded_greedy.npz"), ids=ids, padding_mask=mask, out=tokens)
    print(f"wrote {out}/llama_padded_greedy.npz with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


MODES = {"--task-preset": task_preset, "--padded-greedy": padded_greedy}

if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg not in MODES]
    make = next((MODES[arg] for arg in sys.argv[1:] if arg in MODES), main)
    make(args[0] if args else "tests/data/keras_hub_models")
