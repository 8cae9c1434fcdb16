"""``convert_keras_model``: a whole Keras model file becomes a native ``nn.Module``, with no Keras at run time.

Each Keras layer is converted by the first converter that takes it:

1. ``custom_layers=`` of the call (a Keras name -> a convert function, like Keras's ``custom_objects``);
2. the ``attnzoo_register_keras_layers`` hook: plugins, and attnzoo's own Keras layers, register
   ``register(keras_name, convert)``, where ``keras_name`` is the ``registered_name`` Keras stores
   (``"package>ClassName"``), a bare class name, or ``"keras>ClassName"`` for Keras's own layers;
   ``convert(config, weights)`` gets the layer's Keras config and its variables (numpy arrays in the
   order of the layer's ``weights``) and returns a module made by ``attnzoo.create`` with them loaded;
3. the built-in node converters of this module, one per Keras layer class (``CONVERTERS``).

Everything is checked before anything is built: every layer without a converter (or whose converter
refuses it) is listed in one ``UnsupportedKerasLayerError`` with its name, class and variable shapes.
The result is a :class:`~attnzoo.keras.model.KerasModel` made by ``attnzoo.create("keras_model",
graph=...)``: its config is the graph as data, so ``attnzoo.save`` / ``attnzoo.load`` rebuild it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras.converters import (
    BUILTIN_FUNCTIONS,
    CALL_ARGUMENTS,
    CHILD_ORDER,
    COMMON_CALL_ARGUMENTS,
    CONVERTERS,
    KERAS_LAYERS,
    Context,
    Converted,
    Refused,
    convert_operation,
    is_operation,
)
from attnzoo.keras.files import KerasFile, read_keras_model
from attnzoo.keras.graph import MODEL_CLASSES, Call, KerasGraph, LayerRecord, Ref, parse_model
from attnzoo.keras.nodes import INTEGER_DTYPES

__all__ = [
    "convert_keras_model",
    "UnsupportedKerasLayerError",
    "ConversionReport",
    "KerasLayerConverter",
]


class UnsupportedKerasLayerError(WeightsError):
    """Layers of a Keras model that no converter takes; ``layers`` lists them (name, class, shapes, why)."""

    def __init__(self, message: str, layers: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.layers = layers


@dataclass
class KerasLayerConverter:
    """A registered converter of a custom Keras layer (see the module docstring)."""

    keras_name: str
    convert: Callable[[dict[str, Any], list[np.ndarray]], Any]
    provider: str = ""
    mask: bool = True  # pass the incoming Keras mask when the module's forward takes ``mask``
    output_mask: str = "none"  # "none" | "input": the output keeps the first input's mask
    call: str = "layer"  # how the Keras call maps onto the module: "layer", "attention" or "mha"


@dataclass
class ConversionReport:
    """What became of each Keras layer: its torch node, its variables and any notes."""

    source: str
    keras_version: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "keras_version": self.keras_version, "layers": self.rows}

    def to_text(self) -> str:
        lines = [f"{self.source} (Keras {self.keras_version}): {len(self.rows)} layers"]
        for row in self.rows:
            variables = ", ".join(row["variables"]) or "no variables"
            lines.append(f"  {row['layer']} ({row['class']}) -> {row['node']}: {variables}")
            lines += [f"      {note}" for note in row["notes"]]
        return "\n".join(lines)


# -- the converter table for one conversion ---------------------------------------------------------------
def _hook_converters(custom: Mapping[str, Any] | None) -> dict[str, list[KerasLayerConverter]]:
    """Every registered converter by Keras name: ``custom_layers`` first, then the hook's, in plugin order."""
    from attnzoo.core.registry import call_each

    table: dict[str, list[KerasLayerConverter]] = {}

    def make_register(provider: str) -> Callable[..., None]:
        def register(
            keras_name: str,
            convert: Callable[..., Any],
            *,
            mask: bool = True,
            output_mask: str = "none",
            call: str = "layer",
        ) -> None:
            if not isinstance(keras_name, str) or not keras_name:
                raise ConfigError(
                    f"register(keras_name, convert): keras_name must be a non-empty str, got {keras_name!r}"
                )
            if not callable(convert):
                raise ConfigError(f"register({keras_name!r}, convert): convert must be callable")
            if output_mask not in ("none", "input"):
                raise ConfigError(f"register({keras_name!r}, ...): output_mask must be 'none' or 'input'")
            if call not in ("layer", "attention", "mha"):
                raise ConfigError(f"register({keras_name!r}, ...): call must be 'layer', 'attention' or 'mha'")
            table.setdefault(keras_name, []).append(
                KerasLayerConverter(keras_name, convert, provider, bool(mask), output_mask, call)
            )

        return register

    for name, convert in (custom or {}).items():
        make_register("custom_layers")(name, convert)
    call_each("attnzoo_register_keras_layers", lambda provider: {"register": make_register(provider)})
    return table


