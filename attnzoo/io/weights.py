"""Weights on disk: safetensors only, every file's sha256 checked on every load, nothing overwritten.

A weights file carries what is needed to rebuild its model in the safetensors metadata (string keys):
``attnzoo.name``, ``attnzoo.factory``, ``attnzoo.config`` (JSON) and any extra JSON entries such as a
vocabulary or label names under ``attnzoo.meta.<key>``. A saved model folder holds ``model.safetensors``
and ``config.yaml`` (name, factory, config, and the file's sha256).

A file's expected digest comes from its model card, its folder's ``config.yaml``, a ``FILE.sha256``
file next to it (``sha256sum`` format), or the caller; a file whose digest is unknown is refused.
Files are read once: the bytes are hashed and then deserialised from memory, so what is verified is
exactly what is loaded. Nothing here knows any particular layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnzoo.errors import WeightsError

__all__ = [
    "sha256_file",
    "read_weights",
    "write_weights",
    "expected_digest",
    "save",
    "read_folder",
    "folder_records",
    "read_saved_folder",
    "parse_folder_records",
    "atomic_write_text",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "encode_metadata",
    "decode_metadata",
]

CONFIG_FILE = "config.yaml"
MAX_CONFIG_YAML = 64 << 20  # a saved model's config.yaml is kilobytes (a converted Keras graph: hundreds)
WEIGHTS_FILE = "model.safetensors"
_META_PREFIX = "attnzoo.meta."
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encode_metadata(
    name: str, factory: str, config: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Safetensors metadata (str -> str) that lets ``attnzoo.load(file)`` rebuild the model."""
    meta = {
        "format": "pt",
        "attnzoo.version": "1",
        "attnzoo.name": name,
        "attnzoo.factory": factory,
        "attnzoo.config": json.dumps(dict(config), sort_keys=True),
    }
    for key, value in (extra or {}).items():
        meta[_META_PREFIX + key] = json.dumps(value)
    return meta


