"""The house in floors, as docs/contributing.md draws it: every import of attnzoo/ goes down (or across) the
floors, no module imports another's private names, no function runs over 80 lines, and the paths the
modules had before the floors still import, with a DeprecationWarning, as the same module objects."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "attnzoo"

# floor of each part of the library, lowest first (docs/contributing.md, "The floors")
FLOORS = {
    "attnzoo.errors": 0,
    "attnzoo.version": 0,
    "attnzoo._moved": 0,
    "attnzoo.io": 1,
    "attnzoo.layers": 1,
    "attnzoo.models": 1,
    "attnzoo.core": 2,
    "attnzoo.keras": 3,
    "attnzoo.testing": 4,
    "attnzoo.interop": 4,
    "attnzoo.train": 5,
    "attnzoo.integrations": 5,
    "attnzoo.tools": 6,
    "attnzoo.cli": 6,
    "attnzoo.__main__": 7,
    "attnzoo": 7,  # the public API (attnzoo/__init__.py)
}
PUBLIC_API_FROM = 3  # floors from which `import attnzoo` (the public names) is the way in


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> int:
    for prefix in sorted(FLOORS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return FLOORS[prefix]
    raise AssertionError(f"{module} is on no floor: add it to FLOORS and to docs/contributing.md")


def _imports(path: Path):
    """(line, imported module, imported names) of every attnzoo import in the file, relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "attnzoo":
                yield node.lineno, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attnzoo":
                    yield node.lineno, alias.name, []


FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_on_a_floor():
    for path in FILES:
        _floor(_module_name(path))


def test_imports_go_down_the_floors():
    upward = []
    for path in FILES:
        here = _module_name(path)
        for line, target, names in _imports(path):
            if target == "attnzoo":
                # `from attnzoo import io`: that part's floor; `import attnzoo` or a public name: the public API
                parts = [f"attnzoo.{n}" for n in names if f"attnzoo.{n}" in FLOORS]
                if parts:
                    target = max(parts, key=_floor)
                elif _floor(here) < PUBLIC_API_FROM:
                    upward.append(f"{here}:{line} uses the public API (floor {_floor(here)})")
                    continue
                else:
                    continue
            if _floor(target) > _floor(here):
                upward.append(f"{here}:{line} imports {target} (floor {_floor(target)} > {_floor(here)})")
    assert not upward, "imports that go up the floors:\n" + "\n".join(upward)


def test_the_core_and_the_layers_never_import_the_floors_above_them_even_lazily():
    """The text of the low floors names no module above them, in any form (an import inside a function
    included); the core reaches the rest by strings resolved at call time only where the design says so."""
    for path in FILES:
        here = _module_name(path)
        if _floor(here) > 2:
            continue
        for line, target, _ in _imports(path):
            assert _floor(target) <= _floor(here) or target == "attnzoo", f"{here}:{line} -> {target}"


def test_no_module_imports_another_modules_private_names():
    private = []
    for path in FILES:
        for line, target, names in _imports(path):
            for name in names:
                own = target == _module_name(path) or name == "_moved"  # _moved: a module, not a name
                if name.startswith("_") and not name.startswith("__") and not own:
                    private.append(f"{_module_name(path)}:{line} imports {target}.{name}")
    assert not private, "\n".join(private)


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:] or body  # the docstring does not count
    start = body[0].lineno
    return sum(
        1
        for i in range(start - 1, node.end_lineno or start)
        if lines[i].strip() and not lines[i].strip().startswith("#")
    )


def test_no_function_has_over_80_lines_of_code():
    long = []
    for path in FILES:
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = _code_lines(node, lines)
                if count > 80:
                    long.append(f"{_module_name(path)}.{node.name}: {count} lines")
    assert not long, "\n".join(long)


def test_the_map_in_docs_contributing_names_every_package_and_module_of_the_floors():
    text = (ROOT / "docs" / "contributing.md").read_text()
    section = text[text.index("## The floors") :]
    section = section[: section.index("\n## ", 4)]
    for prefix in FLOORS:
        if prefix in ("attnzoo", "attnzoo.__main__", "attnzoo._moved"):
            continue
        shown = prefix.removeprefix("attnzoo.")
        assert re.search(rf"`{re.escape(shown)}[/`.]", section), f"{shown} is not on the map"
    for path in sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "io").glob("*.py")):
        if path.stem != "__init__":
            assert f"`{path.stem}`" in section, f"{path.parent.name}/{path.name} is not on the map"


@pytest.mark.parametrize("old", sorted(importlib.import_module("attnzoo._moved").MOVED))
def test_an_old_module_path_imports_the_moved_module_with_a_warning(old):
    from attnzoo._moved import MOVED

    new = importlib.import_module(MOVED[old])
    if old in ("attnzoo.create", "attnzoo.export"):  # bound when attnzoo is imported: their names are functions
        import attnzoo

        assert sys.modules[old] is new and callable(attnzoo.create) and callable(attnzoo.export)
        return
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    from attnzoo._moved import SPLIT

    if old in SPLIT:  # several modules now: the old path holds every public name of each
        for part in map(importlib.import_module, SPLIT[old]):
            assert all(getattr(module, name) is getattr(part, name) for name in part.__all__)
    else:
        assert module is new
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message) for w in caught)


def test_the_fields_of_a_card_are_the_dataclass_fields_listed_once():
    """One schema per record: what a card may hold, what ``register`` takes, what ``to_dict`` gives and what
    a weights entry may hold all come from ModelSpec's and WeightsSpec's fields."""
    import dataclasses
    import inspect

    from attnzoo.core.cards import CARD_KEYS, WEIGHTS_KEYS
    from attnzoo.core.registry import register
    from attnzoo.core.spec import ModelSpec, WeightsSpec

    card = {f.name for f in dataclasses.fields(ModelSpec)} - {"provider", "source", "weights_dir"}
    assert set(CARD_KEYS) == card
    assert set(inspect.signature(register).parameters) - {"override"} == card
    weights = {f.name for f in dataclasses.fields(WeightsSpec)} - {"tag"}
    assert set(WEIGHTS_KEYS) == weights
    spec = ModelSpec("x", "a:b", weights={"t": WeightsSpec("t", file="f.safetensors", sha256="0" * 64)})
    assert set(spec.to_dict()) == card | {"qualified_name", "provider", "source", "required"}
    assert set(spec.weights["t"].to_dict()) == weights
