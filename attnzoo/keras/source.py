"""``KerasModel.to_source()``: a converted Keras model as one readable, self-contained PyTorch module.

The module holds a class named after the Keras model, built with no arguments, whose ``layers`` are the
converted model's, under the same names, so ``load_state_dict`` takes the converted folder's
``model.safetensors`` as it is. Its ``forward`` is straight-line code, one block per Keras call, with
each tensor's Keras mask written out as a variable beside it (``embedding_mask = ids != 0``).

Layers whose Keras semantics are plain torch are written as torch: ``nn.Embedding``, ``nn.Linear`` and
its activation, ``nn.Conv1d`` / ``nn.Conv2d`` with Keras's padding (``F.pad``), reshapes, ``Masking``,
``Dropout``. The others (recurrent layers with Keras's masking on torch's packed kernel, BatchNormalization
with Keras's statistics, masked merges and pooling, attention layers built by ``attnzoo.create``) are
attnzoo's own node classes, imported by name and called as the converted model calls them; their source
is one click away, and they are what makes the emitted module equal the converted one.

The emitted module imports only torch and attnzoo, and passes ``ruff check``.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from attnzoo.errors import ConfigError

__all__ = ["to_source"]

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


def _identifier(text: str, used: set[str]) -> str:
    """A fresh Python identifier made from ``text`` (a Keras call id such as ``dense_1`` or ``inner/dense``)."""
    name = re.sub(r"\W+", "_", text).strip("_").lower() or "x"
    if name[0].isdigit() or keyword.iskeyword(name) or hasattr(builtins, name) or name in ("self", "layers", "nn", "F"):
        name = f"v_{name}"
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate


def _class_name(text: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", text or "")
    name = "".join(w[:1].upper() + w[1:] for w in words) or "ConvertedModel"
    return f"Keras{name}" if name[0].isdigit() else name


@dataclass
class _Emitter:
    """The code being written: the ``__init__`` and ``forward`` lines, the imports, the names in use, and
    for each tensor variable the variable holding its Keras mask (None: no mask)."""

    init: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    values: dict[str, list[str]] = field(default_factory=dict)  # call id -> its outputs' variables
    mask_of: dict[str, str | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # call id -> how many of its outputs are read
    masks: set[str] = field(default_factory=set)  # the variables that hold masks

    def expression(self, value: Any) -> str:
        """Graph data as a Python expression: ``{"ref": [call, i]}`` becomes that output's variable."""
        if isinstance(value, dict) and "ref" in value:
            call, index = value["ref"]
            return self.values[call][index]
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.expression(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.expression(v) for v in value) + "]"
        return repr(value)

    def mask(self, value: Any) -> Any:
        """The masks of an argument, mirroring its structure (as the converted graph passes them)."""
        if isinstance(value, dict) and "ref" in value:
            return self.mask_of.get(self.expression(value))
        if isinstance(value, list):
            return [self.mask(v) for v in value]
        return None

    def outputs(self, call_id: str, count: int) -> list[str]:
        names = [_identifier(call_id if i == 0 else f"{call_id}_{i}", self.used) for i in range(count)]
        self.values[call_id] = names
        return names


def _masks_text(masks: Any) -> str:
    if isinstance(masks, list):
        return "[" + ", ".join(_masks_text(m) for m in masks) + "]"
    return "None" if masks is None else str(masks)


def _tensor_count(args: list[Any], kwargs: dict[str, Any]) -> int:
    """How many arguments of a call hold tensors, as keras 3 counts them."""

    def holds(value: Any) -> bool:
        if isinstance(value, dict) and "ref" in value:
            return True
        return isinstance(value, list) and bool(value) and all(holds(v) for v in value)

    return sum(holds(v) for v in args) + sum(holds(v) for k, v in kwargs.items() if k != "mask")


def _set_mask(e: _Emitter, name: str, mask_expression: str | None) -> None:
    if mask_expression is None:
        e.mask_of[name] = None
        return
    variable = f"{name}_mask"
    e.used.add(variable)
    e.masks.add(variable)
    e.body.append(f"{variable} = {mask_expression}")
    e.mask_of[name] = variable


