"""keras-hub's common modelling layers, converted without keras-hub: TransformerEncoder, TransformerDecoder,
TokenAndPositionEmbedding, PositionEmbedding and SinePositionEncoding.

They register like every family, through ``@keras_layer(..., package="keras_hub")``: attnzoo's own
converters, tried after ``custom_layers=`` and before any plugin's. Each is registered under
keras-hub's own name only (``keras_hub>TransformerEncoder``): a model's own class that shares a bare
name (keras-io's ``TokenAndPositionEmbedding``) stays a custom layer. The nodes are attnzoo's, built of
its Keras nodes (``dense``, ``layer_norm``) and its ``keras_mha`` layer, so a saved folder rebuilds them.

Masks follow keras-hub under keras 3: an encoder's self-attention masks the keys by ``padding_mask``
(else the input's Keras mask), merged with ``attention_mask``, and, because the inner
``MultiHeadAttention`` reads the Keras mask of the tensor it is given, the padded queries as well; that
inner call also deletes the input tensor's mask when ``normalize_first=False`` (keras 3's
MultiHeadAttention does). A decoder's ``CachedMultiHeadAttention`` reads no Keras masks: its
self-attention is masked by the decoder's padding mask and the causal mask, its cross-attention by the
encoder's padding mask (else the encoder sequence's Keras mask).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnzoo.core import create
from attnzoo.errors import AttnzooError
from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.importer import load_keras_arrays
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.layers.core import check_tokens
from attnzoo.layers.kv_cache import DecodingCache

__all__ = [
    "HubBlock",
    "merge_masks",
    "dense_state",
    "norm_state",
    "HubTransformerEncoder",
    "HubTransformerDecoder",
    "HubTokenAndPositionEmbedding",
    "HubPositionEmbedding",
    "HubSinePositionEncoding",
]

_MHA_CHILDREN = ("query_dense", "key_dense", "value_dense", "output_dense")


def _mha_order(name: str) -> tuple[str, ...]:
    return (name, *(f"{name}/{child}" for child in _MHA_CHILDREN))


def _attention(num_heads: int, hidden: int, query: int, value: int, dropout: float) -> Any:
    config = {
        "num_heads": num_heads,
        "key_dim": hidden // num_heads,
        "value_dim": hidden // num_heads,
        "dropout": dropout,
        "query_size": query,
        "value_size": value,
        "key_size": value,
        "keras_semantics": 3,
    }
    return create("keras_mha", config=config)


def _bool(mask: Any) -> Tensor | None:
    return mask.bool() if isinstance(mask, Tensor) else None


def merge_masks(implicit: Any, padding_mask: Any, attention_mask: Any) -> Tensor | None:
    """keras-hub's ``merge_padding_and_attention_mask``: the padding mask (else the implicit Keras mask)
    over the keys [B, 1, S], and with ``attention_mask`` [B, T, S] both."""
    mask = _bool(padding_mask) if isinstance(padding_mask, Tensor) else _bool(implicit)
    merged = None if mask is None else mask[:, None, :]
    given = _bool(attention_mask)
    if given is not None:
        merged = given if merged is None else merged & given
    return merged


def _full(mask: Tensor | None, query: Tensor, value: Tensor) -> Tensor | None:
    """A [B or 1, T or 1, S] mask as the [B, T, S] the attention layer takes."""
    return None if mask is None else mask.expand(query.shape[0], query.shape[1], value.shape[1])


class HubBlock(Node):
    """What keras-hub's two transformer layers share: the feed-forward part and its norms."""

    def _feedforward(self, x: Tensor) -> Tensor:
        residual = x
        if self.normalize_first:
            x = self._norm("feedforward_norm", x)
        (x,), _ = self.intermediate([x], {}, [None])
        (x,), _ = self.output_dense([x], {}, [None])
        x = x + residual
        return x if self.normalize_first else self._norm("feedforward_norm", x)

    def _norm(self, name: str, x: Tensor) -> Tensor:
        """The layer norm ``name`` over the last axis (keras 3's ``ops.layer_normalization`` on torch is
        ``F.layer_norm``), in float32 at least as the node computes."""
        norm = getattr(self, name)
        if x.dtype in (torch.float16, torch.bfloat16):
            (y,), _ = norm([x], {}, [None])
            return y
        return nn.functional.layer_norm(x, norm.shape, norm.weight, norm.bias, norm.epsilon)

    def _build(self, hidden: int, intermediate_dim: int, activation: str, epsilon: float, norms: list[str]) -> None:
        for name in norms:
            spec = {"op": "layer_norm", "axis": [-1], "shape": [hidden], "epsilon": epsilon}
            setattr(self, name, build_node({**spec, "center": True, "scale": True}))
        self.intermediate = build_node(
            {"op": "dense", "units": intermediate_dim, "in_features": hidden, "activation": activation}
        )
        self.output_dense = build_node({"op": "dense", "units": hidden, "in_features": intermediate_dim})


