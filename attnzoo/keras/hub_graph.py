"""Writing a keras-hub model's functional config from its constructor's arguments: the pieces the family
files' builders share (:mod:`attnzoo.keras.hub_families` says why a builder exists).

:class:`HubGraph` appends layer records in call order and returns the ``Functional`` record keras 3 writes
for ``keras.Model(model.inputs, model.outputs)``; a tensor is named by the layer that made it (its first
call) or by a :class:`Ref` to a later call of a shared layer. The rest are the blocks several families
write the same way: the checked sizes of a config (:func:`positive`), keras-hub's ``TransformerEncoder`` /
``TransformerDecoder`` stacks, the first token's state, a position embedding, a task's nested backbone and
classifier head, and :func:`causal_lm_graph`, a ``<X>CausalLM``'s graph from its backbone's.

A ``<X>CausalLM`` holds its Backbone and computes ``backbone.token_embedding(backbone(inputs),
reverse=True)``: the logits come from the backbone's ``ReversibleEmbedding`` called a second time on its
output. Its file keeps ``{"backbone": <record>, "preprocessor": ...}`` and, in model.weights.h5, the
backbone's weights under the backbone's name (``layers/llama_backbone/layers/...``); the head has no weights
of its own. So the task is the backbone's graph with that second call added (and whatever the family's
``head`` computes after it), nested under the backbone's name in a task of keras-hub's two inputs
(``padding_mask``, ``token_ids``); each weight stays where the file keeps it. A folder
``task.save_to_preset`` wrote holds the task in ``task.json`` and the backbone's weights at the root of
model.weights.h5: :func:`attnzoo.keras.files.read_keras_model` reads it with the backbone's layers found at
the root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attnzoo.errors import WeightsError

__all__ = [
    "HubGraph",
    "reverse_call_inside",
    "Ref",
    "Head",
    "positive",
    "number",
    "transformer_blocks",
    "encoder_settings",
    "Tensor",
    "norm_and_dropout",
    "first_token",
    "position_embedding",
    "task_backbone",
    "classifier_head",
    "causal_lm_graph",
    "SEQ2SEQ_INPUTS",
    "ENCODER_INPUTS",
    "DECODER_INPUTS",
    "backbone_record",
    "token_and_position_embedding",
    "token_and_position_encoder",
    "first_token_classifier",
    "task_over",
    "tensor",
    "GELU_TANH",
    "WEIGHTS_AT_ROOT",
]

# the mark of a layer record a builder places inside a nested backbone while the file keeps its weights at the
# outermost model's level (a masked LM's head, which calls the backbone's token embedding in reverse): the
# graph reader looks its weights up there. Never in a file Keras wrote.
WEIGHTS_AT_ROOT = "attnzoo_weights_at_root"

# keras-hub's tanh-approximated gelu, as its configs record the activation
GELU_TANH = {"module": "builtins", "class_name": "function", "config": "keras_hub>gelu_approximate"}


@dataclass(frozen=True)
class Ref:
    """Output ``index`` of call ``node`` of layer ``layer`` (a shared layer's later call)."""

    layer: str
    node: int = 0
    index: int = 0


Tensor = str | Ref
Builder = Callable[[dict[str, Any], str], dict[str, Any]]


def tensor(value: Tensor) -> dict[str, Any]:
    """A tensor argument as keras 3 records it (``__keras_tensor__`` with its history)."""
    ref = value if isinstance(value, Ref) else Ref(value)
    return {"class_name": "__keras_tensor__", "config": {"keras_history": [ref.layer, ref.node, ref.index]}}


def _history(value: Tensor) -> list[Any]:
    ref = value if isinstance(value, Ref) else Ref(value)
    return [ref.layer, ref.node, ref.index]


class HubGraph:
    """The layer records of one functional config, written in call order; ``dtype`` is the model's policy,
    recorded on every layer as keras-hub's layers carry it."""

    def __init__(self, dtype: Any) -> None:
        self.layers: list[dict[str, Any]] = []
        self.dtype = dtype

    def input(self, name: str, shape: list[Any] | None = None, dtype: str = "int32") -> str:
        config = {"batch_shape": [None, *(shape or [None])], "dtype": dtype, "name": name}
        self.layers.append({"class_name": "InputLayer", "name": name, "config": config, "inbound_nodes": []})
        return name

    def layer(
        self,
        class_name: str,
        name: str,
        config: dict[str, Any],
        args: list[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        registered: str | None = None,
        module: str = "keras.layers",
    ) -> str:
        """A new layer called once on ``args`` (tensors as :func:`tensor` records them) -> its output."""
        record = {
            "module": module,
            "class_name": class_name,
            "registered_name": registered,
            "name": name,
            "config": {"name": name, "dtype": self.dtype, **config},
            "inbound_nodes": [{"args": args, "kwargs": kwargs or {}}],
        }
        self.layers.append(record)
        return name

    def hub_layer(
        self, class_name: str, name: str, config: dict[str, Any], args: list[Any], module: str, **kwargs: Any
    ) -> str:
        """A keras-hub layer (``registered_name`` ``keras_hub>Class``) of ``module`` called once."""
        return self.layer(class_name, name, config, args, kwargs, registered=f"keras_hub>{class_name}", module=module)

    def operation(self, class_name: str, name: str, args: list[Any], config: dict[str, Any] | None = None) -> str:
        """A ``keras.ops`` operation (``keras.ops.tanh`` is ``Tanh`` of ``keras.src.ops.numpy``) called on
        ``args``, as keras 3 records an operation in a functional graph."""
        return self.layer(class_name, name, config or {}, args, registered=class_name, module="keras.src.ops.numpy")

    def call_again(self, layer: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> Ref:
        """One more call of the layer named ``layer`` (a shared layer) -> its output."""
        record = next((entry for entry in self.layers if entry.get("name") == layer), None)
        if record is None:
            raise WeightsError(f"the graph has no layer {layer!r} to call again")
        record["inbound_nodes"].append({"args": args, "kwargs": kwargs or {}})
        return Ref(layer, len(record["inbound_nodes"]) - 1)

    def nested(self, entry: Any, name: str, args: list[Any]) -> str:
        """A nested model's record (a keras-hub one is unwrapped where the graph reads it), called on ``args``."""
        if not isinstance(entry, dict):
            raise WeightsError(f"the nested model {name!r} is not a config record: {str(entry)[:80]}")
        self.layers.append({**entry, "name": name, "inbound_nodes": [{"args": args, "kwargs": {}}]})
        return name

    def functional(self, name: str, inputs: dict[str, str], outputs: Any) -> dict[str, Any]:
        """The ``Functional`` record: ``inputs`` a dict of input names (keras-hub's dict inputs), ``outputs``
        one tensor or a dict of them."""

        def ref(value: Any) -> Any:
            return {k: ref(v) for k, v in value.items()} if isinstance(value, dict) else _history(value)

        config = {"name": name, "layers": self.layers, "input_layers": ref(inputs), "output_layers": ref(outputs)}
        return {"class_name": "Functional", "config": config}


def task_over(built: dict[str, Any], nested: dict[str, Any], name: str, task: str) -> dict[str, Any]:
    """The ``Functional`` record ``task`` whose graph is the backbone ``built`` (its record) with the graph
    ``nested`` (the backbone's, with the task's head placed inside it: dict inputs), called as ``name`` on
    inputs of the same names; its output the nested graph's."""
    inputs = nested["config"]["input_layers"]
    outer = HubGraph(None)
    for key in sorted(inputs):
        outer.input(key)
    outer.nested({**built, "config": nested["config"]}, name, [{key: tensor(key) for key in sorted(inputs)}])
    # keras 3 counts a nested model's own node in its outputs: its first call is node 1
    return outer.functional(task, {key: key for key in inputs}, Ref(name, 1))


def positive(config: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    """``config[key]``, a positive int (``default`` where the key is absent)."""
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WeightsError(f"{where}: its config's {key} is {value!r}; a keras-hub model's is a positive int")
    return value


def number(config: dict[str, Any], key: str, where: str, default: float) -> float:
    """``config[key]``, a finite number >= 0 (``default`` where absent or None)."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise WeightsError(f"{where}: its config's {key} is {value!r}; a number >= 0")
    return float(value)


def transformer_blocks(
    g: HubGraph, x: str, config: dict[str, Any], where: str, activation: Any, epsilon: float, decoder: bool = False
) -> str:
    """``num_layers`` keras-hub ``TransformerEncoder`` layers (post-norm, masked by the ``padding_mask``
    input), or with ``decoder`` GPT-2's pre-norm ``TransformerDecoder`` layers without cross-attention
    (causal, masked by ``padding_mask`` as ``decoder_padding_mask``), named ``transformer_layer_<i>``."""
    settings = encoder_settings(config, where, activation, epsilon, decoder)
    kind = "TransformerDecoder" if decoder else "TransformerEncoder"
    module = f"keras_hub.src.layers.modeling.{'transformer_decoder' if decoder else 'transformer_encoder'}"
    mask = "decoder_padding_mask" if decoder else "padding_mask"
    for i in range(positive(config, "num_layers", where)):
        x = g.hub_layer(kind, f"transformer_layer_{i}", settings, [tensor(x)], module, **{mask: tensor("padding_mask")})
    return x


def encoder_settings(
    config: dict[str, Any], where: str, activation: Any, epsilon: float, decoder: bool = False
) -> dict[str, Any]:
    """The config of the config's keras-hub ``TransformerEncoder`` (or, ``decoder``, pre-norm
    ``TransformerDecoder``) layers: ``num_heads``, ``intermediate_dim``, ``dropout``, checked."""
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_heads", where)
    if hidden % heads:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of num_heads {heads}")
    return {
        "num_heads": heads,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "activation": activation,
        "dropout": number(config, "dropout", where, 0.0),
        "layer_norm_epsilon": epsilon,
        "normalize_first": decoder,
    }


def norm_and_dropout(g: HubGraph, x: str, epsilon: float, config: dict[str, Any], where: str) -> str:
    """The embeddings' ``LayerNormalization`` and ``Dropout`` (BERT, DistilBERT, RoBERTa)."""
    x = g.layer("LayerNormalization", "embeddings_layer_norm", {"axis": [-1], "epsilon": epsilon}, [tensor(x)])
    return g.layer("Dropout", "embeddings_dropout", {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])


def first_token(g: HubGraph, sequence: Tensor) -> str:
    """``sequence[:, 0, :]``, as keras 3 records the operation (the [CLS] / <s> token's state)."""
    every = {"class_name": "__slice__", "config": {"start": None, "stop": None, "step": None}}
    return g.operation("GetItem", "get_item", [tensor(sequence), [every, 0, every]])


def position_embedding(g: HubGraph, tokens: str, length: int) -> str:
    """keras-hub's ``PositionEmbedding(sequence_length=length)`` called on the token embeddings."""
    module = "keras_hub.src.layers.modeling.position_embedding"
    return g.hub_layer("PositionEmbedding", "position_embedding", {"sequence_length": length}, [tensor(tokens)], module)


def task_backbone(g: HubGraph, config: dict[str, Any], where: str, names: Sequence[str]) -> str:
    """A task model's inputs (``names``, the backbone's) and its backbone, a nested model called on them."""
    backbone = config.get("backbone")
    inner = backbone.get("config") if isinstance(backbone, dict) else None
    if not isinstance(inner, dict) or not isinstance(inner.get("name"), str):
        raise WeightsError(f"{where}: its config holds no backbone record")
    for name in sorted(names):
        g.input(name)
    return g.nested(backbone, inner["name"], [{name: tensor(name) for name in names}])


def classifier_head(g: HubGraph, x: str, config: dict[str, Any], where: str, dropout: str) -> dict[str, Any]:
    """The task's ``dropout`` layer, then ``Dense(num_classes, activation)`` named ``logits``: the task's
    functional record over every input the graph has."""
    x = g.layer("Dropout", dropout, {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])
    settings = {"units": positive(config, "num_classes", where), "activation": config.get("activation") or "linear"}
    x = g.layer("Dense", "logits", settings, [tensor(x)])
    inputs = {layer["name"]: layer["name"] for layer in g.layers if layer["class_name"] == "InputLayer"}
    return g.functional(str(config.get("name", "text_classifier")), inputs, x)


# what a family's causal LM computes after its logits: head(graph, logits, backbone_config) -> the output
Head = Callable[[HubGraph, Tensor, dict[str, Any]], Tensor]
_LM_INPUTS = ("padding_mask", "token_ids")
# an encoder-decoder backbone's inputs (BART's, T5's), as keras-hub names them: through a decoding the
# encoder's stay the same while the decoder's tokens grow
ENCODER_INPUTS = ("encoder_token_ids", "encoder_padding_mask")
DECODER_INPUTS = ("decoder_token_ids", "decoder_padding_mask")
SEQ2SEQ_INPUTS = ENCODER_INPUTS + DECODER_INPUTS


def _with_head(
    backbone: dict[str, Any],
    config: dict[str, Any],
    heads: tuple[Head | None, Head | None],
    where: str,
    embedding: str,
    output: str | None,
) -> dict[str, Any]:
    """The backbone's functional record (one output, or its dict's ``output``) with that output passed to
    ``heads[0]``, ``embedding(..., reverse=True)`` (the embedding layer's last call) and ``heads[1]``."""
    before, head = heads
    inner = backbone["config"]
    outputs = inner.get("output_layers")
    if output is not None and isinstance(outputs, dict):
        outputs = outputs.get(output)
    if not (isinstance(outputs, list) and len(outputs) == 3 and isinstance(outputs[0], str)):
        raise WeightsError(f"{where}: the backbone's graph has {outputs!r} as outputs; a causal LM's has one")
    g = HubGraph(config.get("dtype"))
    g.layers = inner["layers"]
    state: Tensor = Ref(outputs[0], outputs[1], outputs[2])
    if before is not None:
        state = before(g, state, config)
    logits: Tensor = g.call_again(embedding, [tensor(state)], {"reverse": True})
    if head is not None:
        logits = head(g, logits, config)
    return {**backbone, "config": {**inner, "output_layers": _history(logits)}}


def backbone_record(config: dict[str, Any], where: str, backbones: Sequence[str]) -> tuple[dict[str, Any], str, str]:
    """A task's nested backbone record, checked to be of one of the classes ``backbones``: its config, its
    name and its class (a backbone of another class is a ``WeightsError``)."""
    record = config.get("backbone")
    inner = record.get("config") if isinstance(record, dict) else None
    registered = record.get("registered_name") if isinstance(record, dict) else None
    if not isinstance(inner, dict) or registered not in {f"keras_hub>{name}" for name in backbones}:
        found = registered or (record.get("class_name") if isinstance(record, dict) else None)
        raise WeightsError(f"{where}: its backbone is {found!r}; attnzoo reads this task over a {backbones[0]}")
    name = inner.get("name")
    if not isinstance(name, str) or not name:
        raise WeightsError(f"{where}: its backbone has no name")
    return inner, name, str(registered).split(">")[-1]


def causal_lm_graph(
    backbones: Sequence[str],
    build_backbone: Builder,
    *,
    head: Head | None = None,
    before: Head | None = None,
    embedding: str = "token_embedding",
    inputs: Sequence[str] = _LM_INPUTS,
    output: str | None = None,
) -> Builder:
    """The builder of a ``<X>CausalLM`` over a Backbone of one of the classes ``backbones``: inputs
    ``padding_mask`` and ``token_ids`` -> the backbone (nested, under its own name) -> its
    ``token_embedding(state, reverse=True)`` -> ``head`` -> logits [B, T, vocabulary]. ``embedding``: the
    backbone's layer called again (OPT's token table is inside its ``embeddings``, a
    ``TokenAndPositionEmbedding``). A task record whose backbone is of another class is a ``WeightsError``.
    A ``<X>Seq2SeqLM`` is the same over its backbone's ``inputs`` (:data:`SEQ2SEQ_INPUTS`) and the state
    of its dict's ``output`` (``decoder_sequence_output``); ``before`` computes on that state before the
    reverse call (T5's tied head scales it)."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        inner, name, kind = backbone_record(config, where, backbones)
        built = build_backbone(inner, f"{where}: {kind}")
        nested = _with_head(built, inner, (before, head), where, embedding, output)
        g = HubGraph(config.get("dtype"))
        for key in sorted(inputs):
            g.input(key)
        g.nested(nested, name, [{key: tensor(key) for key in sorted(inputs)}])
        # keras 3 counts a nested model's own node in its outputs: its first call is node 1
        return g.functional(str(config.get("name") or "causal_lm"), {key: key for key in inputs}, Ref(name, 1))

    return build


def token_and_position_embedding(
    g: HubGraph, tokens: str, config: dict[str, Any], where: str, name: str, length: int
) -> str:
    """keras-hub's tied ``TokenAndPositionEmbedding`` ``name`` of the config's ``vocabulary_size``,
    ``max_sequence_length`` (``length`` where absent) and ``hidden_dim``, called on ``tokens``."""
    embedding = {
        "vocabulary_size": positive(config, "vocabulary_size", where),
        "sequence_length": positive(config, "max_sequence_length", where, length),
        "embedding_dim": positive(config, "hidden_dim", where),
        "tie_weights": True,
        "mask_zero": False,
    }
    module = "keras_hub.src.layers.modeling.token_and_position_embedding"
    return g.hub_layer("TokenAndPositionEmbedding", name, embedding, [tensor(tokens)], module)


def token_and_position_encoder(embedding_name: str, epsilon: float) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """The backbone of DistilBERT (``embedding_name`` ``token_and_position_embedding``, ε 1e-12) and RoBERTa
    (``embeddings``, 1e-5): token ids, padding mask -> one ``TokenAndPositionEmbedding`` -> layer norm and
    dropout -> post-norm ``TransformerEncoder`` layers (exact gelu) -> [B, T, D]."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        g = HubGraph(config.get("dtype"))
        tokens, padding = g.input("token_ids"), g.input("padding_mask")
        x = token_and_position_embedding(g, tokens, config, where, embedding_name, 512)
        x = norm_and_dropout(g, x, epsilon, config, where)
        x = transformer_blocks(g, x, config, where, "gelu", epsilon)
        return g.functional(str(config.get("name", "backbone")), {"token_ids": tokens, "padding_mask": padding}, x)

    return build


def first_token_classifier(pooled_dropout: bool, activation: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """DistilBERT's (``pooled_dropout`` False, relu) and RoBERTa's (True, tanh) text classifiers: the
    backbone's sequence at the first token -> [``pooled_dropout``] -> ``pooled_dense`` (``hidden_dim``, else
    the backbone's) -> ``output_dropout`` -> ``logits``."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        g = HubGraph(config.get("dtype"))
        x = first_token(g, task_backbone(g, config, where, ("token_ids", "padding_mask")))
        if pooled_dropout:
            x = g.layer("Dropout", "pooled_dropout", {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])
        hidden = config.get("hidden_dim") or positive(config["backbone"]["config"], "hidden_dim", where)
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise WeightsError(f"{where}: its config's hidden_dim is {hidden!r}; a positive int or None")
        x = g.layer("Dense", "pooled_dense", {"units": hidden, "activation": activation}, [tensor(x)])
        return classifier_head(g, x, config, where, "output_dropout")

    return build


def reverse_call_inside(record: dict[str, Any], where: str, unwrap: Callable[[Any, str], Any]) -> dict[str, Any]:
    """keras-hub's graph of a task whose output is its nested backbone's own layer called again on the
    backbone's output (a causal LM's ``token_embedding(x, reverse=True)``), with that call placed inside the
    backbone's graph, where the layer and its weights are (:func:`task_over`); any other record as it is.
    ``unwrap``: :func:`~attnzoo.keras.hub_families.unwrap`, which gives a keras-hub model's graph."""

    layers, output = record["config"]["layers"], record["config"]["output_layers"]
    last = next((x for x in layers if isinstance(output, list) and x.get("name") == output[0]), None)
    nodes = (last or {}).get("inbound_nodes") or []
    args = nodes[0].get("args") if len(nodes) == 1 else None
    if not isinstance(args, list) or len(args) != 1 or not isinstance(args[0], dict):
        return record
    history = (args[0].get("config") or {}).get("keras_history")
    backbone = next((x for x in layers if isinstance(history, list) and x.get("name") == history[0]), None)
    entry = {k: v for k, v in (backbone or {}).items() if k != "inbound_nodes"}
    built = unwrap(entry, where) if backbone is not None else entry
    if built is entry:  # no keras-hub model: nothing of a backbone's to place the call in
        return record
    body = built["config"]
    if not any(x.get("name") == last["name"] for x in body["layers"]):  # type: ignore[index]
        return record
    outputs = body["output_layers"]
    flat = [outputs[key] for key in sorted(outputs)] if isinstance(outputs, dict) else [outputs]
    g = HubGraph(None)
    g.layers = body["layers"]
    x = g.call_again(last["name"], [tensor(Ref(*flat[history[2]]))], nodes[0].get("kwargs"))  # type: ignore[index]
    inputs = {key: value[0] for key, value in body["input_layers"].items()}
    return task_over(built, g.functional(backbone["name"], inputs, x), backbone["name"], record["config"]["name"])
