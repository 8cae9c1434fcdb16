"""Every constructor argument of a registered variant, read from its factory's source without importing it.

    constructor_arguments(model_info("laat"))
    # [Argument("num_labels", required=True), Argument("hidden_size", "None", null="inferred"), ...]

``attnzoo info`` and the catalogue list these, so that no argument is missing from what a user reads,
and say what ``null`` means for each: a size inferred from the first call, or a feature switched off.
The factory's module is parsed (``ast``), not imported, so that reading a card stays free of torch; the
meaning of ``None`` comes from the factory's docstring, where the convention is ``name (None: meaning)``
or a clause ``... None <meaning>`` just after the name. A factory whose source cannot be read (a C
extension, a lambda registered at run time) gives None, and the card's config is all that is shown.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Argument", "constructor_arguments", "config_rows"]

HIDDEN = ("self", "device", "dtype")  # placement arguments every layer takes; create() passes them


@dataclass(frozen=True)
class Argument:
    name: str
    default: str | None = None  # source text of the default; None when required
    required: bool = False
    null: str = ""  # what None means here, when the default is None

    def describe(self, card_value: Any = "???") -> str:
        """One line: required, the default (the card's when it sets one), and what null means."""
        if card_value == "???" or (self.required and card_value is None):
            return "required"
        value = self.default if card_value == "<unset>" else _show(card_value)
        if value in ("None", "null"):
            return f"null: {self.null or 'not set'}"
        return f"default {value}"


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)


def constructor_arguments(spec: Any) -> list[Argument] | None:
    factory = spec.factory if isinstance(spec.factory, str) else spec.factory_name
    module_name, _, attr = factory.partition(":")
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(found.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    docs: list[str] = []
    if attr in classes:
        init, docs = _init_of(classes[attr], classes)
    elif attr in functions:
        init, docs = functions[attr], [ast.get_docstring(functions[attr]) or ""]
    if init is None:
        return None
    return _arguments(init, "\n".join(docs))


def _init_of(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> tuple[ast.FunctionDef | None, list[str]]:
    """The class's __init__ (or the nearest base's in the same module) and the docstrings on the way."""
    docs: list[str] = []
    seen: set[str] = set()
    current: ast.ClassDef | None = cls
    while current is not None and current.name not in seen:
        seen.add(current.name)
        docs.append(ast.get_docstring(current) or "")
        for node in current.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                docs.append(ast.get_docstring(node) or "")
                return node, docs
        bases = [b.id for b in current.bases if isinstance(b, ast.Name) and b.id in classes]
        current = classes[bases[0]] if bases else None
    return None, docs


def _arguments(function: ast.FunctionDef | ast.AsyncFunctionDef, doc: str) -> list[Argument]:
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    out = []
    for arg, default in pairs:
        if arg.arg in HIDDEN:
            continue
        if default is None:
            out.append(Argument(arg.arg, required=True))
            continue
        text = ast.unparse(default)
        out.append(Argument(arg.arg, text, null=_null_meaning(arg.arg, doc) if text == "None" else ""))
    return out


# arguments that mean the same in every variant that takes them, where a docstring does not say
SHARED = {
    "chunk_size": "all labels at once (a number materialises the attention weights that many labels at a time)",
    "num_parent_labels": "no parent level (joint_laat needs it)",
    "num_kv_heads": "num_heads (one key/value head per query head)",
    "hidden_size": "inferred from the first call",
    "keras_semantics": "attnzoo's masking (a row with no key attends to nothing); 2 or 3: that Keras version's",
}


def _null_meaning(name: str, doc: str) -> str:
    """What None means for ``name``, from the docstring: ``name (None: meaning)`` or ``name ...; None meaning``."""
    for match in re.finditer(rf"\b{re.escape(name)}\b", doc):
        # "None" must come within 120 characters of the name; its meaning runs to the end of its clause
        paragraph = re.split(r"\n\s*\n", doc[match.end() :])[0]  # stay within the paragraph
        paragraph = re.split(r"\n\s*[A-Za-z_]\w*(?:,\s*\w+)*:\s", paragraph)[0]  # and before the next argument
        found = re.search(r"None\s*(?::|=|->)?\s*([^;.)]*)", paragraph[:120])
        if found and not re.search(r"``\w+``\s*\(", paragraph[: found.start()]):  # not another argument's
            clause = re.match(r"None\s*(?::|=|->)?\s*([^;.)]*)", paragraph[found.start() :])
            assert clause is not None  # it matched at this position within the first 120 characters
            meaning = " ".join(clause.group(1).split()).strip(" ,")
            if meaning.count("(") > meaning.count(")"):  # cut off where the docstring's aside begins
                meaning = meaning[: meaning.rindex("(")].strip(" ,")
            if meaning.startswith("or "):  # "None, or w: ..." describes the other values: None is off
                meaning = f"off; {meaning}"
            return meaning or "off"
    return SHARED.get(name, "")


def config_rows(spec: Any) -> list[tuple[str, str]]:
    """(argument, what it is set to and what null means) for every constructor argument, in signature
    order, with the card's values; the card's own keys alone when the factory cannot be read."""
    arguments = constructor_arguments(spec)
    if arguments is None:
        return [(key, Argument(key, _show(value)).describe(value)) for key, value in spec.config.items()]
    if spec.fixed:  # a preset: the options its card lists, then what it fixes
        by_name = {a.name: a for a in arguments}
        rows = []
        for key, value in spec.config.items():
            argument = by_name.get(key, Argument(key, _show(value)))
            rows.append((key, argument.describe(value)))
        return rows + [(key, f"fixed at {_show(value)}") for key, value in spec.fixed.items()]
    return [(a.name, a.describe(spec.config.get(a.name, "???" if a.required else "<unset>"))) for a in arguments]
