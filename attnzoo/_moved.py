"""The import paths of modules that moved into the floors (``attnzoo.core``, ``attnzoo.io``,
``attnzoo.interop``, ``attnzoo.tools``, ``attnzoo.testing``) keep working for one release:
``import attnzoo.weights`` gives the module ``attnzoo.io.weights`` itself, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import CodeType, ModuleType

# the old path -> where the module lives now
MOVED = {
    "attnzoo.weights": "attnzoo.io.weights",  # with attnzoo.io.folders and attnzoo.io.atomic (SPLIT)
    "attnzoo.sources": "attnzoo.io.sources",
    "attnzoo.train.vocab": "attnzoo.io.text",
    "attnzoo.spec": "attnzoo.core.spec",
    "attnzoo.record": "attnzoo.core.record",
    "attnzoo.cards": "attnzoo.core.cards",
    "attnzoo.resources": "attnzoo.core.resources",
    "attnzoo.hookspecs": "attnzoo.core.hookspecs",
    "attnzoo.plugins": "attnzoo.core.plugins",
    "attnzoo.registry": "attnzoo.core.registry",
    "attnzoo.config": "attnzoo.core.config",
    "attnzoo.signatures": "attnzoo.core.signatures",
    "attnzoo.create": "attnzoo.core.create",
    "attnzoo.conventions": "attnzoo.testing.conventions",
    "attnzoo.convert": "attnzoo.interop.convert",
    "attnzoo.export": "attnzoo.interop.export",
    "attnzoo.bench": "attnzoo.tools.bench",
    "attnzoo.catalogue": "attnzoo.tools.catalogue",
}

# old modules that became several: the old path gives a module holding the public names of all of them
SPLIT = {"attnzoo.weights": ("attnzoo.io.weights", "attnzoo.io.folders", "attnzoo.io.atomic")}


def _facade(name: str) -> ModuleType:
    facade = ModuleType(name, f"Deprecated: the names of {', '.join(SPLIT[name])}.")
    for part in SPLIT[name]:
        module = importlib.import_module(part)
        for attr in getattr(module, "__all__", ()):
            setattr(facade, attr, getattr(module, attr))
    return facade


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and loads each as the module at its new path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        moved = importlib.util.find_spec(MOVED[fullname])
        spec = importlib.util.spec_from_loader(fullname, self, origin=moved.origin if moved else None)
        if spec is not None and moved is not None:
            spec.has_location = moved.has_location  # so that `python -m OLD` sees the file it runs
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {MOVED[spec.name]}; the old path works until the next release",
            DeprecationWarning,
            stacklevel=4,
        )
        if spec.name in SPLIT:
            return _facade(spec.name)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module at the new path is already executed

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code: ``python -m attnzoo.catalogue`` (runpy) still runs it."""
        warnings.warn(f"{fullname} moved to {MOVED[fullname]}", DeprecationWarning, stacklevel=2)
        spec = importlib.util.find_spec(MOVED[fullname])
        loader = spec.loader if spec is not None else None
        return loader.get_code(MOVED[fullname]) if isinstance(loader, importlib.abc.InspectLoader) else None


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
