"""The built-in converters: one per Keras layer class, from its config and variables to a graph node.

A converter gets the layer's :class:`~attnzoo.keras.graph.LayerRecord` (class and Keras config), its
variables (numpy arrays in the order of the layer's ``weights``) and the :class:`Context` (the file's
Keras major version), and returns the node's data (``{"op": ..., arguments}``, sizes included) and its
state dict in torch's layout. It raises :class:`Refused` with the reason when the layer uses something
attnzoo does not convert; nothing is ever silently approximated.

attnzoo's own Keras-compatible layers (``keras_dot``, ``keras_additive``, ``keras_mha``, ``lwan``,
``keras_attn``) are not here as nodes: they register through the ``attnzoo_register_keras_layers`` hook
(:func:`register_builtin_keras_layers`), like a plugin's layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnzoo.keras.activations import canonical_activation
from attnzoo.keras.files import snake_case
from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.nodes import OPERATION_NAMES

__all__ = [
    "Refused",
    "Converted",
    "Context",
    "CONVERTERS",
    "CHILD_ORDER",
    "CALL_ARGUMENTS",
    "KERAS_LAYERS",
    "COMMON_CALL_ARGUMENTS",
    "BUILTIN_FUNCTIONS",
    "convert_operation",
    "is_operation",
    "register_builtin_keras_layers",
]


class Refused(Exception):
    """A converter's reason for not taking a layer (reported with the layer)."""


@dataclass
class Converted:
    spec: dict[str, Any]
    state: dict[str, torch.Tensor]
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    major: int
    where: str


# -- config helpers ----------------------------------------------------------------------------------------
def _ints(value: Any, rank: int, what: str) -> list[int]:
    if isinstance(value, int):
        return [value] * rank
    if isinstance(value, (list, tuple)) and len(value) == rank and all(isinstance(v, int) for v in value):
        return list(value)
    raise Refused(f"{what} {value!r} is not {rank} int(s)")


def _act(config: Mapping[str, Any], key: str, ctx: Context, default: str = "linear") -> str:
    value = config.get(key, default)
    name = canonical_activation(value, ctx.major)
    if name is None:
        raise Refused(f"{key} {value!r} is not a built-in Keras activation")
    return name


def _count(arrays: list[np.ndarray], n: int | tuple[int, ...], what: str) -> None:
    allowed = (n,) if isinstance(n, int) else n
    if len(arrays) not in allowed:
        shapes = [list(a.shape) for a in arrays]
        raise Refused(f"has {len(arrays)} variables {shapes}, {what} has {' or '.join(map(str, allowed))}")


def _agrees(config: Mapping[str, Any], key: str, actual: int, what: str) -> None:
    """The config's size, where it gives one, must be the variables' (a file whose config and weights
    disagree was edited or mixed up; Keras itself would not load it)."""
    stated = config.get(key)
    if isinstance(stated, int) and not isinstance(stated, bool) and stated != actual:
        raise Refused(f"its config says {key}={stated} but {what} has {actual}")


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array).astype(np.float32, copy=False))


def _channels_first(config: Mapping[str, Any]) -> bool:
    return config.get("data_format", "channels_last") == "channels_first"


def _refuse_options(config: Mapping[str, Any], **allowed: Any) -> None:
    """Options whose non-default values change the computation and that attnzoo does not convert."""
    for key, default in allowed.items():
        value = config.get(key, default)
        if value not in (default, None) and not (isinstance(default, bool) and value is default):
            raise Refused(f"{key}={value!r} is not supported")


# -- the built-in converters ------------------------------------------------------------------------------
def _embedding(record, arrays, ctx):
    c = record.config
    _count(arrays, 1, "Embedding")
    table = arrays[0]
    if table.ndim != 2:
        raise Refused(f"embeddings {list(table.shape)} is not 2-D")
    _agrees(c, "input_dim", table.shape[0], "the embeddings table")
    _agrees(c, "output_dim", table.shape[1], "the embeddings table")
    spec = {"op": "embedding", "input_dim": table.shape[0], "output_dim": table.shape[1]}
    spec["mask_zero"] = bool(c.get("mask_zero", False))
    return Converted(spec, {"weight": _t(table)})


