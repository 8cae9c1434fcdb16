"""``convert_keras_model``: a whole Keras model file becomes a native ``nn.Module``, with no Keras at run time.

Each Keras layer is converted by the first converter that takes it (:mod:`attnzoo.keras.registry`):
``custom_layers=`` of the call (a Keras name -> a convert function, like Keras's ``custom_objects``),
then the plugins' ``attnzoo_register_keras_layers`` hook, then attnzoo's own converters
(``attnzoo/keras/converters/``). A converter is registered under the ``registered_name`` Keras stores
(``"package>ClassName"``), a bare class name, or ``"keras>ClassName"`` for Keras's own layers.

Everything is checked before anything is built: every layer without a converter (or whose converter
refuses it) is listed in one ``UnsupportedKerasLayerError`` with its name, class and variable shapes.
The result is a :class:`~attnzoo.keras.model.KerasModel` built once from the graph (``attnzoo.create``
would build it twice, on ``meta`` first to size it; here the tensors are in memory already), with the
``attnzoo_config`` ``attnzoo.create("keras_model", graph=...)`` gives: its config is the graph as data, so
``attnzoo.save`` / ``attnzoo.load`` rebuild it. It comes
back in eval mode (Keras's inference), as ``from_pretrained`` models do; ``model.train()`` is Keras's
``training=True``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnzoo.core.registry import REGISTRY
from attnzoo.errors import ConfigError, KerasWeightsWarning, UnsupportedKerasLayerError, WeightsError, close_matches
from attnzoo.io.text import printable
from attnzoo.keras.converters.ops import OPERATION_NAMES
from attnzoo.keras.files import KerasFile, read_keras_model
from attnzoo.keras.graph import MODEL_CLASSES, Call, KerasGraph, LayerRecord, Ref, parse_model
from attnzoo.keras.hub_families import is_keras_hub_model
from attnzoo.keras.hub_tokenizers.preset import carried_tokenizer
from attnzoo.keras.layer_keys import module_key as model_key
from attnzoo.keras.model import KerasModel
from attnzoo.keras.nodes import INTEGER_DTYPES
from attnzoo.keras.policy import check_compute_dtype, compute_dtype_of, layer_policy, policy_notes
from attnzoo.keras.registry import (
    Context,
    Converted,
    ConverterTable,
    KerasConverter,
    Refused,
    adapt,
    builtin_keys,
    is_keras_own,
    is_operation,
    record_keys,
)

__all__ = ["convert_keras_model", "UnsupportedKerasLayerError", "ConversionReport"]

_SQUASHING = ("sigmoid", "softmax")


@dataclass
class ConversionReport:
    """What became of each Keras layer: its torch node, its variables and any notes; with ``logits=True``,
    what was dropped from each output."""

    source: str
    keras_version: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about the whole model: a dtype policy, training=True calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "keras_version": self.keras_version,
            "notes": self.notes,
            "layers": self.rows,
            "outputs": self.outputs,
        }

    def to_text(self) -> str:
        lines = [f"{self.source} (Keras {self.keras_version}): {len(self.rows)} layers"]
        lines += [f"  note: {note}" for note in self.notes]
        for row in self.rows:
            variables = ", ".join(row["variables"]) or "no variables"
            lines.append(f"  {row['layer']} ({row['class']}) -> {row['node']}: {variables}")
            lines += [f"      {note}" for note in row["notes"]]
        lines += [f"  {line}" for line in self.outputs]
        return "\n".join(printable(line) for line in lines)  # names from the file: shown, never sent


# -- the converter table of one conversion -----------------------------------------------------------------
def _converter_table(custom: Mapping[str, Any] | None) -> ConverterTable:
    """``custom_layers`` and every plugin's ``attnzoo_register_keras_layers``, in plugin order; the table
    tries ``custom_layers`` first, then attnzoo's own converters (Keras's layers and operations,
    keras-hub's layers), then the plugins'."""
    from attnzoo.core.registry import REGISTRY

    table = ConverterTable()
    for name, convert in (custom or {}).items():
        table.add(adapt(name, convert, provider="custom_layers"))
    REGISTRY.each_plugin("attnzoo_register_keras_layers", lambda plugin: {"register": table.register_for(plugin)})
    return table


def _check_custom_keys(custom: Mapping[str, Any] | None, graph: KerasGraph) -> None:
    """A ``custom_layers`` key that no layer of the model goes by is a mistake the user must hear about."""
    known = sorted({key for record in graph.layers.values() if record.key for key in record_keys(record)})
    for name in custom or {}:
        if name not in known:
            hint = close_matches(str(name), known)
            also = f" (did you mean {', '.join(map(repr, hint))}?)" if hint else ""
            raise ConfigError(
                f"custom_layers key {name!r} matches no layer of the model{also}; its layers go by "
                f"{', '.join(repr(k) for k in known[:12])}{' ...' if len(known) > 12 else ''}"
            )


# -- the conversion ---------------------------------------------------------------------------------------
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


def _trainable(graph: KerasGraph, record: LayerRecord) -> bool:
    """Keras trains a layer's variables unless it, or a model around it, has ``trainable: false``."""
    parts = record.key.split("/")
    for depth in range(1, len(parts) + 1):
        around = graph.layers.get("/".join(parts[:depth]))
        if around is not None and around.config.get("trainable") is False:
            return False
    return True


