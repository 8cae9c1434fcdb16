"""The house in floors, as docs/contributing.md draws it: every import of attnzoo/ goes down (or across) the
floors, and no string names a module above its own floor either; the public face (attnzoo/__init__.py) is the
top floor, imported by no module of the library; from the keras floor up the core's public names come from
``attnzoo.core``; no circle of imports, those inside functions and under ``if TYPE_CHECKING`` counted; no
module imports another's private names; no function runs over 80 lines; the generic Keras files name no layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .conftest import ROOT

PACKAGE = ROOT / "attnzoo"

# floor of each part of the library, lowest first (docs/contributing.md, "The floors")
FLOORS = {
    "attnzoo.errors": 0,
    "attnzoo.version": 0,
    "attnzoo.io": 1,
    "attnzoo.layers": 1,
    "attnzoo.models": 1,
    "attnzoo.core": 2,
    "attnzoo.keras": 3,
    "attnzoo.conventions": 4,
    "attnzoo.testing": 5,
    "attnzoo.interop": 5,
    "attnzoo.integrations": 6,
    "attnzoo.train": 6,
    "attnzoo.tools": 7,
    "attnzoo.cli": 7,
    "attnzoo.__main__": 8,
    "attnzoo": 8,  # the public face (attnzoo/__init__.py): the top floor
}


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
                if not parts:
                    continue  # the public face: test_the_public_face_is_the_top_floor_... says no
                target = max(parts, key=_floor)
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
                own = target == _module_name(path)
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
        if prefix in ("attnzoo", "attnzoo.__main__"):
            continue
        shown = prefix.removeprefix("attnzoo.")
        assert re.search(rf"`{re.escape(shown)}[/`.]", section), f"{shown} is not on the map"
    for path in sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "io").glob("*.py")):
        if path.stem != "__init__":
            assert f"`{path.stem}`" in section, f"{path.parent.name}/{path.name} is not on the map"


_MODULE_STRING = re.compile(r"attnzoo(\.[A-Za-z_][A-Za-z0-9_]*)+\.?(:[A-Za-z_][\w.]*)?")


def _module_strings(path: Path):
    """(line, module) of every string constant of the file that names an attnzoo module (``"attnzoo.cli.app"``,
    ``"attnzoo.keras.nodes:build_node"``, the ``"attnzoo.cli.verbs."`` of an f-string), docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            module = node.value.split(":", 1)[0].rstrip(".")
            part = ".".join(module.split(".")[:2])
            if _MODULE_STRING.fullmatch(node.value) and part in FLOORS and part != "attnzoo":  # not "attnzoo.name"
                yield node.lineno, module


def test_no_string_names_a_module_of_a_higher_floor():
    """``importlib.import_module("attnzoo.cli.app")`` in the core is an upward import the import statements
    do not show; a floor's built-ins register themselves in that floor instead."""
    upward = []
    for path in FILES:
        here = _module_name(path)
        for line, target in _module_strings(path):
            if _floor(target) > _floor(here):
                upward.append(f"{here}:{line} names {target!r} (floor {_floor(target)} > {_floor(here)})")
    assert not upward, "strings that name a module up the floors:\n" + "\n".join(upward)


def test_the_public_face_is_the_top_floor_no_module_of_the_library_imports_it():
    """``attnzoo/__init__.py`` re-exports the public names and nothing in the library imports it back (`import
    attnzoo` or a public name from it, at module top or in a function): a module reaches what it needs in the
    floor that defines it, so importing any module never runs the face first and the face closes no circle."""
    faces = []
    for path in FILES:
        here = _module_name(path)
        if here == "attnzoo":
            continue
        for line, target, names in _imports(path):
            if target == "attnzoo" and (not names or any(f"attnzoo.{n}" not in FLOORS for n in names)):
                faces.append(f"{here}:{line} imports attnzoo's public face")
    assert not faces, "\n".join(faces)


