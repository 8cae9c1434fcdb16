"""Export a model for deployment: ``torch.export`` (``.pt2``) or ONNX (``.onnx``), checked after writing.

    attnzoo.export(model, "model.onnx")                  # inputs from the model's calling convention
    attnzoo export laat num_labels=50 hidden_size=64 -o laat.pt2

The batch and sequence axes are dynamic (the ``batch``, ``keys`` and ``queries`` axes of the
convention's input slots), and masks are inputs of the graph. After writing, the file is loaded back
(``torch.export.load``, or an onnxruntime session) and run on inputs of another batch size and length
than the export used; the largest difference from the eager model is returned in the
:class:`ExportResult` and must stay within ``tolerance``, or the file is removed and an
``ExportError`` says by how much it missed. ONNX goes through the dynamo exporter
(``torch.onnx.export(..., dynamo=True)``), which needs ``onnx`` and ``onnxscript``; checking it needs
``onnxruntime``: ``pip install 'attnzoo[export]'``.

In a traced graph the checks that read tensor values on the host (token ids in range, right padding)
are not run; shape checks are. The recurrent models read their sequences through a traceable form of
packing (see ``models/text.py``).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnzoo.core import model_info
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError, ExportError, without_colour

__all__ = [
    "export",
    "ExportResult",
    "ExportError",
    "FORMATS",
    "deployment_metadata",
    "fixed_length",
    "torch_reason",
]

FORMATS = (".pt2", ".onnx")


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` wrote and how well the file reproduces the eager model on new shapes."""

    path: Path
    format: str
    max_abs_diff: float
    checked_on: dict[str, list[int]]  # input name -> shape of the check inputs
    static_axes: tuple[str, ...] = ()  # axes fixed at their traced size (a recurrent model's sequence)
    metadata: dict[str, str] | None = None  # what the file carries besides the graph (labels, tokenizer, ...)
    notes: tuple[str, ...] = ()  # choices export made that the user should know (a length taken from the run)
    open_axes: tuple[str, ...] = ()  # axes the file takes at any size (each checked at several sizes)
    checked_shapes: tuple[dict[str, list[int]], ...] = ()  # every shape the file was run at against eager

    def __fspath__(self) -> str:
        return str(self.path)


def deployment_metadata(model: Any, length: int | None = None) -> dict[str, str]:
    """What an exported file needs to be used alone, as strings (ONNX ``metadata_props``, the .pt2's extra
    files): ``attnzoo.name``; for a trained text model also ``labels`` (a JSON list of label ids, in output
    order), ``output`` (multilabel, multiclass), ``threshold`` (multi-label decisions) and ``tokenizer``
    (JSON settings for ``attnzoo.io.text.Tokenizer.from_settings``; with ``length``, the one sequence length
    the exported graph takes, its tokenizer pads every row to it)."""
    import json

    out: dict[str, str] = {}
    info = getattr(model, "attnzoo_config", None)
    if isinstance(info, Mapping) and "name" in info:
        out["attnzoo.name"] = str(info["name"])
    record = RunRecord.of(model)
    if record.labels:
        out["labels"] = json.dumps(list(record.labels))
    if record.output:
        out["output"] = record.output
    if record.output == "multilabel" and record.threshold is not None:
        out["threshold"] = repr(float(record.threshold))
    tokenizer = record.tokenizer(length)
    if tokenizer is not None:
        out["tokenizer"] = json.dumps(tokenizer.settings())
    return out


def _run_max_len(model: Any) -> int | None:
    record = RunRecord.of(model)
    return record.max_len if "max_len" in record.task_config else None


def fixed_length(model: Any) -> int | None:
    """The one sequence length ``export(model, path)`` gives the exported graph by default: a recurrent
    model's (torch.export fixes an LSTM's time axis) is its run's ``max_len``, or the convention's example
    length where the run records none; None where the graph takes any length."""
    if not _fixed_axes(model):
        return None
    return _run_max_len(model) or _convention_of(model).seq


def _output_names(convention, count: int, return_attention: bool) -> list[str] | None:
    """``logits`` for a model that classifies, ``output`` otherwise, then ``attention``; None when the model
    returns something else than one tensor (and its weights)."""
    if count != 1 + bool(return_attention):
        return None
    first = "logits" if convention.name.endswith("_labels") or convention.name == "tokens_to_tokens" else "output"
    return [first, "attention"][:count]


