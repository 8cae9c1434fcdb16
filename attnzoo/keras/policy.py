"""A Keras file's dtype policies: what the report says of them, and the computation in the policy's own dtype
when the conversion is asked for it (``convert_keras_model(..., compute_dtype="policy")``).

Keras 3 computes a layer of a ``mixed_float16`` (``mixed_bfloat16``) policy so: its ``__call__`` casts every
floating input to the compute dtype, float16 (bfloat16), and inside the call each float32 variable is read cast
to it (autocast), except the variables a layer creates with ``autocast=False`` (BatchNormalization's all four:
it computes in float32 and casts its output back). A layer of a float32 policy in the same model (a final
``Activation("softmax", dtype="float32")``) casts its inputs to float32. The converted model does the same,
layer by layer: each layer's floating inputs are cast to its compute dtype as it is called, and its floating
parameters and buffers are held in that dtype (BatchNormalization's kept float32), which for inference is what
Keras's autocast computes (the same rounding of each variable, once). The other operations of a layer (a
softmax, a normalisation's statistics) are computed as the converted layer computes them in that dtype.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras.calls import Call
from attnzoo.keras.graph import KerasGraph, LayerRecord
from attnzoo.keras.torch_layers import KerasBatchNorm

__all__ = [
    "COMPUTE_DTYPES",
    "layer_policy",
    "compute_dtype_of",
    "policy_notes",
    "set_compute_dtypes",
    "check_compute_dtype",
]

COMPUTE_DTYPES = ("float32", "policy")  # convert_keras_model's choices
_TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
_KEEP_FLOAT32 = (KerasBatchNorm,)  # Keras creates their variables with autocast=False


def layer_policy(record: LayerRecord) -> str | None:
    """The name of a layer's dtype policy (``mixed_float16``), Keras 2's ``Policy`` or keras 3's
    ``DTypePolicy`` record; None for a plain dtype."""
    dtype = record.config.get("dtype")
    if isinstance(dtype, dict) and isinstance(dtype.get("config"), dict):
        name = dtype["config"].get("name")
        return name if isinstance(name, str) else None
    return None


def compute_dtype_of(record: LayerRecord) -> str:
    """The dtype Keras computes the layer in: a mixed policy's second half, else float32."""
    policy = layer_policy(record) or ""
    return policy.split("_", 1)[1] if policy in ("mixed_float16", "mixed_bfloat16") else "float32"


def policy_notes(graph: KerasGraph, calls_of: dict[str, list[Call]], notes: list[str], *, own: bool) -> list[str]:
    """What the file sets that the converted model does not do by itself, said once (appended to ``notes``): a
    mixed-precision policy (computed in float32 here, or in its own dtype when ``own``), calls with
    ``training=True`` in the graph (Monte Carlo dropout), whose layers it returns."""
    mixed = sorted({p for r in graph.layers.values() if (p := layer_policy(r)) and p.startswith("mixed_")})
    if mixed and own:
        notes.append(
            f"the file's dtype policy {', '.join(mixed)}: computed as Keras computes it (compute_dtype='policy'), "
            f"each layer's inputs cast to its compute dtype and its variables held in it (BatchNormalization's "
            f"in float32); layers of a float32 policy in float32"
        )
    elif mixed:
        notes.append(
            f"the file's dtype policy {', '.join(mixed)}: Keras computes in {mixed[0].split('_', 1)[1]} with "
            f"float32 variables; the converted model computes in float32 (the variables as saved), so it "
            f"differs from Keras's predictions by {mixed[0].split('_', 1)[1]} rounding; "
            f"compute_dtype='policy' (convert-keras --compute-dtype policy) computes in the policy's dtype"
        )
    training = [key for key, calls in calls_of.items() if any(c.kwargs.get("training") is True for c in calls)]
    if training:
        names = ", ".join(training)
        notes.append(
            f"called with training=True in the graph (Monte Carlo dropout): {names}; Keras runs those calls in "
            f"training mode at inference too, the converted model only under model.train() (the whole model)"
        )
    return training


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value


def _held_in(module: nn.Module, _keys: Any, *, dtype: torch.dtype) -> None:
    module.to(dtype)


def set_compute_dtypes(layers: nn.ModuleDict, dtypes: dict[str, Any]) -> None:
    """Each layer of ``dtypes`` (module key -> ``float16``, ``bfloat16`` or ``float32``, as the graph records
    them) computes in its dtype: its floating inputs cast as it is called, its floating parameters and buffers
    held in it (BatchNormalization's kept float32)."""
    for key, name in dtypes.items():
        dtype = _TORCH.get(name) if isinstance(name, str) else None
        if dtype is None:
            raise WeightsError(
                f"keras_model: layer {key!r} has compute_dtype {name!r}; expected one of {', '.join(_TORCH)}"
            )
        layer = layers[key]
        if not isinstance(layer, _KEEP_FLOAT32):
            layer.to(dtype)  # and again after each load (attnzoo.load assigns float32 tensors)
            layer.register_load_state_dict_post_hook(partial(_held_in, dtype=dtype))
        layer.register_forward_pre_hook(
            lambda _module, args, kwargs, dtype=dtype: (_cast(args, dtype), _cast(kwargs, dtype)), with_kwargs=True
        )


def check_compute_dtype(value: Any) -> bool:
    """Whether ``compute_dtype`` asks for the policy's dtype (``"policy"``) or float32 (``"float32"``)."""
    if value not in COMPUTE_DTYPES:
        raise ConfigError(
            f"compute_dtype must be 'float32' (the default: every layer in float32) or 'policy' (each layer in "
            f"its Keras dtype policy's compute dtype, as Keras computes a mixed_float16 file), got {value!r}"
        )
    return value == "policy"
