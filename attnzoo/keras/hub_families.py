"""keras-hub's model classes: the one door a family registers through, and the table the graph reader asks.

A keras-hub Backbone or task model is a ``keras.Model`` subclass that builds a functional graph in its
``__init__``; its ``get_config`` (what ``model.save`` writes into ``config.json``) keeps only the
constructor's arguments (``vocabulary_size``, ``num_layers``, ...), never the layers or calls. The weights
file, though, holds each layer under its own name, as for any functional model. So each class attnzoo
knows has a *builder*, ``build(config, where) -> record``, that writes from those arguments the functional
config keras 3 itself writes for ``keras.Model(model.inputs, model.outputs)``: the same layer names,
classes, configs and calls (:mod:`attnzoo.keras.hub_graph` has the pieces). The graph reader
(:mod:`attnzoo.keras.graph`) then reads it as any functional model, and its layers convert through their
families' converters.

One family, one file: ``attnzoo/keras/converters/hub_<family>.py`` holds the builder, the family's layers
(their nodes, converters and torch forms), and its Hugging Face mapping, and registers its classes with
:func:`keras_hub_model`::

    @keras_hub_model("LlamaBackbone", family="llama", causal_lm="LlamaCausalLM", transformers=LLAMA)
    def llama_graph(config: dict, where: str) -> dict: ...

A plugin registers its own classes through the hook ``attnzoo_register_keras_hub_models(register)``, with
``register("MyBackbone", HubModel(build=..., family="mine"))``: the same table, under attnzoo's one
collision policy (:class:`attnzoo.core.tables.PluginTable`: attnzoo's classes first, a plugin's class of a
taken name skipped with a ``PluginWarning``).

:func:`unwrap` is the graph reader's entry: a config record of a class in the table becomes the
``Functional`` record of its graph; any other record is returned as it is, and a keras-hub model class
with no builder is a ``WeightsError`` naming the classes that convert and the way forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnzoo.core.registry import REGISTRY
from attnzoo.core.tables import PluginTable
from attnzoo.errors import ConfigError, WeightsError

__all__ = [
    "HubModel",
    "Builder",
    "KINDS",
    "keras_hub_model",
    "keras_hub_task",
    "hub_models",
    "hub_model_of",
    "is_keras_hub_model",
    "register_hub_model",
    "unwrap",
    "route_fix",
    "ROUTE_FIXES",
    "backbone_arguments",
    "HOOK",
]

Builder = Callable[[dict[str, Any], str], dict[str, Any]]
KINDS = ("backbone", "causal_lm", "seq2seq_lm", "task")
HOOK = "attnzoo_register_keras_hub_models"


@dataclass(frozen=True)
class HubModel:
    """One keras-hub model class attnzoo converts.

    ``build(config, where)``: the class's functional record from its constructor's arguments (``where``
    names the file in errors); ``family``: the family's name (``"llama"``), as its file and docs row name
    it; ``kind``: ``"backbone"``, ``"causal_lm"`` (a task whose converted model decodes with
    ``generate``), ``"seq2seq_lm"`` (an encoder-decoder task that decodes with ``generate``, its encoder
    inputs fixed) or ``"task"`` (a classifier, a masked LM, ...); ``backbone``: a task's backbone class;
    ``transformers``: the family's Hugging Face form (a
    :class:`~attnzoo.keras.transformers_form.TransformersForm`), or None where the class has none;
    ``refusal``: then, why (what transformers' nearest class computes otherwise), for the door to say."""

    build: Builder
    family: str
    kind: str = "backbone"
    backbone: str | None = None
    transformers: Any = None
    refusal: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise ConfigError(f"HubModel.build must be callable, got {type(self.build).__name__}")
        if self.kind not in KINDS:
            raise ConfigError(f"HubModel.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.family, str) or not self.family:
            raise ConfigError(f"HubModel.family must be a non-empty str, got {self.family!r}")


# attnzoo's own classes, filled by the family files' decorators when attnzoo.keras.converters is imported
_BUILTIN: dict[str, HubModel] = {}


def keras_hub_model(
    *backbones: str,
    family: str,
    causal_lm: str | None = None,
    seq2seq_lm: str | None = None,
    head: Any = None,
    before: Any = None,
    tasks: dict[str, Builder] | None = None,
    transformers: Any = None,
    embedding: str = "token_embedding",
) -> Callable[[Builder], Builder]:
    """Register the decorated builder as the graph of the keras-hub Backbone classes ``backbones``, and of
    their tasks: ``causal_lm``, the class whose graph is the backbone's with its ``token_embedding`` called
    again with ``reverse=True`` for the logits (:func:`attnzoo.keras.hub_graph.causal_lm`; ``head`` adds
    what the task computes after them, such as Gemma's logit soft-capping); ``tasks``, other task classes
    with builders of their own. ``seq2seq_lm``: an encoder-decoder backbone's task whose logits are
    ``token_embedding(decoder_sequence_output, reverse=True)`` (``head`` applies to it too, and ``before`` to
    the state before the reverse call: T5's tied head scales it). ``embedding``:
    the backbone's layer whose reverse call gives the logits
    (``token_embedding``; OPT's ``embeddings``). ``transformers``: the family's Hugging Face form
    (:class:`~attnzoo.keras.transformers_form.TransformersForm`, for every class registered here; the door is
    :func:`attnzoo.keras.to_transformers`). Used by attnzoo's family
    files; a plugin registers :class:`HubModel` records through the hook (see the module docstring)."""
    from attnzoo.keras.hub_graph import SEQ2SEQ_INPUTS, causal_lm_graph

    def register(build: Builder) -> Builder:
        for name in backbones:
            _add(name, HubModel(build, family, "backbone", transformers=transformers))
        if causal_lm is not None:
            task = causal_lm_graph(backbones, build, head=head, embedding=embedding)
            _add(causal_lm, HubModel(task, family, "causal_lm", backbones[0], transformers))
        if seq2seq_lm is not None:
            graph = causal_lm_graph(
                backbones, build, head=head, before=before, inputs=SEQ2SEQ_INPUTS, output="decoder_sequence_output"
            )
            _add(seq2seq_lm, HubModel(graph, family, "seq2seq_lm", backbones[0], transformers))
        for name, task_build in (tasks or {}).items():
            _add(name, HubModel(task_build, family, "task", backbones[0], transformers))
        return build

    return register


def keras_hub_task(
    name: str, build: Builder, *, family: str, backbone: str, transformers: Any = None, refusal: str | None = None
) -> None:
    """Register the task class ``name`` over the family's ``backbone`` class with a Hugging Face form of its
    own, or none (``transformers=None``: the door refuses it, saying ``refusal``), where the family's form
    does not compute it (``BertMaskedLM``: transformers' ``BertForMaskedLM`` head applies another activation)."""
    _add(name, HubModel(build, family, "task", backbone, transformers, refusal))


def _add(name: str, model: HubModel) -> None:
    if name in _BUILTIN:
        raise RuntimeError(f"two builders of keras-hub's {name}: {_BUILTIN[name]} and {model}")
    _BUILTIN[name] = model


def _check(name: str, value: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"a keras-hub model class is registered by its class name, got {name!r}")
    if not isinstance(value, HubModel):
        raise ConfigError(f"register({name!r}, ...) takes a HubModel, got {type(value).__name__}")


def hub_models() -> PluginTable[HubModel]:
    """Class name -> :class:`HubModel`: attnzoo's classes first, then the plugins' (the hook), then those
    registered in this process; one collision policy."""
    return REGISTRY.collected(HOOK, what="keras-hub model class", builtins=_BUILTIN, check=_check)


def register_hub_model(name: str, model: HubModel, *, override: bool = False) -> None:
    """Add a keras-hub model class in this process (a script's own family, without a plugin package):
    after attnzoo's and the plugins' classes, under the same collision policy; ``override=True`` replaces a
    class on purpose."""
    _check(name, model)
    REGISTRY.add_item(HOOK, name, model, override=override)


def _class_of(entry: dict[str, Any]) -> str:
    registered = entry.get("registered_name")
    if isinstance(registered, str) and registered.startswith("keras_hub>"):
        return registered.split(">", 1)[1]
    return str(entry.get("class_name"))


def hub_model_of(entry: Any) -> tuple[str, HubModel] | None:
    """The class name and :class:`HubModel` of a config record of a keras-hub model class attnzoo converts
    (``registered_name`` ``keras_hub>X``, or a class in a module under ``keras_hub``); None otherwise."""
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        return None
    module, registered = str(entry.get("module") or ""), entry.get("registered_name")
    if not (module.startswith("keras_hub") or (isinstance(registered, str) and registered.startswith("keras_hub>"))):
        return None
    name = _class_of(entry)
    model = hub_models().get(name)
    return None if model is None else (name, model)


# the endings of keras-hub's Backbone and task class names (GPT2Backbone, GPT2CausalLM, BertTextClassifier,
# DeepLabV3ImageSegmenter, RetinaNetObjectDetector, ...)
_MODELS = ("Backbone", "LM", "Classifier", "Segmenter", "Detector", "ToImage", "Inpaint", "Estimator", "ToText")


def is_keras_hub_model(entry: Any) -> bool:
    """Whether a config record is of a keras-hub model class (a Backbone or task model: one attnzoo
    converts, or a class named as keras-hub names them in a module under ``keras_hub.src.models``), not of a
    layer: its tokenizers, preprocessors, and the layers a family defines beside its models
    (``LlamaTransformerDecoder`` in ``keras_hub.src.models.llama``)."""
    if hub_model_of(entry) is not None:
        return True
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        return False
    module = str(entry.get("module") or "")
    return module.startswith("keras_hub.src.models") and entry["class_name"].endswith(_MODELS)


# what a family changes in the graph keras-hub builds for one of its classes, (record, where, unwrap) -> record:
# a use of the nested backbone's layer from outside it placed inside (a masked LM's tied head)
RouteFix = Callable[[dict[str, Any], str, Callable[[Any, str], Any]], dict[str, Any]]
ROUTE_FIXES: list[RouteFix] = []


def route_fix(fix: RouteFix) -> RouteFix:
    """Register ``fix`` to run on every graph keras-hub builds on the route through it (:func:`unwrap`)."""
    ROUTE_FIXES.append(fix)
    return fix


def unwrap(entry: Any, where: str) -> Any:
    """A keras-hub model's config record as the ``Functional`` record of its graph (its ``name`` kept);
    any other record as it is. A keras-hub model class with no builder is a ``WeightsError`` saying which
    classes convert and how to save one that does not."""
    if not is_keras_hub_model(entry):
        return entry
    found = hub_model_of(entry)
    config = entry.get("config")
    if found is None:
        from attnzoo.keras.hub_keras import keras_hub_graph, keras_hub_installed, routes

        name = _class_of(entry)[:80]
        if keras_hub_installed():  # keras-hub builds the class's graph from the arguments, weights unallocated
            from attnzoo.keras.hub_graph import reverse_call_inside

            record = keras_hub_graph(entry, name, where)
            for fix in (*ROUTE_FIXES, reverse_call_inside):
                record = fix(record, where, unwrap)
            return record
        known = ", ".join(sorted(hub_models()))
        raise WeightsError(
            f"{where}: keras-hub's {name!r} is a functional model, but its file keeps only its constructor's "
            f"arguments, and attnzoo rebuilds the graphs of {known} only. To go on: {routes(name)}"
        )
    name, model = found
    if not isinstance(config, dict):
        raise WeightsError(f"{where}: keras-hub's {name} has no config")
    rebuilt = model.build(config, f"{where}: {name}")
    return {**rebuilt, "name": config.get("name", entry.get("name"))}


def backbone_arguments(record: dict[str, Any]) -> dict[str, Any]:
    """A keras-hub model's backbone constructor arguments that are plain values (sizes, epsilons, rope
    settings; a task's from its nested backbone record): what the converted graph keeps for the Hugging Face
    door and decoding to read (``graph["keras_hub_config"]``)."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    backbone = config.get("backbone")
    if isinstance(backbone, dict) and isinstance(backbone.get("config"), dict):
        config = backbone["config"]

    def plain(value: Any) -> bool:
        if isinstance(value, list):
            return len(value) <= 64 and all(plain(item) for item in value)
        return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 200)

    return {str(key): value for key, value in config.items() if isinstance(key, str) and plain(value)}
