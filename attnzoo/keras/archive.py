"""A .keras archive's members, checked before they are read: one member per name, no name that leaves the
archive, each member decompressed counting the bytes it really holds, under limits (and Keras's own guard
against decompression bombs); a member over its limit or lying about its size is a ``WeightsError`` naming it.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from typing import Any

from attnzoo.errors import WeightsError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_WEIGHTS_BYTES",
    "MAX_ASSETS_BYTES",
    "MAX_METADATA_BYTES",
    "BOMB_FLOOR",
    "BOMB_RATIO",
    "check_members",
    "stream_member",
    "read_member",
    "read_assets",
    "size_text",
]

MAX_CONFIG_BYTES = 64 << 20  # a model config is kilobytes; a larger one is not a Keras file
MAX_WEIGHTS_BYTES = 64 << 30  # what one model.weights.h5 inside a .keras may expand to
MAX_ASSETS_BYTES = 1 << 30  # a .keras's assets (vocabularies) are read into memory: a bound on them
MAX_METADATA_BYTES = 1 << 20  # metadata.json holds a version and a date
BOMB_FLOOR, BOMB_RATIO = 256 << 20, 100  # Keras's own guard against decompression bombs (saving_lib)


def check_members(archive: zipfile.ZipFile, where: str) -> None:
    """Refuse an archive Keras would not have written: a member name twice (which one is "the" config?),
    or a name that leaves the archive's folder (absolute, a drive, ``..``, a backslash or NUL)."""
    seen: set[str] = set()
    for info in archive.infolist():
        name = info.filename
        if name in seen:
            raise WeightsError(
                f"{where}: the archive holds two members named {name!r}; Keras writes each file once, so the "
                f"archive was assembled by hand and which copy counts is ambiguous; refusing it"
            )
        seen.add(name)
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts or "\0" in name:
            raise WeightsError(
                f"{where}: archive member {name!r} names a path outside the archive (absolute or with '..'); "
                f"Keras never writes one; refusing the archive"
            )


def stream_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, where: str, sink: Any, over: str = ""
) -> int:
    """Decompress one member into ``sink`` (``write``), counting the bytes the data holds rather than
    trusting its header: more than ``limit`` (``over`` says which limit), or more than 100 times the
    stored bytes past 256 MiB (a decompression bomb, as Keras's loader refuses it), is a ``WeightsError``;
    so is data that does not match its header (zipfile's ``BadZipFile``: a wrong CRC, a size that lies,
    a truncated archive). Returns the bytes written."""
    name = info.filename
    unreadable = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError)

    def damaged(e: BaseException) -> WeightsError:
        return WeightsError(
            f"{where}: archive member {name!r} cannot be read as its header describes it ({e}); the archive is "
            f"damaged or was edited by hand"
        )

    try:
        source = archive.open(info)
    except unreadable as e:
        raise damaged(e) from None
    copied = 0
    with source:
        while True:
            try:
                block = source.read(1 << 20)
            except unreadable as e:  # only the reading: a full disk while writing is not the archive's fault
                raise damaged(e) from None
            if not block:
                return copied
            copied += len(block)
            if copied > limit:
                raise WeightsError(
                    f"{where}: archive member {name!r} expands to more than {over or size_text(limit)}; refusing it"
                )
            if copied > BOMB_FLOOR and copied > BOMB_RATIO * max(info.compress_size, 1):
                raise WeightsError(
                    f"{where}: archive member {name!r} expands to over {BOMB_RATIO} times the "
                    f"{size_text(info.compress_size)} it stores (a decompression bomb); refusing it"
                )
            sink.write(block)


def size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} bytes"


def read_member(archive: zipfile.ZipFile, name: str, limit: int, where: str) -> bytes:
    """One member's bytes, read under :func:`stream_member`'s checks."""
    buffer = io.BytesIO()
    stream_member(archive, archive.getinfo(name), limit, where, buffer)
    return buffer.getvalue()


def read_assets(archive: zipfile.ZipFile, where: str) -> dict[str, bytes]:
    """Every file under ``assets/`` of a .keras archive, read whole (they are vocabularies, kilobytes to
    megabytes); more than ``MAX_ASSETS_BYTES`` in all, counted as the data expands, is refused."""
    out = {}
    left = MAX_ASSETS_BYTES
    for member in archive.infolist():
        if not member.filename.startswith("assets/") or member.is_dir():
            continue
        buffer = io.BytesIO()
        over = f"the {size_text(MAX_ASSETS_BYTES)} all assets may take together"
        left -= stream_member(archive, member, left, where, buffer, over)
        out[member.filename] = buffer.getvalue()
    return out
