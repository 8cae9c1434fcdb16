"""``KerasModel.to_source()``: a converted Keras model as one readable, self-contained PyTorch module.

The module holds a class named after the Keras model, built with no arguments, whose ``layers`` are the
converted model's, under the same names, so ``load_state_dict`` takes the converted folder's
``model.safetensors`` as it is. Its ``forward`` is straight-line code, one block per Keras call, with
each tensor's Keras mask written out as a variable beside it (``embedding_mask = ids != 0``).

Layers whose Keras semantics are plain torch are written as torch: ``nn.Embedding``, ``nn.Linear`` and
its activation, ``nn.Conv1d/2d/3d`` with Keras's padding (``padding="same"`` where it is centred, else
``F.pad``), ``nn.ConvTranspose1d/2d`` where torch's padding gives Keras's window, ``nn.LayerNorm`` over the
last axis, reshapes, ``Masking``, ``Dropout``. Stateless layers are expressions in ``forward`` with no layer
declared, where the call's data and masks let them be written exactly: Keras 3's recorded operations,
``Concatenate``, global pooling (its masked average too), ZeroPadding and Cropping, UpSampling, Max- and
AveragePooling, the ReLU/LeakyReLU/ELU layers and an unmasked Softmax (a mask a node call returns may be
None, so a Concatenate or masked pooling reading one stays a node call). Keras's LSTM and GRU that torch's
cell computes are ``nn.LSTM`` / ``nn.GRU`` (a Bidirectional of two, concatenated, one bidirectional layer)
run by :func:`~attnzoo.keras.torch_layers.run_rnn`, which writes Keras's masking. The others (the other
recurrent layers and calls, BatchNormalization with Keras's statistics, the Add/Multiply/... merges,
attention layers built by ``attnzoo.create``, preprocessing) are attnzoo's own node classes, imported by
name and called with the node protocol; their source is one click away.

The emitted module imports only torch and attnzoo, and passes ``ruff check --isolated`` (import sorting
too) and ``ruff format --check``: each statement is laid out by :mod:`attnzoo.keras.code_lines`. A layer
whose Keras name is a plain name is an attribute, ``layers.dense(x)``; any other is a string key.
Nothing from the file is spliced into it as code: the names it makes up come from
:func:`~attnzoo.keras.codegen.identifier`, each value is a :func:`~attnzoo.keras.codegen.literal`, the Keras
names and version are kept as data (``KERAS_NAMES``, ``KERAS_VERSION``), comments are Keras class names
only, and :func:`~attnzoo.keras.codegen.check_source` parses and walks the result before it is returned.

This module is what a converted model runs: :class:`~attnzoo.keras.model.KerasModel` calls :func:`emit` on
its graph, compiles the text (:mod:`attnzoo.keras.compiled`) and holds the layers its ``__init__`` declares;
``forward`` lets go of each variable after the block (one call's lines) that last reads it (``del``).
:func:`emit` also says which variables hold each call's outputs and which call each line belongs to, so
``KerasModel.trace`` and the model's errors name Keras's layers.

Why one file: one job, writing the module; a writer per layer kind and the code that puts them in order
share the emitter's state (names taken, imports, masks).
"""

from __future__ import annotations

import ast
import inspect
import keyword
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from attnzoo.errors import ConfigError
from attnzoo.keras.code_lines import WIDTH, layout
from attnzoo.keras.codegen import check_source, identifier, literal, usable
from attnzoo.keras.converters.conv_transpose import transpose_window
from attnzoo.keras.converters.ops import DTYPES, ELEMENTWISE, REDUCE, UNARY
from attnzoo.keras.masks import CallMasks, first_masks, kwargs_for_node, refs_in
from attnzoo.keras.nodes import NODES, Node

__all__ = ["to_source", "emit", "Emitted"]

_ACTIVATIONS = {
    "linear": "{}",
    "relu": "torch.relu({})",
    "sigmoid": "torch.sigmoid({})",
    "tanh": "torch.tanh({})",
    "softmax": "torch.softmax({}, dim=-1)",
    "log_softmax": "torch.log_softmax({}, dim=-1)",
    "softplus": "torch.logaddexp({0}, torch.zeros_like({0}))",
    "silu": "F.silu({})",
    "swish": "F.silu({})",
    "selu": "F.selu({})",
    "elu": "F.elu({})",
    "gelu": "F.gelu({})",
    "relu6": "F.relu6({})",
    "exponential": "torch.exp({})",
}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a comment or a keyword argument may be as it is


class _Code(str):
    """Text this module wrote as code (the masks of keyword tensors), as opposed to the graph's data, which
    is only ever written as a literal: a file's kwarg of the same name stays data."""


