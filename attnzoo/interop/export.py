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
import io
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError, ExportError, extra_import_message, without_colour
from attnzoo.interop.export_axes import settle
from attnzoo.interop.export_check import check_file, onnx_runner, pt2_runner
from attnzoo.interop.export_plan import (
    checked_note,
    convention_of,
    flat_tensors,
    input_names,
    make_plan,
    output_paths,
    var_positional,
)

__all__ = [
    "export",
    "ExportResult",
    "ExportError",
    "FORMATS",
    "deployment_metadata",
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


def _output_names(convention, count: int, return_attention: bool) -> list[str] | None:
    """``logits`` for a model that classifies, ``output`` otherwise, then ``attention``; None when the model
    returns something else than one tensor (and its weights)."""
    if count != 1 + bool(return_attention):
        return None
    first = "logits" if convention.name.endswith("_labels") or convention.name == "tokens_to_tokens" else "output"
    return [first, "attention"][:count]


def _names_of_outputs(model, convention, raw, count: int, return_attention: bool) -> list[str] | None:
    """The ONNX output names: a converted Keras model's (its output layers, or its dict's keys), a dict's
    keys, or the convention's ``logits`` / ``output`` (and ``attention``); None where none fits."""
    if hasattr(model, "inputs_spec") and hasattr(model, "output_structure"):
        from attnzoo.interop.keras_axes import keras_output_names

        names = keras_output_names(model)
    else:
        names = output_paths(raw) or (
            None if convention is None else _output_names(convention, count, return_attention)
        )
    if names is None or len(names) != count or len(set(names)) != count:
        return None
    return names


def _axes_by_input(model, plan) -> dict[str, dict[int, str]]:
    """The plan's named open axes (a converted Keras model's), by the name of the input that has them."""
    if not plan.axis_names:
        return {}
    names = input_names(model, len(plan.args))
    out: dict[str, dict[int, str]] = {}
    for (i, j), name in plan.axis_names.items():
        out.setdefault(names[i], {})[j] = name
    return out


def _write(tmp: str, path: Path, write) -> None:
    """Run ``write`` (into the temporary file beside ``path``); a failed write is an ExportError."""
    try:
        write()
    except OSError as e:
        raise ExportError(
            f"cannot write {path}: {e.strerror or e} (is the disk full?); nothing was written, any file already "
            f"at {path.name} is unchanged"
        ) from None


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
    """The ways of tracing the model with ``torch.export``, in the order to try them, each as ``(program,
    the dynamic_shapes it was traced with, its GuardLog or None)``. Open axes are first traced with sizes
    treated as never 1 (``backed_size_oblivious``): a plain trace fixes every size-1 test of an
    intermediate length (a strided convolution's output) to its traced answer and refuses the open axis.
    That trace may assume a size is not 1 (the .pt2 file then asserts it, an ONNX file cannot), so where
    its file fails the checks the plain trace is tried; where torch refuses named open axes, they are
    traced again as ``Dim.AUTO`` (torch derives their ranges; :mod:`attnzoo.interop.export_axes` says
    what it fixed and why). Every file must pass every check."""
    import torch

    from attnzoo.interop.export_axes import GuardLog, auto_shapes, fix_axes

    attempts = [(True, False), (False, False)] if dynamic_shapes is not None else [(False, False)]
    if dynamic_shapes is not None and getattr(model, "layers", None) is not None and hasattr(model, "keras_names"):
        attempts += [(False, True), (True, True)]
    reason, traced = None, False
    for oblivious, auto in attempts:
        shapes = auto_shapes(dynamic_shapes) if auto else dynamic_shapes
        # dynamo's caches from earlier traces in this process (a scan step traced by other exports) can
        # make it fix an open length; export starts from a clean slate (compiled functions recompile)
        torch._dynamo.reset()
        try:
            # a converted RNN's scan step is traced by dynamo once per export: past its recompile limit (8
            # exports in one process) dynamo would stop tracing it and the length would be fixed
            with (
                torch.fx.experimental._config.patch(backed_size_oblivious=oblivious),
                torch._dynamo.config.patch(recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20),
                GuardLog(model) if auto else contextlib.nullcontext() as log,
            ):
                program = torch.export.export(model, args, kwargs, dynamic_shapes=shapes)
                if auto and (fix := log.must_fix()):  # an axis tied to one size: traced at it, the rest open
                    shapes = fix_axes(shapes, fix)
                    torch._dynamo.reset()
                    first, log = log, GuardLog(model)
                    with log:
                        program = torch.export.export(model, args, kwargs, dynamic_shapes=shapes)
                    log.fixed_by, log.first_symbols = fix, first.symbols
        except Exception as e:  # noqa: BLE001 - torch's reasons are many; one line says which
            reason = reason or e
            continue
        traced = True
        yield program, shapes, log
    if not traced:
        raise ExportError(f"torch.export could not trace the model: {_reason_words(model, reason)}") from reason


def _reason_words(model, error) -> str:
    """torch's reason in one line, the Keras layer where it was raised, and the guards a refused open axis
    broke (torch's "Not all values of height ... satisfy the generated guard 3 <= ...")."""
    from attnzoo.interop.export_axes import layer_of_error

    text = torch_reason(error)
    layer = layer_of_error(model, error)
    guards = [
        " ".join(line.split())
        for line in without_colour(str(error)).splitlines()
        if "Not all values of" in line or "must be specialized" in line
    ]
    if guards:
        text += "; torch's guards: " + "; ".join(g[:240] for g in guards[:4])
    return text + (f" (in layer {layer})" if layer else "")


def _program(model, args, kwargs, dynamic_shapes):
    """The first program :func:`_programs` traces (for naming a differing layer)."""
    return next(iter(_programs(model, args, kwargs, dynamic_shapes)))[0]


def _name_inputs(program, names: list[str]) -> None:
    """The traced program's user inputs renamed after the model's (a converted Keras model's ``ids``, not
    ``inputs_0``), so the .pt2's input spec says them; a name that is not a Python identifier, or that
    another node of the graph has, keeps torch's."""
    import keyword

    from torch.export.graph_signature import InputKind

    user = [spec for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    taken = {node.name for node in program.graph.nodes}
    rename = {}
    for spec, name in zip(user, names, strict=False):
        old = getattr(spec.arg, "name", None)
        if old and name != old and name.isidentifier() and not keyword.iskeyword(name) and name not in taken:
            rename[old] = name
            taken.add(name)
    if not rename:
        return
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in rename:
            node.name = node.target = rename[node.name]
    for spec in user:
        spec.arg.name = rename.get(spec.arg.name, spec.arg.name)
    program.graph_module.recompile()


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
    except Exception as e:
        raise ExportError(
            extra_import_message("ONNX export needs onnx and onnxscript", "export", e, "onnx", "onnxscript")
        ) from None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message=".*axis name.*")  # the exporter's naming notes
            named = {}
            if var_positional(model) is not None:  # name the *inputs as the model names them
                named["input_names"] = input_names(model, len(args))
            if output_names is not None:
                named["output_names"] = output_names
            return torch.onnx.export(program, (), dynamo=True, verbose=False, **named)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"the ONNX exporter could not convert the model: {torch_reason(e)}") from e


