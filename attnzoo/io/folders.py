"""Saved model folders: ``attnzoo.save(model, DIR)`` and what ``attnzoo.load(DIR)`` reads.

A folder holds ``model.safetensors`` and ``config.yaml``: one record per save (name, factory, config and
the weights' sha256, and the files the model carries beside them, :mod:`attnzoo.io.carried`), the newest
last, so that a folder being replaced stays loadable by whichever record matches the file. A save never
mixes two models' files: the new folder is written beside the old one and swapped in; ``model_card=True``
adds a README.md for the Hub.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.atomic import (
    TEMP_PREFIX,
    atomic_write,
    clear_dead_siblings,
    commit,
    discard,
    fsync_dir,
    locked,
    stage,
    try_flock,
)
from attnzoo.io.carried import (
    FILES_KEY,
    carried_files,
    check_recorded_files,
    clear_dropped_files,
    commit_files,
    read_carried_files,
    refuse_foreign_files,
    stage_files,
)
from attnzoo.io.limits import LIMITS, limit, load_yaml, over_limit, read_bounded
from attnzoo.io.weights import (
    WEIGHTS_FILE,
    as_digests,
    decode_metadata,
    encode_metadata,
    expected_digest,
    plain_tensors,
    read_verified,
    sha256_file,
)

__all__ = [
    "save",
    "read_folder",
    "recorded_digests",
    "folder_records",
    "read_saved_folder",
    "parse_folder_records",
    "model_card_text",
    "CONFIG_FILE",
    "MAX_CONFIG_YAML",
    "MAX_YAML_NODES",
    "expanded_yaml_nodes",
    "as_path",
    "WEIGHTS_FILE",
]

CONFIG_FILE = "config.yaml"
MAX_CONFIG_YAML = LIMITS["ATTNZOO_MAX_CONFIG_BYTES"][0]  # the default; the limit itself is read at call time
MAX_YAML_NODES = 100_000  # nodes a hand-written config or recipe may expand into; theirs are dozens


def expanded_yaml_nodes(text: str, limit: int = MAX_YAML_NODES) -> int:
    """How many nodes a YAML document holds once its aliases (``*name``) are expanded, counted on the
    composed graph, where an alias is one shared node, so that counting costs what the text does (at most
    ``limit + 1``: a few hundred bytes of aliases of aliases expand into billions, a "billion laughs"; an
    alias inside its own anchor, into infinitely many). A document that is not YAML counts 0: its reader
    says what is wrong with it."""
    import yaml

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError):
        return 0
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(root, False)] if root is not None else []
    while stack:  # post-order without recursion: a deeply nested document cannot exhaust Python's stack
        node, children_done = stack.pop()
        children = [v for pair in node.value for v in pair] if isinstance(node, yaml.MappingNode) else []
        children = node.value if isinstance(node, yaml.SequenceNode) else children
        if children_done:
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            open_nodes.discard(id(node))
        elif id(node) not in sizes:
            if any(id(c) in open_nodes for c in children):  # an alias of an anchor that holds it: endless
                return limit + 1
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)] if root is not None else 0


def as_path(value: Any, what: str) -> Path:
    """A path argument (``str`` or ``os.PathLike``) as a ``Path``; anything else is a ``ConfigError`` that
    names the argument and what it takes."""
    if isinstance(value, (str, os.PathLike)) and str(value):
        return Path(value)
    shown = type(value).__name__ if not isinstance(value, str) else "an empty string"
    raise ConfigError(f"{what} takes a path (a str or pathlib.Path), got {shown}")


def parse_folder_records(text: str, where: Any) -> list[dict[str, Any]]:
    """The records of a saved folder's ``config.yaml`` text (see :func:`folder_records`); anything that is
    not one (not YAML, YAML aliases, an HTML page a captive portal served, a file past the limits of
    :mod:`attnzoo.io.limits`) is a ``WeightsError``. Parsed once, by PyYAML's C parser."""
    import re

    bound = limit("ATTNZOO_MAX_CONFIG_BYTES")
    if len(text) > bound // 4 and len(text.encode("utf-8")) > bound:  # 4 bytes at most per character
        raise over_limit("ATTNZOO_MAX_CONFIG_BYTES", f"is {len(text.encode('utf-8')):,} bytes", where)
    data = load_yaml(text, where)
    records = [data, *([data["previous"]] if isinstance(data, dict) and "previous" in data else [])]
    for record in records:
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("name"), str)
            or not isinstance(record.get("config"), dict)
            or not isinstance(record.get("sha256"), str)
        ):
            raise WeightsError(f"{where}: expected a mapping with name, factory, config and sha256")
        if not re.fullmatch(r"[0-9a-f]{64}", record["sha256"]):  # fullmatch: "$" would take a trailing newline
            raise WeightsError(
                f"{where}: sha256 {record['sha256']!r:.80} is not 64 lower-case hex digits (as sha256sum prints "
                f"them); the file was edited by hand: restore it"
            )
        check_recorded_files(record, where)
        _check_keys(record["config"], where)
    return [{k: v for k, v in r.items() if k != "previous"} for r in records]


