"""The node: one Keras layer or operation of a converted graph, as a torch module with Keras's semantics.

Every node is built from plain data (``op`` and its arguments, all sizes included, so it builds on the
``meta`` device) and holds its weights in torch's layouts. The graph (:mod:`attnzoo.keras.model`) calls

    node(args, kwargs, masks) -> (outputs, output_masks)

where ``args`` keeps the structure of the Keras call with tensors in place (a merge layer gets one list),
``masks`` mirrors it with each tensor's Keras mask (bool, True = keep, or None), and ``kwargs`` holds the
call's other arguments. Data layout is Keras's throughout (channels last, time on axis 1); a node
that calls a torch kernel with another layout moves the axes itself. ``self.training`` is Keras's
``training`` argument: ``model.train()`` is ``training=True`` (dropout acts, BatchNormalization uses and
updates batch statistics), ``model.eval()`` is Keras's inference.

Masks follow Keras: a layer that supports masking passes its input mask on (``compute_mask``), one
that does not drops it, and the few that make or change masks (Embedding, Masking, merges, RNNs,
pooling) say so in their family's file.

A node class registers itself by its ``op`` when it is defined (``attnzoo/keras/converters/<family>.py``
holds each family's nodes beside their converters), so :func:`build_node` finds every op without a list.
:func:`build_node` is also the one place a node's ``args`` are recorded: a copy of the data it was built
from, so a node class takes its arguments as keywords and calls plain ``super().__init__()``.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from torch import Tensor, nn

from attnzoo.errors import ConfigError
from attnzoo.layers.kv_cache import KVCache

__all__ = ["Node", "NODES", "build_node", "as_node", "writes", "INTEGER_DTYPES", "glorot_uniform"]

# Keras's integer dtype names: an input of one of them holds ids
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

NODES: dict[str, type[Node]] = {}


class Node(nn.Module):
    """A Keras layer or operation in a converted graph (see the module docstring)."""

    op: ClassVar[str] = ""
    supports_masking: ClassVar[bool] = False  # Keras's flag: the output carries the input's mask
    # whether ``compute`` reads its mask (False: the emitted module's typed call passes it none)
    reads_mask: ClassVar[bool] = True
    # the arguments that are inner layers (a wrapper's): their data or a built node (see as_node)
    layer_arguments: ClassVar[tuple[str, ...]] = ()
    # the argument that is a dict of settings (empty by default) the class also takes as keyword arguments,
    # ``Operation(name="sum", axis=1)`` for ``config={"axis": 1}``: to_source() writes them so
    options_argument: ClassVar[str | None] = None
    # the layer's torch form, ``write(writer, spec) -> bool`` (see :func:`writes`); None: the node is called
    write: ClassVar[Callable[..., bool] | None] = None
    # what a call offered to ``write`` may have besides one tensor argument and one output read: its keyword
    # arguments of these names (tensors included), and more than one output read (see :func:`writes`)
    write_keywords: ClassVar[frozenset[str]] = frozenset()
    write_outputs: ClassVar[bool] = False
    # the argument bounding the ids this layer looks its first input up by (``input_dim``, ``num_tokens``): a
    # model input it reads takes ids below it (attnzoo.keras.inputs refuses the others); None: it reads no ids
    ids_below: ClassVar[str | None] = None
    # whether Keras casts that input to int32 ids whatever its dtype (a table lookup does: keras-io's translator
    # feeds keras.Input's default float32 to a TokenAndPositionEmbedding), so a float input is taken as ids
    casts_to_ids: ClassVar[bool] = False
    # whether the layer keeps keys and values while decoding token by token (its output at a position depends
    # on the positions before it): a model holding one takes a :class:`~attnzoo.layers.kv_cache.DecodingCache`
    # (``cache=``), and its emitted ``forward`` passes it to this layer, and to those that ``reads_positions``
    # (whose output depends on the position itself: a position embedding), as the keyword ``cache``
    decodes: ClassVar[bool] = False
    reads_positions: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "write" not in vars(cls):
            cls.write = None  # a subclass computes otherwise: it has no torch form until it registers one
        if cls.op:
            if cls.op in NODES and NODES[cls.op].__qualname__ != cls.__qualname__:
                raise RuntimeError(f"two node classes for op {cls.op!r}: {NODES[cls.op]} and {cls}")
            NODES[cls.op] = cls

    def __init__(self) -> None:
        super().__init__()
        # the data the node was built from, less its op; build_node records it (nothing else does)
        self.args: dict[str, Any] = {}

    def forward(
        self, args: Any, kwargs: dict[str, Any] | None = None, masks: list[Any] | None = None, *, mask: Any = None
    ) -> Any:
        """The node protocol, ``node(args, kwargs, masks) -> (outputs, output_masks)``, or, for a class that
        keeps this ``forward``, the typed call the emitted module writes: ``node(x)`` or ``node(x, mask=m)``
        (``x`` a tensor, ``m`` its Keras mask) -> the output tensor (its mask is :meth:`output_mask`'s)."""
        if isinstance(args, Tensor):
            return self.compute(args, mask)
        x = args[0]
        first = masks[0] if masks else None
        y = self.compute(x, first)
        return [y], [self.output_mask(x, first)]

    def keras_call(self, *args: Any, input_mask: Any = None, outputs: int = 1, **kwargs: Any) -> Any:
        """The node as the emitted module calls one that computes on more than one tensor or makes masks of
        its own rules: Keras's call with typed arguments, ``node.keras_call(x, input_mask=x_mask,
        padding_mask=p)`` -> ``(output, output_mask)``.

        ``args`` are the call's arguments as Keras takes them (a merge's list of tensors is one argument),
        ``input_mask`` the Keras masks of ``args`` (for one argument its mask, a list for a list argument;
        for several, a tuple of one per argument), ``kwargs`` the call's keyword arguments. ``outputs=n``
        (n > 1) returns the first n outputs and their masks as two tuples."""
        masks = [input_mask] if len(args) == 1 else list(input_mask or [None] * len(args))
        out, out_masks = self(list(args), kwargs, masks)
        if outputs == 1:
            return out[0], out_masks[0] if out_masks else None
        return tuple(out[:outputs]), tuple([*out_masks, *[None] * outputs][:outputs])

    def keys_values(self, kwargs: dict[str, Any], batch: int, limit: int | None = None) -> KVCache | None:
        """This layer's :class:`~attnzoo.layers.kv_cache.KVCache` in the decoding cache the call was given
        (``kwargs["cache"]``, a class that ``decodes``; ``limit``: a window's), None when not decoding."""
        cache = kwargs.get("cache")
        return None if cache is None else cache.keys_values(self, batch, limit)

    def position_limit(self) -> int | None:
        """How many positions the node can give a sequence (a position table's length), which ``generate``
        reads to refuse too long a decoding before it starts; None (here): any."""
        return None

    def recomputed_past(self) -> int | None:
        """A length L such that the node computes every position of a sequence longer than L otherwise than of
        one of at most L (Phi-3's su rope, whose factors follow the whole length): what a decoding cache
        filled up to L holds is not what a longer sequence computes, so ``generate`` runs the whole sequence
        again on a new cache where it crosses L, as transformers does; None (here): no such length."""
        return None

    def compute(self, x: Tensor, mask: Tensor | None) -> Tensor:
        raise NotImplementedError

    def output_mask(self, x: Any, mask: Any) -> Tensor | None:
        return mask if self.supports_masking and isinstance(mask, Tensor) else None

    def constants(self) -> dict[str, Tensor]:
        """The tensors this node's state dict held under these names before the emitted code wrote them as
        literals from its config (Rescaling's ``scale`` and ``offset``): a folder saved then still loads, each
        dropped where it equals its literal (:meth:`KerasModel.convert_layout
        <attnzoo.keras.model.KerasModel.convert_layout>`). None here."""
        return {}

    @classmethod
    def torch_key(cls, key: str) -> str:
        """The state-dict key that this node's tensor ``key`` has in the torch layer the emitted module may
        declare in its place (its ``write``): the same key, as ``nn.Linear`` takes a Dense's
        ``weight``; a node whose torch layer names its tensors otherwise maps them (an RNN), and raises
        ``KeyError`` for a key it does not know."""
        return key

    @classmethod
    def makes_float32(cls, arguments: dict[str, Any]) -> bool:
        """Whether a layer of these ``arguments`` makes float32 outputs whatever its inputs' dtype (an encoding's
        one-hot or counts): the layers after it in a model held in bfloat16 could not take them, so such a model
        is held in float32 (:mod:`attnzoo.keras.dtypes`). False here."""
        return False

    @classmethod
    def logits(cls, spec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The final sigmoid or softmax a layer of data ``spec`` ends in, and its data without it (what
        ``convert_keras_model(..., logits=True)`` puts in an output's place), or None when it ends in
        neither. None here; a Dense, Conv or Activation drops its final activation (:data:`activation_logits`), a
        Softmax layer itself."""
        return None

    @classmethod
    def check_values(cls, arguments: dict[str, Any]) -> str | None:
        """What is wrong with ``arguments`` beyond their types and the rules every layer shares (a name only
        this class knows, such as an operation's), as "key value is not ..."; None when nothing is."""
        return None

    def extra_repr(self) -> str:
        # in the constructor's order, whatever the data's (a saved config's keys come back sorted)
        order = list(inspect.signature(type(self).__init__).parameters)
        ranked = sorted(self.args.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
        return ", ".join(f"{k}={v!r}" for k, v in ranked if not isinstance(v, (dict, list)) or len(v) < 6)


_Write = TypeVar("_Write", bound=Callable[..., bool])


def writes(*classes: type[Node], keywords: tuple[str, ...] = (), outputs: bool = False) -> Callable[[_Write], _Write]:
    """Register the decorated ``write(writer, spec) -> bool`` as the torch form of the node ``classes``: how
    the emitted module (:mod:`attnzoo.keras.emit`) declares and calls a layer of that class as torch, through
    its :class:`~attnzoo.keras.emit.writer.Writer`; False, where a call or a spec is not one it computes
    exactly, keeps the node call. It lives in the family's file, beside the node and its converter.
    ``keywords``: the call's keyword arguments ``write`` reads itself (``Writer.keyword``); ``outputs``: it
    writes every output a call returns (``Writer.outs``), not only the first."""

    def register(write: _Write) -> _Write:
        for cls in classes:
            if vars(cls).get("write") is not None:
                raise RuntimeError(f"two torch forms for {cls.__name__}: {cls.write} and {write}")
            cls.write = staticmethod(write)  # type: ignore[assignment]
            cls.write_keywords, cls.write_outputs = frozenset(keywords), outputs
        return write

    return register


def _activation_logits(cls: type[Node], spec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    activation = spec.get("activation")
    if activation in ("sigmoid", "softmax"):
        return str(activation), {**spec, "activation": "linear"}
    return None


# the :meth:`Node.logits` of a node whose ``activation`` argument it applies last (a Dense's, a Conv's, an
# Activation layer's): a sigmoid or softmax there is dropped by making it ``linear``
activation_logits = classmethod(_activation_logits)


def glorot_uniform(weight: Tensor, fan_in: int, fan_out: int) -> None:
    """Keras's glorot_uniform, the initial value of a fresh layer (a converted one loads its weights)."""
    bound = math.sqrt(6.0 / max(fan_in + fan_out, 1))
    nn.init.uniform_(weight, -bound, bound)


def as_node(layer: dict[str, Any] | Node) -> Node:
    """A wrapper's inner layer (``Bidirectional``'s, ``TimeDistributed``'s): built from its data, as a saved
    graph gives it, or a node already built, as a module ``to_source()`` wrote passes it."""
    return layer if isinstance(layer, Node) else build_node(layer)


def build_node(spec: dict[str, Any], where: str = "a layer") -> Node:
    """A node from its data (``{"op": ..., **arguments}``): ``NODES[op](**arguments)``, with ``args`` a
    copy of ``arguments`` (the node's repr shows them; a later change to ``spec`` does not reach them).
    The arguments are checked first against what the class takes (:func:`attnzoo.keras.node_schema.check_arguments`),
    so a hand-edited value is a ``ConfigError`` naming ``where`` (the layer), the key and the value."""
    from attnzoo.keras.node_schema import check_arguments

    arguments = dict(spec)
    op = arguments.pop("op")
    if op not in NODES:
        raise ConfigError(f"keras_model: {where}: unknown op {str(op)[:60]!r}; known: {', '.join(sorted(NODES))}")
    check_arguments(NODES[op], arguments, where)
    node = NODES[op](**arguments)
    node.args = copy.deepcopy(arguments)
    return node
