"""What torch.export made of the open axes, and which Keras layer decided it.

A converted Keras model is first traced with each open axis a named ``Dim`` (any size from 1). Where
torch refuses that ("Constraints violated (height, width)": a strided ``same`` convolution followed by a
transposed one makes torch guard an intermediate size, ``ceil(ceil(h/2)/2) > 1``), it is traced again
with those axes ``Dim.AUTO``: torch derives each axis's range from its own guards, keeps it open where it
can and fixes it where it cannot. :func:`settle` then reads the traced program: an axis torch fixed
becomes a static axis at its traced size, an axis torch limited says the sizes it takes, and each names the
Keras layer that was running when torch added the guard (:class:`GuardLog`), with the guard in words.

    with GuardLog(model) as log:
        program = torch.export.export(model, args, dynamic_shapes=auto_shapes(plan.dynamic_shapes))
    plan = settle(plan, program, model, log)     # static_axes, notes and checks as torch traced it
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import replace
from typing import Any

from attnzoo.interop.export_plan import Plan

__all__ = ["auto_shapes", "fix_axes", "GuardLog", "settle", "layer_of_error"]

_SHAPES_LOG = "torch.fx.experimental.symbolic_shapes"


def auto_shapes(dynamic_shapes: Any) -> Any:
    """``dynamic_shapes`` with every named ``Dim`` but the batch's (axis 0) made ``Dim.AUTO``: torch then
    derives each axis's range from its guards instead of refusing the export."""
    from torch.export import Dim

    def convert(value: Any) -> Any:
        if isinstance(value, dict) and all(isinstance(k, int) for k in value):
            return {k: (d if k == 0 else Dim.AUTO) for k, d in value.items()}
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(convert(v) for v in value)
        return value

    return convert(dynamic_shapes)


def _keras_layer(model: Any, frames: Any) -> str | None:
    """The innermost Keras layer (its Keras name and class) among ``frames`` (innermost first): the frame
    whose ``self`` is one of the converted model's layers."""
    layers = {id(layer): key for key, layer in getattr(model, "layers", {}).items()}
    for frame in frames:
        key = layers.get(id(frame.f_locals.get("self")))
        if key is not None:
            name = getattr(model, "keras_names", {}).get(key, key)
            kind = getattr(model, "keras_classes", {}).get(key)
            return f"{name} ({kind})" if kind else str(name)
    return None


def _stack(frame: Any):
    while frame is not None:
        yield frame
        frame = frame.f_back


def layer_of_error(model: Any, raised: BaseException) -> str | None:
    """The Keras layer running where ``raised`` (or its causes) was raised, from the traceback's frames."""
    error: BaseException | None = raised
    seen = 0
    while error is not None and seen < 8:
        tb, frames = error.__traceback__, []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        found = _keras_layer(model, reversed(frames))
        if found:
            return found
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


