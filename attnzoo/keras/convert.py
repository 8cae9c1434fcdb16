"""``convert_keras_model``: a whole Keras model file becomes a native ``nn.Module``, with no Keras at run time.

Each Keras layer is converted by the first converter that takes it (:mod:`attnzoo.keras.registry`'s
collision policy), tried for each name the layer goes by in this order: ``custom_layers=`` of the call (a
Keras name -> a convert function, like Keras's ``custom_objects``), then attnzoo's own converters
(``attnzoo/keras/converters/``), then the plugins' (the ``attnzoo_register_keras_layers`` hook), in plugin
order; a plugin's converter of a name attnzoo converts answers only where attnzoo's refuses. A converter is
registered under the ``registered_name`` Keras stores (``"package>ClassName"``), a bare class name,
``"keras>ClassName"`` for Keras's own layers, or ``"keras.ops>name"`` for Keras's operations.

Everything is checked before anything is built: every layer without a converter (or whose converter
refuses it) is listed in one ``UnsupportedKerasLayerError`` with its name, class and variable shapes.
Each layer's variables are read from the file as the layer converts and dropped once its tensors are held,
in the file's dtype (:mod:`attnzoo.keras.dtypes`). The result is a :class:`~attnzoo.keras.model.KerasModel`
built once from the graph, on the meta device, and given those tensors as they are (``assign=True``: no layer
is initialised, no tensor copied), with the ``attnzoo_config`` ``attnzoo.create("keras_model", graph=...)``
gives: its config is the graph as data, so ``attnzoo.save`` / ``attnzoo.load`` rebuild it. It comes back in
eval mode (Keras's inference), as ``from_pretrained`` models do; ``model.train()`` is Keras's
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
from attnzoo.io.progress import bar
from attnzoo.keras.calls import Call, Ref
from attnzoo.keras.conversion_report import ConversionReport, no_converter, unsupported_error
from attnzoo.keras.dtypes import HeldDtypes, check_dtype
from attnzoo.keras.files import KerasFile, Variables, read_keras_model
from attnzoo.keras.graph import MODEL_CLASSES, KerasGraph, LayerRecord, parse_model
from attnzoo.keras.hub_families import backbone_arguments, is_keras_hub_model
from attnzoo.keras.hub_image_converter import carried_image_converter
from attnzoo.keras.hub_tokenizers.preset import carried_tokenizer
from attnzoo.keras.layer_keys import module_key as model_key
from attnzoo.keras.lora import plan_lora
from attnzoo.keras.model import KerasModel
from attnzoo.keras.nodes import INTEGER_DTYPES, NODES
from attnzoo.keras.policy import check_compute_dtype, compute_dtype_of, layer_policy, policy_notes
from attnzoo.keras.registry import (
    Context,
    Converted,
    ConverterTable,
    KerasConverter,
    Refused,
    adapt,
    is_keras_own,
    is_operation,
    record_keys,
)
from attnzoo.keras.shared import held_once

__all__ = ["convert_keras_model", "UnsupportedKerasLayerError", "ConversionReport", "converter_table"]


# -- the converter table of one conversion -----------------------------------------------------------------
def converter_table(custom: Mapping[str, Any] | None) -> ConverterTable:
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
) -> tuple[Converted | None, Variables, list[str]]:
    """One layer's node and state (or None), its variables as read, and why each converter tried refused it."""
    if record.refused is not None:  # reading the graph refused it already (a TF operation it cannot state)
        return None, Variables([], []), [record.refused]
    candidates = table.candidates(record_keys(record))
    order = next((entry.child_order for entry in candidates if entry.child_order), ())
    variables = file.weights.variables(record.path, order) or Variables([], [])
    arrays = variables.arrays
    reasons: list[str] = []
    for entry in candidates:
        for call in calls if entry.positional else []:  # keyword forms of positional arguments, in their places
            call.args, call.kwargs = entry.positional_call(call.args, call.kwargs)
        extra = sorted({arg for call in calls for arg in entry.allows(call.kwargs)})
        if extra:
            reasons.append(f"{_who(entry)}: call argument(s) {', '.join(extra)} are not supported")
            continue
        try:
            return entry.convert(record, arrays, ctx), variables, reasons
        except Refused as e:
            reasons.append(f"{_who(entry)}: {e}" if entry.provider != "attnzoo" else str(e))
        except Exception as e:  # noqa: BLE001 - a plugin's converter failing is a reason, not a crash
            if entry.provider == "attnzoo":
                raise
            reasons.append(f"{_who(entry)}: {type(e).__name__}: {e}")
    return None, variables, reasons


