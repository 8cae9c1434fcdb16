"""The KV cache of the attention core's incremental decoding: keys, values, their validity and absolute
positions per step, written in place into buffers that grow by doubling (a window keeps its last w
entries); a cache belongs to the layer that fills it, and a cross-attention cache to its context."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn

from attnzoo.errors import ConfigError
from attnzoo.layers.core import (
    tracing,
)

__all__ = ["KVCache"]


class KVCache:
    """Keys, values and positions of the tokens a layer has seen, for decoding one step at a time.

    ``keys``/``values`` [B, g, S, d] (keys already rotated by RoPE), ``valid`` [B, S] (which of them
    may be attended to), ``positions`` [S] (each entry's absolute position) and ``length`` (tokens
    seen). A layer with a window keeps only the last ``limit`` = w entries: no later query can reach
    older ones. A cross-attention layer keeps its context's keys and values (``context``), computed once.

    The entries live in buffers that grow by doubling, so a step writes its own keys in place instead
    of copying everything held (a window's buffer moves its last w entries to the front when full).
    Under autograd (keys that require grad) the entries are concatenated instead: nothing a backward
    pass needs is overwritten.

    A cache belongs to the layer that first fills it (``layer.new_cache`` names it at once): another layer
    refuses it with a ``ConfigError``, since its keys were made by other weights. A cross-attention cache
    keeps the context it was filled from, and a later step given another context (another tensor with
    other values, or the same one changed in place) raises a ``ConfigError`` instead of reading the old keys.
    """

    def __init__(self, batch_size: int, limit: int | None = None) -> None:
        self.batch_size, self.limit = batch_size, limit
        self._owner: weakref.ref | None = None
        self.padded = False  # whether any step was given a mask: until then no mask is built
        # the context and context mask the cross-attention keys were made from, each with its version
        # counter (which an in-place change bumps)
        self._sources: tuple[tuple[Tensor, int] | None, ...] = ()
        # keys [B, g, cap, d], values [B, g, cap, d], valid [B, cap, 1], positions [cap, 1]: every buffer
        # has its entries on the second-last axis; the held ones are [start, end)
        self._buffers: list[Tensor] | None = None
        self._start = self._end = 0
        self.length = 0
        self.context: tuple[Tensor, Tensor, Tensor | None] | None = None

    def _held(self, index: int) -> Tensor | None:
        if self._buffers is None:
            return None
        held = self._buffers[index][..., self._start : self._end, :]
        return held if index < 2 else held.squeeze(-1)

    @property
    def keys(self) -> Tensor | None:
        return self._held(0)

    @property
    def values(self) -> Tensor | None:
        return self._held(1)

    @property
    def valid(self) -> Tensor | None:
        return self._held(2)

    @property
    def positions(self) -> Tensor | None:
        return self._held(3)

    def __len__(self) -> int:
        return self._end - self._start

    def _views(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        keys, values, valid, positions = (self._held(i) for i in range(4))
        assert keys is not None and values is not None and valid is not None and positions is not None
        return keys, values, valid, positions

    def append(self, keys: Tensor, values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Add t new tokens' ``keys``/``values`` [B, g, t, d] and ``valid`` [B, t]; returns (keys, values,
        valid, positions) over everything held, the new tokens last. Call :meth:`trim` after attending."""
        steps = keys.shape[-2]
        positions = torch.arange(self.length, self.length + steps, device=keys.device)
        new = [keys, values, valid[..., None], positions[:, None]]
        self.length += steps
        held = len(self)
        if keys.requires_grad or values.requires_grad or (self._buffers is not None and self._buffers[0].requires_grad):
            old = self._buffers
            self._buffers = (
                new
                if old is None
                else [torch.cat([b[..., self._start : self._end, :], n], dim=-2) for b, n in zip(old, new, strict=True)]
            )
            self._start, self._end = 0, held + steps
            return self._views()
        if self._buffers is None or self._end + steps > self._buffers[0].shape[-2]:
            capacity = max(16, 2 * (held + steps))
            grown = [n.new_empty((*n.shape[:-2], capacity, n.shape[-1])) for n in new]
            if self._buffers is not None:
                for target, source in zip(grown, self._buffers, strict=True):
                    target[..., :held, :].copy_(source[..., self._start : self._end, :])
            self._buffers, self._start, self._end = grown, 0, held
        for target, source in zip(self._buffers, new, strict=True):
            target[..., self._end : self._end + steps, :].copy_(source)
        self._end += steps
        return self._views()

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
                    f"a different {what}. Pass the same {what} at every step, or start a new cache with "
                    f"layer.new_cache(batch) for a new one"
                )

    def __repr__(self) -> str:
        return f"KVCache(batch_size={self.batch_size}, held={len(self)}, seen={self.length}, limit={self.limit})"