def _masking(record, arrays, ctx):
    _count(arrays, 0, "Masking")
    value = record.config.get("mask_value", 0.0)
    if not isinstance(value, (int, float)):
        raise Refused(f"mask_value {value!r} is not a number")
    return Converted({"op": "masking", "mask_value": float(value)}, {})


def _dense(record, arrays, ctx):
    c = record.config
    _refuse_options(c, lora_rank=None)
    use_bias = bool(c.get("use_bias", True))
    _count(arrays, 2 if use_bias else 1, "Dense")
    kernel = arrays[0]
    if kernel.ndim != 2:
        raise Refused(f"kernel {list(kernel.shape)} is not 2-D")
    _agrees(c, "units", kernel.shape[1], "the kernel")
    if use_bias and arrays[1].shape != (kernel.shape[1],):
        raise Refused(f"bias {list(arrays[1].shape)} does not fit kernel {list(kernel.shape)}")
    spec = {"op": "dense", "units": kernel.shape[1], "in_features": kernel.shape[0]}
    spec.update(activation=_act(c, "activation", ctx), use_bias=use_bias)
    state = {"weight": _t(kernel.T)}
    if use_bias:
        state["bias"] = _t(arrays[1])
    return Converted(spec, state)


def _activation(record, arrays, ctx):
    _count(arrays, 0, "Activation")
    return Converted({"op": "activation", "activation": _act(record.config, "activation", ctx)}, {})


def _relu(record, arrays, ctx):
    c = record.config
    _count(arrays, 0, "ReLU")
    return Converted(
        {
            "op": "activation",
            "activation": "relu_layer",
            "max_value": None if c.get("max_value") is None else float(c["max_value"]),
            "negative_slope": float(c.get("negative_slope", 0.0) or 0.0),
            "threshold": float(c.get("threshold", 0.0) or 0.0),
        },
        {},
    )


def _leaky_relu(record, arrays, ctx):
    c = record.config
    _count(arrays, 0, "LeakyReLU")
    slope = c.get("negative_slope", c.get("alpha", 0.3))
    return Converted({"op": "activation", "activation": "relu_layer", "negative_slope": float(slope)}, {})


def _elu(record, arrays, ctx):
    _count(arrays, 0, "ELU")
    return Converted(
        {"op": "activation", "activation": "elu_layer", "alpha": float(record.config.get("alpha", 1.0))}, {}
    )


def _prelu(record, arrays, ctx):
    _count(arrays, 1, "PReLU")
    return Converted({"op": "prelu", "alpha_shape": list(arrays[0].shape)}, {"alpha": _t(arrays[0])})


def _softmax(record, arrays, ctx):
    _count(arrays, 0, "Softmax")
    axis = record.config.get("axis", -1)
    return Converted({"op": "softmax", "axis": axis, "keras3": ctx.major >= 3}, {})


def _identity(record, arrays, ctx):
    _count(arrays, 0, record.class_name)
    return Converted({"op": "identity"}, {}, [f"{record.class_name} does nothing at inference"])


def _flatten(record, arrays, ctx):
    _count(arrays, 0, "Flatten")
    return Converted({"op": "flatten", "channels_first": _channels_first(record.config)}, {})