def _keys(record: LayerRecord) -> list[str]:
    """The names a converter may be registered under, most specific first: ``keras>Class`` for Keras's
    own layers; a custom layer's ``package>Class`` when Keras recorded one, else its bare class name.
    A bare name never matches a packaged class: two packages' ``LabelWiseAttention`` need not agree."""
    # a legacy .h5 records no module: a Keras class name is taken for Keras's own layer first
    own = bool(record.module and record.module.startswith("keras")) or (
        record.module is None and record.class_name in KERAS_LAYERS
    )
    keys = [f"keras>{record.class_name}"] if own else []
    if record.registered_name and ">" in record.registered_name and not own:
        keys.append(record.registered_name)
    elif not own or record.module is None:
        keys.append(record.class_name)
    return keys


# -- the conversion ---------------------------------------------------------------------------------------
def _shapes(arrays: list[np.ndarray]) -> list[list[int]]:
    return [list(a.shape) for a in arrays]


def _module_key(key: str, used: set[str]) -> str:
    safe = key.replace(".", "_") or "layer"
    candidate, n = safe, 1
    while candidate in used:
        n += 1
        candidate = f"{safe}_{n}"
    used.add(candidate)
    return candidate


def _convert_zoo(entry: KerasLayerConverter, record: LayerRecord, arrays: list[np.ndarray], ctx: Context):
    config = dict(record.config)
    if entry.convert in BUILTIN_FUNCTIONS:  # attnzoo's own layers follow the file's Keras version
        config["__keras_major__"] = ctx.major
    module = entry.convert(config, [a.copy() for a in arrays])
    info = getattr(module, "attnzoo_config", None)
    if not isinstance(info, Mapping) or "name" not in info:
        raise Refused(
            f"the converter registered for {entry.keras_name!r} ({entry.provider}) returned a "
            f"{type(module).__name__} not made by attnzoo.create, so a saved folder could not rebuild it"
        )
    call = entry.call
    takes_mask = "mask" in inspect.signature(module.forward).parameters
    spec = {
        "op": "zoo",
        "model": info["name"],
        "config": dict(info["config"]),
        "call": call,
        "output_mask": entry.output_mask,
    }
    if call == "layer" and not (entry.mask and takes_mask):
        spec["call"] = "layer_unmasked"
    state = {f"layer.{k}": v.detach().to(torch.float32) for k, v in module.state_dict().items()}
    notes = [f"attnzoo {info['name']} (registered by {entry.provider or 'a plugin'} for {entry.keras_name})"]
    return Converted(spec, state, notes)


def _check_call_arguments(record: LayerRecord, calls: list[Call]) -> str | None:
    allowed = set(COMMON_CALL_ARGUMENTS) | CALL_ARGUMENTS.get(record.class_name, set())
    if record.class_name in ("Attention", "AdditiveAttention"):
        allowed |= {"return_attention_scores", "use_causal_mask"}
    if record.class_name == "MultiHeadAttention":
        allowed |= {"value", "key", "query_mask", "value_mask", "key_mask", "attention_mask"}
        allowed |= {"return_attention_scores", "use_causal_mask"}
    for call in calls:
        extra = sorted(set(call.kwargs) - allowed)
        if extra and record.class_name in KERAS_LAYERS:
            return f"call argument(s) {', '.join(extra)} are not supported"
    return None


def _arrays(file: KerasFile, record: LayerRecord) -> list[np.ndarray]:
    arrays = file.weights.arrays(record.path, CHILD_ORDER.get(record.class_name, ()))
    return arrays or []


def _encode(value: Any) -> Any:
    """Call arguments as graph data: tensors become ``{"ref": [call, index]}``."""
    if isinstance(value, Ref):
        return {"ref": [value.call, value.index]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Refused(f"a call argument of type {type(value).__name__} ({str(value)[:40]})")


def build_graph(
    file: KerasFile, graph: KerasGraph, custom_layers: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], ConversionReport]:
    """The ``keras_model`` graph config, its state dict and the report; raises
    ``UnsupportedKerasLayerError`` listing every layer nothing converts."""
    ctx = Context(file.major, str(file.path))
    hooks = _hook_converters(custom_layers)
    calls_of: dict[str, list[Call]] = {}
    for call in graph.calls:
        calls_of.setdefault(call.layer, []).append(call)
    used: set[str] = set()
    keys: dict[str, str] = {}
    layers: dict[str, Any] = {}
    state: dict[str, torch.Tensor] = {}
    report = ConversionReport(Path(file.path).name, file.keras_version)
    problems: list[dict[str, Any]] = []
    for record_key, record in graph.layers.items():
        if record_key == "":  # the passes of nested models' inputs and outputs
            continue
        if record.class_name in MODEL_CLASSES and not is_operation(record):
            continue
        arrays = [] if is_operation(record) else _arrays(file, record)
        converted, reasons = _convert_layer(record, arrays, calls_of.get(record_key, []), hooks, ctx)
        if converted is None:
            problems.append(
                {
                    "layer": record.key,
                    "class": record.registered_name or record.class_name,
                    "variables": _shapes(arrays),
                    "reasons": reasons,
                }
            )
            continue
        module_key = _module_key(record_key, used)
        keys[record_key] = module_key
        layers[module_key] = {**converted.spec, "keras": {"name": record.key, "class": record.class_name}}
        for name, tensor in converted.state.items():
            state[f"layers.{module_key}.{name}"] = tensor
        report.rows.append(
            {
                "layer": record.key,
                "class": record.registered_name or record.class_name,
                "node": converted.spec["op"] if converted.spec["op"] != "zoo" else converted.spec["model"],
                "variables": [f"{list(a.shape)}" for a in arrays],
                "notes": converted.notes,
            }
        )
    if problems:
        raise _unsupported(file, problems)
    calls = []
    for call in graph.calls:
        calls.append(
            {
                "id": call.id,
                "layer": keys.get(call.layer),
                "args": _encode(call.args),
                "kwargs": _encode(call.kwargs),
            }
        )
    config = {
        "format": 1,
        "keras_version": file.keras_version,
        "inputs": _inputs(graph, calls, layers),
        "layers": layers,
        "calls": calls,
        "outputs": [[ref.call, ref.index] for ref in graph.outputs],
    }
    return config, state, report


