"""Keras's categorical preprocessing layers of structured data: CategoryEncoding, Discretization, Hashing
and HashedCrossing, and the encoding every categorical layer shares (:func:`encode`).

Each layer turns values into bin or token indices, then encodes them as Keras's
``encode_categorical_inputs`` does, by ``output_mode``:

* ``int``: the indices themselves (int64);
* ``one_hot``: each index as a row of ``depth`` (a last axis of 1 is replaced by it, any other axis
  gains one): ``[B] -> [B, depth]``, ``[B, 1] -> [B, depth]``, ``[B, n] -> [B, n, depth]``;
* ``multi_hot``: the last axis is one sample: 1 at every index it holds, ``[B, n] -> [B, depth]``;
* ``count``: as ``multi_hot``, how many times each index occurs; ``tf_idf`` (the lookups): the counts
  times the layer's idf weights.

A negative index counts for nothing (a lookup's mask token, which Keras drops from the encoding); an
index at or past ``depth`` is an error naming it (Keras's backends disagree there: TensorFlow drops it,
torch fails). ``multi_hot``/``count`` take inputs of rank 2 at most, as Keras's encoding does.

Hashing is bit-exact (:mod:`attnzoo.keras.fingerprint`): ``Hashing`` without salt is FarmHash's
``Fingerprint64`` of the value's UTF-8 bytes (an integer's decimal text; a float is truncated to an
integer first) mod ``num_bins``; with ``salt`` it is SipHash-2-4 keyed by the salt. ``mask_value`` takes
bin 0 and the others hash into bins 1..num_bins-1. ``HashedCrossing`` combines the features of a row
with ``FingerprintCat64``, from TensorFlow's key ``0xDECAFCAFFE``: a string feature by its fingerprint,
an integer by its value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.preprocessing import config_array
from attnzoo.keras.fingerprint import CROSS_HASH_KEY, MASK, as_bytes, fingerprint64, fingerprint_cat64, siphash64
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = [
    "encodes_floats",
    "encode",
    "OUTPUT_MODES",
    "CategoryEncoding",
    "Discretization",
    "Hashing",
    "HashedCrossing",
    "hash_bucket",
    "map_values",
    "refuse_sparse",
    "salt_of",
]

OUTPUT_MODES = ("int", "one_hot", "multi_hot", "count", "tf_idf")


def encodes_floats(default: str) -> Any:
    """The :meth:`Node.makes_float32 <attnzoo.keras.nodes.Node.makes_float32>` of a node whose ``output_mode``
    (``default`` where its arguments give none) other than ``int`` makes :func:`encode`'s float32 encodings."""
    return classmethod(lambda cls, arguments: arguments.get("output_mode", default) != "int")


def encode(indices: Tensor, mode: str, depth: int, what: str, idf: Tensor | None = None) -> Tensor:
    """Keras's ``encode_categorical_inputs`` of int64 ``indices`` (module docstring): int64 for ``int``,
    floats of the default dtype otherwise."""
    if mode == "int":
        return indices
    if indices.dim() == 0:
        indices = indices.unsqueeze(-1)
    too_large = indices >= depth
    if bool(too_large.any()):
        raise ValueError(
            f"{what}: index {int(indices[too_large][0])} is not below the encoding's depth {depth} "
            f"(num_tokens / num_bins); pass values in [0, {depth})"
        )
    dtype = torch.get_default_dtype()
    if mode == "one_hot":
        if indices.dim() > 1 and indices.shape[-1] == 1:
            indices = indices.squeeze(-1)
        return _hot(indices, depth, dtype)
    if indices.dim() > 2:
        raise ValueError(
            f"{what}: output_mode={mode!r} encodes inputs of rank 2 at most (Keras's limit), got {list(indices.shape)}"
        )
    counts = _hot(indices, depth, dtype).sum(dim=-2)
    if mode == "multi_hot":
        return counts.clamp(max=1)
    if mode == "count":
        return counts
    if mode == "tf_idf" and idf is not None:
        return counts * idf.to(dtype)
    raise ValueError(f"{what}: unknown output_mode {mode!r}")