def _convention_of(model: Any):
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


def _input_names(model: Any, count: int) -> list[str]:
    """The names of ``count`` positional inputs: forward's parameters, then a model's own
    ``input_names`` (a converted Keras model names its inputs as Keras did) or ``args_<i>``."""
    names = _parameter_names(model)
    if count <= len(names):
        return names[:count]
    own = getattr(model, "input_names", None)
    if isinstance(own, (list, tuple)) and len(own) == count and all(isinstance(n, str) for n in own):
        return list(own)
    rest = _var_positional(model) or "args"
    return [*names, *(f"{rest}_{i}" for i in range(count - len(names)))]


def _var_positional(model: Any) -> str | None:
    """The name of ``forward``'s ``*args`` parameter, if it has one (a converted Keras model's inputs)."""
    for n, p in inspect.signature(model.forward).parameters.items():
        if p.kind is p.VAR_POSITIONAL:
            return n
    return None


def _fixed_axes(model: Any) -> tuple[str, ...]:
    """Axes that must keep their traced size: torch.export specialises an ``nn.LSTM`` / ``nn.GRU``'s time
    axis, so a model that holds one exports with its sequence lengths fixed (the batch stays dynamic)."""
    from torch import nn

    # a converted Keras RNN traces its steps through scan, which keeps the length open
    scanned = {id(m.rnn) for m in model.modules() if getattr(m, "traces_any_length", False)}
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
    rest = _var_positional(model)
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


def _write(tmp: str, path: Path, write) -> None:
    """Run ``write`` (into the temporary file beside ``path``); a failed write is an ExportError."""
    try:
        write()
    except OSError as e:
        raise ExportError(
            f"cannot write {path}: {e.strerror or e} (is the disk full?); nothing was written, any file already "
            f"at {path.name} is unchanged"
        ) from None


def _eager(model: Any, args: tuple, kwargs: dict) -> list:
    import torch

    with torch.no_grad():
        out = model(*args, **kwargs)
    return [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]


def _diff(got: list, want: list) -> float:
    if len(got) != len(want):
        raise ExportError(f"the exported graph returns {len(got)} tensors, the model {len(want)}")
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if tuple(g.shape) != tuple(w.shape):
            raise ExportError(
                f"the exported graph returns shape {list(g.shape)} where the model returns {list(w.shape)}"
            )
        if w.numel():
            worst = max(worst, float((g.double() - w.double()).abs().max()))
    return worst


def _pt2_runner(path: Path):
    """A function running the .pt2 file at ``path`` (loaded once) on ``(args, kwargs)``: its tensors."""
    import torch

    module = torch.export.load(str(path)).module()

    def run(args: tuple, kwargs: dict) -> list:
        with torch.no_grad():
            out = module(*args, **kwargs)
        return [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]

    return run


def _onnx_runner(path: Path, model: Any):
    """A function running the ONNX file at ``path`` (one onnxruntime session) on ``(args, kwargs)``."""
    import torch

    try:
        import onnxruntime
    except ImportError:
        raise ExportError("checking an ONNX file needs onnxruntime: pip install 'attnzoo[export]'") from None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(args: tuple, kwargs: dict) -> list:
        names = _input_names(model, len(args))
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        feed = {}
        for item in session.get_inputs():
            if item.name not in given:
                raise ExportError(f"the ONNX graph wants an input {item.name!r} the model was not given")
            feed[item.name] = given[item.name].detach().cpu().numpy()
        return [torch.from_numpy(o) for o in session.run(None, feed)]

    return run


@dataclass
class _Plan:
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


def _plan(
    model: Any,
    convention: Any,
    inputs: tuple[tuple, dict] | None,
    suffix: str,
    dynamic: bool,
    return_attention: bool,
    batch: int,
    seq: int | None,
    shape: tuple[int, ...] | None,
) -> _Plan:
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


