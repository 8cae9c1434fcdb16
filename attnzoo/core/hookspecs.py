"""The hooks a plugin may implement (pluggy project "attnzoo"; entry-point group "attnzoo")."""

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("attnzoo")
hookimpl = pluggy.HookimplMarker("attnzoo")


@hookspec
def attnzoo_register_models(register: Any) -> None:
    """Add models by calling ``register(name, factory, *, config=..., summary=..., weights=...)``."""


@hookspec(firstresult=True)
def attnzoo_resolve_device(device: Any) -> Any:
    """Turn a device string such as ``"auto"`` into a ``torch.device`` (or a string you place), or return None."""


@hookspec(firstresult=True)
def attnzoo_place_model(model: Any, device: Any, dtype: Any) -> Any:
    """Move ``model`` to ``device`` / ``dtype`` and return it, or return None to leave it to the next plugin."""


@hookspec
def attnzoo_register_conventions(register: Any) -> None:
    """Add calling conventions for the conformance kit: ``register(name, convention)`` with a ``Convention``
    or a ``"module:attr"`` string naming one (see ``attnzoo.conventions``)."""


@hookspec
def attnzoo_register_keras_layers(register: Any) -> None:
    """Add converters of custom Keras layers: ``register(keras_name, convert)``, where ``convert(config,
    weights)`` returns a module made by ``attnzoo.create`` (see ``attnzoo.keras.registry``)."""


@hookspec
def attnzoo_register_keras_hub_models(register: Any) -> None:
    """Add keras-hub model classes the Keras converter rebuilds: ``register(class_name, model)``, where
    ``model`` is an ``attnzoo.keras.hub_families.HubModel`` (the builder of the class's functional graph from
    its constructor's arguments, its family and kind; see docs/contributing.md)."""


@hookspec
def attnzoo_register_commands(register: Any) -> None:
    """Add verbs to the ``attnzoo`` command: ``register(name, run, *, help="", arguments=None)``, where
    ``arguments(parser)`` adds the verb's arguments to its ``argparse`` parser and ``run(args)`` runs it and
    returns the exit status (the built-in verbs register the same way; their names are reserved)."""