def _hot(indices: Tensor, depth: int, dtype: torch.dtype) -> Tensor:
    """One-hot rows of ``depth``, a row of zeros for a negative index."""
    valid = indices >= 0
    hot = F.one_hot(indices.clamp(min=0), depth).to(dtype)
    return hot * valid.unsqueeze(-1).to(dtype)


def refuse_sparse(c: dict[str, Any]) -> None:
    """``sparse``/``ragged`` outputs are TensorFlow's; a converted model makes dense tensors."""
    for key in ("sparse", "ragged"):
        if c.get(key):
            raise Refused(f"{key}=True is not supported (a converted model makes dense tensors)")


def _mode(c: dict[str, Any], allowed: tuple[str, ...], default: str) -> str:
    mode = c.get("output_mode", default)
    mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(mode, mode)
    if mode not in allowed:
        raise Refused(f"output_mode {mode!r} is not one of {', '.join(allowed)}")
    return mode


def _positive_int(c: dict[str, Any], key: str) -> int:
    value = c.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refused(f"{key} {value!r} is not a positive int")
    return value


def _integers(x: Tensor, what: str) -> Tensor:
    """Keras's cast of a categorical input to integers: floats truncated toward zero."""
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(f"{what} expects integer values, got {x.dtype}")
    return x.to(torch.long)


class CategoryEncoding(Node):
    """``CategoryEncoding(num_tokens, output_mode)``: integer values in ``[0, num_tokens)`` encoded by
    :func:`encode` (``one_hot``, ``multi_hot`` or ``count``)."""

    op = "category_encoding"
    ids_below = "num_tokens"  # Keras does not cast its input: integer values only
    makes_float32 = encodes_floats("multi_hot")
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, num_tokens: int, output_mode: str = "multi_hot") -> None:
        super().__init__()
        self.num_tokens, self.output_mode = int(num_tokens), output_mode

    def compute(self, x, mask):
        x = _integers(x, "category_encoding")
        if bool((x < 0).any()):
            raise ValueError(f"category_encoding expects values in [0, {self.num_tokens}), got {int(x.min())}")
        return encode(x, self.output_mode, self.num_tokens, "category_encoding")


@keras_layer("CategoryEncoding")
def convert_category_encoding(record, arrays, ctx):
    expect_variables(arrays, 0, "CategoryEncoding")
    c = record.config
    refuse_sparse(c)
    spec = {
        "op": "category_encoding",
        "num_tokens": _positive_int(c, "num_tokens"),
        "output_mode": _mode(c, ("one_hot", "multi_hot", "count"), "multi_hot"),
    }
    return Converted(spec, {})


class Discretization(Node):
    """``Discretization(bin_boundaries, output_mode)``: the bin of each value, ``i`` where
    ``boundaries[i-1] <= x < boundaries[i]`` (``torch.bucketize(right=True)``, in float32 as Keras
    compares), then :func:`encode` over ``len(boundaries) + 1`` bins."""

    op = "discretization"
    makes_float32 = encodes_floats("int")
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(self, *, bin_boundaries: list[float], output_mode: str = "int") -> None:
        super().__init__()
        self.output_mode, self.depth = output_mode, len(bin_boundaries) + 1
        self.register_buffer("boundaries", torch.tensor(bin_boundaries, dtype=torch.float32))

    def compute(self, x, mask):
        if x.dtype == torch.bool or x.is_complex():
            raise ValueError(f"discretization expects numbers, got {x.dtype}")
        bins = torch.bucketize(x.to(torch.float32), self.boundaries, right=True)
        if self.output_mode == "int":
            return bins.to(torch.int32)  # Keras's int output is int32
        return encode(bins, self.output_mode, self.depth, "discretization")


