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
and then find it there. Timeouts and retries with back-off are ``ATTNZOO_DOWNLOAD_TIMEOUT`` (seconds per
read, 30) and ``ATTNZOO_DOWNLOAD_RETRIES`` (5). A progress bar (tqdm) shows on a terminal only.

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
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ConfigError, WeightsError

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
    except ImportError:
        raise ConfigError(
            "weights from the Hugging Face Hub need huggingface_hub: pip install 'attnzoo[hub]'"
        ) from None
    repo_id, _, revision = repo.partition("@")
    # HF_ENDPOINT (a mirror) is read now, not when huggingface_hub was imported
    url = huggingface_hub.hf_hub_url(
        repo_id, filename, revision=revision or None, endpoint=os.environ.get("HF_ENDPOINT") or None
    )
    try:
        headers = huggingface_hub.utils.build_hf_headers()
    except Exception:  # noqa: BLE001 - no token configured is fine for public files
        headers = {}
    return url, dict(headers)


def _source_url(wspec: Any) -> tuple[str, dict[str, str]]:
    if wspec.url:
        return wspec.url, {}
    return hub_url(wspec.hf_hub, wspec.filename or "model.safetensors")


def _progress(total: int | None, start: int, label: str) -> Any:
    """A tqdm bar on a terminal; nothing otherwise (logs and CI stay clean)."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    try:
        from tqdm import tqdm
    except ImportError:
        return contextlib.nullcontext(None)
    return tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, desc=label, leave=False)


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


def _settings() -> tuple[float, int]:
    try:
        timeout = float(os.environ.get(ENV_TIMEOUT, "30"))
        retries = int(os.environ.get(ENV_RETRIES, "5"))
    except ValueError:
        raise ConfigError(f"{ENV_TIMEOUT} must be seconds and {ENV_RETRIES} a count") from None
    return timeout, max(retries, 0)


def _download(url: str, headers: dict[str, str], part: Path, label: str) -> None:
    """Append the rest of ``url`` to ``part`` (resuming from its size), retrying with back-off."""
    timeout, retries = _settings()
    for attempt in range(retries + 1):
        start = part.stat().st_size if part.exists() else 0
        request = urllib.request.Request(url, headers={**headers, **({"Range": f"bytes={start}-"} if start else {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status = getattr(response, "status", 200)
                if start and status != 206:  # the server ignored the Range: start over
                    start = 0
                length = response.headers.get("Content-Length")
                total = (int(length) + start) if length and length.isdigit() else None
                with open(part, "ab" if start else "wb") as out, _progress(total, start, label) as bar:
                    while True:
                        block = response.read(CHUNK)
                        if not block:
                            break
                        out.write(block)
                        if bar is not None:
                            bar.update(len(block))
                if total is not None and part.stat().st_size < total:
                    raise ConnectionError(f"the connection closed after {part.stat().st_size} of {total} bytes")
                return
        except urllib.error.HTTPError as e:
            if e.code == 416 and start:  # we asked beyond the end: what we have is the whole file
                return
            if e.code in (404, 401, 403, 410):
                raise WeightsError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
            error: Exception = e
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            error = e
        if attempt == retries:
            raise WeightsError(
                f"cannot download {url} after {retries + 1} attempts: {error}; "
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
    if target.is_file():
        return target  # its digest is checked on every load anyway
    if is_offline():
        raise WeightsError(
            f"{label} is not in the cache and attnzoo is offline ({ENV_OFFLINE} or HF_HUB_OFFLINE): its source is "
            f"{wspec.source}, its cache path {target}; fetch it where there is a network with "
            f"`attnzoo download {name or '<name>.<tag>'}` and copy {cache_home()} here (or set {ENV_HOME})"
        )
    url, headers = _source_url(wspec)
    part = target.with_name(target.name + ".part")
    with _file_lock(target.with_name(".lock"), timeout=3600):
        if target.is_file():  # another process finished it while we waited
            return target
        _download(url, headers, part, Path(target.name).stem)
        actual = _sha256(part)
        if actual != wspec.sha256:
            part.unlink(missing_ok=True)  # a bad download never stays, nor enters the cache
            raise WeightsError(
                f"{label}: the download from {wspec.source} has sha256 {actual}, but the card "
                f"says {wspec.sha256}; nothing was cached (the source changed or was corrupted)"
            )
        (target.parent / "source.json").write_text(
            json.dumps(
                {"source": wspec.source, "name": name, "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            )
        )
        os.replace(part, target)
    return target


def resolve_weights(spec: Any, wspec: Any) -> Path:
    """The local file of a pretrained tag: bundled beside its card, or fetched (see :func:`fetch`)."""
    if wspec.remote:
        return fetch(wspec, name=f"{spec.name}.{wspec.tag}")
    path = Path(wspec.file)
    return path if path.is_absolute() else Path(spec.weights_dir or ".") / path


def cache_entries() -> list[dict[str, Any]]:
    """What the cache holds: one entry per cached file (sha256, path, size, source), partial downloads too."""
    root = cache_root()
    entries: list[dict[str, Any]] = []
    if not root.is_dir():
        return entries
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        info = {}
        if (folder / "source.json").is_file():
            with contextlib.suppress(ValueError, OSError):
                info = json.loads((folder / "source.json").read_text())
        for file in sorted(folder.iterdir()):
            if file.name in ("source.json", ".lock"):
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
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(entry["path"])
    return removed
