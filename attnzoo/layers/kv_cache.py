"""The KV cache of the attention core's incremental decoding: keys and values (and, once a step had padding,
their validity) written in place into buffers that grow by doubling (a window keeps its last w entries);
a cache belongs to the layer that fills it, and a cross-attention cache to its context. :class:`DecodingCache`
holds the caches of every layer of one model through one decoding, passed to the model's ``forward``
(transformers' ``past_key_values``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from attnzoo.errors import ConfigError
from attnzoo.layers.core import (
    tracing,
)

__all__ = ["KVCache", "check_cache", "DecodingCache"]

_Held = TypeVar("_Held")


class KVCache:
    """Keys, values and positions of the tokens a layer has seen, for decoding one step at a time.

    ``keys``/``values`` [B, g, S, d] (keys already rotated by RoPE), ``valid`` [B, S] (which of them
    may be attended to), ``positions`` [S] (each entry's absolute position: the last S of the ``length``
    tokens seen, computed when asked) and ``length`` (tokens seen). A layer with a window keeps only the
    last ``limit`` = w entries: no later query can reach older ones. A cross-attention layer keeps its
    context's keys and values (``context``), computed once.

    The entries live in buffers that grow by doubling, so a step writes its own keys and values in place
    (one write each) instead of copying everything held (a window's buffer moves its last w entries to
    the front when full; buffers filled under ``torch.inference_mode()`` are copied once into new ones when a
    step runs outside it). Validity is stored only from the first step given a mask: until then every
    entry is real, and attention over the cache builds no mask. Under autograd (keys that require grad)
    the entries are concatenated instead: nothing a backward pass needs is overwritten.

    A cache belongs to the layer that first fills it (``layer.new_cache`` names it at once): another layer
    refuses it with a ``ConfigError``, since its keys were made by other weights. A cross-attention cache
    keeps the context it was filled from, and a later step given another context (another tensor with
    other values, or the same one changed in place) raises a ``ConfigError`` instead of reading the old keys.
    """

    def __init__(self, batch_size: int, limit: int | None = None) -> None:
        self.batch_size, self.limit = batch_size, limit
        self._owner: weakref.ref | None = None
        # the context and context mask the cross-attention keys were made from, each with its version
        # counter (which an in-place change bumps)
        self._sources: tuple[tuple[Tensor, int] | None, ...] = ()
        # keys and values [B, g, cap, d], entries on the second-last axis; the held ones are [start, end).
        # Validity [B, cap] exists only from the first step given padding: until then every entry is real
        # and no mask is built. Positions are not stored: the held entries are the last ones seen.
        self._keys: Tensor | None = None
        self._values: Tensor | None = None
        self._valid: Tensor | None = None
        self._start = self._end = 0
        self.length = 0
        self.context: tuple[Tensor, Tensor, Tensor | None] | None = None

    @property
    def padded(self) -> bool:
        """Whether any step was given a mask (then each entry's validity is kept and attention is masked)."""
        return self._valid is not None

    @property
    def keys(self) -> Tensor | None:
        return None if self._keys is None else self._keys[..., self._start : self._end, :]

    @property
    def values(self) -> Tensor | None:
        return None if self._values is None else self._values[..., self._start : self._end, :]

    @property
    def valid(self) -> Tensor | None:
        if self._keys is None:
            return None
        if self._valid is None:
            return torch.ones(self.batch_size, len(self), dtype=torch.bool, device=self._keys.device)
        return self._valid[:, self._start : self._end]

    @property
    def positions(self) -> Tensor | None:
        """Each held entry's absolute position: the last ``len(self)`` of the ``length`` seen."""
        if self._keys is None:
            return None
        return torch.arange(self.length - len(self), self.length, device=self._keys.device)

    def __len__(self) -> int:
        return self._end - self._start

    def append(self, keys: Tensor, values: Tensor, valid: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        """Add t new tokens' ``keys``/``values`` [B, g, t, d] and ``valid`` [B, t] (None: all real); returns
        (keys, values, valid) over everything held, the new tokens last, valid None while no step had
        padding. One in-place write per keys and values. Call :meth:`trim` after attending."""
        steps = keys.shape[-2]
        held = self._end - self._start
        if valid is None and self._valid is not None:
            valid = torch.ones(keys.shape[0], steps, dtype=torch.bool, device=keys.device)
        elif valid is not None and self._valid is None and self._keys is not None:
            # the first padded step: every entry held until now was real
            self._valid = torch.ones(keys.shape[0], self._keys.shape[-2], dtype=torch.bool, device=self._keys.device)
        self.length += steps
        old_keys, old_values, old_valid = self._keys, self._values, self._valid
        if keys.requires_grad or values.requires_grad or (old_keys is not None and old_keys.requires_grad):
            # under autograd: concatenated, so that nothing a backward pass needs is overwritten
            if old_keys is None or old_values is None:
                self._keys, self._values, self._valid = keys, values, valid
            else:
                s, e = self._start, self._end
                self._keys = torch.cat([old_keys[..., s:e, :], keys], dim=-2)
                self._values = torch.cat([old_values[..., s:e, :], values], dim=-2)
                if valid is not None and old_valid is not None:
                    self._valid = torch.cat([old_valid[:, s:e], valid], dim=-1)
            self._start, self._end = 0, held + steps
            return self._keys, self._values, self._valid
        key_buffer, value_buffer, valid_buffer = old_keys, old_values, old_valid
        if (
            key_buffer is None
            or value_buffer is None
            or self._end + steps > key_buffer.shape[-2]
            # buffers made under torch.inference_mode() take no in-place write outside it: copied into new ones
            or (key_buffer.is_inference() and not torch.is_inference_mode_enabled())
        ):
            capacity = max(16, 2 * (held + steps))
            key_buffer = keys.new_empty((*keys.shape[:-2], capacity, keys.shape[-1]))
            value_buffer = values.new_empty((*values.shape[:-2], capacity, values.shape[-1]))
            if valid is not None:
                valid_buffer = valid.new_empty((valid.shape[0], capacity))
            if old_keys is not None and old_values is not None:
                s, e = self._start, self._end
                key_buffer[..., :held, :].copy_(old_keys[..., s:e, :])
                value_buffer[..., :held, :].copy_(old_values[..., s:e, :])
                if old_valid is not None and valid_buffer is not None:  # a padded cache: valid is given or made
                    valid_buffer[:, :held].copy_(old_valid[:, s:e])
            self._keys, self._values, self._valid = key_buffer, value_buffer, valid_buffer
            self._start, self._end = 0, held
        start, end = self._start, self._end + steps
        key_buffer[..., self._end : end, :] = keys
        value_buffer[..., self._end : end, :] = values
        if valid is not None and valid_buffer is not None:
            valid_buffer[:, self._end : end] = valid
        self._end = end
        return (
            key_buffer[..., start:end, :],
            value_buffer[..., start:end, :],
            None if valid_buffer is None else valid_buffer[:, start:end],
        )

    def trim(self) -> None:
        """Forget all but the last ``limit`` entries (a window's)."""
        if self.limit is not None and len(self) > self.limit:
            self._start = self._end - self.limit

    def claim(self, layer: nn.Module, name: str) -> None:
        """Tie the cache to ``layer``, or raise if another layer filled it."""
        owner = None if self._owner is None else self._owner()
        if owner is None:
            self._owner = weakref.ref(layer)
        elif owner is not layer:
            raise ConfigError(
                f"{name}: this cache was filled by another layer ({type(owner).__name__} at {id(owner):#x}); its keys "
                f"and values come from that layer's weights. Give each layer its own: cache = layer.new_cache(batch)"
            )

    def keep_context(self, name: str, context: Tensor, context_mask: Tensor | None) -> None:
        """Remember what the cross-attention keys were made from."""
        self._sources = tuple(None if t is None else (t, t._version) for t in (context, context_mask))

    def check_context(self, name: str, context: Tensor, context_mask: Tensor | None) -> None:
        """Raise unless ``context`` and ``context_mask`` are what the kept keys were made from (the same
        tensors unchanged, or equal ones)."""

        if tracing():  # a graph cannot compare values on the host
            return
        for what, given, kept in zip(("context", "context_mask"), (context, context_mask), self._sources, strict=True):
            if kept is None:
                same = given is None
            else:
                tensor, version = kept
                unchanged = tensor._version == version
                same = (
                    given is not None
                    and unchanged
                    and (
                        given is tensor
                        or (
                            given.shape == tensor.shape and given.device == tensor.device and torch.equal(given, tensor)
                        )
                    )
                )
            if not same:
                raise ConfigError(
                    f"{name}: this cache holds the keys and values of the {what} of its first step; this step got "
                    f"a different {what}. Pass the same {what} at every step, or start a new cache for a new one "
                    f"(a layer's: layer.new_cache(batch); a model's: DecodingCache(batch_size))"
                )

    def __repr__(self) -> str:
        return f"KVCache(batch_size={self.batch_size}, held={len(self)}, seen={self.length}, limit={self.limit})"


def check_cache(cache: object, layer: nn.Module, name: str, batch: int) -> None:
    """Raise ``ValueError`` unless ``cache`` is a :class:`KVCache` made for ``batch`` sequences, then tie it
    to ``layer`` (:meth:`KVCache.claim`): what a layer checks of the cache it is called with."""
    if not isinstance(cache, KVCache):
        raise ValueError(f"{name} expects cache to come from layer.new_cache(batch), got {type(cache).__name__}")
    if cache.batch_size != batch:
        raise ValueError(f"{name}: the cache was made for batch size {cache.batch_size}, got x of batch {batch}")
    cache.claim(layer, name)


class DecodingCache:
    """What every layer of one model keeps between the calls of one decoding: transformers'
    ``past_key_values``, passed explicitly to the model as ``cache=`` and by its ``forward`` to each layer
    whose output at a position depends on other positions (attention) or on the position itself::

        cache = DecodingCache(batch_size=2)
        logits = model(token_ids=prompt, padding_mask=ones, cache=cache)   # the prompt's T tokens
        logits = model(token_ids=chosen, padding_mask=one, cache=cache)    # positions T, T + 1, ...

    Each call's tokens follow the ones the calls before it gave (the calls carry no padding: a prompt is
    decoded from its end). A layer keeps its own state here under its own identity: its keys and values
    (:meth:`keys_values`, a :class:`KVCache`), how many positions it has been given (:meth:`positions`),
    anything else it computes once (:meth:`held`, a cross-attention's encoder keys). A cache serves one model
    and one decoding: a new decoding starts from a new cache, and dropping it frees every layer's keys.

    A model call runs in :meth:`call`: a call of another model than the first one's is refused (its layers,
    new to the cache, would start from position 0 while the cache holds the first model's tokens), and
    one that fails partway (after some layers cached its tokens, before others did) leaves the layers out
    of step, so every later call on the cache is refused."""

    def __init__(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DecodingCache expects batch_size as a positive int, got {batch_size!r}")
        self.batch_size = batch_size
        self._held: dict[tuple[int, str], tuple[nn.Module, Any]] = {}
        self._failed: str | None = None  # the error of a call that failed partway, once one did
        self._model: weakref.ref | None = None  # the model of the first call
        # how many times a layer took its keys and values or counted positions: a call that changed it may
        # have cached some of its tokens
        self._given = 0

    def check_batch(self, batch: int) -> None:
        """A ``ValueError`` unless a call of ``batch`` sequences fits this cache."""
        if batch != self.batch_size:
            raise ValueError(
                f"the DecodingCache was made for batch size {self.batch_size}, got a call of batch {batch}; make "
                f"one per decoding, DecodingCache(batch_size)"
            )

    @contextmanager
    def call(self, model: nn.Module) -> Iterator[None]:
        """One call of ``model`` on the cache (its ``forward`` runs in it, its inputs checked first): refused
        where the cache holds another model's tokens, or where an earlier call failed partway; a call that
        fails marks the cache so, since the layers it ran before the error hold its tokens and the others do
        not (a retry would read them at other positions)."""
        if self._model is None:
            self._model = weakref.ref(model)
        elif self._model() is not model:
            raise ValueError(
                "this DecodingCache holds the tokens another model was given (a copy of a model, or one loaded "
                "again, is another model: its layers would start from position 0); make a DecodingCache(batch_size) "
                "for each model and decoding"
            )
        if self._failed is not None:
            raise ValueError(
                f"this DecodingCache cannot be used: an earlier call on it failed partway ({self._failed}), so its "
                f"layers hold different numbers of tokens; start a new DecodingCache(batch_size) and give it the "
                f"whole sequence again"
            )
        before = self._given
        try:
            yield
        except BaseException as e:
            if self._given != before:  # (a call refused before any layer took its state leaves it usable)
                self._failed = f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
            raise

    def held(self, layer: nn.Module, name: str, make: Callable[[], _Held]) -> _Held:
        """``layer``'s entry ``name``, made by ``make()`` on its first call."""
        key = (id(layer), name)
        if key not in self._held:  # the layer is kept beside its entry: its id stays its own meanwhile
            self._held[key] = (layer, make())
        return self._held[key][1]

    def keys_values(self, layer: nn.Module, batch: int, limit: int | None = None) -> KVCache:
        """``layer``'s :class:`KVCache` (empty on its first call; ``limit`` w: a sliding window's, keeping its w
        latest entries), for a call of ``batch`` sequences: a ``ValueError`` where the cache is another batch's."""
        self.check_batch(batch)
        self._given += 1
        return self.held(layer, "keys_values", lambda: KVCache(self.batch_size, limit=limit))

    def positions(self, layer: nn.Module, count: int, limit: int | None = None, batch: int | None = None) -> int:
        """The position of the first of the ``count`` tokens ``layer`` is called with now: how many it was
        given before (each position embedding counts its own calls). Past ``limit`` (a position table's
        length), or for a call of another ``batch`` than the cache's, a ``ValueError``, the count left as it
        was."""
        if batch is not None:
            self.check_batch(batch)
        seen = self.held(layer, "positions", lambda: [0])
        if limit is not None and seen[0] + count > limit:
            raise ValueError(
                f"positions {seen[0]}..{seen[0] + count - 1} are past the position table's sequence_length {limit}: "
                f"the DecodingCache holds {seen[0]} positions, so a call may give at most {max(limit - seen[0], 0)} "
                f"more tokens"
            )
        start, seen[0] = seen[0], seen[0] + count
        self._given += 1
        return start

    def __repr__(self) -> str:
        return f"DecodingCache(batch_size={self.batch_size}, entries={len(self._held)})"