def _write_onnx(onnx_program, metadata, tmp: str, path: Path, axes: dict[str, dict[int, str]]) -> None:
    """The ONNX program into ``tmp``, the metadata as ``metadata_props``, the open axes named by ``axes``
    (input name -> {axis: name}) instead of torch's symbols."""
    _write(tmp, path, lambda: onnx_program.save(tmp))
    if metadata or axes:
        import onnx

        graph = onnx.load(tmp)
        for key, value in metadata.items():
            entry = graph.metadata_props.add()
            entry.key, entry.value = key, value
        _name_axes(graph.graph, axes)
        _write(tmp, path, lambda: onnx.save(graph, tmp))


def _name_axes(graph, axes: dict[str, dict[int, str]]) -> None:
    """Each symbol torch gave an open axis of an input (``s21``) renamed to the axis's name (``batch``,
    ``length``) wherever a shape in the graph uses it (``((s21 + 1)//2)`` becomes ``((length + 1)//2)``)."""
    import re

    rename: dict[str, str] = {}
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        for j, name in axes.get(value.name, {}).items():
            if j < len(dims) and dims[j].dim_param and not dims[j].dim_param.isdigit():
                rename.setdefault(dims[j].dim_param, name)
    if not rename:
        return
    symbol = re.compile(r"\b(" + "|".join(map(re.escape, sorted(rename, key=len, reverse=True))) + r")\b")

    def walk(g) -> None:
        for value in (*g.input, *g.output, *g.value_info):
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param:
                    dim.dim_param = symbol.sub(lambda m: rename[m.group(1)], dim.dim_param)
        for node in g.node:
            for attribute in node.attribute:
                for inner in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                    walk(inner)

    walk(graph)


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
        tolerance: the largest difference from the eager model the check accepts at every checked shape,
            relative to the outputs' scale: ``tolerance * max(1, |y|max)`` of the eager outputs ``y``.
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


