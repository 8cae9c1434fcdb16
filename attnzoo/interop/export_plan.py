"""What :func:`attnzoo.interop.export.export` traces with and checks on: a :class:`Plan`.

    plan = make_plan(model, convention, None, ".onnx", dynamic=True, ...)
    plan.args, plan.kwargs     # the example the graph is traced with
    plan.checks                # every (args, kwargs) the written file is run at against eager
    plan.dynamic_shapes        # torch.export's open axes

Three sources: ``inputs=(args, kwargs)`` given by the caller (every axis fixed), a converted Keras
model's declared inputs (every axis Keras left open stays open, :mod:`attnzoo.interop.keras_axes`), or
the model's calling convention at its own sizes (batch and sequence open; a recurrent model's sequence
fixed at its run's ``max_len``). The checks hold the traced shape and, per open axis, sizes above and
below it, odd and even.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from attnzoo.core import model_info
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError

__all__ = [
    "Plan",
    "make_plan",
    "fixed_length",
    "convention_of",
    "input_names",
    "var_positional",
    "eager",
    "flat_tensors",
    "output_paths",
    "checked_note",
]


def _run_max_len(model: Any) -> int | None:
    record = RunRecord.of(model)
    return record.max_len if "max_len" in record.task_config else None


def fixed_length(model: Any) -> int | None:
    """The one sequence length ``export(model, path)`` gives the exported graph by default: a recurrent
    model's (torch.export fixes an LSTM's time axis) is its run's ``max_len``, or the convention's example
    length where the run records none; None where the graph takes any length."""
    if not _fixed_axes(model):
        return None
    return _run_max_len(model) or convention_of(model).seq


def convention_of(model: Any):
    from attnzoo.conventions import get_convention

    info = getattr(model, "attnzoo_config", None)
    if not isinstance(info, Mapping) or "name" not in info:
        raise ConfigError("export() needs inputs=(args, kwargs) for a model not built by attnzoo.create or load")
    spec = model_info(info["name"])
    if not spec.convention:
        raise ConfigError(f"{spec.name}: its card names no convention; pass inputs=(args, kwargs)")
    from attnzoo.conventions import model_config

    return get_convention(spec.convention).for_config(model_config(model))


def _parameter_names(model: Any) -> list[str]:
    return [
        n
        for n, p in inspect.signature(model.forward).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def input_names(model: Any, count: int) -> list[str]:
    """The names of ``count`` positional inputs: forward's parameters, then a model's own
    ``input_names`` (a converted Keras model names its inputs as Keras did) or ``args_<i>``."""
    names = _parameter_names(model)
    if count <= len(names):
        return names[:count]
    own = getattr(model, "input_names", None)
    if isinstance(own, (list, tuple)) and len(own) == count and all(isinstance(n, str) for n in own):
        return list(own)
    rest = var_positional(model) or "args"
    return [*names, *(f"{rest}_{i}" for i in range(count - len(names)))]


def var_positional(model: Any) -> str | None:
    """The name of ``forward``'s ``*args`` parameter, if it has one (a converted Keras model's inputs)."""
    for n, p in inspect.signature(model.forward).parameters.items():
        if p.kind is p.VAR_POSITIONAL:
            return n
    return None


def _fixed_axes(model: Any) -> tuple[str, ...]:
    """Axes that must keep their traced size: torch.export specialises an ``nn.LSTM`` / ``nn.GRU``'s time
    axis, so a model that holds one exports with its sequence lengths fixed (the batch stays dynamic)."""
    from torch import nn

    # a converted Keras RNN traces its steps through scan, which keeps the length open: a Recurrent node's
    # .rnn, or an nn.LSTM / nn.GRU a converted model's emitted forward runs through run_rnn
    scanned = {id(getattr(m, "rnn", m)) for m in model.modules() if getattr(m, "traces_any_length", False)}
    fixed = any(isinstance(m, nn.RNNBase) and id(m) not in scanned for m in model.modules())
    return ("keys", "queries") if fixed else ()


def _dynamic_shapes(model: Any, convention, sample, dynamic: bool) -> dict[str, Any] | None:
    """``dynamic_shapes`` for torch.export: batch, keys and queries axes of every tensor input."""
    from torch.export import Dim

    if not dynamic:
        return None
    dims = {"batch": Dim("batch", min=1), "keys": Dim("seq", min=1), "queries": Dim("queries", min=1)}
    for axis in _fixed_axes(model):
        dims.pop(axis)
    names = _parameter_names(model)
    positional = [s for s in convention.slots if not s.keyword and s.name in sample.tensors]
    shapes: dict[str, Any] = {}
    rest = var_positional(model)
    for position, slot in enumerate(positional):
        axes = {i: dims[a] for i, a in enumerate(slot.axes) if a in dims}
        if position < len(names):
            shapes[names[position]] = axes
        elif rest is not None:  # forward(*inputs): the shapes of the rest go as one tuple
            shapes[rest] = (*shapes.get(rest, ()), axes)
    for slot in convention.slots:
        if slot.keyword and slot.name in sample.tensors:
            shapes[slot.name] = {i: dims[a] for i, a in enumerate(slot.axes) if a in dims}
    return shapes


def _float_dtype(sample):
    import torch

    return next((t.dtype for t in sample.tensors.values() if t.is_floating_point()), torch.get_default_dtype())


def _tensors_positional(model: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The tensor keywords that follow ``args`` in ``forward``'s positional parameters, moved into ``args``:
    a ``.pt2`` program takes each input in the one form it was traced with, and ``program(x, mask)`` is
    how a layer is called (flags such as ``return_attention`` and keyword-only inputs stay keywords)."""
    import torch

    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return args, kwargs
    args, kwargs = tuple(args), dict(kwargs)
    for parameter in parameters[len(args) :]:
        if parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            break
        if not isinstance(kwargs.get(parameter.name), torch.Tensor):
            break
        args += (kwargs.pop(parameter.name),)
    return args, kwargs


