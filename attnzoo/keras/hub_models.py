"""keras-hub's Backbones as the functional graphs they are, rebuilt from the arguments their files keep.

A keras-hub Backbone is a ``keras.Model`` subclass that builds a functional graph in its ``__init__``; its
``get_config`` (what ``model.save`` writes into ``config.json``) keeps only the constructor's arguments
(``vocabulary_size``, ``num_layers``, ...), never the layers or calls. The weights file, though, holds each
layer under its own name, as for any functional model. So each Backbone attnzoo knows has a builder here
that writes, from those arguments, the functional config keras 3 itself writes for
``keras.Model(backbone.inputs, backbone.outputs)``: the same layer names, classes, configs and calls. The
graph reader (:mod:`attnzoo.keras.graph`) then reads it as any functional model, and the layers convert
through their families (``ReversibleEmbedding``, ``keras_hub>TransformerEncoder``, ...).

:func:`unwrap` is the one entry: a config record of a keras-hub model class in :data:`BUILDERS` becomes a
``Functional`` record; any other record is returned as it is.

* ``BertBackbone``: token ids, segment ids, padding mask (dict inputs) -> ``token_embedding`` (tied
  ``ReversibleEmbedding``) + ``position_embedding`` + ``segment_embedding`` -> layer norm (eps 1e-12) ->
  ``num_layers`` post-norm ``TransformerEncoder`` (gelu_approximate, masked by ``padding_mask``) ->
  ``sequence_output`` [B, T, D] and ``pooled_output = tanh(dense(sequence_output[:, 0, :]))`` [B, D].
* ``BertTextClassifier``: its ``BertBackbone`` (a nested model) -> ``pooled_output`` -> dropout ->
  ``Dense(num_classes)`` ``logits`` [B, num_classes].
* ``DistilBertTextClassifier`` / ``RobertaTextClassifier``: the backbone's state at the first token ->
  ``pooled_dense`` (relu / tanh, RoBERTa's after a dropout) -> dropout -> ``logits``.
* ``DistilBertBackbone`` / ``RobertaBackbone``: token ids, padding mask -> ``TokenAndPositionEmbedding`` ->
  layer norm (1e-12 / 1e-5) -> post-norm encoders (exact gelu) -> [B, T, D].
* ``GPT2Backbone``: token ids, padding mask -> ``token_embedding`` + ``position_embedding`` -> pre-norm
  causal ``TransformerDecoder`` layers (gelu_approximate, eps 1e-5, ``decoder_padding_mask``) -> final
  ``layer_norm`` -> [B, T, D].
* ``GPT2CausalLM``: its ``GPT2Backbone`` -> ``token_embedding(state, reverse=True)`` logits [B, T, vocabulary]
  (:mod:`attnzoo.keras.hub_causal` says how).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.hub_causal import causal_lm

__all__ = ["unwrap", "BUILDERS", "is_keras_hub_model"]


_GELU_TANH = {"module": "builtins", "class_name": "function", "config": "keras_hub>gelu_approximate"}


def _tensor(layer: str) -> dict[str, Any]:
    return {"class_name": "__keras_tensor__", "config": {"keras_history": [layer, 0, 0]}}


class _Graph:
    """The layer records of one functional config, written in call order."""

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

    def nested(self, entry: Any, name: str, args: list[Any]) -> str:
        """A nested model's record (a keras-hub one is unwrapped where the graph reads it), called on ``args``."""
        if not isinstance(entry, dict):
            raise WeightsError(f"the nested model {name!r} is not a config record: {str(entry)[:80]}")
        self.layers.append({**entry, "name": name, "inbound_nodes": [{"args": args, "kwargs": {}}]})
        return name

    def functional(self, name: str, inputs: dict[str, str], outputs: Any) -> dict[str, Any]:
        def ref(value: Any) -> Any:
            return [value, 0, 0] if isinstance(value, str) else {k: ref(v) for k, v in value.items()}

        config = {"name": name, "layers": self.layers, "input_layers": ref(inputs), "output_layers": ref(outputs)}
        return {"class_name": "Functional", "config": config}


