"""What a converted model's input handling costs against its forward: binding the inputs by name, their
dtype and shape checks, and the value checks (ids below their table, a padding mask of 0 and 1: one
``aminmax`` per checked input and one read of the results, a device sync on CUDA).

    python benchmarks/keras_inputs.py [--rounds 7] [--device cpu|cuda] [--quick]

Two models: keras_hub_bert.py's BertBackbone (4 layers, hidden 256, a batch of 8 x 128 tokens) and the
tiny BERT of tests/data/keras_hub_models (2 layers, hidden 32, 4 x 12), where a forward is short and any
fixed cost shows most. Timed, alternating in rounds (medians): ``model(**batch)`` (all of it), the emitted
``forward`` called with the checked tensors (no input handling), and ``check_values`` alone; the ratio
reported is the last to the second (the first two differ by less than a shared machine's noise). Writes
benchmarks/results/keras_inputs.json (``-quick`` with --quick).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, setup_threads, write_json  # noqa: E402
from keras_hub_bert import batch, keras_hub_file, random_weights  # noqa: E402

from attnzoo.keras import convert_keras_model  # noqa: E402
from attnzoo.keras.inputs import check_values, input_names, value_rules  # noqa: E402
from attnzoo.tools import bench  # noqa: E402


def _models(folder: Path) -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor]]]:
    import numpy as np

    expected = np.load(ROOT / "tests" / "data" / "keras_hub_models" / "expected.npz")
    tiny = {k.split("/")[-1]: torch.from_numpy(expected[k]) for k in expected if k.startswith("bert/in/")}
    return {
        "bert_4x256_8x128": (convert_keras_model(keras_hub_file(folder / "bert.keras", random_weights())), batch()),
        "bert_tiny_4x12": (convert_keras_model(ROOT / "tests" / "data" / "keras_hub_models" / "bert.keras"), tiny),
    }


def measure(name: str, model: torch.nn.Module, given: dict[str, torch.Tensor], device: str, rounds: int) -> dict:
    model = model.eval().to(device)
    given = {k: v.to(device) for k, v in given.items()}
    names, rules = input_names(model.graph), value_rules(model.graph)
    flat = [given[n] for n in names]

    def whole() -> None:
        with torch.no_grad():
            model(**given)

    def emitted() -> None:
        with torch.no_grad():
            model.compiled_forward(model, *flat)

    def values() -> None:
        check_values(flat, rules, names, 0)

    def synced(step):
        if device == "cuda":
            return lambda: (step(), torch.cuda.synchronize())
        return step

    steps = {"model(**batch)": synced(whole), "emitted forward": synced(emitted), "check_values": synced(values)}
    times = bench.time_alternating(steps, rounds=rounds, min_run_time=0.2)
    median = {step: sorted(t)[len(t) // 2] for step, t in times.items()}
    forward = median["emitted forward"]
    return {
        "model": name,
        "device": device,
        "ms": {step: round(t * 1e3, 4) for step, t in median.items()},
        "value_checks_of_forward": round(median["check_values"] / forward, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args()
    setup_threads()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (model, given) in _models(Path(folder)).items():
            rows.append(measure(name, model, given, args.device, 3 if args.quick else args.rounds))
            print(rows[-1])
    write_json(HERE / "results" / f"keras_inputs{'-quick' if args.quick else ''}.json", {"rows": rows})


if __name__ == "__main__":
    main()
