"""Make the keras-hub encoder-decoder fixtures under tests/data/keras_hub_seq2seq with keras 3 (torch backend)
and keras-hub (run once; the files are committed, keras-hub is no test dependency). Made with keras 3.15.1,
keras-hub 0.32.0, torch 2.x on CPU:

    KERAS_BACKEND=torch python tests/keras_hub_seq2seq_fixtures.py tests/data/keras_hub_seq2seq [FAMILY ...]

Families: ``bart`` (``BartBackbone``, ``BartSeq2SeqLM``) and ``t5`` (``T5Backbone``, ``T5Seq2SeqLM``), tiny
(2 layers, width 32, 4 heads, vocabulary 128), float32. Each writes ``F/``:

* ``preset/``: ``<X>Seq2SeqLM(backbone=<X>Backbone(...), preprocessor=None).save_to_preset(...)`` (config.json
  the backbone, task.json the task, model.weights.h5 the backbone's weights at its root: the one folder holds
  both classes; no tokenizer), the backbone's every weight moved off its initial value:
  ``w = rng.standard_normal(shape) * 0.2 + w * 0.5``, except the normalisation weights (a variable whose
  path holds ``norm``), moved by ``w + rng.standard_normal(shape) * 0.1``, and the embedding tables (path
  holding ``embedding``), ``rng.standard_normal(shape) * 2 + w * 0.5`` (smaller tables leave these random
  decoders choosing one token whatever their input);
* ``expected.npz`` (float32 / int32):

  - ``right/encoder_token_ids``, ``right/encoder_padding_mask`` [4, 10] (rows of 10, 6, 1, 8 real tokens,
    ids in [1, vocab), padded ids 0) and ``right/decoder_token_ids``, ``right/decoder_padding_mask`` [4, 8]
    (rows of 8, 3, 5, 1), right-padded; ``left/...`` the same rows left-padded (BART only: T5's additive
    -1e9 mask leaves a query whose keys are all masked at the mercy of float32 rounding);
  - ``<batch>/encoder_sequence_output``, ``<batch>/decoder_sequence_output`` [4, T, 32]: the backbone's dict
    output (``__call__``, training=False); ``<batch>/logits`` [4, 8, V]: the task's;
  - ``greedy/encoder_token_ids``, ``greedy/encoder_padding_mask`` [2, 10] (rows of 10 and 7 real tokens),
    ``greedy/prompt`` [2, 3] (no padding), ``greedy/tokens`` [2, 16]: the greedy continuation by the plain
    forward oracle (the task called on the whole decoder sequence so far each step, argmax at its last
    position; no top-2 logits within 1e-3 at any step, two distinct tokens at least per row);
    ``generate/tokens`` [2, 16]: keras-hub's own
    ``generate`` of the four inputs (the decoder prompt right-padded with zeros to 19, mask 1 on the
    prompt) after ``compile(sampler="greedy")``, ``stop_token_ids=None`` (its cached decoding); the script
    checks the two agree.

After writing a family the script reloads the folder (``<X>Backbone.from_preset``, ``<X>Seq2SeqLM.from_preset``)
and checks their outputs equal the saved ones.
"""

from __future__ import annotations

import os
import shutil
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

M = keras_hub.models
VOCAB, PROMPT, NEW = 128, 3, 16
EMBEDDING_SCALE = 2.0  # token and position tables: the decoders' greedy choices then follow their inputs
ENCODER_LENGTHS, DECODER_LENGTHS = [10, 6, 1, 8], [8, 3, 5, 1]
TINY = {"vocabulary_size": VOCAB, "num_layers": 2, "num_heads": 4, "hidden_dim": 32, "intermediate_dim": 64}
FAMILIES = {
    "bart": {"prefix": "Bart", "kwargs": {**TINY, "max_sequence_length": 32}, "scale": 0.2, "left": True},
    "t5": {"prefix": "T5", "kwargs": {**TINY}, "scale": 0.2, "left": False},
}


def moved(model, rng: np.random.Generator, scale: float):
    for weight in model.weights:
        value = np.asarray(weight.numpy(), dtype="float32")
        noise = rng.standard_normal(value.shape).astype("float32")
        if "norm" in weight.path:
            weight.assign(value + noise * 0.1)
        elif "embedding" in weight.path:
            weight.assign(noise * EMBEDDING_SCALE + value * 0.5)
        else:
            weight.assign(noise * scale + value * 0.5)
    return model


def padded(rng: np.random.Generator, lengths: list[int], width: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(lengths), width), "int32")
    mask = np.zeros((len(lengths), width), "int32")
    for row, n in enumerate(lengths):
        at = slice(width - n, width) if left else slice(0, n)
        ids[row, at] = rng.integers(1, VOCAB, n)
        mask[row, at] = 1
    return ids, mask