def _given_plan(model: Any, inputs: tuple[tuple, dict]) -> _Plan:
    """``inputs=(args, kwargs)``: the graph takes exactly their shapes, every axis fixed, batch included."""
    import torch

    args, kwargs = inputs
    names = _input_names(model, len(args))
    tensors = [*zip(names, args, strict=False), *kwargs.items()]
    fixed = tuple(f"{n}[{d}]" for n, t in tensors if isinstance(t, torch.Tensor) for d in range(t.dim()))
    shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in tensors if isinstance(t, torch.Tensor))
    notes = [f"inputs= given: the file takes exactly these shapes ({shapes}), every axis fixed, batch included"]
    return _Plan(args, kwargs, [(args, kwargs)], None, notes, None, (), fixed)


def _convention_plan(model, convention, suffix, dynamic, return_attention, batch, seq) -> _Plan:
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
    return _Plan(args, kwargs, checks, dynamic_shapes, notes, traced, opened, static)


def _keras_plan(model, suffix, dynamic, batch, seq, shape) -> _Plan:
    """A converted Keras model: every axis Keras left open stays open (each input's own), a declared size
    stays fixed; checked at several sizes per open axis (:mod:`attnzoo.interop.keras_axes`)."""
    from torch.export import Dim

    from attnzoo.conventions import get_convention, model_config
    from attnzoo.interop.keras_axes import check_shapes, keras_axes, keras_inputs

    in_band = get_convention("keras_inputs").for_config(model_config(model)).in_band
    # with no size given, the default sizes; where the model refuses them (a position embedding of 8
    # steps, valid convolutions that need more), smaller or larger ones, as the model takes
    for scale in (1.0,) if shape is not None or seq is not None else (1.0, 0.5, 0.25, 2.0, 4.0, 8.0):
        axes = keras_axes(model, shape=shape, seq=seq, scale=scale)
        args = keras_inputs(model, batch, axes.sizes, in_band=in_band)
        try:
            _eager(model, args, {})
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
        return _Plan(args, {}, [(args, {})], None, notes, None, (), static)
    batch_dim = Dim("batch", min=1)
    per_input = []
    for i in range(len(args)):
        dims = {0: batch_dim}
        for (k, j), name in axes.open.items():
            if k == i:
                dims[j] = Dim("".join(c if c.isalnum() else "_" for c in name) or f"in{i}_{j}", min=1)
        per_input.append(dims)
    checks = [
        (keras_inputs(model, b, sizes, in_band=in_band, seed=n), {})
        for n, (b, sizes) in enumerate(check_shapes(axes, batch))
    ]
    checked = sorted({tuple(c[0][i].shape[j] for (i, j) in axes.open) for c in checks})
    notes = []
    if axes.open:
        notes.append(
            f"open: batch, {', '.join(axes.open.values())} (traced at {', '.join(_sizes_text(axes.sizes, axes))}; "
            f"checked at {'; '.join(', '.join(map(str, c)) for c in checked)}); set the traced sizes with --shape"
        )
    else:
        notes.append("open: batch; Keras declared every other axis")
    if fixed:
        notes.append("fixed: " + ", ".join(fixed))
    rest = _var_positional(model) or "inputs"
    opened, static = ("batch", *axes.open.values()), tuple(axes.fixed.values())
    return _Plan(args, {}, checks, {rest: tuple(per_input)}, notes, None, opened, static)


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


def _allocation_error(error: BaseException) -> ExportError | None:
    """torch's refusal to allocate (a forward at the traced sizes needs more memory than there is), said
    as what to change; None for any other error."""
    import torch

    text = " ".join(str(error).split())
    if isinstance(error, torch.OutOfMemoryError) or (isinstance(error, RuntimeError) and "allocate" in text):
        return ExportError(
            f"running the model at the traced sizes needs more memory than this machine has ({text[:160]}); "
            f"trace with a smaller --batch or --seq: the batch stays dynamic in the exported file"
        )
    return None