def _convert_layer(
    record: LayerRecord, file: KerasFile, calls: list[Call], table: ConverterTable, ctx: Context
) -> tuple[Converted | None, list[np.ndarray], list[str]]:
    """One layer's node and state (or None), its variables, and why each converter tried refused it."""
    if record.refused is not None:  # reading the graph refused it already (a TF operation it cannot state)
        return None, [], [record.refused]
    candidates = table.candidates(record_keys(record))
    order = next((entry.child_order for entry in candidates if entry.child_order), ())
    arrays = file.weights.arrays(record.path, order) or []
    reasons: list[str] = []
    for entry in candidates:
        for call in calls if entry.positional else []:  # keyword forms of positional arguments, in their places
            call.args, call.kwargs = entry.positional_call(call.args, call.kwargs)
        extra = sorted({arg for call in calls for arg in entry.allows(call.kwargs)})
        if extra:
            reasons.append(f"{_who(entry)}: call argument(s) {', '.join(extra)} are not supported")
            continue
        try:
            return entry.convert(record, arrays, ctx), arrays, reasons
        except Refused as e:
            reasons.append(f"{_who(entry)}: {e}" if entry.provider != "attnzoo" else str(e))
        except Exception as e:  # noqa: BLE001 - a plugin's converter failing is a reason, not a crash
            if entry.provider == "attnzoo":
                raise
            reasons.append(f"{_who(entry)}: {type(e).__name__}: {e}")
    return None, arrays, reasons


def _who(entry: KerasConverter) -> str:
    return f"{entry.provider} for {entry.key}"


def build_graph(
    file: KerasFile, graph: KerasGraph, custom_layers: Mapping[str, Any] | None = None, *, own_policy: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor], ConversionReport]:
    """The ``keras_model`` graph config, its state dict and the report; raises
    ``UnsupportedKerasLayerError`` listing every layer nothing converts. ``own_policy``: each layer computes in
    its dtype policy's compute dtype (:mod:`attnzoo.keras.policy`), where the file has a mixed policy."""
    ctx = Context(file.major, str(file.path), file.assets)
    _check_custom_keys(custom_layers, graph)
    table = _converter_table(custom_layers)
    calls_of: dict[str, list[Call]] = {}
    for call in graph.calls:
        calls_of.setdefault(call.layer, []).append(call)
    used: set[str] = set()
    keys: dict[str, str] = {}
    layers: dict[str, Any] = {}
    state: dict[str, torch.Tensor] = {}
    report = ConversionReport(Path(file.path).name, file.keras_version)
    mixed = any((layer_policy(r) or "").startswith("mixed_") for r in graph.layers.values())
    problems: list[dict[str, Any]] = []
    for record_key, record in graph.layers.items():
        if record_key == "" or (record.class_name in MODEL_CLASSES and not is_operation(record)):
            continue  # the passes of nested models' inputs and outputs; nested models are inlined
        converted, arrays, reasons = _convert_layer(record, file, calls_of.get(record_key, []), table, ctx)
        name = record.registered_name or record.class_name
        if converted is None:
            own = is_keras_own(record)
            problem = {"layer": record.key, "class": name, "variables": _shapes(arrays), "reasons": reasons}
            problem["keras"], problem["refused"] = own, bool(reasons)  # no converter at all, or refused by one
            problems.append({**problem, "reasons": reasons or [_no_converter(record, own)]})
            continue
        _warn_non_finite(record, arrays)
        module_key = model_key(record_key, used)
        keys[record_key] = module_key
        keras = {"name": record.key, "class": record.class_name, "trainable": _trainable(graph, record)}
        if own_policy and mixed:
            keras["compute_dtype"] = compute_dtype_of(record)
        layers[module_key] = {**converted.spec, "keras": keras}
        for tensor_name, tensor in converted.state.items():
            state[f"layers.{module_key}.{tensor_name}"] = tensor
        node = converted.spec["op"] if converted.spec["op"] != "zoo" else converted.spec["model"]
        variables = [f"{list(a.shape)}" for a in arrays]
        report.rows.append({"layer": record.key, "class": name, "node": node, "variables": variables})
        report.rows[-1]["notes"] = converted.notes + ([] if keras["trainable"] else ["frozen (trainable: false)"])
    if problems:
        raise _unsupported(file, problems)
    training = policy_notes(graph, calls_of, report.notes, own=own_policy)
    for row in report.rows:
        if row["layer"] in training:
            row["notes"].append("called with training=True: in training mode only under model.train()")
    calls = [
        {"id": c.id, "layer": keys.get(c.layer), "args": _encode(c.args), "kwargs": _encode(c.kwargs)}
        for c in graph.calls
    ]
    config = {
        "format": 1,
        "name": str(file.config.get("config", {}).get("name") or Path(file.path).stem),
        "keras_version": file.keras_version,
        "inputs": _inputs(graph, calls, layers),
        "layers": layers,
        "calls": calls,
        "outputs": [[ref.call, ref.index] for ref in graph.outputs],
    }
    if is_keras_hub_model(file.config):  # the task or Backbone class the graph was rebuilt for (generate reads it)
        config["keras_hub_class"] = str(file.config["class_name"])
        config["keras_hub_config"] = _backbone_arguments(file.config)
    # a dict of inputs or outputs, or nested lists: the structure the converted model takes and returns
    if graph.input_structure is not None:
        config["input_structure"] = graph.input_structure
    if graph.output_structure is not None:
        config["output_structure"] = graph.output_structure
    return config, state, report


