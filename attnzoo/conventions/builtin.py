"""The built-in calling conventions (shared/DESIGN.md "Calling conventions"), one :class:`Convention` each,
and :class:`KerasInputs`, the convention of a converted Keras model, whose inputs its graph declares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnzoo.conventions.base import Convention, Slot

__all__ = ["BUILTIN", "KerasInputs", "TORCH_INTEGERS"]

_FEATURE = ("hidden_size", "embed_dim", "input_size", "dim", "in_features", "d_model")
_SEQ = (Slot("x", "float", ("batch", "keys", "feature")), Slot("mask", "mask", ("batch", "keys"), keyword=True))
_TOKENS = (
    Slot("tokens", "tokens", ("batch", "keys"), vocab="vocab"),
    Slot("mask", "mask", ("batch", "keys"), keyword=True),
)

BUILTIN = [
    Convention(
        "sequence_to_labels",
        _SEQ,
        outputs=(("batch", "*"),),
        weights=("batch", "*", "keys"),
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> logits [B, L] (+ A [B, L, T])",
    ),
    Convention(
        "sequence_to_vector",
        _SEQ,
        outputs=(("batch", "..."),),
        weights=("batch", "...", "keys"),
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> pooled [B, ...] (+ A [B, ..., T])",
    ),
    Convention(
        "sequence_to_sequence",
        _SEQ,
        outputs=(("batch", "keys", "*"),),
        weights=("batch", "...", "keys", "keys"),
        keyed_output=True,
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> [B, T, D] (+ A [B, ..., T, T])",
    ),
    Convention(
        "query_key",
        (
            Slot("query", "float", ("batch", "queries", "query_feature")),
            Slot("key", "float", ("batch", "keys", "key_feature")),
            Slot("value", "float", ("batch", "keys", "value_feature"), keyword=True),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "value_feature"),),
        weights=("batch", "queries", "keys"),
        attention="always",
        size_keys={"query_feature": ("query_size",), "key_feature": ("key_size",), "value_feature": ("value_size",)},
        defaults={"query_feature": 16, "key_feature": 16, "value_feature": 10},
        free=("value_feature",),
        description="query [B, Tq, Fq], key [B, T, Fk], value [B, T, Fv], mask [B, T] -> (context, A [B, Tq, T])",
    ),
    Convention(
        "decoder_encoder",
        (
            Slot("decoder_out", "float", ("batch", "queries", "decoder_feature")),
            Slot("encoder_out", "float", ("batch", "keys", "encoder_feature")),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "queries", "keys"),
        attention="always",
        size_keys={"decoder_feature": ("decoder_size",), "encoder_feature": ("encoder_size",)},
        defaults={"decoder_feature": 16, "encoder_feature": 12},
        description="decoder_out [B, Tq, Fd], encoder_out [B, T, Fe], mask [B, T] -> (out [B, Tq, H], A [B, Tq, T])",
    ),
    Convention(
        "cross_attention",
        (
            Slot("x", "float", ("batch", "queries", "feature")),
            Slot("context", "float", ("batch", "keys", "context_feature"), keyword=True),
            Slot("context_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "...", "queries", "keys"),
        size_keys={"feature": _FEATURE, "context_feature": ("context_dim",)},
        defaults={"feature": 16, "context_feature": 12},
        description="x [B, Tq, F], context [B, T, C], context_mask [B, T] -> [B, Tq, D] (+ A [B, ..., Tq, T])",
    ),
    Convention(
        "keras_query_value",
        (
            Slot("query", "float", ("batch", "queries", "feature")),
            Slot("value", "float", ("batch", "keys", "feature")),
            Slot("value_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "feature"),),
        weights=("batch", "queries", "keys"),
        size_keys={"feature": ("dim",)},
        defaults={"feature": 16},
        description="query [B, Tq, F], value [B, T, F], value_mask [B, T] -> [B, Tq, F] (+ A [B, Tq, T])",
    ),
    Convention(
        "keras_mha",
        (
            Slot("query", "float", ("batch", "queries", "query_feature")),
            Slot("value", "float", ("batch", "keys", "value_feature")),
            Slot("value_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "*", "queries", "keys"),
        size_keys={"query_feature": ("query_size",), "value_feature": ("value_size", "key_size")},
        defaults={"query_feature": 16, "value_feature": 12},
        description="query [B, Tq, Fq], value [B, T, Fv], value_mask [B, T] -> [B, Tq, D] (+ A [B, h, Tq, T])",
    ),
    Convention(
        "tokens_to_labels",
        _TOKENS,
        outputs=(("batch", "*"),),
        weights=("batch", "...", "keys"),
        size_keys={"vocab": ("vocab_size", "num_tokens")},
        defaults={"vocab": 50},
        description="tokens [B, T] (0 = padding), mask [B, T] -> logits [B, L] (+ A [B, ..., T])",
    ),
    Convention(
        "tokens_to_tokens",
        (
            Slot("source", "tokens", ("batch", "keys"), vocab="source_vocab"),
            Slot("target_in", "tokens", ("batch", "queries"), vocab="target_vocab"),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "target_vocab"),),
        weights=("batch", "queries", "keys"),
        size_keys={
            "source_vocab": ("num_letters", "source_vocab_size", "vocab_size"),
            "target_vocab": ("num_phonemes", "target_vocab_size", "vocab_size"),
        },
        defaults={"source_vocab": 20, "target_vocab": 12},
        description="source [B, T], target_in [B, Tq], mask [B, T] -> logits [B, Tq, V] (+ A [B, Tq, T])",
    ),
    Convention(
        "image_to_labels",
        (
            Slot("x", "float", ("batch", "channels", "height", "keys")),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "*"),),
        weights=("batch", "..."),
        size_keys={"channels": ("in_chans", "in_channels", "channels")},
        defaults={"channels": 3, "height": 32},
        seq=64,
        description="x [B, C, H, W], mask [B, W] over frames -> logits [B, L] (+ weights)",
    ),
    Convention(
        "image_to_image",
        (Slot("x", "float", ("batch", "channels", "height", "keys")),),
        outputs=(("batch", "channels", "height", "keys"),),
        attention="none",
        size_keys={"channels": ("channels", "in_channels", "in_chans")},
        defaults={"channels": 8, "height": 6},
        description="x [B, C, H, W] -> [B, C, H, W]",
    ),
]


# documents: ``keys`` is the sentence axis. A padded document has whole padded sentences at its end (the
# padded sentence is all padded words), which exercises both levels of a hierarchical model's masks.
BUILTIN.append(
    Convention(
        "documents_to_labels",
        (
            Slot("tokens", "tokens", ("batch", "keys", "words"), vocab="vocab"),
            Slot("mask", "mask", ("batch", "keys", "words"), keyword=True),
        ),
        outputs=(("batch", "*"),),
        weights=("batch", "..."),
        size_keys={"vocab": ("vocab_size",)},
        defaults={"vocab": 50, "words": 5},
        description="tokens [B, S, W], mask [B, S, W] -> logits [B, L] (+ weights)",
    )
)


# Keras's integer dtypes as torch's; the unsigned ones torch computes little with go as int64
TORCH_INTEGERS = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8"}


@dataclass
class KerasInputs(Convention):
    """A converted Keras model (``keras_model``): its inputs are the ones its graph declares, in order,
    positionally: integer ids of the Keras input's dtype (below the vocabulary of the Embedding that reads
    them), bool masks (a ``dtype="bool"`` input: True = keep) or floats, with Keras's shapes. A length
    Keras left open is the ``keys`` axis; fixed sizes are kept. There is no mask argument beyond the
    model's own bool inputs: when every input is read by an ``Embedding(mask_zero=True)`` or a
    ``Masking(0.0)``, the padding is in band (ids 0, zero vectors) and the padding properties run on it;
    the Keras semantics of masks are tested against Keras itself."""

    def for_config(self, config: Mapping[str, Any] | None) -> Convention:
        from attnzoo.keras.inputs import value_rules  # what each input's values are (ids, a padding mask)
        from attnzoo.keras.nodes import INTEGER_DTYPES  # the graph's own table of Keras's integer dtypes

        graph = (config or {}).get("graph") if isinstance(config, Mapping) else None
        inputs = graph.get("inputs") if isinstance(graph, Mapping) else None
        if not isinstance(inputs, (list, tuple)) or not inputs:  # a card's example is frozen into tuples
            return self
        slots, defaults = [], {}
        rules = value_rules(graph)
        for i, spec in enumerate(inputs):
            shape = list(spec.get("shape") or [None])
            axes = ["batch"]
            for j, size in enumerate(shape[1:], start=1):
                if size is None and j == 1:
                    axes.append("keys")
                else:
                    axis = f"in{i}_axis{j}"
                    axes.append(axis)
                    defaults[axis] = size if isinstance(size, int) else 4
            dtype = str(spec.get("dtype"))
            vocab = f"in{i}_vocab"
            if dtype in INTEGER_DTYPES:  # ids below their table; a padding mask's "ids" are 1 (and 0 at padding)
                rule = rules[i]
                defaults[vocab] = rule.high if rule is not None else 10
            name = str(spec.get("name") or f"input_{i}")
            kind = "tokens" if dtype in INTEGER_DTYPES else ("mask" if dtype == "bool" else "float")
            integer = TORCH_INTEGERS.get(dtype, "int64") if kind == "tokens" else ""
            slots.append(Slot(name, kind, tuple(axes), vocab=vocab if kind == "tokens" else "", dtype=integer))
        outputs = tuple(("batch", "...") for _ in graph.get("outputs") or [None])
        return Convention(
            self.name,
            tuple(slots),
            outputs=outputs,
            attention="none",
            defaults=defaults,
            free=tuple(a for a in defaults if a.endswith("_vocab")),
            seq=self.seq,
            description=self.description,
            in_band=all("keys" in slot.axes for slot in slots) and _masked_in_band(graph),
        )


def _masked_in_band(graph: Mapping[str, Any]) -> bool:
    """Every input of the graph is read by an ``Embedding(mask_zero=True)`` or a ``Masking(0.0)`` (keras 3
    also records the mask's own ``not_equal`` on it)."""
    layers, calls = graph.get("layers") or {}, graph.get("calls") or []
    for spec in graph.get("inputs") or []:
        readers = [layers.get(c.get("layer") or "") for c in calls if c.get("args") and _reads(c, spec.get("id"))]
        if not any(
            isinstance(layer, Mapping)
            and (
                (layer.get("op") == "masking" and layer.get("mask_value", 0.0) == 0.0)
                or (layer.get("op") == "embedding" and layer.get("mask_zero"))
            )
            for layer in readers
        ):
            return False
    return True


def _reads(call: Mapping[str, Any], call_id: Any) -> bool:
    first = call["args"][0]
    return isinstance(first, Mapping) and list(first.get("ref") or []) == [call_id, 0]


BUILTIN.append(
    KerasInputs(
        "keras_inputs",
        (),
        outputs=(("batch", "..."),),
        attention="none",
        seq=5,
        description="the inputs a converted Keras model's graph declares, positionally -> its outputs",
    )
)