def _who(entry: KerasConverter) -> str:
    return f"{entry.provider} for {entry.key}"


def build_graph(
    file: KerasFile,
    graph: KerasGraph,
    custom_layers: Mapping[str, Any] | None = None,
    *,
    own_policy: bool = False,
    dtype: torch.dtype | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], ConversionReport]:
    """The ``keras_model`` graph config, its state dict and the report; raises
    ``UnsupportedKerasLayerError`` listing every layer nothing converts. Each layer's variables are read from the
    file as it converts and dropped once its tensors are held, in the file's dtype or ``dtype``
    (:mod:`attnzoo.keras.dtypes`). ``own_policy``: each layer computes in its dtype policy's compute dtype
    (:mod:`attnzoo.keras.policy`), where the file has a mixed policy."""
    ctx = Context(file.major, str(file.path), file.assets)
    _check_custom_keys(custom_layers, graph)
    table = converter_table(custom_layers)
    calls_of: dict[str, list[Call]] = {}
    for call in graph.calls:
        calls_of.setdefault(call.layer, []).append(call)
    built = _Built(HeldDtypes(dtype), ConversionReport(Path(file.path).name, file.keras_version))
    mixed = any((layer_policy(r) or "").startswith("mixed_") for r in graph.layers.values())
    with bar(len(graph.layers), f"reading {Path(file.path).name}", unit="layer") as shown:
        for record_key, record in graph.layers.items():
            shown.update()
            if record_key == "" or (record.class_name in MODEL_CLASSES and not is_operation(record)):
                continue  # the passes of nested models' inputs and outputs; nested models are inlined
            converted, variables, reasons = _convert_layer(record, file, calls_of.get(record_key, []), table, ctx)
            keras = {"name": record.key, "class": record.class_name, "trainable": _trainable(graph, record)}
            if own_policy and mixed:
                keras["compute_dtype"] = compute_dtype_of(record)
            built.add(record, converted, variables, reasons, keras)
    report, layers, state = built.report, built.layers, built.state
    if built.problems:
        raise unsupported_error(file, built.problems)
    calls = [
        {"id": c.id, "layer": built.keys.get(c.layer), "args": _encode(c.args), "kwargs": _encode(c.kwargs)}
        for c in graph.calls
    ]
    report.notes += built.dtypes.finish(state, layers, calls)
    training = policy_notes(graph, calls_of, report.notes, own=own_policy)
    for row in report.rows:
        if row["layer"] in training:
            row["notes"].append("called with training=True: in training mode only under model.train()")
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
        config["keras_hub_config"] = backbone_arguments(file.config)
    # a dict of inputs or outputs, or nested lists: the structure the converted model takes and returns
    if graph.input_structure is not None:
        config["input_structure"] = graph.input_structure
    if graph.output_structure is not None:
        config["output_structure"] = graph.output_structure
    return config, state, report


