"""Decoding a converted keras-hub causal LM token by token on attnzoo's KV cache: :func:`generate`
(``KerasModel.generate``), and the protocol its nodes follow.

Which models decode: those converted from a keras-hub task registered as a causal LM or an encoder-decoder
LM (:func:`causal_lms`: a family's ``causal_lm`` or ``seq2seq_lm``, :mod:`attnzoo.keras.hub_families`;
``graph["keras_hub_class"]``, written by the conversion, names it). A causal LM's inputs are keras-hub's
``token_ids`` and ``padding_mask``; an encoder-decoder LM's ``encoder_token_ids``, ``encoder_padding_mask``,
``decoder_token_ids`` and ``decoder_padding_mask``, given to :func:`generate` as that dict, the decoder's
tokens being the prompt. Their one output is the logits [B, T, vocabulary]. Any other model's ``generate`` is
a ``ConfigError`` naming the classes that decode.

The KV cache is passed explicitly, as transformers passes ``past_key_values``: :func:`generate` makes one
:class:`~attnzoo.layers.kv_cache.DecodingCache` and gives it to every model call as ``cache=``; the emitted
``forward`` (``model.code`` shows it) passes it on, as ``cache=cache``, to each layer whose node class
``decodes`` (its output at a position depends on other positions, attention, or on the position itself, a
position embedding). Such a layer keeps its own state there under its own identity: its keys and values
(``cache.keys_values(layer, batch)``, a :class:`~attnzoo.layers.kv_cache.KVCache`; a window's keeps its w
latest), how many positions it was given (``cache.positions(layer, T)``), and what it computes once (a
cross-attention's keys of the encoder's output). Given the cache, a layer takes the call's T tokens as the
positions after the ones it cached, appends their keys and values and attends causally over all it holds;
without it, it computes the whole sequence. Nodes that compute each position alone (Dense, LayerNorm,
Embedding, a ReversibleEmbedding's reverse call) take no cache. The calls :func:`generate` makes with the
cache have no padding (see below), so a layer given one may ignore the padding mask it is given. A node that
gives positions from a table of its own says how many in :meth:`~attnzoo.keras.nodes.Node.position_limit`,
which :func:`generate` reads to refuse too long a sequence before decoding; one that computes every position
of a sequence past some length otherwise (Phi-3's su rope) says which in
:meth:`~attnzoo.keras.nodes.Node.recomputed_past`, and :func:`generate` runs the whole sequence again on a new
cache where the length crosses it.

An encoder-decoder LM's encoder inputs are the same at every call: the layers that compute from them alone,
once per call (:func:`~attnzoo.keras.inputs.encoder_calls`, read off the graph), are given no cache (they
compute their whole sequence) and, while :func:`generate` decodes, give their first call's output again
(:func:`_computed_once`), so the encoder runs once; a decoder layer's cross-attention keeps the keys and
values of the encoder's output it was first given.

Padding is keras-hub's (``CausalLM.generate``): prompts padded on the right (``padding_mask`` 1 then 0, as
keras-hub's preprocessors pad); decoding starts at the shortest prompt's length, and at each later
position a row keeps its own prompt's token where ``padding_mask`` is 1, the chosen token elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnzoo.errors import ConfigError
from attnzoo.keras.hub_families import hub_models
from attnzoo.keras.hub_graph import DECODER_INPUTS, ENCODER_INPUTS
from attnzoo.keras.inputs import check_values, encoder_calls, input_names, value_rules
from attnzoo.keras.nodes import Node
from attnzoo.layers.kv_cache import DecodingCache

__all__ = ["causal_lms", "generate"]


def causal_lms() -> list[str]:
    """The keras-hub task classes whose converted graphs decode (every node in them that mixes positions
    takes part), sorted: the families' causal LMs and encoder-decoder LMs, attnzoo's and the plugins'."""
    return sorted(name for name, model in hub_models().items() if model.kind in ("causal_lm", "seq2seq_lm"))


@contextmanager
def _computed_once(fixed: tuple[nn.Module, ...]) -> Iterator[None]:
    """While the block runs, each layer of ``fixed`` (called once per model call on inputs that stay the same
    through the block: an encoder's) computes on its first call and gives that output again after."""
    try:
        for node in fixed:
            node.forward = _once(node.forward)  # type: ignore[method-assign]
        yield
    finally:
        for node in fixed:
            node.__dict__.pop("forward", None)


def _once(forward: Any) -> Any:
    kept: list[Any] = []

    def once(*args: Any, **kwargs: Any) -> Any:
        if not kept:
            kept.append(forward(*args, **kwargs))
        return kept[0]

    return once