def torch_reason(error: BaseException, limit: int = 300) -> str:
    """Why torch could not export, in one line short enough for the command's error: the innermost cause
    (the ONNX exporter wraps torch.export's error in paragraphs of its own advice), its first line, and
    the line of the model's code that raised it, without terminal colour codes."""
    cause = error
    for _ in range(8):  # bounded: a cause chain can be built to loop
        if cause.__cause__ is None:
            break
        cause = cause.__cause__
    lines = [line.strip() for line in without_colour(str(cause)).splitlines() if line.strip()]
    if "## Exception summary" in lines:  # the ONNX exporter's own report: the summary follows its heading
        lines = lines[lines.index("## Exception summary") + 1 :]
    summary = " ".join(lines[0].split()) if lines else ""
    at = next((i for i, line in enumerate(lines) if line.startswith("The following call raised this error")), None)
    where = " ".join(" ".join(lines[at + 1 : at + 3]).split()) if at is not None else ""
    text = f"{type(cause).__name__}: {summary[:limit]}"
    return text + (f" (raised at {where[:200]})" if where else "")


def _programs(model, args, kwargs, dynamic_shapes):
    """The ways of tracing the model with ``torch.export``, in the order to try them. Open axes are first
    traced with sizes treated as never 1 (``backed_size_oblivious``): a plain trace fixes every size-1
    test of an intermediate length (a strided convolution's output) to its traced answer and refuses the
    open axis. That trace may assume a size is not 1 (the .pt2 file then asserts it, an ONNX file cannot),
    so where its file fails the checks the plain trace is tried; either must pass every check."""
    import torch

    attempts = [True, False] if dynamic_shapes is not None else [False]
    reason, traced = None, False
    for oblivious in attempts:
        # dynamo's caches from earlier traces in this process (a scan step traced by other exports) can
        # make it fix an open length; export starts from a clean slate (compiled functions recompile)
        torch._dynamo.reset()
        try:
            # a converted RNN's scan step is traced by dynamo once per export: past its recompile limit (8
            # exports in one process) dynamo would stop tracing it and the length would be fixed
            with (
                torch.fx.experimental._config.patch(backed_size_oblivious=oblivious),
                torch._dynamo.config.patch(recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20),
            ):
                program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
        except Exception as e:  # noqa: BLE001 - torch's reasons are many; one line says which
            reason = reason or e
            continue
        traced = True
        yield program
    if not traced:
        raise ExportError(f"torch.export could not trace the model: {torch_reason(reason)}") from None


def _program(model, args, kwargs, dynamic_shapes):
    """The first program :func:`_programs` traces (for naming a differing layer)."""
    return next(iter(_programs(model, args, kwargs, dynamic_shapes)))


def _write_pt2(program, metadata, tmp: str, path: Path) -> None:
    """The traced program into ``tmp`` with the metadata as extra files."""
    import torch

    # saved into memory first: torch's zip writer aborts the process when a write fails (a full disk)
    buffer = io.BytesIO()
    torch.export.save(program, buffer, extra_files=metadata)
    _write(tmp, path, lambda: Path(tmp).write_bytes(buffer.getvalue()))


def _onnx_program(model, program, args, output_names):
    """The traced program through the dynamo ONNX exporter (never its fallbacks, which fix or drop the
    shapes torch.export refused), inputs named as the model names them."""
    import torch

    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise ExportError("ONNX export needs onnx and onnxscript: pip install 'attnzoo[export]'") from None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message=".*axis name.*")  # the exporter's naming notes
            named = {}
            if _var_positional(model) is not None:  # name the *inputs as the model names them
                named["input_names"] = _input_names(model, len(args))
            if output_names is not None:
                named["output_names"] = output_names
            return torch.onnx.export(program, (), dynamo=True, verbose=False, **named)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"the ONNX exporter could not convert the model: {torch_reason(e)}") from None


def _write_onnx(onnx_program, metadata, tmp: str, path: Path) -> None:
    """The ONNX program into ``tmp``, the metadata as ``metadata_props``."""
    _write(tmp, path, lambda: onnx_program.save(tmp))
    if metadata:
        import onnx

        graph = onnx.load(tmp)
        for key, value in metadata.items():
            entry = graph.metadata_props.add()
            entry.key, entry.value = key, value
        _write(tmp, path, lambda: onnx.save(graph, tmp))