def _reshape(record, arrays, ctx):
    shape = record.config.get("target_shape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise Refused(f"target_shape {shape!r} is not a list of ints")
    return Converted({"op": "reshape", "target_shape": list(shape)}, {})


def _permute(record, arrays, ctx):
    dims = record.config.get("dims")
    if not isinstance(dims, (list, tuple)) or sorted(dims) != list(range(1, len(dims) + 1)):
        raise Refused(f"dims {dims!r} is not a permutation of 1..n")
    return Converted({"op": "permute", "dims": list(dims)}, {})


def _repeat(record, arrays, ctx):
    n = record.config.get("n")
    if not isinstance(n, int) or n < 1:
        raise Refused(f"n {n!r} is not a positive int")
    return Converted({"op": "repeat_vector", "n": n}, {})


def _conv(rank: int):
    def convert(record, arrays, ctx):
        c = record.config
        use_bias = bool(c.get("use_bias", True))
        _count(arrays, 2 if use_bias else 1, record.class_name)
        kernel = arrays[0]
        if kernel.ndim != rank + 2:
            raise Refused(f"kernel {list(kernel.shape)} is not {rank + 2}-D")
        _agrees(c, "filters", kernel.shape[-1], "the kernel")
        stated = c.get("kernel_size")
        if stated is not None and _ints(stated, rank, "kernel_size") != list(kernel.shape[:rank]):
            raise Refused(f"its config says kernel_size={stated} but the kernel is {list(kernel.shape)}")
        padding = str(c.get("padding", "valid")).lower()
        if padding not in ("valid", "same") and not (padding == "causal" and rank == 1):
            raise Refused(f"padding {padding!r} is not supported")
        groups = int(c.get("groups", 1) or 1)
        strides = _ints(c.get("strides", 1), rank, "strides")
        dilation = _ints(c.get("dilation_rate", 1), rank, "dilation_rate")
        if any(s > 1 for s in strides) and any(d > 1 for d in dilation):
            raise Refused("strides and dilation_rate both above 1 (Keras refuses this too)")
        spec = {
            "op": "conv",
            "rank": rank,
            "filters": kernel.shape[-1],
            "in_channels": kernel.shape[-2] * groups,
            "kernel_size": list(kernel.shape[:rank]),
            "strides": strides,
            "dilation_rate": dilation,
            "padding": padding,
            "groups": groups,
            "activation": _act(c, "activation", ctx),
            "use_bias": use_bias,
            "channels_first": _channels_first(c),
        }
        # keras [*kernel, in / groups, filters] -> torch [filters, in / groups, *kernel]
        weight = np.transpose(kernel, (rank + 1, rank, *range(rank)))
        state = {"weight": _t(weight)}
        if use_bias:
            state["bias"] = _t(arrays[1])
        return Converted(spec, state)

    return convert


def _pool(rank: int, kind: str):
    def convert(record, arrays, ctx):
        c = record.config
        _count(arrays, 0, record.class_name)
        size = _ints(c.get("pool_size", 2), rank, "pool_size")
        strides = c.get("strides")
        strides = size if strides is None else _ints(strides, rank, "strides")
        padding = str(c.get("padding", "valid")).lower()
        if padding not in ("valid", "same"):
            raise Refused(f"padding {padding!r} is not supported")
        spec = {"op": "pool", "rank": rank, "kind": kind, "pool_size": size, "strides": strides, "padding": padding}
        spec["channels_first"] = _channels_first(c)
        return Converted(spec, {})

    return convert


def _global_pool(rank: int, kind: str):
    def convert(record, arrays, ctx):
        c = record.config
        _count(arrays, 0, record.class_name)
        spec = {"op": "global_pool", "rank": rank, "kind": kind, "keepdims": bool(c.get("keepdims", False))}
        spec["channels_first"] = _channels_first(c)
        notes = ["a sample with every step masked gives 0 here, NaN (0 / 0) in Keras"] if kind == "average" else []
        return Converted(spec, {}, notes)

    return convert


def _layer_norm(record, arrays, ctx):
    c = record.config
    axis = c.get("axis", -1)
    axes = [axis] if isinstance(axis, int) else list(axis)
    scale, center = bool(c.get("scale", True)), bool(c.get("center", True))
    rms = bool(c.get("rms_scaling", False))
    count = int(scale) + int(center and not rms)
    _count(arrays, (count, int(scale) + int(center)), "LayerNormalization")
    shape = list(arrays[0].shape) if arrays else []
    spec = {"op": "layer_norm", "axis": axes, "shape": shape, "epsilon": float(c.get("epsilon", 1e-3))}
    spec.update(center=center, scale=scale, rms_scaling=rms)
    state: dict[str, torch.Tensor] = {}
    at = 0
    if scale:
        state["weight"] = _t(arrays[at])
        at += 1
    if center and not rms:
        state["bias"] = _t(arrays[at])
    return Converted(spec, state)


def _batch_norm(record, arrays, ctx):
    c = record.config
    axis = c.get("axis", -1)
    if isinstance(axis, list):
        if len(axis) != 1:
            raise Refused(f"axis {axis!r}: one axis is supported")
        axis = axis[0]
    scale, center = bool(c.get("scale", True)), bool(c.get("center", True))
    _count(arrays, 2 + int(scale) + int(center), "BatchNormalization")
    spec = {"op": "batch_norm", "axis": int(axis), "features": int(arrays[-1].shape[0])}
    spec.update(epsilon=float(c.get("epsilon", 1e-3)), center=center, scale=scale)
    state: dict[str, torch.Tensor] = {}
    at = 0
    if scale:
        state["weight"], at = _t(arrays[at]), at + 1
    if center:
        state["bias"], at = _t(arrays[at]), at + 1
    state["running_mean"], state["running_var"] = _t(arrays[at]), _t(arrays[at + 1])
    return Converted(spec, state, ["inference statistics (moving mean and variance)"])


def _merge(mode: str):
    def convert(record, arrays, ctx):
        _count(arrays, 0, record.class_name)
        return Converted({"op": "merge", "mode": mode, "keras3": ctx.major >= 3}, {})

    return convert


def _concatenate(record, arrays, ctx):
    _count(arrays, 0, "Concatenate")
    return Converted({"op": "concatenate", "axis": int(record.config.get("axis", -1))}, {})


def _dot(record, arrays, ctx):
    _count(arrays, 0, "Dot")
    axes = record.config.get("axes", -1)
    axes = [axes, axes] if isinstance(axes, int) else list(axes)
    return Converted({"op": "dot", "axes": axes, "normalize": bool(record.config.get("normalize", False))}, {})


_CELLS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}