@dataclass
class _Built:
    """What the layers converted so far make: the graph's layers by module key, the state dict, the report's
    rows, and every layer nothing converted."""

    dtypes: HeldDtypes
    report: ConversionReport
    layers: dict[str, Any] = field(default_factory=dict)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # Keras layer key -> module key
    used: set[str] = field(default_factory=set)  # the module keys given
    problems: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        record: LayerRecord,
        converted: Converted | None,
        variables: Variables,
        reasons: list[str],
        keras: dict[str, Any],
    ) -> None:
        """One layer's result: its node and its tensors, held in their dtype (its arrays are dropped here: one
        layer's arrays are the conversion's only transient), or why nothing converted it."""
        name = record.registered_name or record.class_name
        shapes, stored = _shapes(variables.arrays), list(variables.dtypes)
        if converted is None:
            own = is_keras_own(record)
            problem = {"layer": record.key, "class": name, "variables": shapes, "reasons": reasons}
            problem["keras"], problem["refused"] = own, bool(reasons)  # no converter at all, or refused by one
            self.problems.append({**problem, "reasons": reasons or [no_converter(record, own)]})
            return
        _warn_non_finite(record, variables.arrays)
        variables.arrays.clear()  # the converter's views of them go as each tensor is held
        module_key = model_key(record.key, self.used)
        self.keys[record.key] = module_key
        self.layers[module_key] = {**converted.spec, "keras": keras}
        self.state.update(self.dtypes.hold(module_key, converted.state, stored))
        node = converted.spec["op"] if converted.spec["op"] != "zoo" else converted.spec["model"]
        row = {"layer": record.key, "class": name, "node": node, "variables": [f"{s}" for s in shapes]}
        row["notes"] = converted.notes + ([] if keras["trainable"] else ["frozen (trainable: false)"])
        self.report.rows.append(row)


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
                stacklevel=5,  # the caller of convert_keras_model
            )


def _check_shapes(own: dict[str, torch.Tensor], model: Any, state: dict[str, torch.Tensor], path: str | Path) -> None:
    """Every converted tensor has the shape of the node built from the layer's config (``own``, the model's
    state dict): where a layer's variables disagree among themselves (a [1] gamma beside a [4] beta), the error
    names the Keras layer and both shapes before torch's ``load_state_dict`` could."""
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
            node = NODES[layer["op"]] if layer else None
            if isinstance(first, dict) and first.get("ref") in same and node is not None and node.ids_below:
                bound = layer[node.ids_below]
                entry["vocab"] = min(entry.get("vocab", bound), bound)
                if node.casts_to_ids and entry["dtype"] not in INTEGER_DTYPES:  # Keras casts to ids
                    # ids then; floats as the file declared them are taken too, cast as Keras casts them
                    entry["dtype"], entry["keras_dtype"] = "int32", entry["dtype"]
        out.append(entry)
    return out


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
        found = NODES[spec["op"]].logits(spec) if spec else None
        if found is None:
            report.outputs.append(f"output {index} ({name}) ends in no sigmoid or softmax; left as it is")
            continue
        squash, logits = found
        if uses.get(key, 0) > 1:
            raise ConfigError(
                f"logits=True: output {index} ends in layer {name!r}, which the model also calls elsewhere; "
                f"its {squash} cannot be dropped for this output alone"
            )
        config["layers"][key] = logits
        report.outputs.append(f"output {index} ({name}): dropped its final {squash}; it gives logits")


def _built(graph: dict[str, Any], state: dict[str, torch.Tensor], path: str | Path) -> KerasModel:
    """The ``keras_model`` of ``graph`` holding ``state``, built once (every node, the masks' plan, the emitted
    module) on the meta device, so that no tensor is made but the file's: ``state`` (renamed in place to the
    emitted module's keys) becomes its parameters and buffers as it is (``assign=True``). It carries the
    ``attnzoo_config`` ``attnzoo.create`` gives a model (the registry's name and factory, the graph as its
    config), so ``attnzoo.save`` writes it and ``attnzoo.load`` rebuilds it."""
    spec, _ = REGISTRY.resolve(KerasModel.name)
    with torch.device("meta"):  # the layers sized, not filled: the file's tensors fill them
        model = KerasModel(graph)
    model.convert_layout(state, "")  # the nodes' keys as the emitted module's torch layers name them
    own = model.state_dict(keep_vars=True)
    missing, unexpected = set(own) - set(state), set(state) - set(own)
    if missing or unexpected:  # a converter and its node disagree: a bug of ours, said plainly
        raise WeightsError(
            f"{path}: internal mismatch converting the weights (missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]})"
        )
    _check_shapes(own, model, state, path)
    model.load_state_dict(state, strict=True, assign=True)  # KerasModel refuses a tensor left on meta
    name, factory = REGISTRY.display_name(spec), spec.factory_name
    model.attnzoo_config = {"name": name, "factory": factory, "config": {"graph": graph}}
    model.attnzoo_metadata = {}
    return model


