"""The emitted module, compiled: a converted Keras model runs the very ``forward`` ``to_source()`` prints.

:func:`attnzoo.keras.emit.emit` writes a graph's module once; :func:`compile_port` compiles that text
(after :func:`~attnzoo.keras.codegen.check_source` walked it: only torch, attnzoo's classes, literals and
the module's own names) and keeps, per text:

* ``cls``: the module's class, whose ``__init__`` declares the layers (``nn.Linear``, ``nn.Conv2d``, node
  classes ...) the converted model holds;
* ``forward``: its ``forward``, the function :class:`~attnzoo.keras.model.KerasModel` calls, with the
  model as ``self``;
* ``every``: the same function with each ``return`` giving its variables (``locals()``) and no ``del``:
  every call's outputs, for ``KerasModel.trace`` and ``convert-keras --check``.

The text is registered with :mod:`linecache` under the file name ``<attnzoo port CLASS HASH>``, so a
traceback through a converted model shows the line of the emitted module that failed, and
``inspect.getsource(model.compiled_forward)`` is the printed ``forward``, text for text (as ``torch.fx``
does for a ``GraphModule``). Compiled modules are kept by their text (the last 64): a model rebuilt from the
same graph reuses them, and a pickled model holds only the text.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnzoo.keras.codegen import check_source

__all__ = ["CompiledPort", "compile_port"]


@dataclass(frozen=True)
class CompiledPort:
    """One emitted module, compiled (see the module docstring)."""

    filename: str
    cls: type
    forward: Callable[..., Any]
    every: Callable[..., dict[str, Any]]


class _EveryVariable(ast.NodeTransformer):
    """``forward`` as a function that returns all its variables: ``return x`` becomes ``return locals()``,
    ``del`` statements go (nothing is let go of)."""

    def visit_Return(self, node: ast.Return) -> ast.Return:  # noqa: N802 - ast.NodeTransformer's naming
        call = ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[])
        return ast.copy_location(ast.Return(value=call), node)

    def visit_Delete(self, node: ast.Delete) -> None:  # noqa: N802
        return None


@functools.lru_cache(maxsize=64)
def compile_port(source: str, class_name: str) -> CompiledPort:
    """``source`` (a module :func:`attnzoo.keras.emit.emit` wrote, holding ``class class_name``) compiled,
    checked first."""
    check_source(source)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    filename = f"<attnzoo port {class_name} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": f"attnzoo.keras.port_{digest}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the checked module attnzoo wrote
    cls = namespace[class_name]

    tree = ast.parse(source, filename)
    (class_def,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    (forward_def,) = [node for node in class_def.body if isinstance(node, ast.FunctionDef) and node.name == "forward"]
    forward_def = _EveryVariable().visit(forward_def)
    every_module = ast.Module(body=[forward_def], type_ignores=[])
    ast.fix_missing_locations(every_module)
    every_namespace = dict(namespace)
    exec(compile(every_module, filename, "exec"), every_namespace)  # noqa: S102 - the same, checked function
    return CompiledPort(filename, cls, cls.forward, every_namespace["forward"])
