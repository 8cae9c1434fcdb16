"""Where weight bytes come from: bundled files, URLs, the Hugging Face Hub, and the verified cache.

A pretrained tag names one source (``file``, ``url`` or ``hf_hub`` + ``filename``) and its sha256. A
bundled file is read where it is. A remote one is fetched on first use into the cache and read from
there ever after, without touching the network::

    $ATTNZOO_HOME/weights/<sha256>/<file name>      (ATTNZOO_HOME: else $XDG_CACHE_HOME/attnzoo, else
    $ATTNZOO_HOME/weights/<sha256>/source.json       ~/.cache/attnzoo; source.json says where it came from)

A download streams into ``<file name>.part`` beside its final place, resumes with an HTTP Range request
after an interruption (and across processes and runs), and is checked against the sha256 BEFORE it is
renamed into place: a corrupted or truncated download never enters the cache; its error names both
digests and the source. One process downloads while others that want the same file wait on a file lock
and then find it there. Timeouts and retries with back-off are ``ATTNZOO_DOWNLOAD_TIMEOUT`` (seconds, 30:
per read of a weights file, and the whole read of a small file such as a Hub folder's config) and
``ATTNZOO_DOWNLOAD_RETRIES`` (5). A progress bar (tqdm) shows on a terminal only.

Offline (``ATTNZOO_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``) only the cache is used; a miss is a
``WeightsError`` naming the source, the cache path and the command that pre-fetches it. The Hub is
reached through ``huggingface_hub`` (``pip install 'attnzoo[hub]'``), which also reads ``HF_ENDPOINT``
(mirrors) and your token.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError, extra_import_message
from attnzoo.io.limits import LIMITS
from attnzoo.io.limits import limit as max_bytes
from attnzoo.io.progress import bar

__all__ = [
    "cache_home",
    "cache_root",
    "cached_path",
    "fetch",
    "is_offline",
    "resolve_weights",
    "cache_entries",
    "clear_cache",
    "hub_url",
    "open_url",
    "read_small",
]

ENV_HOME = "ATTNZOO_HOME"
ENV_OFFLINE = "ATTNZOO_OFFLINE"
ENV_TIMEOUT = "ATTNZOO_DOWNLOAD_TIMEOUT"
ENV_RETRIES = "ATTNZOO_DOWNLOAD_RETRIES"
CHUNK = 1 << 20


def cache_home() -> Path:
    """ATTNZOO_HOME, else $XDG_CACHE_HOME/attnzoo, else ~/.cache/attnzoo (read at call time)."""
    if os.environ.get(ENV_HOME):
        return Path(os.environ[ENV_HOME]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "attnzoo"
    return Path.home() / ".cache" / "attnzoo"


def cache_root() -> Path:
    return cache_home() / "weights"


def is_offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in (ENV_OFFLINE, "HF_HUB_OFFLINE")
    )


def _basename(wspec: Any) -> str:
    if wspec.hf_hub:
        return Path(wspec.filename or "model.safetensors").name
    name = Path(urllib.request.url2pathname(wspec.url.split("?", 1)[0].rstrip("/"))).name
    return name if name.endswith(".safetensors") else f"{name or 'weights'}.safetensors"


def cached_path(wspec: Any) -> Path:
    """Where a remote tag's file lives in the cache (it may not be there yet)."""
    return cache_root() / str(wspec.sha256) / _basename(wspec)


def hub_url(repo: str, filename: str) -> tuple[str, dict[str, str]]:
    """The download URL and headers of a file on the Hub (``org/repo[@revision]``), through huggingface_hub."""
    try:
        import huggingface_hub
    except Exception as e:
        raise ConfigError(
            extra_import_message("weights from the Hugging Face Hub need huggingface_hub", "hub", e, "huggingface_hub")
        ) from None
    repo_id, _, revision = repo.partition("@")
    try:  # HF_ENDPOINT (a mirror) is read now, not when huggingface_hub was imported
        url = huggingface_hub.hf_hub_url(
            repo_id, filename, revision=revision or None, endpoint=os.environ.get("HF_ENDPOINT") or None
        )
    except ValueError as e:  # huggingface_hub's HFValidationError: a name the Hub cannot have
        raise ConfigError(f"{repo!r} is not a Hugging Face Hub repository: {' '.join(str(e).split())[:200]}") from None
    return url, _hub_headers(huggingface_hub)