def _check_keys(config: dict[str, Any], where: Any) -> None:
    """Refuse a converted Keras graph's layer keyed by something other than text (YAML reads ``7:`` as the
    int 7), naming it: attnzoo writes every layer key as a string, as the weights' JSON metadata holds it,
    so such a key was edited by hand (and failed later, comparing the two, in words of Python's own)."""
    graph = config.get("graph")
    layers = graph.get("layers") if isinstance(graph, dict) else None
    for key, spec in layers.items() if isinstance(layers, dict) else ():
        if not isinstance(key, str):
            op = spec.get("op") if isinstance(spec, dict) else None
            raise WeightsError(
                f"{where}: config.graph.layers has a layer keyed {key!r} ({type(key).__name__}, holding op "
                f"{str(op)!r}); attnzoo writes each layer's key as text: quote it ({str(key)!r})"
            )


def folder_records(directory: str | Path) -> list[dict[str, Any]]:
    """The records of a saved folder's ``config.yaml``: the current one and, while an overwrite is under
    way (or was killed), the previous one. Each holds name, factory, config and sha256."""
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        lora = [n for n in ("adapter", "merged") if (directory / n).is_dir() and (directory / "base").is_dir()]
        said = (
            f"; it holds a LoRA run of attnzoo train (base/ and {lora[0]}/), a Hugging Face model and its "
            f"adapters: load them with transformers and peft (docs/keras-hub-training.md, LoRA)"
            if lora
            else ""
        )
        raise WeightsError(f"{directory} is not a saved attnzoo model: {CONFIG_FILE} not found in it{said}")
    try:
        return parse_folder_records(read_bounded(config_path, config_path), config_path)
    except WeightsError as e:
        raise WeightsError(
            f"{e}; restore it, or load the weights alone with attnzoo.load({str(directory / WEIGHTS_FILE)!r}, "
            f"sha256=...)"
        ) from None


def recorded_digests(path: Path) -> tuple[str, ...]:
    """The digests recorded for a weights file: its ``FILE.sha256``, or, for the ``model.safetensors`` of a
    saved folder, its ``config.yaml`` (the record, and during an overwrite the previous one)."""
    found = expected_digest(path)
    if not found and path.name == WEIGHTS_FILE and (path.parent / CONFIG_FILE).is_file():
        found = tuple(r["sha256"] for r in folder_records(path.parent) if isinstance(r.get("sha256"), str))
    return found


def read_folder(directory: str | Path) -> dict[str, Any]:
    """The current record of a saved model folder's ``config.yaml`` as a plain dict."""
    return folder_records(directory)[0]


def _same(a: Any, b: Any) -> bool:
    """Equal, or equal as JSON (a NaN in a config, Masking's mask_value, is not equal to itself)."""
    return bool(a == b) or json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def read_saved_folder(
    directory: str | Path, sha256: str | None = None
) -> tuple[dict[str, Any], dict[str, str], dict[str, bytes]]:
    """Tensors, metadata and carried files (:mod:`attnzoo.io.carried`) of a saved folder, checked against the
    record of ``config.yaml`` that describes them: its digest, and its name, factory and config against the
    file's own metadata."""
    directory = Path(directory)
    records = folder_records(directory)
    tensors, metadata, actual = read_verified(
        directory / WEIGHTS_FILE, as_digests(sha256) or tuple(r["sha256"] for r in records), "weights"
    )
    record = next((r for r in records if r["sha256"] == actual), records[0])
    decoded = decode_metadata(metadata, where=directory / WEIGHTS_FILE)
    for key in ("name", "factory", "config"):
        if decoded[key] is not None and record.get(key) is not None and not _same(decoded[key], record[key]):
            raise WeightsError(
                f"{directory}: {CONFIG_FILE} and {WEIGHTS_FILE} disagree about the {key}: {CONFIG_FILE} says "
                f"{_short(record[key])}, the weights were saved with {_short(decoded[key])}; {CONFIG_FILE} was "
                f"edited by hand or comes from another model: restore it, or save the model again"
            )
    return tensors, metadata, read_carried_files(directory, record)


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clear_debris(directory: Path) -> None:
    """Remove what killed writers left behind (called under the folder's lock, so no live writer's)."""
    for entry in directory.iterdir():
        if entry.name.startswith(TEMP_PREFIX) and entry.is_file():
            entry.unlink(missing_ok=True)


