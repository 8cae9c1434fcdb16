"""``attnzoo convert-keras --check``: the converted model and Keras side by side, layer by layer.

Keras (any backend installed) loads the same file and runs the same random inputs, padded on the right,
on the left and in the middle, of a length the model takes (``--length N``, by default the shortest of 8,
16, 32, ... that the converted model runs: strided convolutions and pools need longer inputs); every
top-level layer's output is compared with the converted graph's, in the order the graph runs, and the
first layer whose output differs by more than the tolerance is named with the difference. Keras is called
as ``model(inputs, training=False)``; a mixed-precision file is run by Keras in float32, the port's
computation (and the result says so). What is compared where, and how close is close enough (relative to
each output's scale, with a float64 run of the port where float32 rounding exceeds the tolerance), is
:mod:`attnzoo.keras.check_judge`'s. A failure of
Keras itself is a ``WeightsError`` carrying Keras's reason, its ANSI codes removed. A file Keras cannot load
(keras 3 and a Keras 2 LSTM's ``time_major``) is not compared: the result says so and why. A user's own
predictions (``--reference FILE.npz``: the inputs and Keras's outputs) are compared instead of running
Keras. Keras is imported here and nowhere else, and only when asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnzoo.errors import WeightsError, extra_import_message
from attnzoo.io.progress import bar
from attnzoo.keras.check_judge import Difference, difference
from attnzoo.keras.inputs import value_rules

__all__ = ["CheckResult", "check_against_keras", "check_against_reference", "padded_inputs", "input_shape"]
__all__ += ["working_length", "open_length"]

PATTERNS = ("full", "right", "left", "middle")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass
class CheckResult:
    outputs: list[float]  # max |ours - Keras| per model output, where compared (check_judge's rule)
    layers: list[tuple[str, float]] = field(default_factory=list)  # (layer, max diff) in graph order
    first_divergence: tuple[str, float] | None = None
    tolerance: float = 1e-5  # relative to each output's scale: tolerance * max(1, |y|max)
    length: int = 8  # the inputs' length on open axes
    against: str = "keras"  # what the outputs were compared with: "keras", "reference" (a user's .npz), "nothing"
    reason: str | None = None  # why nothing was compared (Keras cannot load the file)
    differences: list[Difference] = field(default_factory=list)  # per output, with the float64 run's
    kept: bool = False  # compared at the kept positions only (the model declares its padding)
    note: str | None = None  # how Keras ran (a mixed-precision file in float32)

    @property
    def ran(self) -> bool:
        return self.against != "nothing"

    @property
    def ok(self) -> bool:
        if self.differences:
            return all(d.within(self.tolerance) for d in self.differences)
        return all(d <= self.tolerance for d in self.outputs)

    @property
    def float64(self) -> bool:
        """Whether the float64 port was run (some float32 output past its tolerance)."""
        return any(d.float64 is not None for d in self.differences)

    def to_dict(self) -> dict[str, Any]:
        """What ``--json`` prints: ``ran`` false with the reason where nothing was compared."""
        if not self.ran:
            return {"ran": False, "reason": self.reason}
        record = {"ran": True, "ok": self.ok, "against": self.against, "outputs": self.outputs, "layers": self.layers}
        per_output = [d.to_dict() for d in self.differences]
        extra = {"kept_positions_only": self.kept, "note": self.note, "per_output": per_output}
        return {**record, "tolerance": self.tolerance, "length": self.length, **extra}


_WORDS = ("the", "cat", "sat", "on", "a", "mat", "Dog!", "ran,", "far.", "zebra", "qux", "É")
MAX_LENGTH = 1024  # the longest open length --check tries before it gives up on finding one that runs


def input_shape(spec: dict[str, Any], batch: int = 4, length: int = 8) -> list[int]:
    """The shape :func:`padded_inputs` gives an input: ``batch`` rows, ``length`` on each axis Keras left open."""
    return [batch] + [length if d is None else d for d in spec["shape"][1:]]


def padded_inputs(model: Any, batch: int = 4, length: int = 8, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for a converted model, each of its input's declared dtype: ids (0 = padding),
    features (zero frames as padding), a bool mask (False on the padding) or a padding mask (0 on the
    padding, 1 elsewhere), rows padded by ``PATTERNS``
    along an open length; texts (an object array of str) of ``length``
    words or fewer for a string input."""
    rng = np.random.default_rng(seed)
    arrays = []
    # a model with a mask input has padding on its fixed time axis too, or the mask would never be False
    masked = any(spec["dtype"] == "bool" for spec in model.inputs_spec)
    for spec, rule in zip(model.inputs_spec, value_rules(model.graph), strict=True):
        shape = input_shape(spec, batch, length)
        keep = np.ones(shape[:2], dtype=bool)
        if len(shape) >= 2 and (spec["shape"][1] is None or masked):
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
        if spec["dtype"] == "string":
            x = _texts(rng, shape, length)
        elif spec["dtype"] == "bool":  # a mask input: False on the padding the other inputs carry
            x = np.broadcast_to(view, shape).copy()
        elif rule is not None and rule.kind == "padding mask":  # keras-hub's: 1 at a token, 0 on the padding
            x = np.broadcast_to(view, shape).astype("int32")
        elif "int" in str(spec["dtype"]):
            x = rng.integers(1, int(spec.get("vocab") or 10), size=shape) * view
        else:
            x = (rng.standard_normal(shape) * view).astype("float32")
        arrays.append(x)
    return arrays


