"""Reading a whole Keras model from disk: its config, its Keras version and its weights, with json and h5py.

Three forms hold a whole model:

* ``.keras`` (keras 3's default): a zip of ``config.json``, ``metadata.json`` (the Keras version) and
  ``model.weights.h5``, whose layers are groups ``layers/<snake_case class>[_N]`` holding ``vars/<i>``
  (the layer's own variables, in creation order) and one sub-group per sub-layer (``cell``,
  ``forward_layer``, ``query_dense``, ...). The layer's own name is the ``name`` attribute of ``vars``.
  A layer's other files (a lookup layer's ``vocabulary.txt``) sit under ``assets/`` at the same path.
* legacy ``.h5`` (Keras 2, or keras 3's ``model.save("x.h5")``): the config in the root attribute
  ``model_config``, the version in ``keras_version``, and the weights under ``model_weights``, one group
  per layer name listing ``weight_names`` in the order of the layer's ``weights``.
* a ``config.json`` (``model.to_json()`` or the file inside a ``.keras``) with a weights file beside it
  (``model.weights.h5`` or ``<stem>.weights.h5``), or named with ``weights=``.

Nothing here imports Keras, and nothing is executed: the config is JSON data. A file is checked before
it is read (:func:`check_members`, :func:`stream_member`, :func:`parse_json`): a ``.keras`` archive holds
each member once and none outside its folder, each member is decompressed counting its data's bytes
(not its header's size) under a limit, JSON is parsed with a depth limit and its names with a length
limit (:func:`~attnzoo.io.limits.check_names`); each refusal is a ``WeightsError`` naming the member.
"""

from __future__ import annotations

import json
import re
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnzoo.errors import WeightsError
from attnzoo.io.limits import check_names
from attnzoo.keras.archive import (
    MAX_CONFIG_BYTES,
    MAX_METADATA_BYTES,
    MAX_WEIGHTS_BYTES,
    check_members,
    read_assets,
    read_member,
    stream_member,
)
from attnzoo.keras.h5 import MAX_DEPTH, decode_attr, get_once, group_items, h5py_module, read_dataset, stored_dtype

__all__ = [
    "KerasFile",
    "LayerPath",
    "Variables",
    "read_keras_model",
    "snake_case",
    "parse_json",
    "MAX_JSON_DEPTH",
]

MAX_JSON_DEPTH = 200  # a Keras config nests a dozen levels, about five more per nested model


@dataclass(frozen=True)
class LayerPath:
    """Where a layer sits: the names of the models around it, outermost first, then its own name; with
    its class and, per level, its position among the layers of the same class (keras 3 groups are named
    by class and position: ``dense``, ``dense_1``, ...)."""

    names: tuple[str, ...]
    classes: tuple[str, ...]
    positions: tuple[int, ...]

    def child(self, name: str, class_name: str, position: int) -> LayerPath:
        return LayerPath((*self.names, name), (*self.classes, class_name), (*self.positions, position))

    def __str__(self) -> str:
        return "/".join(self.names)