def flat_tensors(out: Any) -> list:
    """The tensors of a model's output in torch.export's (pytree's) order: a tensor, or the leaves of
    nested tuples, lists and dicts (a dict in its own key order), other values left out."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [t for value in out.values() for t in flat_tensors(value)]
    if isinstance(out, (tuple, list)):
        return [t for value in out for t in flat_tensors(value)]
    return []


def output_paths(out: Any) -> list[str] | None:
    """The name of each of :func:`flat_tensors`' tensors where the output holds a dict: its keys, joined by
    ``.`` through nested dicts (a list's place by its index); None for a tensor or a plain tuple."""
    import torch

    def walk(value: Any, prefix: str) -> list[str]:
        if isinstance(value, torch.Tensor):
            return [prefix or "output"]
        if isinstance(value, Mapping):
            return [n for k, v in value.items() for n in walk(v, f"{prefix}.{k}" if prefix else str(k))]
        if isinstance(value, (tuple, list)):
            return [n for i, v in enumerate(value) for n in walk(v, f"{prefix}.{i}" if prefix else str(i))]
        return []

    has_dict = isinstance(out, Mapping) or (isinstance(out, (tuple, list)) and any(isinstance(v, Mapping) for v in out))
    return walk(out, "") if has_dict else None


def eager(model: Any, args: tuple, kwargs: dict) -> list:
    import torch

    with torch.no_grad():
        out = model(*args, **kwargs)
    return flat_tensors(out)


@dataclass
class Plan:
    """What to trace with and what to check on: the trace's ``args``/``kwargs``, the ``checks`` (each an
    ``(args, kwargs)``, the traced shape among them), torch.export's ``dynamic_shapes``, the notes, the
    one sequence length of the graph (None: any; for the tokenizer in the metadata) and the axes' names."""

    args: tuple
    kwargs: dict
    checks: list[tuple[tuple, dict]]
    dynamic_shapes: Any
    notes: list[str]
    length: int | None
    open_axes: tuple[str, ...]
    static_axes: tuple[str, ...]
    axis_names: dict[tuple[int, int], str] | None = None  # (input, axis) -> the open axis's name in the file
    bounds: dict[str, list[int]] | None = None  # an open axis torch bounds -> [least, most] sizes it takes


def make_plan(
    model: Any,
    convention: Any,
    inputs: tuple[tuple, dict] | None,
    suffix: str,
    dynamic: bool,
    return_attention: bool,
    batch: int,
    seq: int | None,
    shape: tuple[int, ...] | None,
) -> Plan:
    """The plan from ``inputs`` (every axis fixed), a converted Keras model's declared inputs, or the
    convention at the model's own sizes (a recurrent run's length is its max_len, said in the notes)."""
    if inputs is not None:
        return _given_plan(model, inputs)
    if convention.name == "keras_inputs" and hasattr(model, "inputs_spec"):
        return _keras_plan(model, suffix, dynamic, batch, seq, shape)
    if shape is not None:
        if len(shape) != 1:
            raise ConfigError(
                f"shape={shape}: {convention.name} models have one open axis besides the batch (the sequence); "
                f"give its length alone (--shape T)"
            )
        if seq is not None and seq != shape[0]:
            raise ConfigError(f"seq={seq} and shape={shape} disagree; give one of them")
        seq = shape[0]
    return _convention_plan(model, convention, suffix, dynamic, return_attention, batch, seq)


def _given_plan(model: Any, inputs: tuple[tuple, dict]) -> Plan:
    """``inputs=(args, kwargs)``: the graph takes exactly their shapes, every axis fixed, batch included."""
    import torch

    args, kwargs = inputs
    names = input_names(model, len(args))
    tensors = [*zip(names, args, strict=False), *kwargs.items()]
    fixed = tuple(f"{n}[{d}]" for n, t in tensors if isinstance(t, torch.Tensor) for d in range(t.dim()))
    shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in tensors if isinstance(t, torch.Tensor))
    notes = [f"inputs= given: the file takes exactly these shapes ({shapes}), every axis fixed, batch included"]
    return Plan(args, kwargs, [(args, kwargs)], None, notes, None, (), fixed)


