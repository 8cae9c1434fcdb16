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
        self.keys: dict[torch.dtype, list[str]] = {}  # the state keys held in each dtype other than float32
        self._storages: set[int] = set()  # the memory the tensors held so far own

    def layer_dtype(self, stored: list[str]) -> torch.dtype | None:
        """The dtype a layer whose variables the file holds in ``stored`` is held in (None: as converted)."""
        floating = {name for name in stored if name in _FLOATING}
        if not floating:
            return None
        own = floating.pop() if len(floating) == 1 else "float32"
        self.found[own] += 1
        return self.asked if self.asked is not None else DTYPES.get(own, torch.float32)

    def hold(self, prefix: str, state: dict[str, Tensor], stored: list[str]) -> dict[str, Tensor]:
        """A converted layer's ``state`` (emptied as it goes, so that each float32 tensor is freed once cast), its
        floating tensors in the layer's dtype, keyed ``prefix + name``: each contiguous and owning its memory."""
        dtype = self.layer_dtype(stored)
        held = {}
        for name in list(state):
            tensor = state.pop(name)
            if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                tensor = tensor.to(dtype, memory_format=torch.contiguous_format)
            held[prefix + name] = tensor = self._owned(tensor)
            if tensor.is_floating_point() and tensor.dtype != torch.float32:
                self.keys.setdefault(tensor.dtype, []).append(prefix + name)
        return held

    def _owned(self, tensor: Tensor) -> Tensor:
        """``tensor``, or a copy where it is not contiguous, is a part of a larger array (a slice of a fused
        kernel) or shares its memory with a tensor held before: a parameter owns its memory, as
        safetensors needs to save it and training needs to update it alone."""
        if tensor.numel() == 0:
            return tensor.contiguous()
        storage = tensor.untyped_storage()
        whole = tensor.storage_offset() == 0 and storage.nbytes() == tensor.numel() * tensor.element_size()
        if not (whole and tensor.is_contiguous()) or storage.data_ptr() in self._storages:
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        self._storages.add(tensor.untyped_storage().data_ptr())
        return tensor

    def finish(self, state: dict[str, Tensor]) -> list[str]:
        """The report's notes on the dtypes; where the file's layers hold different dtypes and none was asked,
        every tensor held in another dtype is widened to float32 in ``state`` (exactly)."""
        found = ", ".join(f"{name} ({count} layer{'s' if count > 1 else ''})" for name, count in self.found.items())
        if self.asked is not None:
            if set(self.found) <= {_name(self.asked)}:
                return []
            return [f"dtype={_name(self.asked)!r}: the file's variables, {found}, are held in {_name(self.asked)}"]
        if len(self.found) > 1:
            for keys in self.keys.values():
                for key in keys:
                    state[key] = state[key].float()
            self.keys.clear()
            return [
                f"the file's layers hold their variables in different dtypes, {found}: the converted model holds "
                f"them all in float32 (bfloat16 and float16 widen exactly); dtype='bfloat16' (convert-keras --dtype "
                f"bfloat16) holds them in bfloat16"
            ]
        low = [name for name in self.found if name in ("bfloat16", "float16")]
        if not low:
            return []
        return [
            f"the file's variables are {low[0]}: the converted model holds them in {low[0]} and computes in it, as "
            f"Keras's dtype={low[0]!r} model does; dtype='float32' (convert-keras --dtype float32) widens them "
            f"exactly"
        ]
