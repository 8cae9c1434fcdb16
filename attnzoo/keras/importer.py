"""``load_keras_weights``: put a Keras layer's trained weights into the matching attnzoo layer.

The attnzoo layer declares its Keras layout (``keras_layout()``: parameter, keras 3 path, legacy name,
conversion). The file's layers are searched for the one that holds exactly those variables with the
right shapes; ``layer=`` picks one by its group path (``multi_head_attention_1``) or its Keras name.
Everything is checked before anything is loaded: a wrong file, a wrong layer, a missing variable or a
shape mismatch is a ``WeightsError`` listing what the file has and what the model expects, and the
model is left untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnzoo.errors import WeightsError
from attnzoo.keras.h5 import KerasLayer, Unread, read_keras_file

__all__ = ["load_keras_weights", "load_keras_arrays", "keras_layers_in", "CONVERSIONS"]


def _heads_in(a: np.ndarray) -> np.ndarray:  # [in, heads, d] -> [heads*d, in]
    return a.reshape(a.shape[0], -1).T


def _heads_out(a: np.ndarray) -> np.ndarray:  # [heads, d, out] -> [out, heads*d]
    return a.reshape(-1, a.shape[-1]).T


CONVERSIONS = {
    "same": lambda a: a,
    "transpose": lambda a: a.T,
    "heads_in": _heads_in,
    "heads_bias": lambda a: a.reshape(-1),
    "heads_out": _heads_out,
}


def keras_layers_in(path: str | Path) -> list[KerasLayer]:
    """The layers with weights in a Keras file, as attnzoo sees them (for ``--layer`` choices)."""
    return read_keras_file(path)


def _expected(model) -> dict[str, tuple[int, ...] | None]:
    """Torch-side shapes of the parameters in the layout (None where the layer is still lazy)."""
    from torch.nn.parameter import is_lazy

    out = {}
    for var in model.keras_layout():
        param = model.get_parameter(var.param)
        out[var.param] = None if is_lazy(param) else tuple(param.shape)
    return out


def _find(layer: KerasLayer, var) -> str:
    """The key of ``var`` in ``layer``: its positional path (keras 3) or its name (legacy), where a legacy
    name may carry the layer's own prefix (``lwan_Wa``) as Keras 2 custom layers often did."""
    if layer.format == "keras3":
        return var.v3
    for key in layer.variables:
        if key == var.legacy or key.endswith("/" + var.legacy) or key.endswith("_" + var.legacy):
            return key
    return var.legacy


def _keras_shape_fits(shape: tuple[int, ...], want: tuple[int | None, ...] | None) -> bool:
    """Whether a Keras array's shape fits the shape a model expects in Keras terms (None: any size)."""
    if want is None:
        return True
    return len(shape) == len(want) and all(w is None or w == s for s, w in zip(shape, want, strict=True))


def _convert(model, layer: KerasLayer) -> tuple[dict[str, torch.Tensor] | None, list[str]]:
    """The state dict this Keras layer gives the model, or None and the reasons it does not fit."""
    expected = _expected(model)
    # shapes the model knows in Keras terms even while lazy (heads and key_dim of an MHA, labels of LWAN)
    keras_shapes = model.keras_shapes() if hasattr(model, "keras_shapes") else {}
    state, problems, used = {}, [], set()
    for var in model.keras_layout():
        key = _find(layer, var)
        if key not in layer.variables:
            problems.append(f"missing {key} (for {var.param})")
            continue
        used.add(key)
        raw = layer.variables[key]
        if not _keras_shape_fits(tuple(raw.shape), keras_shapes.get(var.param)):
            want = ", ".join("?" if d is None else str(d) for d in keras_shapes[var.param])
            problems.append(f"{key}: {list(raw.shape)}, {var.param} needs [{want}] in Keras's layout")
            continue
        if isinstance(raw, Unread):
            problems.append(
                f"{key}: {list(raw.shape)} takes {raw.nbytes / 2**30:.1f} GiB to read, more than a Keras "
                f"attention weight can; not read"
            )
            continue
        array = CONVERSIONS[var.convert](raw)
        want = expected[var.param]
        if want is not None and tuple(array.shape) != want:
            problems.append(
                f"{key}: {list(layer.variables[key].shape)} gives {list(array.shape)}, {var.param} needs {list(want)}"
            )
            continue
        state[var.param] = torch.from_numpy(np.ascontiguousarray(array))
    extra = sorted(set(layer.variables) - used)
    if extra:
        problems.append(f"variables the model has no place for: {', '.join(extra)}")
    return (None if problems else state), problems


def _require_layer_of_class(path: str | Path, keras_class: str, ours: str) -> None:
    """A layer without weights still has to be in the file: a keras 3 group ``layers/<snake_case>[_N]``,
    or a legacy file's layer of that class (its model_config) or default name."""
    import re

    from attnzoo.keras.files import snake_case
    from attnzoo.keras.h5 import layer_names

    if not keras_class:
        return
    names, classes = layer_names(path)
    pattern = re.compile(rf"{re.escape(snake_case(keras_class))}(_\d+)?")
    if keras_class in classes or any(pattern.fullmatch(n) for n in names):
        return
    shown = ", ".join(sorted(names)[:12]) or "none"
    raise WeightsError(
        f"{path}: holds no {keras_class} layer for {ours} (its layers: {shown}); nothing was loaded or written"
    )


