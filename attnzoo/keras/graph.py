"""A Keras model config (keras 2 or 3, Sequential or functional, nested) as one flat graph of calls.

Keras describes a model as layers, each called on tensors one or more times (a shared layer); a
nested model is a layer whose calls run its own graph. This module reads that description, as JSON
data, into:

* :class:`LayerRecord`: one Keras layer (its class, config and place in the model), called once or
  more; a nested model's layers are records of their own, keyed ``outer/inner``;
* :class:`~attnzoo.keras.calls.Call`: one application of a layer (or of a keras 3 operation such as
  ``ops.not_equal``) to tensors. Its ``args`` and ``kwargs`` keep Keras's structure, with a
  :class:`~attnzoo.keras.calls.Ref` wherever a tensor goes (both in :mod:`attnzoo.keras.calls`);
* the model's inputs and outputs, as refs.

Nested models are inlined: each call of one becomes the calls of its layers (the weights stay shared).
The calls come out in an order where every tensor is made before it is used, and calls that no output
needs are dropped.

Keras 3 records inbound nodes as ``{"args": [...], "kwargs": {...}}`` with tensors as
``{"class_name": "__keras_tensor__", "config": {"keras_history": [layer, node, index]}}``; Keras 2 as
lists of ``[layer, node, index, kwargs]`` per input tensor. Both end up the same here.

One walk (``_Builder``) takes both formats at once and inlines nested models as it goes; split by
format, the walk would be written twice. The order of the calls is :mod:`attnzoo.keras.order`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.calls import Call, Ref
from attnzoo.keras.files import LayerPath
from attnzoo.keras.hub_families import unwrap
from attnzoo.keras.hub_graph import WEIGHTS_AT_ROOT
from attnzoo.keras.not_a_graph import not_a_graph
from attnzoo.keras.order import Block, keras3_order, needed_in_order
from attnzoo.keras.recorded import MAX_NESTING, keras2_tensors, keras3_tensors, known_inputs, layer_structure
from attnzoo.keras.tf_ops import TF_OP_CLASSES, operation_class, refusal, tf_operation

__all__ = ["LayerRecord", "KerasGraph", "parse_model", "MODEL_CLASSES"]

MODEL_CLASSES = ("Functional", "Model", "Sequential")
# Keras 2 layers whose call takes `initial_state` among its input tensors (RNN.__call__, Bidirectional)
KERAS2_RNN_CLASSES = ("LSTM", "GRU", "SimpleRNN", "RNN", "CuDNNLSTM", "CuDNNGRU", "Bidirectional")
MAX_CALLS = 100_000  # a model with more calls than this is not a model a person built


def _build_shape(build_config: Any) -> list[Any] | None:
    """The input shape keras 3 built a layer for (``build_config.input_shape``), when it is one shape of
    ints and None (a layer of several inputs records a list of shapes: not used here)."""
    shape = build_config.get("input_shape") if isinstance(build_config, dict) else None
    if isinstance(shape, list) and all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in shape):
        return shape
    return None


def _build_ranks(build_config: Any) -> list[int] | None:
    """The ranks of the input shapes keras 3 built a layer of several inputs for (a list of shapes)."""
    shapes = build_config.get("input_shape") if isinstance(build_config, dict) else None
    if isinstance(shapes, list) and shapes and all(isinstance(shape, list) for shape in shapes):
        return [len(shape) for shape in shapes]
    return None


@dataclass
class LayerRecord:
    key: str  # unique within the model: the nested names joined by "/"
    path: LayerPath
    class_name: str
    registered_name: str | None
    module: str | None
    config: dict[str, Any]
    build_shape: list[Any] | None = None  # keras 3's build_config input_shape, where the file records one
    refused: str | None = None  # why reading refused the layer (a TF operation it cannot state); reported
    build_ranks: list[int] | None = None  # the ranks of a layer of several inputs keras 3 built (a merge's)

    @property
    def is_operation(self) -> bool:
        """A keras 3 operation recorded in a functional graph (``ops.not_equal``, ``x[:, -1]``)."""
        return bool(self.module and self.module.startswith("keras.src.ops"))

    @property
    def name(self) -> str:
        return self.path.names[-1]


@dataclass
class InputSpec:
    name: str
    shape: list[int | None]  # batch axis included
    dtype: str


@dataclass
class KerasGraph:
    layers: dict[str, LayerRecord] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    inputs: list[tuple[InputSpec, Ref]] = field(default_factory=list)
    outputs: list[Ref] = field(default_factory=list)
    # how Keras nests the inputs and outputs (a dict of them, nested lists), each leaf the position in the
    # flat list above; None where they are one tensor or a flat list
    input_structure: Any = None
    output_structure: Any = None


class _Builder:
    def __init__(self, where: str, keras3: bool) -> None:
        self.where = where
        self.keras3 = keras3
        self.graph = KerasGraph()
        self.tf_origins: dict[str, LayerRecord] = {}  # tf.keras 2's operation layers as read, by key

    def fail(self, message: str) -> WeightsError:
        return WeightsError(f"{self.where}: {message}")

    # -- layers -----------------------------------------------------------------------------------------
    def record(self, entry: Any, parent: LayerPath, prefix: str, position: int) -> LayerRecord:
        entry = unwrap(entry, self.where)  # a keras-hub model inside: its functional graph
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise self.fail(f"a layer entry of the config is not a Keras layer record: {str(entry)[:120]}")
        config = entry.get("config") if isinstance(entry.get("config"), dict) else {}
        name = entry.get("name") or config.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(f"a {entry['class_name']} layer has no name")
        key = f"{prefix}{name}"
        if key in self.graph.layers:
            origin = self.tf_origins.get(key, self.graph.layers[key])
            if origin.config is config:  # a nested model called again: the same layer
                return self.graph.layers[key]
            raise self.fail(f"two layers are named {key!r}; Keras layer names are unique within a model")
        if entry.get(WEIGHTS_AT_ROOT) is True:  # a rebuilt task's head placed inside its backbone (hub_graph)
            parent, position = LayerPath((), (), ()), 0
        record = LayerRecord(
            key=key,
            path=parent.child(name, entry["class_name"], position),
            class_name=entry["class_name"],
            registered_name=entry.get("registered_name") if isinstance(entry.get("registered_name"), str) else None,
            module=entry.get("module") if isinstance(entry.get("module"), str) else None,
            config=config,
            build_shape=_build_shape(entry.get("build_config")),
            build_ranks=_build_ranks(entry.get("build_config")),
        )
        self.graph.layers[key] = record
        return record

    def _identity_layer(self) -> None:
        """The record "" that passes tensors on (a nested model's inputs and outputs); no weights, no node."""
        self.graph.layers.setdefault("", LayerRecord("", LayerPath((), (), ()), "Identity", None, None, {}))

    def add_call(self, call: Call) -> None:
        if len(self.graph.calls) >= MAX_CALLS:
            raise self.fail(f"more than {MAX_CALLS} layer calls; not a model attnzoo converts")
        self.graph.calls.append(call)

    # -- models -----------------------------------------------------------------------------------------
    def model(
        self, entry: dict[str, Any], path: LayerPath, prefix: str, bound: list[Ref] | None, call_prefix: str, depth: int
    ) -> tuple[list[tuple[InputSpec, Ref]], list[Ref]]:
        """Emit the calls of a model; ``bound`` gives the tensors its inputs take (a nested model's call),
        None for the outermost model. Returns its inputs and output refs."""
        if depth > MAX_NESTING:
            raise self.fail(f"models nested deeper than {MAX_NESTING} levels")
        config = entry.get("config")
        if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
            raise self.fail(f"model {entry.get('class_name')} has no layer list in its config")
        if entry["class_name"] == "Sequential":
            return self.sequential(config, path, prefix, bound, call_prefix, depth)
        return self.functional(config, path, prefix, bound, call_prefix, depth)

    def _positions(self, layers: list[Any]) -> list[int]:
        # keras 3 names a layer's weights group by its class and its position among layers of that class
        # (operations are not layers and do not count)
        counts: dict[str, int] = {}
        out = []
        for entry in layers:
            cls = entry.get("class_name") if isinstance(entry, dict) else None
            module = entry.get("module") if isinstance(entry, dict) else None
            if isinstance(module, str) and module.startswith("keras.src.ops"):
                out.append(0)
                continue
            out.append(counts.get(cls, 0))
            counts[cls] = counts.get(cls, 0) + 1
        return out

    def _input_spec(self, config: dict[str, Any], name: str) -> InputSpec:
        shape = config.get("batch_shape", config.get("batch_input_shape"))
        if not isinstance(shape, list):
            raise self.fail(f"input {name!r} has no batch_shape; save the model after building it")
        dtype = config.get("dtype", "float32")
        if isinstance(dtype, dict):  # a keras 3 dtype policy
            dtype = dtype.get("config", {}).get("name", "float32")
        return InputSpec(name, [d if isinstance(d, int) else None for d in shape], str(dtype))

    def sequential(
        self,
        config: dict[str, Any],
        path: LayerPath,
        prefix: str,
        bound: list[Ref] | None,
        call_prefix: str,
        depth: int,
    ) -> tuple[list[tuple[InputSpec, Ref]], list[Ref]]:
        layers = config["layers"]
        positions = self._positions(layers)
        inputs: list[tuple[InputSpec, Ref]] = []
        current: Ref | None = None
        if bound is not None:
            if len(bound) != 1:
                raise self.fail(f"Sequential model {path} is called on {len(bound)} tensors; it takes one")
            current = self._pass(f"{call_prefix}{prefix}input", bound[0])
        for entry, position in zip(layers, positions, strict=True):
            if isinstance(entry, dict) and entry.get("class_name") == "InputLayer":
                if current is None:
                    record = self.record(entry, path, prefix, position)
                    spec = self._input_spec(record.config, record.name)
                    current = Ref(f"{call_prefix}{record.key}")
                    inputs.append((spec, current))
                continue
            if current is None:  # keras 2: the first layer carries the input shape
                first = entry.get("config", {}) if isinstance(entry, dict) else {}
                name = f"{first.get('name', 'input')}_input"
                spec = self._input_spec(first, name)
                current = Ref(f"{call_prefix}{prefix}{name}")
                inputs.append((spec, current))
            record = self.record(entry, path, prefix, position)
            current = self.apply(record, [current], {}, call_prefix, depth, call_id=f"{call_prefix}{record.key}")
        if current is None:
            raise self.fail(f"Sequential model {path or 'model'} has no layers")
        return inputs, [current]

    def _pass(self, call_id: str, ref: Ref, mask: Any = None) -> Ref:
        """A nested model's input: the outer tensor, with its mask (or the one its call passes)."""
        self._identity_layer()
        self.add_call(Call(call_id, "", [ref], {"mask": mask} if mask is not None else {}))
        return Ref(call_id)

    def functional(
        self,
        config: dict[str, Any],
        path: LayerPath,
        prefix: str,
        bound: list[Ref] | None,
        call_prefix: str,
        depth: int,
    ) -> tuple[list[tuple[InputSpec, Ref]], list[Ref]]:
        layers = config["layers"]
        positions = self._positions(layers)
        records = [
            self.record(entry, path, prefix, position) for entry, position in zip(layers, positions, strict=True)
        ]
        input_refs, input_structure = layer_structure(config.get("input_layers"), "input", self.fail)
        input_names = [ref[0] for ref in input_refs]
        if bound is not None and len(bound) != len(input_names):
            raise self.fail(f"model {path} is called on {len(bound)} tensors; it has {len(input_names)} inputs")
        nodes: dict[tuple[str, int], str] = {}  # (layer name, node index) -> call id
        inputs: list[tuple[InputSpec, Ref]] = []
        start = len(self.graph.calls)
        blocks: list[Block] = []  # this model's nodes: one call, or all the calls of a nested model
        later: list[tuple[LayerRecord, int, Any]] = []  # later calls of a layer that read layers listed after it
        for record, entry in zip(records, layers, strict=True):
            if record.class_name == "InputLayer":
                call_id = f"{call_prefix}{record.key}"
                nodes[(record.name, 0)] = call_id
                if bound is not None and record.name in input_names:
                    at = len(self.graph.calls)
                    self._pass(call_id, bound[input_names.index(record.name)])
                    blocks.append(Block(call_id, record.key, at, len(self.graph.calls), [], is_input=True))
                else:
                    inputs.append((self._input_spec(record.config, record.name), Ref(call_id)))
                    blocks.append(Block(call_id, record.key, -1, -1, [], is_input=True))
                continue
            inbound = entry.get("inbound_nodes") or []
            if not isinstance(inbound, list):
                raise self.fail(f"layer {record.key!r} has inbound_nodes that are not a list")
            for index, node in enumerate(inbound):
                if index and not known_inputs(node, nodes):
                    later.append((record, index, node))
                    continue
                self._node(record, index, node, nodes, call_prefix, depth, blocks)
        # keras lists a layer where it is first called: a later call of a shared layer (a tied embedding's
        # reverse call on the last state) may read layers listed after it, so it runs once they have
        while later:
            ready = [item for item in later if known_inputs(item[2], nodes)] or later[:1]  # none: the first says why
            for item in ready:
                later.remove(item)
                self._node(*item, nodes, call_prefix, depth, blocks)
        by_name = {name: inputs_ref for name, inputs_ref in ((s.name, r) for s, r in inputs)}
        ordered_inputs = []
        for name in input_names:
            if bound is None:
                if name not in by_name:
                    raise self.fail(f"input_layers names {name!r}, which is no InputLayer of the model")
                ordered_inputs.append(next((s, r) for s, r in inputs if s.name == name))
        outputs = []
        functional = {r.name for r in records if r.class_name in MODEL_CLASSES and r.class_name != "Sequential"}
        output_refs, output_structure = layer_structure(config.get("output_layers"), "output", self.fail)
        if bound is None:
            self.graph.input_structure, self.graph.output_structure = input_structure, output_structure
        for name, node, index in output_refs:
            if self.keras3 and name in functional:
                # keras 3 counts a nested functional model's own node (its inputs to its outputs) in
                # output_layers, though not in the inbound nodes it records (Functional.get_config)
                node -= 1
            if (name, node) not in nodes:
                raise self.fail(f"output_layers names {name!r} node {node}, which the model never calls")
            outputs.append(Ref(nodes[(name, node)], index))
        if self.keras3:
            self.graph.calls[start:] = keras3_order(self.graph.calls[start:], start, blocks, outputs)
        return ordered_inputs if bound is None else [], outputs

    def _node(
        self,
        record: LayerRecord,
        index: int,
        node: Any,
        nodes: dict[tuple[str, int], str],
        call_prefix: str,
        depth: int,
        blocks: list[Block],
    ) -> None:
        """The ``index``-th call of a layer of a functional model (its inbound ``node``)."""
        call_id = f"{call_prefix}{record.key}" + (f"#{index}" if index else "")
        nodes[(record.name, index + self._node_offset(record))] = call_id
        args, kwargs = self.node_arguments(node, record, nodes)
        if record.class_name in TF_OP_CLASSES or record.key in self.tf_origins:
            record, args, kwargs = self.tf_operation(record, args, kwargs)
        at = len(self.graph.calls)
        self.apply(record, args, kwargs, call_prefix, depth, call_id=call_id)
        parents = Call(call_id, record.key, args, kwargs).keras_tensors()
        blocks.append(Block(call_id, record.key, at, len(self.graph.calls), parents))

    def tf_operation(
        self, record: LayerRecord, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[LayerRecord, list[Any], dict[str, Any]]:
        """A tf.keras 2 ``TFOpLambda`` / ``SlicingOpLambda`` call read as the Keras 3 operation it is
        (:mod:`attnzoo.keras.tf_ops`); one it cannot state stays, refused with its reason."""
        origin = self.tf_origins.setdefault(record.key, record)
        found = tf_operation(origin.config.get("function"), args, kwargs, lambda value: isinstance(value, Ref))
        if isinstance(found, str):
            read = dataclasses.replace(origin, refused=refusal(found))
        else:  # the operation's record, as keras 3 writes one; the report still names the TF layer's class
            config = {"name": origin.name, **found.config}
            read = dataclasses.replace(
                origin, class_name=operation_class(found.name), module="keras.src.ops", config=config
            )
            read.registered_name, args, kwargs = origin.class_name, found.args, {}
        self.graph.layers[record.key] = read
        return read, args, kwargs

    def _node_offset(self, record: LayerRecord) -> int:
        """Keras 2 numbers the calls of a nested model with an input layer from 1: its node 0 is the one
        linking its own inputs to its outputs, which the config leaves out (``_should_skip_first_node``)."""
        if self.keras3 or record.class_name not in MODEL_CLASSES:
            return 0
        if record.class_name != "Sequential":
            return 1
        layers = record.config.get("layers") or [{}]
        return int(isinstance(layers[0], dict) and layers[0].get("class_name") == "InputLayer")

    def node_arguments(
        self, node: Any, record: LayerRecord, nodes: dict[tuple[str, int], str]
    ) -> tuple[list[Any], dict[str, Any]]:
        def resolve(history: Any) -> Ref:
            if not (isinstance(history, list) and len(history) >= 3 and isinstance(history[0], str)):
                raise self.fail(f"layer {record.key!r} has an input reference {str(history)[:80]}")
            name, node_index, tensor_index = history[0], history[1], history[2]
            if (name, node_index) not in nodes:
                raise self.fail(
                    f"layer {record.key!r} takes an output of {name!r} (node {node_index}) that comes later "
                    f"in the config or does not exist"
                )
            return Ref(nodes[(name, node_index)], int(tensor_index))

        if isinstance(node, dict):  # keras 3
            return keras3_tensors(node.get("args", []), resolve), keras3_tensors(node.get("kwargs", {}), resolve)
        if isinstance(node, list):  # keras 2: one [name, node, index, kwargs] per input tensor
            # a TF operation layer keeps its first argument's structure: one item for one tensor (or a
            # number, ["_CONSTANT_VALUE", -1, value]), a list of items for a list of tensors
            tf_op = record.class_name in TF_OP_CLASSES
            single = tf_op and bool(node) and isinstance(node[0], str)
            refs, kwargs = [], {}
            for item in [node] if single else node:
                if not isinstance(item, list) or len(item) < 3:
                    raise self.fail(f"layer {record.key!r} has an inbound node {str(item)[:80]}")
                constant = tf_op and item[:2] == ["_CONSTANT_VALUE", -1]
                refs.append(item[2] if constant else resolve(item))
                if len(item) > 3 and isinstance(item[3], dict) and not kwargs:
                    kwargs = keras2_tensors(item[3], resolve)
            if len(refs) > 1 and record.class_name in KERAS2_RNN_CLASSES and "initial_state" not in kwargs:
                # Keras 2's RNN.__call__ records `initial_state=[h, c]` as more tensors of the one node
                return [refs[0]], {**kwargs, "initial_state": refs[1:]}
            if tf_op:
                return ([refs[0]] if single else [refs]), kwargs
            return ([refs[0]] if len(refs) == 1 else [refs]), kwargs
        raise self.fail(f"layer {record.key!r} has an inbound node of an unknown form: {str(node)[:80]}")

    def apply(
        self,
        record: LayerRecord,
        args: list[Any],
        kwargs: dict[str, Any],
        call_prefix: str,
        depth: int,
        *,
        call_id: str,
    ) -> Ref:
        """Emit one call of ``record`` (inlining a nested model); returns its first output."""
        if record.class_name in MODEL_CLASSES:
            bound = _flat_refs(args[0] if len(args) == 1 and isinstance(args[0], (list, dict)) else args)
            mask = kwargs.get("mask")
            if isinstance(mask, Ref) and len(bound) == 1:
                bound = [self._pass(f"{call_id}/masked", bound[0], mask)]
            entry = {"class_name": record.class_name, "config": record.config}
            _, outputs = self.model(entry, record.path, record.key + "/", bound, call_id + "/", depth + 1)
            # the call's outputs are the inner model's outputs, under the call's own id
            self._identity_layer()
            self.add_call(Call(call_id, "", list(outputs), {"outputs": True}))
            return Ref(call_id)
        self.add_call(Call(call_id, record.key, args, kwargs))
        return Ref(call_id)


def _flat_refs(value: Any) -> list[Ref]:
    """The tensors of a call's argument in Keras's flat order (a dict's by sorted key)."""
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, dict):
        return [ref for key in sorted(value) for ref in _flat_refs(value[key])]
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in _flat_refs(item)]
    return []


