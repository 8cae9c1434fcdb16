"""Whole Keras models converted by attnzoo against Keras itself and against a hand-written nn.Module.

    python benchmarks/keras_models.py [--rounds 5] [--batches 32,64] [--length 200] [--write-docs]

Four models, built in Keras 3 (torch backend, in this process), weights moved off their initial values:

* ``bilstm_classifier``: Embedding(20000, 128, mask_zero) -> Bidirectional(LSTM(128, return_sequences))
  -> GlobalAveragePooling1D -> Dense(5), the masked BiLSTM text classifier;
* ``seed004``: Embedding(20000, 128, mask_zero) -> Bidirectional(LSTM(128, return_sequences)) -> a custom
  LabelWiseAttention(50) (converted through ``custom_layers``, as a plugin would register it);
* ``conv_classifier``: keras-io's image classification from scratch, small: Rescaling of uint8 64x64
  images, a strided Conv2D, SeparableConv2D blocks with BatchNormalization and a strided 1x1 residual,
  MaxPooling2D, a Conv2DTranspose, GlobalAveragePooling2D, Dense;
* ``lstm_seq2seq``: keras-io's character-level seq2seq training model: LSTM(256) encoder states as the
  ``initial_state`` of an LSTM(256) decoder over one-hot characters (71 and 93 of them), softmax.

Each is timed, forward only and without gradients, as (a) the Keras model called directly
(``model(ids, training=False)``) and through ``predict_on_batch``, (b) the model
``attnzoo.keras.convert_keras_model`` makes of its ``.keras`` file, and (c) for the classifier, the
nn.Module a careful PyTorch user writes by hand: packed bidirectional ``nn.LSTM``, masked mean,
Linear, holding the same weights. Inputs: token ids right-padded to lengths drawn from
[length/2, length] (the seq2seq: one-hot characters, ``length / 4`` source and target steps; the images
do not depend on the length). The converted model's outputs are checked against Keras's (1e-5) before
anything is timed. Goals: the two masked LSTM models at least 5x faster than Keras, every model no
slower than Keras, and no slower than 1.1x the hand-written module. Writes
benchmarks/results/keras_models.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    ROOT,
    machine_line,
    markdown_table,
    paired_speedup,
    setup_threads,
    time_rounds,
    update_doc_section,
    write_json,
)

import attnzoo  # noqa: E402
from attnzoo.keras import convert_keras_model, load_keras_arrays  # noqa: E402

VOCAB, WIDTH, UNITS, LABELS, CLASSES = 20000, 128, 128, 50, 5


def keras_models():
    import keras
    from keras import layers, ops

    @keras.saving.register_keras_serializable(package="attnzoo_example")
    class LabelWiseAttention(keras.layers.Layer):
        def __init__(self, n_labels, **kwargs):
            super().__init__(**kwargs)
            self.n_labels = n_labels
            self.supports_masking = True

        def build(self, input_shape):
            h = input_shape[-1]
            self.Wa = self.add_weight(name="Wa", shape=(self.n_labels, h), initializer="he_normal")
            self.Wo = self.add_weight(name="Wo", shape=(self.n_labels, h), initializer="he_normal")
            self.bo = self.add_weight(name="bo", shape=(self.n_labels,), initializer="zeros")

        def call(self, x, mask=None):
            scores = ops.einsum("bth,lh->blt", x, self.Wa)
            if mask is not None:
                scores = ops.where(ops.expand_dims(mask, 1), scores, -1e9)
            reps = ops.einsum("blt,bth->blh", ops.softmax(scores, axis=-1), x)
            return ops.sigmoid(ops.sum(reps * self.Wo, axis=-1) + self.bo)

        def compute_mask(self, inputs, mask=None):
            return None

        def get_config(self):
            return {**super().get_config(), "n_labels": self.n_labels}

    def encoder():
        ids = keras.Input((None,), dtype="int32")
        x = layers.Embedding(VOCAB, WIDTH, mask_zero=True)(ids)
        return ids, layers.Bidirectional(layers.LSTM(UNITS, return_sequences=True))(x)

    ids, h = encoder()
    classifier = keras.Model(ids, layers.Dense(CLASSES)(layers.GlobalAveragePooling1D()(h)))
    ids, h = encoder()
    seed004 = keras.Model(ids, LabelWiseAttention(LABELS)(h))
    models = {"bilstm_classifier": classifier, "seed004": seed004}
    models.update(conv_classifier=conv_classifier(keras, layers), lstm_seq2seq=lstm_seq2seq(keras, layers))
    rng = np.random.default_rng(0)
    for model in models.values():
        for weight in model.weights:
            value = rng.standard_normal(weight.shape).astype("float32") * 0.1
            weight.assign(np.abs(value) + 0.5 if "variance" in weight.path else value)
    return models


def conv_classifier(keras, layers):
    """keras-io's image_classification_from_scratch (a small Xception), with a Conv2DTranspose."""
    images = keras.Input((64, 64, 3), dtype="uint8")
    x = layers.Rescaling(1.0 / 255)(images)
    x = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(32, 3, strides=2, padding="same")(x)))
    previous = x
    for size in (64, 128):
        x = layers.Activation("relu")(x)
        x = layers.BatchNormalization()(layers.SeparableConv2D(size, 3, padding="same")(x))
        x = layers.Activation("relu")(x)
        x = layers.BatchNormalization()(layers.SeparableConv2D(size, 3, padding="same")(x))
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        x = layers.add([x, layers.Conv2D(size, 1, strides=2, padding="same")(previous)])
        previous = x
    x = layers.Conv2DTranspose(64, 3, strides=2, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(images, layers.Dense(CLASSES, activation="softmax")(x))


SEQ2SEQ_LATENT, SOURCE_CHARS, TARGET_CHARS = 256, 71, 93


def lstm_seq2seq(keras, layers):
    """keras-io's lstm_seq2seq training model."""
    source = keras.Input((None, SOURCE_CHARS))
    _, h, c = layers.LSTM(SEQ2SEQ_LATENT, return_state=True)(source)
    target = keras.Input((None, TARGET_CHARS))
    decoded = layers.LSTM(SEQ2SEQ_LATENT, return_sequences=True)(target, initial_state=[h, c])
    return keras.Model([source, target], layers.Dense(TARGET_CHARS, activation="softmax")(decoded))


def model_inputs(name: str, batch: int, length: int) -> list[np.ndarray]:
    """The inputs each benchmark model takes (see the module docstring)."""
    rng = np.random.default_rng(0)
    if name == "conv_classifier":
        return [rng.integers(0, 256, size=(batch, 64, 64, 3)).astype("uint8")]
    if name == "lstm_seq2seq":
        steps = max(1, length // 4)
        return [
            np.eye(n, dtype="float32")[rng.integers(0, n, size=(batch, steps))] for n in (SOURCE_CHARS, TARGET_CHARS)
        ]
    return [padded_ids(batch, length)]


def label_wise(config, weights):
    labels, hidden = weights[0].shape
    return load_keras_arrays(attnzoo.create("lwan", num_labels=labels, hidden_size=hidden, output="probs"), weights)


class HandWritten(nn.Module):
    """The classifier as one writes it by hand: packed BiLSTM over the real steps, masked mean, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.lstm = nn.LSTM(WIDTH, UNITS, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * UNITS, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != 0
        lengths = mask.sum(1)
        packed = pack_padded_sequence(self.embedding(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])
        return self.out(out.sum(1) / lengths[:, None])

    @classmethod
    def like(cls, converted: nn.Module) -> HandWritten:
        """The same weights as the converted classifier (torch layouts on both sides)."""
        hand = cls()
        layers = list(converted.layers.values())
        emb = next(m for m in layers if isinstance(m, nn.Embedding))
        dense = next(m for m in layers if isinstance(m, nn.Linear))
        lstm = next(m for m in layers if isinstance(m, nn.LSTM) or getattr(m, "op", "") == "bidirectional")
        with torch.no_grad():
            hand.embedding.weight.copy_(emb.weight)
            if isinstance(lstm, nn.LSTM):  # the port declares torch's own bidirectional LSTM
                hand.lstm.load_state_dict(lstm.state_dict())
            else:  # an attnzoo Bidirectional node: each direction's nn.LSTM
                for suffix, direction in (("", lstm.forward_layer), ("_reverse", lstm.backward_layer)):
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                        getattr(hand.lstm, f"{name}_l0{suffix}").copy_(getattr(direction.rnn, f"{name}_l0"))
            hand.out.weight.copy_(dense.weight)
            hand.out.bias.copy_(dense.bias)
        return hand.eval()


def padded_ids(batch: int, length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(batch, length))
    lengths = rng.integers(length // 2, length + 1, size=batch)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    return ids


def time_one(name: str, keras_model, converted, hand, batch: int, args) -> tuple[dict, list[str]]:
    """One model at one batch size: checked against Keras, then timed; the JSON record and table row."""
    inputs = model_inputs(name, batch, args.length)
    tensors = [torch.from_numpy(x) for x in inputs]
    feed = inputs if len(inputs) > 1 else inputs[0]
    with torch.no_grad():
        want = np.asarray(keras_model(feed, training=False).detach().cpu())
        got = converted(*tensors).numpy()
        assert np.abs(got - want).max() < 1e-5, f"{name}: {np.abs(got - want).max():.2e} from Keras"
        if hand is not None:
            assert np.abs(hand(*tensors).numpy() - got).max() < 1e-5, "the hand-written module differs"

    def no_grad(call):
        def run():
            with torch.no_grad():
                return call()

        return run

    impls = {
        "keras": no_grad(lambda: keras_model(feed, training=False)),
        "keras predict_on_batch": lambda: keras_model.predict_on_batch(feed),
        "attnzoo": no_grad(lambda: converted(*tensors)),
    }
    if hand is not None:
        impls["hand-written"] = no_grad(lambda: hand(*tensors))
    times = time_rounds(
        impls, rounds=args.rounds, min_run_time=1.0, budget={"keras": 0.1, "keras predict_on_batch": 0.1}
    )
    median = {k: float(np.median(v)) for k, v in times.items()}
    vs_keras = paired_speedup(times["keras"], times["attnzoo"])
    vs_predict = paired_speedup(times["keras predict_on_batch"], times["attnzoo"])
    vs_hand = 1 / paired_speedup(times["hand-written"], times["attnzoo"]) if hand is not None else None
    shape = "64x64x3" if name == "conv_classifier" else str(args.length)
    if name == "lstm_seq2seq":
        shape = f"{inputs[0].shape[1]} + {inputs[1].shape[1]} steps"
    record = {
        "model": name,
        "batch": batch,
        "length": args.length,
        "input": list(inputs[0].shape),
        "seconds": median,
        "speedup_vs_keras": vs_keras,
        "speedup_vs_keras_predict_on_batch": vs_predict,
        "ratio_to_hand_written": vs_hand,
    }
    row = [
        name,
        f"{batch} x {shape}",
        f"{median['keras'] * 1e3:,.0f} ms",
        f"{median['keras predict_on_batch'] * 1e3:,.0f} ms",
        f"{median['attnzoo'] * 1e3:,.1f} ms",
        f"{vs_keras:.1f}x / {vs_predict:.1f}x",
        "" if hand is None else f"{median['hand-written'] * 1e3:,.1f} ms",
        "" if vs_hand is None else f"{vs_hand:.2f}x",
    ]
    return record, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="32,64")
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--models", default="bilstm_classifier,seed004,conv_classifier,lstm_seq2seq")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    setup_threads()
    torch.manual_seed(0)
    models = {k: v for k, v in keras_models().items() if k in args.models.split(",")}
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, keras_model in models.items():
            path = Path(tmp) / f"{name}.keras"
            keras_model.save(path)
            custom = {"attnzoo_example>LabelWiseAttention": label_wise} if name == "seed004" else None
            converted = convert_keras_model(path, custom_layers=custom)
            hand = HandWritten.like(converted) if name == "bilstm_classifier" else None
            for batch in (int(b) for b in args.batches.split(",")):
                record, row = time_one(name, keras_model, converted, hand, batch, args)
                results.append(record)
                rows.append(row)
                print(row, flush=True)
    headers = [
        "model",
        "batch x input",
        "Keras 3 (torch), model(x)",
        "Keras predict_on_batch",
        "attnzoo",
        "speed-up (vs call / predict)",
        "hand-written",
        "attnzoo / hand",
    ]
    table = markdown_table(headers, rows)
    print(machine_line())
    print(table)
    masked_lstm = ("bilstm_classifier", "seed004")
    goals = {
        "the masked LSTM models at least 5x faster than Keras": all(
            r["speedup_vs_keras"] >= 5 for r in results if r["model"] in masked_lstm
        ),
        "every model no slower than Keras": all(r["speedup_vs_keras"] >= 1 for r in results),
        "no slower than 1.1x the hand-written module": all(
            r["ratio_to_hand_written"] <= 1.1 for r in results if r["ratio_to_hand_written"] is not None
        ),
    }
    for goal, met in goals.items():
        print(f"{'met' if met else 'NOT met'}: {goal}")
    write_json(HERE / "results" / "keras_models.json", {"machine": machine_line(), "results": results, "goals": goals})
    if args.write_docs:
        update_doc_section(ROOT / "docs" / "keras-deploy.md", "keras-models", f"{machine_line()}\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