def export(
    model: Any,
    path: str | Path,
    *,
    inputs: tuple[tuple, dict] | None = None,
    dynamic: bool = True,
    return_attention: bool = False,
    tolerance: float = 1e-4,
    overwrite: bool = False,
    batch: int = 2,
    seq: int | None = None,
    shape: tuple[int, ...] | None = None,
) -> ExportResult:
    """Export ``model`` to ``path`` (``.pt2``: torch.export; ``.onnx``: the dynamo ONNX exporter) and check it.

    Args:
        model: a module built by ``attnzoo.create`` or ``attnzoo.load`` (its card's convention gives the
            inputs), or any module together with ``inputs``.
        path: the file to write; never replaced unless ``overwrite=True``.
        inputs: ``(args, kwargs)`` to trace with (default: built from the convention). With ``inputs``,
            every axis is fixed at their shapes (``static_axes`` names them) and the check reuses them.
        dynamic: batch and sequence axes dynamic (the convention's ``batch``, ``keys``, ``queries``; for a
            converted Keras model, every axis its Keras inputs left open).
        return_attention: export the attention weights as an extra output.
        tolerance: the largest difference from the eager model the check accepts, at every checked shape.
        batch, seq: the shapes to trace with (default 2 and the convention's length); a recurrent model
            keeps ``seq`` fixed, so give the length its inputs will be padded to.
        shape: the traced sizes of the open axes (a converted Keras model's first input: ``(H, W)`` for an
            image, ``(T,)`` for a sequence); they stay open.

    The file is run at several shapes per open axis (odd and even, below and above the traced size) and
    compared with the eager model; at any difference above ``tolerance`` it is deleted and an
    ``ExportError`` says at which shape (and, for a converted Keras model, the first layer that differs).

    Returns an :class:`ExportResult` (path, format, max_abs_diff, the shapes it was checked on, the open
    and fixed axes).
    """
    from attnzoo.io.folders import as_path

    path = as_path(path, "export(model, path) (an .onnx or .pt2 file to write)")
    for name, value in (("batch", batch), ("seq", seq)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"export: {name} must be a positive whole number, got {value!r:.40}")
    if shape is not None:
        shape = tuple(shape)
        if not shape or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape):
            raise ConfigError(f"export: shape must be positive whole numbers (H, W or T), got {shape!r:.60}")
    if path.suffix not in FORMATS:
        raise ConfigError(f"export writes .pt2 (torch.export) or .onnx files, got {path.name!r}")
    if path.is_dir():  # even with overwrite: a folder is never replaced by a file
        raise ExportError(f"{path} is a folder; give the file to write (e.g. {path / ('model' + path.suffix)})")
    if path.exists() and not overwrite:
        raise ExportError(f"{path} already exists; pass overwrite=True (or --overwrite) to replace it")
    if not path.parent.is_dir():
        raise ExportError(f"cannot write {path}: the folder {path.parent} does not exist")
    from attnzoo.layers.modes import kept_modes

    with kept_modes(model):  # traced in eval mode; the caller's modes (and grad state) come back
        model.eval()
        return _export(model, path, inputs, dynamic, return_attention, tolerance, batch, seq, shape)


