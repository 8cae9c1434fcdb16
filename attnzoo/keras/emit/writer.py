"""The one view a layer's torch form has of the module being written: :class:`Writer`.

A Keras layer family that has a torch form registers ``write(writer, spec) -> bool`` for its node class
(:func:`attnzoo.keras.nodes.writes`, in the family's file in ``keras/converters/``). The emitter calls it for
each call of a layer of that class whose arguments it may write (one output read, no keyword tensors or
settings, a ``mask=`` only as a tensor); ``spec`` is the layer's data. ``write`` returns False where the
call or the spec is not one its torch form computes exactly (a hand-edited config, a mask it cannot
read): whatever it wrote is then taken back, and the node class is called instead.

The writer assigns the call's one output (:attr:`Writer.out`) with :meth:`~Writer.assign`, declares torch
layers with :meth:`~Writer.declare`, and reads the call's tensors (:meth:`~Writer.tensor`,
:meth:`~Writer.value`) and masks (:attr:`~Writer.mask`, :meth:`~Writer.mask_of`). Names come only from
:func:`~attnzoo.keras.codegen.identifier` and values only through :func:`~attnzoo.keras.codegen.literal`
(the writer writes ``literal(v)`` for any value of the spec). The output's mask is the node's own rule
(:class:`~attnzoo.keras.nodes.Node`'s: the argument's mask where the class supports masking) unless the
writer says it: :meth:`~Writer.mask_from` an expression, or :meth:`~Writer.mask_is` a variable or None.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.codegen import identifier, literal
from attnzoo.keras.emit.draft import Draft, is_ref, layer_reference
from attnzoo.keras.emit.node_call import constructor_arguments
from attnzoo.keras.masks import CallMasks

__all__ = ["Writer"]


class Writer:
    """What ``write`` may read and write for one call (see the module docstring)."""

    def __init__(
        self, draft: Draft, key: str, call: dict[str, Any], plan: CallMasks, out: str, outs: list[str] | None = None
    ) -> None:
        self._draft, self._key, self._call, self._plan = draft, key, call, plan
        self.out = out  # the variable the call's output is assigned to
        # the variables of the outputs the graph reads, the first ``out`` (more than one only for a writer
        # registered with ``outputs=True``)
        self.outs = outs or [out]
        self.said_mask = False

    # -- reading the call ----------------------------------------------------------------------------------
    @property
    def args(self) -> list[Any]:
        """The call's arguments as graph data: ``{"ref": ...}`` where a tensor goes (see :meth:`value`)."""
        return self._call["args"]

    @property
    def explicit(self) -> Any:
        """The call's own ``mask=`` as graph data (a ref, or a list of refs and None), or None."""
        return self._plan.explicit

    @property
    def implicit(self) -> bool:
        """False where keras 3 hands the layer no mask (see :class:`~attnzoo.keras.masks.CallMasks`)."""
        return self._plan.implicit

    def tensor(self) -> str | None:
        """The variable of the call's argument where the call has one argument and it is a tensor, else None."""
        args = self.args
        return self._draft.expression(args[0]) if len(args) == 1 and is_ref(args[0]) else None

    def value(self, data: Any) -> str:
        """Graph data as an expression: a tensor's variable, anything else a literal."""
        return self._draft.expression(data)

    def keyword(self, name: str) -> Any:
        """The call's keyword argument ``name`` as graph data (refs where tensors go), or None; only the
        keywords the writer was registered to read (``writes(..., keywords=...)``) reach it."""
        return self._call["kwargs"].get(name)

    def mask_of(self, variable: str) -> str | None:
        """The variable holding the mask of the tensor ``variable`` (None: it has none)."""
        return self._draft.mask_of.get(variable)

    @property
    def mask(self) -> str | None:
        """The mask the node gets for its first argument: the call's ``mask=`` (a tensor) in its place, else
        that argument's own; None where there is none, or the call's ``mask=`` is a list."""
        if self._plan.explicit is not None:
            return self._draft.expression(self._plan.explicit) if is_ref(self._plan.explicit) else None
        mask = self._draft.mask(self.args[0]) if self.args else None
        return mask if isinstance(mask, str) else None

    def sure(self, mask: Any) -> bool:
        """Whether ``mask`` holds a tensor whenever the code runs (a node call's output mask may be None)."""
        return self._draft.sure(mask)

    # -- writing -------------------------------------------------------------------------------------------
    def declare(self, constructor: str) -> str:
        """``self.layers[key] = constructor`` in ``__init__`` (once: a shared layer is declared once), and how
        ``forward`` names that layer."""
        declaration = f"self.layers[{literal(self._key)}] = {constructor}"
        if declaration not in self._draft.init:
            self._draft.init.append(declaration)
        reference = layer_reference(self._key)
        if len(reference) > 40:  # a long key (a nested model's path) is bound first: ruff would split the
            # call's line at the key's brackets at 88 columns and join it at 120
            variable = identifier("layer", self._draft.used)
            self._draft.body.append(f"{variable} = {reference}")
            return variable
        return reference

    def construct(self, module: str, cls: type, spec: dict[str, Any]) -> str:
        """``Name(key=value, ...)``: ``cls`` (imported from ``module``) called with ``spec``'s arguments as
        keywords, those equal to the constructor's defaults left out, as a node is declared: for a torch
        module that takes its node's arguments."""
        name = self.imports(module, cls.__name__)
        return f"{name}({constructor_arguments(self._draft, cls, spec)})"

    def imports(self, module: str, name: str) -> str:
        """``from module import name`` in the module's imports; ``name``, to write."""
        self._draft.uses(module, name)
        return name

    def assign(self, expression: str) -> None:
        """``out = expression`` (again to apply another step to ``out``)."""
        self._draft.body.append(f"{self.out} = {expression}")

    def assign_all(self, expression: str, returned: int) -> None:
        """``outs... = expression`` for an expression returning ``returned`` values: those the graph reads
        by their variables, the others ``_``."""
        names = [*self.outs, *["_"] * (returned - len(self.outs))]
        self._draft.body.append(f"{', '.join(names[:returned])} = {expression}")

    def let(self, hint: str, expression: str) -> str:
        """A fresh variable named after the output and ``hint`` (``{out}_{hint}``), assigned ``expression``."""
        variable = identifier(f"{self.out}_{hint}", self._draft.used)
        self._draft.body.append(f"{variable} = {expression}")
        return variable

    def mask_from(self, expression: str) -> str:
        """The output's mask is a fresh variable assigned ``expression`` (a bool tensor): that variable."""
        variable = self._draft.mask_variable(self.out)
        self._draft.body.append(f"{variable} = {expression}")
        self.mask_is(variable)
        return variable

    def mask_is(self, variable: str | None) -> None:
        """The output's mask is ``variable`` (a mask variable already written) or None."""
        self._draft.mask_of[self.out] = variable
        self.said_mask = True

    def forget_mask(self, variable: str) -> None:
        """The tensor ``variable`` carries no mask from here on (an operation that returns it as it is)."""
        self._draft.mask_of[variable] = None