def _write_model_files(
    directory: Path,
    plain: Mapping[str, Any],
    metadata: Mapping[str, str],
    record: dict[str, Any],
    previous: dict[str, Any] | None,
    files: Mapping[str, bytes],
) -> None:
    """The in-place protocol: weights and carried files to temp files; config.yaml describing both models;
    the weights, then the files, renamed into place; config.yaml describing the new one; the files only the
    previous model carried removed. Every step is one atomic rename."""
    from safetensors.torch import save_file

    tmp = stage(directory / WEIGHTS_FILE, lambda t: save_file(dict(plain), t, metadata=dict(metadata)))
    staged: dict[str, tuple[str, str]] = {}
    try:
        record["sha256"] = sha256_file(tmp)
        staged = stage_files(directory, files)
        if staged:
            record[FILES_KEY] = {name: digest for name, (_, digest) in staged.items()}
        if previous is not None:  # both models described while the weights are swapped
            both = {**record, "previous": previous}
            atomic_write(directory / CONFIG_FILE, lambda t: Path(t).write_text(_yaml(both)))
    except BaseException:
        for path in (tmp, *(t for t, _ in staged.values())):
            discard(path)
        raise
    commit(tmp, directory / WEIGHTS_FILE)
    commit_files(directory, staged)
    atomic_write(directory / CONFIG_FILE, lambda t: Path(t).write_text(_yaml(record)))
    clear_dropped_files(directory, previous, record)


def _visible(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if not p.name.startswith(TEMP_PREFIX)]


def model_card_text(record: Mapping[str, Any], provenance: Mapping[str, Any] | None = None) -> str:
    """A README.md for a saved folder (the Hugging Face model-card layout): what it is, how to load it,
    its config, and the metrics, data and licence of its weights where they are known."""
    provenance = dict(provenance or {})
    license_text = str(provenance.get("license") or "")
    front = ["---", "library_name: attnzoo", f"tags: [attnzoo, {record['name']}]"]
    if license_text:
        front.append(f"license: other  # {license_text}")
    front.append("---")
    lines = [
        *front,
        "",
        f"# {record['name']}",
        "",
        f"An attnzoo model (`{record['factory']}`), saved with `attnzoo.save`. sha256 of `{WEIGHTS_FILE}`: "
        f"`{record['sha256']}` (also in `{CONFIG_FILE}`, and checked on every load).",
        "",
        "## Load it",
        "",
        "```python",
        "import attnzoo",
        "",
        'model = attnzoo.create("hf-hub:ORG/REPO")   # from the Hub, or:',
        'model = attnzoo.load("path/to/this/folder")',
        "```",
        "",
        "## Config",
        "",
        "| key | value |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | `{v!r}` |" for k, v in record["config"].items()]
    for key, title in (("dataset", "Data"), ("data", "Data source"), ("license", "Licence"), ("recipe", "Recipe")):
        if provenance.get(key):
            lines += ["", f"## {title}", "", str(provenance[key])]
    if provenance.get("metrics"):
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in dict(provenance["metrics"]).items()]
    return "\n".join(lines) + "\n"


