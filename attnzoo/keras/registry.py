"""The Keras converter registry: which converter turns which Keras class into a graph node.

Every converter has one protocol::

    convert(record: LayerRecord, arrays: list[np.ndarray], ctx: Context) -> Converted

``record`` is the layer (class, Keras config, place in the model), ``arrays`` its variables in the order
of the layer's ``weights``, ``ctx`` what the file says about itself (its Keras major version). The result
is the node's data (``{"op": ..., arguments}``, sizes included, so it builds on ``meta``) and its state
dict in torch's layout. A converter raises :class:`Refused` with the reason when the layer uses something
attnzoo does not convert; nothing is ever silently approximated.

attnzoo's own converters sit in ``attnzoo/keras/converters/<family>.py``, each beside the node class it
builds, under a decorator that carries the Keras class's facts::

    @keras_layer("LSTM", "GRU", "SimpleRNN", call_arguments={"initial_state"})
    def convert_rnn(record, arrays, ctx): ...

Keras's own layers register as ``keras>Class``, keras-hub's as ``keras_hub>Class``
(``package="keras_hub"``) and Keras's operations as ``keras.ops>name`` (``package="keras.ops"``, the
snake_case name of ``keras.ops.name``): one decorator, one table, whatever the family.

A plugin registers ``register(keras_name, convert)`` through the ``attnzoo_register_keras_layers`` hook,
with ``convert(config, weights) -> module`` made by ``attnzoo.create``; :func:`adapt` turns that into the
protocol above (the node holds the module's registered name and config, so a saved folder rebuilds it).
``register(keras_name, convert, protocol="node")`` takes a converter of the one protocol instead, whose
nodes are attnzoo's own ops (a saved folder rebuilds them from their data).

The collision policy is attnzoo's one (:mod:`attnzoo.core.tables`): built-ins first. For each name a layer
may go by, a conversion tries ``custom_layers=`` (the user's own choice, made for this call), then
attnzoo's converter, then the plugins' in plugin order; the first that does not refuse wins. So a plugin's
converter of a name attnzoo converts answers only where attnzoo's refuses (a custom activation, an option
attnzoo does not take), and registering one warns once (a :class:`PluginWarning` naming both, and
``custom_layers=`` as the way to put it first); a second plugin's converter of a name a first plugin
registered warns the same way and is tried after it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnzoo.errors import ConfigError, PluginWarning
from attnzoo.keras.files import snake_case
from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.keras_classes import KERAS_CLASSES

__all__ = [
    "Refused",
    "Converted",
    "Context",
    "KerasConverter",
    "keras_layer",
    "builtin",
    "builtin_names",
    "builtin_keys",
    "is_operation",
    "ConverterTable",
    "adapt",
    "CALL_STYLES",
    "module_node",
    "STYLE_ARGUMENTS",
    "record_keys",
    "is_keras_own",
    "native",
]

CALL_STYLES = ("layer", "attention", "mha")
COMMON_CALL_ARGUMENTS = frozenset({"training", "mask"})
# what Keras's own attention calls may pass, by the call style of the node that takes them
SCORE_ARGUMENTS = frozenset({"return_attention_scores", "use_causal_mask"})
STYLE_ARGUMENTS = {
    "layer": frozenset(),
    "attention": SCORE_ARGUMENTS,
    "mha": SCORE_ARGUMENTS | {"value", "key", "query_mask", "value_mask", "key_mask", "attention_mask"},
}


class Refused(Exception):
    """A converter's reason for not taking a layer (reported with the layer)."""


@dataclass
class Converted:
    """A converter's answer: the node's data, its state dict (torch layouts) and notes for the report."""

    spec: dict[str, Any]
    state: dict[str, torch.Tensor]
    notes: list[str] = field(default_factory=list)


def _no_assets(path: Any) -> dict[str, bytes]:
    return {}


@dataclass
class Context:
    """What a converter may need to know about the file: its Keras major version, where it is, and the
    files Keras saved beside a layer's variables (``assets(record.path)``: name -> bytes, such as a
    lookup layer's ``vocabulary.txt`` in a ``.keras`` archive; empty where the format keeps none)."""

    major: int
    where: str
    assets: Callable[[Any], dict[str, bytes]] = _no_assets