class GuardLog(logging.Handler):
    """torch's shape guards and range updates during one trace, each with the Keras layer that was running
    (torch.export's non-strict trace runs the model's Python, so the layer is on the stack)."""

    def __init__(self, model: Any) -> None:
        super().__init__(logging.DEBUG)
        self.model = model
        self.events: list[tuple[str, str | None]] = []  # (torch's message, the layer)
        self.fixed_by: dict[tuple[int, int], tuple[str | None, str]] = {}  # axes fixed after a first trace
        self.first_symbols: dict[tuple[int, int], str] = {}  # the first trace's, which fixed_by's guards use
        self.symbols: dict[tuple[int, int], str] = {}  # (input, axis) -> torch's symbol (s41)
        self._level, self._propagate = logging.NOTSET, True
        self._handlers: list[logging.Handler] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("create_symbol"):  # which input axis each symbol stands for
            found = re.search(r"create_symbol (\S+) = .*\[(\d+)\]\.size\(\)\[(\d+)\]", message)
            if found:
                self.symbols[(int(found.group(2)), int(found.group(3)))] = found.group(1)
        elif "[guard added]" in message or "_update_var_to_range" in message or "set_replacement" in message:
            self.events.append((message, _keras_layer(self.model, _stack(sys._getframe(1)))))

    def __enter__(self) -> GuardLog:
        logger = logging.getLogger(_SHAPES_LOG)
        self._level, self._propagate, self._handlers = logger.level, logger.propagate, logger.handlers[:]
        logger.handlers = [self]  # torch's own handlers would print every debug line
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return self

    def __exit__(self, *exc: Any) -> None:
        logger = logging.getLogger(_SHAPES_LOG)
        logger.handlers = self._handlers
        logger.setLevel(self._level)
        logger.propagate = self._propagate

    def blame(self, symbol: str, what: str, bounds: str = "") -> tuple[str | None, str]:
        """The layer whose guard on ``symbol`` decided it (``fix``: set it to one size; ``range``: raised its
        range to ``bounds``, torch's ``VR[2, 10]``) and that guard, as torch wrote it."""
        pattern = re.compile(rf"\b{re.escape(symbol)}\b")
        last: tuple[str | None, str] = (None, "")
        for message, layer in self.events:
            if not pattern.search(message):
                continue
            if "[guard added]" in message:
                last = (layer, _guard_words(message))
                if what == "fix" and ("Eq(" in message or "==" in message):
                    return last
            elif what == "fix" and message.startswith("set_replacement"):
                return last if last[0] else (layer, _guard_words(message))
            elif what == "range" and message.startswith(f"_update_var_to_range {symbol} = {bounds}"):
                return last if last[1] else (layer, "")
        return last

    def must_fix(self) -> dict[tuple[int, int], tuple[str | None, str]]:
        """The open axes (``(input, axis)``, never the batch) a guard ties to one number (``Eq(2*((s65 +
        1)//2) + 1, 33)``: the traced width and its neighbour only), each with its first such guard's layer
        and words: torch keeps them symbolic behind a runtime assert, so they are fixed at their size."""
        out: dict[tuple[int, int], tuple[str | None, str]] = {}
        by_symbol = {symbol: key for key, symbol in self.symbols.items() if key[1] != 0}
        for message, layer in self.events:
            if "[guard added]" not in message or not message.removeprefix("eval ").startswith(("Eq(", "[guard")):
                continue
            guard = _guard_words(message)
            if not re.fullmatch(r"Eq\(.*, -?\d+\)", guard):  # one side a number: a relation always true is not
                continue
            named = set(re.findall(r"\bs\d+\b", guard))
            if len(named) == 1 and (key := by_symbol.get(named.pop())) is not None:
                out.setdefault(key, (layer, guard))
        return out


def fix_axes(dynamic_shapes: Any, axes: Any) -> Any:
    """``dynamic_shapes`` (one ``inputs`` tuple, a converted Keras model's) with ``axes`` (``(input,
    axis)``) left out: traced at their size."""
    ((name, per_input),) = dynamic_shapes.items()
    return {name: tuple({j: d for j, d in dims.items() if (i, j) not in axes} for i, dims in enumerate(per_input))}


def _guard_words(message: str) -> str:
    """torch's log line cut to the guard itself (``eval 3 <= s41 [guard added] (...)`` -> ``3 <= s41``)."""
    text = message.split(" [guard added]")[0].removeprefix("eval ").strip().removeprefix("[guard suppressed] ")
    return " ".join(text.split())[:200]


def settle(plan: Plan, program: Any, model: Any, log: GuardLog | None) -> Plan:
    """``plan`` as torch traced ``program``: an open axis torch fixed moves to ``static_axes`` at its traced
    size, one torch limited says the sizes it takes; each in the notes with the Keras layer and torch's guard.
    The checks keep only the shapes the file declares it takes."""
    from torch.export.graph_signature import InputKind

    if not plan.axis_names:
        return plan
    user = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    ranges = {str(k): v for k, v in program.range_constraints.items()}
    opened, static, notes = list(plan.open_axes), list(plan.static_axes), list(plan.notes)
    fixed: dict[tuple[int, int], int] = {}
    least: dict[tuple[int, int], tuple[int, int]] = {}  # the sizes an axis takes: (least, most)
    shared: dict[str, list[str]] = {}  # torch's symbol of a limited size -> the axes that are that one size
    for (i, j), name in plan.axis_names.items():
        if i >= len(user) or j == 0:  # the batch keeps its named Dim
            continue
        size = nodes[user[i].arg.name].meta["val"].shape[j]
        symbol = str(size)
        if symbol.isdigit():
            fixed[(i, j)] = int(symbol)
            if log is not None and (i, j) in log.fixed_by:  # found by a first trace: its symbols name it
                layer, guard = log.fixed_by[(i, j)]
                guard = _named(guard, log.first_symbols, plan.axis_names)
            else:
                layer, guard = log.blame(log.symbols.get((i, j), name), "fix") if log else (None, "")
                guard = _named(guard, log.symbols if log else {}, plan.axis_names)
            opened = [a for a in opened if a != name]
            static.append(name)
            notes.append(
                f"fixed: {name} = {symbol} (the traced size): torch.export cannot keep it open past "
                f"{_where(layer, guard)}; give the size your inputs have with --shape"
            )
            continue
        bounds = ranges.get(symbol)
        low, high = getattr(bounds, "lower", 1), getattr(bounds, "upper", None)
        low, high = _whole(low) or 1, _whole(high)
        if low > 1 or high is not None:
            least[(i, j)] = (low, high or sys.maxsize)
            shared.setdefault(symbol, []).append(name)
            if len(shared[symbol]) > 1:  # said once, for every axis of that one size
                continue
            table = _table(model, log, high) if log and high is not None else None
            layer, guard = log.blame(symbol, "range", f"VR[{low}, {high or 'int_oo'}]") if log else (None, "")
            guard = _named(guard, log.symbols if log else {}, plan.axis_names)
            sizes = f"from {low} to {high}" if high is not None else f"of {low} and more"
            notes.append(f"{{axes}} {sizes}: {table or _where(layer, guard)}|{symbol}")
    notes = [_axes_said(n, shared) for n in notes]
    if not fixed and not least:
        return plan

    def takes(args: tuple) -> bool:
        return all(args[i].shape[j] == n for (i, j), n in fixed.items()) and all(
            low <= args[i].shape[j] <= high for (i, j), (low, high) in least.items()
        )

    checks = [c for c in plan.checks if takes(c[0])]
    was, now = "open: " + ", ".join(plan.open_axes), "open: " + ", ".join(opened)
    notes = [now + n[len(was) :] if n.startswith(was + " ") else n for n in notes]
    names = {k: v for k, v in plan.axis_names.items() if k not in fixed}
    bounds = {plan.axis_names[k]: [low, high] for k, (low, high) in least.items() if high < sys.maxsize} or None
    opened_axes, static_axes = tuple(opened), tuple(static)
    return replace(
        plan,
        checks=checks,
        notes=notes,
        open_axes=opened_axes,
        static_axes=static_axes,
        axis_names=names,
        bounds=bounds,
    )


