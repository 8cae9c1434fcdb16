"""``attnzoo convert-keras --check``: the converted model and Keras side by side, layer by layer.

Keras (any backend installed) loads the same file and runs the same random inputs, padded on the right,
on the left and in the middle; every top-level layer's output is compared with the converted graph's,
in the order the graph runs, and the first layer whose output differs by more than the tolerance is
named with the difference. Keras is imported here and nowhere else, and only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnzoo.errors import WeightsError

__all__ = ["CheckResult", "check_against_keras", "padded_inputs"]

PATTERNS = ("full", "right", "left", "middle")


@dataclass
class CheckResult:
    outputs: list[float]  # max |ours - Keras| per model output, over Keras's finite values
    layers: list[tuple[str, float]] = field(default_factory=list)  # (layer, max diff) in graph order
    first_divergence: tuple[str, float] | None = None
    tolerance: float = 1e-5

    @property
    def ok(self) -> bool:
        return all(d <= self.tolerance for d in self.outputs)


def padded_inputs(model: Any, batch: int = 4, length: int = 8, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for a converted model: ids (0 = padding) or features (zero frames as padding),
    rows padded by ``PATTERNS`` along an open length."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in model.inputs_spec:
        shape = [batch] + [length if d is None else d for d in spec["shape"][1:]]
        keep = np.ones(shape[:2], dtype=bool)
        if spec["shape"][1:2] == [None] and len(shape) >= 2:
            cut = max(1, shape[1] // 2)
            for b in range(batch):
                pattern = PATTERNS[b % len(PATTERNS)]
                if pattern == "right":
                    keep[b, cut:] = False
                elif pattern == "left":
                    keep[b, : shape[1] - cut] = False
                elif pattern == "middle" and shape[1] > 2:
                    keep[b, 1:-1] = False
        view = keep.reshape(keep.shape + (1,) * (len(shape) - 2))
        if "int" in str(spec["dtype"]):
            x = rng.integers(1, int(spec.get("vocab") or 10), size=shape) * view
        else:
            x = (rng.standard_normal(shape) * view).astype("float32")
        arrays.append(x)
    return arrays


def _max_diff(ours: np.ndarray, theirs: np.ndarray) -> float:
    if ours.shape != theirs.shape:
        return float("inf")
    finite = np.isfinite(theirs)
    return float(np.abs(ours[finite] - theirs[finite]).max()) if finite.any() else 0.0


def check_against_keras(path: str | Path, model: Any, *, tolerance: float = 1e-5, seed: int = 0) -> CheckResult:
    """Run ``model`` (converted from ``path``) and Keras's own load of ``path`` on the same padded inputs."""
    import importlib.util
    import os

    if importlib.util.find_spec("keras") is None:
        raise WeightsError(
            "--check runs Keras beside the converted model: pip install 'attnzoo[keras-check]'"
        ) from None
    if "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        os.environ["KERAS_BACKEND"] = "torch"  # the backend that is surely here; Keras defaults to TensorFlow
    try:
        import keras
    except ImportError as e:
        raise WeightsError(f"--check needs Keras, which failed to import here: {e}") from None
    try:
        original = keras.saving.load_model(str(path), compile=False)
    except Exception as e:  # noqa: BLE001 - Keras's own refusal, reported as such
        raise WeightsError(
            f"Keras {keras.__version__} cannot load {path} itself ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}), so there is nothing to compare with"
        ) from None
    inputs = padded_inputs(model, seed=seed)
    feed = inputs if len(inputs) > 1 else inputs[0]
    theirs = original.predict(feed, verbose=0)
    theirs = list(theirs) if isinstance(theirs, (list, tuple)) else [theirs]
    with torch.no_grad():
        traced = model.trace(*[torch.from_numpy(np.asarray(x)) for x in inputs])
        ours = model(*[torch.from_numpy(np.asarray(x)) for x in inputs])
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    result = CheckResult([_max_diff(o.numpy(), np.asarray(t)) for o, t in zip(ours, theirs, strict=True)])
    result.tolerance = tolerance
    probes = []
    for layer in original.layers:
        nodes = getattr(layer, "_inbound_nodes", [])
        if len(nodes) != 1 or layer.name not in traced or type(layer).__name__ == "InputLayer":
            continue
        outputs = nodes[0].outputs if hasattr(nodes[0], "outputs") else nodes[0].output_tensors
        probes.append((layer.name, list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]))
    if probes:
        flat = [t for _, outs in probes for t in outs]
        every = keras.Model(original.inputs, flat).predict(feed, verbose=0)
        every = list(every) if isinstance(every, (list, tuple)) else [every]
        at = 0
        diffs = {}
        for name, outs in probes:
            mine = traced[name]
            worst = 0.0
            for k in range(len(outs)):
                mine_k = mine[k] if k < len(mine) else None
                worst = max(worst, _max_diff(mine_k.numpy(), np.asarray(every[at + k])) if mine_k is not None else 0.0)
            at += len(outs)
            diffs[name] = worst
        for call in model.calls:  # in the order the graph ran
            if call["id"] in diffs:
                result.layers.append((call["id"], diffs[call["id"]]))
        result.first_divergence = next(((n, d) for n, d in result.layers if d > tolerance), None)
    return result