def _shapes_of(model: Any, args: tuple, kwargs: dict) -> dict[str, list[int]]:
    import torch

    names = _input_names(model, len(args))
    shapes = {names[i]: list(a.shape) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    shapes.update({k: list(v.shape) for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
    return shapes


def _export(model, path, inputs, dynamic, return_attention, tolerance, batch, seq, shape) -> ExportResult:
    """:func:`export` with the arguments checked, the model in eval mode."""
    import torch
    from torch.nn.parameter import is_lazy

    convention = None if inputs is not None else _convention_of(model)
    plan = _plan(model, convention, inputs, path.suffix, dynamic, return_attention, batch, seq, shape)
    args, kwargs = plan.args, plan.kwargs
    try:
        traced_outputs = _eager(model, args, kwargs)  # lazy sizes are fixed by one eager call
    except (RuntimeError, MemoryError, ValueError, TypeError) as e:
        shapes = ", ".join(f"{list(a.shape)}" for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        raise _allocation_error(e) or ExportError(
            f"the model fails on the inputs export traces it with ({shapes}): {type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}; pass inputs=(args, kwargs) that it takes"
        ) from None
    metadata = deployment_metadata(model, plan.length)
    output_names = None if convention is None else _output_names(convention, len(traced_outputs), return_attention)
    lazy = [n for n, p in model.named_parameters() if is_lazy(p)]
    if lazy:
        raise ExportError(f"{', '.join(lazy[:3])} still have no size; run the model once or give its sizes")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        refusal = None
        for program in _programs(model, args, kwargs, plan.dynamic_shapes):
            try:
                if path.suffix == ".pt2":
                    _write_pt2(program, metadata, tmp, path)
                    run = _pt2_runner(Path(tmp))
                else:
                    _write_onnx(_onnx_program(model, program, args, output_names), metadata, tmp, path)
                    run = _onnx_runner(Path(tmp), model)
                worst, checked = _check_file(model, plan, run, path.suffix, tolerance)
                break
            except ExportError as e:  # the next way of tracing may keep the axes open and be right
                refusal = refusal or e
        else:
            raise refusal or ExportError("torch.export could not trace the model")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    first = checked[1] if len(checked) > 1 and inputs is None and convention.name == "keras_inputs" else checked[0]
    return ExportResult(
        path,
        path.suffix[1:],
        worst,
        first,
        plan.static_axes,
        metadata,
        tuple(plan.notes),
        plan.open_axes,
        tuple(checked),
    )


def _check_file(model: Any, plan: _Plan, run: Any, suffix: str, tolerance: float) -> tuple[float, list]:
    """The written file (``run``) against eager at every shape of the plan: (largest difference, the shapes
    run); an ``ExportError`` at the first shape where it differs or refuses a shape it declares open."""
    checked: list[dict[str, list[int]]] = []
    worst = 0.0
    for check_args, check_kwargs in plan.checks:
        try:
            want = _eager(model, check_args, check_kwargs)
        except (RuntimeError, ValueError):  # a shape the model itself refuses is no promise of the file
            continue
        shapes = _shapes_of(model, check_args, check_kwargs)
        try:
            diff = _diff(run(check_args, check_kwargs), want)
        except ExportError as e:
            layer = _first_differing_layer(model, plan, check_args, tolerance)
            raise ExportError(f"{e} (at {_shape_words(shapes)}){layer}; nothing was written") from None
        except Exception as e:  # noqa: BLE001 - the runtime refused a shape the file declares open
            raise ExportError(
                f"the exported {suffix} file refuses {_shape_words(shapes)}, a shape it declares open: "
                f"{type(e).__name__}: {' '.join(str(e).split())[:200]}; nothing was written"
            ) from None
        checked.append(shapes)
        if not diff <= tolerance:
            layer = _first_differing_layer(model, plan, check_args, tolerance)
            raise ExportError(
                f"the exported {suffix} file differs from the model by {diff:.3g} at {_shape_words(shapes)} "
                f"(tolerance {tolerance:g}){layer}; nothing was written"
            )
        worst = max(worst, diff)
    return worst, checked


def _shape_words(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} {v}" for k, v in shapes.items())


def _first_differing_layer(model: Any, plan: _Plan, args: tuple, tolerance: float) -> str:
    """``; first differing layer: NAME (CLASS)`` for a converted Keras model: every call's outputs traced
    as one more program (torch.export, with the same open axes) and compared with eager at the failing
    shape; empty where that cannot be told (the difference is the ONNX exporter's alone, say)."""
    import torch

    if not hasattr(model, "trace") or not hasattr(model, "keras_names"):
        return ""
    calls = [c for c in model.calls if c.get("layer") is not None]

    class _Every(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> tuple:
            values = self.inner.trace(*inputs)
            return tuple(v.clone() for c in calls for v in values[c["id"]] if isinstance(v, torch.Tensor))

    try:
        every = _Every(model)
        program = _program(every, plan.args, {}, plan.dynamic_shapes)
        with torch.no_grad():
            got, values = program.module()(*args), model.trace(*args)
        owners = [c["layer"] for c in calls for v in values[c["id"]] if isinstance(v, torch.Tensor)]
        want = [v for c in calls for v in values[c["id"]] if isinstance(v, torch.Tensor)]
        for owner, g, w in zip(owners, got, want, strict=False):
            if g.shape != w.shape or (w.numel() and float((g.double() - w.double()).abs().max()) > tolerance):
                name, kind = model.keras_names.get(owner, owner), model.keras_classes.get(owner)
                return f"; the first layer that differs: {name} ({kind})"
    except Exception:  # noqa: BLE001 - naming the layer is a courtesy; the refusal stands without it
        return ""
    return ""