class HubTransformerEncoder(HubBlock):
    """``keras_hub.layers.TransformerEncoder``: x [B, T, D] -> self-attention (+ residual, layer norm) ->
    feed-forward (+ residual, layer norm) -> [B, T, D]; ``normalize_first`` puts each norm before its
    sub-layer. The output keeps the input's mask."""

    op = "keras_hub_transformer_encoder"
    supports_masking = True

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        activation: str = "relu",
        layer_norm_epsilon: float = 1e-5,
        normalize_first: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.normalize_first = normalize_first
        self.attention = _attention(num_heads, hidden, hidden, hidden, dropout)
        self._build(hidden, intermediate_dim, activation, layer_norm_epsilon, ["attention_norm", "feedforward_norm"])
        # keras 3's MultiHeadAttention deletes the mask of the tensor it is called on: the input itself here
        self.clears_input_masks = not normalize_first

    def forward(self, args, kwargs, masks):
        x, mask = args[0], _bool(masks[0])
        merged = merge_masks(mask, kwargs.get("padding_mask"), kwargs.get("attention_mask"))
        residual = x
        if self.normalize_first:
            x = self._norm("attention_norm", x)
        x = self.attention(x, x, attention_mask=_full(merged, x, x), query_mask=mask, value_mask=mask)
        x = x + residual
        if not self.normalize_first:
            x = self._norm("attention_norm", x)
        return [self._feedforward(x)], [mask]


class HubTransformerDecoder(HubBlock):
    """``keras_hub.layers.TransformerDecoder``: decoder x [B, T, D] (and encoder sequence [B, S, E]) ->
    causal self-attention, cross-attention to the encoder sequence, feed-forward, each with its residual
    and layer norm -> [B, T, D]. The output keeps the decoder input's mask."""

    op = "keras_hub_transformer_decoder"
    supports_masking = True
    decodes = True

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        encoder_dim: int | None = None,
        activation: str = "relu",
        layer_norm_epsilon: float = 1e-5,
        normalize_first: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.normalize_first, self.cross = normalize_first, encoder_dim is not None
        self.attention = _attention(num_heads, hidden, hidden, hidden, dropout)
        norms = ["attention_norm", "feedforward_norm"]
        if encoder_dim is not None:
            self.cross_attention = _attention(num_heads, hidden, hidden, encoder_dim, dropout)
            norms.append("cross_attention_norm")
        self._build(hidden, intermediate_dim, activation, layer_norm_epsilon, norms)

    def _sublayer(
        self, name: str, x: Tensor, value: Tensor | None, mask: Tensor | None, cache: DecodingCache | None
    ) -> Tensor:
        """One attention sublayer with its residual and norm. While decoding (``cache``, the model's
        :class:`~attnzoo.layers.kv_cache.DecodingCache`) the self-attention keeps its keys and values there
        and the cross-attention the encoder sequence's, projected on the first call."""
        residual = x
        if self.normalize_first:
            x = self._norm(f"{name}_norm", x)
        if value is None and cache is not None:  # the call's tokens follow the cached ones, causally
            x = self.attention(x, x, cache=cache.keys_values(self.attention, x.shape[0]), use_causal_mask=True)
        elif value is not None and cache is not None:  # the encoder's keys and values, kept
            held = cache.keys_values(self.cross_attention, x.shape[0])
            x = self.cross_attention(x, value, attention_mask=_full(mask, x, value), context_cache=held)
        else:
            value = x if value is None else value
            x = getattr(self, name)(x, value, attention_mask=_full(mask, x, value))
        x = x + residual
        return x if self.normalize_first else self._norm(f"{name}_norm", x)

    def forward(self, args, kwargs, masks):
        x, own = args[0], _bool(masks[0])
        encoder = args[1] if len(args) > 1 else kwargs.get("encoder_sequence")
        if (encoder is not None) != self.cross:
            raise ValueError("is called with a different number of sequences than it was built with")
        cache = kwargs.get("cache")
        if cache is not None:  # decoding: no decoder padding, causal over the cache (attnzoo.keras.decoding)
            x = self._sublayer("attention", x, None, None, cache)
        else:
            mask = merge_masks(own, kwargs.get("decoder_padding_mask"), kwargs.get("decoder_attention_mask"))
            if kwargs.get("use_causal_mask", True):
                t = x.shape[1]
                causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None]
                mask = causal if mask is None else mask & causal
            x = self._sublayer("attention", x, None, mask, None)
        if encoder is not None:
            encoder_mask = masks[1] if len(masks) > 1 else kwargs.get("kwarg_masks", {}).get("encoder_sequence")
            cross = merge_masks(
                _bool(encoder_mask), kwargs.get("encoder_padding_mask"), kwargs.get("encoder_attention_mask")
            )
            x = self._sublayer("cross_attention", x, encoder, cross, cache)
        return [self._feedforward(x)], [own]