def _check_model(model: Any) -> str:
    graph = getattr(model, "graph", None)
    kind = graph.get("keras_hub_class") if isinstance(graph, dict) else None
    decoding = causal_lms()
    names = ", ".join(decoding)
    if kind not in decoding:
        what = f"a keras-hub {kind}" if kind else f"the Keras model {str(graph.get('name', '?'))[:60]!r}"
        raise ConfigError(
            f"generate decodes converted keras-hub causal LMs ({names}); this model is {what}, which does "
            f"not decode token by token. Convert the task's file (model.save or save_to_preset of the "
            f"{names}) instead of its backbone's"
        )
    inputs = [spec["name"] for spec in model.inputs_spec]
    expected = sorted((*ENCODER_INPUTS, *DECODER_INPUTS) if hub_models()[kind].kind == "seq2seq_lm" else _LM)
    if sorted(inputs) != expected:
        raise ConfigError(f"generate: a {kind} takes {', '.join(expected)}; this graph takes {inputs}")
    return hub_models()[kind].kind


_LM = ("token_ids", "padding_mask")


def _seq2seq_inputs(ids: Any, padding_mask: Any, device: torch.device) -> tuple[Any, Any, dict[str, Tensor]]:
    """An encoder-decoder LM's ``ids``, the dict of keras-hub's inputs (``encoder_token_ids``,
    ``decoder_token_ids``, and optionally their padding masks) -> the decoder's prompt ids and padding mask,
    and the encoder's inputs, fixed while decoding (the encoder's padding mask ones where not given)."""
    if (
        not isinstance(ids, dict)
        or not {ENCODER_INPUTS[0], DECODER_INPUTS[0]} <= set(ids)
        or set(ids) - {*ENCODER_INPUTS, *DECODER_INPUTS}
    ):
        got = sorted(ids) if isinstance(ids, dict) else type(ids).__name__
        raise ValueError(
            f"generate of an encoder-decoder LM takes ids as the dict of keras-hub's inputs: encoder_token_ids and "
            f"decoder_token_ids (the prompt), and optionally encoder_padding_mask and decoder_padding_mask; got {got}"
        )
    if padding_mask is not None:
        raise ValueError("generate of an encoder-decoder LM takes its padding masks in the ids dict, not padding_mask")
    encoder = _ids(ids[ENCODER_INPUTS[0]], device)
    mask = ids.get(ENCODER_INPUTS[1])
    if mask is None:
        mask = torch.ones_like(encoder)
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(np.ascontiguousarray(mask))
    if not isinstance(mask, Tensor) or list(mask.shape) != list(encoder.shape):
        shape = list(mask.shape) if isinstance(mask, (Tensor, np.ndarray)) else type(mask).__name__
        raise ValueError(
            f"generate expects encoder_padding_mask of encoder_token_ids' shape {list(encoder.shape)}, got {shape}"
        )
    fixed = {ENCODER_INPUTS[0]: encoder, ENCODER_INPUTS[1]: mask.to(device=device, dtype=torch.int32)}
    return ids[DECODER_INPUTS[0]], ids.get(DECODER_INPUTS[1]), fixed


def _fixed_layers(model: Any) -> tuple[nn.Module, ...]:
    """The layers of an encoder-decoder LM every call of which computes from the encoder's inputs alone
    (:func:`~attnzoo.keras.inputs.encoder_calls`): the encoder's, whose output no decoding step changes."""
    fixed, calls = encoder_calls(model.graph), {}
    for call in model.calls:
        if call["layer"] is not None:
            calls.setdefault(call["layer"], []).append(call["id"] in fixed)
    return tuple(model.layers[key] for key, each in calls.items() if all(each))


def _ids(ids: Any, device: torch.device) -> Tensor:
    if isinstance(ids, np.ndarray):
        ids = torch.from_numpy(np.ascontiguousarray(ids))
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.is_complex():
        shape = list(ids.shape) if isinstance(ids, (Tensor, np.ndarray)) else type(ids).__name__
        raise ValueError(f"generate expects ids as integer token ids [batch, T], got {shape}")
    if ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"generate expects at least one prompt of at least one token, got ids {list(ids.shape)}")
    return ids.to(device=device, dtype=torch.long)


