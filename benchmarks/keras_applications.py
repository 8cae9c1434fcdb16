"""keras.applications CNNs converted by attnzoo against torchvision's implementations of the same
architectures.

    python benchmarks/keras_applications.py [--rounds 5] [--batch 1] [--models resnet50,mobilenet_v2,...]

Each Keras model is built by ``keras.applications`` (Keras 3, torch backend, in this process) with
``weights=None`` at 224x224x3 (random weights, nothing downloaded), saved as ``.keras`` and converted by
``attnzoo.keras.convert_keras_model``; the port is checked against Keras's own output (1e-4) before
anything is timed. torchvision's model of the same architecture (``resnet50``, ``mobilenet_v2``,
``efficientnet_b0``, random weights, eval mode) is the reference: the port takes Keras's layout (images
channels last), torchvision its own (channels first), each given a batch in its layout. Both are timed
forward only, without gradients, in rounds that alternate the two, on the script's threads; the ratio
is the median over rounds of the port's time over torchvision's within the round (issue 46's goal: at
most 1.1). Writes benchmarks/results/keras_applications.json.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, machine_line, markdown_table, paired_speedup, setup_threads, time_rounds, write_json  # noqa: E402

from attnzoo.keras import convert_keras_model  # noqa: E402

# our name -> (keras.applications class, torchvision.models function)
MODELS = {
    "resnet50": ("ResNet50", "resnet50"),
    "mobilenet_v2": ("MobileNetV2", "mobilenet_v2"),
    "efficientnet_b0": ("EfficientNetB0", "efficientnet_b0"),
}
GOAL = 1.1  # the port's time over torchvision's


def build(name: str, folder: Path):
    """(Keras model, its port, torchvision's model), the port checked against Keras on one batch."""
    import keras
    import torchvision

    keras_class, torchvision_name = MODELS[name]
    keras_model = getattr(keras.applications, keras_class)(weights=None, input_shape=(224, 224, 3))
    path = folder / f"{name}.keras"
    keras_model.save(path)
    port = convert_keras_model(path).eval()
    reference = getattr(torchvision.models, torchvision_name)(weights=None).eval()
    x = np.random.default_rng(0).uniform(0, 255, (2, 224, 224, 3)).astype("float32")
    with torch.no_grad():
        want = np.asarray(keras_model(x, training=False).detach().cpu())
        got = port(torch.from_numpy(x)).numpy()
    difference = float(np.abs(got - want).max())
    assert difference < 1e-4, f"{name}: the port differs from Keras by {difference:.2e}"
    return keras_model, port, reference, difference


def time_one(name: str, port, reference, batch: int, rounds: int) -> tuple[dict, list[str]]:
    channels_last = torch.rand(batch, 224, 224, 3) * 255
    channels_first = channels_last.permute(0, 3, 1, 2).contiguous()

    def no_grad(call):
        def run():
            with torch.no_grad():
                return call()

        return run

    times = time_rounds(
        {
            "attnzoo port": no_grad(lambda: port(channels_last)),
            "torchvision": no_grad(lambda: reference(channels_first)),
        },
        rounds=rounds,
        min_run_time=1.0,
    )
    ratio = 1 / paired_speedup(times["torchvision"], times["attnzoo port"])
    median = {k: float(np.median(v)) for k, v in times.items()}
    record = {"model": name, "batch": batch, "seconds": median, "times": times, "port_over_torchvision": ratio}
    row = [
        name,
        f"{batch} x 224x224x3",
        f"{median['attnzoo port'] * 1e3:,.1f} ms",
        f"{median['torchvision'] * 1e3:,.1f} ms",
        f"{ratio:.2f}",
    ]
    return record, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    setup_threads()
    torch.manual_seed(0)
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            _, port, reference, difference = build(name, Path(tmp))
            record, row = time_one(name, port, reference, args.batch, args.rounds)
            record["largest_difference_from_keras"] = difference
            results.append(record)
            rows.append(row)
            print(row, flush=True)
    table = markdown_table(["model", "batch x input", "attnzoo port", "torchvision", "port / torchvision"], rows)
    print(machine_line())
    print(table)
    met = all(r["port_over_torchvision"] <= GOAL for r in results)
    print(f"{'met' if met else 'NOT met'}: every port at most {GOAL}x torchvision's time")
    write_json(
        HERE / "results" / "keras_applications.json",
        {"machine": machine_line(), "goal": GOAL, "met": met, "results": results},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