def _export(model, path, inputs, dynamic, return_attention, tolerance, batch, seq, shape) -> ExportResult:
    """:func:`export` with the arguments checked, the model in eval mode."""
    import torch
    from torch.nn.parameter import is_lazy

    convention = None if inputs is not None else convention_of(model)
    plan = make_plan(model, convention, inputs, path.suffix, dynamic, return_attention, batch, seq, shape)
    args, kwargs = plan.args, plan.kwargs
    try:
        with torch.no_grad():
            raw = model(*args, **kwargs)  # lazy sizes are fixed by one eager call
        traced_outputs = flat_tensors(raw)
    except (RuntimeError, MemoryError, ValueError, TypeError) as e:
        shapes = ", ".join(f"{list(a.shape)}" for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        keras = inputs is None and hasattr(model, "keras_names")  # a converted Keras model's sizes are seq, shape
        advice = (
            "trace at sizes it takes (seq=, shape=; --seq, --shape)"
            if keras
            else "pass inputs=(args, kwargs) that it takes"
        )
        raise _allocation_error(e) or ExportError(
            f"the model fails on the inputs export traces it with ({shapes}): {type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}; {advice}"
        ) from None
    metadata = deployment_metadata(model, plan.length)
    output_names = _names_of_outputs(model, convention, raw, len(traced_outputs), return_attention)
    lazy = [n for n, p in model.named_parameters() if is_lazy(p)]
    if lazy:
        raise ExportError(f"{', '.join(lazy[:3])} still have no size; run the model once or give its sizes")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        refusal = None
        for program, shapes, log in _programs(model, args, kwargs, plan.dynamic_shapes):
            traced = settle(replace(plan, dynamic_shapes=shapes), program, model, log) if log else plan
            # a size past a bound fails inside an ONNX runtime: the file carries the bounds for the caller to check
            carried = {**metadata, **({"attnzoo.axis_bounds": json.dumps(traced.bounds)} if traced.bounds else {})}
            if var_positional(model) is not None:  # forward(*inputs): torch names them inputs_0, ...
                _name_inputs(program, input_names(model, len(args)))
            try:
                if path.suffix == ".pt2":
                    _write_pt2(program, carried, tmp, path)
                    run = pt2_runner(Path(tmp))
                else:
                    onnx_program = _onnx_program(model, program, args, output_names)
                    _write_onnx(onnx_program, carried, tmp, path, _axes_by_input(model, traced))
                    run = onnx_runner(Path(tmp), model)
                worst, checked = check_file(model, traced, run, path.suffix, tolerance, _program)
                plan = checked_note(traced, checked, input_names(model, len(args)))
                metadata = carried
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
