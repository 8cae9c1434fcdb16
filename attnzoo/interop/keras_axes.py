"""The axes of a converted Keras model's export: which are open, the sizes it is traced at, and the
shapes the written file is checked at.

Keras declares each input's shape, ``None`` where a size is open (``(None, None, 3)``: an image of any
height and width). The export keeps exactly those axes open (each input's own, so an encoder and a
decoder may have different lengths) and the batch; a declared size stays fixed. An open axis is traced
at the size the caller names (``--shape H,W``, ``--seq T``) or a default (16 for one open axis, 32 for
images), and the file is then checked at several sizes per open axis, odd and even, below and above
the traced one: ``t, t + 1, 2t + 1, t // 2, t // 2 + 1`` (each at least 1) and, with two or more open
axes, one shape where they differ. A shape the eager model itself refuses (too small for a ``valid``
convolution) is skipped; the traced, ``t + 1`` and ``2t + 1`` shapes are never below the traced one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnzoo.errors import ConfigError

__all__ = ["KerasAxes", "keras_axes", "check_shapes", "keras_inputs", "keras_output_names"]

_SPATIAL = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}


@dataclass(frozen=True)
class KerasAxes:
    """Each input's axis sizes (batch excluded) as traced, and which of them are open: ``open[(i, j)]`` is
    the name said to the user (``length``, ``height``, ``ids.length`` with several inputs)."""

    sizes: dict[tuple[int, int], int]  # (input, axis) -> traced size, axis >= 1
    open: dict[tuple[int, int], str]  # the open ones -> their name
    fixed: dict[tuple[int, int], str]  # the declared ones -> their name


def _axis_names(spec: dict[str, Any], several: bool) -> list[str]:
    """Names of the non-batch axes of one input: ``length`` (then ``features``) for a sequence, height
    and width (then ``channels``) for an image, ``axis<j>`` beyond."""
    shape = list(spec["shape"])
    rank = len(shape) - 1
    integer = str(spec.get("dtype")) not in ("float16", "float32", "float64", "bfloat16")
    spatial = rank if integer else rank - 1  # a float input's last axis is its features or channels
    names = list(_SPATIAL.get(spatial, tuple(f"axis{j}" for j in range(1, spatial + 1))))
    if not integer:
        names.append("channels" if spatial >= 2 else "features")
    names = names[:rank] + [f"axis{j}" for j in range(len(names) + 1, rank + 1)]
    prefix = f"{spec['name']}." if several else ""
    return [prefix + n for n in names]


def keras_axes(
    model: Any, *, shape: tuple[int, ...] | None = None, seq: int | None = None, scale: float = 1.0
) -> KerasAxes:
    """The traced sizes of ``model``'s inputs: ``shape`` gives the first input's open axes in order (or all
    its non-batch axes, the declared ones unchanged), ``seq`` every open sequence length; the rest
    default to 16 (one open axis) or 32 (images), times ``scale``."""
    specs = model.inputs_spec
    sizes: dict[tuple[int, int], int] = {}
    open_: dict[tuple[int, int], str] = {}
    fixed: dict[tuple[int, int], str] = {}
    for i, spec in enumerate(specs):
        if spec.get("dtype") == "string":
            raise ConfigError(
                f"input {spec['name']!r} takes strings (a TextVectorization inside the model): an exported "
                f"graph takes tensors; convert the model without its text layer and export that"
            )
        names = _axis_names(spec, len(specs) > 1)
        declared = list(spec["shape"])[1:]
        open_count = sum(d is None for d in declared)
        for j, (size, name) in enumerate(zip(declared, names, strict=True), start=1):
            if size is None:
                open_[(i, j)] = name
                sizes[(i, j)] = max(1, int((32 if open_count >= 2 else 16) * scale))
            else:
                fixed[(i, j)] = name
                sizes[(i, j)] = int(size)
    if seq is not None:
        lengths = [key for key, name in open_.items() if name.endswith("length")]
        if not lengths:
            raise ConfigError(
                f"seq={seq}: no input of this model has an open length (its open axes: "
                f"{', '.join(open_.values()) or 'none'}); give the sizes with shape=(H, W) (--shape H,W)"
            )
        for key in lengths:
            sizes[key] = seq
    if shape is not None:
        _apply_shape(specs[0], shape, sizes, open_)
    return KerasAxes(sizes, open_, fixed)


def _apply_shape(spec: dict[str, Any], shape: tuple[int, ...], sizes: dict, open_: dict) -> None:
    declared = list(spec["shape"])[1:]
    opened = [j for j in range(1, len(declared) + 1) if (0, j) in open_]
    if len(shape) == len(declared) and len(shape) != len(opened):  # the whole shape: declared sizes must agree
        for j, (want, got) in enumerate(zip(declared, shape, strict=True), start=1):
            if want is not None and want != got:
                raise ConfigError(
                    f"--shape {','.join(map(str, shape))}: input {spec['name']!r} has size {want} on axis {j} "
                    f"(Keras declared {_text(declared)}); give its open axes only, or the declared sizes"
                )
        targets = opened
        shape = tuple(shape[j - 1] for j in opened)
    elif len(shape) == len(opened):
        targets = opened
    else:
        raise ConfigError(
            f"--shape {','.join(map(str, shape))}: input {spec['name']!r} is {_text(declared)} (batch left out), "
            f"with {len(opened)} open ax{'is' if len(opened) == 1 else 'es'}; give one size per open axis"
            + ("" if opened else ": it has none, its shape is fixed")
        )
    for j, value in zip(targets, shape, strict=True):
        sizes[(0, j)] = value


def _text(declared: list[Any]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in declared) + ")"


def check_shapes(axes: KerasAxes, batch: int) -> list[tuple[int, dict[tuple[int, int], int]]]:
    """``(batch, sizes)`` to check an export at (see the module docstring); the traced shape first."""
    opened = list(axes.open)
    out = [(batch, dict(axes.sizes))]
    if not opened:
        return [*out, (batch + 1, dict(axes.sizes)), (1, dict(axes.sizes))]
    for grow, b in (
        (lambda t: t + 1, batch + 1),
        (lambda t: 2 * t + 1, 1),
        (lambda t: max(1, t // 2), batch),
        (lambda t: max(1, t // 2) + 1, batch + 1),
    ):
        out.append((b, {**axes.sizes, **{k: grow(axes.sizes[k]) for k in opened}}))
    if len(opened) > 1:  # the open axes at different sizes
        mixed = {k: axes.sizes[k] + 1 + n * (axes.sizes[k] + 2) for n, k in enumerate(opened)}
        out.append((batch, {**axes.sizes, **mixed}))
    return out


def keras_inputs(
    model: Any, batch: int, sizes: dict[tuple[int, int], int], *, in_band: bool, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random inputs for ``model`` at ``sizes``: integer ids in [1, vocab) of the Keras input's dtype (a
    padding mask of ones), or normal floats in the model's dtype. With ``in_band`` padding (every input read
    by a masking layer) the last row is right-padded (ids 0, zero vectors) after about half its length."""
    from attnzoo.conventions.builtin import TORCH_INTEGERS
    from attnzoo.keras.inputs import value_rules

    generator = torch.Generator().manual_seed(seed)
    reference = next((t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()), None)
    dtype = reference.dtype if reference is not None else torch.get_default_dtype()
    device = reference.device if reference is not None else torch.device("cpu")
    tensors = []
    rules = value_rules(model.graph)
    for i, spec in enumerate(model.inputs_spec):
        shape = [batch] + [sizes[(i, j)] for j in range(1, len(spec["shape"]))]
        if str(spec.get("dtype")).startswith(("int", "uint")):
            rule = rules[i]
            vocab = max(rule.high if rule is not None else 10, 2)  # a padding mask: all 1
            x = torch.randint(1, vocab, shape, generator=generator)
            x = x.to(getattr(torch, TORCH_INTEGERS.get(str(spec["dtype"]), "int64")))
        else:
            x = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
        if in_band and len(shape) > 1 and batch > 1:
            x[-1, shape[1] // 2 + 1 :] = 0
        tensors.append(x.to(device))
    return tuple(tensors)


def keras_output_names(model: Any) -> list[str]:
    """The name of each output tensor of a converted Keras model, in the order its returned structure
    flattens: the Keras layer that makes it (``dense``; ``lstm_1`` for its second output where it makes
    several) or, for a dict of outputs, its key (``topic``; ``a.b`` nested, ``a.0`` for a list's first)."""
    ids = [str(call) for call, _ in model.outputs]
    names = [
        f"{call}_{index}" if ids.count(call) > 1 else call
        for call, index in zip(ids, (i for _, i in model.outputs), strict=True)
    ]

    def walk(shape: Any, prefix: str) -> list[tuple[int, str]]:
        if isinstance(shape, int):
            return [(shape, prefix or names[shape])]
        items = shape.items() if isinstance(shape, dict) else enumerate(shape)
        named = isinstance(shape, dict) or bool(prefix)  # a plain list of outputs keeps the layers' names
        return [
            leaf
            for key, inner in items
            for leaf in walk(inner, (f"{prefix}.{key}" if prefix else str(key)) if named else "")
        ]

    structure = model.output_structure
    if structure is None:
        return names
    return [name for _, name in walk(structure, "")]