def decode_metadata(meta: Mapping[str, str], *, where: Any = "weights file") -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`: ``{"name", "factory", "config", "extra"}``, as plain JSON
    data (never interpreted: ``${...}`` in a value stays a string)."""

    def parse(key: str) -> Any:
        try:
            return json.loads(meta[key])
        except ValueError as e:
            raise WeightsError(
                f"{where}: metadata {key!r} is not valid JSON ({e}); the file was not written by attnzoo or was edited"
            ) from None

    config = parse("attnzoo.config") if "attnzoo.config" in meta else None
    if config is not None and not isinstance(config, dict):
        raise WeightsError(f"{where}: metadata 'attnzoo.config' is not a mapping of config values")
    out: dict[str, Any] = {
        "name": meta.get("attnzoo.name"),
        "factory": meta.get("attnzoo.factory"),
        "config": config,
        "extra": {},
    }
    for key in meta:
        if key.startswith(_META_PREFIX):
            out["extra"][key[len(_META_PREFIX) :]] = parse(key)
    return out


def _header_metadata(data: bytes, path: Path) -> dict[str, str]:
    try:
        (length,) = struct.unpack("<Q", data[:8])
        if length > len(data) - 8:
            raise ValueError(f"header of {length} bytes in a file of {len(data)}")
        header = json.loads(data[8 : 8 + length])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("__metadata__ is not a mapping of strings")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise WeightsError(f"{path}: not a safetensors file ({e}); attnzoo reads only .safetensors weights") from None
    return dict(meta)


def _digests(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value.lower(),)
    return tuple(v.lower() for v in value if v)


def expected_digest(path: Path) -> tuple[str, ...]:
    """The digests recorded next to a file: ``FILE.sha256`` (one or more ``sha256sum`` lines) or its
    folder's ``config.yaml`` (the record, and during an overwrite the previous one)."""
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        lines = [line.split() for line in sidecar.read_text(errors="replace").splitlines()]
        return tuple(parts[0].lower() for parts in lines if parts and _SHA256.match(parts[0].lower()))
    folder_config = path.parent / CONFIG_FILE
    if path.name == WEIGHTS_FILE and folder_config.is_file():
        return tuple(r["sha256"] for r in folder_records(path.parent) if isinstance(r.get("sha256"), str))
    return ()


def read_weights(
    path: str | Path, *, sha256: str | Iterable[str] | None, what: str = "weights"
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read a safetensors file after checking its full sha256; returns ``(tensors, metadata)``.

    ``sha256`` is the expected digest (or several acceptable ones); None looks for one next to the file
    (see module docstring). A missing file, an unknown or wrong digest, or an unreadable file is a
    ``WeightsError``.
    """
    tensors, metadata, _ = _read_verified(Path(path), _digests(sha256), what)
    return tensors, metadata


def _read_verified(path: Path, expected: tuple[str, ...], what: str) -> tuple[dict[str, Any], dict[str, str], str]:
    from safetensors import SafetensorError
    from safetensors.torch import load as load_bytes

    if not path.is_file():
        raise WeightsError(f"{what} file not found: looked for {path.resolve()}")
    if path.suffix != ".safetensors":
        raise WeightsError(f"{path.name}: attnzoo loads only .safetensors weights (no pickle); convert the file first")
    expected = expected or expected_digest(path)
    if not expected:
        raise WeightsError(
            f"{path}: no sha256 is known for this file, and attnzoo checks every load; pass sha256=..., or "
            f"write it next to the file: sha256sum {path.name} > {path.name}.sha256"
        )
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual not in expected:
        raise WeightsError(
            f"{path}: sha256 mismatch, expected {' or '.join(expected)} but the file has {actual}; the file is "
            f"corrupted, truncated or not the one its card describes (nothing was loaded)"
        )
    metadata = _header_metadata(data, path)
    try:
        tensors = load_bytes(data)
    except SafetensorError as e:
        raise WeightsError(f"{path}: cannot read it as safetensors ({e})") from None
    return tensors, metadata, actual


# -- writing ------------------------------------------------------------------------------------------------
_TEMP_PREFIX = ".attnzoo-tmp-"  # what a killed writer may leave behind; cleared by the next save


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open a directory; its renames are durable enough
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _stage(path: Path, write) -> str:
    """Write ``path``'s next content into a temporary file beside it, flushed to disk; returns its name.
    Nothing is visible at ``path`` until :func:`_commit`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; a saved model is an ordinary file
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _commit(tmp: str, path: Path) -> None:
    """Rename a staged file into place (atomic) and make the rename durable."""
    try:
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    if os.path.exists(tmp):
        os.unlink(tmp)


def _atomic_write(path: Path, write) -> None:
    """A reader sees the old file or the new one, never a half-written one, whenever the writer is killed."""
    _commit(_stage(path, write), path)


def _plain(tensors: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def write_weights(
    tensors: Mapping[str, Any],
    path: str | Path,
    *,
    metadata: Mapping[str, str] | None = None,
    overwrite: bool = False,
    sidecar: bool = True,
) -> str:
    """Write tensors to a safetensors file (plus ``FILE.sha256``) and return the file's sha256.

    Refuses to replace an existing file unless ``overwrite=True``. Tensors that share memory (tied
    weights) are written as separate copies, which safetensors requires. Whenever the writer is killed,
    the file and its sidecar agree: while a file is replaced, the sidecar lists both digests.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not overwrite:
        raise WeightsError(f"{path} already exists; pass overwrite=True (or --overwrite) to replace it")
    if path.suffix != ".safetensors":
        raise WeightsError(
            f"{path.name}: attnzoo writes weights as .safetensors files (and loads nothing else); name the "
            f"output NAME.safetensors"
        )
    plain = _plain(tensors)
    side = path.with_name(path.name + ".sha256")
    if sidecar and side.exists() and not path.exists() and not overwrite:  # someone's own digest file
        raise WeightsError(
            f"{side} already exists (and {path.name} does not); it is not attnzoo's to replace: move it, or pass "
            f"overwrite=True (--overwrite)"
        )
    with _locked(path.parent):
        tmp = _stage(path, lambda t: save_file(plain, t, metadata=dict(metadata or {})))
        try:
            digest = sha256_file(tmp)
            old = expected_digest(path) if path.exists() else ()
            if sidecar and old:  # both digests while the file is replaced
                lines = "".join(f"{d}  {path.name}\n" for d in (digest, *old))
                _atomic_write(side, lambda t: Path(t).write_text(lines))
        except BaseException:
            _discard(tmp)
            raise
        _commit(tmp, path)
        if sidecar:
            _atomic_write(side, lambda t: Path(t).write_text(f"{digest}  {path.name}\n"))
    return digest


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _try_flock(fd: int, blocking: bool) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows: no flock; saves there are not serialised
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


@contextmanager
def _locked(directory: Path, timeout: float = 120.0) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (flock on the folder itself: no lock file is left behind,
    and a killed holder's lock goes with it). Another writer waits up to ``timeout`` seconds, then fails."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders: no lock
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while not _try_flock(fd, blocking=False):
            if time.monotonic() > deadline:
                raise WeightsError(
                    f"{directory}: another process has been writing there for over "
                    f"{timeout:.0f} s; try again when it has finished"
                )
            time.sleep(0.05)
        yield  # closing the descriptor releases the lock
    finally:
        os.close(fd)


# -- saved folders -----------------------------------------------------------------------------------------
def parse_folder_records(text: str, where: Any) -> list[dict[str, Any]]:
    """The records of a saved folder's ``config.yaml`` text (see :func:`folder_records`); anything that is
    not one (not YAML, YAML aliases, an HTML page a captive portal served) is a ``WeightsError``."""
    import yaml

    if len(text) > MAX_CONFIG_YAML:
        raise WeightsError(f"{where}: {len(text) >> 20} MiB; a saved model's config.yaml is kilobytes")
    try:
        # save() writes no anchors; a file with aliases was made by hand, and a few hundred bytes of them
        # can expand into billions of nodes (a YAML "billion laughs")
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise WeightsError(
                f"{where}: uses YAML aliases (*name), which attnzoo.save never writes; refusing to "
                f"expand it (restore the file, or load the weights alone with sha256=...)"
            )
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        reason = " ".join(str(e).split())[:200]
        raise WeightsError(f"{where}: not valid YAML ({reason})") from None
    records = [data, *([data["previous"]] if isinstance(data, dict) and "previous" in data else [])]
    for record in records:
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("name"), str)
            or not isinstance(record.get("config"), dict)
            or not isinstance(record.get("sha256"), str)
        ):
            raise WeightsError(f"{where}: expected a mapping with name, factory, config and sha256")
    return [{k: v for k, v in r.items() if k != "previous"} for r in records]


def folder_records(directory: str | Path) -> list[dict[str, Any]]:
    """The records of a saved folder's ``config.yaml``: the current one and, while an overwrite is under
    way (or was killed), the previous one. Each holds name, factory, config and sha256."""
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise WeightsError(f"{directory} is not a saved attnzoo model: {CONFIG_FILE} not found in it")
    try:
        text = config_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise WeightsError(f"{config_path}: not UTF-8 text ({e.reason})") from None
    try:
        return parse_folder_records(text, config_path)
    except WeightsError as e:
        raise WeightsError(
            f"{e}; restore it, or load the weights alone with attnzoo.load({str(directory / WEIGHTS_FILE)!r}, "
            f"sha256=...)"
        ) from None


def atomic_write_text(path: str | Path, text: str) -> None:
    """``path`` replaced by ``text`` in one rename: a reader sees the old content or the new, never a part."""
    _atomic_write(Path(path), lambda t: Path(t).write_text(text, encoding="utf-8"))


def read_folder(directory: str | Path) -> dict[str, Any]:
    """The current record of a saved model folder's ``config.yaml`` as a plain dict."""
    return folder_records(directory)[0]


def read_saved_folder(directory: str | Path, sha256: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Tensors and metadata of a saved folder, checked against the record of ``config.yaml`` that
    describes them: its digest, and its name, factory and config against the file's own metadata."""
    directory = Path(directory)
    records = folder_records(directory)
    tensors, metadata, actual = _read_verified(
        directory / WEIGHTS_FILE, _digests(sha256) or tuple(r["sha256"] for r in records), "weights"
    )
    record = next((r for r in records if r["sha256"] == actual), records[0])
    decoded = decode_metadata(metadata, where=directory / WEIGHTS_FILE)
    for key in ("name", "factory", "config"):
        if decoded[key] is not None and record.get(key) is not None and decoded[key] != record[key]:
            raise WeightsError(
                f"{directory}: {CONFIG_FILE} and {WEIGHTS_FILE} disagree about the {key}: {CONFIG_FILE} says "
                f"{_short(record[key])}, the weights were saved with {_short(decoded[key])}; {CONFIG_FILE} was "
                f"edited by hand or comes from another model: restore it, or save the model again"
            )
    return tensors, metadata


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clear_debris(directory: Path) -> None:
    """Remove what killed writers left behind (called under the folder's lock, so no live writer's)."""
    for entry in directory.iterdir():
        if entry.name.startswith(_TEMP_PREFIX) and entry.is_file():
            entry.unlink(missing_ok=True)


def _clear_dead_siblings(directory: Path) -> None:
    """Remove the temporary folders of killed saves of ``directory``: each live one is locked by its writer."""
    import shutil

    for entry in directory.parent.glob(f".{directory.name}{_TEMP_PREFIX}*"):
        try:
            fd = os.open(entry, os.O_RDONLY)
        except OSError:
            continue
        try:
            if _try_flock(fd, blocking=False):
                shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


def _write_model_files(
    directory: Path,
    plain: Mapping[str, Any],
    metadata: Mapping[str, str],
    record: dict[str, Any],
    previous: dict[str, Any] | None,
) -> None:
    """The in-place protocol: weights to a temp file; config.yaml describing both models; the weights
    renamed into place; config.yaml describing the new one. Every step is one atomic rename."""
    from safetensors.torch import save_file

    tmp = _stage(directory / WEIGHTS_FILE, lambda t: save_file(dict(plain), t, metadata=dict(metadata)))
    try:
        record["sha256"] = sha256_file(tmp)
        if previous is not None:  # both models described while the weights are swapped
            both = {**record, "previous": previous}
            _atomic_write(directory / CONFIG_FILE, lambda t: Path(t).write_text(_yaml(both)))
    except BaseException:
        _discard(tmp)
        raise
    _commit(tmp, directory / WEIGHTS_FILE)
    _atomic_write(directory / CONFIG_FILE, lambda t: Path(t).write_text(_yaml(record)))


def _visible(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if not p.name.startswith(_TEMP_PREFIX)]


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

    The folder gets ``model.safetensors`` (config and provenance in its metadata) and ``config.yaml``.
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
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise WeightsError(f"{directory} exists and is not a folder; save() writes a folder")
    extra = dict(getattr(model, "attnzoo_metadata", None) or {})
    metadata = encode_metadata(info["name"], info["factory"], info["config"], extra)
    plain = _plain(state)
    record = {"name": info["name"], "factory": info["factory"], "config": dict(info["config"])}
    if not directory.exists() or not _visible(directory):
        if _save_new_folder(directory, plain, metadata, record):
            if model_card:
                _write_card(directory, record, extra)
            return directory
        if not overwrite:
            raise WeightsError(
                f"{directory}: another process saved a model there meanwhile; pass overwrite=True to replace it"
            )
    with _locked(directory):
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
        _write_model_files(directory, plain, metadata, record, previous)
        if model_card:
            _write_card(directory, record, extra)
    return directory


def _write_card(directory: Path, record: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    """README.md beside the model; pretrained weights' provenance (metrics, data, licence) comes with
    the model's metadata, where ``attnzoo.create`` put it."""
    provenance = extra.get("provenance") if isinstance(extra.get("provenance"), Mapping) else {}
    _atomic_write(directory / "README.md", lambda t: Path(t).write_text(model_card_text(record, provenance)))


def _save_new_folder(
    directory: Path, plain: Mapping[str, Any], metadata: Mapping[str, str], record: dict[str, Any]
) -> bool:
    """Write the model into a temporary folder beside ``directory`` and rename it into place. False when
    ``directory`` gained files meanwhile (another saver won); the temporary folder is then removed."""
    import shutil
    import uuid

    directory.parent.mkdir(parents=True, exist_ok=True)
    _clear_dead_siblings(directory)
    tmp = directory.parent / f".{directory.name}{_TEMP_PREFIX}{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    fd = os.open(tmp, os.O_RDONLY) if os.name != "nt" else None
    try:
        if fd is not None:
            _try_flock(fd, blocking=True)  # marks it live; the lock moves with the folder when renamed
        _write_model_files(tmp, plain, metadata, record, None)
        _fsync_dir(tmp)
        try:
            os.rename(tmp, directory)  # replaces a missing or empty folder, atomically
        except OSError:
            if directory.is_dir() and _visible(directory):
                return False
            raise
        _fsync_dir(directory.parent)
        return True
    finally:
        if fd is not None:
            os.close(fd)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _yaml(data: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(data), sort_keys=False)