def _backbone_arguments(record: dict[str, Any]) -> dict[str, Any]:
    """A keras-hub model's backbone constructor arguments that are plain values (sizes, epsilons, rope
    settings; a task's from its nested backbone record): what the Hugging Face door and decoding read."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    backbone = config.get("backbone")
    if isinstance(backbone, dict) and isinstance(backbone.get("config"), dict):
        config = backbone["config"]

    def plain(value: Any) -> bool:
        if isinstance(value, list):
            return len(value) <= 64 and all(plain(item) for item in value)
        return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 200)

    return {str(key): value for key, value in config.items() if isinstance(key, str) and plain(value)}


def _warn_non_finite(record: LayerRecord, arrays: list[np.ndarray]) -> None:
    """A :class:`KerasWeightsWarning` naming the layer whose variables hold NaN or an infinity: Keras loads
    such a file and runs it (its outputs NaN too), so the conversion goes on and computes the same."""
    for index, array in enumerate(arrays):
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
            warnings.warn(
                f"{record.class_name} {record.key!r}: variable {index} {list(array.shape)} holds {nan} NaN and "
                f"{inf} infinite value(s); Keras loads and runs it too, and the outputs it reaches are not finite",
                KerasWeightsWarning,
                stacklevel=4,
            )


def _check_shapes(model: Any, state: dict[str, torch.Tensor], path: str | Path) -> None:
    """Every converted tensor has the shape of the node built from the layer's config: where a layer's
    variables disagree among themselves (a [1] gamma beside a [4] beta), the error names the Keras layer
    and both shapes before torch's ``load_state_dict`` could."""
    own = model.state_dict()
    for key, tensor in state.items():
        if tuple(own[key].shape) == tuple(tensor.shape) or (own[key].dim() == 0 and tuple(tensor.shape) == (1,)):
            continue  # (torch's load_state_dict takes a [1] tensor for a scalar, as Keras 2 saved some)
        module_key, _, variable = key.removeprefix("layers.").partition(".")
        name = model.keras_names.get(module_key, module_key)
        raise WeightsError(
            f"{path}: layer {name!r} ({model.keras_classes.get(module_key)}): its {variable} is "
            f"{list(tensor.shape)} in the file, but the layer its config describes needs {list(own[key].shape)}; "
            f"the file's weights do not fit its layers (Keras refuses to load it too)"
        )


def _shapes(arrays: list[np.ndarray]) -> list[list[int]]:
    return [list(a.shape) for a in arrays]


# layers that look their input up as ids, which Keras casts to int32 whatever the input's dtype (keras-io's
# translator feeds keras.Input's default float32 to a TokenAndPositionEmbedding)
_ID_TABLES = ("embedding", "reversible_embedding", "keras_hub_token_and_position_embedding")
# the nodes whose first argument is ids below their input_dim (num_tokens)
_READS_IDS = (*_ID_TABLES, "category_encoding")