def _gates(array: np.ndarray, cell: str, axis: int) -> np.ndarray:
    """Keras's GRU gate order (z, r, h) as torch's (r, z, n); LSTM and SimpleRNN are already in order."""
    if cell != "gru":
        return array
    z, r, h = np.split(array, 3, axis=axis)
    return np.concatenate([r, z, h], axis=axis)


def _recurrent_spec(config: Mapping[str, Any], arrays: list[np.ndarray], cell: str, ctx: Context, **force: Any):
    """The node spec and torch-layout state of an LSTM / GRU / SimpleRNN config and its variables."""
    if config.get("stateful"):
        raise Refused("stateful=True: a stateful RNN keeps state between calls, which attnzoo does not convert")
    use_bias = bool(config.get("use_bias", True))
    _count(arrays, 3 if use_bias else 2, "the cell")
    kernel, recurrent = arrays[0], arrays[1]
    gates = {"lstm": 4, "gru": 3, "simple_rnn": 1}[cell]
    units = recurrent.shape[0]
    _agrees(config, "units", units, "the recurrent kernel")
    if kernel.ndim != 2 or recurrent.shape != (units, gates * units) or kernel.shape[1] != gates * units:
        raise Refused(
            f"kernel {list(kernel.shape)} and recurrent_kernel {list(recurrent.shape)} do not fit {gates} gates"
        )
    reset_after = bool(config.get("reset_after", ctx.major >= 2)) if cell == "gru" else True
    spec = {
        "op": "recurrent",
        "cell": cell,
        "units": units,
        "input_size": kernel.shape[0],
        "activation": _act(config, "activation", ctx, "tanh"),
        "recurrent_activation": _act(config, "recurrent_activation", ctx, "sigmoid")
        if cell != "simple_rnn"
        else "sigmoid",
        "use_bias": use_bias,
        "reset_after": reset_after,
        "return_sequences": bool(config.get("return_sequences", False)),
        "return_state": bool(config.get("return_state", False)),
        "go_backwards": bool(config.get("go_backwards", False)),
        "zero_output_for_mask": bool(config.get("zero_output_for_mask", False)),
        "time_major": bool(config.get("time_major", False)),
    }
    spec.update(force)
    state = {
        "rnn.weight_ih_l0": _t(_gates(kernel, cell, 1).T),
        "rnn.weight_hh_l0": _t(_gates(recurrent, cell, 1).T),
    }
    notes = []
    if use_bias:
        bias = arrays[2]
        if cell == "gru" and reset_after:
            if bias.shape != (2, 3 * units):
                raise Refused(f"bias {list(bias.shape)} is not [2, {3 * units}] (reset_after=True)")
            state["rnn.bias_ih_l0"] = _t(_gates(bias[0], cell, 0))
            state["rnn.bias_hh_l0"] = _t(_gates(bias[1], cell, 0))
        else:
            if bias.shape != (gates * units,):
                raise Refused(f"bias {list(bias.shape)} is not [{gates * units}]")
            state["rnn.bias_ih_l0"] = _t(_gates(bias, cell, 0))
            state["rnn.bias_hh_l0"] = torch.zeros(gates * units)
    fast = spec["activation"] == "tanh" and spec["recurrent_activation"] == "sigmoid" and reset_after
    if cell == "simple_rnn":
        fast = spec["activation"] in ("tanh", "relu")
    notes.append(
        "packed torch kernel (kept steps moved to the front)" if fast else "exact step loop (torch has no such kernel)"
    )
    if "hard_sigmoid_keras2" in (spec["activation"], spec["recurrent_activation"]):
        notes.append("Keras 2 hard_sigmoid: clip(0.2 x + 0.5, 0, 1)")
    if cell == "gru" and not reset_after:
        notes.append("GRU reset_after=False: the reset gate applies before the recurrent kernel")
    return spec, state, notes


