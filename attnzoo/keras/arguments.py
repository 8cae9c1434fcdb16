"""Reading a Keras layer's config and variables into a node's arguments: the checks converters share.

Each function raises :class:`~attnzoo.keras.registry.Refused` with a reason a user can act on when the
config or the variables are not what the layer's class makes: a file whose config and weights disagree
was edited or mixed up, and Keras itself would not load it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnzoo.keras.activations import canonical_activation
from attnzoo.keras.registry import Context, Refused

__all__ = [
    "ints",
    "activation_of",
    "expect_variables",
    "expect_shape",
    "kernel_size_agrees",
    "input_agrees",
    "agrees",
    "as_tensor",
    "channels_first",
    "refuse_options",
    "rank_of",
]


def ints(value: Any, rank: int, what: str) -> list[int]:
    """``value`` as ``rank`` ints (Keras accepts one int for every axis)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * rank
    if isinstance(value, (list, tuple)) and len(value) == rank and all(isinstance(v, int) for v in value):
        return list(value)
    raise Refused(f"{what} {value!r} is not {rank} int(s)")


def activation_of(config: Mapping[str, Any], key: str, ctx: Context, default: str = "linear") -> str:
    """The canonical name of the activation under ``key`` (the file's Keras version decides the variant)."""
    value = config.get(key, default)
    name = canonical_activation(value, ctx.major)
    if name is None:
        shown = value.get("config") if isinstance(value, dict) and isinstance(value.get("config"), str) else value
        raise Refused(
            f"{key} {shown!r} is not a built-in Keras activation: a custom activation's code is not in the file. "
            f"Convert the layers that use it with a converter of your own, registered for the layer's class "
            f"('keras>ClassName') through the attnzoo_register_keras_layers hook or convert_keras_model(..., "
            f"custom_layers=...) (docs/keras-migration.md, 'Custom layers'): it is asked before attnzoo's own"
        )
    return name


def expect_variables(arrays: list[np.ndarray], n: int | tuple[int, ...], what: str) -> None:
    """The layer holds ``n`` variables (or one of the counts given)."""
    allowed = (n,) if isinstance(n, int) else n
    if len(arrays) not in allowed:
        shapes = [list(a.shape) for a in arrays]
        raise Refused(f"has {len(arrays)} variables {shapes}, {what} has {' or '.join(map(str, allowed))}")


def expect_shape(array: np.ndarray, shape: Sequence[int | None], what: str) -> None:
    """A variable has the shape its layer makes from its config and input (None: any size on that axis).
    Keras refuses to load a variable of another shape; the reason names both shapes."""
    fits = len(array.shape) == len(shape) and all(s is None or s == a for a, s in zip(array.shape, shape, strict=True))
    if not fits:
        needed = "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"
        raise Refused(f"its {what} is {list(array.shape)} in the file, but the layer makes it {needed}")


def kernel_size_agrees(config: Mapping[str, Any], kernel: np.ndarray, rank: int) -> None:
    """The config's ``kernel_size``, where it gives one, is the kernel's (its first ``rank`` axes)."""
    stated = config.get("kernel_size")
    if stated is not None and ints(stated, rank, "kernel_size") != list(kernel.shape[:rank]):
        raise Refused(f"its config says kernel_size={stated} but the kernel is {list(kernel.shape)}")


def input_agrees(record: Any, width: int, *, first: bool = False, what: str = "its kernel") -> None:
    """The input width the layer's variables take is the one Keras built the layer for (keras 3's
    ``build_config``, where the file records it; channels on axis 1 with ``first``): Keras refuses to
    load a kernel of another width, and running it would fail at the first call."""
    shape = getattr(record, "build_shape", None)
    if not shape or len(shape) < 2:
        return
    built = shape[1 if first else -1]
    if built is not None and built != width:
        raise Refused(f"{what} takes inputs {width} wide, but Keras built the layer for inputs of shape {shape}")


def agrees(config: Mapping[str, Any], key: str, actual: int, what: str) -> None:
    """The config's size, where it gives one, is the variables' size."""
    stated = config.get(key)
    if isinstance(stated, int) and not isinstance(stated, bool) and stated != actual:
        raise Refused(f"its config says {key}={stated} but {what} has {actual}")


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """A Keras variable as a float32 tensor, sharing the array's memory where torch can (a transposed kernel is a
    view): a conversion makes each layer's tensors contiguous, in the dtype the model holds them in, once
    (:mod:`attnzoo.keras.dtypes`), and frees the arrays as it goes."""
    array = np.asarray(array, dtype=np.float32)
    if any(stride < 0 or stride % array.itemsize for stride in array.strides):  # torch takes neither
        array = np.ascontiguousarray(array)
    return torch.from_numpy(array)


def channels_first(config: Mapping[str, Any]) -> bool:
    return config.get("data_format", "channels_last") == "channels_first"


def refuse_options(config: Mapping[str, Any], **defaults: Any) -> None:
    """Options whose non-default values change the computation and that attnzoo does not convert."""
    for key, default in defaults.items():
        value = config.get(key, default)
        if value not in (default, None) and not (isinstance(default, bool) and value is default):
            raise Refused(f"{key}={value!r} is not supported")


def rank_of(class_name: str) -> int:
    """The spatial rank a Keras class names (``Conv2DTranspose`` -> 2, ``SeparableConvolution1D`` -> 1)."""
    found = re.search(r"([123])D", class_name)
    if found is None:
        raise Refused(f"{class_name} names no rank (1D, 2D or 3D)")
    return int(found.group(1))
