"""Reading the two Keras weight-file layouts into one shape: a list of layers with their variables.

* keras 3 ``.weights.h5`` is positional: ``layers/<snake_case class>[_N]/vars/<i>`` in creation order,
  sub-layers in sub-groups (``multi_head_attention/query_dense/vars/0``); the user's layer name is only
  the ``name`` attribute of the ``vars`` group. Nested models repeat the pattern under their own group.
* legacy (Keras 2, or keras 3's ``model.save("x.h5")``) ``.h5`` is keyed by name: the root (or its
  ``model_weights`` group) lists ``layer_names``; each layer group lists ``weight_names`` such as
  ``lwan/Wa:0`` and holds the datasets under those names.

A variable is keyed by its ``v3`` path below the layer group (``vars/0``) or by its legacy name after
the layer name, without the ``:0`` suffix (``Wa``, ``query/kernel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import WeightsError

__all__ = ["KerasLayer", "read_keras_file"]


@dataclass
class KerasLayer:
    path: str  # the group in the file
    name: str  # the layer's name (keras 3: the vars group's name attribute; legacy: the layer name)
    format: str  # "keras3" or "legacy"
    variables: dict[str, np.ndarray] = field(default_factory=dict)

    def describe(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.variables.items())
        return f"{self.path} (name {self.name!r}): {shapes or 'no weights'}"


def _decode(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _keras3_layers(root) -> list[KerasLayer]:
    import h5py

    found: list[KerasLayer] = []

    def visit(group, path: str, layer: KerasLayer | None) -> None:
        for key in group:
            item = group[key]
            if not isinstance(item, h5py.Group):
                continue
            child = f"{path}/{key}" if path else key
            if path.endswith("layers") or path == "layers":  # a layer of a model: a new entry
                vars_group = item.get("vars")
                name = _decode(vars_group.attrs.get("name", key)) if vars_group is not None else key
                entry = KerasLayer(child, name, "keras3")
                found.append(entry)
                visit(item, child, entry)
            elif key == "vars" and layer is not None:
                prefix = child[len(layer.path) + 1 :]
                for var in sorted(item, key=lambda k: int(k) if k.isdigit() else k):
                    layer.variables[f"{prefix}/{var}"] = np.asarray(item[var])
            else:
                visit(item, child, layer)

    visit(root, "", None)
    return [layer for layer in found if layer.variables]


def _legacy_layers(root) -> list[KerasLayer]:
    group = root["model_weights"] if "model_weights" in root else root
    layers = []
    for raw in group.attrs["layer_names"]:
        name = _decode(raw)
        entry = KerasLayer(name, name, "legacy")
        for weight in group[name].attrs.get("weight_names", []):
            weight = _decode(weight)
            key = weight.split(":")[0]
            key = key[len(name) + 1 :] if key.startswith(name + "/") else key
            entry.variables[key] = np.asarray(group[name][weight])
        if entry.variables:
            layers.append(entry)
    return layers


def read_keras_file(path: str | Path) -> list[KerasLayer]:
    """Every layer with weights in a Keras weights file (either layout)."""
    try:
        import h5py
    except ImportError:
        raise WeightsError("reading Keras files needs h5py: pip install 'attnzoo[keras]'") from None
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Keras weights file not found: looked for {path.resolve()}")
    try:
        with h5py.File(path, "r") as f:
            root = f["model_weights"] if "model_weights" in f else f
            if "layer_names" in root.attrs:
                return _legacy_layers(f)
            if "layers" in f:
                return _keras3_layers(f)
    except OSError as e:
        raise WeightsError(f"{path}: not an HDF5 file ({e}); expected a Keras .weights.h5 or .h5") from None
    raise WeightsError(f"{path}: neither a keras 3 .weights.h5 (no 'layers' group) nor a legacy .h5 "
                       "(no 'layer_names' attribute)")
