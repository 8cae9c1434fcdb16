"""``attnzoo convert-keras --list``: everything the converter takes, read from the registries it converts
with (the ones docs/keras-layers.md's and docs/keras-hub.md's tables are checked against), never a list
kept by hand.

One entry per name: Keras's layers (``keras>Class``), keras-hub's layers (``keras_hub>Class``), keras 3
operations (``keras.ops>name``, as a functional graph records them), keras-hub's model classes
(:func:`~attnzoo.keras.hub_families.hub_models`: family, kind, Hugging Face class), tf.keras 2's TF
functions (a ``TFOpLambda``'s, read as the keras 3 operation named in the route), the classes attnzoo knows
as custom ones (its seeds' layers), and the plugins' converters. Each has its ``route`` (what converts it)
and ``notes`` (the first sentence of its converter's docstring, and the call arguments it takes besides
``training`` and ``mask``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Entry", "conversions", "listing_text", "as_records"]

KINDS = {
    "keras": "Keras layer",
    "keras_hub": "keras-hub layer",
    "keras.ops": "keras.ops operation",
    "": "custom layer attnzoo knows",
}


@dataclass(frozen=True)
class Entry:
    """One name the converter takes: ``kind`` (Keras layer, keras.ops operation, keras-hub model, ...),
    ``name`` as the file records it, ``route`` what converts it, ``notes`` what it keeps, ``provider``
    attnzoo or the plugin's name."""

    kind: str
    name: str
    route: str
    notes: str
    provider: str = "attnzoo"


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    return text.split(". ", 1)[0].rstrip(".") if text else ""


def _converter_entry(converter: Any) -> Entry:
    package, _, name = converter.key.rpartition(">")
    convert = converter.convert
    module = getattr(convert, "__module__", "") or ""
    route = f"{module.rsplit('.', 1)[-1]} converter ({module}.{getattr(convert, '__name__', 'convert')})"
    notes = _first_sentence(getattr(convert, "__doc__", None))
    if converter.call_arguments:
        notes += ("; " if notes else "") + f"call arguments: {', '.join(sorted(converter.call_arguments))}"
    kind = KINDS.get(package, f"{package} layer")
    return Entry(kind, name, route, notes, converter.provider)


def _hub_entries() -> list[Entry]:
    from attnzoo.keras.hub_families import hub_models

    entries, table = [], hub_models()
    for name, model in table.items():
        form = model.transformers
        hf = form.architectures.get(model.kind) if form else None
        route = f"{model.family} {model.kind.replace('_', ' ')} (graph rebuilt from the constructor's arguments)"
        notes = f"backbone {model.backbone}" if model.backbone else ""
        notes += ("; " if notes else "") + (f"Hugging Face class {hf}" if hf else "no Hugging Face form")
        entries.append(Entry("keras-hub model", name, route, notes, table.provider(name)))
    return entries


def _tf_entries() -> list[Entry]:
    from attnzoo.keras.tf_ops import operation_of, supported_functions

    return [
        Entry("tf.keras 2 op", function, f"the keras 3 operation {operation_of(function)}", "a TFOpLambda's call")
        for function in supported_functions()
    ]


def conversions() -> list[Entry]:
    """Every name the converter takes, attnzoo's and the installed plugins', by kind and name."""
    from attnzoo.keras.convert import converter_table
    from attnzoo.keras.registry import builtin, builtin_keys

    entries = [_converter_entry(builtin(key)) for key in builtin_keys()]  # type: ignore[arg-type]
    for converters in converter_table(None).plugins.values():
        entries += [_converter_entry(converter) for converter in converters]
    entries += _hub_entries() + _tf_entries()
    return sorted(entries, key=lambda e: (e.kind, e.name.lower(), e.provider))


def listing_text(entries: list[Entry]) -> str:
    """The entries as a table for people, grouped by kind."""
    lines = []
    for kind in dict.fromkeys(e.kind for e in entries):
        group = [e for e in entries if e.kind == kind]
        lines.append(f"{kind}s ({len(group)}):")
        width = max(len(e.name) for e in group)
        for e in group:
            who = "" if e.provider == "attnzoo" else f" [plugin {e.provider}]"
            notes = f" - {e.notes}" if e.notes else ""
            lines.append(f"  {e.name.ljust(width)}  {e.route}{who}{notes}")
    return "\n".join(lines)


def as_records(entries: list[Entry]) -> list[dict[str, Any]]:
    """What ``--list --json`` prints."""
    return [asdict(e) for e in entries]