def _rnn(record, arrays, ctx):
    cell = _CELLS[record.class_name]
    spec, state, notes = _recurrent_spec(record.config, arrays, cell, ctx)
    return Converted(spec, state, notes)


def _bidirectional(record, arrays, ctx):
    c = record.config
    inner = c.get("layer")
    if not isinstance(inner, dict) or inner.get("class_name") not in _CELLS:
        name = inner.get("class_name") if isinstance(inner, dict) else inner
        raise Refused(f"wraps {name!r}; LSTM, GRU and SimpleRNN are supported")
    back = c.get("backward_layer") if isinstance(c.get("backward_layer"), dict) else inner
    if back.get("class_name") not in _CELLS:
        raise Refused(f"backward_layer {back.get('class_name')!r} is not LSTM, GRU or SimpleRNN")
    merge = c.get("merge_mode", "concat")
    if merge not in ("concat", "sum", "mul", "ave", None):
        raise Refused(f"merge_mode {merge!r}")
    f_config, b_config = inner.get("config", {}), back.get("config", {})
    f_count = 3 if f_config.get("use_bias", True) else 2
    sequences = bool(f_config.get("return_sequences", False))
    forward, f_state, notes = _recurrent_spec(
        f_config, arrays[:f_count], _CELLS[inner["class_name"]], ctx, go_backwards=False, zero_output_for_mask=sequences
    )
    backward, b_state, _ = _recurrent_spec(
        b_config, arrays[f_count:], _CELLS[back["class_name"]], ctx, go_backwards=True, zero_output_for_mask=sequences
    )
    state = {f"forward_layer.{k}": v for k, v in f_state.items()}
    state.update({f"backward_layer.{k}": v for k, v in b_state.items()})
    spec = {"op": "bidirectional", "forward_layer": forward, "backward_layer": backward, "merge_mode": merge}
    return Converted(spec, state, notes)


def _time_distributed(record, arrays, ctx):
    inner = record.config.get("layer")
    if not isinstance(inner, dict) or not isinstance(inner.get("class_name"), str):
        raise Refused("has no inner layer config")
    name = inner["class_name"]
    if name in _CELLS or name in ("Bidirectional", "TimeDistributed") or name not in CONVERTERS:
        raise Refused(f"wraps {name!r}; stateless Keras layers (Dense, Conv, pooling, ...) are supported")
    inner_record = LayerRecord(record.key, record.path, name, None, "keras.layers", inner.get("config", {}))
    converted = CONVERTERS[name](inner_record, arrays, ctx)
    spec = {"op": "time_distributed", "layer": converted.spec}
    return Converted(spec, {f"layer.{k}": v for k, v in converted.state.items()}, converted.notes)


def convert_operation(record, arrays, ctx):
    name = snake_case(record.class_name)
    if name not in OPERATION_NAMES:
        raise Refused(f"the keras operation {record.class_name} is not supported")
    config = {k: v for k, v in record.config.items() if k != "name"}
    return Converted({"op": "operation", "name": name, "config": config}, {})