def _inputs(graph: KerasGraph, calls: list[dict[str, Any]], layers: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for spec, ref in graph.inputs:
        entry: dict[str, Any] = {"id": ref.call, "name": spec.name, "shape": spec.shape, "dtype": spec.dtype}
        same = [[ref.call, 0]]  # the input, and a nested model's input it is passed on as
        for call in calls:  # an integer input read by Embeddings (CategoryEncodings): the smallest bounds the ids
            first = call["args"][0] if call["args"] else None
            if call["layer"] is None and isinstance(first, dict) and first.get("ref") in same:
                same.append([call["id"], 0])
            layer = layers.get(call["layer"] or "")
            reads_ids = layer and layer["op"] in _READS_IDS
            if isinstance(first, dict) and first.get("ref") in same and reads_ids:
                bound = layer.get("input_dim", layer.get("num_tokens"))
                entry["vocab"] = min(entry.get("vocab", bound), bound)
                if layer["op"] in _ID_TABLES and entry["dtype"] not in INTEGER_DTYPES:  # Keras casts to ids
                    # ids then; floats as the file declared them are taken too, cast as Keras casts them
                    entry["dtype"], entry["keras_dtype"] = "int32", entry["dtype"]
        out.append(entry)
    return out


def _no_converter(record: LayerRecord, own: bool) -> str:
    """Why nothing took a layer that no converter is registered for."""
    if is_operation(record):
        return (
            f"the keras operation {record.class_name} ({record_keys(record)[0]!r}) is not supported; attnzoo runs "
            f"{', '.join(sorted(OPERATION_NAMES))}"
        )
    if own and record.class_name == "Lambda":
        return "a Lambda layer's function is Python code, which attnzoo does not run; make it a layer"
    if own:
        return f"no converter for Keras's {record.class_name}"
    keys = " or ".join(map(repr, record_keys(record)))
    if (record.module or "").startswith("keras_hub") or (record.registered_name or "").startswith("keras_hub>"):
        hub = sorted(key.split(">", 1)[1] for key in builtin_keys() if key.startswith("keras_hub>"))
        return (
            f"keras-hub's {record.class_name}, which attnzoo does not convert (it converts keras-hub's "
            f"{', '.join(hub)}); a converter registered as {keys} converts it"
        )
    return f"a custom layer; no converter is registered as {keys}"


def _unsupported(file: KerasFile, problems: list[dict[str, Any]]) -> UnsupportedKerasLayerError:
    lines = []
    for p in problems:
        shapes = f"variables {', '.join(str(s) for s in p['variables'])}" if p["variables"] else "no variables"
        lines.append(f"  {p['layer']} ({p['class']}, {shapes}) ({'; '.join(p['reasons'])})")
    hook = (
        "register(KEY, convert) in the hook attnzoo_register_keras_layers(register) (docs/keras-migration.md), "
        "or pass convert_keras_model(..., custom_layers={KEY: convert})"
    )
    hints = []
    if any(not p["keras"] for p in problems):
        hints.append(f"A custom layer converts through a plugin: {hook.replace('KEY', repr('package>ClassName'))}")
    if any(p["keras"] and not p["refused"] for p in problems):
        hints.append(f"A Keras layer attnzoo has no converter for: {hook.replace('KEY', repr('keras>ClassName'))}")
    message = f"{file.path}: {len(problems)} layer(s) cannot be converted, so nothing was converted:\n" + "\n".join(
        lines + hints
    )
    return UnsupportedKerasLayerError(message, problems)


# -- logits -----------------------------------------------------------------------------------------------
def _drop_squashing(config: dict[str, Any], report: ConversionReport) -> None:
    """Each output's final sigmoid / softmax (a Dense's or Conv's activation, an Activation or Softmax
    layer) taken out of the graph, so the outputs are logits; the report says what, output by output."""
    calls = {call["id"]: call for call in config["calls"]}
    uses: dict[str, int] = {}
    for call in config["calls"]:
        uses[call["layer"]] = uses.get(call["layer"], 0) + 1
    for index, (call_id, _) in enumerate(config["outputs"]):
        call = calls.get(call_id)
        key = call["layer"] if call else None
        spec = config["layers"].get(key) if key else None
        name = spec["keras"]["name"] if spec else call_id
        squash = _squashing_of(spec)
        if squash is None:
            report.outputs.append(f"output {index} ({name}) ends in no sigmoid or softmax; left as it is")
            continue
        if uses.get(key, 0) > 1:
            raise ConfigError(
                f"logits=True: output {index} ends in layer {name!r}, which the model also calls elsewhere; "
                f"its {squash} cannot be dropped for this output alone"
            )
        if spec["op"] == "softmax":
            config["layers"][key] = {"op": "identity", "keras": spec["keras"]}
        else:
            spec["activation"] = "linear"
        report.outputs.append(f"output {index} ({name}): dropped its final {squash}; it gives logits")


def _squashing_of(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return None
    if spec["op"] == "softmax":
        return "softmax"
    if spec["op"] in ("dense", "conv", "activation") and spec.get("activation") in _SQUASHING:
        return str(spec["activation"])
    return None


def _built(graph: dict[str, Any]) -> KerasModel:
    """The ``keras_model`` of ``graph``, built once (every node, the masks' plan, the emitted module), with the
    ``attnzoo_config`` ``attnzoo.create`` gives a model (the registry's name and factory, the graph as its
    config), so ``attnzoo.save`` writes it and ``attnzoo.load`` rebuilds it."""
    spec, _ = REGISTRY.resolve(KerasModel.name)
    model = KerasModel(graph)
    name, factory = REGISTRY.display_name(spec), spec.factory_name
    model.attnzoo_config = {"name": name, "factory": factory, "config": {"graph": graph}}
    model.attnzoo_metadata = {}
    return model


def logits_model(model: KerasModel) -> KerasModel:
    """A model ``convert_keras_model`` returned, without each output's final sigmoid / softmax, as
    ``logits=True`` converts it: its graph with the squashings dropped, built once and given ``model``'s
    tensors (no file is read again); ``keras_report`` says what was dropped, output by output."""
    config = copy.deepcopy(model.graph)
    report = copy.deepcopy(model.keras_report)
    report.outputs.clear()
    _drop_squashing(config, report)
    logits = _built(config)
    logits.load_state_dict(model.state_dict(), strict=True)
    logits.attnzoo_metadata = {**model.attnzoo_metadata, "keras": report.to_dict()}
    logits.keras_report = report
    logits.tokenizer = model.tokenizer
    return logits.train(model.training)


def convert_keras_model(
    path: str | Path,
    *,
    weights: str | Path | None = None,
    custom_layers: Mapping[str, Callable[[dict[str, Any], list[np.ndarray]], Any]] | None = None,
    logits: bool = False,
    compute_dtype: str = "float32",
) -> Any:
    """Convert a whole Keras model (``.keras``, legacy ``.h5``, or ``config.json`` + weights) to a native
    module that predicts what Keras predicts.

    Called like the Keras model: inputs positionally in its input order (token ids as integer tensors or
    numpy arrays, features as floats), any batch size and (where the model allows) length; returns a
    tensor, or a tuple in the Keras model's output order. It comes back in eval mode (Keras's inference);
    ``model.train()`` is Keras's ``training=True`` (dropout acts, BatchNormalization uses batch statistics).
    ``logits=True`` drops each output's final sigmoid or softmax, for ``BCEWithLogitsLoss`` /
    ``CrossEntropyLoss``. ``model.keras_report`` says what became of each layer. Keras is never imported.
    ``compute_dtype="policy"``: a file of a ``mixed_float16`` / ``mixed_bfloat16`` policy computes each
    layer in its compute dtype, as Keras does (:mod:`attnzoo.keras.policy`); the default computes in float32.
    """

    if not isinstance(logits, bool):
        raise ConfigError(f"logits must be True or False, got {logits!r}")
    own_policy = check_compute_dtype(compute_dtype)
    with read_keras_model(path, weights=weights) as file:
        graph = parse_model(file.config, str(path), keras3=file.major >= 3)
        config, state, report = build_graph(file, graph, custom_layers, own_policy=own_policy)
    if logits:
        _drop_squashing(config, report)
    model = _built(config)
    model.convert_layout(state, "")  # the nodes' keys as the emitted module's torch layers name them
    missing = set(model.state_dict()) - set(state)
    unexpected = set(state) - set(model.state_dict())
    if missing or unexpected:  # a converter and its node disagree: a bug of ours, said plainly
        raise WeightsError(
            f"{path}: internal mismatch converting the weights (missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]})"
        )
    _check_shapes(model, state, path)
    model.load_state_dict(state, strict=True)
    model.attnzoo_metadata = {**getattr(model, "attnzoo_metadata", {}), "keras": report.to_dict()}
    model.keras_report = report
    model.tokenizer = carried_tokenizer(path)  # a preset folder's tokenizer goes with its model
    return model.eval()