def logits_model(model: KerasModel) -> KerasModel:
    """A model ``convert_keras_model`` returned, without each output's final sigmoid / softmax, as
    ``logits=True`` converts it: its graph with the squashings dropped, built once and holding a copy of
    ``model``'s tensors (no file is read again); ``keras_report`` says what was dropped, output by output."""
    config = copy.deepcopy(model.graph)
    report = copy.deepcopy(model.keras_report)
    report.outputs.clear()
    _drop_squashing(config, report)
    state = {key: tensor.clone() for key, tensor in model.state_dict().items()}  # its own: trained alone
    logits = _built(config, state, model.graph.get("name", "keras_model"))
    logits.attnzoo_metadata = {**model.attnzoo_metadata, "keras": report.to_dict()}
    logits.keras_report = report
    logits.tokenizer = model.tokenizer
    logits.keras_lora = getattr(model, "keras_lora", None)
    return logits.train(model.training)


def convert_keras_model(
    path: str | Path,
    *,
    weights: str | Path | None = None,
    custom_layers: Mapping[str, Callable[[dict[str, Any], list[np.ndarray]], Any]] | None = None,
    logits: bool = False,
    compute_dtype: str = "float32",
    dtype: str | torch.dtype | None = None,
    lora: str = "merge",
    lora_weights: str | Path | None = None,
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
    ``dtype``: the dtype the model holds the file's variables in and computes in: None (the default) keeps the
    file's (a ``dtype="bfloat16"`` Keras model converts to bfloat16, bit for bit; a file whose layers hold
    different dtypes converts to float32, and the report says so), ``"float32"``, ``"bfloat16"`` or
    ``"float16"`` casts them (:mod:`attnzoo.keras.dtypes`).
    ``lora``: what becomes of a keras-hub model's LoRA adapters (``backbone.save_lora_weights``'s file:
    ``lora_weights=``, or the one ``*.lora.h5`` of a preset folder; :mod:`attnzoo.keras.lora`): ``"merge"``
    (the default) adds each to its kernel as Keras computes it; ``"none"`` converts the base model; ``"keep"``
    converts the base model and keeps the adapters apart in ``model.keras_lora`` for
    :func:`~attnzoo.keras.to_transformers`'s PEFT adapter folder (the model itself computes the base model).

    The file is read layer by layer, each layer's arrays dropped once its tensors are held, and the module is
    built on the meta device and given the converted tensors as they are: the conversion's memory is the
    model's weights and one layer's arrays.
    """

    if not isinstance(logits, bool):
        raise ConfigError(f"logits must be True or False, got {logits!r}")
    own_policy = check_compute_dtype(compute_dtype)
    held = check_dtype(dtype)
    if own_policy and held is not None:
        raise ConfigError(
            f"dtype={dtype!r} and compute_dtype='policy' both set the dtype the layers are held in; pass one "
            f"(compute_dtype='policy' holds each layer in its mixed policy's compute dtype)"
        )
    with read_keras_model(path, weights=weights) as file:
        graph = parse_model(file.config, str(path), keras3=file.major >= 3)
        # a layer listed twice (a nested model's, called again outside it) is one layer: its weights held once
        # (a keras 3 file finds a layer's weights group by its path; a legacy .h5's `group` is its root group)
        group = getattr(file.weights, "group", None)
        graph = held_once(graph, group if callable(group) else None)
        planned = plan_lora(path, file, graph, lora, lora_weights)
        config, state, report = build_graph(file, graph, custom_layers, own_policy=own_policy, dtype=held)
    report.notes += [planned] if isinstance(planned, str) else []
    if logits:
        _drop_squashing(config, report)
    model = _built(config, state, path)
    model.attnzoo_metadata = {**getattr(model, "attnzoo_metadata", {}), "keras": report.to_dict()}
    model.keras_report = report
    model.tokenizer = carried_tokenizer(path)  # a preset folder's tokenizer goes with its model
    model.image_converter = carried_image_converter(path)  # and its image converter
    model.keras_lora = None if isinstance(planned, str) else planned  # the adapters lora="keep" kept apart
    return model.eval()
