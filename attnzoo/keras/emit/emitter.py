"""The emitter: a converted graph's calls, in order, as ``forward``'s statements, and the module around
them (:mod:`attnzoo.keras.emit.module`). Each call of a layer whose node class has a torch form
(``write``, :mod:`attnzoo.keras.emit.writer`) is written by it; any other call, or one its ``write``
declines, is the node call (:mod:`attnzoo.keras.emit.node_call`). It knows no layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnzoo.keras.code_lines import layout
from attnzoo.keras.codegen import check_source, literal
from attnzoo.keras.emit.draft import PLAIN_NAME, Draft
from attnzoo.keras.emit.freeing import freed, names_in, without_unread
from attnzoo.keras.emit.module import class_name_of, module_lines
from attnzoo.keras.emit.node_call import DECODING_CACHE, UNKNOWN, keras_of, node_call, rule_mask
from attnzoo.keras.emit.writer import Writer
from attnzoo.keras.inputs import encoder_calls, input_names
from attnzoo.keras.masks import CallMasks, refs_in
from attnzoo.keras.nodes import NODES

__all__ = ["to_source", "emit", "Emitted"]


@dataclass(frozen=True)
class Emitted:
    """What :func:`emit` wrote: the module's ``source``, its class's name, each call's output variables
    (``"_"`` where nothing reads one) and, for each line of ``source`` that belongs to a call, that call's
    id (line numbers from 1, as tracebacks give them)."""

    source: str
    class_name: str
    outputs: dict[str, list[str]]
    line_calls: dict[int, str]
    decodes: bool = False  # forward takes ``cache=`` (a DecodingCache, attnzoo.keras.decoding)


def to_source(model: Any, class_name: str | None = None) -> str:
    """The converted ``model`` (a :class:`~attnzoo.keras.model.KerasModel`) as Python source (see the module
    docstring). ``class_name`` defaults to the Keras model's name in CamelCase. The source is checked with
    :func:`~attnzoo.keras.codegen.check_source` before it is returned."""
    return emit(model.graph, model.mask_plans, class_name).source


def emit(graph: dict[str, Any], plans: dict[str, CallMasks], class_name: str | None = None) -> Emitted:
    """The module of ``graph`` whose calls follow ``plans`` (each call's mask rules, :mod:`~attnzoo.keras.masks`),
    checked with :func:`~attnzoo.keras.codegen.check_source`; see :func:`to_source`.

    A shared layer is declared once: where its torch form wrote some of its calls and the node the others
    (a tied embedding's lookup and its ``reverse=True`` call), it is written again with every call a node call."""
    nodes_only: set[str] = set()
    decodes = any(NODES[spec["op"]].decodes for spec in graph["layers"].values())
    encoder = encoder_calls(graph) if decodes else set()  # the calls given no cache
    while True:
        e = Draft(counts=_needed_outputs(graph), nodes_only=set(nodes_only), read=_read_outputs(graph))
        e.decodes, e.encoder = decodes, encoder
        if decodes:  # forward's keyword for the decoding cache: no input or variable may take the name
            e.used.add(DECODING_CACHE)
        inputs = []
        for spec, keras_name in zip(graph["inputs"], input_names(graph), strict=True):
            name = e.name(keras_name, keras_name)  # forward's parameter: the name a caller passes it by
            e.values[spec["id"]] = [name]
            e.mask_of[name] = None
            inputs.append(name)
        for call in graph["calls"]:
            _emit_call(e, graph, plans[call["id"]], call)
        twice = {key for key in graph["layers"] if sum(line.startswith(_declaration(key)) for line in e.init) > 1}
        if not twice - nodes_only:
            break
        nodes_only |= twice
    results = [e.values[call][index] for call, index in graph["outputs"]]
    body, owners = without_unread(e.body, e.owners, results, e.masks | e.unpacked, e.returned)
    e.body, e.owners = freed(body, owners, results)
    name = class_name_of(graph, class_name, e)
    version = graph.get("keras_version")
    keras_version = None if version is None else str(version)
    shape = graph.get("output_structure")
    lines, body_start = module_lines(e, name, inputs, results, keras_version, shape)
    source = "\n".join(lines)
    check_source(source)
    line_calls = {}
    number = body_start + 1
    for statement, owner in zip(e.body, e.owners, strict=True):
        for _ in layout(statement, "        "):
            line_calls[number] = owner
            number += 1
    written = {n for line in e.body for n, _, _ in names_in(line)} | set(results) | set(inputs)
    outputs = {call: [v if v in written else "_" for v in names] for call, names in e.values.items()}
    return Emitted(source, name, outputs, line_calls, decodes)


def _declaration(key: str) -> str:
    """How ``__init__`` begins the declaration of the layer ``key`` (:meth:`Writer.declare`, ``node_call``)."""
    return f"self.layers[{literal(key)}] = "


def _needed_outputs(graph: dict[str, Any]) -> dict[str, int]:
    """For each call, how many of its outputs the graph reads (one more than the highest index used)."""
    counts: dict[str, int] = {}
    for call, index in _read_outputs(graph):
        counts[call] = max(counts.get(call, 1), index + 1)
    return counts


def _read_outputs(graph: dict[str, Any]) -> set[tuple[str, int]]:
    """Every (call, output index) the graph reads."""
    read = [[call["args"], call["kwargs"]] for call in graph["calls"]]
    return {tuple(ref["ref"]) for ref in refs_in([read, [{"ref": list(ref)} for ref in graph["outputs"]]])}


def _emit_call(e: Draft, graph: dict[str, Any], plan: CallMasks, call: dict[str, Any]) -> None:
    start = len(e.body)
    _write_call(e, graph, plan, call)
    e.owners += [call["id"]] * (len(e.body) - start)


def _write_call(e: Draft, graph: dict[str, Any], plan: CallMasks, call: dict[str, Any]) -> None:
    if call["layer"] is None:  # a nested model's input (maybe given a mask) or its outputs: the same tensors
        if call["kwargs"].get("outputs"):
            e.values[call["id"]] = [e.expression(a) for a in call["args"]]
            return
        name = e.expression(call["args"][0])
        e.values[call["id"]] = [name]
        if plan.explicit is not None:
            e.mask_of[name] = e.expression(plan.explicit)
        return
    key = call["layer"]
    spec = graph["layers"][key]
    keras = keras_of(spec)
    kind = keras.get("class", spec["op"])  # the Keras class as a comment, where it is a plain name
    if isinstance(kind, str) and PLAIN_NAME.fullmatch(kind):
        e.body.append(f"# {kind}")
    if not _written(e, key, spec, call, plan):
        node_call(e, key, spec, call, plan)


def _written(e: Draft, key: str, spec: dict[str, Any], call: dict[str, Any], plan: CallMasks) -> bool:
    """Whether the layer's torch form (its node class's ``write``) wrote ``call``: only a call with one
    output read and no settings or tensors by keyword (a ``mask=`` tensor aside) is offered to it, and a
    ``write`` that declines leaves the module as it was. The output's mask is the node's rule unless the
    writer said it."""
    cls, args = NODES[spec["op"]], call["args"]
    given = {k for k, v in call["kwargs"].items() if k != "training" and not (k == "mask" and v is None)}
    count = e.counts.get(call["id"], 1)
    if cls.write is None or not isinstance(args, list) or not args or (count != 1 and not cls.write_outputs):
        return False
    if key in e.nodes_only:  # a shared layer some of whose calls only its node computes
        return False
    own = cls.write_keywords
    if given - {"mask"} - own or ("mask" in given and plan.explicit is None) or set(plan.keyword) - own:
        return False  # tensors or settings by keyword, a mask= of data: the node class reads them
    if plan.clears:
        return False
    saved = e.checkpoint()
    outs = e.outputs(call["id"], count, keras_of(spec).get("name", key))
    if count > 1:  # an output the graph never reads is unpacked into _
        outs = [name if (call["id"], i) in e.read else "_" for i, name in enumerate(outs)]
        e.values[call["id"]] = outs
    writer = Writer(e, key, call, plan, outs[0], outs)
    if not cls.write(writer, spec):
        e.rollback(saved)
        return False
    for extra in outs[1:]:  # a second output (an RNN's states) carries no mask
        if extra != "_":
            e.mask_of[extra] = None
    if not writer.said_mask:
        mask = rule_mask(cls, writer.mask)
        if mask is UNKNOWN:
            raise RuntimeError(f"{cls.__name__}.write must say its output's mask: the node has rules of its own")
        e.mask_of[outs[0]] = mask
    return True
