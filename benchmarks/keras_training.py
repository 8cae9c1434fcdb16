"""A training step of a converted Keras model against Keras's own and against a hand-written nn.Module.

    python benchmarks/keras_training.py [--rounds 5] [--batches 32] [--length 200] [--write-docs]

The masked BiLSTM classifier of benchmarks/keras_models.py (Embedding(20000, 128, mask_zero) ->
Bidirectional(LSTM(128, return_sequences)) -> GlobalAveragePooling1D -> Dense(5)), one step each of
forward, cross-entropy on the logits, backward and SGD (no momentum), in one run:

* Keras 3 on the torch backend: ``model.train_on_batch(ids, labels)``;
* the model ``convert_keras_model`` makes of its ``.keras`` file, in ``train()`` mode;
* the hand-written module (packed bidirectional ``nn.LSTM``, masked mean, Linear) with the same weights.

The three start from the same weights, and their losses before any step are checked to agree (1e-4) at
every size before anything is timed. Goals: faster than Keras, within 1.1x of the hand-written module. Writes
benchmarks/results/keras_training.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
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
from keras_models import CLASSES, HandWritten, keras_models, padded_ids  # noqa: E402 - sets KERAS_BACKEND

from attnzoo.keras import convert_keras_model  # noqa: E402

LEARNING_RATE = 0.01


def torch_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, labels: torch.Tensor):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(ids), labels)
    loss.backward()
    optimizer.step()
    return loss


def main() -> int:
    import keras

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="32")
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    setup_threads()
    torch.manual_seed(0)
    classifier = keras_models()["bilstm_classifier"]
    classifier.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        classifier.save(Path(tmp) / "classifier.keras")
        converted = convert_keras_model(Path(tmp) / "classifier.keras").train()
        hand = HandWritten.like(converted).train()
        optimizers = {
            name: torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
            for name, model in (("attnzoo", converted), ("hand-written", hand))
        }
        sizes = [int(b) for b in args.batches.split(",")]
        inputs = {}
        for batch in sizes:  # the same loss before any step, at every size: the same model three times
            ids = padded_ids(batch, args.length)
            labels = np.random.default_rng(1).integers(0, CLASSES, size=batch)
            tensor, target = torch.from_numpy(ids), torch.from_numpy(labels)
            with torch.no_grad():
                keras_loss = float(classifier.compute_loss(y=labels, y_pred=classifier(ids, training=True)))
                ours = float(F.cross_entropy(converted(tensor), target))
                theirs = float(F.cross_entropy(hand(tensor), target))
            assert abs(ours - keras_loss) < 1e-4 and abs(theirs - ours) < 1e-4, (keras_loss, ours, theirs)
            inputs[batch] = ids, labels, tensor, target
        for batch in sizes:  # then timed: each takes its own steps from here, so the weights part ways
            ids, labels, tensor, target = inputs[batch]
            impls = {
                "keras": lambda ids=ids, labels=labels: classifier.train_on_batch(ids, labels),
                "attnzoo": lambda t=tensor, y=target: torch_step(converted, optimizers["attnzoo"], t, y),
                "hand-written": lambda t=tensor, y=target: torch_step(hand, optimizers["hand-written"], t, y),
            }
            times = time_rounds(impls, rounds=args.rounds, min_run_time=1.0, budget={"keras": 0.1})
            median = {k: float(np.median(v)) for k, v in times.items()}
            vs_keras = paired_speedup(times["keras"], times["attnzoo"])
            vs_hand = 1 / paired_speedup(times["hand-written"], times["attnzoo"])
            results.append(
                {
                    "model": "bilstm_classifier",
                    "batch": batch,
                    "length": args.length,
                    "seconds": median,
                    "speedup_vs_keras": vs_keras,
                    "ratio_to_hand_written": vs_hand,
                }
            )
            rows.append(
                [
                    f"{batch} x {args.length}",
                    f"{median['keras'] * 1e3:,.0f} ms",
                    f"{median['attnzoo'] * 1e3:,.0f} ms",
                    f"{median['hand-written'] * 1e3:,.0f} ms",
                    f"{vs_keras:.1f}x",
                    f"{vs_hand:.2f}x",
                ]
            )
            print(rows[-1], flush=True)
    headers = [
        "batch x length",
        "Keras train_on_batch",
        "attnzoo",
        "hand-written",
        "speed-up vs Keras",
        "attnzoo / hand",
    ]
    table = markdown_table(headers, rows)
    print(machine_line())
    print(table)
    goals = {
        "faster than Keras": all(r["speedup_vs_keras"] > 1 for r in results),
        "within 1.1x of the hand-written module": all(r["ratio_to_hand_written"] <= 1.1 for r in results),
    }
    for goal, met in goals.items():
        print(f"{'met' if met else 'NOT met'}: {goal}")
    write_json(
        HERE / "results" / "keras_training.json", {"machine": machine_line(), "results": results, "goals": goals}
    )
    if args.write_docs:
        update_doc_section(ROOT / "docs" / "keras-deploy.md", "keras-training", f"{machine_line()}\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