def _axes_said(note: str, shared: dict[str, list[str]]) -> str:
    """A range note (``{axes} from 2 to 64: ...|s41``) with its axes: one takes sizes, several share one."""
    if not note.startswith("{axes} "):
        return note
    text, symbol = note.rsplit("|", 1)
    names = shared[symbol]
    if len(names) == 1:
        return text.replace("{axes}", f"{names[0]} takes sizes", 1)
    together = ", ".join(names[:-1]) + f" and {names[-1]}"
    return text.replace("{axes}", f"{together} are one length (torch traced them as one size), taking sizes", 1)


def _table(model: Any, log: GuardLog, high: int) -> str | None:
    """Words for an upper bound ``high`` that a layer's table sets (a position embedding): the layer whose
    guard added ``... <= rows`` holding a weight of ``rows`` rows (``high`` of them, or ``high`` plus tokens
    the model adds); None where no such layer."""
    texts = {}
    for key in getattr(model, "layers", {}):
        name, kind = getattr(model, "keras_names", {}).get(key, key), getattr(model, "keras_classes", {}).get(key)
        texts[f"{name} ({kind})" if kind else str(name)] = key
    for message, layer in log.events:
        found = re.search(r"(<=|<) (\d+)$", _guard_words(message)) if "[guard added]" in message else None
        if found is None or layer not in texts:
            continue
        rows = int(found.group(2)) - (found.group(1) == "<")
        module = model.layers[texts[layer]]
        for weight, value in [*module.named_parameters(), *module.named_buffers()]:
            if value.ndim >= 1 and value.shape[0] == rows >= high:
                added = f"; {rows - high} of them for what the model adds" if rows > high else ""
                return (
                    f"layer {layer} holds a table of {rows} positions (its {weight}, "
                    f"{' x '.join(map(str, value.shape))}{added}), so a longer input cannot run: the eager model and a "
                    f".pt2 file refuse one before running, an ONNX runtime fails inside the graph (the file carries "
                    f"the bound as attnzoo.axis_bounds, for the caller to check); pad or cut inputs to at most {high}"
                )
    return None


def _whole(bound: Any) -> int | None:
    """A range's bound as an int; None for torch's infinity (``int_oo``) or anything else."""
    text = str(bound)
    return int(text) if text.lstrip("-").isdigit() else None


def _named(guard: str, symbols: dict, axis_names: dict) -> str:
    """torch's symbols in a guard replaced by the axes' names (``s41`` -> ``height``)."""
    for key, symbol in symbols.items():
        if key in axis_names:
            guard = re.sub(rf"\b{re.escape(symbol)}\b", axis_names[key], guard)
    return guard


def _where(layer: str | None, guard: str) -> str:
    said = f"torch's guard {guard}" if guard else "a guard of torch's"
    return f"{said} in layer {layer}" if layer else said
