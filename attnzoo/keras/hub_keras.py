"""The route through keras-hub's own graph: a keras-hub model class attnzoo does not rebuild, built by
keras-hub from the file's config where keras-hub is installed, without allocating its weights.

A keras-hub Backbone or task file keeps only its constructor's arguments (:mod:`attnzoo.keras.hub_families`).
Where attnzoo has no builder for the class, keras-hub itself can build the model from them: the class is
looked up by its registered name (``keras_hub>ElectraBackbone``; only keras-hub's own classes), built with
``from_config`` inside Keras's ``StatelessScope(initialize_variables=False)``, where a variable keeps its
shape and initializer but no value (an ELECTRA-large's 307M variables take 5 MiB and half a second this
way, 2.5 GiB and 40 s allocated), and its graph is written as ``keras.Model(model.input, model.output)``
would save it: the functional record of the same layers, names and calls. The graph reader reads that as any
functional model; a nested keras-hub model inside (a task's backbone) comes back here, or to attnzoo's
builder where it has one. A task's preprocessor is dropped before building: it is no part of the graph. Where
keras-hub's graph uses a layer of the nested backbone from outside it (a masked LM's head tied to the token
table, a causal LM's reverse call of ``token_embedding``), the route's fixes registered with
:func:`~attnzoo.keras.hub_families.route_fix` place that use inside the backbone's graph, where the layer and
its weights are.

Nothing is executed but keras-hub's constructors, and only for a record naming a class keras-hub registers.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from attnzoo.errors import WeightsError

__all__ = ["keras_hub_installed", "keras_hub_graph", "routes"]


def keras_hub_installed() -> bool:
    """Whether keras-hub can be imported here (without importing it)."""
    return importlib.util.find_spec("keras_hub") is not None


def routes(name: str) -> str:
    """The two ways forward for a keras-hub class attnzoo does not rebuild, for a refusal to name."""
    return (
        f"install keras-hub (pip install keras-hub) to convert {name} through its own graph, which keras-hub "
        f"builds from the file's arguments; or {_SAVE_GRAPH}"
    )


_SAVE_GRAPH = "save its graph, keras.Model(model.inputs, model.outputs).save('model.keras'), and convert that file"


def keras_hub_graph(entry: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    """The functional record keras-hub's own class ``name`` builds for ``entry`` (a keras-hub model's config
    record), its ``name`` kept. A ``WeightsError`` where keras-hub is not installed, the class is not one keras-hub
    registers, or keras-hub cannot build it from the arguments (naming what keras-hub said)."""
    if not keras_hub_installed():
        raise WeightsError(f"{where}: keras-hub's {name[:80]!r} is not one attnzoo rebuilds; {routes(name[:80])}")
    import keras
    import keras_hub  # registers keras-hub's classes with Keras
    from keras.src.backend.common.stateless_scope import StatelessScope

    cls = keras.saving.get_registered_object(f"keras_hub>{name}")
    if not isinstance(cls, type) or not issubclass(cls, keras.Model):
        raise WeightsError(
            f"{where}: {name[:80]!r} is not a model class keras-hub {keras_hub.__version__} registers; it cannot "
            f"be built. To go on: {_SAVE_GRAPH}"
        )
    config = dict(entry.get("config") or {})
    if "preprocessor" in config:
        config["preprocessor"] = None  # the tokenizer is read from the preset folder, never built here
    try:
        with StatelessScope(initialize_variables=False), _uncompiled(cls, keras.Model):
            built = {key: value for key, value in entry.items() if key != "compile_config"}
            model = keras.saving.deserialize_keras_object({**built, "config": config}, safe_mode=True)
            graph = keras.Model(model.input, model.output, name=model.name)
            text = json.dumps(keras.saving.serialize_keras_object(graph))  # as model.save writes it
    except Exception as e:  # noqa: BLE001 - keras-hub's own error, said with where it came from
        raise WeightsError(
            f"{where}: keras-hub could not build its {name} from the file's arguments "
            f"({type(e).__name__}: {' '.join(str(e).split())[:300]})"
        ) from None
    record = json.loads(text)  # the record of a config read with a depth limit, a few levels deeper
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise WeightsError(f"{where}: keras-hub's {name} gave no functional graph")
    return {**record, "name": config.get("name", entry.get("name"))}


@contextmanager
def _uncompiled(cls: type, model: type) -> Iterator[None]:
    """keras-hub's tasks call ``self.compile()`` in their constructor, whose optimizer makes variables of
    constant values, which a stateless scope refuses: each ``compile`` of the class's own keras-hub bases
    does nothing while it is built (only keras-hub's classes, restored after)."""
    saved = {}
    for base in cls.__mro__:
        if base.__module__.startswith("keras_hub") and issubclass(base, model) and "compile" in vars(base):
            saved[base] = vars(base)["compile"]
            base.compile = lambda self, *args, **kwargs: None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for base, method in saved.items():
            base.compile = method  # type: ignore[attr-defined]
