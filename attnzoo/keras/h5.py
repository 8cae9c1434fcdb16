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
from typing import Any

import numpy as np

from attnzoo.errors import WeightsError, extra_import_message

__all__ = [
    "KerasLayer",
    "Unread",
    "read_keras_file",
    "read_dataset",
    "stored_dtype",
    "read_bytes",
    "linked_once",
    "get_once",
    "group_items",
    "decode_attr",
    "layer_names",
    "MAX_DATASET_BYTES",
]


# A weight of an attention layer is megabytes at most; a dataset larger than this is refused before it is
# read (a gzip-compressed dataset of zeros can be a few KiB on disk and gigabytes in memory).
MAX_DATASET_BYTES = 1 << 30
MAX_DEPTH = 64  # nesting of groups a Keras file can plausibly have (models in models in models)


@dataclass(frozen=True)
class Unread:
    """A dataset too large to read, kept by shape so that listings and shape checks still work."""

    shape: tuple[int, ...]
    nbytes: int


@dataclass
class KerasLayer:
    path: str  # the group in the file
    name: str  # the layer's name (keras 3: the vars group's name attribute; legacy: the layer name)
    format: str  # "keras3" or "legacy"
    variables: dict[str, np.ndarray | Unread] = field(default_factory=dict)

    def describe(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.variables.items())
        return f"{self.path} (name {self.name!r}): {shapes or 'no weights'}"


def decode_attr(value) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def read_bytes(dataset) -> int:
    """The memory reading ``dataset`` takes, from the file's metadata alone: its values, or one of its
    chunks if that is larger (HDF5 decompresses a chunk whole: a 2-value dataset stored in one 4 GiB
    gzip chunk of a few KiB on disk needs 4 GiB to read; Keras writes contiguous datasets)."""
    itemsize = dataset.dtype.itemsize
    chunk = int(np.prod(dataset.chunks, dtype=np.int64)) * itemsize if dataset.chunks else 0
    return max(int(dataset.size) * itemsize, chunk)


def stored_dtype(dataset) -> str:
    """The dtype the file holds ``dataset``'s values in: ``"bfloat16"`` where keras 3 wrote bfloat16 values (2-byte
    opaque values the dataset's ``dtype`` attribute marks ``"bfloat16"``: HDF5 has no bfloat16), else numpy's name
    of the dataset's type (``"float32"``, ``"float16"``, ``"int64"``)."""
    opaque = dataset.dtype.kind == "V" and dataset.dtype.itemsize == 2
    if opaque and decode_attr(dataset.attrs.get("dtype")) == "bfloat16":
        return "bfloat16"
    return str(dataset.dtype)


def read_dataset(dataset, where: str) -> np.ndarray | Unread:
    """A numeric dataset's values, a floating one as float32 (bfloat16 and float16 widen exactly: every value of
    theirs is a float32; :func:`stored_dtype` says which the file held); one too large to read as
    :class:`Unread` (nothing read); anything else refused."""
    bfloat16 = stored_dtype(dataset) == "bfloat16"
    if dataset.dtype.kind not in "fiub" and not bfloat16:
        raise WeightsError(
            f"{where}: dataset {dataset.name} holds {dataset.dtype} values, not numbers; a Keras "
            f"weights file holds numeric arrays only (bfloat16 as 2-byte values marked dtype='bfloat16')"
        )
    linked_once(dataset, where)
    nbytes = read_bytes(dataset)
    if nbytes > MAX_DATASET_BYTES:
        return Unread(tuple(dataset.shape), nbytes)
    values = np.asarray(dataset)
    if bfloat16:  # a bfloat16 is the upper half of the float32 of the same value
        wide = values.view(np.uint16).astype(np.uint32)
        wide <<= 16
        return wide.view(np.float32)
    return values.astype(np.float32) if values.dtype == np.float16 else values


def linked_once(item, where: str) -> None:
    """Refuse a group or dataset that the file links from two places (a hard link: a layer group that
    holds itself, or two layers sharing one array). Keras writes every object under one name; a second
    link was made by hand, and following it reads the same values twice or walks in a circle."""
    import h5py

    if h5py.h5o.get_info(item.id).rc > 1:
        raise WeightsError(
            f"{where}: {item.name} is linked from more than one place in the file (a hard link); Keras never "
            f"writes links, so the file was assembled by hand; refusing to read it"
        )


def group_items(group, where: str):
    """The (key, item) pairs of a group, refusing links: Keras never writes soft or external links, and
    following one could leave the file (external) or find nothing (dangling)."""
    import h5py

    for key in group:
        link = group.get(key, getlink=True)
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
            raise WeightsError(
                f"{where}: {group.name.rstrip('/')}/{key} is {kind}; Keras never writes links, so "
                f"the file was assembled by hand; refusing to follow it"
            )
        item = group[key]
        linked_once(item, where)
        yield key, item


def get_once(group, path: str, where: str):
    """``group[path]`` (None where nothing is there), every group and dataset on the way linked once (see
    :func:`linked_once`)."""
    import h5py

    item = group
    for part in path.split("/"):
        item = item.get(part) if isinstance(item, h5py.Group) and part else None
        if item is None:
            return None
        linked_once(item, where)
    return item


