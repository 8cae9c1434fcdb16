"""LoRA adapters of a keras-hub model: merged into their kernels as the model converts, or kept apart for a PEFT
adapter folder (:mod:`attnzoo.keras.lora_peft` writes it beside the Hugging Face folder).

keras-hub's ``backbone.enable_lora(rank)`` gives each targeted ``EinsumDense`` / ``Dense`` (by default those named
``query``, ``value``, ``query_dense``, ``value_dense``) two factors beside its kernel W [..., n]: ``lora_kernel_a``
of W's shape with its last axis the rank r, and ``lora_kernel_b`` [r, n]; the layer computes with ::

    W + (lora_alpha / r) · (A @ B)          (keras/src/layers/core/einsum_dense.py, EinsumDense.kernel)

and keras-hub passes no ``lora_alpha``, so it is r and the factor 1. Where the adapters are:

* ``model.save`` (a ``.keras`` file) writes that sum in the kernel's place and no A or B: the file converts as
  any, to the adapted model; there is nothing to keep apart.
* ``backbone.save_lora_weights("x.lora.h5")`` writes the factors alone: ``lora/vars/rank`` and, per adapted
  layer, ``lora/<i>/vars/lora_kernel_a`` and ``lora_kernel_b``, ``i`` the layer's index among the backbone's
  ``_flatten_layers(include_self=False)`` that hold weights (the backbone's layers in the order of its graph,
  each followed by its sub-layers in reverse creation order, depth first: :data:`~attnzoo.keras.lora_order.ORDER`
  holds that order for keras-hub's layer classes, recorded from keras-hub 0.32). ``load_lora_weights`` puts
  them back on the default targets of a model loaded from its preset.

:func:`plan_lora` finds such a file (``lora_weights=``, or the one ``*.lora.h5`` in a preset folder), finds the
layer each adapter belongs to, checks A and B fit its kernel, and then, by ``lora``: ``"merge"`` (the default)
reads each adapted kernel as ``W + (A @ B)`` (in float32, then held in the file's dtype as any variable);
``"keep"`` leaves the kernels as they are and returns the adapters (:class:`KerasLora`) for the PEFT folder;
``"none"`` converts the base model, as ``CausalLM.from_preset`` loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras.h5 import MAX_DEPTH, get_once, group_items, read_dataset
from attnzoo.keras.hub_families import backbone_arguments, hub_model_of
from attnzoo.keras.lora_order import ORDER

__all__ = ["LORA_MODES", "Adapter", "KerasLora", "plan_lora", "adapters_file", "read_adapters"]

LORA_MODES = ("merge", "keep", "none")
SAMPLES = 64  # kernel values an adapter keeps to find its kernel among transformers' weights


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter: ``layer`` (the adapted layer's path, for messages), its kernel's shape, the factors
    ``a`` [*shape[:-1], r] and ``b`` [r, shape[-1]], ``scale`` (alpha / r), and a sample of the kernel's values
    (``at``: [k, ndim] positions, ``values``: [k]) that finds it among a Hugging Face model's weights."""

    layer: str
    shape: tuple[int, ...]
    a: np.ndarray
    b: np.ndarray
    scale: float
    at: np.ndarray
    values: np.ndarray

    def delta(self) -> np.ndarray:
        """``scale · (A @ B)``, the kernel's shape, float32 (what keras adds to the kernel)."""
        return (np.matmul(self.a, self.b) * np.float32(self.scale)).astype(np.float32)


@dataclass(frozen=True)
class KerasLora:
    """The adapters of one model, kept apart (``lora="keep"``): where they came from, keras's rank, each one."""

    source: str
    rank: int
    adapters: tuple[Adapter, ...]


def adapters_file(path: str | Path, lora_weights: str | Path | None) -> Path | None:
    """The adapters file of a conversion: ``lora_weights`` where given, else the one ``*.lora.h5`` of a preset
    folder (None where there is none)."""
    if lora_weights is not None:
        given = Path(lora_weights)
        if not given.is_file():
            raise ConfigError(f"lora_weights: no file at {given.resolve()} (a backbone.save_lora_weights file)")
        return given
    folder = Path(path)
    found = sorted(folder.glob("*.lora.h5")) if folder.is_dir() else []
    if len(found) > 1:
        raise ConfigError(
            f"{folder} holds {len(found)} adapter files ({', '.join(p.name for p in found)}); name the one to "
            f"apply with lora_weights= (--lora-weights), or lora='none' for the base model"
        )
    return found[0] if found else None