def _positive(config: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WeightsError(f"{where}: its config's {key} is {value!r}; a keras-hub backbone's is a positive int")
    return value


def _blocks(
    g: _Graph, x: str, config: dict[str, Any], where: str, activation: Any, epsilon: float, decoder: bool = False
) -> str:
    """``num_layers`` ``TransformerEncoder`` layers (post-norm, masked by the ``padding_mask`` input), or with
    ``decoder`` GPT-2's pre-norm ``TransformerDecoder`` layers without cross-attention (causal, and masked by
    ``padding_mask`` as ``decoder_padding_mask``), named ``transformer_layer_<i>``."""
    hidden, heads = _positive(config, "hidden_dim", where), _positive(config, "num_heads", where)
    if hidden % heads:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of num_heads {heads}")
    settings = {
        "num_heads": heads,
        "intermediate_dim": _positive(config, "intermediate_dim", where),
        "activation": activation,
        "dropout": float(config.get("dropout", 0.0) or 0.0),
        "layer_norm_epsilon": epsilon,
        "normalize_first": decoder,
    }
    kind = "TransformerDecoder" if decoder else "TransformerEncoder"
    mask = "decoder_padding_mask" if decoder else "padding_mask"
    for i in range(_positive(config, "num_layers", where)):
        x = g.layer(
            kind,
            f"transformer_layer_{i}",
            settings,
            [_tensor(x)],
            {mask: _tensor("padding_mask")},
            registered=f"keras_hub>{kind}",
            module=f"keras_hub.src.layers.modeling.{'transformer_decoder' if decoder else 'transformer_encoder'}",
        )
    return x


def _norm_and_dropout(g: _Graph, x: str, epsilon: float, config: dict[str, Any]) -> str:
    x = g.layer("LayerNormalization", "embeddings_layer_norm", {"axis": [-1], "epsilon": epsilon}, [_tensor(x)])
    rate = float(config.get("dropout", 0.0) or 0.0)
    return g.layer("Dropout", "embeddings_dropout", {"rate": rate}, [_tensor(x)])


def _first_token(g: _Graph, sequence: str) -> str:
    """``sequence[:, 0, :]``, as keras 3 records the operation (the [CLS] / <s> token's state)."""
    every = {"class_name": "__slice__", "config": {"start": None, "stop": None, "step": None}}
    return g.layer(
        "GetItem",
        "get_item",
        {},
        [_tensor(sequence), [every, 0, every]],
        registered="GetItem",
        module="keras.src.ops.numpy",
    )


def _position_embedding(g: _Graph, tokens: str, length: int) -> str:
    """keras-hub's ``PositionEmbedding(sequence_length=length)`` called on the token embeddings."""
    return g.layer(
        "PositionEmbedding",
        "position_embedding",
        {"sequence_length": length},
        [_tensor(tokens)],
        registered="keras_hub>PositionEmbedding",
        module="keras_hub.src.layers.modeling.position_embedding",
    )


def _bert(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = _Graph(config.get("dtype"))
    vocabulary, hidden = _positive(config, "vocabulary_size", where), _positive(config, "hidden_dim", where)
    tokens, segments, padding = g.input("token_ids"), g.input("segment_ids"), g.input("padding_mask")
    embedding = {"input_dim": vocabulary, "output_dim": hidden, "tie_weights": True, "mask_zero": False}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [_tensor(tokens)])
    length = _positive(config, "max_sequence_length", where, 512)
    p = _position_embedding(g, t, length)
    segment = {"input_dim": _positive(config, "num_segments", where, 2), "output_dim": hidden, "mask_zero": False}
    s = g.layer("Embedding", "segment_embedding", segment, [_tensor(segments)])
    x = g.layer("Add", "embeddings_add", {}, [[_tensor(t), _tensor(p), _tensor(s)]])
    x = _norm_and_dropout(g, x, 1e-12, config)
    sequence = _blocks(g, x, config, where, _GELU_TANH, 1e-12)
    first = _first_token(g, sequence)
    pooled = g.layer("Dense", "pooled_dense", {"units": hidden, "activation": "tanh"}, [_tensor(first)])
    inputs = {"token_ids": tokens, "segment_ids": segments, "padding_mask": padding}
    outputs = {"sequence_output": sequence, "pooled_output": pooled}
    return g.functional(str(config.get("name", "bert_backbone")), inputs, outputs)


def _gpt2(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = _Graph(config.get("dtype"))
    hidden = _positive(config, "hidden_dim", where)
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    embedding = {"input_dim": _positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [_tensor(tokens)])
    length = _positive(config, "max_sequence_length", where, 1024)
    p = _position_embedding(g, t, length)
    x = g.layer("Add", "embeddings_add", {}, [[_tensor(t), _tensor(p)]])
    x = g.layer("Dropout", "embeddings_dropout", {"rate": float(config.get("dropout", 0.0) or 0.0)}, [_tensor(x)])
    x = _blocks(g, x, config, where, _GELU_TANH, 1e-5, decoder=True)
    x = g.layer("LayerNormalization", "layer_norm", {"axis": [-1], "epsilon": 1e-5}, [_tensor(x)])
    return g.functional(str(config.get("name", "gpt2_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)


def _llama(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``LlamaBackbone``: token ids, padding mask -> ``token_embedding`` (``ReversibleEmbedding``, untied
    unless ``tie_word_embeddings``) -> ``num_layers`` ``LlamaTransformerDecoder`` layers (masked by
    ``padding_mask`` as ``decoder_padding_mask``) -> ``sequence_output_layernorm`` (RMSNorm) -> [B, T, D]."""
    g = _Graph(config.get("dtype"))
    hidden, heads = _positive(config, "hidden_dim", where), _positive(config, "num_query_heads", where)
    groups = _positive(config, "num_key_value_heads", where)
    if hidden % heads or heads % groups:
        raise WeightsError(
            f"{where}: hidden_dim {hidden}, {heads} query heads and {groups} key/value heads do not divide"
        )
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    tied = bool(config.get("tie_word_embeddings", False))
    embedding = {"input_dim": _positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": tied}
    x = g.layer("ReversibleEmbedding", "token_embedding", embedding, [_tensor(tokens)])
    epsilon = float(config.get("layer_norm_epsilon", 1e-6))
    settings = {key: config.get(key) for key in config if key.startswith("rope_")}
    settings.update(
        intermediate_dim=_positive(config, "intermediate_dim", where),
        num_query_heads=heads,
        num_key_value_heads=groups,
        layer_norm_epsilon=epsilon,
        dropout=float(config.get("dropout", 0.0) or 0.0),
    )
    for i in range(_positive(config, "num_layers", where)):
        x = g.layer(
            "LlamaTransformerDecoder",
            f"transformer_layer_{i}",
            settings,
            [_tensor(x)],
            {"decoder_padding_mask": _tensor("padding_mask")},
            registered="keras_hub>LlamaTransformerDecoder",
            module="keras_hub.src.models.llama.llama_decoder",
        )
    x = g.layer(
        "LlamaLayerNorm",
        "sequence_output_layernorm",
        {"epsilon": epsilon},
        [_tensor(x)],
        registered="keras_hub>LlamaLayerNorm",
        module="keras_hub.src.models.llama.llama_layernorm",
    )
    return g.functional(str(config.get("name", "llama_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)


def _vit(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``ViTBackbone``: images [B, H, W, C] -> ``vit_patching_and_embedding`` (patches, class token,
    positions) -> ``vit_encoder`` (pre-norm blocks, final layer norm) -> [B, N (+1), D]."""
    g = _Graph(config.get("dtype"))
    shape, patch = config.get("image_shape"), config.get("patch_size")
    patch = [patch, patch] if isinstance(patch, int) else patch
    if config.get("data_format") not in (None, "channels_last"):
        raise WeightsError(f"{where}: data_format {config.get('data_format')!r}; attnzoo converts channels_last only")
    ok = isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)
    if not ok or not isinstance(patch, list) or len(patch) != 2 or not all(isinstance(v, int) and v > 0 for v in patch):
        raise WeightsError(f"{where}: image_shape {shape!r} and patch_size {patch!r} are not positive ints")
    hidden = _positive(config, "hidden_dim", where)
    images = g.input("images", list(shape), "float32")
    embedding = {"image_size": shape[:2], "patch_size": patch, "hidden_dim": hidden, "num_channels": shape[2]}
    embedding |= {key: config.get(key, True) for key in ("use_class_token", "use_patch_bias")}
    module = "keras_hub.src.models.vit.vit_layers"
    x = g.layer(
        "ViTPatchingAndEmbedding",
        "vit_patching_and_embedding",
        embedding,
        [_tensor(images)],
        registered="keras_hub>ViTPatchingAndEmbedding",
        module=module,
    )
    encoder = {key: config.get(key) for key in ("num_layers", "num_heads", "mlp_dim", "layer_norm_epsilon")}
    encoder |= {key: config.get(key, True) for key in ("use_mha_bias", "use_mlp_bias")}
    encoder |= {key: config.get(key, 0.0) for key in ("dropout_rate", "attention_dropout")}
    x = g.layer(
        "ViTEncoder",
        "vit_encoder",
        {"hidden_dim": hidden, **encoder},
        [_tensor(x)],
        registered="keras_hub>ViTEncoder",
        module=module,
    )
    return g.functional(str(config.get("name", "vit_backbone")), {"images": images}, x)


def _task_backbone(g: _Graph, config: dict[str, Any], where: str, names: tuple[str, ...]) -> str:
    """A task model's inputs (``names``, the backbone's) and its backbone, a nested model called on them."""
    backbone = config.get("backbone")
    inner = backbone.get("config") if isinstance(backbone, dict) else None
    if not isinstance(inner, dict) or not isinstance(inner.get("name"), str):
        raise WeightsError(f"{where}: its config holds no backbone record")
    for name in sorted(names):
        g.input(name)
    return g.nested(backbone, inner["name"], [{name: _tensor(name) for name in names}])


def _head(g: _Graph, x: str, config: dict[str, Any], where: str, dropout: str) -> dict[str, Any]:
    """The task's ``dropout`` layer, then ``Dense(num_classes, activation)`` named ``logits``."""
    x = g.layer("Dropout", dropout, {"rate": float(config.get("dropout", 0.0) or 0.0)}, [_tensor(x)])
    settings = {"units": _positive(config, "num_classes", where), "activation": config.get("activation") or "linear"}
    x = g.layer("Dense", "logits", settings, [_tensor(x)])
    inputs = {layer["name"]: layer["name"] for layer in g.layers if layer["class_name"] == "InputLayer"}
    return g.functional(str(config.get("name", "text_classifier")), inputs, x)


def _bert_classifier(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``BertTextClassifier``: the backbone's inputs -> its ``pooled_output`` (the first of its outputs by
    sorted key) -> dropout -> ``Dense(num_classes, activation)`` named ``logits``. Its ``preprocessor`` (the
    tokenizer) is no part of the graph."""
    g = _Graph(config.get("dtype"))
    backbone = _task_backbone(g, config, where, ("token_ids", "segment_ids", "padding_mask"))
    return _head(g, backbone, config, where, "classifier_dropout")


def _first_token_classifier(pooled_dropout: bool, activation: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """DistilBERT's (``pooled_dropout`` False, relu) and RoBERTa's (True, tanh) text classifiers: the backbone's
    sequence at the first token -> [``pooled_dropout``] -> ``pooled_dense`` (``hidden_dim``, else the
    backbone's) -> ``output_dropout`` -> ``logits``."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        g = _Graph(config.get("dtype"))
        x = _first_token(g, _task_backbone(g, config, where, ("token_ids", "padding_mask")))
        if pooled_dropout:
            x = g.layer("Dropout", "pooled_dropout", {"rate": float(config.get("dropout", 0.0) or 0.0)}, [_tensor(x)])
        backbone = config["backbone"]["config"]
        hidden = config.get("hidden_dim") or _positive(backbone, "hidden_dim", where)
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise WeightsError(f"{where}: its config's hidden_dim is {hidden!r}; a positive int or None")
        x = g.layer("Dense", "pooled_dense", {"units": hidden, "activation": activation}, [_tensor(x)])
        return _head(g, x, config, where, "output_dropout")

    return build


def _token_and_position(embedding_name: str, epsilon: float) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """DistilBERT's and RoBERTa's backbone: one ``TokenAndPositionEmbedding``, then as BERT's encoders."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        g = _Graph(config.get("dtype"))
        tokens, padding = g.input("token_ids"), g.input("padding_mask")
        embedding = {
            "vocabulary_size": _positive(config, "vocabulary_size", where),
            "sequence_length": _positive(config, "max_sequence_length", where, 512),
            "embedding_dim": _positive(config, "hidden_dim", where),
            "tie_weights": True,
            "mask_zero": False,
        }
        x = g.layer(
            "TokenAndPositionEmbedding",
            embedding_name,
            embedding,
            [_tensor(tokens)],
            registered="keras_hub>TokenAndPositionEmbedding",
            module="keras_hub.src.layers.modeling.token_and_position_embedding",
        )
        x = _norm_and_dropout(g, x, epsilon, config)
        x = _blocks(g, x, config, where, "gelu", epsilon)
        return g.functional(str(config.get("name", "backbone")), {"token_ids": tokens, "padding_mask": padding}, x)

    return build


# keras-hub's registered name -> the builder of its functional config from its constructor arguments
BUILDERS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "keras_hub>BertBackbone": _bert,
    "keras_hub>BertTextClassifier": _bert_classifier,
    "keras_hub>DistilBertTextClassifier": _first_token_classifier(False, "relu"),
    "keras_hub>RobertaTextClassifier": _first_token_classifier(True, "tanh"),
    "keras_hub>DistilBertBackbone": _token_and_position("token_and_position_embedding", 1e-12),
    "keras_hub>RobertaBackbone": _token_and_position("embeddings", 1e-5),
    "keras_hub>GPT2Backbone": _gpt2,
    "keras_hub>LlamaBackbone": _llama,
    "keras_hub>ViTBackbone": _vit,
    "keras_hub>GPT2CausalLM": causal_lm("GPT2Backbone", _gpt2),
    "keras_hub>LlamaCausalLM": causal_lm("LlamaBackbone", _llama),
}


def is_keras_hub_model(entry: Any) -> bool:
    """Whether a config record is of a keras-hub model class (a Backbone or task model: its class named as
    keras-hub names them, in a module under ``keras_hub.src.models``, or registered as one of
    :data:`BUILDERS`), not of a layer: its tokenizers, preprocessors and converters, and the layers a model
    family defines beside its models (``LlamaTransformerDecoder`` in ``keras_hub.src.models.llama``)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        return False
    module, registered = str(entry.get("module") or ""), entry.get("registered_name")
    if isinstance(registered, str) and registered in BUILDERS:
        return True
    return module.startswith("keras_hub.src.models") and entry["class_name"].endswith(_MODELS)


# the endings of keras-hub's Backbone and task class names (GPT2Backbone, GPT2CausalLM, BertTextClassifier,
# DeepLabV3ImageSegmenter, RetinaNetObjectDetector, ...)
_MODELS = ("Backbone", "LM", "Classifier", "Segmenter", "Detector", "ToImage", "Inpaint", "Estimator", "ToText")


def unwrap(entry: Any, where: str) -> Any:
    """A keras-hub model's config record as the ``Functional`` record of its graph (its ``name`` kept);
    any other record as it is. A keras-hub model class with no builder here is a ``WeightsError`` saying
    which classes convert and how to save one that does not."""
    if not is_keras_hub_model(entry):
        return entry
    registered = entry.get("registered_name") or f"keras_hub>{entry.get('class_name')}"
    config = entry.get("config")
    if not isinstance(config, dict):
        raise WeightsError(f"{where}: keras-hub's {registered} has no config")
    build = BUILDERS.get(registered)
    if build is None:
        known = ", ".join(name.split(">", 1)[1] for name in BUILDERS)
        raise WeightsError(
            f"{where}: keras-hub's {entry.get('class_name')!r} is a functional model, but its file keeps only its "
            f"constructor's arguments, and attnzoo rebuilds the graphs of {known} only. Save its graph instead: "
            f"keras.Model(model.inputs, model.outputs).save('model.keras'), then convert that file"
        )
    rebuilt = build(config, f"{where}: {entry.get('class_name')}")
    return {**rebuilt, "name": config.get("name", entry.get("name"))}