def test_from_the_keras_floor_up_the_core_s_public_names_come_from_its_face():
    """create, load, register, list_models, ... are imported from ``attnzoo.core`` (the core's face), not from
    the modules inside the core that define them, by every module from floor 3 up."""
    import attnzoo.core

    inside = {}
    for name in attnzoo.core.__all__:
        inside.setdefault(getattr(attnzoo.core, name).__module__, set()).add(name)
    direct = []
    for path in FILES:
        here = _module_name(path)
        if _floor(here) < 3 or here == "attnzoo":
            continue
        for line, target, names in _imports(path):
            for name in set(names) & inside.get(target, set()):
                direct.append(f"{here}:{line} imports {name} from {target}; use attnzoo.core")
    assert not direct, "\n".join(direct)


def _import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the attnzoo modules it imports at run time (in functions too; ``if TYPE_CHECKING`` aside
    unless ``type_only``), with the packages between (importing ``attnzoo.keras.convert`` runs
    ``attnzoo/keras/__init__.py``)."""
    modules = {_module_name(path): path for path in FILES}

    def known(target: str) -> str:
        while target and target not in modules:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = (
            set()
            if type_only
            else {
                id(n)
                for node in ast.walk(tree)
                if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                for statement in node.body
                for n in ast.walk(statement)
            }
        )
        deps: set[str] = set()
        for line, target, names in _imports(path):
            del line
            deps |= {f"{target}.{n}" if f"{target}.{n}" in modules else known(target) for n in names or [""]}
        deps -= {"", name}
        # _imports walks every node; drop the ones under TYPE_CHECKING by re-walking those
        for node in ast.walk(tree):
            if id(node) in typing_only and isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                deps.discard(known(module or ""))
                deps -= {f"{module}.{a.name}" for a in node.names}
        for dep in list(deps):
            parts = dep.split(".")
            deps |= {".".join(parts[:i]) for i in range(2, len(parts)) if not name.startswith(".".join(parts[:i]))}
        graph[name] = deps & set(modules)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle of ``graph`` a depth-first walk meets, as ``a -> b -> a``."""
    done: set[str] = set()
    circles = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return sorted(set(circles))


def test_no_circle_of_imports_even_counting_imports_inside_functions():
    circles = _circles(_import_graph())
    assert not circles, "import circles:\n" + "\n".join(circles[:20])


def test_no_import_circle_type_only_included():
    """An import under ``if TYPE_CHECKING:`` is a dependency too (the annotation names the other module's
    type): a circle through one says a shared type lives in the wrong module; move it down to where both
    sides can import it."""
    circles = _circles(_import_graph(type_only=True))
    assert not circles, "import circles, type-only imports counted:\n" + "\n".join(circles[:20])
    # the scan sees a circle made only of type-only imports
    assert _circles({"a": {"b"}, "b": {"a"}}) == ["a -> b -> a"]


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


# exceptions that are part of a protocol contributors implement, never raised to a user
_PROTOCOL_EXCEPTIONS = {
    "attnzoo.keras.registry.Refused",  # a converter's reason for not taking a layer (a report line)
    "attnzoo.testing.subject.Failure",  # a property's verdict (a report line)
    "attnzoo.testing.subject.NotApplicable",
}


def test_every_exception_and_warning_a_user_can_catch_lives_in_errors():
    """One hierarchy: a class a user may catch (an error, a warning) is defined in attnzoo/errors.py; any
    other exception class is private control flow, or one of the converter's and the kit's protocols."""
    elsewhere = []
    for path in FILES:
        here = _module_name(path)
        if here == "attnzoo.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = [ast.unparse(b) for b in node.bases]
            caught = any(re.search(r"(Exception|Error|Warning|Interrupt|Exit)$", b) for b in bases)
            if caught and f"{here}.{node.name}" not in _PROTOCOL_EXCEPTIONS:
                elsewhere.append(f"{here}.{node.name}({', '.join(bases)})")
    assert not elsewhere, "exceptions outside attnzoo/errors.py:\n" + "\n".join(elsewhere)