def _needed(graph: KerasGraph) -> KerasGraph:
    """Calls in an order where every input exists before use, without the calls no output needs (and the
    layers no call uses)."""
    made = {ref.call for _, ref in graph.inputs}
    graph.calls = needed_in_order(graph.calls, made, [ref.call for ref in graph.outputs])
    used = {call.layer for call in graph.calls}
    graph.layers = {k: v for k, v in graph.layers.items() if k in used}
    return graph


def parse_model(config: dict[str, Any], where: str, *, keras3: bool = True) -> KerasGraph:
    """The flat graph of a Keras model config (the ``{"class_name", "config"}`` record of the model);
    ``keras3``: order the calls as keras 3 runs them (Keras 2 has no order-dependent behaviour)."""
    config = unwrap(config, where)  # a keras-hub Backbone keeps its constructor's arguments, not its graph
    if config.get("class_name") not in MODEL_CLASSES:
        raise WeightsError(f"{where}: {not_a_graph(config)}")
    builder = _Builder(where, keras3)
    inputs, outputs = builder.model(config, LayerPath((), (), ()), "", None, "", 0)
    if not inputs:
        raise WeightsError(f"{where}: the model has no inputs")
    builder.graph.inputs = inputs
    builder.graph.outputs = outputs
    return _needed(builder.graph)