Converter = Callable[[LayerRecord, list[np.ndarray], Context], Converted]


@dataclass(frozen=True)
class KerasConverter:
    """One Keras class's converter and facts.

    ``key``: ``keras>Class`` for Keras's own classes, ``package>Class`` or a bare ``Class`` for custom ones;
    ``call_arguments``: the call's keyword arguments it converts besides ``training`` and ``mask`` (any other
    is refused rather than ignored); ``child_order``: the sub-layers whose variables make up the layer's
    ``weights``, in that order, where a keras 3 file saves them in another; ``positional``: the names of the
    call's leading parameters, in order, which a call may pass by keyword (keras-io's
    ``TransformerDecoder(...)(decoder_sequence=x, encoder_sequence=y)``): such a call is read as positional.
    """

    key: str
    convert: Converter
    call_arguments: frozenset[str] = frozenset()
    child_order: tuple[str, ...] = ()
    provider: str = "attnzoo"
    positional: tuple[str, ...] = ()

    def allows(self, arguments: Iterable[str]) -> list[str]:
        """The call arguments this converter does not take, sorted."""
        return sorted(set(arguments) - COMMON_CALL_ARGUMENTS - self.call_arguments)

    def positional_call(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """A call's arguments with its leading parameters passed by keyword moved into their places."""
        args, kwargs = list(args), dict(kwargs)
        while len(args) < len(self.positional) and self.positional[len(args)] in kwargs:
            args.append(kwargs.pop(self.positional[len(args)]))
        return args, kwargs


_BUILTIN: dict[str, KerasConverter] = {}


def keras_layer(
    *class_names: str,
    package: str = "keras",
    call_arguments: Collection[str] = (),
    child_order: tuple[str, ...] = (),
    positional: tuple[str, ...] = (),
    custom: bool = False,
) -> Callable[[Converter], Converter]:
    """Register the decorated function as attnzoo's converter of ``package``'s ``class_names`` (keys
    ``package>Class``: Keras's own layers by default, ``keras_hub``'s, or ``keras.ops``'s operations), or,
    with ``custom=True``, of custom classes of those bare names that attnzoo knows, such as the seeds'."""

    def decorate(convert: Converter) -> Converter:
        for name in class_names:
            key = name if custom else f"{package}>{name}"
            if key in _BUILTIN:
                raise RuntimeError(f"two built-in converters for {key!r}")  # a mistake in attnzoo itself
            _BUILTIN[key] = KerasConverter(
                key, convert, frozenset(call_arguments), tuple(child_order), positional=tuple(positional)
            )
        return convert

    return decorate


def builtin(key: str) -> KerasConverter | None:
    """attnzoo's own converter registered under ``key`` (``keras>Dense``), if any."""
    _load_builtins()
    return _BUILTIN.get(key)


def builtin_keys() -> frozenset[str]:
    """Every key attnzoo converts itself (``keras>Dense``, ``keras_hub>TransformerEncoder``, ``keras.ops>add``)."""
    _load_builtins()
    return frozenset(_BUILTIN)


def builtin_names(package: str = "keras") -> frozenset[str]:
    """The names attnzoo converts itself under ``package``'s keys, bare: Keras's classes (``keras``), keras-hub's
    (``keras_hub``) or Keras's operations (``keras.ops``, snake_case)."""
    _load_builtins()
    return frozenset(k.split(">", 1)[1] for k in _BUILTIN if k.startswith(f"{package}>"))


def _load_builtins() -> None:
    import attnzoo.keras.converters  # noqa: F401 - importing the families fills the table


# -- plugins' converters -----------------------------------------------------------------------------------
def adapt(
    keras_name: str,
    convert: Callable[[dict[str, Any], list[np.ndarray]], Any],
    *,
    provider: str,
    mask: bool = True,
    output_mask: str = "none",
    call: str = "layer",
    call_arguments: Collection[str] = (),
    child_order: Iterable[str] = (),
) -> KerasConverter:
    """A plugin's ``convert(config, weights) -> module`` as a converter of the one protocol: the module must
    be made by ``attnzoo.create`` (its ``attnzoo_config`` names it), and becomes a ``zoo`` node.

    ``mask``: pass the incoming Keras mask when the module's forward takes ``mask``; ``output_mask``:
    ``"none"`` or ``"input"`` (the output keeps the first input's mask); ``call``: how the Keras call maps
    onto the module, ``"layer"``, ``"attention"`` (Keras's Attention) or ``"mha"`` (MultiHeadAttention)."""
    if not isinstance(keras_name, str) or not keras_name:
        raise ConfigError(f"register(keras_name, convert): keras_name must be a non-empty str, got {keras_name!r}")
    if not callable(convert):
        raise ConfigError(f"register({keras_name!r}, convert): convert must be callable")
    if output_mask not in ("none", "input"):
        raise ConfigError(f"register({keras_name!r}, ...): output_mask must be 'none' or 'input'")
    if call not in CALL_STYLES:
        raise ConfigError(f"register({keras_name!r}, ...): call must be one of {', '.join(CALL_STYLES)}")
    if isinstance(call_arguments, str) or isinstance(child_order, str):
        raise ConfigError(f"register({keras_name!r}, ...): call_arguments and child_order are lists of names")

    def as_node(record: LayerRecord, arrays: list[np.ndarray], ctx: Context) -> Converted:
        config = dict(record.config)
        config.setdefault("__keras_major__", ctx.major)
        module = convert(config, [a.copy() for a in arrays])
        return module_node(module, call=call, mask=mask, output_mask=output_mask, source=f"{provider} for {keras_name}")

    arguments = STYLE_ARGUMENTS[call] | frozenset(call_arguments)
    return KerasConverter(keras_name, as_node, arguments, tuple(child_order), provider)


def native(
    keras_name: str,
    convert: Converter,
    *,
    provider: str,
    call_arguments: Collection[str] = (),
    child_order: Iterable[str] = (),
    positional: Iterable[str] = (),
) -> KerasConverter:
    """A converter of the one protocol registered through the hook (``protocol="node"``)."""
    if not isinstance(keras_name, str) or not keras_name or not callable(convert):
        raise ConfigError(f"register({keras_name!r}, convert, protocol='node'): a non-empty name and a callable")
    if any(isinstance(names, str) for names in (call_arguments, child_order, positional)):
        raise ConfigError(
            f"register({keras_name!r}, ...): call_arguments, child_order and positional are lists of names"
        )
    return KerasConverter(
        keras_name, convert, frozenset(call_arguments), tuple(child_order), provider, tuple(positional)
    )


def module_node(module: Any, *, call: str, mask: bool, output_mask: str, source: str) -> Converted:
    """The ``zoo`` node of a module made by ``attnzoo.create`` (its registered name and config), with its
    weights as the node's ``layer.*`` state."""
    info = getattr(module, "attnzoo_config", None)
    if not isinstance(info, Mapping) or "name" not in info:
        raise Refused(
            f"the converter registered by {source} returned a {type(module).__name__} not made by "
            f"attnzoo.create, so a saved folder could not rebuild it"
        )
    takes_mask = "mask" in inspect.signature(module.forward).parameters
    style = "layer_unmasked" if call == "layer" and not (mask and takes_mask) else call
    spec = {"op": "zoo", "model": info["name"], "config": dict(info["config"]), "call": style}
    spec["output_mask"] = output_mask
    state = {f"layer.{k}": v.detach().to(torch.float32) for k, v in module.state_dict().items()}
    return Converted(spec, state, [f"attnzoo {info['name']} (registered by {source})"])


# -- the table of one conversion ---------------------------------------------------------------------------
class ConverterTable:
    """Every converter a conversion may use, by key, in the order they are tried: ``custom_layers=``, then
    attnzoo's own, then each plugin's in plugin order (the collision policy in this module's docstring)."""

    def __init__(self) -> None:
        self.custom: dict[str, list[KerasConverter]] = {}
        self.plugins: dict[str, list[KerasConverter]] = {}

    def add(self, entry: KerasConverter) -> None:
        """Add a converter; one given as ``custom_layers=`` goes first, a plugin's after attnzoo's (with a
        warning when attnzoo or an earlier plugin already converts its name)."""
        if entry.provider == "custom_layers":
            self.custom.setdefault(entry.key, []).append(entry)
            return
        _load_builtins()
        earlier = [held.provider for held in self.plugins.get(entry.key, [])]
        if entry.key in _BUILTIN:
            earlier.insert(0, "attnzoo")
        if earlier:
            warnings.warn(
                f"attnzoo: {entry.provider!r} registers a Keras converter for {entry.key!r}, which "
                f"{', '.join(map(repr, earlier))} converts too; theirs is tried first and {entry.provider!r}'s "
                f"only where it refuses (to try yours first, pass it as convert_keras_model(..., "
                f"custom_layers={{{entry.key!r}: convert}}))",
                PluginWarning,
                stacklevel=3,
            )
        self.plugins.setdefault(entry.key, []).append(entry)

    def register_for(self, provider: str) -> Callable[..., None]:
        """The ``register(keras_name, convert, ...)`` a plugin's hook receives, bound to that plugin."""

        def register(keras_name: str, convert: Callable[..., Any], *, protocol: str = "module", **options: Any) -> None:
            if protocol == "node":
                self.add(native(keras_name, convert, provider=provider, **options))
                return
            if protocol != "module":
                raise ConfigError(f"register({keras_name!r}, ...): protocol must be 'module' or 'node'")
            unknown = sorted(set(options) - set(inspect.signature(adapt).parameters) - {"provider"})
            if unknown:
                raise ConfigError(f"register({keras_name!r}, ...): unknown option(s) {', '.join(unknown)}")
            self.add(adapt(keras_name, convert, provider=provider, **options))

        return register

    def candidates(self, keys: Iterable[str]) -> list[KerasConverter]:
        """The converters to try for a layer known by ``keys`` (most specific first), in order."""
        _load_builtins()
        found = []
        for key in keys:
            found += self.custom.get(key, [])
            if key in _BUILTIN:
                found.append(_BUILTIN[key])
            found += self.plugins.get(key, [])
        return found

    def keys(self) -> list[str]:
        _load_builtins()
        return sorted({*self.custom, *self.plugins, *_BUILTIN})


def is_keras_own(record: LayerRecord) -> bool:
    """Whether the layer is one of Keras's own classes (``keras.layers``, not ``keras_hub`` nor a user's).
    A legacy .h5 records no module: a Keras class name is taken for Keras's own layer there."""
    if record.module is not None:
        return record.module == "keras" or record.module.startswith(("keras.", "tf_keras."))
    return record.class_name in KERAS_CLASSES or record.class_name in builtin_names()


def is_operation(record: LayerRecord) -> bool:
    """A keras 3 operation: its module says so, or (a legacy .h5 records no module) attnzoo converts an
    operation of its class's snake_case name and its config is not a layer's (every layer's config carries
    ``trainable``; an operation's holds its own arguments only)."""
    if record.module is not None:
        return record.is_operation
    return f"keras.ops>{snake_case(record.class_name)}" in builtin_keys() and "trainable" not in record.config


def record_keys(record: LayerRecord) -> list[str]:
    """The names a converter may be registered under, most specific first: ``keras.ops>name`` for one of
    Keras's operations (``keras.ops.get_item``); ``keras>Class`` for Keras's own layers; a custom layer's
    ``package>Class`` when Keras recorded one (``keras_hub>Class`` for a keras-hub class recorded without
    it, by its module), else its bare class name. A bare name never matches a
    packaged class: two packages' ``LabelWiseAttention`` need not agree."""
    if is_operation(record):
        return [f"keras.ops>{snake_case(record.class_name)}"]
    own = is_keras_own(record)
    keys = [f"keras>{record.class_name}"] if own else []
    if record.registered_name and ">" in record.registered_name and not own:
        keys.append(record.registered_name)
    elif not own and (record.module or "").startswith("keras_hub."):  # keras-hub's class, not registered by name
        keys.append(f"keras_hub>{record.class_name}")
    elif not own or record.module is None:
        keys.append(record.class_name)
    return keys
