"""What became of a Keras file's layers: :class:`ConversionReport` (each layer's node, variables and notes), and
the one ``UnsupportedKerasLayerError`` that lists every layer nothing converts, with why and the way forward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnzoo.errors import UnsupportedKerasLayerError
from attnzoo.io.text import printable
from attnzoo.keras.files import KerasFile
from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.registry import builtin_names, is_operation, record_keys

__all__ = ["ConversionReport", "no_converter", "unsupported_error"]


@dataclass
class ConversionReport:
    """What became of each Keras layer: its torch node, its variables and any notes; with ``logits=True``,
    what was dropped from each output."""

    source: str
    keras_version: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about the whole model: a dtype policy, training=True calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "keras_version": self.keras_version,
            "notes": self.notes,
            "layers": self.rows,
            "outputs": self.outputs,
        }

    def to_text(self) -> str:
        lines = [f"{self.source} (Keras {self.keras_version}): {len(self.rows)} layers"]
        lines += [f"  note: {note}" for note in self.notes]
        for row in self.rows:
            variables = ", ".join(row["variables"]) or "no variables"
            lines.append(f"  {row['layer']} ({row['class']}) -> {row['node']}: {variables}")
            lines += [f"      {note}" for note in row["notes"]]
        lines += [f"  {line}" for line in self.outputs]
        return "\n".join(printable(line) for line in lines)  # names from the file: shown, never sent


def no_converter(record: LayerRecord, own: bool) -> str:
    """Why nothing took a layer that no converter is registered for."""
    if is_operation(record):
        return (
            f"the keras operation {record.class_name} ({record_keys(record)[0]!r}) is not supported; attnzoo runs "
            f"{', '.join(sorted(builtin_names('keras.ops')))}"
        )
    if own and record.class_name == "Lambda":
        return "a Lambda layer's function is Python code, which attnzoo does not run; make it a layer"
    if own:
        return f"no converter for Keras's {record.class_name}"
    keys = " or ".join(map(repr, record_keys(record)))
    if (record.module or "").startswith("keras_hub") or (record.registered_name or "").startswith("keras_hub>"):
        hub = sorted(builtin_names("keras_hub"))
        return (
            f"keras-hub's {record.class_name}, which attnzoo does not convert (it converts keras-hub's "
            f"{', '.join(hub)}); a converter registered as {keys} converts it"
        )
    return f"a custom layer; no converter is registered as {keys}"


def unsupported_error(file: KerasFile, problems: list[dict[str, Any]]) -> UnsupportedKerasLayerError:
    lines = []
    for p in problems:
        shapes = f"variables {', '.join(str(s) for s in p['variables'])}" if p["variables"] else "no variables"
        lines.append(f"  {p['layer']} ({p['class']}, {shapes}) ({'; '.join(p['reasons'])})")
    hook = (
        "register(KEY, convert) in the hook attnzoo_register_keras_layers(register) (docs/keras-migration.md), "
        "or pass convert_keras_model(..., custom_layers={KEY: convert})"
    )
    hints = []
    if any(not p["keras"] for p in problems):
        hints.append(f"A custom layer converts through a plugin: {hook.replace('KEY', repr('package>ClassName'))}")
    if any(p["keras"] and not p["refused"] for p in problems):
        hints.append(f"A Keras layer attnzoo has no converter for: {hook.replace('KEY', repr('keras>ClassName'))}")
    message = f"{file.path}: {len(problems)} layer(s) cannot be converted, so nothing was converted:\n" + "\n".join(
        lines + hints
    )
    return UnsupportedKerasLayerError(message, problems)
