"""Files a model carries beside its weights in a saved folder (a converted keras-hub model's tokenizer:
``tokenizer.json``, ``preprocessing.json``): the model's ``attnzoo_files`` (name -> bytes), which
``attnzoo.save`` writes and ``attnzoo.load`` gives back.

``config.yaml``'s record lists them with their sha256 (``files: {tokenizer.json: <sha256>}``), so a folder
loads only what its record names, each file checked against its digest. They are written with the weights'
protocol (:mod:`attnzoo.io.folders`): staged beside the folder, renamed into place, a file that another model
of the folder's record wrote replaced, and a file of the same name that no record names (the user's own)
never touched: the save is refused. While an overwrite that changes a file is killed between two renames,
the folder's weights load and the file that no longer matches them is left out with a warning (the weights
are the model; saving again restores the rest).

Names are plain file names (letters, digits, ``_ . -``, not the folder's own files): a record naming
``../x`` is refused as any malformed record is.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooWarning, WeightsError
from attnzoo.io.atomic import TEMP_PREFIX, commit, discard, stage
from attnzoo.io.limits import limit, over_limit

__all__ = [
    "FILES_KEY",
    "carried_files",
    "check_recorded_files",
    "stage_files",
    "commit_files",
    "refuse_foreign_files",
    "clear_dropped_files",
    "read_carried_files",
]

FILES_KEY = "files"  # the record's key
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_RESERVED = {"config.yaml", "model.safetensors", "README.md"}


def _valid_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and _NAME.fullmatch(name) is not None
        and name not in _RESERVED
        and not name.startswith(TEMP_PREFIX)
    )


def carried_files(model: Any) -> dict[str, bytes]:
    """The model's ``attnzoo_files``, checked: plain file names, bytes."""
    files = getattr(model, "attnzoo_files", None) or {}
    if not isinstance(files, Mapping):
        raise WeightsError(f"attnzoo_files must map file names to bytes, got {type(files).__name__}")
    for name, data in files.items():
        if not _valid_name(name):
            raise WeightsError(f"attnzoo_files: {name!r:.80} is not a file name save() writes beside the model")
        if not isinstance(data, (bytes, bytearray)):
            raise WeightsError(f"attnzoo_files: {name} holds a {type(data).__name__}, not bytes")
    return {name: bytes(data) for name, data in files.items()}


def check_recorded_files(record: Mapping[str, Any], where: Any) -> None:
    """A record's ``files``, as read from a ``config.yaml``: plain names, each with a sha256."""
    files = record.get(FILES_KEY)
    if files is None:
        return
    if not isinstance(files, dict):
        raise WeightsError(f"{where}: {FILES_KEY} is not a mapping of file names to sha256 digests")
    for name, digest in files.items():
        if not _valid_name(name):
            raise WeightsError(f"{where}: {FILES_KEY} names {name!r:.80}, not a file of the folder")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise WeightsError(f"{where}: the sha256 of {name} is {digest!r:.80}, not 64 lower-case hex digits")


def _recorded(record: Mapping[str, Any] | None) -> dict[str, str]:
    files = (record or {}).get(FILES_KEY)
    return dict(files) if isinstance(files, dict) else {}


def refuse_foreign_files(directory: Path, files: Mapping[str, bytes], previous: Mapping[str, Any] | None) -> None:
    """Refuse to write over a file of the folder that the saved model's record does not name: the user's."""
    ours = _recorded(previous)
    foreign = [name for name in files if (directory / name).exists() and name not in ours]
    if foreign:
        raise WeightsError(
            f"{directory} holds {', '.join(sorted(foreign))} of its own (the saved model's record does not name "
            f"it), which the model's would replace; move it, or save the model to another folder"
        )


def stage_files(directory: Path, files: Mapping[str, bytes]) -> dict[str, tuple[str, str]]:
    """Each file written to a temporary file beside its place: name -> (temporary path, sha256)."""
    staged: dict[str, tuple[str, str]] = {}
    try:
        for name, data in files.items():
            tmp = stage(directory / name, lambda t, data=data: Path(t).write_bytes(data))
            staged[name] = (tmp, hashlib.sha256(data).hexdigest())
    except BaseException:
        for tmp, _ in staged.values():
            discard(tmp)
        raise
    return staged


def commit_files(directory: Path, staged: Mapping[str, tuple[str, str]]) -> None:
    """Rename each staged file into place (each one atomic)."""
    for name, (tmp, _) in staged.items():
        commit(tmp, directory / name)


def clear_dropped_files(directory: Path, previous: Mapping[str, Any] | None, record: Mapping[str, Any]) -> None:
    """Remove the files the previous model carried and the new one does not (once the new record is in place)."""
    for name in set(_recorded(previous)) - set(_recorded(record)):
        (directory / name).unlink(missing_ok=True)


def read_carried_files(directory: Path, record: Mapping[str, Any]) -> dict[str, bytes]:
    """The files the record names, each read within ``ATTNZOO_MAX_TOKENIZER_BYTES`` and checked against its
    digest; one missing or changed is left out with a warning (the model loads without it)."""
    found: dict[str, bytes] = {}
    bound = limit("ATTNZOO_MAX_TOKENIZER_BYTES")
    for name, digest in _recorded(record).items():
        path = directory / name
        if not path.is_file():
            warnings.warn(f"{path}: recorded with the model but missing; loaded without it", AttnzooWarning, 3)
            continue
        with open(path, "rb") as handle:
            data = handle.read(bound + 1)
        if len(data) > bound:
            raise over_limit("ATTNZOO_MAX_TOKENIZER_BYTES", f"is over {bound:,} bytes", path)
        if hashlib.sha256(data).hexdigest() != digest:
            warnings.warn(
                f"{path}: its sha256 is not the one recorded with the model (it was edited, or a save that replaced "
                f"it was interrupted); loaded without it: save the model again",
                AttnzooWarning,
                3,
            )
            continue
        found[name] = data
    return found