@keras_layer("Discretization")
def convert_discretization(record, arrays, ctx):
    c = record.config
    refuse_sparse(c)
    boundaries = c.get("bin_boundaries")
    if boundaries is None:
        raise Refused("it has no bin_boundaries (an unadapted layer, which Keras cannot call either)")
    edges = config_array(boundaries, "bin_boundaries").reshape(-1)
    if (np.diff(edges) < 0).any():
        raise Refused(f"bin_boundaries {edges.tolist()[:8]} are not sorted")
    expect_variables(arrays, (0, 1), "Discretization (at most its legacy summary)")
    spec = {
        "op": "discretization",
        "bin_boundaries": edges.tolist(),
        "output_mode": _mode(c, ("int", "one_hot", "multi_hot", "count"), "int"),
    }
    return Converted(spec, {"boundaries": torch.from_numpy(edges.astype(np.float32))})


def hash_bucket(value: Any, bins: int, salt: list[int] | None) -> int:
    """TensorFlow's ``to_hash_bucket_fast`` (no salt) or ``to_hash_bucket_strong`` (salt) of one value."""
    data = as_bytes(value)
    return (siphash64(salt, data) if salt is not None else fingerprint64(data)) % bins


def map_values(value: Any, fn: Any, what: str) -> Any:
    """``fn`` over the leaves of nested lists (a string input's rows), keeping the nesting."""
    if isinstance(value, (list, tuple)):
        return [map_values(v, fn, what) for v in value]
    if isinstance(value, (str, bytes, int)) and not isinstance(value, bool):
        return fn(value)
    raise ValueError(f"{what} expects strings or integers (nested lists, or a tensor), got {type(value).__name__}")


def _as_values(x: Any, what: str) -> tuple[Any, torch.device | None]:
    """A categorical layer's input as nested Python values (strings, or integers: floats truncated)."""
    if isinstance(x, Tensor):
        return _integers(x, what).tolist(), x.device
    return x, None


def _long(values: Any, what: str, device: torch.device | None) -> Tensor:
    try:
        out = torch.tensor(values, dtype=torch.long)
    except (ValueError, TypeError):
        raise ValueError(f"{what} expects a rectangular batch (every row the same length)") from None
    return out if device is None else out.to(device)


class Hashing(Node):
    """``Hashing(num_bins, mask_value, salt, output_mode)``: strings (nested lists) or integer values ->
    bins (module docstring), then :func:`encode` over ``num_bins``."""

    op = "hashing"
    makes_float32 = encodes_floats("int")

    def __init__(
        self, *, num_bins: int, mask_value: Any = None, salt: list[int] | None = None, output_mode: str = "int"
    ) -> None:
        super().__init__()
        self.num_bins, self.mask_value, self.output_mode = int(num_bins), mask_value, output_mode
        self.salt = None if salt is None else [int(s) for s in salt]
        self.register_buffer("anchor", torch.zeros(0, dtype=torch.long))  # the device of string inputs' bins

    @property
    def masked(self) -> bool:
        return self.mask_value is not None and self.num_bins > 1

    def bin_of(self, value: Any, compare: bool = True) -> int:
        """The bin of one value; the mask value's is 0 (``compare``: whether to look for it here)."""
        if compare and self.masked and value == self.mask_value:
            return 0
        bins = self.num_bins - 1 if self.masked else self.num_bins
        return hash_bucket(value, bins, self.salt) + (1 if self.masked else 0)

    def forward(self, args, kwargs, masks):
        x = args[0]
        floats = isinstance(x, Tensor) and x.is_floating_point()
        values, device = _as_values(x, "hashing")
        bins = map_values(values, lambda v: self.bin_of(v, compare=not floats), "hashing")
        bins = _long(bins, "hashing", device or self.anchor.device)
        if floats and self.masked and isinstance(self.mask_value, (int, float)):
            # Keras compares a float with mask_value before it truncates the float to hash it
            bins = torch.where(x == float(self.mask_value), torch.zeros_like(bins), bins)
        return [encode(bins, self.output_mode, self.num_bins, "hashing")], [None]