def _texts(rng: np.random.Generator, shape: list[int], length: int) -> np.ndarray:
    """Texts of 0 to ``length`` words (some longer than that, for an output_sequence_length), with
    punctuation and capitals, as an object array of ``shape``."""
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        count = int(rng.integers(0, 2 * length + 1))
        out[index] = " ".join(str(rng.choice(_WORDS)) for _ in range(count))
    return out


def _as_model_input(x: np.ndarray) -> Any:
    return x if x.dtype == object else torch.from_numpy(np.asarray(x))


def open_length(model: Any) -> bool:
    """Whether some input of the model has an open length (an axis Keras left as None)."""
    return any(None in spec["shape"][1:] for spec in model.inputs_spec)


def working_length(model: Any, seed: int = 0) -> int:
    """The default length of ``--check``: the shortest of 8, 16, 32, ... at which the converted model runs
    (strided convolutions and pools shorten a sequence; a position table bounds it)."""
    if not open_length(model):
        return 8
    length, last = 8, None
    while length <= MAX_LENGTH:
        try:
            with torch.no_grad():
                model(*[_as_model_input(x) for x in padded_inputs(model, batch=1, length=length, seed=seed)])
            return length
        except ValueError as e:
            last = e
        length *= 2
    raise WeightsError(
        f"the converted model runs on no input length from 8 to {MAX_LENGTH} ({last}); pass --length N"
    ) from None


def _declared_keep(model: Any, inputs: list[np.ndarray]) -> np.ndarray | None:
    """The kept positions ([batch, length] bool) of a model that declares its padding: its padding mask or
    bool mask input, else its ids where an ``Embedding(mask_zero=True)`` reads them, else its features'
    nonzero steps where ``Masking`` reads them; None for a model that declares none (every position of
    its output is defined by the inputs, padding included)."""
    rules = value_rules(model.graph)
    for spec, rule, x in zip(model.inputs_spec, rules, inputs, strict=True):
        if np.ndim(x) == 2 and (spec["dtype"] == "bool" or (rule is not None and rule.kind == "padding mask")):
            return np.asarray(x).astype(bool)
    classes = _layer_facts(model.graph.get("layers"))
    for spec, x in zip(model.inputs_spec, inputs, strict=True):
        if "mask_zero" in classes and np.ndim(x) == 2 and "int" in str(spec["dtype"]):
            return np.asarray(x) != 0
        if "Masking" in classes and np.ndim(x) == 3 and np.asarray(x).dtype.kind == "f":
            return np.asarray(x).any(axis=-1)
    return None