def load_keras_weights(model: Any, path: str | Path, layer: str | None = None) -> Any:
    """Load the weights of one Keras layer from ``path`` into ``model`` (an attnzoo Keras-compatible layer).

    Returns the model. Raises ``WeightsError`` without touching the model when no layer of the file fits,
    when ``layer`` names none, or when several fit and ``layer`` is not given.
    """
    if not hasattr(model, "keras_layout"):
        raise WeightsError(
            f"{type(model).__name__} declares no Keras layout; Keras import works for "
            "keras_dot, keras_additive, keras_mha, keras_attn, lwan"
        )
    layers = read_keras_file(path)
    if not model.keras_layout():  # a Keras layer without weights (Attention without use_scale)
        _require_layer_of_class(path, getattr(model, "keras_class", ""), type(model).__name__)
        return model
    listing = "\n  ".join(found.describe() for found in layers) or "(no layer with weights)"
    wanted = ", ".join(f"{p} {list(s) if s else 'lazy'}" for p, s in _expected(model).items()) or "no weights"
    if layer is not None:
        chosen = [found for found in layers if layer in (found.path, found.path.rsplit("/", 1)[-1], found.name)]
        if not chosen:
            raise WeightsError(f"{path}: no layer {layer!r}; the file has:\n  {listing}")
        candidates = chosen
    else:
        candidates = layers
    fitting, near, unrelated = [], [], []
    for candidate in candidates:
        state, problems = _convert(model, candidate)
        if state is not None:
            fitting.append((candidate, state))
        elif sum(p.startswith("missing ") for p in problems) == len(model.keras_layout()):  # none of them
            unrelated.append(candidate.path)
        else:  # holds some of them: what is wrong is the part that matters, so it comes first
            near.append(f"{candidate.path}: {'; '.join(problems)}")
    if not fitting:
        others = f"{len(unrelated)} other layer(s) hold none of its variables ({', '.join(unrelated)})"
        raise WeightsError(
            f"{path}: no layer fits {type(model).__name__}: "
            + "; ".join([*near, others] if unrelated else near)
            + f".\nThe model expects {wanted}.\nThe file has:\n  {listing}"
        )
    if len(fitting) > 1:
        names = ", ".join(repr(c.path.rsplit("/", 1)[-1]) for c, _ in fitting)
        raise WeightsError(f"{path}: several layers fit ({names}); pick one with layer=...")
    _, state = fitting[0]
    reference = next(iter(model.parameters()), None)
    dtype = reference.dtype if reference is not None and not reference.is_meta else torch.get_default_dtype()
    state = {k: v.to(dtype) for k, v in state.items()}
    missing = set(dict(model.named_parameters())) - set(state)
    if missing:
        raise WeightsError(f"{path}: the Keras layer gives no value for {', '.join(sorted(missing))}")
    model.load_state_dict(state, strict=True)
    return model


def load_keras_arrays(model: Any, arrays: list[np.ndarray], *, where: str = "Keras layer") -> Any:
    """Load a Keras layer's variables, in the order of its ``weights``, into ``model`` (an attnzoo layer
    that declares ``keras_layout()``), converted to torch's layout. Raises ``WeightsError`` naming what
    does not fit, and leaves the model untouched, when the count or a shape is wrong."""
    layout = model.keras_layout()
    if len(arrays) != len(layout):
        raise WeightsError(
            f"{where}: has {len(arrays)} variables {[list(a.shape) for a in arrays]}, {type(model).__name__} takes "
            f"{len(layout)} ({', '.join(v.param for v in layout) or 'none'})"
        )
    expected = _expected(model)
    keras_shapes = model.keras_shapes() if hasattr(model, "keras_shapes") else {}
    state = {}
    for var, raw in zip(layout, arrays, strict=True):
        if not _keras_shape_fits(tuple(raw.shape), keras_shapes.get(var.param)):
            want = ", ".join("?" if d is None else str(d) for d in keras_shapes[var.param])
            raise WeightsError(f"{where}: {var.legacy} is {list(raw.shape)}, {var.param} needs [{want}]")
        array = CONVERSIONS[var.convert](raw)
        want = expected[var.param]
        if want is not None and tuple(array.shape) != want:
            raise WeightsError(
                f"{where}: {var.legacy} {list(raw.shape)} gives {list(array.shape)}, {var.param} needs {list(want)}"
            )
        state[var.param] = torch.from_numpy(np.ascontiguousarray(array))
    reference = next(iter(model.parameters()), None)
    dtype = reference.dtype if reference is not None and not reference.is_meta else torch.get_default_dtype()
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model