def _convention_plan(model, convention, suffix, dynamic, return_attention, batch, seq) -> Plan:
    from attnzoo.conventions import sample_inputs

    notes: list[str] = []
    if seq is None and _fixed_axes(model) and (seq := _run_max_len(model)) is not None:
        notes.append(f"the sequence axis is fixed at the run's max_len ({seq}): pad inputs to {seq} tokens")
    elif _fixed_axes(model) and dynamic:
        notes.append(
            f"a recurrent layer fixes the sequence axis at the traced length ({seq or convention.seq}): pad "
            f"inputs to it, or export again with seq=N (attnzoo export --shape N) for your inputs' length"
        )
    _check_trace_size(model, convention, batch, seq or convention.seq)
    sample = sample_inputs(model, convention, batch=batch, seq=seq or convention.seq)
    args, kwargs = sample.call_arguments(return_attention=return_attention)
    checks = [(args, kwargs)] if not dynamic else []
    if dynamic:
        samples = _check_samples(model, convention, sample)
        checks += [s.call_arguments(return_attention=return_attention) for s in samples]
    if suffix == ".pt2":
        args, kwargs = _tensors_positional(model, args, kwargs)
        checks = [_tensors_positional(model, *c) for c in checks]
    dynamic_shapes = _dynamic_shapes(model, convention, sample, dynamic)
    if dynamic_shapes is not None and return_attention and "return_attention" in kwargs:
        dynamic_shapes["return_attention"] = None
    traced = sample.sizes["keys"] if (not dynamic or _fixed_axes(model)) else None  # the graph's one length
    present = {a for slot in convention.slots if slot.name in sample.tensors for a in slot.axes}
    axes = [a for a in ("batch", "keys", "queries") if a in present]
    shown = {"batch": "batch", "keys": "seq", "queries": "queries"}
    fixed_here = set(_fixed_axes(model)) if dynamic else set(axes)
    static = tuple(shown[a] for a in axes if a in fixed_here)
    opened = tuple(shown[a] for a in axes if a not in fixed_here)
    return Plan(args, kwargs, checks, dynamic_shapes, notes, traced, opened, static)


