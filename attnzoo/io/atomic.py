"""Crash-safe files: whatever kills the writer, a reader sees the old content or the new, never a part.

A new content is staged in a temporary file beside its target (``TEMP_PREFIX``), flushed to disk, then
renamed over the target in one step, and the rename itself is made durable (:func:`atomic_write`; or
:func:`stage` and :func:`commit` for a writer that must do something between the two). :func:`locked`
serialises the writers of one folder.
"""

from __future__ import annotations

import os
import tempfile
import time
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
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; a saved model is an ordinary file
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