@dataclass
class _Emitter:
    """The code being written: the ``__init__`` and ``forward`` lines, the imports, the names in use, and
    for each tensor variable the variable holding its Keras mask (None: no mask)."""

    init: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    imports: dict[str, set[str]] = field(default_factory=dict)  # module -> the names imported from it
    used: set[str] = field(default_factory=set)
    keras_names: dict[str, str] = field(default_factory=dict)  # a name made up here -> the Keras name
    values: dict[str, list[str]] = field(default_factory=dict)  # call id -> its outputs' variables
    mask_of: dict[str, str | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # call id -> how many of its outputs are read
    masks: set[str] = field(default_factory=set)  # the variables that hold masks
    unpacked: set[str] = field(default_factory=set)  # the variables a node call's outputs are unpacked into
    returned: set[str] = field(default_factory=set)  # the variables holding a long node call's (outputs, masks)
    unsure: set[str] = field(default_factory=set)  # the mask variables a node call sets (None where it gives none)
    owners: list[str] = field(default_factory=list)  # for each line of ``body``, the call id it was written for

    def expression(self, value: Any) -> str:
        """Graph data as a Python expression: ``{"ref": [call, i]}`` becomes that output's variable."""
        if isinstance(value, dict) and "ref" in value:
            call, index = value["ref"]
            return self.values[call][index]
        if isinstance(value, dict):
            return "{" + ", ".join(f"{literal(k)}: {self.expression(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.expression(v) for v in value) + "]"
        return literal(value)

    def mask(self, value: Any) -> Any:
        """The masks of an argument, mirroring its structure (as the converted graph passes them)."""
        if isinstance(value, dict) and "ref" in value:
            return self.mask_of.get(self.expression(value))
        if isinstance(value, list):
            return [self.mask(v) for v in value]
        return None

    def outputs(self, call_id: str, count: int, keras_name: Any) -> list[str]:
        names = [self.name(call_id if i == 0 else f"{call_id}_{i}", keras_name) for i in range(count)]
        self.values[call_id] = names
        return names

    def name(self, text: Any, keras_name: Any) -> str:
        """A fresh variable made from ``text`` (see :func:`~attnzoo.keras.codegen.identifier`), which
        ``KERAS_NAMES`` maps back to ``keras_name``."""
        variable = identifier(text, self.used)
        self.keras_names[variable] = str(keras_name)
        return variable

    def mask_variable(self, name: str) -> str:
        variable = identifier(f"{name}_mask", self.used)
        self.masks.add(variable)
        return variable

    def uses(self, module: str, name: str) -> None:
        self.imports.setdefault(module, set()).add(name)


def _masks_text(masks: Any) -> str:
    if isinstance(masks, list):
        return "[" + ", ".join(_masks_text(m) for m in masks) + "]"
    return "None" if masks is None else str(masks)


def _set_mask(e: _Emitter, name: str, mask_expression: str | None) -> None:
    if mask_expression is None:
        e.mask_of[name] = None
        return
    variable = e.mask_variable(name)
    e.body.append(f"{variable} = {mask_expression}")
    e.mask_of[name] = variable


# -- readable forms of the plain layers ------------------------------------------------------------------
def _embedding(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    e.init.append(
        f"self.layers[{literal(key)}] = nn.Embedding({literal(spec['input_dim'])}, {literal(spec['output_dim'])})"
    )
    e.body.append(f"{out} = {_layer(key)}({x}.long())")
    _set_mask(e, out, f"{x} != 0" if spec.get("mask_zero") else None)


def _dense(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    e.init.append(
        f"self.layers[{literal(key)}] = nn.Linear({literal(spec['in_features'])}, {literal(spec['units'])}{bias})"
    )
    _apply(e, out, f"{_layer(key)}({x})", spec.get("activation", "linear"))
    e.mask_of[out] = mask


def _apply(e: _Emitter, out: str, value: str, activation: str) -> None:
    """``out = activation(value)``, the value computed once (some activations read their argument twice)."""
    template = _ACTIVATIONS[activation]
    if template.count("{") > 1:
        e.body.append(f"{out} = {value}")
        value = out
    e.body.append(f"{out} = " + template.format(value))


def _activation(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    _apply(e, out, x, spec["activation"])
    e.mask_of[out] = mask


def _conv(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    rank, k, s, d = spec["rank"], spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    groups = f", groups={literal(spec['groups'])}" if spec.get("groups", 1) != 1 else ""
    # Keras's "same" at stride 1 pads (k - 1) * d in all, the extra one on the right as torch's "same" does;
    # torch's own padding reads the border without a padded copy where the two sides are equal
    symmetric = all((a - 1) * b % 2 == 0 for a, b in zip(k, d, strict=True))
    inside = spec.get("padding") == "same" and all(v == 1 for v in s) and symmetric
    padding = ', padding="same"' if inside else ""
    e.init.append(
        f"self.layers[{literal(key)}] = nn.Conv{rank}d({literal(spec['in_channels'])}, {literal(spec['filters'])}, "
        f"kernel_size={literal(k)}, stride={literal(s)}{padding}, dilation={literal(d)}{groups}{bias})"
    )
    first = spec.get("channels_first", False)
    h = x if first else f"{x}.movedim(-1, 1)"
    if spec.get("padding") == "same" and not inside:  # TensorFlow's: the extra one on the right, by the input's length
        e.uses("attnzoo.keras.converters.conv", "conv_padding")
        e.body.append(f"{out} = {h}")
        h = f'F.pad({out}, conv_padding({out}, "same", {literal(k)}, {literal(s)}, {literal(d)}))'
    elif spec.get("padding") == "causal":
        h = f"F.pad({h}, [{(k[0] - 1) * d[0]}, 0])"
    # back in Keras's layout before the activation: a softmax runs over Keras's last axis
    _apply(e, out, f"{_layer(key)}({h})" + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    e.mask_of[out] = None


def _reshaping(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    op = spec["op"]
    if op == "flatten":
        h = f"{x}.movedim(1, -1)" if spec.get("channels_first") else x
        e.body.append(f"{out} = {h}.reshape({x}.shape[0], -1)")
    elif op == "reshape":
        e.body.append(f"{out} = {x}.reshape({x}.shape[0], {', '.join(map(literal, spec['target_shape']))})")
    elif op == "permute":
        e.body.append(f"{out} = {x}.permute(0, {', '.join(map(literal, spec['dims']))})")
    else:  # repeat_vector
        e.body.append(f"{out} = {x}.unsqueeze(1).expand(-1, {literal(spec['n'])}, -1)")
    e.mask_of[out] = None


def _masking(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    variable = e.mask_variable(out)
    e.body.append(f"{variable} = ({x} != {literal(spec.get('mask_value', 0.0))}).any(dim=-1)")
    e.body.append(f"{out} = {x} * {variable}.unsqueeze(-1).to({x}.dtype)")
    e.mask_of[out] = variable


def _dropout(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    e.body.append(f"{out} = F.dropout({x}, {literal(spec['rate'])}, self.training)")
    e.mask_of[out] = mask


def _plain(spec: dict[str, Any]) -> Any:
    """The readable emitter of a node, or None: the node class is called as the graph calls it. A spec
    whose values are not of the types the readable form computes with (a hand-edited config) takes the
    node class, whose arguments are written as literals whatever they hold."""
    op, activation = spec["op"], spec.get("activation", "linear")
    if isinstance(activation, str) and activation not in _ACTIVATIONS:
        return None
    if op == "activation" and _of(spec, str, "activation"):
        return _activation
    if op == "dense" and _of(spec, int, "in_features", "units"):
        return _dense
    if op == "conv" and spec.get("rank") in (1, 2, 3) and _of(spec, int, "in_channels", "filters", "groups"):
        shapes = [spec.get(k) for k in ("kernel_size", "strides", "dilation_rate")]
        if all(
            isinstance(v, (list, tuple)) and len(v) == spec["rank"] and _of(dict(enumerate(v)), int) for v in shapes
        ):
            return _conv
        return None
    rate = spec.get("rate")
    if op == "noise" and spec.get("kind") == "dropout" and not spec.get("shared_axes"):
        return _dropout if _of(spec, float, "rate") and 0 <= rate < 1 else None
    if op == "embedding" and not _of(spec, int, "input_dim", "output_dim"):
        return None
    if op in _CHECKED_OPS:  # the writers of torch's own functions and layers below, each with its check
        writes, writer = _CHECKED_OPS[op]
        return writer if writes(spec) else None
    return _PLAIN_OPS.get(op)


def _of(spec: dict[Any, Any], kind: type, *keys: Any) -> bool:
    """Whether ``spec``'s values at ``keys`` (default: all) are plain ``kind`` (an int for float too, never
    a bool), or absent where they have a default."""
    kinds = (int, float) if kind is float else (kind,)
    values = [spec.get(k, 1) for k in keys] if keys else list(spec.values())
    return all(isinstance(v, kinds) and not isinstance(v, bool) for v in values)


_PLAIN_OPS = {
    "embedding": _embedding,
    "masking": _masking,
    "flatten": _reshaping,
    "reshape": _reshaping,
    "permute": _reshaping,
    "repeat_vector": _reshaping,
}


# -- torch's own functions and layers for Keras's padding, resampling, pooling, LayerNormalization and
# transposed convolutions: each writes a spec that its check (``_CHECKED_OPS``) passed, computing what the
# node computes; a spec outside what torch's form computes exactly keeps the node call
def _spatial_pad(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    """``ZeroPadding1D/2D/3D``: ``F.pad`` of the margins (zeros), the last axis first, as the node pads;
    ``Cropping1D/2D/3D`` (every margin a cut, at most 0): the slice of what stays, as Keras itself crops."""
    first, margins = spec.get("channels_first", False), spec["margins"]
    if all(before <= 0 and after <= 0 for before, after in margins):
        kept = [
            (literal(-before) if before else "") + ":" + (literal(after) if after else "") for before, after in margins
        ]
        e.body.append(f"{out} = {x}[{':, :' if first else ':'}, {', '.join(kept)}]")
    else:
        pads = [] if first else [0, 0]  # the channels, last in Keras's layout
        for before, after in reversed(margins):
            pads += [before, after]
        e.body.append(f"{out} = F.pad({x}, {literal(pads)})")
    e.mask_of[out] = None


def _upsampling(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    """``UpSampling1D/2D/3D``: nearest repeats each entry ``size`` times along its axis
    (``repeat_interleave``); UpSampling2D's bilinear is ``F.interpolate`` at half-pixel centres, as the node."""
    first = spec.get("channels_first", False)
    if spec.get("interpolation", "nearest") == "nearest":
        value = x
        for axis, factor in enumerate(spec["size"]):
            if factor != 1:
                value = f"{value}.repeat_interleave({literal(factor)}, dim={(2 if first else 1) + axis})"
        e.body.append(f"{out} = {value}")
    else:
        scale = literal(tuple(float(s) for s in spec["size"]))
        h = x if first else f"{x}.movedim(-1, 1)"
        value = f'F.interpolate({h}, scale_factor={scale}, mode="bilinear", align_corners=False)'
        e.body.append(f"{out} = {value}" + ("" if first else ".movedim(1, -1)"))
    e.mask_of[out] = None


def _pool(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    """``MaxPooling`` / ``AveragePooling`` 1D/2D/3D: ``F.max_poolNd`` / ``F.avg_poolNd``. Keras's "same" at
    stride 1 with an odd window pads ``(k - 1) / 2`` on each side: torch's own padding, which max pooling
    never picks and average pooling leaves out of the count (``count_include_pad=False``), as Keras does;
    other "same" max pooling pads by the input's length with -inf (TensorFlow's, the extra one on the right)."""
    rank, k, s = spec["rank"], spec["pool_size"], spec["strides"]
    first, average = spec.get("channels_first", False), spec["kind"] == "average"
    h = x if first else f"{x}.movedim(-1, 1)"
    options = ""
    if spec.get("padding", "valid") == "same" and _centred(k, s):
        options = f", padding={literal([(v - 1) // 2 for v in k])}" + (", count_include_pad=False" if average else "")
    elif spec.get("padding", "valid") == "same":  # max pooling only: the check declines the average
        e.uses("attnzoo.keras.converters.conv", "conv_padding")
        e.body.append(f"{out} = {h}")
        pads = f'conv_padding({out}, "same", {literal(k)}, {literal(s)}, {literal([1] * rank)})'
        h = f'F.pad({out}, {pads}, value=-float("inf"))'
    value = f"F.{'avg' if average else 'max'}_pool{rank}d({h}, {literal(k)}, {literal(s)}{options})"
    e.body.append(f"{out} = {value}" + ("" if first else ".movedim(1, -1)"))
    e.mask_of[out] = None


def _centred(kernel: list[int], strides: list[int]) -> bool:
    """Whether Keras's "same" pads each axis equally on both sides whatever the input's length: stride 1 and
    an odd window (``k - 1`` in all)."""
    return all(s == 1 and k % 2 == 1 for k, s in zip(kernel, strides, strict=True))


def _layer_norm(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    """``LayerNormalization`` over the last axis: ``nn.LayerNorm`` with Keras's epsilon (``weight`` is Keras's
    gamma, ``bias`` its beta; ``bias=False`` where Keras has no offset), ``F.layer_norm`` where it has neither
    scale nor offset. The mask passes, as the node's."""
    size, epsilon = literal(spec["shape"][0]), literal(spec["epsilon"])
    if spec.get("scale", True):
        bias = "" if spec.get("center", True) else ", bias=False"
        e.init.append(f"self.layers[{literal(key)}] = nn.LayerNorm({size}, eps={epsilon}{bias})")
        e.body.append(f"{out} = {_layer(key)}({x})")
    else:
        e.body.append(f"{out} = F.layer_norm({x}, ({size},), eps={epsilon})")
    e.mask_of[out] = mask


def _conv_transpose(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    """``Conv1D/2D/3DTranspose``: ``nn.ConvTransposeNd`` whose symmetric ``padding`` and ``output_padding``
    cut the full transposed convolution where Keras cuts it (see :func:`_transpose_padding`); the node's
    ``weight`` [in, filters, *kernel] is torch's layout."""
    rank, k, s, d = spec["rank"], spec["kernel_size"], spec["strides"], spec["dilation_rate"]
    padding, extra = _transpose_padding(spec) or ([0] * rank, [0] * rank)
    options = f", padding={literal(padding)}" if any(padding) else ""
    options += f", output_padding={literal(extra)}" if any(extra) else ""
    options += f", dilation={literal(d)}" if any(v != 1 for v in d) else ""
    options += "" if spec.get("use_bias", True) else ", bias=False"
    e.init.append(
        f"self.layers[{literal(key)}] = nn.ConvTranspose{rank}d({literal(spec['in_channels'])}, "
        f"{literal(spec['filters'])}, kernel_size={literal(k)}, stride={literal(s)}{options})"
    )
    first = spec.get("channels_first", False)
    h = x if first else f"{x}.movedim(-1, 1)"
    _apply(e, out, f"{_layer(key)}({h})" + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    e.mask_of[out] = None


def _transpose_padding(spec: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """torch's ``padding`` and ``output_padding`` per axis that give Keras's window of the full transposed
    convolution, or None where none do. torch cuts ``padding`` from each side and gives back
    ``output_padding`` (< max(stride, dilation)) on the right; Keras cuts ``left`` and ``right``
    (:func:`~attnzoo.keras.converters.conv_transpose.transpose_window`), so torch's form needs
    ``0 <= left - right < max(stride, dilation)``: not "same" with an odd total, which Keras cuts more
    from the right."""
    padding, extra = [], []
    output_padding = spec.get("output_padding")
    for axis in range(spec["rank"]):
        k, s, d = spec["kernel_size"][axis], spec["strides"][axis], spec["dilation_rate"][axis]
        given = None if output_padding is None else output_padding[axis]
        left, right = transpose_window(k, s, d, spec.get("padding", "valid"), given)
        if left < 0 or not 0 <= left - right < max(s, d):
            return None
        padding.append(left)
        extra.append(left - right)
    return padding, extra


def _sizes(value: Any, rank: Any, least: int = 1) -> bool:
    """A list of ``rank`` plain ints, each at least ``least``."""
    return (
        isinstance(value, list)
        and len(value) == rank
        and _of(dict(enumerate(value)), int)
        and all(v >= least for v in value)
    )


def _flags(spec: dict[str, Any], *keys: str) -> bool:
    """Whether ``spec``'s values at ``keys`` are bools, where given."""
    return all(isinstance(spec.get(k, False), bool) for k in keys)


def _rank(spec: dict[str, Any]) -> bool:
    return spec.get("rank") in (1, 2, 3) and _of(spec, int, "rank")


def _writes_spatial_pad(spec: dict[str, Any]) -> bool:
    margins = spec.get("margins")
    if not isinstance(margins, list) or not 1 <= len(margins) <= 3 or not _flags(spec, "channels_first"):
        return False
    return all(_sizes(pair, 2, least=-(2**62)) for pair in margins)


def _writes_upsampling(spec: dict[str, Any]) -> bool:
    interpolation = spec.get("interpolation", "nearest")
    if not _rank(spec) or not _sizes(spec.get("size"), spec["rank"]) or not _flags(spec, "channels_first"):
        return False
    return interpolation == "nearest" or (interpolation == "bilinear" and spec["rank"] == 2)


def _writes_pool(spec: dict[str, Any]) -> bool:
    if not _rank(spec) or spec.get("kind") not in ("max", "average") or not _flags(spec, "channels_first"):
        return False
    k, s, padding = spec.get("pool_size"), spec.get("strides"), spec.get("padding", "valid")
    if not _sizes(k, spec["rank"]) or not _sizes(s, spec["rank"]) or padding not in ("valid", "same"):
        return False
    # an average over "same" padding that may be uneven counts only the real entries: no torch padding does
    return padding == "valid" or spec["kind"] == "max" or _centred(k, s)


def _writes_layer_norm(spec: dict[str, Any]) -> bool:
    if spec.get("axis") != [-1] or not _sizes(spec.get("shape"), 1) or not _of(spec, float, "epsilon"):
        return False
    if not _flags(spec, "center", "scale", "rms_scaling") or spec.get("rms_scaling", False):
        return False  # keras 3's rms_scaling divides by the variance: no torch layer does
    return spec.get("scale", True) or not spec.get("center", True)  # an offset alone: no torch layer has one


def _writes_conv_transpose(spec: dict[str, Any]) -> bool:
    if (
        not _rank(spec)
        or not _of(spec, int, "in_channels", "filters")
        or not _flags(spec, "use_bias", "channels_first")
    ):
        return False
    rank, output_padding = spec["rank"], spec.get("output_padding")
    if not all(_sizes(spec.get(k), rank) for k in ("kernel_size", "strides", "dilation_rate")):
        return False
    if spec.get("padding", "valid") not in ("valid", "same") or not isinstance(spec.get("activation", "linear"), str):
        return False
    if output_padding is not None and not _sizes(output_padding, rank, least=0):
        return False
    return _transpose_padding(spec) is not None


_CHECKED_OPS = {
    "spatial_pad": (_writes_spatial_pad, _spatial_pad),
    "upsampling": (_writes_upsampling, _upsampling),
    "pool": (_writes_pool, _pool),
    "layer_norm": (_writes_layer_norm, _layer_norm),
    "conv_transpose": (_writes_conv_transpose, _conv_transpose),
}

# -- stateless nodes (operations, Concatenate, global pooling) as torch expressions ------------------------
# Each writer returns False, having written nothing, where the call is not one it can write exactly (a
# hand-edited config, an argument of a type the node would read otherwise): the node class is then called.
_OPERATORS = {"not_equal": "!=", "equal": "==", "greater": ">", "greater_equal": ">=", "less": "<"}
_OPERATORS.update({"less_equal": "<=", "add": "+", "subtract": "-", "multiply": "*"})
_OPERATORS.update({"divide": "/", "true_divide": "/"})
# the torch function each other operation node calls, by name, read from the node's own tables (ops.py):
# these names are code
_BINARY = {name: function.__name__ for name, function in ELEMENTWISE.items() if name not in _OPERATORS}
_UNARY = {name: function.__name__ for name, function in UNARY.items()}
_REDUCTIONS = {name: function.__name__ for name, function in REDUCE.items()}


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "ref" in value


def _number(value: Any) -> bool:
    """A plain finite int or float (never a bool: ``x != True`` is not what ruff lets through)."""
    if _of({0: value}, int):
        return -(2**63) <= value < 2**63  # what torch holds; a larger one stays the node's (and its error)
    return _of({0: value}, float) and math.isfinite(value)


def _dims(value: Any) -> bool:
    """An axis, or a list of them, as the node would pass it to torch."""
    return _of({0: value}, int) or (isinstance(value, list) and bool(value) and _of(dict(enumerate(value)), int))


def _dim_text(value: Any) -> str:
    return literal(value) if isinstance(value, int) else "(" + ", ".join(map(literal, value)) + ")"


def _index_text(key: Any) -> str | None:
    """``get_item``'s index (ops.py's ``_index``) as subscript text, ``:, -1``; None where it is not one of
    ints, None, slices of ints and Ellipsis."""
    if key is None or _of({0: key}, int):
        return literal(key)
    if isinstance(key, dict) and set(key) == {"ellipsis"} and key["ellipsis"] is True:
        return "..."
    if isinstance(key, dict) and set(key) == {"slice"} and isinstance(key["slice"], list):
        parts = key["slice"]
        if not 1 <= len(parts) <= 3 or not all(p is None or _of({0: p}, int) for p in parts):
            return None
        start, stop, step = ([None, *parts] if len(parts) == 1 else parts) + [None] * (3 - max(len(parts), 2))
        text = ("" if start is None else literal(start)) + ":" + ("" if stop is None else literal(stop))
        return text + ("" if step is None else ":" + literal(step))
    return None


def _operation(e: _Emitter, spec: dict[str, Any], plan: CallMasks, args: list[Any], out: str) -> bool:
    """A keras operation (``Operation``'s forward) as one expression; its output carries no mask."""
    name, config = spec.get("name"), spec.get("config") or {}
    value = _operation_value(e, name, config, args) if isinstance(config, dict) else None
    if value is None:
        return False
    if name == "convert_to_tensor":  # the same tensor: its mask is the output's (none), as masks go by tensor
        e.mask_of[value] = None
    e.body.append(f"{out} = {value}")
    e.mask_of[out] = None
    return True


def _operation_value(e: _Emitter, name: Any, config: dict[str, Any], args: list[Any]) -> str | None:
    """The expression ``Operation(name, config)`` computes on ``args``, or None where it is not written."""
    refs = [_is_ref(a) for a in args]
    if name in _OPERATORS or name in _BINARY:
        if len(args) != 2 or not any(refs) or not all(r or _number(a) for r, a in zip(refs, args, strict=True)):
            return None
        a, b = (e.expression(v) for v in args)
        if not refs[0]:  # the node makes a number on the left a tensor on the other's device
            a = f"torch.as_tensor({a}, device={b}.device)"
        return f"{a} {_OPERATORS[name]} {b}" if name in _OPERATORS else f"torch.{_BINARY[name]}({a}, {b})"
    if name in ("concatenate", "stack") and len(args) == 1 and isinstance(args[0], list) and args[0]:
        axis = config.get("axis", 0)
        if not all(_is_ref(a) for a in args[0]) or not _of({0: axis}, int):
            return None
        function = "cat" if name == "concatenate" else "stack"
        return f"torch.{function}([{', '.join(e.expression(a) for a in args[0])}], dim={literal(axis)})"
    if name in ("matmul", "where") and len(args) == {"matmul": 2, "where": 3}[name] and all(refs):
        return f"torch.{name}({', '.join(e.expression(a) for a in args)})"
    if refs[:1] != [True] or len(args) > 2:
        return None
    x, second = e.expression(args[0]), args[1] if len(args) > 1 else None
    if name in _UNARY and len(args) == 1:
        return f"torch.{_UNARY[name]}({x})"
    if name == "convert_to_tensor" and len(args) == 1:
        return x
    if name == "cast" and e.mask_of.get(x) is None:  # (.to may return x itself: then it would clear x's mask)
        dtype = config.get("dtype", "float32" if second is None else second)
        return f"{x}.to(torch.{dtype})" if isinstance(dtype, str) and dtype in DTYPES else None
    if name in _REDUCTIONS:
        axis, keepdims = config.get("axis", second), config.get("keepdims", False)
        if axis is None or not _dims(axis) or not isinstance(keepdims, bool):
            return None
        return f"torch.{_REDUCTIONS[name]}({x}, dim={literal(axis)}, keepdim={keepdims})"
    if name == "squeeze" and config.get("axis", second) is None:
        return f"{x}.squeeze()"
    if name in ("expand_dims", "squeeze", "softmax"):
        axis = config.get("axis", -1 if name == "softmax" or second is None else second)
        text = {"expand_dims": "{}.unsqueeze({})", "squeeze": "{}.squeeze({})", "softmax": "torch.softmax({}, dim={})"}
        return text[name].format(x, literal(axis)) if _of({0: axis}, int) else None
    if name in ("transpose", "reshape"):
        shape = config.get("axes" if name == "transpose" else "newshape", second)
        if not isinstance(shape, list) or not shape:
            return None
        if not all(_of({0: d}, int) or (d is None and name == "reshape") for d in shape):
            return None
        dims = ", ".join("-1" if d is None else literal(d) for d in shape)
        return f"{x}.{'permute' if name == 'transpose' else 'reshape'}({dims})"
    if name == "get_item" and len(args) == 2:
        keys = second if isinstance(second, list) else [second]
        texts = [_index_text(k) for k in keys]
        return f"{x}[{', '.join(t for t in texts if t is not None)}]" if texts and None not in texts else None
    return None


def _masked_list(e: _Emitter, plan: CallMasks, args: list[Any]) -> tuple[list[str], list[str | None]] | None:
    """A merge's tensors (its one argument, a list of them) and the masks its node gets for them (each one's,
    or all None where the node gets no list of masks), or None where the call is not that."""
    if len(args) != 1 or not isinstance(args[0], list) or not args[0] or not all(_is_ref(a) for a in args[0]):
        return None
    names = [e.expression(a) for a in args[0]]
    masks = [e.mask_of.get(name) for name in names]
    if plan.explicit is not None:  # the call's mask= in the list's place, resolved as the graph resolves it
        explicit = plan.explicit
        if not isinstance(explicit, list):
            return names, [None] * len(names)
        if len(explicit) != len(names) or not all(m is None or _is_ref(m) for m in explicit):
            return None
        masks = [None if m is None else e.expression(m) for m in explicit]
    return names, masks


def _concatenate(e: _Emitter, spec: dict[str, Any], plan: CallMasks, args: list[Any], out: str) -> bool:
    """``Concatenate``: ``torch.cat``; the mask as Keras builds it (each input's mask widened to the input,
    all True where it has none, concatenated along the axis, then any over the last axis)."""
    axis, found = spec.get("axis", -1), _masked_list(e, plan, args)
    if found is None or not _of({0: axis}, int):
        return False
    names, masks = found
    if not all(m is None or _sure(e, m) for m in masks):
        return False
    e.body.append(f"{out} = torch.cat([{', '.join(names)}], dim={literal(axis)})")
    if all(m is None for m in masks):
        e.mask_of[out] = None
        return True
    wide = [
        f"torch.ones_like({x}, dtype=torch.bool)"
        if m is None
        else f"{m}.reshape({m}.shape + (1,) * ({x}.dim() - {m}.dim())).expand_as({x})"
        for x, m in zip(names, masks, strict=True)
    ]
    _set_mask(e, out, f"torch.cat([{', '.join(wide)}], dim={literal(axis)}).any(dim=-1)")
    return True


def _global_pool(e: _Emitter, spec: dict[str, Any], plan: CallMasks, args: list[Any], out: str) -> bool:
    """``GlobalPool``: a max or mean over the steps; the 1-D average with a mask is the sum over the kept
    steps over their count (at least 1), as the node computes it. Its output carries no mask."""
    rank, kind = spec.get("rank"), spec.get("kind")
    keepdims, first = spec.get("keepdims", False), spec.get("channels_first", False)
    if rank not in (1, 2, 3) or kind not in ("average", "max") or not isinstance(rank, int):
        return False
    if not isinstance(keepdims, bool) or not isinstance(first, bool) or len(args) != 1 or not _is_ref(args[0]):
        return False
    x = e.expression(args[0])
    mask = e.mask_of.get(x) if plan.explicit is None else plan.explicit
    axes = list(range(2, 2 + rank)) if first else list(range(1, 1 + rank))
    dims = f"dim={_dim_text(axes[0] if rank == 1 else axes)}" + (", keepdim=True" if keepdims else "")
    if kind == "max":
        e.body.append(f"{out} = {x}.amax({dims})")
    elif mask is None or rank != 1:
        e.body.append(f"{out} = {x}.mean({dims})")
    else:
        mask = e.expression(mask) if _is_ref(mask) else mask
        if not _sure(e, mask):
            return False
        keep = identifier(f"{out}_keep", e.used)
        e.body.append(f"{keep} = {mask}.unsqueeze({1 if first else 2})")
        e.body.append(f"{out} = torch.where({keep}, {x}, torch.zeros_like({x})).sum({dims})")
        divided = f"{out} = {out} / {keep}.to({x}.dtype).sum({dims}).clamp(min=1)"
        if len(divided) + 8 <= WIDTH:
            e.body.append(divided)
        else:  # long names: the count on a line of its own, so each statement splits as ruff splits it
            count = identifier(f"{out}_count", e.used)
            e.body += [f"{count} = {keep}.sum({dims})", f"{out} = torch.div({out}, {count}.clamp(min=1))"]
    e.mask_of[out] = None
    return True


def _sure(e: _Emitter, mask: Any) -> bool:
    """Whether ``mask`` is a variable that holds a tensor whenever the code runs: not a node call's output
    mask, which holds None where the node gives none."""
    return isinstance(mask, str) and mask.isidentifier() and mask not in e.unsure


def _stateless(e: _Emitter, spec: dict[str, Any], call: dict[str, Any], plan: CallMasks, name: Any) -> bool:
    """Write the call as torch expressions where its node is stateless and its semantics, masks included,
    are written exactly (see the writers above); False, having written nothing, where not."""
    op, args = spec["op"], call["args"]
    given = {k for k, v in call["kwargs"].items() if k != "training" and not (k == "mask" and v is None)}
    if op not in _STATELESS or not isinstance(args, list) or not args or e.counts.get(call["id"], 1) != 1:
        return False
    if given - {"mask"} or ("mask" in given and plan.explicit is None) or plan.keyword or plan.clears:
        return False  # tensors or settings by keyword, a mask= of data: the node class reads them
    (out,) = e.outputs(call["id"], 1, name)
    done = _STATELESS[op](e, spec, plan, args, out)
    if not done:  # the name goes back: the node call takes it
        e.used.discard(out)
        del e.keras_names[out], e.values[call["id"]]
    return done


def _activation_layer(e: _Emitter, spec: dict[str, Any], plan: CallMasks, args: list[Any], out: str) -> bool:
    """``ReLU`` (its max_value, negative_slope and threshold), ``LeakyReLU`` and ``ELU`` layers: the node's
    formula, its mask passed on (a mask variable that may hold None is the node's output mask as it is)."""
    kind, slope, threshold = spec.get("activation"), spec.get("negative_slope", 0.0), spec.get("threshold", 0.0)
    top, alpha = spec.get("max_value"), spec.get("alpha", 1.0)
    if kind not in ("relu_layer", "elu_layer") or len(args) != 1 or not _is_ref(args[0]) or plan.explicit is not None:
        return False
    if not all(_number(v) for v in (slope, threshold, alpha)) or not (top is None or _number(top)):
        return False
    x = e.expression(args[0])
    if kind == "elu_layer":
        value = f"torch.where({x} > 0, {x}, {literal(alpha)} * torch.expm1({x}))"
    elif slope == 0 and threshold == 0:  # ReLU, ReLU6: one pass, as the node
        value = f"torch.relu({x})" if top is None else f"torch.clamp({x}, 0.0, {literal(top)})"
    else:
        # x - 0.0 is x, bit for bit (-0.0 and NaN too): LeakyReLU is written without it
        below = f"{literal(slope)} * " + (f"({x} - {literal(threshold)})" if threshold else x)
        value = f"torch.where({x} >= {literal(threshold)}, {x}, {below})"
        value = value if top is None else f"torch.clamp({value}, max={literal(top)})"
    e.body.append(f"{out} = {value}")
    e.mask_of[out] = e.mask_of.get(x)
    return True


def _softmax_layer(e: _Emitter, spec: dict[str, Any], plan: CallMasks, args: list[Any], out: str) -> bool:
    """``Softmax(axis)`` of an input with no mask (a mask would mask the scores: the node's rules):
    ``torch.softmax``, over several axes ``exp(x - logsumexp(x))`` as the node."""
    axis = spec.get("axis", -1)
    if len(args) != 1 or not _is_ref(args[0]) or plan.explicit is not None or not _dims(axis):
        return False
    x = e.expression(args[0])
    if e.mask_of.get(x) is not None:
        return False
    if isinstance(axis, int):
        e.body.append(f"{out} = torch.softmax({x}, dim={literal(axis)})")
    else:
        e.body.append(f"{out} = torch.exp({x} - torch.logsumexp({x}, dim={_dim_text(axis)}, keepdim=True))")
    e.mask_of[out] = None
    return True


_STATELESS: dict[str, Any] = {"operation": _operation, "concatenate": _concatenate, "global_pool": _global_pool}
_STATELESS.update({"activation": _activation_layer, "softmax": _softmax_layer})


# -- recurrent layers as torch's nn.LSTM / nn.GRU, Keras's masking by run_rnn (keras/torch_layers.py) --------
# A layer outside what torch's cell computes (SimpleRNN, GRU reset_after=False, other activations, dropout,
# return_state, initial_state, time_major, a merge other than concat) stays its node call: declined per call.
_RNN_CLASSES = {"lstm": "nn.LSTM", "gru": "nn.GRU"}


def _torch_rnn(spec: Any) -> bool:
    """Whether a ``recurrent`` spec is torch's own cell: LSTM, or GRU with ``reset_after``; tanh and sigmoid;
    no dropout (Keras's acts in training), one output, batch first; values of the types the node reads."""
    if not isinstance(spec, dict) or spec.get("op") != "recurrent" or spec.get("cell") not in _RNN_CLASSES:
        return False
    if "units" not in spec or "input_size" not in spec:  # (the node needs them too: its error, not ours)
        return False
    flags = ("use_bias", "reset_after", "return_sequences", "return_state", "go_backwards", "time_major")
    if not _of(spec, int, "units", "input_size") or not all(isinstance(spec.get(k, False), bool) for k in flags):
        return False
    if not isinstance(spec.get("zero_output_for_mask", False), bool) or not _of(spec, float, "dropout"):
        return False
    return (
        spec.get("activation", "tanh") == "tanh"
        and spec.get("recurrent_activation", "sigmoid") == "sigmoid"
        and spec.get("reset_after", True)
        and not spec.get("return_state", False)
        and not spec.get("time_major", False)
        and spec.get("dropout", 0.0) == 0
        and spec.get("recurrent_dropout", 0.0) == 0
    )


def _torch_bidirectional(spec: dict[str, Any]) -> bool:
    """Whether a ``Bidirectional`` is one bidirectional ``nn.LSTM`` / ``nn.GRU``: concat of a forward layer and
    its ``go_backwards`` twin of the same kind and size, each zeroing masked outputs exactly when it returns
    sequences (as Keras's wrapper sets them)."""
    f, b = spec.get("forward_layer"), spec.get("backward_layer")
    if spec.get("merge_mode") != "concat" or not (_torch_rnn(f) and _torch_rnn(b)):
        return False
    same = ("cell", "units", "input_size", "use_bias", "return_sequences")
    sequences = f.get("return_sequences", False)
    return (
        all(f.get(k) == b.get(k) for k in same)
        and not f.get("go_backwards", False)
        and b.get("go_backwards", False)
        and f.get("zero_output_for_mask", False) == sequences == b.get("zero_output_for_mask", False)
    )


def _rnn_call(e: _Emitter, key: str, spec: dict[str, Any], call: dict[str, Any], plan: CallMasks, name: Any) -> bool:
    """A Keras ``LSTM`` / ``GRU`` (``nn.LSTM(input_size, units, batch_first=True)``) or a ``Bidirectional`` of
    two (one ``nn.LSTM(..., bidirectional=True)``), run by :func:`~attnzoo.keras.torch_layers.run_rnn` with
    the mask it reads; False, having written nothing, where the call or the layer is not one of those."""
    op, args = spec["op"], call["args"]
    if not (_torch_rnn(spec) if op == "recurrent" else op == "bidirectional" and _torch_bidirectional(spec)):
        return False
    given = {k for k, v in call["kwargs"].items() if k != "training" and not (k == "mask" and v is None)}
    if given - {"mask"} or ("mask" in given and plan.explicit is None) or plan.keyword or plan.clears:
        return False  # initial_state, a mask= of data: the node reads them
    if not plan.implicit or e.counts.get(call["id"], 1) != 1 or len(args) != 1 or not _is_ref(args[0]):
        return False
    if plan.explicit is not None and not _is_ref(plan.explicit):
        return False
    layer = spec if op == "recurrent" else spec["forward_layer"]
    x = e.expression(args[0])
    mask = e.expression(plan.explicit) if plan.explicit is not None else e.mask_of.get(x)
    (out,) = e.outputs(call["id"], 1, name)
    options = "" if layer.get("use_bias", True) else ", bias=False"
    options += ", bidirectional=True" if op == "bidirectional" else ""
    declared = (
        f"{_RNN_CLASSES[layer['cell']]}({literal(layer['input_size'])}, {literal(layer['units'])}, "
        f"batch_first=True{options})"
    )
    if layer["cell"] == "lstm" and layer.get("use_bias", True):  # Keras's LSTM has one bias, torch's two
        e.uses("attnzoo.keras.torch_layers", "one_bias")
        declared = f"one_bias({declared})"
    declaration = f"self.layers[{literal(key)}] = {declared}"
    if declaration not in e.init:  # a shared layer, called more than once, is declared once
        e.init.append(declaration)
    e.uses("attnzoo.keras.torch_layers", "run_rnn")
    keywords = [
        f"{k}=True" for k in ("go_backwards", "return_sequences", "zero_output_for_mask") if layer.get(k, False)
    ]
    arguments = ", ".join([_layer(key), x, *([mask] if mask is not None else []), *keywords])
    e.body.append(f"{out} = run_rnn({arguments})")
    e.mask_of[out] = mask if layer.get("return_sequences", False) else None
    return True


# -- the node classes, called as the converted graph calls them ----------------------------------------------
def _node_call(
    e: _Emitter, key: str, spec: dict[str, Any], call: dict[str, Any], kwargs: dict, plan: CallMasks
) -> None:
    cls = NODES[spec["op"]]
    e.uses(cls.__module__, cls.__name__)
    e.init.append(f"self.layers[{literal(key)}] = {cls.__name__}({_arguments(e, cls, spec)})")
    arg_masks = first_masks(plan, e.mask(call["args"]), e.expression)
    args, masks = e.expression(call["args"]), _masks_text(arg_masks)
    outputs = e.outputs(call["id"], e.counts.get(call["id"], 1), _keras(spec).get("name", key))
    mask_names = [e.mask_variable(name) for name in outputs]
    e.unpacked.update(outputs)
    e.unsure.update(mask_names)  # unless _known_mask says which it is
    targets = ", ".join([*outputs, "*_"])  # outputs nothing reads (an RNN's unused states) go to _
    mask_targets = ", ".join([*mask_names, "*_"])
    callee = _layer(key)
    call_text = f"{callee}({args}, {_kwargs_text(e, kwargs)}, {masks})"
    if len(f"        ({targets}), ({mask_targets}) = {callee}(") <= WIDTH:
        e.body.append(f"({targets}), ({mask_targets}) = {call_text}")
    else:  # long names: what the call returns first, then a line per tensor, so no line is longer than ruff's
        returned = identifier("returned", e.used)
        e.returned.add(returned)
        e.body.append(f"{returned} = {call_text}")
        for i, (name, mask_name) in enumerate(zip(outputs, mask_names, strict=True)):
            e.body += [f"{name} = {returned}[0][{i}]", f"{mask_name} = {returned}[1][{i}]"]
    known = _known_mask(e, cls, arg_masks)
    for name, mask_name in zip(outputs, mask_names, strict=True):
        e.mask_of[name] = mask_name if known is _UNKNOWN else known
    for cleared in plan.clears:
        e.mask_of[e.expression(cleared)] = None


_UNKNOWN = object()  # a node's output mask that only running it tells


def _known_mask(e: _Emitter, cls: type, arg_masks: list[Any]) -> Any:
    """The mask variable (or None) a node's output mask is whenever the code runs, where :class:`Node`'s own
    ``forward`` and ``output_mask`` make it: the first argument's mask where the class supports masking and
    that mask is a tensor, else None; ``_UNKNOWN`` for a node of its own rules or a mask only running tells."""
    if cls.forward is not Node.forward or cls.output_mask is not Node.output_mask:
        return _UNKNOWN
    first = arg_masks[0] if arg_masks else None
    if not cls.supports_masking or first is None or isinstance(first, list):  # a list is no tensor: None
        return None
    return first if _sure(e, first) else _UNKNOWN


def _layer(key: str) -> str:
    """How ``forward`` names the layer ``key``: ``layers.dense`` where the key is a :func:`_plain_keyword`;
    otherwise a literal key, ``layers["my layer"]``. No key of ``nn.ModuleDict`` is one of the dict's own
    attributes (``keys``, ``training``: it refuses them, and the converter appends ``_``), so
    ``layers.<key>`` always finds the layer."""
    return f"layers.{key}" if _plain_keyword(key) else f"layers[{literal(key)}]"


def _plain_keyword(text: Any) -> bool:
    """Whether ``text`` may be written as it is as an attribute or keyword argument name: a plain ASCII
    name, not private, not a Python keyword."""
    if not isinstance(text, str) or text.startswith("_") or keyword.iskeyword(text):
        return False
    return bool(_PLAIN_NAME.fullmatch(text))


def _keras(spec: dict[str, Any]) -> dict[str, Any]:
    """What the graph keeps of the Keras layer (its name and class), or nothing where it is not a mapping."""
    keras = spec.get("keras")
    return keras if isinstance(keras, dict) else {}


def _arguments(e: _Emitter, cls: type, spec: dict[str, Any]) -> str:
    """A node's constructor arguments, ``key=literal``; an inner layer of a wrapper (``cls.layer_arguments``)
    as its own class's constructor; a key that is not a plain name (a hand-edited config) goes in a
    ``**{...}`` literal, so no key of the file is ever written as code."""
    defaults = _defaults(cls)
    items = [(k, v) for k, v in spec.items() if k not in ("op", "keras") and not _same(defaults.get(k, _NONE), v)]
    options = cls.options_argument
    if options is not None and _as_keywords(cls, spec.get(options)):  # its entries as keyword arguments
        items = [(k, v) for k, v in items if k != options] + list(spec[options].items())
    plain = [
        f"{k}={_inner_layer(e, v) if k in cls.layer_arguments else literal(v)}"
        for k, v in items
        if isinstance(k, str) and _PLAIN_NAME.fullmatch(k)
    ]
    other = {k: v for k, v in items if not (isinstance(k, str) and _PLAIN_NAME.fullmatch(k))}
    return ", ".join(plain + ([f"**{literal(other)}"] if other else []))


_NONE = object()  # no default


def _as_keywords(cls: type, options: Any) -> bool:
    """Whether a node's dict of settings can be written as keyword arguments: plain names only, none of
    them private, a keyword or one of the constructor's own parameters."""
    if not isinstance(options, dict):
        return False
    own = set(inspect.signature(cls.__init__).parameters)
    return all(_plain_keyword(k) for k in options) and not (own & set(options))


def _defaults(cls: type) -> dict[str, Any]:
    """The constructor's keyword defaults: an argument that equals its default is not written."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _same(default: Any, value: Any) -> bool:
    """``value`` is the default itself: equal and of the same type (``1`` is not ``True``, nor ``1.0``)."""
    return default is not _NONE and type(default) is type(value) and default == value


def _inner_layer(e: _Emitter, spec: Any) -> str:
    """A wrapper's inner layer, ``Recurrent(cell="lstm", ...)``: the class is the one its op names (never text
    from the file), its arguments written as a node's are; data that names no node stays a literal."""
    op = spec.get("op") if isinstance(spec, dict) else None
    if not isinstance(op, str) or op not in NODES:
        return literal(spec)
    cls = NODES[op]
    e.uses(cls.__module__, cls.__name__)
    return f"{cls.__name__}({_arguments(e, cls, spec)})"


def _kwargs_text(e: _Emitter, kwargs: dict[str, Any]) -> str:
    parts = []
    for k, v in kwargs.items():
        parts.append(f"{literal(k)}: {v if isinstance(v, _Code) else e.expression(v)}")
    return "{" + ", ".join(parts) + "}"


def _needed_outputs(graph: dict[str, Any]) -> dict[str, int]:
    """For each call, how many of its outputs the graph reads (one more than the highest index used)."""
    counts: dict[str, int] = {}
    read = [[call["args"], call["kwargs"]] for call in graph["calls"]]
    for ref in refs_in([read, [{"ref": list(ref)} for ref in graph["outputs"]]]):
        call, index = ref["ref"]
        counts[call] = max(counts.get(call, 1), index + 1)
    return counts


def _emit_call(e: _Emitter, graph: dict[str, Any], plan: CallMasks, call: dict[str, Any]) -> None:
    start = len(e.body)
    _write_call(e, graph, plan, call)
    e.owners += [call["id"]] * (len(e.body) - start)


def _write_call(e: _Emitter, graph: dict[str, Any], plan: CallMasks, call: dict[str, Any]) -> None:
    kwargs = dict(call["kwargs"])
    if call["layer"] is None:  # a nested model's input (maybe given a mask) or its outputs: the same tensors
        if kwargs.get("outputs"):
            e.values[call["id"]] = [e.expression(a) for a in call["args"]]
            return
        name = e.expression(call["args"][0])
        e.values[call["id"]] = [name]
        if plan.explicit is not None:
            e.mask_of[name] = e.expression(plan.explicit)
        return
    key = call["layer"]
    spec = graph["layers"][key]
    # the nodes read train/eval from the module, as Keras overrides a recorded training= by the model's call
    given = {k: v for k, v in kwargs.items() if k not in ("mask", "training")}
    if isinstance(kwargs.get("mask"), (dict, list)):
        given["mask"] = kwargs["mask"]
    keyword_masks = {k: e.mask_of.get(e.expression(kwargs[k])) for k in plan.keyword}
    masks_text = _Code("{" + ", ".join(f"{literal(k)}: {v}" for k, v in keyword_masks.items()) + "}")
    node_kwargs = kwargs_for_node(plan, given, masks_text if keyword_masks else {})
    plain = _plain(spec)
    simple = plain is not None and len(call["args"]) == 1 and not node_kwargs
    keras = _keras(spec)
    kind = keras.get("class", spec["op"])  # the Keras class as a comment, where it is a plain name
    if isinstance(kind, str) and _PLAIN_NAME.fullmatch(kind):
        e.body.append(f"# {kind}")
    if simple:
        x = e.expression(call["args"][0])
        mask = e.mask_of.get(x)
        (out,) = e.outputs(call["id"], 1, keras.get("name", key))
        plain(e, key, spec, x, mask, out)
    elif not _stateless(e, spec, call, plan, keras.get("name", key)) and not _rnn_call(
        e, key, spec, call, plan, keras.get("name", key)
    ):
        _node_call(e, key, spec, call, node_kwargs, plan)


def _imports(e: _Emitter, names: Counter[str]) -> list[str]:
    """The import block as ruff's isort writes it (one section): plain imports, then one from-import per
    module by module name, its names constants first, then classes, then functions; a line longer than 88
    characters one name a line."""
    plain = ["import torch"] + (["import torch.nn.functional as F"] if names["F"] else [])
    froms = {**e.imports, "torch": {"nn"}}
    lines = []
    for module in sorted(froms, key=lambda m: (m.lower(), m)):
        ordered = sorted(froms[module], key=lambda n: (not n.isupper(), not n[:1].isupper(), n.lower(), n))
        line = f"from {module} import {', '.join(ordered)}"
        lines.append(
            line if len(line) <= 88 else f"from {module} import (\n" + "".join(f"    {n},\n" for n in ordered) + ")"
        )
    return plain + lines


def _names_in(line: str) -> list[tuple[str, int, int]]:
    """The names one line of code reads or writes, with where each starts and ends in it (characters): what
    Python parses, so never text inside a string, and any identifier (tokenize's pattern misses names with
    combining marks, ``a_̈``, which the sanitiser may make)."""
    encoded = line.encode()
    found = [node for node in ast.walk(ast.parse(line)) if isinstance(node, ast.Name)]
    spans = [
        (n.id, len(encoded[: n.col_offset].decode()), len(encoded[: n.end_col_offset or 0].decode())) for n in found
    ]
    return sorted(spans, key=lambda span: span[1])  # in the order they are written


def _without_unread(
    body: list[str], owners: list[str], results: list[str], names: set[str], calls: set[str]
) -> tuple[list[str], list[str]]:
    """The lines (and their owners) without the ``names`` (masks, unpacked outputs) nothing reads: an
    assignment of one goes, a place in a tuple is ``_``; a call whose result (one of ``calls``) nothing reads
    is kept, assigned to ``_``. Names are the names Python parses, never text inside a string (a layer key
    may spell a variable)."""
    counts = Counter(name for line in [*body, *results] for name, _, _ in _names_in(line))
    unread = {name for name in names if counts[name] == 1}
    out, kept_owners = [], []
    for line, owner in zip(body, owners, strict=True):
        found = _names_in(line)
        if found and found[0][0] in unread and found[0][1] == 0 and line.startswith(f"{found[0][0]} = "):
            continue
        if line.startswith("("):
            for name, start, end in reversed(found):  # one line each: offsets into it, replaced from the end
                if name in unread:
                    line = line[:start] + "_" + line[end:]
        out.append(line)
        kept_owners.append(owner)
    counts = Counter(name for line in [*out, *results] for name, _, _ in _names_in(line))  # without those lines
    kept = []
    for line in out:
        target = line.split(" = ")[0]
        kept.append("_" + line[len(target) :] if target in calls and counts[target] == 1 else line)
    return kept, kept_owners


def _assigned(line: str) -> list[str]:
    """The variables one line of ``forward`` assigns (none for a ``del``)."""
    statements = ast.parse(line).body  # none for a comment
    if not statements or not isinstance(statements[0], ast.Assign):
        return []
    return [n.id for target in statements[0].targets for n in ast.walk(target) if isinstance(n, ast.Name)]


def _freed(body: list[str], owners: list[str], results: list[str]) -> tuple[list[str], list[str]]:
    """The lines with ``del`` statements after the block (the lines of one call) that last reads a variable,
    as a hand-written forward lets go of what it no longer needs: the memory of a tensor is reused while the
    graph runs, not held to the end (a CNN's activations would otherwise all stay alive). Never a result, an
    input or ``layers``, and nothing after the last block, where ``forward`` returns."""
    made = {name for line in body for name in _assigned(line)} - set(results) - {"_"}
    last: dict[str, int] = {}
    for i, line in enumerate(body):
        for name, _, _ in _names_in(line):
            if name in made:
                last[name] = i
    ends: dict[int, list[str]] = {}  # the index of a block's last line -> the variables freed after it
    for name, i in last.items():
        while i + 1 < len(body) and owners[i + 1] == owners[i]:
            i += 1
        if i + 1 < len(body):  # after the last block, forward returns: nothing to let go of by hand
            ends.setdefault(i, []).append(name)
    lines, line_owners = [], []
    for i, (line, owner) in enumerate(zip(body, owners, strict=True)):
        lines.append(line)
        line_owners.append(owner)
        for statement in _del_statements(sorted(ends.get(i, []), key=lambda n: last[n])):
            lines.append(statement)
            line_owners.append(owner)
    return lines, line_owners


def _del_statements(names: list[str]) -> list[str]:
    """``del a, b, ...``, as many statements as keep each line within the width ruff formats to."""
    statements: list[str] = []
    for name in names:
        if statements and len(statements[-1]) + len(name) + 2 <= WIDTH - 8:
            statements[-1] += f", {name}"
        else:
            statements.append(f"del {name}")
    return statements


def _class_name(graph: dict[str, Any], class_name: Any, e: _Emitter) -> str:
    """The class's name: ``class_name`` as given, checked, or one made from the Keras model's name."""
    taken = {name for names in e.imports.values() for name in names} | e.used  # unique in the whole module
    if class_name is None:
        keras_name = graph.get("name")
        name = identifier(keras_name or "converted_model", set(taken), camel=True)
        e.keras_names = {name: str(keras_name or ""), **e.keras_names}
        return name
    if not usable(class_name, taken):
        raise ConfigError(
            f"to_source: class_name must be a Python identifier that names nothing the module uses (a keyword, a "
            f"builtin, torch, nn, F, layers, an imported node class), as NFKC leaves it; got {class_name!r:.60}"
        )
    return class_name


def _nested(structure: Any, names: list[str]) -> str:
    """The expression of ``names`` nested as ``structure`` (leaves index ``names``): dicts, lists as tuples."""
    if isinstance(structure, int):
        return names[structure]
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{literal(key)}: {_nested(value, names)}" for key, value in structure.items()) + "}"
    items = [_nested(value, names) for value in structure]
    return "(" + ", ".join(items) + (",)" if len(items) == 1 else ")")  # a comma only where it makes the tuple


def _parameters(structure: Any, inputs: list[str], used: set[str]) -> tuple[list[str], list[str]]:
    """``forward``'s parameters and the lines that unpack them: one tensor per input, one dict of them
    (keyed as Keras's dict of inputs), or one parameter per entry of Keras's nested lists."""
    if structure is None:
        return [f"{i}: torch.Tensor" for i in inputs], []
    lines: list[str] = []

    def unpack(shape: Any, access: str) -> None:
        if isinstance(shape, int):
            lines.append(f"{inputs[shape]} = {access}")
        else:
            items = shape.items() if isinstance(shape, dict) else enumerate(shape)
            for key, inner in items:
                unpack(inner, f"{access}[{literal(key)}]")

    if isinstance(structure, dict):
        name = identifier("inputs", used)
        unpack(structure, name)
        return [f"{name}: dict[str, torch.Tensor]"], lines
    parameters = []
    for entry in structure:
        if isinstance(entry, int):
            parameters.append(f"{inputs[entry]}: torch.Tensor")
        else:
            name = identifier("inputs", used)
            parameters.append(f"{name}: {'dict' if isinstance(entry, dict) else 'list'}")
            unpack(entry, name)
    return parameters, lines


@dataclass(frozen=True)
class Emitted:
    """What :func:`emit` wrote: the module's ``source``, its class's name, each call's output variables
    (``"_"`` where nothing reads one) and, for each line of ``source`` that belongs to a call, that call's
    id (line numbers from 1, as tracebacks give them)."""

    source: str
    class_name: str
    outputs: dict[str, list[str]]
    line_calls: dict[int, str]


def to_source(model: Any, class_name: str | None = None) -> str:
    """The converted ``model`` (a :class:`~attnzoo.keras.model.KerasModel`) as Python source (see the module
    docstring). ``class_name`` defaults to the Keras model's name in CamelCase. The source is checked with
    :func:`~attnzoo.keras.codegen.check_source` before it is returned."""
    return emit(model.graph, model.mask_plans, class_name).source


def emit(graph: dict[str, Any], plans: dict[str, CallMasks], class_name: str | None = None) -> Emitted:
    """The module of ``graph`` whose calls follow ``plans`` (each call's mask rules, :mod:`~attnzoo.keras.masks`),
    checked with :func:`~attnzoo.keras.codegen.check_source`; see :func:`to_source`."""
    e = _Emitter(counts=_needed_outputs(graph))
    inputs = []
    for spec in graph["inputs"]:
        name = e.name(spec.get("name", spec["id"]), spec.get("name", spec["id"]))
        e.values[spec["id"]] = [name]
        e.mask_of[name] = None
        inputs.append(name)
    parameters, unpack = _parameters(graph.get("input_structure"), inputs, e.used)
    for call in graph["calls"]:
        _emit_call(e, graph, plans[call["id"]], call)
    results = [e.values[call][index] for call, index in graph["outputs"]]
    body, owners = _without_unread(e.body, e.owners, results, e.masks | e.unpacked, e.returned)
    e.body, e.owners = _freed(body, owners, results)
    name = _class_name(graph, class_name, e)
    version = graph.get("keras_version")
    keras_version = None if version is None else str(version)
    shape = graph.get("output_structure")
    lines, body_start = _module(e, name, inputs, results, keras_version, shape, parameters, unpack)
    source = "\n".join(lines)
    check_source(source)
    line_calls = {}
    number = body_start + 1
    for statement, owner in zip(e.body, e.owners, strict=True):
        for _ in layout(statement, "        "):
            line_calls[number] = owner
            number += 1
    written = {n for line in e.body for n, _, _ in _names_in(line)} | set(results) | set(inputs)
    outputs = {call: [v if v in written else "_" for v in names] for call, names in e.values.items()}
    return Emitted(source, name, outputs, line_calls)


def _module(
    e: _Emitter,
    name: str,
    inputs: list[str],
    results: list[str],
    keras_version: str | None,
    output_structure: Any,
    parameters: list[str],
    unpack: list[str],
) -> tuple[list[str], int]:
    """The module's lines, and how many of them come before ``forward``'s body (``e.body``)."""
    from attnzoo.version import __version__

    names = Counter(name for line in e.body for name, _, _ in _names_in(line))
    kept = {name, *inputs, *results, *names}  # the made-up names the code still holds
    returns = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    annotation = {1: "torch.Tensor", 2: "tuple[torch.Tensor, torch.Tensor]"}.get(
        len(results), "tuple[torch.Tensor, ...]"
    )
    if output_structure is not None:  # Keras's dict of outputs, or nested lists (as tuples)
        returns = _nested(output_structure, results)
        annotation = "dict[str, torch.Tensor]" if isinstance(output_structure, dict) else "tuple"
    head = [
        f'"""{name}: a Keras model converted by attnzoo {__version__}.',
        "",
        f"    model = {name}()",
        '    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))  # the folder\'s weights',
        "    model.eval()  # Keras's inference; model.train() is Keras's training=True",
        "",
        "Inputs are tensors in the Keras model's input order (integer ids as integer tensors). Each tensor's",
        "Keras mask is the variable beside it (``x_mask``: bool, True = keep; absent: no mask).",
        "KERAS_NAMES maps each name made up here (the class, the inputs, the layers' outputs) to the name it",
        "has in the Keras file, and KERAS_VERSION is the Keras version the file says it was saved with.",
        '"""',
        "",
        *_imports(e, names),
        "",
        f"KERAS_VERSION = {literal(keras_version)}",
        "KERAS_NAMES = {",
        *[f"    {literal(k)}: {literal(v)}," for k, v in e.keras_names.items() if k in kept],
        "}",
        "",
        "",
        f"class {name}(nn.Module):",
        "    def __init__(self) -> None:",
        "        super().__init__()",
        "        self.layers = nn.ModuleDict()",
        *_laid_out(e.init),
        "",
        *_signature(parameters, annotation),
        *_laid_out(unpack),
        *(["        layers = self.layers"] if names["layers"] else []),
    ]
    return [*head, *_laid_out(e.body), *layout(f"return {returns}", "        "), ""], len(head)


def _laid_out(statements: list[str]) -> list[str]:
    return [line for statement in statements for line in layout(statement, "        ")]


def _signature(parameters: list[str], annotation: str) -> list[str]:
    """``forward``'s ``def`` line, its parameters one a line (with ruff's trailing comma) where it is long."""
    line = f"    def forward(self, {', '.join(parameters)}) -> {annotation}:"
    if len(line) <= WIDTH:
        return [line]
    return ["    def forward(", "        self,", *[f"        {p}," for p in parameters], f"    ) -> {annotation}:"]
