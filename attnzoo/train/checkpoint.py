"""The trainer's checkpoint: one atomic unit per epoch, so that ``--resume`` continues from the last
complete epoch whenever the trainer was killed.

    RUN/checkpoint/trainer.json          the pointer: the trainer's state, the epoch folder, its digests
    RUN/checkpoint/epoch-0002/           model, optimizer (+ random state), best and average weights
    RUN/checkpoint/epoch-0002/state.json the same record, kept with the files it describes

An epoch is saved by writing a new epoch folder in full, then replacing ``trainer.json`` in one rename,
then removing the older epoch folders. Killed before the rename, the pointer still names the previous
epoch, whose folder is untouched; killed after it, the new one is complete. Every file's sha256 is in the
record and is checked on resume. If ``trainer.json`` itself is unreadable (edited by hand, a disk
fault), resume falls back to the newest epoch folder whose record and files check out, and says so.

The record also pins the data the run trains on (:meth:`describe_data` of the task: file names and
sha256 digests, or the pinned packages), so a resume on other data is refused rather than continued.
Checkpoints hold no pickle: tensors in safetensors, the rest in JSON. A checkpoint written before this
layout (the files directly in ``checkpoint/``) still resumes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.atomic import atomic_write_text, fsync_dir
from attnzoo.io.weights import read_weights, write_weights

__all__ = ["save_checkpoint", "load_checkpoint", "read_record", "checkpoint_file", "POINTER"]

POINTER = "trainer.json"
RECORD = "state.json"
FILES = ("model", "optimizer", "best", "average")
_PREFIX = "epoch-"


def _epoch_folder(folder: Path, epoch: int) -> Path:
    return folder / f"{_PREFIX}{epoch:04d}"


def _optimizer_parts(optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The optimizer's state split into tensors (safetensors) and the rest (JSON), with the random state."""
    opt = optimizer.state_dict()
    tensors = {"rng": torch.get_rng_state()}
    scalars: dict[str, Any] = {"param_groups": opt["param_groups"], "state": {}}
    for index, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value
            else:
                scalars["state"].setdefault(str(index), {})[key] = value
    return tensors, scalars


def save_checkpoint(
    folder: Path,
    model,
    optimizer,
    state: dict[str, Any],
    *,
    best: dict[str, torch.Tensor] | None = None,
    average: dict[str, torch.Tensor] | None = None,
) -> None:
    """Save epoch ``state["epoch"]`` as one unit. ``best``: this epoch's weights when it is the best so far
    (otherwise the previous checkpoint's best is carried over, by a hard link where the disk allows)."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = _current_folder(folder)
    target = _epoch_folder(folder, int(state["epoch"]))
    if target.is_symlink() or target.is_file():
        raise ConfigError(f"{target} is not a folder attnzoo train wrote; move it away and resume")
    if target.exists():  # a folder of a save that was killed before its pointer: never pointed to
        shutil.rmtree(target)
    target.mkdir()
    tensors, scalars = _optimizer_parts(optimizer)
    digests = {
        "model": write_weights(model.state_dict(), target / "model.safetensors", sidecar=False),
        "optimizer": write_weights(tensors, target / "optimizer.safetensors", sidecar=False),
    }
    if best is not None:
        digests["best"] = write_weights(best, target / "best.safetensors", sidecar=False)
    elif previous is not None and (previous[0] / "best.safetensors").is_file():
        _carry(previous[0] / "best.safetensors", target / "best.safetensors")
        digests["best"] = previous[1]["files"]["best"]
    if average is not None:
        digests["average"] = write_weights(average, target / "average.safetensors", sidecar=False)
    record = {**state, "optimizer": scalars, "folder": target.name, "files": digests}
    text = json.dumps(record, indent=1)
    (target / RECORD).write_text(text)
    _fsync_folder(target)
    atomic_write_text(folder / POINTER, text)  # the commit point
    _remove_all_but(folder, target)


def _carry(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # no hard links here (another file system): a copy
        shutil.copyfile(source, target)


def _fsync_folder(path: Path) -> None:
    """Make durable, before the pointer names the folder, what ``write_weights`` did not already (it syncs
    each file it writes): the record, a best file carried over by copy, and the folder's own entries."""
    for file in (path / RECORD, path / "best.safetensors"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_dir(path)


def _remove_all_but(folder: Path, keep: Path) -> None:
    """Older epoch folders, and the files of the layout before epoch folders; nothing else in the folder."""
    for entry in folder.iterdir():
        if entry.name.startswith(_PREFIX) and entry != keep and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
    for name in FILES:
        for legacy in (folder / f"{name}.safetensors", folder / f"{name}.safetensors.sha256"):
            if legacy.is_file() and not legacy.is_symlink():
                legacy.unlink()


def _checked(record: Any, where: Path) -> dict[str, Any]:
    """The record if it has the fields resume reads, with the types it reads them as."""

    def damaged(why: str) -> ConfigError:
        return ConfigError(
            f"{where} is damaged ({why}); it is not a checkpoint --resume can continue: start the run again "
            f"with --overwrite, or restore the file"
        )

    if not isinstance(record, dict):
        raise damaged(f"a JSON {type(record).__name__}, not an object")
    for key, kind in (("epoch", int), ("epochs", int), ("history", list), ("optimizer", dict)):
        if key not in record:
            raise damaged(f"no {key!r}")
        if not isinstance(record[key], kind) or isinstance(record[key], bool):
            raise damaged(f"{key!r} is {record[key]!r:.40}, not a{'n' if kind is int else ''} {kind.__name__}")
    if record["epoch"] < 0 or record["epochs"] < 1:
        raise damaged(f"epoch {record['epoch']} of {record['epochs']}")
    optimizer = record["optimizer"]
    if not isinstance(optimizer.get("param_groups"), list) or not isinstance(optimizer.get("state"), dict):
        raise damaged("the optimizer's param_groups or state is missing")
    if "files" in record and not (isinstance(record["files"], dict) and isinstance(record.get("folder"), str)):
        raise damaged("its epoch folder or file digests are malformed")
    return record


def _parse(path: Path) -> dict[str, Any]:
    try:
        return _checked(json.loads(path.read_text(encoding="utf-8")), path)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"{path} is damaged (not JSON: {e}); start the run again with --overwrite, or restore the file"
        ) from None