def _padding(mask: Any, ids: Tensor) -> Tensor:
    if mask is None:
        return torch.ones_like(ids, dtype=torch.bool)
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(np.ascontiguousarray(mask))
    if not isinstance(mask, Tensor) or list(mask.shape) != list(ids.shape):
        shape = list(mask.shape) if isinstance(mask, (Tensor, np.ndarray)) else type(mask).__name__
        raise ValueError(f"generate expects padding_mask of the ids' shape {list(ids.shape)}, got {shape}")
    mask = mask.to(ids.device) != 0
    left = (~mask[:, :-1] & mask[:, 1:]).any(dim=1)  # a padded position before a real one
    if bool(left.any()):
        row = int(left.nonzero()[0, 0])
        raise ValueError(
            f"generate takes prompts padded on the right (padding_mask 1 then 0, as keras-hub's preprocessors "
            f"pad them); row {row} has padding before a real token. Pad it on the right"
        )
    if not bool(mask[:, 0].all()):
        raise ValueError("generate expects every prompt to hold at least one token (padding_mask[:, 0] == 1)")
    return mask


def _generator(seed: int | torch.Generator | None, device: torch.device) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if seed is None or (isinstance(seed, int) and not isinstance(seed, bool)):
        generator = torch.Generator(device=device)
        generator.manual_seed(torch.seed() if seed is None else seed)
        return generator
    raise ValueError(f"generate expects seed as an int or a torch.Generator, got {type(seed).__name__}")


def _sampler(
    top_k: int | None, top_p: float | None, temperature: float, seed: int | torch.Generator | None, device: Any
) -> Any:
    """``pick(logits [B, V]) -> ids [B]``: the argmax (neither ``top_k`` nor ``top_p``: greedy), or a draw
    from ``softmax(logits / temperature)`` restricted to the ``top_k`` likeliest tokens, then to the fewest
    likeliest whose probabilities (renormalised over those kept) sum to at least ``top_p`` (the token that
    crosses ``top_p`` kept, as keras-hub's TopPSampler and transformers do), by ``seed``'s generator."""
    if top_k is None and top_p is None:
        return lambda logits: logits.argmax(dim=-1)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"generate expects top_k as a positive int (or None for greedy decoding), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"generate expects top_p as a number in (0, 1] (or None), got {top_p!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"generate expects temperature as a positive number, got {temperature!r}")
    generator = _generator(seed, device)

    def pick(logits: Tensor) -> Tensor:
        count = logits.shape[-1] if top_k is None else min(top_k, logits.shape[-1])
        values, indices = logits.float().topk(count, dim=-1)  # sorted, likeliest first
        probabilities = torch.softmax(values / float(temperature), dim=-1)
        if top_p is not None:
            before = probabilities.cumsum(dim=-1) - probabilities  # the mass of the likelier tokens
            probabilities = probabilities.masked_fill(before >= top_p, 0.0)  # the first always stays
        drawn = torch.multinomial(probabilities, 1, generator=generator)
        return indices.gather(-1, drawn)[:, 0]

    return pick


def _stop_ids(stop_token_ids: Any, device: torch.device) -> Tensor | None:
    if stop_token_ids is None:
        return None
    ids = [stop_token_ids] if isinstance(stop_token_ids, int) else stop_token_ids
    if (
        not isinstance(ids, (list, tuple))
        or not ids
        or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids)
    ):
        raise ValueError(f"generate expects stop_token_ids as a token id or a list of them, got {stop_token_ids!r}")
    return torch.tensor(list(ids), dtype=torch.long, device=device)


def _pad_id(pad_token_id: Any, vocabulary: int | None) -> int:
    """``pad_token_id`` checked: after its stop token a row holds it, and is fed it at the steps that follow
    (while other rows decode), so it must be an id of the token table (``vocabulary`` rows; None: unknown)."""
    bad = isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) or pad_token_id < 0
    if bad or (vocabulary is not None and pad_token_id >= vocabulary):
        table = "" if vocabulary is None else f" in [0, {vocabulary}), the vocabulary"
        raise ValueError(
            f"generate expects pad_token_id as a token id{table}, got {pad_token_id!r}: a row that stopped holds "
            f"it and the model reads it at the steps after"
        )
    return pad_token_id


def _check_positions(model: Any, needed: int) -> None:
    """Refuse, before decoding, a total length past what a node of the model can give positions to (a
    position table's length: ``position_limit()`` of its modules, None where unbounded)."""
    limits = [m.position_limit() for m in model.modules() if isinstance(m, Node)]
    bounded = [limit for limit in limits if limit is not None]
    if bounded and needed > min(bounded):
        raise ValueError(
            f"generate needs positions 0..{needed - 1}, past the position table's sequence_length {min(bounded)}; "
            f"the prompt and the new tokens together may be at most {min(bounded) + 1} tokens"
        )


