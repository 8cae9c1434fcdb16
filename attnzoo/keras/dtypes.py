"""The dtype a converted model holds its variables in: the file's (a bfloat16 Keras model converts to a bfloat16
module), or the one ``convert_keras_model(..., dtype=...)`` asks for.

Keras saves each variable in its own dtype: float32 (a ``mixed_float16`` / ``mixed_bfloat16`` policy's variables
too), float16 as HDF5's float16, bfloat16 as 2-byte values marked ``dtype="bfloat16"`` (HDF5 has no bfloat16). The
reader widens float16 and bfloat16 to float32, exactly, so that converters reshape and transpose float32 arrays as
they always have; right after a layer converts, :meth:`HeldDtypes.hold` casts its floating tensors to the dtype they
are held in (which gives back the file's values bit for bit: each is a float16 / bfloat16 widened) and makes each
tensor contiguous and the sole owner of its memory, one tensor at a time, so that one layer's arrays are the
conversion's only transient and the module's ``load_state_dict(..., assign=True)`` takes the tensors as they are.

Which dtype (:meth:`HeldDtypes.layer_dtype`): the asked one, else the one the layer's floating variables share in
the file (float32 where they differ; float64 is held in float32, as converters compute). A layer with no floating
variable in the file keeps what its converter made (a Discretization's boundaries and a lookup's keys come from its
config). A file whose layers hold different dtypes (a bfloat16 model with one float32 layer) converts to float32
(:meth:`HeldDtypes.finish`: bfloat16 and float16 widen exactly), and the report says so.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import Tensor

from attnzoo.errors import ConfigError
from attnzoo.keras.nodes import NODES

__all__ = ["DTYPES", "check_dtype", "HeldDtypes"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_FLOATING = ("float16", "bfloat16", "float32", "float64")  # what a Keras file holds floating variables in


def check_dtype(value: Any) -> torch.dtype | None:
    """``convert_keras_model``'s ``dtype``: None (the file's), or ``"float32"``, ``"bfloat16"``, ``"float16"``
    (a name, or the torch dtype)."""
    if value is None:
        return None
    if isinstance(value, torch.dtype) and value in DTYPES.values():
        return value
    if isinstance(value, str) and value.removeprefix("torch.") in DTYPES:
        return DTYPES[value.removeprefix("torch.")]
    raise ConfigError(
        f"dtype must be None (the dtype the file holds the variables in) or one of {', '.join(DTYPES)}, got {value!r}"
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class HeldDtypes:
    """One conversion's dtypes: each layer's tensors cast as the layer converts (:meth:`hold`), and the whole
    model's decided at the end (:meth:`finish`). ``asked``: ``convert_keras_model``'s ``dtype``."""

    def __init__(self, asked: torch.dtype | None) -> None:
        self.asked = asked
        self.found: Counter[str] = Counter()  # the file's dtype -> how many layers hold their variables in it
        self.held: dict[str, tuple[torch.dtype | None, list[str]]] = {}  # layer -> its dtype, its state keys
        self._storages: set[int] = set()  # the memory the tensors held so far own

    def layer_dtype(self, stored: list[str]) -> torch.dtype | None:
        """The dtype a layer whose variables the file holds in ``stored`` is held in (None: no floating variable,
        its tensors stay as converted until :meth:`finish`)."""
        floating = {name for name in stored if name in _FLOATING}
        if not floating:
            return None
        own = floating.pop() if len(floating) == 1 else "float32"
        self.found[own] += 1
        return self.asked if self.asked is not None else DTYPES.get(own, torch.float32)

    def hold(self, layer: str, state: dict[str, Tensor], stored: list[str]) -> dict[str, Tensor]:
        """A converted layer's ``state`` (emptied as it goes, so that each float32 tensor is freed once cast), its
        floating tensors in the layer's dtype, keyed ``layers.<layer>.<name>``: each contiguous and owning its
        memory."""
        dtype = self.layer_dtype(stored)
        held = {}
        for name in list(state):
            tensor = state.pop(name)
            if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                tensor = tensor.to(dtype, memory_format=torch.contiguous_format)
            held[f"layers.{layer}.{name}"] = self._owned(tensor)
        self.held[layer] = (dtype, list(held))
        return held

    def _owned(self, tensor: Tensor) -> Tensor:
        """``tensor`` itself, or a contiguous copy where it is not contiguous, is part of a larger array (a slice of
        a fused kernel) or shares its memory with a tensor held before: a parameter owns its memory, as
        safetensors needs to save it and training needs to update it alone."""
        if tensor.numel() == 0:
            return tensor.contiguous()
        storage = tensor.untyped_storage()
        whole = tensor.storage_offset() == 0 and storage.nbytes() == tensor.numel() * tensor.element_size()
        if not (whole and tensor.is_contiguous()) or storage.data_ptr() in self._storages:
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        self._storages.add(tensor.untyped_storage().data_ptr())
        return tensor

    def finish(self, state: dict[str, Tensor], layers: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
        """The whole model's dtype, applied to ``state`` (``layers`` and ``calls``: the graph's), and the report's
        notes on it. In a model held in bfloat16 or float16 the tensors of layers the file gives no variable (a
        Normalization's given mean) are held in it too; where the file's layers hold different dtypes, or a
        layer's float32 encodings (:meth:`Node.makes_float32 <attnzoo.keras.nodes.Node.makes_float32>`) reach a
        layer holding floating tensors, and no dtype was asked, every tensor is held in float32 (bfloat16 and
        float16 widen exactly)."""
        found = ", ".join(f"{name} ({count} layer{'s' if count > 1 else ''})" for name, count in self.found.items())
        if self.asked is None and len(self.found) > 1:
            self._cast(state, torch.float32)
            return [
                f"the file's layers hold their variables in different dtypes, {found}: the converted model holds "
                f"them all in float32 (bfloat16 and float16 widen exactly); dtype='bfloat16' (convert-keras --dtype "
                f"bfloat16) holds them in bfloat16"
            ]
        model = self.asked or (DTYPES.get(next(iter(self.found)), torch.float32) if self.found else torch.float32)
        if model == torch.float32 or not self.found:
            return [f"dtype='float32': the file's variables, {found}, are held in float32"] if self._widened() else []
        encoders = self._encoders_before_weights(state, layers, calls)
        if encoders and self.asked is not None:
            raise ConfigError(
                f"dtype={_name(model)!r}: layer(s) {', '.join(map(repr, encoders[:4]))} make float32 encodings "
                f"whatever their inputs, which the {_name(model)} layers after them cannot take; convert the model "
                f"in float32 (dtype=None or 'float32')"
            )
        if encoders:
            self._cast(state, torch.float32)
            return [
                f"the file's variables are {_name(model)}, but layer(s) {', '.join(map(repr, encoders[:4]))} make "
                f"float32 encodings whatever their inputs, which layers after them take: the converted model holds "
                f"every variable in float32 ({_name(model)} widens exactly)"
            ]
        self._cast(state, model, only_unheld=True)
        if self.asked is not None:
            return [f"dtype={_name(model)!r}: the file's variables, {found}, are held in {_name(model)}"]
        return [
            f"the file's variables are {_name(model)}: the converted model holds them in {_name(model)} and computes "
            f"in it, as Keras's dtype={_name(model)!r} model does; dtype='float32' (convert-keras --dtype float32) "
            f"widens them exactly"
        ]

    def _encoders_before_weights(
        self, state: dict[str, Tensor], layers: dict[str, Any], calls: list[dict[str, Any]]
    ) -> list[str]:
        """The Keras names of the layers whose float32 encodings reach, call by call, a layer that holds
        floating tensors (a Dense after a CategoryEncoding): in bfloat16 it could not take them."""
        weighted = {
            layer for layer, (_, keys) in self.held.items() if any(state[key].is_floating_point() for key in keys)
        }
        readers: dict[str, list[dict[str, Any]]] = {}
        for call in calls:
            for source in set(_sources([call["args"], call["kwargs"]])):
                readers.setdefault(source, []).append(call)
        found = []
        for call in calls:
            spec = layers.get(call["layer"] or "")
            if spec is None or not _makes_float32(spec):
                continue
            reached, frontier = set(), [call["id"]]
            while frontier:
                for reader in readers.get(frontier.pop(), []):
                    if reader["id"] not in reached:
                        reached.add(reader["id"])
                        frontier.append(reader["id"])
            if any(c["layer"] in weighted for c in calls if c["id"] in reached):
                found.append(str(spec["keras"]["name"]))
        return list(dict.fromkeys(found))

    def _widened(self) -> bool:
        return self.asked == torch.float32 and any(name in ("bfloat16", "float16") for name in self.found)

    def _cast(self, state: dict[str, Tensor], dtype: torch.dtype, *, only_unheld: bool = False) -> None:
        for held, keys in self.held.values():
            if only_unheld and held is not None:
                continue
            for key in keys:
                if state[key].is_floating_point() and state[key].dtype != dtype:
                    state[key] = state[key].to(dtype)


def _makes_float32(spec: dict[str, Any]) -> bool:
    arguments = {k: v for k, v in spec.items() if k not in ("op", "keras")}
    node = NODES.get(spec["op"])
    return node is not None and node.makes_float32(arguments)


def _sources(value: Any) -> Any:
    """The call ids a call's arguments read (``{"ref": [call, index]}`` anywhere in them)."""
    if isinstance(value, dict):
        if isinstance(value.get("ref"), list) and value["ref"]:
            yield value["ref"][0]
            return
        for inner in value.values():
            yield from _sources(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _sources(inner)
