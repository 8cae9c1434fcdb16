"""The module's text around ``forward``'s body: the docstring, the imports as ruff's isort writes them,
``KERAS_VERSION`` and ``KERAS_NAMES``, the class and its ``__init__``, ``forward``'s signature (one tensor
per input, named as Keras names it, in Keras's flat order) and its return (Keras's nesting of the outputs)."""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any

from attnzoo.errors import ConfigError
from attnzoo.keras.code_lines import WIDTH, layout, source_segment
from attnzoo.keras.codegen import identifier, literal, usable
from attnzoo.keras.emit.draft import Draft
from attnzoo.keras.emit.freeing import names_in
from attnzoo.keras.emit.node_call import DECODING_CACHE

__all__ = ["module_lines", "class_name_of", "laid_out"]


def _imports(e: Draft, names: Counter[str]) -> list[str]:
    """The import block as ruff's isort writes it (one section): plain imports, then one from-import per
    module by module name, its names constants first, then classes, then functions; a line longer than 88
    characters one name a line."""
    plain = ["import torch"] + (["import torch.nn.functional as F"] if names["F"] else [])
    froms = {**e.imports, "torch": {"nn"}}
    lines = []
    for module in sorted(froms, key=lambda m: (m.lower(), m)):
        ordered = sorted(froms[module], key=lambda n: (not n.isupper(), not n[:1].isupper(), n.lower(), n))
        line = f"from {module} import {', '.join(ordered)}"
        lines.append(
            line if len(line) <= 88 else f"from {module} import (\n" + "".join(f"    {n},\n" for n in ordered) + ")"
        )
    return plain + lines


def class_name_of(graph: dict[str, Any], class_name: Any, e: Draft) -> str:
    """The class's name: ``class_name`` as given, checked, or one made from the Keras model's name."""
    taken = {name for names in e.imports.values() for name in names} | e.used  # unique in the whole module
    if class_name is None:
        keras_name = graph.get("name")
        name = identifier(keras_name or "converted_model", set(taken), camel=True)
        e.keras_names = {name: str(keras_name or ""), **e.keras_names}
        return name
    if not usable(class_name, taken):
        raise ConfigError(
            f"to_source: class_name must be a Python identifier that names nothing the module uses (a keyword, a "
            f"builtin, torch, nn, F, layers, an imported node class), as NFKC leaves it; got {class_name!r:.60}"
        )
    return class_name


def _keras_names(renamed: dict[str, str]) -> list[str]:
    """``KERAS_NAMES``: the names made up here that differ from the file's, each with the file's name."""
    if not renamed:
        return ["KERAS_NAMES: dict[str, str] = {}"]
    return ["KERAS_NAMES = {", *[f"    {literal(k)}: {literal(v)}," for k, v in renamed.items()], "}"]


def _nested(structure: Any, names: list[str]) -> str:
    """The expression of ``names`` nested as ``structure`` (leaves index ``names``): dicts, lists as tuples."""
    if isinstance(structure, int):
        return names[structure]
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{literal(key)}: {_nested(value, names)}" for key, value in structure.items()) + "}"
    items = [_nested(value, names) for value in structure]
    return "(" + ", ".join(items) + (",)" if len(items) == 1 else ")")  # a comma only where it makes the tuple


def module_lines(
    e: Draft,
    name: str,
    inputs: list[str],
    results: list[str],
    keras_version: str | None,
    output_structure: Any,
) -> tuple[list[str], int]:
    """The module's lines, and how many of them come before ``forward``'s body (``e.body``)."""
    from attnzoo.version import __version__

    names = Counter(name for line in e.body for name, _, _ in names_in(line))
    kept = {name, *inputs, *results, *names}  # the made-up names the code still holds
    returns = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    annotation = {1: "torch.Tensor", 2: "tuple[torch.Tensor, torch.Tensor]"}.get(
        len(results), "tuple[torch.Tensor, ...]"
    )
    if output_structure is not None:  # Keras's dict of outputs, or nested lists (as tuples)
        returns = _nested(output_structure, results)
        annotation = "dict[str, torch.Tensor]" if isinstance(output_structure, dict) else "tuple"
    cache = _cache_parameter(e)  # (before the imports are written: it imports DecodingCache)
    head = [
        f'"""{name}: a Keras model converted by attnzoo {__version__}.',
        "",
        f"    model = {name}()",
        '    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))  # the folder\'s weights',
        "    model.eval()  # Keras's inference; model.train() is Keras's training=True",
        "",
        "forward takes the Keras model's inputs by name (``model(**inputs)``) or positionally in Keras's",
        "flat order (a dict's entries by sorted key): tensors, integer ids as integer tensors. Each tensor's",
        "Keras mask is the variable beside it (``x_mask``: bool, True = keep; absent: no mask).",
        "KERAS_NAMES maps each name made up here (the class, the inputs, the layers' outputs) that is not the",
        "Keras file's own to the name it has there, and KERAS_VERSION is the Keras version the file says it",
        "was saved with.",
        *(_CACHE_TEXT if e.decodes else []),
        '"""',
        "",
        *_imports(e, names),
        "",
        f"KERAS_VERSION = {literal(keras_version)}",
        *_keras_names({k: v for k, v in e.keras_names.items() if k in kept and k != v}),
        "",
        "",
        f"class {name}(nn.Module):",
        "    def __init__(self) -> None:",
        "        super().__init__()",
        "        self.layers = nn.ModuleDict()",
        *laid_out(e.init),
        "",
        *_signature([f"{i}: torch.Tensor" for i in inputs] + cache, annotation),
        *(["        layers = self.layers"] if names["layers"] else []),
    ]
    return [*head, *laid_out(e.body), *layout(f"return {returns}", "        "), ""], len(head)


_CACHE_TEXT = [
    "",
    "Decoding token by token (transformers' past_key_values): ``cache = DecodingCache(batch)``, passed as",
    "``cache=cache`` to every call; each call's tokens are the positions after the ones before it.",
]


def _cache_parameter(e: Draft) -> list[str]:
    """forward's keyword-only decoding cache, where a node decodes (:mod:`attnzoo.keras.decoding`)."""
    if not e.decodes:
        return []
    e.uses("attnzoo.layers.kv_cache", "DecodingCache")
    return ["*", f"{DECODING_CACHE}: DecodingCache | None = None"]


def laid_out(statements: list[str]) -> list[str]:
    """``__init__``'s statements as lines. A declaration whose key is so long that ruff would split the key's
    own brackets (where ruff's 88 and 120 columns disagree) is written in two: ``layer = Constructor(...)``,
    then ``self.layers[key] = layer``."""
    lines = []
    for statement in statements:
        laid = layout(statement, "        ")
        if any(len(line) > WIDTH for line in laid):
            node = ast.parse(statement).body[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = source_segment(statement, node.targets[0]), source_segment(statement, node.value)
                if target != "layer":  # (a layer bound in forward is already ``layer = layers[key]``)
                    laid = [*layout(f"layer = {value}", "        "), *layout(f"{target} = layer", "        ")]
        lines.extend(laid)
    return lines


def _signature(parameters: list[str], annotation: str) -> list[str]:
    """``forward``'s ``def`` line, its parameters one a line (with ruff's trailing comma) where it is long."""
    line = f"    def forward(self, {', '.join(parameters)}) -> {annotation}:"
    if len(line) <= WIDTH:
        return [line]
    return ["    def forward(", "        self,", *[f"        {p}," for p in parameters], f"    ) -> {annotation}:"]