def _current_folder(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The epoch folder the pointer names and its record, or None (no pointer, or an older layout)."""
    pointer = folder / POINTER
    if not pointer.is_file():
        return None
    try:
        record = _parse(pointer)
    except ConfigError:
        return None
    if "folder" not in record:
        return None
    return folder / record["folder"], record


def read_record(folder: Path) -> tuple[dict[str, Any], str | None]:
    """The record of the last complete checkpoint in ``folder`` and a note when it is not the pointer's
    (the pointer was unreadable and an epoch folder's own record was taken)."""
    pointer = folder / POINTER
    try:
        return _parse(pointer), None
    except (ConfigError, OSError) as error:
        for candidate in sorted(folder.glob(f"{_PREFIX}*"), reverse=True):
            try:
                record = _parse(candidate / RECORD)
                _verified(candidate, record)
            except (ConfigError, WeightsError, OSError):
                continue
            return record, f"{pointer} could not be read ({error}); resuming from {candidate.name} instead"
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"--resume: no checkpoint in {folder}") from None


def checkpoint_file(folder: Path, name: str) -> Path | None:
    """Where the last complete checkpoint keeps ``name`` (``model``, ``optimizer``, ``best`` or
    ``average``), or None when it has none."""
    record, _ = read_record(folder)
    base = folder / record["folder"] if "folder" in record else folder
    path = base / f"{name}.safetensors"
    return path if path.is_file() else None


def _verified(base: Path, record: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """The record's tensors, each file checked against its digest (a pre-epoch-folder checkpoint: its
    sidecars)."""
    if "folder" not in record:
        return {
            name: read_weights(base / f"{name}.safetensors", sha256=None)[0]
            for name in FILES
            if (base / f"{name}.safetensors").is_file()
        }
    files = record["files"].items()
    return {name: read_weights(base / f"{name}.safetensors", sha256=digest)[0] for name, digest in files}


def load_checkpoint(folder: Path, model, optimizer, *, data: str | None = None) -> tuple[dict[str, Any], dict]:
    """Restore the model, optimizer and random state of the last complete checkpoint in ``folder``.

    Returns ``(state, tensors)``: the trainer's state, and the checkpoint's ``best`` and ``average``
    weights where it has them. ``data``: what the run trains on now; a checkpoint of other data is refused.
    """
    record, note = read_record(folder)
    if note:
        print(note, flush=True)
    saved_data = record.get("data")
    if data is not None and saved_data is not None and saved_data != data:
        raise ConfigError(
            f"--resume: the checkpoint in {folder} was trained on {saved_data}; this run reads {data}. Resume "
            f"with the data the run started on, or start again with --overwrite (or another --output)"
        )
    base = folder / record["folder"] if "folder" in record else folder
    tensors = _verified(base, record)
    try:
        model.load_state_dict(tensors["model"])
    except (RuntimeError, KeyError) as e:
        raise ConfigError(
            f"--resume: the checkpoint's weights do not fit the model this recipe builds ({str(e).splitlines()[0]}"
            f"); resume with the recipe and data the run started with, or start again with --overwrite"
        ) from None
    optimizer_tensors = tensors["optimizer"]
    state: dict[int, dict[str, Any]] = {}
    for key, value in optimizer_tensors.items():
        if key.startswith("state."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    for index, entry in record["optimizer"]["state"].items():
        state.setdefault(int(index), {}).update(entry)
    try:
        optimizer.load_state_dict({"state": state, "param_groups": record["optimizer"]["param_groups"]})
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--resume: the checkpoint's optimizer state does not fit this model ({e})") from None
    torch.set_rng_state(optimizer_tensors["rng"])
    return record, {name: tensors[name] for name in ("best", "average") if name in tensors}