def is_operation(record: LayerRecord) -> bool:
    """A keras 3 operation: its module says so, or (a legacy .h5 records no module) its class is an
    operation's and its config is not a layer's."""
    if record.module is not None:
        return record.is_operation
    # every layer config carries "trainable"; an operation's holds its own arguments only
    return snake_case(record.class_name) in OPERATION_NAMES and "trainable" not in record.config


CONVERTERS: dict[str, Callable[[LayerRecord, list[np.ndarray], Context], Converted]] = {
    "Embedding": _embedding,
    "Masking": _masking,
    "Dense": _dense,
    "Activation": _activation,
    "ReLU": _relu,
    "LeakyReLU": _leaky_relu,
    "ELU": _elu,
    "PReLU": _prelu,
    "Softmax": _softmax,
    "Dropout": _identity,
    "SpatialDropout1D": _identity,
    "SpatialDropout2D": _identity,
    "SpatialDropout3D": _identity,
    "GaussianDropout": _identity,
    "GaussianNoise": _identity,
    "AlphaDropout": _identity,
    "ActivityRegularization": _identity,
    "Identity": _identity,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Permute": _permute,
    "RepeatVector": _repeat,
    "Conv1D": _conv(1),
    "Conv2D": _conv(2),
    "MaxPooling1D": _pool(1, "max"),
    "MaxPooling2D": _pool(2, "max"),
    "AveragePooling1D": _pool(1, "average"),
    "AveragePooling2D": _pool(2, "average"),
    "MaxPool1D": _pool(1, "max"),
    "MaxPool2D": _pool(2, "max"),
    "AvgPool1D": _pool(1, "average"),
    "AvgPool2D": _pool(2, "average"),
    "GlobalAveragePooling1D": _global_pool(1, "average"),
    "GlobalAveragePooling2D": _global_pool(2, "average"),
    "GlobalMaxPooling1D": _global_pool(1, "max"),
    "GlobalMaxPooling2D": _global_pool(2, "max"),
    "GlobalAvgPool1D": _global_pool(1, "average"),
    "GlobalAvgPool2D": _global_pool(2, "average"),
    "GlobalMaxPool1D": _global_pool(1, "max"),
    "GlobalMaxPool2D": _global_pool(2, "max"),
    "LayerNormalization": _layer_norm,
    "BatchNormalization": _batch_norm,
    "Add": _merge("add"),
    "Subtract": _merge("subtract"),
    "Multiply": _merge("multiply"),
    "Average": _merge("average"),
    "Maximum": _merge("maximum"),
    "Minimum": _merge("minimum"),
    "Concatenate": _concatenate,
    "Dot": _dot,
    "LSTM": _rnn,
    "GRU": _rnn,
    "SimpleRNN": _rnn,
    "Bidirectional": _bidirectional,
    "TimeDistributed": _time_distributed,
}

# Keras's variable order is not its save order for these wrappers (keras 3 files)
CHILD_ORDER = {
    "Bidirectional": ("forward_layer", "backward_layer"),
    "MultiHeadAttention": ("query_dense", "key_dense", "value_dense", "output_dense"),
}

# call arguments each layer may carry; any other is refused rather than ignored
COMMON_CALL_ARGUMENTS = {"training", "mask"}
CALL_ARGUMENTS = {
    "LSTM": {"initial_state"},
    "GRU": {"initial_state"},
    "SimpleRNN": {"initial_state"},
    "Bidirectional": {"initial_state"},
    "Softmax": set(),
}
KERAS_LAYERS = frozenset([*CONVERTERS, "Attention", "AdditiveAttention", "MultiHeadAttention", "InputLayer"])


# -- attnzoo's own Keras layers, registered through the hook like a plugin's -----------------------------
def _zoo_module(name: str, config: dict[str, Any], arrays: list[np.ndarray], where: str) -> Any:
    from attnzoo.core.create import create
    from attnzoo.keras.importer import load_keras_arrays

    module = create(name, config=config)
    return load_keras_arrays(module, arrays, where=where)