# -- readable forms of the plain layers ------------------------------------------------------------------
def _embedding(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    e.init.append(f'self.layers["{key}"] = nn.Embedding({spec["input_dim"]}, {spec["output_dim"]})')
    e.body.append(f'{out} = layers["{key}"]({x}.long())')
    _set_mask(e, out, f"{x} != 0" if spec.get("mask_zero") else None)


def _dense(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    bias = "" if spec.get("use_bias", True) else ", bias=False"
    e.init.append(f'self.layers["{key}"] = nn.Linear({spec["in_features"]}, {spec["units"]}{bias})')
    _apply(e, out, f'layers["{key}"]({x})', spec.get("activation", "linear"))
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
    groups = f", groups={spec['groups']}" if spec.get("groups", 1) != 1 else ""
    e.init.append(
        f'self.layers["{key}"] = nn.Conv{rank}d({spec["in_channels"]}, {spec["filters"]}, kernel_size={k}, '
        f"stride={s}, dilation={d}{groups}{bias})"
    )
    first = spec.get("channels_first", False)
    h = x if first else f"{x}.movedim(-1, 1)"
    if spec.get("padding") == "same":  # TensorFlow's: the extra one on the right, by the input's length
        e.imports.add("from attnzoo.keras.converters.conv import conv_padding")
        e.body.append(f"{out} = {h}")
        h = f'F.pad({out}, conv_padding({out}, "same", {k}, {s}, {d}))'
    elif spec.get("padding") == "causal":
        h = f"F.pad({h}, [{(k[0] - 1) * d[0]}, 0])"
    # back in Keras's layout before the activation: a softmax runs over Keras's last axis
    _apply(e, out, f'layers["{key}"]({h})' + ("" if first else ".movedim(1, -1)"), spec.get("activation", "linear"))
    e.mask_of[out] = None


def _reshaping(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    op = spec["op"]
    if op == "flatten":
        h = f"{x}.movedim(1, -1)" if spec.get("channels_first") else x
        e.body.append(f"{out} = {h}.reshape({x}.shape[0], -1)")
    elif op == "reshape":
        e.body.append(f"{out} = {x}.reshape({x}.shape[0], {', '.join(map(str, spec['target_shape']))})")
    elif op == "permute":
        e.body.append(f"{out} = {x}.permute(0, {', '.join(map(str, spec['dims']))})")
    else:  # repeat_vector
        e.body.append(f"{out} = {x}.unsqueeze(1).expand(-1, {spec['n']}, -1)")
    e.mask_of[out] = None


def _masking(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    variable = f"{out}_mask"
    e.used.add(variable)
    e.masks.add(variable)
    e.body.append(f"{variable} = ({x} != {spec.get('mask_value', 0.0)!r}).any(dim=-1)")
    e.body.append(f"{out} = {x} * {variable}.unsqueeze(-1).to({x}.dtype)")
    e.mask_of[out] = variable


def _dropout(e: _Emitter, key: str, spec: dict[str, Any], x: str, mask: str | None, out: str) -> None:
    e.body.append(f"{out} = F.dropout({x}, {spec['rate']!r}, self.training)")
    e.mask_of[out] = mask


def _plain(spec: dict[str, Any]) -> Any:
    """The readable emitter of a node, or None: the node class is called as the graph calls it."""
    op = spec["op"]
    if op == "activation" and spec.get("activation") in _ACTIVATIONS:
        return _activation
    if op == "dense" and spec.get("activation", "linear") in _ACTIVATIONS:
        return _dense
    if op == "conv" and spec.get("activation", "linear") in _ACTIVATIONS:
        return _conv
    if op == "noise" and spec.get("kind") == "dropout" and not spec.get("shared_axes") and spec["rate"] < 1:
        return _dropout
    return _PLAIN_OPS.get(op)


_PLAIN_OPS = {
    "embedding": _embedding,
    "masking": _masking,
    "flatten": _reshaping,
    "reshape": _reshaping,
    "permute": _reshaping,
    "repeat_vector": _reshaping,
}


# -- the node classes, called as the converted graph calls them ----------------------------------------------
def _node_call(e: _Emitter, model: Any, key: str, spec: dict[str, Any], call: dict[str, Any], kwargs: dict) -> None:
    node = model.layers[key]
    cls = type(node)
    e.imports.add(f"from {cls.__module__} import {cls.__name__}")
    arguments = ", ".join(f"{k}={v!r}" for k, v in spec.items() if k not in ("op", "keras"))
    e.init.append(f'self.layers["{key}"] = {cls.__name__}({arguments})')
    arg_masks = e.mask(call["args"])
    explicit = kwargs.get("mask")
    if (
        isinstance(explicit, dict)
        and "ref" in explicit
        or (isinstance(explicit, list) and any(isinstance(m, dict) and "ref" in m for m in explicit))
    ):  # an explicit mask takes the place of the first argument's, as the graph does
        arg_masks = [e.expression(explicit), *arg_masks[1:]]
    args, masks = e.expression(call["args"]), _masks_text(arg_masks)
    outputs = e.outputs(call["id"], e.counts.get(call["id"], 1))
    mask_names = [f"{name}_mask" for name in outputs]
    e.used.update(mask_names)
    e.masks.update(mask_names)
    targets = ", ".join([*outputs, "*_"])  # outputs nothing reads (an RNN's unused states) go to _
    mask_targets = ", ".join([*mask_names, "*_"])
    e.body.append(f'({targets}), ({mask_targets}) = layers["{key}"]({args}, {_kwargs_text(e, kwargs)}, {masks})')
    for name, mask_name in zip(outputs, mask_names, strict=True):
        e.mask_of[name] = mask_name
    if getattr(node, "clears_input_masks", False):  # keras 3's MultiHeadAttention deletes its inputs' masks
        for value in [*call["args"][:3], call["kwargs"].get("value"), call["kwargs"].get("key")]:
            if isinstance(value, dict) and "ref" in value:
                e.mask_of[e.expression(value)] = None


def _kwargs_text(e: _Emitter, kwargs: dict[str, Any]) -> str:
    parts = []
    for k, v in kwargs.items():
        parts.append(f"{k!r}: {v if k == 'kwarg_masks' else e.expression(v)}")
    return "{" + ", ".join(parts) + "}"


def _needed_outputs(graph: dict[str, Any]) -> dict[str, int]:
    """For each call, how many of its outputs the graph reads (one more than the highest index used)."""
    counts: dict[str, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, dict) and "ref" in value:
            call, index = value["ref"]
            counts[call] = max(counts.get(call, 1), index + 1)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    for call in graph["calls"]:
        visit(call["args"])
        visit(call["kwargs"])
    visit([{"ref": list(ref)} for ref in graph["outputs"]])
    return counts


def _emit_call(e: _Emitter, model: Any, call: dict[str, Any], keras3: bool) -> None:
    kwargs = dict(call["kwargs"])
    explicit = kwargs.get("mask")
    kwarg_masks = {
        k: e.mask_of.get(e.expression(v))
        for k, v in kwargs.items()
        if k != "mask" and isinstance(v, dict) and "ref" in v
    }
    if call["layer"] is None:  # a nested model's input (maybe given a mask) or its outputs: the same tensors
        if kwargs.get("outputs"):
            e.values[call["id"]] = [e.expression(a) for a in call["args"]]
            return
        name = e.expression(call["args"][0])
        e.values[call["id"]] = [name]
        if isinstance(explicit, dict) and "ref" in explicit:
            e.mask_of[name] = e.expression(explicit)
        return
    key = call["layer"]
    spec = model.graph["layers"][key]
    # the nodes read train/eval from the module, as Keras overrides a recorded training= by the model's call
    node_kwargs = {k: v for k, v in kwargs.items() if k not in ("mask", "training")}
    if isinstance(explicit, (dict, list)):
        node_kwargs["mask"] = explicit
    if kwarg_masks:  # the masks of tensors passed by keyword (Keras 2's MultiHeadAttention value=, key=)
        node_kwargs["kwarg_masks"] = "{" + ", ".join(f"{k!r}: {v}" for k, v in kwarg_masks.items()) + "}"
    if keras3 and not isinstance(explicit, (dict, list)) and _tensor_count(call["args"], kwargs) > 1:
        node_kwargs["implicit_mask"] = False  # keras 3 passes a layer no mask when it takes several tensors
    plain = _plain(spec)
    simple = plain is not None and len(call["args"]) == 1 and not node_kwargs
    e.body.append(f"# {spec.get('keras', {}).get('name', key)} ({spec.get('keras', {}).get('class', spec['op'])})")
    if simple:
        x = e.expression(call["args"][0])
        mask = e.mask_of.get(x)
        (out,) = e.outputs(call["id"], 1)
        plain(e, key, spec, x, mask, out)
    else:
        _node_call(e, model, key, spec, call, node_kwargs)


def _imports(e: _Emitter) -> list[str]:
    """The import block, sorted as isort sorts one section: plain imports, then from-imports by module."""
    plain = ["import torch"] + (["import torch.nn.functional as F"] if any("F." in line for line in e.body) else [])
    return plain + sorted(["from torch import nn", *e.imports], key=lambda line: line.split()[1])


def _without_unread_masks(body: list[str], results: list[str], masks: set[str]) -> list[str]:
    """The lines without the masks nothing reads: an assignment of one goes, a place in a tuple is ``_``."""
    text = "\n".join([*body, *results])
    unread = {name for name in masks if len(re.findall(rf"\b{name}\b", text)) == 1}
    out = []
    for line in body:
        target = line.split(" = ", 1)[0]
        if target in unread:
            continue
        for name in unread:
            line = re.sub(rf"\b{name}\b", "_", line) if line.startswith("(") else line
        out.append(line)
    return out


def _nested(structure: Any, names: list[str]) -> str:
    """The expression of ``names`` nested as ``structure`` (leaves index ``names``): dicts, lists as tuples."""
    if isinstance(structure, int):
        return names[structure]
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{key!r}: {_nested(value, names)}" for key, value in structure.items()) + "}"
    return "(" + ", ".join(_nested(value, names) for value in structure) + ",)"


def _parameters(structure: Any, inputs: list[str], used: set[str]) -> tuple[str, list[str]]:
    """``forward``'s parameters and the lines that unpack them: one tensor per input, one dict of them
    (keyed as Keras's dict of inputs), or one parameter per entry of Keras's nested lists."""
    if structure is None:
        return ", ".join(f"{i}: torch.Tensor" for i in inputs), []
    lines: list[str] = []

    def unpack(shape: Any, access: str) -> None:
        if isinstance(shape, int):
            lines.append(f"{inputs[shape]} = {access}")
        else:
            items = shape.items() if isinstance(shape, dict) else enumerate(shape)
            for key, inner in items:
                unpack(inner, f"{access}[{key!r}]")

    if isinstance(structure, dict):
        name = _identifier("inputs", used)
        unpack(structure, name)
        return f"{name}: dict[str, torch.Tensor]", lines
    parameters = []
    for entry in structure:
        if isinstance(entry, int):
            parameters.append(f"{inputs[entry]}: torch.Tensor")
        else:
            name = _identifier("inputs", used)
            parameters.append(f"{name}: {'dict' if isinstance(entry, dict) else 'list'}")
            unpack(entry, name)
    return ", ".join(parameters), lines


def to_source(model: Any, class_name: str | None = None) -> str:
    """The converted ``model`` (a :class:`~attnzoo.keras.model.KerasModel`) as Python source (see the module
    docstring). ``class_name`` defaults to the Keras model's name in CamelCase."""
    from attnzoo.version import __version__

    if class_name is not None and (
        not isinstance(class_name, str) or not class_name.isidentifier() or keyword.iskeyword(class_name)
    ):
        raise ConfigError(f"to_source: class_name must be a Python identifier, got {class_name!r:.60}")
    graph = model.graph
    keras3 = model.keras3
    e = _Emitter(counts=_needed_outputs(graph))
    inputs = []
    for spec in graph["inputs"]:
        name = _identifier(spec["name"], e.used)
        e.values[spec["id"]] = [name]
        e.mask_of[name] = None
        inputs.append(name)
    parameters, unpack = _parameters(graph.get("input_structure"), inputs, e.used)
    for call in graph["calls"]:
        _emit_call(e, model, call, keras3)
    results = [e.values[call][index] for call, index in graph["outputs"]]
    e.body = _without_unread_masks(e.body, results, e.masks)
    name = class_name or _class_name(str(graph.get("name") or "converted_model"))
    returns = results[0] if len(results) == 1 else "(" + ", ".join(results) + ",)"
    annotation = "torch.Tensor" if len(results) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(results))}]"
    if graph.get("output_structure") is not None:  # Keras's dict of outputs, or nested lists (as tuples)
        returns = _nested(graph["output_structure"], results)
        annotation = "dict[str, torch.Tensor]" if isinstance(graph["output_structure"], dict) else "tuple"
    lines = [
        f'"""{name}: a Keras model ({graph.get("keras_version")}) converted by attnzoo {__version__}.',
        "",
        f"    model = {name}()",
        '    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))  # the folder\'s weights',
        "    model.eval()  # Keras's inference; model.train() is Keras's training=True",
        "",
        "Inputs are tensors in the Keras model's input order (integer ids as integer tensors). Each tensor's",
        "Keras mask is the variable beside it (``x_mask``: bool, True = keep; absent: no mask).",
        '"""',
        "",
        *_imports(e),
        "",
        "",
        f"class {name}(nn.Module):",
        "    def __init__(self) -> None:",
        "        super().__init__()",
        "        self.layers = nn.ModuleDict()",
        *[f"        {line}" for line in e.init],
        "",
        f"    def forward(self, {parameters}) -> {annotation}:",
        *[f"        {line}" for line in unpack],
        "        layers = self.layers",
        *[f"        {line}" for line in e.body],
        f"        return {returns}",
        "",
    ]
    return "\n".join(lines)
