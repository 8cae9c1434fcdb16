"""The module being written: ``__init__``'s and ``forward``'s statements, the imports, the names in use, and
for each tensor variable the variable holding its Keras mask. Only the emitter and :class:`Writer` change it.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from attnzoo.keras.codegen import identifier, literal

__all__ = ["Draft", "is_ref", "layer_reference", "plain_keyword", "PLAIN_NAME"]

PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a comment or a keyword argument may be as it is


def is_ref(value: Any) -> bool:
    """Whether graph data is a tensor: ``{"ref": [call, index]}``."""
    return isinstance(value, dict) and "ref" in value


def plain_keyword(text: Any) -> bool:
    """Whether ``text`` may be written as it is as an attribute or keyword argument name: a plain ASCII
    name, not private, not a Python keyword."""
    if not isinstance(text, str) or text.startswith("_") or keyword.iskeyword(text):
        return False
    return bool(PLAIN_NAME.fullmatch(text))


def layer_reference(key: str) -> str:
    """How ``forward`` names the layer ``key``: ``layers.dense`` where the key is a :func:`plain_keyword`;
    otherwise a literal key, ``layers["my layer"]``. No key of ``nn.ModuleDict`` is one of the dict's own
    attributes (``keys``, ``training``: it refuses them, and the converter appends ``_``), so
    ``layers.<key>`` always finds the layer."""
    return f"layers.{key}" if plain_keyword(key) else f"layers[{literal(key)}]"


@dataclass
class Draft:
    """The code being written (see the module docstring); ``None`` as a mask: the tensor has none."""

    init: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    imports: dict[str, set[str]] = field(default_factory=dict)  # module -> the names imported from it
    used: set[str] = field(default_factory=set)
    keras_names: dict[str, str] = field(default_factory=dict)  # a name made up here -> the Keras name
    values: dict[str, list[str]] = field(default_factory=dict)  # call id -> its outputs' variables
    mask_of: dict[str, str | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # call id -> how many of its outputs are read
    read: set[tuple[str, int]] = field(default_factory=set)  # the (call id, output index) pairs read
    masks: set[str] = field(default_factory=set)  # the variables that hold masks
    unpacked: set[str] = field(default_factory=set)  # the variables a node call's outputs are unpacked into
    returned: set[str] = field(default_factory=set)  # the variables holding a long node call's (outputs, masks)
    unsure: set[str] = field(default_factory=set)  # the mask variables a node call sets (None where it gives none)
    owners: list[str] = field(default_factory=list)  # for each line of ``body``, the call id it was written for
    nodes_only: set[str] = field(default_factory=set)  # the layers whose every call is a node call (emitter's)
    decodes: bool = False  # forward takes the decoding cache (``cache``) and passes it to the nodes that decode
    encoder: set[str] = field(default_factory=set)  # the calls given no cache: an encoder's, the same every step

    def expression(self, value: Any) -> str:
        """Graph data as a Python expression: ``{"ref": [call, i]}`` becomes that output's variable."""
        if is_ref(value):
            call, index = value["ref"]
            return self.values[call][index]
        if isinstance(value, dict):
            return "{" + ", ".join(f"{literal(k)}: {self.expression(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.expression(v) for v in value) + "]"
        return literal(value)

    def mask(self, value: Any) -> Any:
        """The masks of an argument, mirroring its structure (as the converted graph passes them)."""
        if is_ref(value):
            return self.mask_of.get(self.expression(value))
        if isinstance(value, list):
            return [self.mask(v) for v in value]
        return None

    def outputs(self, call_id: str, count: int, keras_name: Any) -> list[str]:
        names = [self.name(call_id if i == 0 else f"{call_id}_{i}", keras_name) for i in range(count)]
        self.values[call_id] = names
        return names

    def name(self, text: Any, keras_name: Any) -> str:
        """A fresh variable made from ``text`` (see :func:`~attnzoo.keras.codegen.identifier`), which
        ``KERAS_NAMES`` maps back to ``keras_name``. A long path of nested models
        (``bert_backbone_1/bert_backbone_1/embeddings_add``) names its variable by its last part: the
        path stays in ``KERAS_NAMES``, and a statement short enough to split where ruff splits it."""
        text = str(text)
        if len(text) > 32 and "/" in text:
            text = text.rsplit("/", 1)[1]
        variable = identifier(text, self.used)
        self.keras_names[variable] = str(keras_name)
        return variable

    def mask_variable(self, name: str) -> str:
        variable = identifier(f"{name}_mask", self.used)
        self.masks.add(variable)
        return variable

    def uses(self, module: str, name: str) -> None:
        self.imports.setdefault(module, set()).add(name)

    def sure(self, mask: Any) -> bool:
        """Whether ``mask`` is a variable that holds a tensor whenever the code runs: not a node call's output
        mask, which holds None where the node gives none."""
        return isinstance(mask, str) and mask.isidentifier() and mask not in self.unsure

    def checkpoint(self) -> tuple[Any, ...]:
        """What :meth:`rollback` restores: everything a writer may change."""
        imports = {module: set(names) for module, names in self.imports.items()}
        sizes = (len(self.init), len(self.body))
        return (
            sizes,
            set(self.used),
            imports,
            dict(self.keras_names),
            dict(self.values),
            dict(self.mask_of),
            set(self.masks),
        )

    def rollback(self, saved: tuple[Any, ...]) -> None:
        (init, body), self.used, self.imports, self.keras_names, self.values, self.mask_of, self.masks = saved
        del self.init[init:], self.body[body:]
