"""Run a written ``.pt2`` or ``.onnx`` file against the eager model at every shape of its plan.

``check_file`` returns the largest difference and the shapes run; it raises an ``ExportError`` at the
first shape where the file differs beyond the tolerance or refuses a shape it declares open, naming (for
a converted Keras model) the first layer whose outputs differ. The tolerance is at the output's scale,
``tolerance * max(1, |y|max)`` of the eager output ``y``, as ``convert-keras --check`` judges a port: a
runtime's float32 sums in another order differ in proportion to the values (onnxruntime's grouped
convolutions put 2.4e-4 on outputs of 1,077, 2e-7 of them), and a wrong graph differs far past that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnzoo.errors import ExportError, extra_import_message
from attnzoo.interop.export_plan import Plan, eager, flat_tensors, input_names
from attnzoo.io.progress import bar

__all__ = ["check_file", "largest_difference", "output_scale", "pt2_runner", "onnx_runner"]


def largest_difference(got: list, want: list) -> float:
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


def output_scale(want: list) -> float:
    """The largest magnitude among the eager outputs ``want`` (0 where they hold nothing)."""
    return max((float(w.double().abs().max()) for w in want if w.numel()), default=0.0)


def pt2_runner(path: Path):
    """A function running the .pt2 file at ``path`` (loaded once) on ``(args, kwargs)``: its tensors."""
    import torch

    module = torch.export.load(str(path)).module()

    def run(args: tuple, kwargs: dict) -> list:
        with torch.no_grad():
            out = module(*args, **kwargs)
        return flat_tensors(out)

    return run


def onnx_runner(path: Path, model: Any):
    """A function running the ONNX file at ``path`` (one onnxruntime session) on ``(args, kwargs)``."""
    import torch

    try:
        import onnxruntime
    except Exception as e:
        raise ExportError(
            extra_import_message("checking an ONNX file needs onnxruntime", "export", e, "onnxruntime")
        ) from None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(args: tuple, kwargs: dict) -> list:
        names = input_names(model, len(args))
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        feed = {}
        for item in session.get_inputs():
            if item.name not in given:
                raise ExportError(f"the ONNX graph wants an input {item.name!r} the model was not given")
            feed[item.name] = given[item.name].detach().cpu().numpy()
        return [torch.from_numpy(o) for o in session.run(None, feed)]

    return run


def _shapes_of(model: Any, args: tuple, kwargs: dict) -> dict[str, list[int]]:
    import torch

    names = input_names(model, len(args))
    shapes = {names[i]: list(a.shape) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    shapes.update({k: list(v.shape) for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
    return shapes


def check_file(model: Any, plan: Plan, run: Any, suffix: str, tolerance: float, trace: Any) -> tuple[float, list]:
    """The written file (``run``) against eager at every shape of the plan: (largest difference, the shapes
    run); an ``ExportError`` at the first shape where it differs or refuses a shape it declares open."""
    checked: list[dict[str, list[int]]] = []
    worst = 0.0
    with bar(len(plan.checks), f"checking the {suffix} file", unit="shape") as shown:
        for check_args, check_kwargs in plan.checks:
            shown.update()
            try:
                want = eager(model, check_args, check_kwargs)
            except (RuntimeError, ValueError):  # a shape the model itself refuses is no promise of the file
                continue
            shapes = _shapes_of(model, check_args, check_kwargs)
            try:
                diff = largest_difference(run(check_args, check_kwargs), want)
            except ExportError as e:
                layer = _first_differing_layer(model, plan, check_args, tolerance, trace)
                raise ExportError(f"{e} (at {_shape_words(shapes)}){layer}; nothing was written") from None
            except Exception as e:  # noqa: BLE001 - the runtime refused a shape the file declares open
                raise ExportError(
                    f"the exported {suffix} file refuses {_shape_words(shapes)}, a shape it declares open: "
                    f"{type(e).__name__}: {' '.join(str(e).split())[:200]}; nothing was written"
                ) from None
            checked.append(shapes)
            scale = output_scale(want)
            if not diff <= tolerance * max(1.0, scale):
                layer = _first_differing_layer(model, plan, check_args, tolerance, trace)
                raise ExportError(
                    f"the exported {suffix} file differs from the model by {diff:.3g} at {_shape_words(shapes)} "
                    f"(tolerance {tolerance:g} x max(1, {scale:.3g}), the outputs' largest magnitude){layer}; "
                    f"nothing was written"
                )
            worst = max(worst, diff)
    return worst, checked


def _shape_words(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} {v}" for k, v in shapes.items())


def _first_differing_layer(model: Any, plan: Plan, args: tuple, tolerance: float, trace: Any) -> str:
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
        program = trace(every, plan.args, {}, plan.dynamic_shapes)
        with torch.no_grad():
            got, values = program.module()(*args), model.trace(*args)
        owners = [c["layer"] for c in calls for v in values[c["id"]] if isinstance(v, torch.Tensor)]
        want = [v for c in calls for v in values[c["id"]] if isinstance(v, torch.Tensor)]
        for owner, g, w in zip(owners, got, want, strict=False):
            allowed = tolerance * max(1.0, output_scale([w]))
            if g.shape != w.shape or (w.numel() and float((g.double() - w.double()).abs().max()) > allowed):
                name, kind = model.keras_names.get(owner, owner), model.keras_classes.get(owner)
                return f"; the first layer that differs: {name} ({kind})"
    except Exception:  # noqa: BLE001 - naming the layer is a courtesy; the refusal stands without it
        return ""
    return ""