class _Positions(Node):
    """A node that reads positions: while decoding (:mod:`attnzoo.keras.decoding`, given the model's
    :class:`~attnzoo.layers.kv_cache.DecodingCache`) a call's positions start after the ones it was given
    before (plus the call's own ``start_index``)."""

    reads_positions = True

    def _start(self, kwargs: dict[str, Any], length: int, batch: int | None) -> int:
        """The first of the call's ``length`` positions, for ``batch`` sequences (None: x has no batch axis)."""
        cache, offset = kwargs.get("cache"), int(kwargs.get("start_index", 0) or 0)
        if cache is None:
            return offset
        limit = self.position_limit()  # refused (past the table, another batch) before the cache counts them
        return offset + cache.positions(self, length, None if limit is None else limit - offset, batch=batch)

    def position_limit(self) -> int | None:
        """How many positions the node encodes (its table's length; None where any)."""
        table = getattr(self, "position", None)
        return None if table is None else int(table.shape[0])


class HubTokenAndPositionEmbedding(_Positions):
    """``keras_hub.layers.TokenAndPositionEmbedding``: ids [B, T] -> ``token[ids] + position[start:start +
    T]`` [B, T, D] (T at most ``sequence_length``); with ``mask_zero`` the mask is ``ids != 0``. Called with
    ``reverse=True`` on x [B, T, D] it is its inner ``token_embedding``'s reverse call, as a causal LM over
    it (OPT's) computes its logits: ``x @ tokenᵀ`` (or the untied ``reverse`` table [D, V]) [B, T, V], no
    mask."""

    op = "keras_hub_token_and_position_embedding"
    ids_below, casts_to_ids = "input_dim", True

    def __init__(
        self,
        *,
        input_dim: int,
        sequence_length: int,
        output_dim: int,
        mask_zero: bool = False,
        tie_weights: bool = True,
    ) -> None:
        super().__init__()
        self.mask_zero = mask_zero
        self.token = nn.Parameter(torch.empty(input_dim, output_dim))
        self.position = nn.Parameter(torch.empty(sequence_length, output_dim))
        self.reverse = None if tie_weights else nn.Parameter(torch.empty(output_dim, input_dim))
        nn.init.uniform_(self.token, -0.05, 0.05)
        nn.init.uniform_(self.position, -0.05, 0.05)

    def forward(self, args, kwargs, masks):
        ids = args[0]
        if kwargs.get("reverse"):
            kernel = self.token.t() if self.reverse is None else self.reverse
            return [torch.matmul(ids, kernel.to(ids.dtype))], [None]
        check_tokens("token_and_position_embedding", ids, self.token.shape[0], arg="input", rank=2)
        positions = _positions(self.position, ids.shape[1], self._start(kwargs, ids.shape[1], ids.shape[0]))
        out = nn.functional.embedding(ids.long(), self.token) + positions
        return [out], [ids != 0 if self.mask_zero else None]


def _positions(table: Tensor, length: int, start: Any) -> Tensor:
    start = int(start or 0)
    if start < 0 or start + length > table.shape[0]:
        raise ValueError(
            f"positions {start}..{start + length - 1} are past the position table's sequence_length "
            f"{table.shape[0]}; pass at most {table.shape[0] - start} steps"
        )
    return table[start : start + length]


class HubPositionEmbedding(_Positions):
    """``keras_hub.layers.PositionEmbedding``: x [..., T, D] -> ``position[start:start + T]`` broadcast to
    x's shape (the embeddings alone, not added to x); no mask."""

    op = "keras_hub_position_embedding"

    def __init__(self, *, sequence_length: int, output_dim: int) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.empty(sequence_length, output_dim))
        nn.init.uniform_(self.position, -0.05, 0.05)

    def forward(self, args, kwargs, masks):
        x = args[0]
        start = self._start(kwargs, x.shape[-2], x.shape[0] if x.dim() > 2 else None)
        positions = _positions(self.position, x.shape[-2], start)
        return [positions.to(x.dtype).expand(x.shape).contiguous()], [None]  # a copy: not a view of the table