def read_adapters(path: Path) -> tuple[int, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """keras-hub's ``save_lora_weights`` file: the rank and each layer index's (A, B), checked."""
    import h5py

    where = str(path)
    try:
        handle = h5py.File(path, "r")
    except OSError:
        raise WeightsError(f"{where}: not an HDF5 file; expected backbone.save_lora_weights's .lora.h5") from None
    with handle:
        rank_data = get_once(handle, "lora/vars/rank", where)
        if not isinstance(rank_data, h5py.Dataset) or rank_data.shape != () or rank_data.dtype.kind not in "iu":
            raise WeightsError(f"{where}: no integer lora/vars/rank; not a file backbone.save_lora_weights wrote")
        rank = int(rank_data[()])
        if rank < 1:
            raise WeightsError(f"{where}: lora/vars/rank is {rank}; a LoRA rank is at least 1")
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for key, _ in group_items(handle["lora"], where):
            if key == "vars":
                continue
            if not key.isdigit():
                raise WeightsError(f"{where}: lora/{key} is not a layer index; save_lora_weights writes lora/<i>")
            a, b = (get_once(handle, f"lora/{key}/vars/lora_kernel_{x}", where) for x in "ab")
            if not isinstance(a, h5py.Dataset) or not isinstance(b, h5py.Dataset):
                raise WeightsError(f"{where}: lora/{key} lacks vars/lora_kernel_a or vars/lora_kernel_b")
            factors = (read_dataset(a, where), read_dataset(b, where))
            if not all(isinstance(f, np.ndarray) and f.dtype.kind == "f" for f in factors):
                raise WeightsError(f"{where}: lora/{key}'s factors are not floating arrays of a readable size")
            fa, fb = factors
            if fa.ndim < 2 or fb.ndim != 2 or fa.shape[-1] != rank or fb.shape[0] != rank:
                raise WeightsError(
                    f"{where}: lora/{key}: lora_kernel_a {list(fa.shape)} and lora_kernel_b {list(fb.shape)} are not "
                    f"[..., {rank}] and [{rank}, n] (rank {rank})"
                )
            found[int(key)] = (np.asarray(fa, np.float32), np.asarray(fb, np.float32))
    if not found:
        raise WeightsError(f"{where}: holds no adapters (no lora/<i> groups)")
    return rank, found


def _weighted(group: Any, where: str, depth: int = 0) -> tuple[bool, list[str]]:
    """Whether the layer of ``group`` holds weights, and the paths of its sub-layers that do."""
    import h5py

    if depth > MAX_DEPTH:
        raise WeightsError(f"{where}: groups nested deeper than {MAX_DEPTH} levels; not a Keras file")
    own = group.get("vars")
    holds = isinstance(own, h5py.Group) and any(isinstance(item, h5py.Dataset) for _, item in group_items(own, where))
    paths: list[str] = []
    for key, item in group_items(group, where):
        if key != "vars" and isinstance(item, h5py.Group):
            child, below = _weighted(item, where, depth + 1)
            paths += ([key] if child else []) + [f"{key}/{p}" for p in below]
    return holds or bool(paths), paths


def _numbered_layers(file: Any, graph: Any, where: str) -> list[tuple[str, Any]]:
    """The backbone's layers that hold weights, in ``_flatten_layers`` order: (path, h5 group) each."""
    found = hub_model_of(file.config)
    if found is None:
        raise WeightsError(f"{where}: LoRA adapters go with a keras-hub Backbone or task; this model is neither")
    prefix = () if found[1].kind == "backbone" else (str(backbone_arguments(file.config).get("name")),)
    out: list[tuple[str, Any]] = []
    for record in graph.layers.values():
        names = record.path.names
        if names[:-1] != prefix or len(names) != len(prefix) + 1:
            continue
        group = file.weights.group(record.path)
        holds, present = _weighted(group, where) if group is not None else (False, [])
        if not holds:
            continue
        out.append((record.key, group))
        if not present:
            continue
        order = ORDER.get(record.class_name)
        unknown = sorted(set(present) - set(order or ()))
        if order is None or unknown:
            raise WeightsError(
                f"{where}: the order keras-hub numbers the sub-layers of {record.class_name} {record.key!r} in "
                f"(for its LoRA adapters) is not known to attnzoo ({', '.join(unknown[:4]) or 'the class'}); it "
                f"knows {', '.join(sorted(ORDER))}. Merge the adapters in Keras and save the model (model.save) instead"
            )
        out += [(f"{record.key}/{p}", group[p]) for p in order if p in present]
    return out


def _adapter(layer: str, group: Any, factors: tuple[np.ndarray, np.ndarray], where: str, index: int) -> Adapter:
    import h5py

    a, b = factors
    kernel = get_once(group, "vars/0", where)
    shape = tuple(int(n) for n in kernel.shape) if isinstance(kernel, h5py.Dataset) else ()
    if len(shape) < 2 or a.shape[:-1] != shape[:-1] or b.shape[1] != shape[-1]:
        raise WeightsError(
            f"{where}: adapter lora/{index} (A {list(a.shape)}, B {list(b.shape)}) does not fit layer {layer!r} "
            f"(kernel {list(shape) or 'none'}), the layer of that index; the adapters were saved from another model"
        )
    values = read_dataset(kernel, where)
    if not isinstance(values, np.ndarray):
        raise WeightsError(f"{where}: layer {layer!r}'s kernel is too large to read")
    rng = np.random.default_rng(index)
    flat = rng.choice(values.size, size=min(SAMPLES, values.size), replace=False)
    at = np.stack(np.unravel_index(flat, shape), axis=1)
    return Adapter(layer, shape, a, b, 1.0, at, values.reshape(-1)[flat].copy())


def plan_lora(path: str | Path, file: Any, graph: Any, lora: str, lora_weights: str | Path | None) -> Any:
    """Apply ``lora`` to a conversion (the module docstring says how); returns the kept adapters
    (:class:`KerasLora`, for ``"keep"``), or a note for the report (``"merge"`` of a file with adapters), or
    None. ``"keep"`` without adapters is a :class:`~attnzoo.errors.ConfigError` saying where they would be."""
    if lora not in LORA_MODES:
        raise ConfigError(f"lora must be one of {', '.join(map(repr, LORA_MODES))}, got {lora!r}")
    found = adapters_file(path, lora_weights) if lora != "none" or lora_weights is not None else None
    if found is None:
        if lora == "keep":
            raise ConfigError(
                f"lora='keep': {path} holds no LoRA adapters to keep. keras's model.save writes each adapted kernel "
                f"merged (W + A @ B) and no A or B, so a .keras file converts to the adapted model as it is; to keep "
                f"them apart, save them with backbone.save_lora_weights('x.lora.h5') and pass lora_weights="
            )
        return None
    if lora == "none":
        raise ConfigError("lora='none' converts the base model; lora_weights= goes with 'merge' or 'keep'")
    where = str(found)
    if not hasattr(file.weights, "replaced"):
        raise WeightsError(f"{where}: LoRA adapters go with a keras 3 model (.keras or a preset), not a legacy .h5")
    rank, factors = read_adapters(found)
    layers = _numbered_layers(file, graph, where)
    adapters = []
    for index in sorted(factors):
        if index >= len(layers):
            raise WeightsError(
                f"{where}: adapter lora/{index} names layer {index}, and the model has {len(layers)} layers with "
                f"weights; the adapters were saved from another model"
            )
        layer, group = layers[index]
        adapters.append(_adapter(layer, group, factors[index], where, index))
    if lora == "keep":
        return KerasLora(where, rank, tuple(adapters))
    for adapter, (_, group) in zip(adapters, (layers[i] for i in sorted(factors)), strict=True):
        file.weights.replaced[group["vars/0"].name] = lambda w, adapter=adapter: w + adapter.delta()
    named = ", ".join(a.layer for a in adapters[:3]) + (", ..." if len(adapters) > 3 else "")
    return f"LoRA: {len(adapters)} adapters of rank {rank} from {found.name} merged into their kernels ({named})"