def _hub_headers(huggingface_hub: Any) -> dict[str, str]:
    """Your Hub token (as huggingface_hub finds it: HF_TOKEN, or the one `hf auth login` saved) and a
    user agent. Not ``build_hf_headers()``: recent versions fetch an "agent harnesses" registry from the
    endpoint while building the user agent, a request attnzoo never asked for and cannot bound."""
    from attnzoo.version import __version__

    headers = {"user-agent": f"attnzoo/{__version__}; hf_hub/{huggingface_hub.__version__}"}
    implicit = os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN", "").strip().lower() not in ("1", "true", "yes", "on")
    get_token = getattr(huggingface_hub, "get_token", None)
    try:
        token = get_token() if implicit and callable(get_token) else None
    except Exception:  # noqa: BLE001 - no token configured is fine for public files
        token = None
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _source_url(wspec: Any) -> tuple[str, dict[str, str]]:
    if wspec.url:
        return wspec.url, {}
    return hub_url(wspec.hf_hub, wspec.filename or "model.safetensors")


def _progress(total: int | None, start: int, label: str) -> Any:
    """A tqdm bar on a terminal; nothing otherwise (logs and CI stay clean): :mod:`attnzoo.io.progress`."""
    return bar(total, label, unit="B", initial=start, unit_scale=True, unit_divisor=1024)


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing); waits up to ``timeout`` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: one process at a time is not enforced there
            yield
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WeightsError(
                        f"{path.parent}: another process has been downloading this file for over "
                        f"{timeout:.0f} s; try again later"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


MAX_TIMEOUT = 86_400.0  # seconds; a longer wait is no timeout at all (and sockets refuse some larger values)


def _settings() -> tuple[float, int]:
    """ATTNZOO_DOWNLOAD_TIMEOUT (seconds, 0 < t <= a day) and ATTNZOO_DOWNLOAD_RETRIES (a count >= 0)."""
    raw_timeout, raw_retries = os.environ.get(ENV_TIMEOUT, "30"), os.environ.get(ENV_RETRIES, "5")
    try:
        timeout = float(raw_timeout)
    except ValueError:
        timeout = float("nan")
    if not 0.0 < timeout <= MAX_TIMEOUT:  # nan, inf, 0 and negatives all land here
        raise ConfigError(
            f"{ENV_TIMEOUT} must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f} (a day), got "
            f"{raw_timeout!r:.40}; unset it for the default of 30"
        )
    try:
        retries = int(raw_retries)
    except ValueError:
        retries = -1
    if retries < 0:
        raise ConfigError(f"{ENV_RETRIES} must be a whole number >= 0, got {raw_retries!r:.40}; unset it for 5")
    return timeout, retries


def read_small(url: str, headers: dict[str, str], limit: int) -> bytes:
    """At most ``limit`` bytes of ``url`` (a config file), within ATTNZOO_DOWNLOAD_TIMEOUT seconds in all:
    the timeout bounds the whole read, so a server that trickles a byte a second cannot hold it open
    (a timeout per read never trips on a trickle). Network failures are raised as they come (``OSError``,
    ``http.client.HTTPException``); running past the deadline is a ``TimeoutError``."""
    timeout, _ = _settings()
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    with open_url(url, headers, timeout=timeout) as response:
        while size < limit:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {size} bytes in {timeout:g} s ({ENV_TIMEOUT}) and the file is not done")
            block = response.read1(limit - size) if hasattr(response, "read1") else response.read(limit - size)
            if not block:
                break
            chunks.append(block)
            size += len(block)
    return b"".join(chunks)


MAX_DOWNLOAD = LIMITS["ATTNZOO_MAX_DOWNLOAD_BYTES"][0]  # the default; limit() reads the variable at call time
MIN_RATE = 16 << 10  # bytes per second, averaged over an attempt, below which a transfer has stalled


class _SameHostCredentials(urllib.request.HTTPRedirectHandler):
    """Redirects as urllib follows them, but only to http(s), and a credential (Authorization, a cookie)
    goes only to the host it was meant for, as huggingface_hub and requests do."""

    def redirect_request(  # urllib's signature
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        import urllib.parse

        target = urllib.parse.urlsplit(newurl)
        if target.scheme not in ("http", "https"):
            raise WeightsError(
                f"cannot download {req.full_url}: the server redirects to {target.scheme}://, not http(s); "
                f"refusing to follow it"
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(req.full_url).netloc != target.netloc:
            for name in list(new.headers):
                if name.lower() in ("authorization", "cookie", "proxy-authorization"):
                    del new.headers[name]
            new.unredirected_hdrs.pop("Authorization", None)
        return new


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_SameHostCredentials())


def open_url(url: str, headers: dict[str, str], timeout: float) -> Any:
    """``urlopen`` for attnzoo's downloads: redirects to http(s) only, credentials to their own host only."""
    return _opener().open(urllib.request.Request(url, headers=headers), timeout=timeout)


def _open_part(part: Path, append: bool) -> Any:
    """The partial file, opened without following a link planted at its name (a cache never holds one)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(part, flags, 0o644)
    except OSError as e:
        if part.is_symlink():
            raise WeightsError(
                f"{part} is a symbolic link; attnzoo's cache writes only files it made, so it will not write "
                f"through one (remove it: attnzoo cache clear)"
            ) from None
        raise WeightsError(f"cannot write {part}: {e.strerror or e}") from None
    return os.fdopen(fd, "ab" if append else "wb")


def _download(url: str, headers: dict[str, str], part: Path, label: str, *, size: int | None = None) -> None:
    """Append the rest of ``url`` to ``part`` (resuming from its size), retrying with back-off.

    Bounded three ways: each read by ATTNZOO_DOWNLOAD_TIMEOUT, the whole body by ``size`` (the card's
    file_size; else ATTNZOO_MAX_DOWNLOAD_BYTES, 16 GiB: a Hub folder's weights, whose size no card states),
    whether or not the server declares a Content-Length, and the transfer by a minimum average rate (a
    server that drips a byte at a time is a stalled one). A body past its bound is stopped there and the
    partial file removed."""
    import http.client

    timeout, retries = _settings()
    limit = size if size is not None else max_bytes("ATTNZOO_MAX_DOWNLOAD_BYTES")
    bound = (
        f"the card's file_size ({size:,} bytes)"
        if size is not None
        else f"{limit:,} bytes (ATTNZOO_MAX_DOWNLOAD_BYTES, for a file whose size no card states; raise it if "
        f"you trust the source)"
    )
    opener = _opener()
    for attempt in range(retries + 1):
        start = part.stat().st_size if part.exists() and not part.is_symlink() else 0
        if start > limit:  # a partial file larger than the file can be: start over
            start = 0
        request = urllib.request.Request(url, headers={**headers, **({"Range": f"bytes={start}-"} if start else {})})
        try:
            with opener.open(request, timeout=timeout) as response:
                status = getattr(response, "status", 200)
                if start and status != 206:  # the server ignored the Range: start over
                    start = 0
                length = response.headers.get("Content-Length")
                total = (int(length) + start) if length and length.isdigit() else None
                if total is not None and total > limit:
                    raise WeightsError(
                        f"cannot download {url}: it declares {total:,} bytes, "
                        + (f"but the card says the file has {size:,}" if size is not None else f"over {bound}")
                        + "; nothing more was written"
                    )
                began, written = time.monotonic(), start
                with _open_part(part, append=bool(start)) as out, _progress(total, start, label) as shown:
                    while True:
                        # read1: what has arrived (up to CHUNK), so a dripping server is seen as one
                        block = response.read1(CHUNK) if hasattr(response, "read1") else response.read(CHUNK)
                        if not block:
                            break
                        written += len(block)
                        if written > limit:
                            raise WeightsError(
                                f"cannot download {url}: the body runs past {bound}; the download was stopped "
                                f"and its partial file removed"
                            )
                        out.write(block)
                        shown.update(len(block))
                        elapsed = time.monotonic() - began
                        if elapsed > timeout and (written - start) / elapsed < MIN_RATE:
                            raise TimeoutError(f"the transfer stalled ({(written - start) / elapsed:,.0f} bytes/s)")
                if total is not None and part.stat().st_size < total:
                    raise ConnectionError(f"the connection closed after {part.stat().st_size} of {total} bytes")
                return
        except WeightsError:
            part.unlink(missing_ok=True)  # bytes that cannot be the file (or a planted link) are not kept
            raise
        except urllib.error.HTTPError as e:
            if e.code == 416 and start:  # we asked beyond the end: what we have is the whole file
                return
            if e.code in (404, 401, 403, 410):
                raise WeightsError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
            error: Exception = e
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, http.client.HTTPException) as e:
            error = e
        if attempt == retries:
            raise WeightsError(
                f"cannot download {url} after {retries + 1} attempts: {type(error).__name__}: {error}; "
                f"{part.stat().st_size if part.exists() else 0} bytes are kept in {part} and the "
                f"next attempt resumes from there"
            ) from None
        time.sleep(min(0.5 * 2**attempt, 10.0))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(wspec: Any, *, name: str = "") -> Path:
    """The local path of a remote tag's file: from the cache, or downloaded, verified, then cached."""
    target = cached_path(wspec)
    label = name or wspec.source
    if target.is_file() and not target.is_symlink():
        return target  # its digest is checked on every load anyway
    if target.is_symlink():  # the cache makes no links: one planted there is dropped, and the file fetched again
        target.unlink()
    if is_offline():
        raise WeightsError(
            f"{label} is not in the cache and attnzoo is offline ({ENV_OFFLINE} or HF_HUB_OFFLINE): its source is "
            f"{wspec.source}, its cache path {target}; fetch it where there is a network with "
            f"`attnzoo download {name or '<name>.<tag>'}` and copy {cache_home()} here (or set {ENV_HOME})"
        )
    url, headers = _source_url(wspec)
    part = target.with_name(target.name + ".part")
    with _file_lock(target.with_name(".lock"), timeout=3600):
        if target.is_file() and not target.is_symlink():  # another process finished it while we waited
            return target
        _refuse_foreign(target, part)
        _download(url, headers, part, Path(target.name).stem, size=getattr(wspec, "file_size", None))
        actual = _sha256(part)
        if actual != wspec.sha256:
            part.unlink(missing_ok=True)  # a bad download never stays, nor enters the cache
            raise WeightsError(
                f"{label}: the download from {wspec.source} has sha256 {actual}, but the card "
                f"says {wspec.sha256}; nothing was cached (the source changed or was corrupted)"
            )
        record = {"source": wspec.source, "name": name, "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        staged = target.parent / f".source.json.{os.getpid()}"
        with _open_part(staged, append=False) as out:  # renamed over whatever is there: no link is followed
            out.write(json.dumps({**record, "attnzoo_cache": 1}).encode())
        os.replace(staged, target.parent / "source.json")
        os.replace(part, target)
    return target


def _refuse_foreign(target: Path, part: Path) -> None:
    """The cache's own names hold files it wrote: a folder (or anything else) at the file's or the partial
    download's place is someone else's, left alone and named."""
    for path in (target, part):
        if path.exists() and not path.is_symlink() and not path.is_file():
            raise WeightsError(
                f"{path} is a folder, not a file attnzoo's cache wrote, so the download cannot go there; move "
                f"it away (or empty the cache: attnzoo cache clear)"
            )


def resolve_weights(spec: Any, wspec: Any) -> Path:
    """The local file of a pretrained tag: bundled beside its card, or fetched (see :func:`fetch`)."""
    if wspec.remote:
        return fetch(wspec, name=f"{spec.name}.{wspec.tag}")
    path = Path(wspec.file)
    return path if path.is_absolute() else Path(spec.weights_dir or ".") / path


def _is_cache_folder(folder: Path) -> bool:
    """A folder the cache made: named by a sha256, a real folder (not a link), with the source.json it
    writes. Anything else under the cache root (a user's own folder) is never listed or removed."""
    import re

    if folder.is_symlink() or not folder.is_dir() or not re.fullmatch(r"[0-9a-f]{64}", folder.name):
        return False
    marker = folder / "source.json"
    if marker.is_symlink() or not marker.is_file():
        return any(p.name.endswith(".part") and not p.is_symlink() for p in folder.iterdir())  # a download under way
    try:
        return isinstance(json.loads(marker.read_text()).get("source"), str)
    except (ValueError, OSError, AttributeError):
        return False


def cache_entries() -> list[dict[str, Any]]:
    """What the cache holds: one entry per cached file (sha256, path, size, source), partial downloads too."""
    root = cache_root()
    entries: list[dict[str, Any]] = []
    if not root.is_dir():
        return entries
    for folder in sorted(p for p in root.iterdir() if _is_cache_folder(p)):
        info = {}
        if (folder / "source.json").is_file():
            with contextlib.suppress(ValueError, OSError):
                info = json.loads((folder / "source.json").read_text())
        for file in sorted(folder.iterdir()):
            if file.name in ("source.json", ".lock") or file.is_symlink() or file.name.startswith(".source.json"):
                continue
            entries.append(
                {
                    "sha256": folder.name,
                    "path": str(file),
                    "bytes": file.stat().st_size,
                    "name": info.get("name", ""),
                    "source": info.get("source", ""),
                    "partial": file.name.endswith(".part"),
                }
            )
    return entries


def clear_cache(pattern: str | None = None) -> list[str]:
    """Remove cached files (all, or those whose name, source or digest matches the fnmatch ``pattern``)."""
    import fnmatch

    removed = []
    for entry in cache_entries():
        keys = (entry["name"], entry["source"], entry["sha256"], Path(entry["path"]).name)
        if pattern is None or any(fnmatch.fnmatchcase(k, pattern) for k in keys if k):
            folder = Path(entry["path"]).parent
            if _is_cache_folder(folder):  # checked again: only what the cache made goes, links never followed
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(entry["path"])
    return removed