def _convert_attention(config: dict[str, Any], weights: list[np.ndarray]) -> Any:
    mode = config.get("score_mode", "dot")
    layer_config = {
        "use_scale": bool(config.get("use_scale", False)),
        "score_mode": mode,
        "dropout": float(config.get("dropout", 0.0) or 0.0),
        "keras_semantics": int(config.get("__keras_major__", 3)),
    }
    return _zoo_module("keras_dot", layer_config, weights, "Attention")


def _convert_additive(config: dict[str, Any], weights: list[np.ndarray]) -> Any:
    use_scale = bool(config.get("use_scale", True))
    layer_config = {
        "use_scale": use_scale,
        "dropout": float(config.get("dropout", 0.0) or 0.0),
        "keras_semantics": int(config.get("__keras_major__", 3)),
    }
    if use_scale and weights:
        layer_config["dim"] = int(weights[0].shape[0])
    return _zoo_module("keras_additive", layer_config, weights, "AdditiveAttention")


def _convert_mha(config: dict[str, Any], weights: list[np.ndarray]) -> Any:
    axes = config.get("attention_axes")
    if axes not in (None, [1], (1,), 1):
        raise ValueError(f"attention_axes={axes!r}: attention over axis 1 of [batch, seq, dim] inputs is supported")
    for key in ("use_gate", "sliding_window"):
        if config.get(key) not in (None, False):
            raise ValueError(f"{key}={config.get(key)!r} is not supported")
    output_shape = config.get("output_shape")
    if isinstance(output_shape, (list, tuple)):
        if len(output_shape) != 1:
            raise ValueError(f"output_shape={output_shape!r}: one output dimension is supported")
        output_shape = output_shape[0]
    use_bias = bool(config.get("use_bias", True))
    if len(weights) != (8 if use_bias else 4):
        raise ValueError(f"has {len(weights)} variables, MultiHeadAttention has {8 if use_bias else 4}")
    step = 2 if use_bias else 1
    query, key, value = weights[0], weights[step], weights[2 * step]
    layer_config = {
        "num_heads": int(config["num_heads"]),
        "key_dim": int(config["key_dim"]),
        "value_dim": int(config.get("value_dim") or config["key_dim"]),
        "dropout": float(config.get("dropout", 0.0) or 0.0),
        "use_bias": use_bias,
        "output_shape": None if output_shape is None else int(output_shape),
        "query_size": int(query.shape[0]),
        "key_size": int(key.shape[0]),
        "value_size": int(value.shape[0]),
        "keras_semantics": int(config.get("__keras_major__", 3)),
    }
    return _zoo_module("keras_mha", layer_config, weights, "MultiHeadAttention")


def _convert_lwan(config: dict[str, Any], weights: list[np.ndarray]) -> Any:
    if len(weights) != 3 or weights[0].ndim != 2:
        raise ValueError(f"LabelWiseAttention has Wa [L, h], Wo [L, h], bo [L]; got {[list(w.shape) for w in weights]}")
    labels, hidden = weights[0].shape
    return _zoo_module("lwan", {"num_labels": labels, "hidden_size": hidden, "output": "probs"}, weights, "lwan")


def _convert_seed000(config: dict[str, Any], weights: list[np.ndarray]) -> Any:
    if len(weights) != 1 or weights[0].ndim != 2:
        raise ValueError(f"seed 000's Attention has one weight Ws [C, E]; got {[list(w.shape) for w in weights]}")
    classes, embed = weights[0].shape
    return _zoo_module("keras_attn", {"num_classes": classes, "embed_dim": embed}, weights, "keras_attn")


def register_builtin_keras_layers(register: Callable[..., None]) -> None:
    """attnzoo's own Keras-compatible layers, through the same ``register`` a plugin gets."""
    register("keras>Attention", _convert_attention, output_mask="input", call="attention")
    register("keras>AdditiveAttention", _convert_additive, output_mask="input", call="attention")
    register("keras>MultiHeadAttention", _convert_mha, output_mask="input", call="mha")
    # Chalkidis et al.'s LabelWiseAttention (lmtc-eurlex57k) and seed 000's layer ignore the mask
    register("LabelWiseAttention", _convert_lwan, mask=False)
    register("Attention", _convert_seed000, mask=False)


BUILTIN_FUNCTIONS = {_convert_attention, _convert_additive, _convert_mha, _convert_lwan, _convert_seed000}