def generate(
    model: Any,
    ids: Any,
    max_new_tokens: int,
    *,
    padding_mask: Any = None,
    top_k: int | None = None,
    top_p: float | None = None,
    temperature: float = 1.0,
    seed: int | torch.Generator | None = None,
    stop_token_ids: int | list[int] | None = None,
    pad_token_id: int = 0,
    use_cache: bool = True,
) -> Tensor:
    """``ids`` [B, T] (token ids, right-padded where ``padding_mask`` [B, T] is 0; an encoder-decoder LM's: the
    dict of its inputs, the decoder's tokens the prompt, see the module docstring) -> [B, T + n] int64: each
    row's prompt, then the tokens chosen one position at a time (greedy: the argmax of the logits; with
    ``top_k`` and / or ``top_p``, a draw among the likeliest at ``temperature``, from ``seed``: an int or a
    ``torch.Generator``). n is ``max_new_tokens``, or fewer where every row has chosen one of
    ``stop_token_ids``: a row that chose one keeps it and holds ``pad_token_id`` after it. See the module
    docstring for padding. A prompt and new tokens past a position table's length are refused before
    decoding. With ``use_cache`` (the default) the prompt runs once and each later call runs only the new
    token on the nodes' KV caches; ``use_cache=False`` runs the whole sequence so far every step (the same
    tokens, slower). The model computes as Keras's inference whatever ``train()`` says, and keeps its mode."""
    kind = _check_model(model)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"generate expects max_new_tokens as an int >= 0, got {max_new_tokens!r}")
    reference = next(iter(model.parameters()), None)
    device = reference.device if reference is not None else torch.device("cpu")
    tokens_name, mask_name, fixed = _LM[0], _LM[1], {}
    if kind == "seq2seq_lm":
        (tokens_name, mask_name), (ids, padding_mask, fixed) = (
            DECODER_INPUTS,
            _seq2seq_inputs(ids, padding_mask, device),
        )
    prompt = _ids(ids, device)
    names, rules = input_names(model.graph), value_rules(model.graph)
    for name, value in {tokens_name: prompt, **fixed}.items():
        check_values([value], [rules[names.index(name)]], [name], 0)
    keep = _padding(padding_mask, prompt)
    pick = _sampler(top_k, top_p, temperature, seed, device)
    stops = _stop_ids(stop_token_ids, device)
    rule = rules[names.index(tokens_name)]
    pad_token_id = _pad_id(pad_token_id, None if rule is None else rule.high)
    batch, length = prompt.shape
    total = length + max_new_tokens
    _check_positions(model, total - 1)  # the last token is chosen, never read
    switches = [n.recomputed_past() for n in model.modules() if isinstance(n, Node)]
    switch = min((at for at in switches if at is not None), default=None)
    tokens = torch.zeros(batch, total, dtype=torch.long, device=device)
    tokens[:, :length] = prompt
    kept = torch.zeros(batch, total, dtype=torch.bool, device=device)
    kept[:, :length] = keep
    lengths = keep.sum(dim=1)
    first, longest = int(lengths.min()), int(lengths.max())  # keras-hub starts at the shortest prompt's end
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    training, checks = model.training, model.checks_values
    model.eval()
    # the prompt's ids are checked once, here; the tokens after them are the model's own picks and the masks
    # ones, and a check at every step would wait on the device
    model.checks_values = False
    try:
        cache = DecodingCache(batch) if use_cache else None
        with torch.no_grad(), _computed_once(_fixed_layers(model) if use_cache else ()):
            fed, one = 0, torch.ones(batch, 1, dtype=torch.int32, device=device)
            for index in range(first, total):
                if cache is not None and switch is not None and 0 < fed <= switch < index:
                    cache, fed = DecodingCache(batch), 0  # every position computes otherwise past it: again
                window = tokens[:, fed:index]
                ones = one if window.shape[1] == 1 else torch.ones_like(window, dtype=torch.int32)
                inputs = {tokens_name: window, mask_name: ones, **fixed}
                # the first call's inputs are checked; a later one's are the same tensors with the model's own
                # picks in the window, so it goes straight to the emitted forward (binding and checking take
                # about 20 us a call on the CPU, a few per cent of a small model's step)
                if index == first:
                    logits = model(inputs, cache=cache)
                else:
                    logits = model.call_checked([inputs[name] for name in names], cache=cache)
                if cache is not None:  # the next call gives the tokens after these
                    fed = index
                chosen = pick(logits[:, -1])
                if stops is not None:
                    chosen = torch.where(done, pad_token_id, chosen)
                # past the longest prompt no row keeps a token of its own
                tokens[:, index] = chosen if index >= longest else torch.where(kept[:, index], tokens[:, index], chosen)
                if stops is not None:
                    done |= ~kept[:, index] & torch.isin(chosen, stops)
                    if bool(done.all()) and not bool(kept[:, index + 1 :].any()):
                        return tokens[:, : index + 1]
    finally:
        model.train(training)
        model.checks_values = checks
    return tokens