def _keras_plan(model, suffix, dynamic, batch, seq, shape) -> Plan:
    """A converted Keras model: every axis Keras left open stays open (each input's own), a declared size
    stays fixed; checked at several sizes per open axis (:mod:`attnzoo.interop.keras_axes`)."""
    from torch.export import Dim

    from attnzoo.conventions import get_convention, model_config
    from attnzoo.interop.keras_axes import check_shapes, keras_axes, keras_inputs

    in_band = get_convention("keras_inputs").for_config(model_config(model)).in_band
    # with no size given, the default sizes; where the model refuses them (a position embedding of 8
    # steps, valid convolutions that need more), smaller or larger ones, as the model takes
    _check_keras_size(model, batch, keras_axes(model, shape=shape, seq=seq).sizes, in_band)
    for scale in (1.0,) if shape is not None or seq is not None else (1.0, 0.5, 0.25, 2.0, 4.0, 8.0):
        axes = keras_axes(model, shape=shape, seq=seq, scale=scale)
        args = keras_inputs(model, batch, axes.sizes, in_band=in_band)
        try:
            eager(model, args, {})
            break
        except (RuntimeError, ValueError):
            continue
    else:  # no size fits: the default ones, whose error export then says
        axes = keras_axes(model, shape=shape, seq=seq)
        args = keras_inputs(model, batch, axes.sizes, in_band=in_band)
    fixed = [f"{name} = {axes.sizes[key]} (declared by Keras)" for key, name in axes.fixed.items()]
    if not dynamic:
        static = ("batch", *axes.open.values(), *axes.fixed.values())
        notes = [f"dynamic=False: every axis fixed at the traced shape ({', '.join(_sizes_text(axes.sizes, axes))})"]
        return Plan(args, {}, [(args, {})], None, notes, None, (), static)
    batch_dim = Dim("batch", min=1)
    per_input = []
    for i in range(len(args)):
        dims = {0: batch_dim}
        for (k, j), name in axes.open.items():
            if k == i:
                dims[j] = Dim("".join(c if c.isalnum() else "_" for c in name) or f"in{i}_{j}", min=1)
        per_input.append(dims)
    checks: list[tuple[tuple, dict]] = [
        (keras_inputs(model, b, sizes, in_band=in_band, seed=n), {})
        for n, (b, sizes) in enumerate(check_shapes(axes, batch))
    ]
    notes = []
    if axes.open:  # the sizes checked at are said once the file has run at them (checked_note)
        notes.append(
            f"open: batch, {', '.join(axes.open.values())} (traced at {', '.join(_sizes_text(axes.sizes, axes))}); "
            f"set the traced sizes with --shape"
        )
    else:
        notes.append("open: batch; Keras declared every other axis")
    if fixed:
        notes.append("fixed: " + ", ".join(fixed))
    rest = var_positional(model) or "inputs"
    opened, static = ("batch", *axes.open.values()), tuple(axes.fixed.values())
    names = {**{(i, 0): "batch" for i in range(len(args))}, **axes.open}
    return Plan(args, {}, checks, {rest: tuple(per_input)}, notes, None, opened, static, names)


def checked_note(plan: Plan, checked: list[dict[str, list[int]]], names: list[str]) -> Plan:
    """``plan`` with its "open: ... (traced at ...)" note saying the sizes of the open axes the written file
    was run at (``checked``: each shape run, input name -> shape): only those, never a shape the plan held
    that the file's declared range or the model itself left out (three lengths that must be one)."""
    opened = [(i, j) for (i, j) in (plan.axis_names or {}) if j > 0 and i < len(names)]
    if not opened or not checked:
        return plan
    sizes = sorted({tuple(shape[names[i]][j] for i, j in opened) for shape in checked if set(names) <= set(shape)})
    said = "; ".join(", ".join(map(str, c)) for c in sizes)
    notes = [
        n.replace("); set the traced sizes", f"; checked at {said}); set the traced sizes", 1)
        if n.startswith("open: ")
        else n
        for n in plan.notes
    ]
    return replace(plan, notes=notes)


def _sizes_text(sizes: dict, axes: Any) -> list[str]:
    return [f"{name} {sizes[key]}" for key, name in axes.open.items()] or ["the declared shape"]


