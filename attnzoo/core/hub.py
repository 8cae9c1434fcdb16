"""Saved model folders on the Hugging Face Hub, made local: ``attnzoo.create("hf-hub:org/repo[@rev]")``.

The folder's ``config.yaml`` is fetched again while online (unless the revision is a commit hash) and
checked before it replaces the cached copy; its ``model.safetensors`` (and the files its model carries, a
port's tokenizer) is fetched once into the verified cache, against the digest ``config.yaml`` records.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from attnzoo.core.spec import WeightsSpec
from attnzoo.errors import ConfigError, StaleCacheWarning, WeightsError
from attnzoo.io import folders as folders_io
from attnzoo.io import weights as weights_io
from attnzoo.io.atomic import atomic_write_text
from attnzoo.io.limits import limit, over_limit

__all__ = ["HUB_PREFIX", "hub_folder"]

HUB_PREFIX = "hf-hub:"


def hub_folder(repo: str) -> Path:
    """A folder written by ``attnzoo.save`` and pushed to the Hub (``org/repo[@revision]``), made local:
    its config.yaml (fetched again while online unless the revision is a commit hash) and its
    model.safetensors (fetched once into the verified cache, against the digest config.yaml records)."""
    import http.client
    import re

    from attnzoo.io.sources import cache_home, fetch, hub_url, is_offline, read_small

    # the Hub's rule for names: letters, digits, - _ . ; neither starting nor ending with - or ., no -- or ..
    # inside (so "../.." is no name: huggingface_hub would refuse it with an error of its own)
    name = r"[A-Za-z0-9_](?:[\w.\-]*[A-Za-z0-9_])?"
    if not re.fullmatch(rf"(?![^@]*(?:--|\.\.)){name}/{name}(?:@[\w.\-/]+)?", repo):
        raise ConfigError(f"{HUB_PREFIX}{repo}: expected {HUB_PREFIX}org/repo or {HUB_PREFIX}org/repo@revision")
    folder = cache_home() / "hub" / repo.replace("/", "--")
    config = folder / folders_io.CONFIG_FILE
    pinned = bool(re.search(r"@[0-9a-f]{40}\Z", repo))
    if not is_offline() and not (pinned and config.is_file()):
        url, headers = hub_url(repo, folders_io.CONFIG_FILE)
        bound = limit("ATTNZOO_MAX_CONFIG_BYTES")
        try:
            data = read_small(url, headers, bound + 1)  # one byte past the limit, so that it can fire
        except (OSError, http.client.HTTPException, WeightsError) as e:
            if not config.is_file():
                raise WeightsError(
                    f"{HUB_PREFIX}{repo}: cannot fetch {folders_io.CONFIG_FILE} from {url} ({e})"
                ) from None
        else:
            where = f"{HUB_PREFIX}{repo} ({url})"
            try:  # checked before it replaces anything: a captive portal's HTML page is no config
                if len(data) > bound:
                    raise over_limit("ATTNZOO_MAX_CONFIG_BYTES", f"is over {bound:,} bytes", where)
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise WeightsError(f"{where}: not UTF-8 text ({e.reason})") from None
                folders_io.parse_folder_records(text, where)
            except WeightsError as e:
                if not config.is_file():
                    raise
                warnings.warn(f"{e}; using the copy cached in {folder}", StaleCacheWarning, stacklevel=3)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write_text(config, text)
    if not config.is_file():
        raise WeightsError(
            f"{HUB_PREFIX}{repo} is not in the cache ({folder}) and attnzoo is offline; run "
            f"`attnzoo download {HUB_PREFIX}{repo}` where there is a network"
        )
    record = folders_io.read_folder(folder)
    # the weights, then the files the model carries beside them (a port's tokenizer), each against its digest
    wanted = {weights_io.WEIGHTS_FILE: str(record["sha256"]), **dict(record.get("files") or {})}
    for filename, digest in wanted.items():
        wspec = WeightsSpec(tag="hub", hf_hub=repo, filename=filename, sha256=digest)
        _place(fetch(wspec, name=f"{HUB_PREFIX}{repo}"), folder / filename)
    return folder


def _place(cached: Path, local: Path) -> None:
    """``local`` made a link to the verified cache's ``cached`` (or a copy where links cannot be made)."""
    if not local.exists() or local.resolve() != cached.resolve():
        local.unlink(missing_ok=True)
        try:
            local.symlink_to(cached)
        except OSError:  # no symlinks here: a copy
            import shutil

            shutil.copyfile(cached, local)