def _keras3_layers(root, where: str) -> list[KerasLayer]:
    import h5py

    found: list[KerasLayer] = []
    seen: set = set()
    stack = [(root, "", None, 0)]  # an explicit stack: a deep file cannot exhaust Python's recursion
    while stack:
        group, path, layer, depth = stack.pop()
        if group.id in seen:  # reached twice (group_items refuses the hard links that could do it)
            continue
        seen.add(group.id)
        if depth > MAX_DEPTH:
            raise WeightsError(f"{where}: groups nested deeper than {MAX_DEPTH} levels; not a Keras weights file")
        for key, item in reversed(list(group_items(group, where))):
            if not isinstance(item, h5py.Group):
                continue
            child = f"{path}/{key}" if path else key
            if path.endswith("layers") or path == "layers":  # a layer of a model: a new entry
                vars_group = item.get("vars")
                name = decode_attr(vars_group.attrs.get("name", key)) if vars_group is not None else key
                entry = KerasLayer(child, name, "keras3")
                found.append(entry)
                stack.append((item, child, entry, depth + 1))
            elif key == "vars" and layer is not None:
                prefix = child[len(layer.path) + 1 :]
                for var, dataset in sorted(
                    group_items(item, where), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0
                ):
                    if isinstance(dataset, h5py.Dataset):
                        layer.variables[f"{prefix}/{var}"] = read_dataset(dataset, where)
            else:
                stack.append((item, child, layer, depth + 1))
    found.sort(key=lambda layer: layer.path)
    return [layer for layer in found if layer.variables]


def _legacy_layers(root, where: str) -> list[KerasLayer]:
    import h5py

    group = root.get("model_weights", root)
    layers = []
    for raw in group.attrs["layer_names"]:
        name = decode_attr(raw)
        item = get_once(group, name, where)
        if not isinstance(item, h5py.Group):
            raise WeightsError(f"{where}: layer_names lists {name!r}, which is not a group of the file")
        entry = KerasLayer(name, name, "legacy")
        for weight in item.attrs.get("weight_names", []):
            weight = decode_attr(weight)
            dataset = get_once(item, weight, where)
            if not isinstance(dataset, h5py.Dataset):
                raise WeightsError(f"{where}: layer {name!r} lists weight {weight!r}, which is not a dataset")
            key = weight.split(":")[0]
            key = key[len(name) + 1 :] if key.startswith(name + "/") else key
            entry.variables[key] = read_dataset(dataset, where)
        if entry.variables:
            layers.append(entry)
    return layers


def layer_names(path: str | Path) -> tuple[list[str], set[str]]:
    """Every layer's group name in a Keras weights file (weights or not), and the class names its model
    config records (legacy files written by model.save)."""
    import json

    import h5py

    try:
        with h5py.File(path, "r") as f:
            root = f.get("model_weights", f)
            if "layer_names" in root.attrs:
                names = [decode_attr(n) for n in root.attrs["layer_names"]]
            else:
                group = f.get("layers")
                names = list(group.keys()) if isinstance(group, h5py.Group) else []
            classes: set[str] = set()
            raw = f.attrs.get("model_config")
            if raw is not None:
                try:
                    config = json.loads(decode_attr(raw))
                    classes = {str(layer.get("class_name")) for layer in config.get("config", {}).get("layers", [])}
                except (ValueError, AttributeError, RecursionError):  # a config nested too deep: no classes
                    classes = set()
    except OSError as e:
        raise WeightsError(f"{path}: not an HDF5 file ({' '.join(str(e).split())[:200]})") from None
    return names, classes


def h5py_module() -> Any:
    """h5py, which every read of a Keras file needs (the ``keras`` extra), or a WeightsError saying how to get
    it: absent, the extra's pip command; installed but failing to import, why (extra_import_message)."""
    try:
        import h5py
    except Exception as e:  # a broken install raises its own error, not only ImportError
        raise WeightsError(extra_import_message("reading Keras files needs h5py", "keras", e, "h5py")) from None
    return h5py


def read_keras_file(path: str | Path) -> list[KerasLayer]:
    """Every layer with weights in a Keras weights file (either layout)."""
    h5py = h5py_module()
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Keras weights file not found: looked for {path.resolve()}")
    try:
        with h5py.File(path, "r") as f:
            root = f.get("model_weights", f)
            if "layer_names" in root.attrs:
                return _legacy_layers(f, str(path))
            if "layers" in f:
                return _keras3_layers(f, str(path))
    except OSError as e:
        reason = " ".join(str(e).split())[:200]
        raise WeightsError(f"{path}: not an HDF5 file ({reason}); expected a Keras .weights.h5 or .h5") from None
    except (KeyError, ValueError, TypeError, RecursionError) as e:
        reason = " ".join(str(e).split())[:200]
        raise WeightsError(
            f"{path}: not a Keras weights file attnzoo can read ({type(e).__name__}: {reason})"
        ) from None
    raise WeightsError(
        f"{path}: neither a keras 3 .weights.h5 (no 'layers' group) nor a legacy .h5 (no 'layer_names' attribute)"
    )