def _check_samples(model: Any, convention, sample) -> list:
    """Inputs at other shapes than ``sample``'s for checking what was written: another batch, and lengths
    above and below the traced one, odd and even (a recurrent model's fixed length stays)."""
    fixed = _fixed_axes(model)
    keys, queries, batch = sample.sizes["keys"], sample.sizes["queries"], sample.sizes["batch"]
    out = []
    for b, grow in (
        (batch + 1, lambda t: t + 3),
        (1, lambda t: 2 * t + 1),
        (batch, lambda t: max(1, t // 2)),
        (batch + 1, lambda t: t + 1),
    ):
        seq = keys if "keys" in fixed else grow(keys)
        q = queries if "queries" in fixed else grow(queries)
        lengths = [seq] * b
        lengths[-1] = max(1, seq // 2)
        new = convention.sample(
            sample.sizes,
            batch=b,
            seq=seq,
            queries=q,
            lengths=lengths,
            dtype=_float_dtype(sample),
            sizes=sample.sizes,
        )
        out.append(convention.cast(new, device=next(iter(sample.tensors.values())).device))
    return out


def _check_trace_size(model: Any, convention: Any, batch: int, seq: int) -> None:
    """Refuse, before anything is allocated, example inputs this machine cannot hold: the trace's inputs
    and the check's (one larger), drawn in float64, with room left for the forward passes."""
    import math

    from attnzoo.conventions import model_config
    from attnzoo.core.memory import available_bytes

    sizes = convention.sizes_for(model_config(model), batch=batch + 1, seq=seq + 3)
    values = sum(math.prod(sizes[a] for a in slot.axes) for slot in convention.slots)
    need, available = 2 * values * 8, available_bytes()
    if available is not None and need > available // 4:
        raise ConfigError(
            f"tracing at batch {batch} and length {seq} makes example inputs of {need / 2**30:,.1f} GiB, more "
            f"than this machine can spare ({available / 2**30:,.1f} GiB available); the traced sizes only "
            f"shape an example (the batch stays dynamic), so trace with small ones (--batch 2, --seq the length "
            f"your inputs are padded to)"
        )


def _check_keras_size(model: Any, batch: int, sizes: dict, in_band: bool) -> None:
    """Refuse, before the traced inputs are allocated, a batch whose activations this machine cannot hold:
    each layer's outputs are measured at batch 1 (one small forward, hooks on the layers) and scaled to
    ``batch`` (a layer's activations grow with the batch); the error names the largest layer and its size."""
    import math

    import torch

    from attnzoo.core.memory import available_bytes
    from attnzoo.interop.keras_axes import keras_inputs

    available = available_bytes()
    one = keras_inputs(model, 1, sizes, in_band=False)
    per_row = {"the inputs": sum(x.numel() * 8 for x in one)}  # drawn in float64

    def record(key: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            tensors = output if isinstance(output, (list, tuple)) else [output]
            flat = [t for item in tensors for t in (item if isinstance(item, (list, tuple)) else [item])]
            per_row[key] = sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))

        return hook

    handles = [layer.register_forward_hook(record(key)) for key, layer in model.layers.items()]
    try:
        with torch.no_grad():
            eager(model, one, {})
    except (RuntimeError, ValueError):
        return  # the sizes do not fit the model: export says so in its own words
    finally:
        for handle in handles:
            handle.remove()
    need = {key: size * batch for key, size in per_row.items()}
    total = math.fsum(need.values())
    if available is not None and total > available // 2:
        key = max(need, key=lambda k: need[k])
        name = model.keras_names.get(key, key) if key in model.keras_names else key
        raise ConfigError(
            f"export at batch {batch:,}: the forward needs about {total / 2**30:,.1f} GiB for its activations "
            f"(estimated from one row), more than this machine can spare ({available / 2**30:,.1f} GiB "
            f"available); the largest is layer {str(name)[:80]!r} with {need[key] / 2**30:,.1f} GiB. The "
            f"batch stays dynamic in the exported file: trace with a small one (--batch 2)"
        )