def snake_case(name: str) -> str:
    """Keras's ``to_snake_case``: ``MultiHeadAttention`` -> ``multi_head_attention``, ``GRU`` -> ``gru``."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    return name


def _walk_key(name: str) -> str:
    # keras saves public attributes before private ones, each set in sorted order
    return "~" + name if name.startswith("_") else name


class _Keras3Weights:
    """The datasets of a keras 3 ``.weights.h5``, found by layer name (or by class and position).
    ``at_root``: the name of a nested model whose layers the file holds at its root (a keras-hub task
    preset's model.weights.h5 is its backbone's, saved alone)."""

    def __init__(self, root: Any, where: str, at_root: str | None = None) -> None:
        self.root, self.where, self.at_root = root, where, at_root
        # dataset name -> what its values become as read (a LoRA adapter merged into its kernel: keras/lora.py)
        self.replaced: dict[str, Callable[[np.ndarray], np.ndarray]] = {}

    def _group_of(self, parent: Any, path: LayerPath, level: int) -> Any:
        import h5py

        layers = parent.get("layers")
        if not isinstance(layers, h5py.Group):
            return None
        name, class_name, position = path.names[level], path.classes[level], path.positions[level]
        by_name = None
        for _, item in group_items(layers, self.where):
            vars_group = item.get("vars") if isinstance(item, h5py.Group) else None
            if vars_group is not None and decode_attr(vars_group.attrs.get("name", "")) == name:
                by_name = item
                break
        if by_name is not None:
            return by_name
        # files written before keras recorded the name: the group of the position-th layer of this class
        key = snake_case(class_name) + (f"_{position}" if position else "")
        item = get_once(layers, key, self.where)
        return item if isinstance(item, h5py.Group) else None

    def group(self, path: LayerPath) -> Any:
        group = self.root
        first = int(self.at_root is not None and path.names[:1] == (self.at_root,))
        for level in range(first, len(path.names)):
            group = self._group_of(group, path, level)
            if group is None:
                return None
        return group

    def variables(self, path: LayerPath, child_order: tuple[str, ...] = ()) -> Variables | None:
        """The layer's variables in the order of its ``weights``: its own ``vars/<i>``, then each
        sub-layer's (``child_order`` first where Keras's creation order is not its save order)."""
        group = self.group(path)
        if group is None:
            return None
        found = Variables([], [])
        self._collect(group, child_order, 0, found)
        return found

    def _collect(self, group: Any, child_order: tuple[str, ...], depth: int, found: Variables) -> None:
        import h5py

        if depth > MAX_DEPTH:
            raise WeightsError(f"{self.where}: groups nested deeper than {MAX_DEPTH} levels; not a Keras file")
        own = group.get("vars")
        if isinstance(own, h5py.Group):
            keys = sorted((k for k, _ in group_items(own, self.where)), key=lambda k: int(k) if k.isdigit() else -1)
            for key in keys:
                item = own[key]
                if isinstance(item, h5py.Dataset):
                    found.add(item, self.where, self.replaced.get(item.name))
        names = [k for k, item in group_items(group, self.where) if k != "vars" and isinstance(item, h5py.Group)]
        here = [k for k in child_order if "/" not in k]
        ordered = [k for k in here if k in names] + sorted((k for k in names if k not in here), key=_walk_key)
        for key in ordered:
            # "child/grandchild" entries order the child's own sub-layers
            inner = tuple(k.split("/", 1)[1] for k in child_order if k.startswith(key + "/"))
            self._collect(group[key], inner, depth + 1, found)


class _TaskWeights:
    """A keras-hub task preset's two weights files: the backbone's layers (paths through ``backbone``) from
    model.weights.h5, which holds them at its root; the head's (every other path) from task.weights.h5, which
    ``Task.save_task_weights`` writes as the task's own file with the backbone's layers skipped."""

    def __init__(self, backbone: _Keras3Weights, head: _Keras3Weights, name: str) -> None:
        self.backbone, self.head, self.name = backbone, head, name

    def _store(self, path: LayerPath) -> _Keras3Weights:
        return self.backbone if path.names[:1] == (self.name,) else self.head

    def group(self, path: LayerPath) -> Any:
        return self._store(path).group(path)

    def variables(self, path: LayerPath, child_order: tuple[str, ...] = ()) -> Variables | None:
        return self._store(path).variables(path, child_order)


class _LegacyWeights:
    """The datasets of a legacy ``.h5``: per top-level layer, ``weight_names`` in the layer's order."""

    def __init__(self, root: Any, where: str) -> None:
        self.where = where
        self.group = root.get("model_weights", root)

    def variables(self, path: LayerPath, child_order: tuple[str, ...] = ()) -> Variables | None:
        import h5py

        top = get_once(self.group, path.names[0], self.where)
        if not isinstance(top, h5py.Group):
            return None
        names = [decode_attr(w) for w in top.attrs.get("weight_names", [])]
        # inside a nested model, a layer's weights are the ones whose name passes through its own name
        inner = path.names[1:]
        found = Variables([], [])
        for weight in names:
            parts = weight.split(":")[0].split("/")
            if inner and not _passes_through(parts, inner):
                continue
            dataset = get_once(top, weight, self.where)
            if not isinstance(dataset, h5py.Dataset):
                raise WeightsError(
                    f"{self.where}: layer {path.names[0]!r} lists weight {weight!r}, which is not a dataset"
                )
            found.add(dataset, self.where)
        return found