def batch(rng: np.random.Generator, left: bool) -> dict:
    state = rng.bit_generator.state
    encoder = padded(rng, ENCODER_LENGTHS, 10, left)
    decoder = padded(rng, DECODER_LENGTHS, 8, left)
    rng.bit_generator.state = state  # the same ids both ways
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    return dict(zip(names, (*encoder, *decoder), strict=True))


def numpy(value) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(value, "float32")))


def call(model, inputs: dict):
    with torch.no_grad():
        out = model({k: keras.ops.convert_to_tensor(v) for k, v in inputs.items()}, training=False)
    return {k: numpy(v) for k, v in out.items()} if isinstance(out, dict) else numpy(out)


def greedy(lm, encoder: dict, prompt: np.ndarray) -> np.ndarray:
    """The plain forward oracle; raises AssertionError at a near tie."""
    tokens = prompt.copy()
    for _ in range(NEW):
        inputs = {**encoder, "decoder_token_ids": tokens, "decoder_padding_mask": np.ones_like(tokens)}
        logits = call(lm, inputs)[:, -1]
        top = np.sort(logits, axis=-1)
        assert (top[:, -1] - top[:, -2] > 1e-3).all(), f"near tie at length {tokens.shape[1]}"
        tokens = np.concatenate([tokens, logits.argmax(-1).astype("int32")[:, None]], axis=1)
    return tokens[:, PROMPT:]


def keras_generate(lm, encoder: dict, prompt: np.ndarray) -> np.ndarray:
    width = PROMPT + NEW
    ids = np.zeros((prompt.shape[0], width), "int32")
    ids[:, :PROMPT] = prompt
    mask = (np.arange(width)[None, :] < PROMPT).astype("int32").repeat(prompt.shape[0], 0)
    lm.compile(sampler="greedy")
    inputs = {**encoder, "decoder_token_ids": ids, "decoder_padding_mask": mask}
    out = lm.generate(inputs, max_length=width, stop_token_ids=None)
    return np.asarray(keras.ops.convert_to_numpy(out["decoder_token_ids"]))[:, PROMPT:].astype("int32")


def pick_prompt(lm, rng: np.random.Generator) -> dict:
    ids, mask = padded(rng, [10, 7], 10, False)
    encoder = {"encoder_token_ids": ids, "encoder_padding_mask": mask}
    for attempt in range(40):
        prompt = rng.integers(1, VOCAB, (2, PROMPT)).astype("int32")
        try:
            tokens = greedy(lm, encoder, prompt)
        except AssertionError as tie:
            print(f"  prompt {attempt}: {tie}")
            continue
        if min(len(set(row.tolist())) for row in tokens) < 2:
            print(f"  prompt {attempt}: collapses to {[sorted(set(r.tolist())) for r in tokens]}")
            continue
        generated = keras_generate(lm, encoder, prompt)
        agree = bool((generated == tokens).all())
        print(f"  prompt {attempt}: oracle and keras generate agree: {agree}")
        if agree:
            found = {"greedy/prompt": prompt, "greedy/tokens": tokens, "generate/tokens": generated}
            return found | {f"greedy/{k}": v for k, v in encoder.items()}
    raise RuntimeError(f"no prompt without near ties where generate agrees with the oracle for {lm.name}")


def close(a, b, what: str) -> None:
    diff = float(np.max(np.abs(np.asarray(a, "float32") - np.asarray(b, "float32"))))
    assert diff <= 1e-5, f"{what}: max difference {diff}"
    print(f"  reload {what}: max difference {diff:.2e}")


def make(name: str, out: str) -> None:
    family = FAMILIES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    keras.utils.set_random_seed(zlib.crc32(name.encode()) % 2**31)
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    backbone_cls = getattr(M, f"{family['prefix']}Backbone")
    lm_cls = getattr(M, f"{family['prefix']}Seq2SeqLM")
    lm = lm_cls(backbone=moved(backbone_cls(**family["kwargs"]), rng, family["scale"]), preprocessor=None)
    expected: dict[str, np.ndarray] = {}
    for side in ("right", "left") if family["left"] else ("right",):
        given = batch(rng, side == "left")
        expected |= {f"{side}/{k}": v for k, v in given.items()}
        expected |= {f"{side}/{k}": v for k, v in call(lm.backbone, given).items()}
        expected[f"{side}/logits"] = call(lm, given)
    expected |= pick_prompt(lm, rng)
    lm.save_to_preset(os.path.join(folder, "preset"))
    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    given = {k: expected[f"right/{k}"] for k in batch(rng, False)}
    preset = os.path.join(folder, "preset")
    for key, value in call(backbone_cls.from_preset(preset), given).items():
        close(value, expected[f"right/{key}"], f"backbone from_preset {key}")
    close(call(lm_cls.from_preset(preset), given), expected["right/logits"], "task from_preset logits")


def main(out: str, names: list[str]) -> None:
    for name in names or list(FAMILIES):
        print(name)
        make(name, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
