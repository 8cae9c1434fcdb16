"""A keras-hub family's Hugging Face form: the protocol a family's file fills in to be written as a folder
transformers' Auto classes load (:mod:`attnzoo.keras.transformers_folder` writes it).

A family registers one :class:`TransformersForm` with ``@keras_hub_model(..., transformers=FORM)``:

* ``model_type``: transformers' name of the family (``"llama"``), config.json's ``model_type``;
* ``architectures``: the transformers class of each kind of keras-hub class the family has (``{"backbone":
  "LlamaModel", "causal_lm": "LlamaForCausalLM"}``); a kind it leaves out is refused;
* ``config(source) -> dict``: config.json's entries for the family (sizes, epsilons, dropouts, special token
  ids), read from the converted model; ``architectures``, ``model_type`` and the dtype are added by the door;
* ``tensors(source) -> Iterator[(name, tensor)]``: every weight under its transformers name, in
  transformers' layout, computed one at a time from the converted model's state dict;
* ``load_with``: the keyword arguments ``from_pretrained`` needs for a kind (ViT's and RoBERTa's backbones
  have no pooler: ``{"backbone": {"add_pooling_layer": False}}``), which the docs and the tests use.

Both functions take a :class:`HubSource`, the converted model as a family reads it: the keras-hub class and
its kind, the backbone's constructor arguments, the node specs and tensors by their keras-hub layer names
(a task's backbone layers are nested under the backbone's name: :meth:`HubSource.tensor` finds them), and
the special token ids the tokenizer knows. A family refuses what has no exact transformers equivalent with
:meth:`HubSource.refuse` (an :class:`~attnzoo.errors.ExportError` naming the class and why): a folder that
loads but computes something else is never written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from attnzoo.errors import ConfigError, ExportError

__all__ = ["TransformersForm", "HubSource", "Tensors"]

Tensors = Iterator[tuple[str, Any]]


@dataclass(frozen=True)
class HubSource:
    """A converted keras-hub model as a family's Hugging Face form reads it.

    ``keras_class``: the keras-hub class (``"BertTextClassifier"``); ``kind``: ``"backbone"``,
    ``"causal_lm"`` or ``"task"``; ``arguments``: the backbone's constructor arguments (plain values);
    ``layers``: the converted graph's node specs by layer key; ``state``: the converted model's state dict;
    ``prefix``: where the backbone's layers are (``""`` for a backbone, ``"<backbone name>/"`` in a task);
    ``special``: token ids the tokenizer knows (``bos_token_id``, ``eos_token_id``, ``pad_token_id``);
    ``class_names``: a fine-tuned classifier's labels, output i's at i (empty: none known)."""

    keras_class: str
    kind: str
    arguments: Mapping[str, Any]
    layers: Mapping[str, Any]
    state: Mapping[str, Any]
    prefix: str = ""
    special: Mapping[str, int] = field(default_factory=dict)
    class_names: tuple[str, ...] = ()

    def refuse(self, why: str) -> NoReturn:
        """Refuse the class: it has no exact Hugging Face form (``why`` says what differs)."""
        raise ExportError(f"keras-hub's {self.keras_class} is not written as a Hugging Face folder: {why}")

    def _key(self, layer: str, task: bool) -> str:
        return layer if task else f"{self.prefix}{layer}"

    def spec(self, layer: str, *, task: bool = False) -> Mapping[str, Any]:
        """The node spec of the backbone's layer ``layer`` (``task=True``: of the task's own layer)."""
        spec = self.layers.get(self._key(layer, task))
        if not isinstance(spec, Mapping):
            self.refuse(f"its graph has no layer {self._key(layer, task)!r} where a {self.keras_class} has one")
        return spec

    def has(self, layer: str, *, task: bool = False) -> bool:
        return isinstance(self.layers.get(self._key(layer, task)), Mapping)

    def holds(self, key: str, *, task: bool = False) -> bool:
        """Whether the converted model has the tensor ``<layer>.<name>`` (a bias a layer may leave out)."""
        layer, _, name = key.partition(".")
        return f"layers.{self._key(layer, task)}.{name}" in self.state

    def tensor(self, key: str, *, task: bool = False) -> Any:
        """The tensor ``<layer>.<name>`` of the backbone (``task=True``: of the task's own layers)."""
        layer, _, name = key.partition(".")
        full = f"layers.{self._key(layer, task)}.{name}"
        if full not in self.state:
            self.refuse(f"its converted model has no tensor {full!r} where a {self.keras_class} has one")
        return self.state[full]

    def size(self, name: str, default: int | None = None) -> int:
        """The backbone's constructor argument ``name``, a positive int (``default`` where absent)."""
        value = self.arguments.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.refuse(f"its backbone's {name} is {value!r}, not a positive int")
        return value

    def rate(self, layer: str, *, task: bool = False) -> float:
        """The rate of the dropout layer ``layer`` (0 where the graph has none)."""
        if not self.has(layer, task=task):
            return 0.0
        return float(self.spec(layer, task=task).get("rate", 0.0))

    def dense_is_linear(self, layer: str, transformers_class: str) -> None:
        """Refuse a task whose Dense ``layer`` (its logits) ends in an activation: transformers' class returns
        the logits before any."""
        activation = self.spec(layer, task=True).get("activation", "linear")
        if activation not in ("linear", None):
            self.refuse(
                f"its {layer!r} layer applies {activation}, and transformers' {transformers_class} returns the "
                f"logits before it; convert with logits=True (attnzoo convert-keras --logits) to write the logits"
            )


@dataclass(frozen=True)
class TransformersForm:
    """A keras-hub family's Hugging Face form (the module docstring says what each field is)."""

    model_type: str
    architectures: Mapping[str, str]
    config: Callable[[HubSource], dict[str, Any]]
    tensors: Callable[[HubSource], Tensors]
    load_with: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model_type, str) or not self.model_type:
            raise ConfigError(f"TransformersForm.model_type must be a non-empty str, got {self.model_type!r}")
        if not self.architectures or not all(isinstance(v, str) and v for v in self.architectures.values()):
            raise ConfigError(f"TransformersForm.architectures maps kinds to class names, got {self.architectures!r}")
        if not callable(self.config) or not callable(self.tensors):
            raise ConfigError("TransformersForm.config and TransformersForm.tensors must be callable")

    def architecture(self, source: HubSource) -> str:
        """transformers' class for the source's kind, or its refusal."""
        name = self.architectures.get(source.kind)
        if name is None:
            kinds = ", ".join(sorted(self.architectures))
            source.refuse(f"the {self.model_type} family's Hugging Face form covers its {kinds} only")
        return name