def save(model: Any, directory: str | Path, *, overwrite: bool = False, model_card: bool = False) -> Path:
    """Save a model built by ``attnzoo.create`` (or ``attnzoo.load``) to a folder.

    The folder gets ``model.safetensors`` (config and provenance in its metadata) and ``config.yaml``, and
    the files the model carries (its ``attnzoo_files``: a converted keras-hub model's tokenizer), named with
    their sha256 in the record; a file of the same name that the folder's model did not write is refused.
    A folder that already holds a model is refused unless ``overwrite=True``, and so is a non-empty
    folder of other files (with ``overwrite=True`` those files are left alone). Nothing a user saved is
    replaced without being asked.

    Crash safety, whatever instant the process is killed at:

    * a new (or empty) folder is written as a hidden temporary folder beside it and renamed into place
      in one step: the folder holds the whole model or does not exist;
    * an existing model is replaced in place: the new weights go to a temporary file, ``config.yaml``
      then describes the new model and the previous one, the weights are renamed into place, and the
      previous record is dropped; each step is one atomic rename, so the folder always loads the old
      model or the new one.

    Temporary files and folders of killed saves are cleared by the next save; concurrent savers of one
    folder take turns (a lock on the folder), and a saver that finds a model appeared meanwhile fails
    clearly unless it may overwrite.

    ``model_card=True`` also writes a README.md (what the model is, how to load it, its config, and the
    metrics, data and licence of pretrained weights), so that the folder can be pushed to the Hugging Face
    Hub as it is and loaded with ``attnzoo.create("hf-hub:org/repo")``.

    A model whose lazy sizes are not yet known (no forward yet, no sizes given) cannot be saved,
    because its parameters do not exist yet.
    """
    info = getattr(model, "attnzoo_config", None)
    if not isinstance(info, Mapping) or "name" not in info:
        raise WeightsError(
            "save() needs a model built by attnzoo.create() or attnzoo.load(): it records the name and config "
            "that rebuild it; register your own module with attnzoo.register() and create it from there"
        )
    from torch.nn.parameter import is_lazy

    state = model.state_dict()
    lazy = [k for k, v in state.items() if is_lazy(v)]
    if lazy:
        raise WeightsError(
            f"cannot save {info['name']!r} yet: {', '.join(lazy[:3])} have no size until the first forward; "
            "run one batch through it first or create it with its sizes given"
        )
    meta_tensors = [k for k, v in state.items() if v.device.type == "meta"]
    if meta_tensors:
        raise WeightsError(
            f"cannot save {info['name']!r}: {', '.join(meta_tensors[:3])} are on the meta device (no data)"
        )
    directory = as_path(directory, "save(model, directory)")
    if directory.exists() and not directory.is_dir():
        raise WeightsError(f"{directory} exists and is not a folder; save() writes a folder")
    extra = dict(getattr(model, "attnzoo_metadata", None) or {})
    metadata = encode_metadata(info["name"], info["factory"], info["config"], extra)
    plain = plain_tensors(state)
    files = carried_files(model)
    record = {"name": info["name"], "factory": info["factory"], "config": dict(info["config"])}
    if not directory.exists() or not _visible(directory):
        if _save_new_folder(directory, plain, metadata, record, files):
            if model_card:
                _write_card(directory, record, extra)
            return directory
        if not overwrite:
            raise WeightsError(
                f"{directory}: another process saved a model there meanwhile; pass overwrite=True to replace it"
            )
    with locked(directory):
        _clear_debris(directory)
        present = _visible(directory)
        if not overwrite and present:
            what = "already holds a saved model" if {CONFIG_FILE, WEIGHTS_FILE} & set(present) else "is not empty"
            raise WeightsError(
                f"{directory} {what}; pass overwrite=True to replace its model (other files in it are left alone)"
            )
        previous = None
        if (directory / CONFIG_FILE).is_file() and (directory / WEIGHTS_FILE).is_file():
            try:
                previous = read_folder(directory)
            except WeightsError:
                previous = None  # an unreadable config.yaml protects nothing
        refuse_foreign_files(directory, files, previous)
        _write_model_files(directory, plain, metadata, record, previous, files)
        if model_card:
            _write_card(directory, record, extra)
    return directory


def _write_card(directory: Path, record: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    """README.md beside the model; pretrained weights' provenance (metrics, data, licence) comes with
    the model's metadata, where ``attnzoo.create`` put it."""
    provenance = extra.get("provenance") if isinstance(extra.get("provenance"), Mapping) else {}
    atomic_write(directory / "README.md", lambda t: Path(t).write_text(model_card_text(record, provenance)))


def _save_new_folder(
    directory: Path,
    plain: Mapping[str, Any],
    metadata: Mapping[str, str],
    record: dict[str, Any],
    files: Mapping[str, bytes],
) -> bool:
    """Write the model into a temporary folder beside ``directory`` and rename it into place. False when
    ``directory`` gained files meanwhile (another saver won); the temporary folder is then removed."""
    import shutil
    import uuid

    directory = Path(os.path.abspath(directory))  # "." or "x/.." has no name of its own to write a sibling by
    directory.parent.mkdir(parents=True, exist_ok=True)
    clear_dead_siblings(directory)
    tmp = directory.parent / f".{directory.name}{TEMP_PREFIX}{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    fd = os.open(tmp, os.O_RDONLY) if os.name != "nt" else None
    try:
        if fd is not None:
            try_flock(fd, blocking=True)  # marks it live; the lock moves with the folder when renamed
        _write_model_files(tmp, plain, metadata, record, None, files)
        fsync_dir(tmp)
        try:
            os.rename(tmp, directory)  # replaces a missing or empty folder, atomically
        except OSError:
            if directory.is_dir() and _visible(directory):
                return False
            raise
        fsync_dir(directory.parent)
        return True
    finally:
        if fd is not None:
            os.close(fd)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _yaml(data: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(data), sort_keys=False)