def _layer_facts(layers: Any) -> set[str]:
    """The Keras classes of a graph's layers (nested models' too), and ``mask_zero`` where an Embedding
    makes a mask."""
    found: set[str] = set()
    stack = [layers]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("mask_zero") is True:
                found.add("mask_zero")
            keras = item.get("keras")
            if isinstance(keras, dict) and isinstance(keras.get("class"), str):
                found.add(keras["class"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _double_port(model: Any, inputs: list[np.ndarray], layers: bool) -> tuple[list[Any], dict[str, Any]] | None:
    """The port run in float64 on the same inputs (its outputs, and its layers' with ``layers``); None where
    it does not run in float64."""
    import copy

    try:
        double = copy.deepcopy(model).double()
        feed = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in inputs]
        with torch.no_grad():
            traced = double.trace(*[_as_model_input(x) for x in feed]) if layers else {}
            return _flat(double(*[_as_model_input(x) for x in feed])), traced
    except (ValueError, RuntimeError, TypeError):
        return None


def _judged(result: CheckResult, ours: list[Any], theirs: list[Any], keep: Any, run: Any) -> Any:
    """Fill ``result``'s differences: float32 first; where one is past its tolerance, the float64 port's
    (``run()``) too. Returns the float64 run (None where none was made)."""
    result.differences = [difference(o, t, keep) for o, t in zip(ours, theirs, strict=True)]
    double = None
    if not all(d.within(result.tolerance) for d in result.differences):
        double = run()
        if double is not None:
            pairs = zip(ours, theirs, double[0], strict=True)
            result.differences = [difference(o, t, keep, d) for o, t, d in pairs]
    result.outputs = [d.value for d in result.differences]
    return double


def check_against_reference(reference: str | Path, model: Any, *, tolerance: float = 1e-5) -> CheckResult:
    """Run ``model`` on the inputs of ``reference``, an ``.npz`` of the model's inputs (``in/0``, ``in/1``,
    ... in its input order) and the predictions to match (``out/0``, ... in its output order), as a user
    saves them from the Keras that reads the file: ``np.savez(f, **{"in/0": x, "out/0": model(x)})``."""
    try:
        with np.load(reference, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
    except (OSError, ValueError) as e:
        raise WeightsError(f"--reference {reference}: not an .npz of arrays ({e})") from None
    inputs = [arrays[f"in/{i}"] for i in range(len(arrays)) if f"in/{i}" in arrays]
    wanted = [arrays[f"out/{k}"] for k in range(len(arrays)) if f"out/{k}" in arrays]
    if len(inputs) != len(model.inputs_spec) or not wanted:
        raise WeightsError(
            f"--reference {reference}: holds {len(inputs)} input(s) and {len(wanted)} output(s) as in/0, in/1, ... "
            f"and out/0, ...; the model takes {len(model.inputs_spec)} input(s)"
        )
    try:
        with torch.no_grad():
            ours = _flat(model(*[_as_model_input(x) for x in inputs]))
    except ValueError as e:
        raise WeightsError(f"--reference {reference}: the converted model cannot run its inputs: {e}") from None
    if len(ours) != len(wanted):
        raise WeightsError(f"--reference {reference}: holds {len(wanted)} output(s); the model returns {len(ours)}")
    result = CheckResult([], tolerance=tolerance, against="reference")
    keep = _declared_keep(model, inputs)
    result.kept = keep is not None
    _judged(result, ours, wanted, keep, lambda: _double_port(model, inputs, layers=False))
    shape = inputs[0].shape
    result.length = int(shape[1]) if len(shape) > 1 else 1
    return result


def check_against_keras(
    path: str | Path,
    model: Any,
    *,
    tolerance: float = 1e-5,
    seed: int = 0,
    length: int | None = None,
    reference: str | Path | None = None,
) -> CheckResult:
    """Run ``model`` (converted from ``path``) and Keras's own load of ``path`` on the same padded inputs,
    of ``length`` steps along every open axis (default: :func:`working_length`), Keras called as
    ``model(inputs, training=False)``; judged as :mod:`attnzoo.keras.check_judge` says. A mixed-precision
    file is run by Keras in float32 (the port's computation), and the result says so. With ``reference``,
    compare with the predictions it holds instead (:func:`check_against_reference`). Where Keras cannot
    load the file, nothing is compared: the result says so (``ran`` is False) and why."""
    if reference is not None:
        return check_against_reference(reference, model, tolerance=tolerance)
    keras = _import_keras()
    with bar(4, f"checking {Path(path).name} against Keras", unit="step") as shown:
        try:
            original = keras.saving.load_model(str(path), compile=False)
        except Exception as e:  # noqa: BLE001 - Keras's own refusal, reported as such
            reason = (
                f"Keras {keras.__version__} cannot load {Path(path).name} itself ({type(e).__name__}: "
                f"{' '.join(_ANSI.sub('', str(e)).split())[:300]}), so there is nothing to run beside the "
                f"converted model; pass --reference FILE.npz with the predictions of the Keras that wrote it to "
                f"compare with"
            )
            return CheckResult([], tolerance=tolerance, against="nothing", reason=reason)
        mixed = _float32_compute(original)
        length = working_length(model, seed) if length is None else length
        inputs = padded_inputs(model, length=length, seed=seed)
        feed = _keras_feed(model, inputs)
        shown.update()
        theirs = _keras_call(original, feed, length)
        shown.update()
        try:
            with torch.no_grad():
                traced = model.trace(*[_as_model_input(x) for x in inputs])
                ours = _flat(model(*[_as_model_input(x) for x in inputs]))
        except ValueError as e:
            raise WeightsError(f"the converted model cannot run inputs of length {length}: {e}") from None
        result = CheckResult([], tolerance=tolerance, length=length, note=_mixed_note(mixed))
        keep = _declared_keep(model, inputs)
        result.kept = keep is not None
        double = _judged(result, ours, theirs, keep, lambda: _double_port(model, inputs, layers=True))
        shown.update()
        _judge_layers(result, keras, original, model, traced, feed, keep, double)
        shown.update()
    return result


def _mixed_note(policy: str | None) -> str | None:
    """What the check says of a mixed-precision file, which Keras ran in float32."""
    if policy is None:
        return None
    return (
        f"the file computes in {policy}; Keras ran it in float32 here, as the port computes it (convert with "
        f"--compute-dtype policy for the file's own dtypes)"
    )


def _import_keras() -> Any:
    """Keras, on the torch backend where no other is set and TensorFlow is absent; a ``WeightsError`` saying
    what to install where it is not here."""
    import importlib.util
    import os

    present = importlib.util.find_spec("keras") is not None
    if present and "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        os.environ["KERAS_BACKEND"] = "torch"  # the backend that is surely here; Keras defaults to TensorFlow
    try:
        import keras
    except Exception as e:  # absent, or installed and failing to import: extra_import_message says which
        what = "--check runs Keras beside the converted model"
        raise WeightsError(extra_import_message(what, "keras-check", e, "keras")) from None
    return keras


def _float32_compute(original: Any) -> str | None:
    """Make every layer of a mixed-precision Keras model compute in float32 (its variables are float32
    already); the policy it had (``mixed_float16``), or None where it had none."""
    mixed = None
    for layer in original._flatten_layers(include_self=True, recursive=True):
        policy = getattr(layer, "dtype_policy", None)
        if policy is not None and policy.compute_dtype != policy.variable_dtype:
            mixed = mixed or str(policy.name)
            layer.dtype_policy = "float32"
    return mixed


def _judge_layers(
    result: CheckResult, keras: Any, original: Any, model: Any, traced: Any, feed: Any, keep: Any, double: Any
) -> None:
    """Every top-level layer's output against Keras's, in the order the graph runs, judged as the outputs
    are (with the float64 port's where it ran); the first that is past its tolerance is named."""
    probes = []
    graph = _graph_nodes(original)
    for layer in original.layers:
        nodes = [n for n in getattr(layer, "_inbound_nodes", []) if graph is None or id(n) in graph]
        if len(nodes) != 1 or layer.name not in traced or type(layer).__name__ == "InputLayer":
            continue
        outputs = nodes[0].outputs if hasattr(nodes[0], "outputs") else nodes[0].output_tensors
        probes.append((layer.name, list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]))
    if not probes:
        return
    flat = [t for _, outs in probes for t in outs]
    every = _keras_call(keras.Model(_keras_inputs(original), flat), feed, result.length)
    exact = double[1] if double is not None else {}
    at, judged = 0, {}
    for name, outs in probes:
        mine, mine64 = traced[name], exact.get(name)
        diffs = []
        for k in range(len(outs)):
            if k < len(mine) and mine[k] is not None:
                other = mine64[k] if mine64 is not None and k < len(mine64) else None
                diffs.append(difference(mine[k], every[at + k], keep, other))
        at += len(outs)
        judged[name] = max(diffs, key=lambda d: (not d.within(result.tolerance), d.value), default=None)
    for call in model.calls:  # in the order the graph ran
        found = judged.get(call["id"])
        if call["id"] in judged:
            result.layers.append((call["id"], found.value if found is not None else 0.0))
            if result.first_divergence is None and found is not None and not found.within(result.tolerance):
                result.first_divergence = (call["id"], found.value)


def _graph_nodes(original: Any) -> set[int] | None:
    """The ids of the Keras nodes of the model's own graph (a loaded Sequential's layers also keep the nodes
    of its earlier builds); None where Keras does not say."""
    functional = getattr(original, "_functional", None) or original
    by_depth = getattr(functional, "_nodes_by_depth", None)
    if not isinstance(by_depth, dict):
        return None
    return {id(node) for nodes in by_depth.values() for node in nodes}


def _keras_inputs(original: Any) -> Any:
    """The Keras model's symbolic inputs, nested as it takes them. A Sequential has ``inputs`` (from its
    ``keras.Input`` or its first call) but no ``input``."""
    try:
        return original.input
    except AttributeError:
        inputs = list(original.inputs)
        return inputs if len(inputs) > 1 else inputs[0]


def _keras_call(model: Any, feed: Any, length: int) -> list[Any]:
    """Keras's outputs as numpy arrays (a list), from ``model(feed, training=False)`` (never ``predict``,
    which batches and runs Keras's own input pipeline), or a ``WeightsError`` carrying Keras's own reason
    when it fails."""
    import keras

    try:
        out = model(feed, training=False)
        return [_numpy(keras, leaf) for leaf in _flat(out)]
    except Exception as e:  # noqa: BLE001 - Keras's failure, reported as such (its text may carry ANSI codes)
        reason = " ".join(_ANSI.sub("", str(e)).split())[:300]
        raise WeightsError(
            f"Keras fails on the check's inputs of length {length} ({type(e).__name__}: {reason}); "
            f"pass --length N with a length the model takes"
        ) from None


def _numpy(keras: Any, tensor: Any) -> np.ndarray:
    """One of Keras's outputs as numpy (a torch backend's tensor read directly)."""
    if isinstance(tensor, torch.Tensor):
        tensor = tensor.detach().cpu()
        return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
    return np.asarray(keras.ops.convert_to_numpy(tensor))


def _flat(value: Any) -> list[Any]:
    """Outputs in Keras's flat order: a dict's by sorted key, lists and tuples in order."""
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _flat(value[key])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


def _keras_feed(model: Any, inputs: list[np.ndarray]) -> Any:
    """The check's inputs as Keras takes them: nested as the model's inputs are (a dict by its keys)."""
    structure = getattr(model, "input_structure", None)

    def nest(shape: Any) -> Any:
        if isinstance(shape, int):
            return inputs[shape]
        if isinstance(shape, dict):
            return {key: nest(value) for key, value in shape.items()}
        return [nest(value) for value in shape]

    if structure is not None:
        return nest(structure)
    return inputs if len(inputs) > 1 else inputs[0]