def _passes_through(parts: list[str], inner: tuple[str, ...]) -> bool:
    """Whether a weight name's parts (``outer/inner/dense_1/kernel``) hold the inner names in order."""
    at = 0
    for part in parts[:-1]:
        if at < len(inner) and part == inner[at]:
            at += 1
    return at == len(inner)


@dataclass
class Variables:
    """One layer's variables as read: ``arrays`` in the layer's order (a floating one as float32, bfloat16 and
    float16 widened exactly) and ``dtypes``, the dtype the file holds each in (``"bfloat16"``, ``"float32"``,
    ...)."""

    arrays: list[np.ndarray]
    dtypes: list[str]

    def add(self, dataset: Any, where: str, replace: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        array = read_dataset(dataset, where)
        if not isinstance(array, np.ndarray):  # an Unread: too large for any Keras variable attnzoo converts
            raise WeightsError(
                f"{where}: dataset {dataset.name} {list(array.shape)} takes {array.nbytes / 2**30:.1f} GiB to "
                f"read, more than one variable of a model attnzoo converts may; refusing to read it"
            )
        self.arrays.append(array if replace is None else replace(array))
        self.dtypes.append(stored_dtype(dataset))


@dataclass
class KerasFile:
    """A whole Keras model as read from disk: its config (JSON data), Keras version and weights."""

    path: Path
    format: str  # "keras" | "h5" | "json"
    keras_version: str
    config: dict[str, Any]
    weights: Any = field(repr=False)  # _Keras3Weights | _LegacyWeights
    _handles: list[Any] = field(default_factory=list, repr=False)
    archive_assets: dict[str, bytes] = field(default_factory=dict, repr=False)  # "assets/..." -> bytes

    def assets(self, path: LayerPath) -> dict[str, bytes]:
        """The files Keras saved for the layer at ``path`` (names relative to its folder, such as
        ``vocabulary.txt``); empty for formats that keep none (a legacy .h5, a config.json)."""
        if not self.archive_assets or not isinstance(self.weights, _Keras3Weights):
            return {}
        group = self.weights.group(path)
        if group is None:
            return {}
        prefix = "assets" + group.name.rstrip("/") + "/"
        return {name[len(prefix) :]: data for name, data in self.archive_assets.items() if name.startswith(prefix)}

    @property
    def major(self) -> int:
        """The Keras major version (2 or 3) the file was written by; its semantics follow it."""
        match = re.match(r"\s*(\d+)", self.keras_version or "")
        return int(match.group(1)) if match else 3

    def close(self) -> None:
        for handle in reversed(self._handles):
            close = getattr(handle, "close", None) or handle.cleanup  # an h5py file, or the scratch folder
            close()
        self._handles.clear()

    def __enter__(self) -> KerasFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_json(text: bytes | str, where: str, what: str) -> Any:
    """JSON from a file attnzoo did not write, parsed with a depth limit: a value nested deeper than
    ``MAX_JSON_DEPTH`` (a Keras config nests a dozen levels, a few more per nested model) is a
    ``WeightsError`` naming ``what``, never a ``RecursionError`` here or in whatever walks the value later."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise WeightsError(f"{where}: {what} nests deeper than {MAX_JSON_DEPTH} levels; not a Keras file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise WeightsError(f"{where}: {what} is not valid JSON ({e})") from None
    stack = [(value, 1)]  # an explicit stack: walking a deep value cannot exhaust Python's recursion
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise WeightsError(f"{where}: {what} nests deeper than {MAX_JSON_DEPTH} levels; not a Keras file")
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return value


def _parse_config(text: bytes | str, where: str, what: str = "the model config") -> dict[str, Any]:
    if len(text) > MAX_CONFIG_BYTES:
        raise WeightsError(f"{where}: the model config is {len(text) >> 20} MiB; a Keras config is kilobytes")
    config = parse_json(text, where, what)
    if not isinstance(config, dict) or "class_name" not in config or not isinstance(config.get("config"), dict):
        raise WeightsError(f"{where}: {what} is not a Keras model (no class_name and config)")
    check_names(config, f"{where}: {what}")
    return config


def _h5(path: Path, where: str) -> Any:
    h5py = h5py_module()
    try:
        return h5py.File(path, "r")
    except OSError as e:
        reason = " ".join(str(e).split())[:200]
        raise WeightsError(f"{where}: not an HDF5 file ({reason}); expected a Keras weights file") from None


def _version_of(config: dict[str, Any], default: str) -> str:
    # a keras 3 config has "module" entries and inbound nodes as {"args", "kwargs"} records
    text = json.dumps(config.get("config", {}).get("layers", [])[:3])
    return default or ("3" if '"module"' in text or '"args"' in text else "2")


def _read_zip(path: Path) -> KerasFile:
    where = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise WeightsError(f"{where}: not a .keras archive ({e})") from None
    with archive:
        check_members(archive, where)
        names = set(archive.namelist())
        if "config.json" not in names:
            raise WeightsError(f"{where}: a .keras archive holds config.json; this one has {sorted(names)[:8]}")
        config = _parse_config(read_member(archive, "config.json", MAX_CONFIG_BYTES, where), where, "config.json")
        version = ""
        if "metadata.json" in names:
            text = read_member(archive, "metadata.json", MAX_METADATA_BYTES, where)
            metadata = parse_json(text, where, "metadata.json")
            version = str(metadata.get("keras_version", "")) if isinstance(metadata, dict) else ""
        if "model.weights.h5" not in names:
            sharded = "; sharded weights are not supported, save the model unsharded"
            raise WeightsError(
                f"{where}: no model.weights.h5 in the archive" + sharded * ("model.weights.json" in names)
            )
        assets = read_assets(archive, where)
        scratch = tempfile.TemporaryDirectory(prefix="attnzoo-keras-")
        target = Path(scratch.name) / "model.weights.h5"
        try:
            with open(target, "wb") as sink:
                stream_member(archive, archive.getinfo("model.weights.h5"), MAX_WEIGHTS_BYTES, where, sink)
        except BaseException:
            scratch.cleanup()
            raise
    handle = _h5(target, f"{where} (model.weights.h5)")
    if "layers" not in handle and "vars" not in handle:
        handle.close()
        scratch.cleanup()
        raise WeightsError(f"{where}: model.weights.h5 is not a keras 3 weights file (no 'layers' group)")
    weights = _Keras3Weights(handle, where)
    return KerasFile(path, "keras", _version_of(config, version), config, weights, [scratch, handle], assets)


def _read_legacy(path: Path) -> KerasFile:
    where = str(path)
    handle = _h5(path, where)
    try:
        raw = handle.attrs.get("model_config")
        if raw is None:
            raise WeightsError(
                f"{where}: this .h5 holds weights only (no model_config): convert a whole model from the file "
                f"model.save() wrote, or a config.json beside it; for one attention layer use "
                f"attnzoo.keras.load_keras_weights"
            )
        config = _parse_config(decode_attr(raw), where)
        version = decode_attr(handle.attrs.get("keras_version", ""))
        root = handle.get("model_weights", handle)
        if "layer_names" not in root.attrs:
            raise WeightsError(f"{where}: model_weights lists no layer_names; not a Keras model file")
    except BaseException:
        handle.close()
        raise
    return KerasFile(path, "h5", _version_of(config, version), config, _LegacyWeights(handle, where), [handle])


def _weights_beside(config_path: Path) -> Path:
    for candidate in (
        config_path.with_name("model.weights.h5"),
        config_path.with_name(config_path.stem + ".weights.h5"),
        config_path.with_suffix(".h5"),
    ):
        if candidate.is_file():
            return candidate
    raise WeightsError(
        f"{config_path}: no weights beside it (looked for model.weights.h5 and {config_path.stem}.weights.h5); "
        f"pass weights=PATH"
    )


def _read_json(path: Path, weights: Path | None, at_root: str | None = None, version: str = "") -> KerasFile:
    where = str(path)
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise WeightsError(f"{where}: {path.stat().st_size >> 20} MiB; a Keras config is kilobytes")
    config = _parse_config(path.read_bytes(), where)
    if isinstance(config.get("keras_version"), str):
        version = config["keras_version"]
    weights_path = Path(weights) if weights is not None else _weights_beside(path)
    handle = _h5(weights_path, str(weights_path))
    root = handle.get("model_weights", handle)
    store: Any
    if "layer_names" in root.attrs:
        store = _LegacyWeights(handle, str(weights_path))
    elif "layers" in handle or "vars" in handle:
        store = _Keras3Weights(handle, str(weights_path), at_root)
    else:
        handle.close()
        raise WeightsError(f"{weights_path}: neither a keras 3 .weights.h5 nor a legacy weights .h5")
    return KerasFile(path, "json", _version_of(config, version), config, store, [handle])


def _read_preset(folder: Path, weights: str | Path | None) -> KerasFile:
    """A folder keras-hub's ``save_to_preset`` wrote: the Backbone of config.json with model.weights.h5; or,
    where a task saved it (task.json) and attnzoo rebuilds that task, the task: its backbone's layers from
    model.weights.h5 (which holds them at its root), its head's from task.weights.h5 (a classifier's
    ``logits``), or none where the head holds no weights of its own (a causal or seq2seq LM's: no task.weights.h5).
    The Keras version is metadata.json's."""
    from attnzoo.keras.hub_families import hub_model_of, is_keras_hub_model
    from attnzoo.keras.hub_keras import keras_hub_installed

    version = ""
    if (folder / "metadata.json").is_file() and (folder / "metadata.json").stat().st_size < MAX_CONFIG_BYTES:
        metadata = parse_json((folder / "metadata.json").read_bytes(), str(folder), "metadata.json")
        if isinstance(metadata, dict) and isinstance(metadata.get("keras_version"), str):
            version = metadata["keras_version"]
    task, head = folder / "task.json", folder / "task.weights.h5"
    if task.is_file() and task.stat().st_size < MAX_CONFIG_BYTES:
        config = _parse_config(task.read_bytes(), str(task), "task.json")
        backbone = config["config"].get("backbone")
        name = backbone.get("config", {}).get("name") if isinstance(backbone, dict) else None
        found = hub_model_of(config)
        # a class keras-hub builds (hub_keras) is read with its head's weights file only
        built = found is not None or (is_keras_hub_model(config) and keras_hub_installed())
        # a head of no weights of its own: a causal or seq2seq LM's; through keras-hub, any task keras-hub saved
        # without task.weights.h5, which it writes only where the task has weights of its own
        tied = found[1].kind in ("causal_lm", "seq2seq_lm") if found is not None else built
        if isinstance(name, str) and built and (head.exists() or tied):
            given = Path(weights) if weights is not None else folder / "model.weights.h5"
            file = _read_json(task, given, at_root=name, version=version)
            if head.exists():
                file.weights = _TaskWeights(file.weights, _task_weights(head), name)
                file._handles.append(file.weights.head.root)
            return file
    if task.is_file():  # a task attnzoo does not read from a folder: never its backbone alone, unasked
        raise WeightsError(
            f"{folder}: the folder holds a keras-hub task (task.json"
            f"{', with its head in task.weights.h5' if head.exists() else ', without the task.weights.h5 of its head'}"
            f"), which attnzoo does not read from a preset folder; convert the task's own file "
            f"(task.save('model.keras')), or the backbone alone by its config.json ({folder / 'config.json'})"
        )
    return _read_json(folder / "config.json", Path(weights) if weights is not None else None, version=version)


def _task_weights(path: Path) -> _Keras3Weights:
    """task.weights.h5: the task's keras 3 weights file without its backbone's layers."""
    handle = _h5(path, str(path))
    if "layers" not in handle:
        handle.close()
        raise WeightsError(f"{path}: not a keras 3 weights file (no 'layers' group); expected a task's head weights")
    return _Keras3Weights(handle, str(path))


def read_keras_model(path: str | Path, *, weights: str | Path | None = None) -> KerasFile:
    """Open a whole Keras model (``.keras``, legacy ``.h5``, or ``config.json`` with its weights, or a folder
    holding those two, as keras-hub's ``save_to_preset`` writes).

    The returned :class:`KerasFile` keeps the weights file open until ``close()`` (it is a context
    manager). A file that is none of these is a ``WeightsError`` saying what was expected.
    """
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():  # a folder keras-hub's save_to_preset wrote
        return _read_preset(path, weights)
    if not path.is_file():
        raise WeightsError(f"Keras model file not found: looked for {path.resolve()}")
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"PK"):
        return _read_zip(path)
    if head.startswith(b"\x89HDF"):
        return _read_legacy(path)
    if head.lstrip()[:1] == b"{":
        return _read_json(path, Path(weights) if weights is not None else None)
    raise WeightsError(
        f"{path}: not a Keras model file; expected a .keras archive, a legacy .h5 written by model.save(), or a "
        f"config.json (with its .weights.h5)"
    )