def _warn_calls(tree: ast.AST):
    """Every ``warnings.warn(...)`` (or a bare ``warn(...)``) call of a parsed module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            named = isinstance(func, ast.Name) and func.id == "warn"
            dotted = isinstance(func, ast.Attribute) and func.attr == "warn" and ast.unparse(func.value) == "warnings"
            if named or dotted:
                yield node


def test_every_warning_attnzoo_gives_is_an_attnzoo_warning():
    """``warnings.warn(message)`` alone is a bare UserWarning that ``-W error::attnzoo.errors.AttnzooWarning``
    cannot single out: every call names a category from attnzoo/errors.py that subclasses AttnzooWarning."""
    import attnzoo.errors as errors

    bare = []
    for path in FILES:
        for call in _warn_calls(ast.parse(path.read_text())):
            given = (
                call.args[1]
                if len(call.args) > 1
                else next((k.value for k in call.keywords if k.arg == "category"), None)
            )
            name = ast.unparse(given).rsplit(".", 1)[-1] if given is not None else None
            category = getattr(errors, name, None) if name else None
            if not (isinstance(category, type) and issubclass(category, errors.AttnzooWarning)):
                bare.append(f"{path.relative_to(ROOT)}:{call.lineno} warns with {name or 'no category'}")
    assert not bare, "warnings without an AttnzooWarning category:\n" + "\n".join(bare)
    assert len(list(_warn_calls(ast.parse("import warnings\nwarnings.warn('x')")))) == 1  # it sees a bare call


LONGEST = 500  # lines a module may have: past that it holds more than one job


def test_no_module_has_over_500_lines():
    """One job per file: no module of attnzoo/ is longer than 500 lines, whatever its docstring says."""
    counts = {path: path.read_text().count("\n") for path in FILES}
    long = [f"{path.relative_to(ROOT)} ({n} lines)" for path, n in counts.items() if n > LONGEST]
    assert not long, "modules over 500 lines (split them by job):\n" + "\n".join(long)


# the generic files of the Keras converter: what they do holds for every layer, so no layer's op is named there
GENERIC_KERAS = ("convert", "conversion_report", "model", "graph", "calls", "order", "inputs", "dtypes", "policy")
# the node that holds a model of the zoo: the report shows the model's name in its place
GENERIC_OPS = {"zoo"}


def test_the_generic_keras_files_name_no_layer_a_fact_about_one_lives_on_its_node():
    """A fact about one Keras layer (which layers read ids, which end in a sigmoid or softmax a ``logits=True``
    conversion drops, which operations run) lives beside its node, as a class attribute or method of the node
    or the converter registry's entry; the generic files ask the node."""
    import attnzoo.keras.converters  # noqa: F401 - every node class registered
    from attnzoo.keras.nodes import NODES

    def ops_named(tree: ast.AST):  # an op compared with, or listed, or given as a dict's value
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                operands = node.elts
            elif isinstance(node, ast.Dict):
                operands = node.values
            else:
                continue
            for operand in operands:
                if isinstance(operand, ast.Constant) and operand.value in set(NODES) - GENERIC_OPS:
                    yield operand.lineno, operand.value

    named = []
    for stem in GENERIC_KERAS:
        for line, op in ops_named(ast.parse((PACKAGE / "keras" / f"{stem}.py").read_text())):
            named.append(f"keras/{stem}.py:{line} names the op {op!r}")
    assert not named, "\n".join(named)
    assert list(ops_named(ast.parse("if spec['op'] == 'softmax': pass"))) == [(1, "softmax")]
    assert {"embedding", "dense", "softmax"} <= set(NODES)  # the scan knows the ops it looks for


def test_a_training_run_is_the_frozen_setup_it_starts_from_and_the_state_it_builds():
    """A run's setup (recipe, settings, folder, place, seed) is set once, before any work; everything the
    steps of ``train`` make is the state's, which starts empty, and no name is in both."""
    import dataclasses

    import pytest
    import torch

    from attnzoo.train.run import RunSetup, RunState

    setup = RunSetup({}, {}, Path("run"), 0, 1, False, 0, torch.device("cpu"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setup.seed = 1  # type: ignore[misc]
    state = RunState(setup, started=0.0)
    built = [f for f in dataclasses.fields(RunState) if f.name not in ("setup", "started")]
    assert all(getattr(state, f.name) in (None, {}, 0, 0.0, 1) for f in built), state
    assert not {f.name for f in built} & {f.name for f in dataclasses.fields(RunSetup)}