class HubSinePositionEncoding(_Positions):
    """``keras_hub.layers.SinePositionEncoding``: x [..., T, D] -> ``PE[t, j] = sin(t·w_j)`` for even j,
    ``cos(t·w_j)`` for odd j, ``w_j = max_wavelength^(-2·floor(j / 2) / D)``, broadcast to x's shape; no
    mask."""

    op = "keras_hub_sine_position_encoding"

    def __init__(self, *, max_wavelength: float = 10000.0) -> None:
        super().__init__()
        self.max_wavelength = float(max_wavelength)

    def forward(self, args, kwargs, masks):
        x = args[0]
        length, hidden = x.shape[-2], x.shape[-1]
        start = self._start(kwargs, length, x.shape[0] if x.dim() > 2 else None)
        positions = torch.arange(start, start + length, device=x.device, dtype=torch.float32)
        exponents = (2 * (torch.arange(hidden, device=x.device) // 2)).to(torch.float32) / hidden
        timescales = torch.pow(torch.tensor(1.0 / self.max_wavelength, device=x.device), exponents)
        angles = positions[:, None] * timescales[None, :]
        odd = (torch.arange(hidden, device=x.device) % 2).bool()
        encoding = torch.where(odd, torch.cos(angles), torch.sin(angles))
        return [encoding.to(x.dtype).expand(x.shape)], [None]


# -- converters (the one protocol) -----------------------------------------------------------------------
def dense_state(kernel: np.ndarray, bias: np.ndarray, prefix: str) -> dict[str, Tensor]:
    return {f"{prefix}.weight": as_tensor(kernel.T), f"{prefix}.bias": as_tensor(bias)}


def _mha_state(module: Any, arrays: list[np.ndarray], prefix: str, where: str) -> dict[str, Tensor]:
    try:
        load_keras_arrays(module, [a.copy() for a in arrays], where=where)
    except (ValueError, AttnzooError) as e:
        raise Refused(str(e)) from None
    return {f"{prefix}.{k}": v.detach().float() for k, v in module.state_dict().items()}


def _block_config(c: dict[str, Any], ctx: Any) -> dict[str, Any]:
    for key in ("intermediate_dim", "num_heads"):
        if not isinstance(c.get(key), int) or c[key] < 1:
            raise Refused(f"{key} {c.get(key)!r} is not a positive int")
    return {
        "intermediate_dim": c["intermediate_dim"],
        "num_heads": c["num_heads"],
        "activation": activation_of(c, "activation", ctx, "relu"),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-5)),
        "normalize_first": bool(c.get("normalize_first", False)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }


def norm_state(arrays: list[np.ndarray], prefix: str) -> dict[str, Tensor]:
    return {f"{prefix}.weight": as_tensor(arrays[0]), f"{prefix}.bias": as_tensor(arrays[1])}


_DECODER_ARGUMENTS = (
    "encoder_sequence",
    "decoder_padding_mask",
    "decoder_attention_mask",
    "encoder_padding_mask",
    "encoder_attention_mask",
    "use_causal_mask",
)
_NORMS = ("_self_attention_layer_norm", "_feedforward_layer_norm")
_FEEDFORWARD = ("_feedforward_intermediate_dense", "_feedforward_output_dense")


@keras_layer(
    "TransformerEncoder",
    package="keras_hub",
    call_arguments=("padding_mask", "attention_mask"),
    child_order=(*_mha_order("_self_attention_layer"), *_NORMS, *_FEEDFORWARD),
    positional=("inputs",),  # keras-io's TransformerEncoder(...)(inputs=x)
)
def convert_transformer_encoder(record, arrays, ctx):
    expect_variables(arrays, 16, "TransformerEncoder")
    hidden = arrays[0].shape[0]
    spec = {"op": "keras_hub_transformer_encoder", "hidden": hidden, **_block_config(record.config, ctx)}
    if hidden % spec["num_heads"]:
        raise Refused(f"hidden size {hidden} is not a multiple of num_heads {spec['num_heads']}")
    node = build_node(spec)
    state = _mha_state(node.attention, arrays[:8], "attention", "TransformerEncoder's self-attention")
    state.update(norm_state(arrays[8:10], "attention_norm") | norm_state(arrays[10:12], "feedforward_norm"))
    state.update(dense_state(*arrays[12:14], "intermediate") | dense_state(*arrays[14:16], "output_dense"))
    return Converted(spec, state, ["keras-hub TransformerEncoder: keras_mha, dense and layer_norm nodes"])


@keras_layer(
    "TransformerDecoder",
    package="keras_hub",
    call_arguments=_DECODER_ARGUMENTS,
    positional=("decoder_sequence", "encoder_sequence"),  # keras-io's (decoder_sequence=x, encoder_sequence=y)
    child_order=(
        *_mha_order("_self_attention_layer"),
        "_self_attention_layer_norm",
        *_mha_order("_cross_attention_layer"),
        "_cross_attention_layer_norm",
        *_FEEDFORWARD,
        "_feedforward_layer_norm",
    ),
)
def convert_transformer_decoder(record, arrays, ctx):
    expect_variables(arrays, (16, 26), "TransformerDecoder (without, with cross-attention)")
    hidden, cross = arrays[0].shape[0], len(arrays) == 26
    spec = {"op": "keras_hub_transformer_decoder", "hidden": hidden, **_block_config(record.config, ctx)}
    spec["encoder_dim"] = int(arrays[12].shape[0]) if cross else None  # the cross-attention's key kernel
    if hidden % spec["num_heads"]:
        raise Refused(f"hidden size {hidden} is not a multiple of num_heads {spec['num_heads']}")
    node = build_node(spec)
    state = _mha_state(node.attention, arrays[:8], "attention", "TransformerDecoder's self-attention")
    state.update(norm_state(arrays[8:10], "attention_norm"))
    at = 10
    if cross:
        state.update(_mha_state(node.cross_attention, arrays[10:18], "cross_attention", "its cross-attention"))
        state.update(norm_state(arrays[18:20], "cross_attention_norm"))
        at = 20
    state.update(
        dense_state(*arrays[at : at + 2], "intermediate") | dense_state(*arrays[at + 2 : at + 4], "output_dense")
    )
    state.update(norm_state(arrays[at + 4 : at + 6], "feedforward_norm"))
    return Converted(spec, state, ["keras-hub TransformerDecoder: keras_mha, dense and layer_norm nodes"])


@keras_layer(
    "TokenAndPositionEmbedding",
    package="keras_hub",
    call_arguments=("start_index", "reverse"),
    child_order=("token_embedding", "position_embedding"),
    positional=("inputs",),
)
def convert_token_and_position_embedding(record, arrays, ctx):
    c = record.config
    expect_variables(arrays, (2, 3), "TokenAndPositionEmbedding (tokens, [reverse,] positions)")
    token, position = arrays[0], arrays[-1]
    if token.ndim != 2 or position.ndim != 2 or token.shape[1] != position.shape[1]:
        raise Refused(f"token table {list(token.shape)} and position table {list(position.shape)} do not fit")
    tied = len(arrays) == 2
    if not tied and list(arrays[1].shape) != [token.shape[1], token.shape[0]]:
        raise Refused(f"reverse table {list(arrays[1].shape)} is not the token table's transpose shape")
    spec = {
        "op": "keras_hub_token_and_position_embedding",
        "input_dim": token.shape[0],
        "sequence_length": position.shape[0],
        "output_dim": token.shape[1],
        "mask_zero": bool(c.get("mask_zero", False)),
        "tie_weights": tied,
    }
    state = {"token": as_tensor(token), "position": as_tensor(position)}
    if not tied:
        state["reverse"] = as_tensor(arrays[1])
    return Converted(spec, state)


@keras_layer("PositionEmbedding", package="keras_hub", call_arguments=("start_index",), positional=("inputs",))
def convert_position_embedding(record, arrays, ctx):
    expect_variables(arrays, 1, "PositionEmbedding")
    table = arrays[0]
    if table.ndim != 2:
        raise Refused(f"position table {list(table.shape)} is not 2-D")
    spec = {"op": "keras_hub_position_embedding", "sequence_length": table.shape[0], "output_dim": table.shape[1]}
    return Converted(spec, {"position": as_tensor(table)})


@keras_layer("SinePositionEncoding", package="keras_hub", call_arguments=("start_index",), positional=("inputs",))
def convert_sine_position_encoding(record, arrays, ctx):
    expect_variables(arrays, 0, "SinePositionEncoding")
    wavelength = record.config.get("max_wavelength", 10000)
    if not isinstance(wavelength, (int, float)) or not math.isfinite(wavelength) or wavelength <= 0:
        raise Refused(f"max_wavelength {wavelength!r} is not a positive number")
    return Converted({"op": "keras_hub_sine_position_encoding", "max_wavelength": float(wavelength)}, {})
