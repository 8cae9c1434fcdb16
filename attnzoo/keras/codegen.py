"""The only doors from a file's text into emitted Python source (:mod:`attnzoo.keras.emit` writes through them).

A Keras file, and a converted folder shared without it, is data from a stranger: its layer names, model
name, version and config values must never become code. So:

* :func:`identifier` is the one way a name becomes a Python name: NFKC first (Python folds identifiers so,
  ``ﬁ`` and ``fi`` are one variable to it), then any character no identifier holds becomes ``_``, then a
  trailing ``_`` (or a ``Keras`` prefix for a class) where the name is a keyword, a builtin or a name the
  module uses (``torch``, ``nn``, ``F``, ``self``, ``layers``, ...), then ``_2``, ``_3``, ... until unused.
* :func:`literal` is the one way a value is written: ``repr`` of a plain Python literal (None, bool, int,
  float, str, and lists, tuples and dicts of them), NaN and the infinities as ``float("nan")``,
  ``float("inf")``, a list of ``LONG_LIST`` or more strings (a vocabulary) as one string constant split at
  its newlines (``"a\\nb".split("\\n")``, the one call on a constant the walk below admits); anything else
  is refused.
* :func:`check_source` parses the result (``ast.parse``) and walks it, allowing only what the emitter
  writes: imports, the ``KERAS_*`` literals, one ``nn.Module`` class with ``__init__`` and ``forward``
  made of assignments and calls of the module's own names and ``del`` of its variables, and comments that
  are one class name. A module that holds anything else is refused with a
  :class:`~attnzoo.errors.ConfigError` before it is returned, written or run.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import math
import numbers
import re
import tokenize
import unicodedata
from typing import Any

from attnzoo.errors import ConfigError

__all__ = ["identifier", "usable", "literal", "check_source", "MODULE_NAMES", "RESERVED"]

# the names the emitted module itself uses or may import (a variable or class with one of them would shadow it)
MODULE_NAMES = frozenset(
    {"torch", "nn", "F", "math", "self", "layers", "attnzoo", "safetensors", "KERAS_NAMES", "KERAS_VERSION"}
    # the lower-case names an import brings (variables are lower case)
    | {"conv_padding", "run_rnn", "one_bias", "keras_resize", "keras_center_crop"}
)
# keywords, soft keywords, builtins, the module's names, `_` (what unread outputs go to) and the names ruff
# calls ambiguous (E741/E742: l, I, O)
RESERVED = frozenset(
    set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | MODULE_NAMES | {"_", "l", "I", "O"}
)
MAX_LENGTH = 48  # characters of a made-up name; the Keras name is kept whole in KERAS_NAMES
MAX_DEPTH = 64  # nesting of a written value (a layer's config is a few levels deep)
# a list of this many strings (a vocabulary) is written as one string split at its newlines: a list
# literal of 2 million words is 2 million constants to lay out, tokenize, parse, check and compile
LONG_LIST = 1_000


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _words(text: str) -> list[str]:
    """The runs of identifier characters of ``text`` (after NFKC), split at everything else and at ``_``."""
    kept = "".join(c if ("_" + c).isidentifier() else "_" for c in _nfkc(text))
    return [w for w in kept.split("_") if w]


def _valid(name: str) -> bool:
    """A name Python reads back as itself: an identifier that NFKC leaves alone, not a keyword."""
    return bool(name) and name.isidentifier() and _nfkc(name) == name and not keyword.iskeyword(name)


def usable(name: object, used: set[str] | frozenset[str] = frozenset(), reserved: frozenset[str] = RESERVED) -> bool:
    """Whether ``name`` may be written as a name of the emitted module as it is: a valid identifier that
    NFKC leaves alone, not a keyword, not in ``reserved`` (:data:`RESERVED`) nor in ``used``."""
    return isinstance(name, str) and _valid(name) and name not in reserved and name not in used


def identifier(text: object, used: set[str], *, camel: bool = False, reserved: frozenset[str] = RESERVED) -> str:
    """A fresh Python name made from any ``text`` (added to ``used``): ``snake_case`` for variables,
    ``CamelCase`` for a class (``camel``). Never a keyword, never in ``reserved`` or ``used``, and the
    same name to Python as to this function (NFKC-stable), so two different results are two variables."""
    words = _words(str(text))
    if camel:
        name = "".join(w[:1].upper() + w[1:] for w in words) or "ConvertedModel"
    else:
        name = "_".join(words).lower() or "x"
    name = _nfkc(name)[:MAX_LENGTH].rstrip("_")
    if not _valid(name):  # case mapping or a leading digit or mark can leave a non-identifier: ASCII it is
        name = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or ("ConvertedModel" if camel else "x")
    if camel and (name[0].isdigit() or name in reserved):
        name = f"Keras{name}"  # class KerasNone, class Keras3d
    elif name[0].isdigit():
        name = f"v_{name}"
    elif name in reserved:
        name = f"{name}_"  # self_, print_, as PEP 8 spells a name that would shadow one
    candidate, n = name, 1
    while not usable(candidate, used, reserved):
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate


def _string(text: str) -> str:
    """``repr(text)``, in double quotes where that needs no escape (as ruff format writes strings)."""
    written = repr(text)
    if written.startswith("'") and '"' not in text:  # then text holds no ' either (repr would use ")
        written = '"' + written[1:-1] + '"'
    return written


def literal(value: Any, depth: int = 0) -> str:
    """``value`` as a Python literal that evaluates back to it: None, bool, int, float (NaN and infinities
    as ``float("nan")``, ``float("inf")``, ``-float("inf")``), str, and lists, tuples and dicts of them."""
    if depth > MAX_DEPTH:
        raise ConfigError(f"to_source: a value is nested more than {MAX_DEPTH} deep; not a layer's config")
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return _string(str(value))
    if isinstance(value, numbers.Integral):  # numpy's integers too
        number = int(value)  # in hex past Python's 4300-digit limit on writing an int in decimal
        return hex(number) if number.bit_length() > 10_000 else repr(number)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isnan(number):
            return 'float("nan")'
        if math.isinf(number):
            return 'float("inf")' if number > 0 else '-float("inf")'
        return repr(number)
    if isinstance(value, list) and len(value) >= LONG_LIST and all(isinstance(v, str) and "\n" not in v for v in value):
        return _string("\n".join(value)) + '.split("\\n")'  # one constant: parsed and compiled as one token
    if isinstance(value, (list, tuple)):
        items = [literal(v, depth + 1) for v in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k, depth + 1)}: {literal(v, depth + 1)}" for k, v in value.items()) + "}"
    raise ConfigError(
        f"to_source: a value of type {type(value).__name__} is not a plain literal (None, bool, number, str, "
        f"list, tuple, dict); the emitter writes no other"
    )


# -- the check of the emitted module ------------------------------------------------------------------------
_SPECIAL_FLOATS = {"nan", "inf"}
_GLOBAL_CALLS = {"super", "float"}  # the builtins the module calls (float only as float("nan") / ("inf"))
_EXPRESSIONS = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Call,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Starred,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Slice,
)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.NotEq, ast.Eq, ast.Load, ast.Store)
_OPERATORS += (ast.Gt, ast.GtE, ast.Lt, ast.LtE)  # a recorded Keras comparison, written as torch's operator
_COMMENT = re.compile(r"# [A-Za-z_][A-Za-z0-9_]*")


def _refuse(what: str, node: ast.AST | None = None) -> ConfigError:
    where = f" (line {node.lineno})" if node is not None and hasattr(node, "lineno") else ""
    return ConfigError(
        f"to_source: the emitted module would hold {what}{where}, which attnzoo never writes: a name or value "
        f"of the model was not made safe; refusing to return it (please report this with the file)"
    )


def _typed_names(node: ast.stmt) -> bool:
    """Whether ``node`` is ``KERAS_NAMES: dict[str, str] = <value>``."""
    return (
        isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "KERAS_NAMES"
        and ast.unparse(node.annotation) == "dict[str, str]"
        and node.value is not None
    )


def _cache_only(node: ast.FunctionDef) -> bool:
    """Whether a method's keyword-only arguments are none, or forward's one decoding cache as the emitter
    writes it: ``*, cache: DecodingCache | None = None`` (:mod:`attnzoo.keras.decoding`)."""
    a = node.args
    if not a.kwonlyargs:
        return True
    if node.name != "forward" or len(a.kwonlyargs) != 1 or len(a.kw_defaults) != 1:
        return False
    arg, default = a.kwonlyargs[0], a.kw_defaults[0]
    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    plain = isinstance(default, ast.Constant) and default.value is None
    return arg.arg == "cache" and annotation == "DecodingCache | None" and plain


class _Walk:
    """What :func:`check_source` allows, statement by statement (see the module docstring)."""

    def __init__(self) -> None:
        self.globals: set[str] = {"torch", "nn", "F", "math", *_GLOBAL_CALLS, "tuple"}
        self.local: set[str] = set()
        self.bound: set[str] = set()  # locals bound to one of the module's layers: ``layer = layers["a/b"]``

    def module(self, tree: ast.Module) -> None:
        body = list(tree.body)
        if not body or not _is_string(body[0]):
            raise _refuse("no module docstring")
        classes = 0
        for node in body[1:]:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports(node)
            elif isinstance(node, ast.Assign) and _names(node.targets) <= {"KERAS_NAMES", "KERAS_VERSION"}:
                self.data(node.value, node)
                self.globals.update(_names(node.targets))
            elif _typed_names(node):  # ``KERAS_NAMES: dict[str, str] = {}``, where every name is the file's own
                assert isinstance(node, ast.AnnAssign) and node.value is not None
                self.data(node.value, node)
                self.globals.add("KERAS_NAMES")
            elif isinstance(node, ast.ClassDef) and classes == 0:
                classes += 1
                self.cls(node)
            else:
                raise _refuse(f"a module-level {type(node).__name__}", node)
        if classes != 1:
            raise _refuse("no class")

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.name, alias.asname) not in {("torch", None), ("math", None), ("torch.nn.functional", "F")}:
                    raise _refuse(f"an import of {alias.name!r}", node)
                self.globals.add(alias.asname or alias.name)
            return
        module = node.module or ""
        if node.level or not all(part.isidentifier() for part in module.split(".")) or module == "__future__":
            raise _refuse(f"an import from {module!r}", node)
        for alias in node.names:
            if alias.asname is not None or not _valid(alias.name) or alias.name in RESERVED - MODULE_NAMES:
                raise _refuse(f"an import of {alias.name!r} from {module!r}", node)
            self.globals.add(alias.name)

    def data(self, node: ast.expr, where: ast.AST) -> None:
        """A module-level value: a literal, nothing else."""
        for child in ast.walk(node):
            if not isinstance(child, (ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Load)):
                raise _refuse(f"a {type(child).__name__} in a module-level value", where)

    def cls(self, node: ast.ClassDef) -> None:
        base = ast.unparse(node.bases[0]) if len(node.bases) == 1 else ""
        if base != "nn.Module" or node.keywords or node.decorator_list or not _valid(node.name):
            raise _refuse(f"a class {node.name!r} that is not a plain nn.Module", node)
        if node.name in self.globals:
            raise _refuse(f"a class named {node.name!r}, which the module already uses", node)
        self.globals.add(node.name)
        names = [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
        if names != ["__init__", "forward"] or len(node.body) != 2:
            raise _refuse("a class body other than __init__ and forward", node)
        for function in node.body:
            assert isinstance(function, ast.FunctionDef)
            self.function(function)

    def function(self, node: ast.FunctionDef) -> None:
        a = node.args
        if node.decorator_list or a.posonlyargs or a.vararg or a.kwarg or a.defaults or not _cache_only(node):
            raise _refuse(f"a method {node.name} with more than plain arguments", node)
        if not a.args or a.args[0].arg != "self":
            raise _refuse(f"a method {node.name} without self", node)
        self.local = {"self"}
        self.bound = set()
        for arg in a.args[1:]:
            self.store(arg.arg, node)
            self.annotation(arg.annotation, node)
        for arg in a.kwonlyargs:  # the decoding cache, an annotation of an imported class (checked above)
            self.store(arg.arg, node)
        self.annotation(node.returns, node)
        for statement in node.body:
            self.statement(statement)

    def annotation(self, node: ast.expr | None, where: ast.AST) -> None:
        text = ast.unparse(node) if node is not None else ""
        # the annotations the emitter writes: tensors, a tuple of them, Keras's dict or nested lists of them
        if not re.fullmatch(
            r"None|torch\.Tensor|tuple\[torch\.Tensor(, torch\.Tensor)*\]|tuple\[torch\.Tensor, \.\.\.\]|"
            r"tuple|list|dict|"
            r"dict\[str, torch\.Tensor\]",
            text,
        ):
            raise _refuse(f"an annotation {text!r}", where)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr) and ast.unparse(node) == "super().__init__()":
            return
        if ast.unparse(node) == "layers = self.layers":  # the one local that takes a module name
            self.local.add("layers")
            return
        if isinstance(node, ast.Return) and node.value is not None:
            self.expression(node.value, strings=False)
            return
        if isinstance(node, ast.Delete):  # a variable let go of after its last reader
            for target in node.targets:
                if not isinstance(target, ast.Name) or target.id not in self.local or target.id in RESERVED:
                    raise _refuse(f"a del of {ast.unparse(target)!r}, not a variable of forward", node)
            return
        if not isinstance(node, ast.Assign):
            raise _refuse(f"a {type(node).__name__} statement", node)
        self.expression(node.value, strings=False)
        for target in node.targets:
            self.target(target)
        value, (target, *others) = node.value, node.targets
        keyed = isinstance(value, ast.Subscript) and _is_string(value.slice)
        layer = (keyed or isinstance(value, ast.Attribute)) and ast.unparse(value.value) == "layers"
        alias = isinstance(value, ast.Name) and value.id in self.bound
        for stored in (n for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)):
            self.bound.discard(stored.id)  # whatever a name held before, it holds this value now
        if (layer or alias) and not others and isinstance(target, ast.Name):
            self.bound.add(target.id)  # a layer under a long key, bound to be called on a line of its own

    def target(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            self.store(node.id, node)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element.value if isinstance(element, ast.Starred) else element)
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "self.layers":
            return
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "self.layers":
            if not _is_string(node.slice):
                raise _refuse("a layer key that is not a string", node)
        else:
            raise _refuse(f"an assignment to {type(node).__name__}", node)

    def store(self, name: str, where: ast.AST) -> None:
        if name in self.globals or name in RESERVED - {"_"}:
            raise _refuse(f"a variable {name!r} that shadows a name the module uses", where)
        self.local.add(name)

    def expression(self, node: ast.expr, *, strings: bool) -> None:
        """An expression of a method: the module's names and its locals, calls of those, literals; string
        constants only as arguments, keys and subscripts (``strings``)."""
        if not isinstance(node, _EXPRESSIONS):
            raise _refuse(f"a {type(node).__name__} expression", node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and not strings:
                raise _refuse("a string constant outside an argument, key or subscript", node)
            if not isinstance(node.value, (str, int, float, bool, type(None), type(...))):
                raise _refuse(f"a constant of type {type(node.value).__name__}", node)
            return
        if isinstance(node, ast.Name):
            if node.id not in self.local and node.id not in self.globals:
                raise _refuse(f"the name {node.id!r}, which the module does not define", node)
            return
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise _refuse(f"the attribute {node.attr!r}", node)
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            operators = [node.op] if not isinstance(node, ast.Compare) else list(node.ops)
            if not all(isinstance(op, _OPERATORS) for op in operators):
                raise _refuse(f"the operator {type(operators[0]).__name__}", node)
        if isinstance(node, ast.Call):
            self.call(node)
            return
        inside = isinstance(node, (ast.Dict, ast.List, ast.Tuple)) and strings
        for field, child in ast.iter_fields(node):
            for value in child if isinstance(child, list) else [child]:
                if isinstance(value, ast.expr):
                    key = (isinstance(node, ast.Subscript) and field == "slice") or (
                        isinstance(node, ast.Dict) and field == "keys"  # a dict of outputs, keyed as in Keras
                    )
                    self.expression(value, strings=inside or key)

    def call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "float":
                arguments = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if len(node.args) != 1 or node.keywords or arguments[:1] not in ([v] for v in _SPECIAL_FLOATS):
                    raise _refuse("a call of float other than float('nan') or float('inf')", node)
                return
            if func.id in self.bound:
                pass  # one of the module's layers, bound to a local (see statement)
            elif func.id not in self.globals or func.id in ("torch", "nn", "F", "math", "tuple"):
                raise _refuse(f"a call of {func.id!r}", node)
        elif _splits_lines(node):  # a long list of strings, as literal writes it
            return
        elif isinstance(func, (ast.Attribute, ast.Subscript)):  # a method, or a layer: layers["key"](...)
            self.expression(func, strings=False)
        else:
            raise _refuse(f"a call of a {type(func).__name__}", node)
        for argument in node.args:
            self.expression(argument, strings=True)
        for kw in node.keywords:
            if kw.arg is not None and kw.arg.startswith("__"):
                raise _refuse(f"the keyword argument {kw.arg!r}", node)
            self.expression(kw.value, strings=True)


def _splits_lines(node: ast.Call) -> bool:
    """``"a\\nb".split("\\n")``: a string constant split at newlines, and nothing else."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "split"
        and isinstance(func.value, ast.Constant)
        and isinstance(func.value.value, str)
        and not node.keywords
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "\n"
    )


def _is_string(node: ast.AST) -> bool:
    value = node.value if isinstance(node, ast.Expr) else node
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def _names(targets: list[ast.expr]) -> set[str]:
    return {t.id if isinstance(t, ast.Name) else "" for t in targets}


def check_source(source: str) -> None:
    """Refuse (:class:`~attnzoo.errors.ConfigError`) a module that does not parse, or that holds anything
    but what :mod:`attnzoo.keras.emit` writes (its docstring says what that is)."""
    try:
        tree = ast.parse(source)
        comments = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    except (SyntaxError, tokenize.TokenError, ValueError) as e:
        raise _refuse(f"a syntax error ({e})") from None
    for comment in comments:
        if not _COMMENT.fullmatch(comment.string):
            raise ConfigError(
                f"to_source: the emitted module would hold the comment {comment.string[:60]!r} (line "
                f"{comment.start[0]}), which attnzoo never writes; refusing to return it"
            )
    _Walk().module(tree)