def salt_of(value: Any) -> list[int] | None:
    """A layer's ``salt`` as Keras keeps it: two ints (one int is both)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    raise Refused(f"salt {value!r} is not an int or two ints")


@keras_layer("Hashing")
def convert_hashing(record, arrays, ctx):
    expect_variables(arrays, 0, "Hashing")
    c = record.config
    refuse_sparse(c)
    mask = c.get("mask_value")
    if mask is not None and not isinstance(mask, (str, int, float)):
        raise Refused(f"mask_value {mask!r} is not a string or a number")
    spec = {
        "op": "hashing",
        "num_bins": _positive_int(c, "num_bins"),
        "mask_value": mask,
        "salt": salt_of(c.get("salt")),
        "output_mode": _mode(c, ("int", "one_hot", "multi_hot", "count"), "int"),
    }
    how = "SipHash-2-4 keyed by the salt" if spec["salt"] else "FarmHash Fingerprint64"
    return Converted(spec, {"anchor": torch.zeros(0, dtype=torch.long)}, [f"{how} mod {spec['num_bins']}"])


class HashedCrossing(Node):
    """``HashedCrossing(num_bins, output_mode)`` of two or more features of one shape ([B], [B, 1]):
    each row's features crossed as ``tf.sparse.cross_hashed`` does (module docstring), mod
    ``num_bins``; ``int`` or ``one_hot``."""

    op = "hashed_crossing"
    makes_float32 = encodes_floats("int")

    def __init__(self, *, num_bins: int, output_mode: str = "int") -> None:
        super().__init__()
        self.num_bins, self.output_mode = int(num_bins), output_mode
        self.register_buffer("anchor", torch.zeros(0, dtype=torch.long))

    @staticmethod
    def _feature(value: Any) -> int:
        if isinstance(value, (str, bytes)):
            return fingerprint64(as_bytes(value))
        return int(value) & MASK

    def forward(self, args, kwargs, masks):
        features = args[0]
        if not isinstance(features, (list, tuple)) or len(features) < 2:
            raise ValueError("hashed_crossing expects a list of two or more features")
        columns, shape, device = [], None, None
        for x in features:
            values, where = _as_values(x, "hashed_crossing")
            device = device or where
            flat = np.asarray(values, dtype=object)
            if shape is not None and flat.shape != shape:
                raise ValueError(f"hashed_crossing expects features of one shape, got {list(shape)} and {flat.shape}")
            if flat.ndim > 2 or (flat.ndim == 2 and flat.shape[1] != 1):
                raise ValueError(f"hashed_crossing expects features of shape [batch] or [batch, 1], got {flat.shape}")
            shape = flat.shape
            columns.append([self._feature(v) for v in flat.reshape(-1).tolist()])
        crossed = []
        for row in zip(*columns, strict=True):
            h = CROSS_HASH_KEY
            for feature in row:
                h = fingerprint_cat64(h, feature)
            crossed.append(h % self.num_bins)
        bins = torch.tensor(crossed, dtype=torch.long).reshape(shape).to(device or self.anchor.device)
        return [encode(bins, self.output_mode, self.num_bins, "hashed_crossing")], [None]


@keras_layer("HashedCrossing")
def convert_hashed_crossing(record, arrays, ctx):
    expect_variables(arrays, 0, "HashedCrossing")
    c = record.config
    refuse_sparse(c)
    spec = {
        "op": "hashed_crossing",
        "num_bins": _positive_int(c, "num_bins"),
        "output_mode": _mode(c, ("int", "one_hot"), "int"),
    }
    return Converted(spec, {"anchor": torch.zeros(0, dtype=torch.long)}, ["FingerprintCat64 of the features"])
