"""A converted Keras model's graph (``config.yaml``'s ``keras_model``) checked as data before it is built.

A graph comes from a file someone else may have edited by hand: its keys, types and refs are checked here,
each error naming what is wrong, so no node is built from a malformed one.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import ConfigError
from attnzoo.io.limits import limit, over_limit

__all__ = ["GRAPH_FORMAT", "MAX_OUTPUTS", "validate_graph", "leaves"]

GRAPH_FORMAT = 1
MAX_OUTPUTS = 1024  # outputs one call may have (an RNN's states, a split): an index past it reads nothing


def graph_error(message: str) -> ConfigError:
    return ConfigError(f"keras_model: the graph config is not valid: {message}")


def check_refs(value: Any, known: dict[str, int | None], where: str) -> None:
    """Every ``{"ref": [id, index]}`` in ``value`` names an earlier input or call (``known``: id -> how many
    outputs it has, None where its node decides) and one of its outputs."""
    if isinstance(value, dict) and "ref" in value:
        ref = value["ref"]
        if not (isinstance(ref, list) and len(ref) == 2 and isinstance(ref[0], str) and type(ref[1]) is int):
            raise graph_error(f"{where}: a ref must be [call id, index], got {str(ref)[:60]}")
        if ref[0] not in known:
            raise graph_error(f"{where} uses {ref[0]!r}, which no earlier call or input makes")
        count = known[ref[0]]
        if ref[1] < 0 or (count is not None and ref[1] >= count) or ref[1] > MAX_OUTPUTS:
            has = f"has {count} output{'s' if count != 1 else ''}" if count is not None else "has no such output"
            raise graph_error(f"{where} reads output {ref[1]} of {ref[0]!r}, which {has}")
    elif isinstance(value, dict):
        for v in value.values():
            check_refs(v, known, where)
    elif isinstance(value, list):
        for v in value:
            check_refs(v, known, where)


def validate_graph(graph: Any) -> None:
    """The converted graph's shape as data, checked before any node is built: the format, inputs, layers,
    calls and outputs present with their types, every ref naming an earlier call's output, the size limit."""
    if not isinstance(graph, dict):
        raise graph_error(f"expected a mapping, got {type(graph).__name__}")
    if graph.get("format") != GRAPH_FORMAT:
        raise graph_error(f"format {graph.get('format')!r}; this attnzoo reads format {GRAPH_FORMAT}")
    for key, kind in (("inputs", list), ("layers", dict), ("calls", list), ("outputs", list)):
        if not isinstance(graph.get(key), kind):
            raise graph_error(f"{key!r} must be a {kind.__name__}")
    if not graph["inputs"] or not graph["outputs"]:
        raise graph_error("a model needs at least one input and one output")
    size = len(graph["layers"]) + len(graph["calls"])
    if size > limit("ATTNZOO_MAX_GRAPH_NODES"):
        found = f"holds {size:,} layers and calls"
        raise over_limit("ATTNZOO_MAX_GRAPH_NODES", found, "keras_model: the graph", ConfigError)
    known: dict[str, int | None] = {}  # id -> how many outputs it has (None: its node says, when it runs)
    for entry in graph["inputs"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise graph_error(f"input {str(entry)[:60]} has no id")
        if not isinstance(entry.get("shape"), list) or not entry["shape"]:
            raise graph_error(f"input {entry['id']!r} has no shape")
        known[entry["id"]] = 1
    for key, spec in graph["layers"].items():
        if not isinstance(spec, dict) or not isinstance(spec.get("op"), str):
            raise graph_error(f"layer {key!r} has no op")
    for call in graph["calls"]:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            raise graph_error(f"a call {str(call)[:60]} has no id")
        if call.get("layer") is not None and (
            not isinstance(call["layer"], (str, int)) or call["layer"] not in graph["layers"]
        ):
            raise graph_error(f"call {call['id']!r} uses layer {call['layer']!r}, which is not in 'layers'")
        if not isinstance(call.get("args"), list) or not isinstance(call.get("kwargs"), dict):
            raise graph_error(f"call {call['id']!r} needs 'args' (a list) and 'kwargs' (a mapping)")
        if call.get("layer") is None:  # a nested model's inputs or outputs: the tensors it is given, as they are
            for arg in call["args"]:
                if not (isinstance(arg, dict) and "ref" in arg):
                    raise graph_error(
                        f"call {call['id']!r} (layer null: it passes a nested model's tensors through) is given "
                        f"{_shown(arg)} in its args; a pass-through call takes only refs to tensors ({{ref: [call "
                        f"id, index]}}), which is what attnzoo writes: restore the file, or convert the model again"
                    )
        check_refs(call["args"], known, f"call {call['id']!r}")
        check_refs(call["kwargs"], known, f"call {call['id']!r}")
        passed = len(call["args"]) if call["kwargs"].get("outputs") else 1  # a nested model's ins and outs
        known[call["id"]] = passed if call.get("layer") is None else None
    for out in graph["outputs"]:
        if not (isinstance(out, list) and len(out) == 2 and out[0] in known and isinstance(out[1], int)):
            raise graph_error(f"output {str(out)[:60]} is not [call id, index] of a call")
        check_refs({"ref": out}, known, "the outputs")
    for key in ("input", "output"):
        if graph.get(f"{key}_structure") is not None:
            positions = leaves(graph[f"{key}_structure"])
            if sorted(positions) != list(range(len(graph[f"{key}s"]))):
                raise graph_error(f"{key}_structure must hold each {key}'s position once, got {positions}")


def _shown(value: Any) -> str:
    """A value as the error shows it: its repr, shortened, never Python's refusal of a 100,000-digit int."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer too long to show"
    return text if len(text) <= 60 else text[:57] + "..."


def leaves(structure: Any) -> list[Any]:
    if isinstance(structure, dict):
        return [leaf for value in structure.values() for leaf in leaves(value)]
    if isinstance(structure, list):
        return [leaf for value in structure for leaf in leaves(value)]
    return [structure]