def _convert_layer(record, arrays: list, calls: list[Call], hooks: dict, ctx: Context) -> tuple[Any, list[str]]:
    """One layer's node and state (or None) and the reasons each converter that was tried refused it:
    a Keras operation; else the plugins' converters for its names, then the built-in one."""
    reasons: list[str] = []
    if is_operation(record):
        try:
            return convert_operation(record, arrays, ctx), reasons
        except Refused as e:
            return None, [str(e)]
    bad_call = _check_call_arguments(record, calls)
    if bad_call:
        return None, [bad_call]
    for key in _keys(record):
        for entry in hooks.get(key, []):
            try:
                return _convert_zoo(entry, record, arrays, ctx), reasons
            except (Refused, Exception) as e:  # noqa: BLE001 - a converter's refusal is a reason
                reasons.append(f"{entry.provider or 'converter'} for {key}: {type(e).__name__}: {e}")
    if record.class_name in CONVERTERS and (record.module is None or record.module.startswith("keras")):
        try:
            return CONVERTERS[record.class_name](record, arrays, ctx), reasons
        except Refused as e:
            reasons.append(str(e))
    return None, reasons


def _inputs(graph: KerasGraph, calls: list[dict[str, Any]], layers: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for spec, ref in graph.inputs:
        entry: dict[str, Any] = {"id": ref.call, "name": spec.name, "shape": spec.shape, "dtype": spec.dtype}
        for call in calls:  # an integer input read by an Embedding: its vocabulary bounds the ids
            first = call["args"][0] if call["args"] else None
            layer = layers.get(call["layer"] or "")
            if isinstance(first, dict) and first.get("ref") == [ref.call, 0] and layer and layer["op"] == "embedding":
                entry["vocab"] = layer["input_dim"]
                if entry["dtype"] not in INTEGER_DTYPES:  # Keras casts an Embedding's float input to ids
                    entry["dtype"] = "int32"
                break
        out.append(entry)
    return out


def _unsupported(file: KerasFile, problems: list[dict[str, Any]]) -> UnsupportedKerasLayerError:
    lines = []
    for p in problems:
        shapes = ", ".join(str(s) for s in p["variables"]) or "no variables"
        why = f" ({'; '.join(p['reasons'])})" if p["reasons"] else ""
        lines.append(f"  {p['layer']} ({p['class']}, variables {shapes}){why}")
    message = (
        f"{file.path}: {len(problems)} layer(s) cannot be converted, so nothing was converted:\n"
        + "\n".join(lines)
        + "\nA custom layer converts through a plugin: implement the hook attnzoo_register_keras_layers(register) "
        "and call register('package>ClassName', convert) (docs/keras-migration.md), or pass "
        "convert_keras_model(..., custom_layers={'ClassName': convert})"
    )
    return UnsupportedKerasLayerError(message, problems)


def convert_keras_model(
    path: str | Path,
    *,
    weights: str | Path | None = None,
    custom_layers: Mapping[str, Callable[[dict[str, Any], list[np.ndarray]], Any]] | None = None,
) -> Any:
    """Convert a whole Keras model (``.keras``, legacy ``.h5``, or ``config.json`` + weights) to a native
    module that predicts what Keras predicts.

    Called like the Keras model: inputs positionally in its input order (token ids as integer tensors,
    features as float tensors), any batch size and (where the model allows) length; returns a tensor,
    or a tuple in the Keras model's output order. ``model.keras_report`` says what became of each layer.
    Keras is never imported.
    """
    from attnzoo.core.create import create

    with read_keras_model(path, weights=weights) as file:
        graph = parse_model(file.config, str(path), keras3=file.major >= 3)
        config, state, report = build_graph(file, graph, custom_layers)
    model = create("keras_model", graph=config)
    missing = set(model.state_dict()) - set(state)
    unexpected = set(state) - set(model.state_dict())
    if missing or unexpected:  # a converter and its node disagree: a bug of ours, said plainly
        raise WeightsError(
            f"{path}: internal mismatch converting the weights (missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]})"
        )
    model.load_state_dict(state, strict=True)
    model.attnzoo_metadata = {**getattr(model, "attnzoo_metadata", {}), "keras": report.to_dict()}
    model.keras_report = report
    return model
