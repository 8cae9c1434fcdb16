"""Crash-safe files: whatever kills the writer, a reader sees the old content or the new, never a part.

A new content is staged in a temporary file beside its target (``TEMP_PREFIX``), flushed to disk, then
renamed over the target in one step, and the rename itself is made durable (:func:`atomic_write`; or
:func:`stage` and :func:`commit` for a writer that must do something between the two). :func:`locked`
serialises the writers of one folder. :func:`new_folder` stages a whole folder: written beside its target,
renamed into place when complete, removed when its writer fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnzoo.errors import WeightsError

__all__ = [
    "TEMP_PREFIX",
    "stage",
    "commit",
    "discard",
    "atomic_write",
    "atomic_write_text",
    "locked",
    "try_flock",
    "fsync_dir",
    "new_folder",
    "ordinary",
    "clear_dead_siblings",
]

TEMP_PREFIX = ".attnzoo-tmp-"  # what a killed writer may leave behind; cleared by the next save


def fsync_dir(directory: Path) -> None:
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


def stage(path: Path, write) -> str:
    """Write ``path``'s next content into a temporary file beside it, flushed to disk; returns its name.
    Nothing is visible at ``path`` until :func:`commit`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        ordinary(tmp)  # mkstemp makes it private; a saved model is an ordinary file
    except BaseException:
        discard(tmp)
        raise
    return tmp


def commit(tmp: str, path: Path) -> None:
    """Rename a staged file into place (atomic) and make the rename durable."""
    try:
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        discard(tmp)
        raise


def discard(tmp: str) -> None:
    if os.path.exists(tmp):
        os.unlink(tmp)


def atomic_write(path: Path, write) -> None:
    """A reader sees the old file or the new one, never a half-written one, whenever the writer is killed."""
    commit(stage(path, write), path)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def ordinary(path: str | Path) -> None:
    """Give a file the permissions ``open(path, "w")`` would have (a writer that made it private, as
    ``mkstemp`` does, would leave a saved model unreadable to the folder's other users)."""
    os.chmod(path, 0o666 & ~_umask())


def try_flock(fd: int, blocking: bool) -> bool:
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
def locked(directory: Path, timeout: float = 120.0) -> Iterator[None]:
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
        while not try_flock(fd, blocking=False):
            if time.monotonic() > deadline:
                raise WeightsError(
                    f"{directory}: another process has been writing there for over "
                    f"{timeout:.0f} s; try again when it has finished"
                )
            time.sleep(0.05)
        yield  # closing the descriptor releases the lock
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    """``path`` replaced by ``text`` in one rename: a reader sees the old content or the new, never a part."""
    atomic_write(Path(path), lambda t: Path(t).write_text(text, encoding="utf-8"))


def clear_dead_siblings(directory: Path) -> None:
    """Remove the temporary folders that killed writers of ``directory`` left beside it (each live one is
    locked by its writer, so only the dead ones are taken)."""
    for entry in directory.parent.glob(f".{directory.name}{TEMP_PREFIX}*"):
        try:
            fd = os.open(entry, os.O_RDONLY)
        except OSError:
            continue
        try:
            if try_flock(fd, blocking=False):
                shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


def _visible(directory: Path) -> bool:
    return directory.is_dir() and any(not p.name.startswith(TEMP_PREFIX) for p in directory.iterdir())


@contextmanager
def new_folder(directory: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """A hidden temporary folder beside ``directory`` to write a whole folder into; when the block ends
    without an error it becomes ``directory`` in one rename, and when the block fails it is removed: a
    half-written folder never remains. ``directory`` may be missing or empty; a folder holding files is
    replaced as a whole only with ``overwrite=True`` (it is renamed aside, the new one renamed in, the old
    one removed: a process killed between the two renames leaves the old folder hidden beside it, never a
    mixture of the two)."""
    # "." or "x/..": its parent and name are those of the folder it names (a lexical path: a link stays a link)
    directory = Path(os.path.abspath(directory))
    directory.parent.mkdir(parents=True, exist_ok=True)
    clear_dead_siblings(directory)
    tmp = directory.parent / f".{directory.name}{TEMP_PREFIX}{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    fd = os.open(tmp, os.O_RDONLY) if os.name != "nt" else None
    try:
        if fd is not None:
            try_flock(fd, blocking=True)  # marks it live; the lock moves with the folder when renamed
        yield tmp
        fsync_dir(tmp)
        old = None
        if _visible(directory):
            if not overwrite:
                raise WeightsError(f"{directory}: files appeared there meanwhile; pass overwrite=True to replace them")
            old = directory.parent / f".{directory.name}{TEMP_PREFIX}old-{uuid.uuid4().hex[:12]}"
            os.rename(directory, old)
        os.rename(tmp, directory)  # over a missing or empty folder, atomically
        fsync_dir(directory.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if fd is not None:
            os.close(fd)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
