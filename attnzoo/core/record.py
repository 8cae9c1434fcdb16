"""What a trained model carries beside its weights, as one typed record.

``attnzoo train`` writes it into the weights' metadata (and ``config.yaml`` of a run folder); loading puts
it on the module as ``model.attnzoo_metadata`` (a plain dict, kept for compatibility). Everything that uses
a trained model — predict, evaluate, export, the tokenizer, the ensemble joiner — reads it through
:meth:`RunRecord.of`, which checks every field's type once, so that a file written elsewhere or edited by
hand is refused by field name instead of failing deep inside.

    record = RunRecord.of(model)       # WeightsError naming the field when one is malformed
    record.output, record.labels, record.threshold, record.max_len, record.vocab

Fields (all optional: a layer loaded from a card has none of them):

==============  ======================================================================================
task            the task's name (``wordnet_hypernyms``, ``files``, ...)
task_config     the recipe's task / data section: how the data was read, split and cut (``max_len``)
output          ``multilabel`` (a sigmoid per label), ``multiclass`` (a softmax) or ``g2p`` (phonemes)
vocab           the input vocabulary, ``{"tokens": [...], "specials": [...]}``
phonemes        the output vocabulary of a G2P model, in the same form
labels          the label ids in logit order
label_info      per label ``{"name", "description"}`` for display (same order as ``labels``)
threshold       the multi-label decision threshold tuned on validation
data            where the data came from, pinned (file names and sha256 digests, or package versions)
dataset         the data set's name; ``license`` its licence
metrics         what the trainer measured (``test_*``, ``subset_*``)
check_subset    the size of the fixed test subset that the metrics ``subset_*`` were measured on
seed            the training seed
members         an ensemble's members: ``{"source", "seed", "sha256", ...}`` each
==============  ======================================================================================

Keys beyond these (a Keras conversion report, a plugin's own) are kept in ``extra`` unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnzoo.errors import WeightsError

if TYPE_CHECKING:
    from attnzoo.io.text import Tokenizer

__all__ = ["RunRecord", "DEFAULT_MAX_LEN"]

DEFAULT_MAX_LEN = 64  # tokens a text is cut to when a run's task section does not say


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _vocabulary(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("tokens"), list)
        and isinstance(value.get("specials"), list)
        and all(isinstance(t, str) for t in [*value["tokens"], *value["specials"]])
    )


def _string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _dict_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, Mapping) for v in value)


def _probability(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


# field -> (check, what it must be); None is accepted for every field (not recorded)
_CHECKS: dict[str, tuple[Any, str]] = {
    "task": (lambda v: isinstance(v, str), "a string"),
    "task_config": (lambda v: isinstance(v, Mapping), "a mapping"),
    "output": (lambda v: isinstance(v, str), "a string (multilabel, multiclass or g2p)"),
    "vocab": (_vocabulary, 'a vocabulary {"tokens": [str], "specials": [str]}'),
    "phonemes": (_vocabulary, 'a vocabulary {"tokens": [str], "specials": [str]}'),
    "labels": (_string_list, "a list of label ids (strings)"),
    "label_info": (_dict_list, "a list of {name, description} mappings"),
    "threshold": (_probability, "a probability in [0, 1]"),
    "data": (lambda v: isinstance(v, str), "a string"),
    "dataset": (lambda v: isinstance(v, str), "a string"),
    "license": (lambda v: isinstance(v, str), "a string"),
    "metrics": (lambda v: isinstance(v, Mapping), "a mapping of names to numbers"),
    "check_subset": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "seed": (_is_int, "an integer"),
    "members": (_dict_list, "a list of {source, seed, sha256} mappings"),
}


@dataclass(frozen=True)
class RunRecord:
    """A trained model's record (see the module docstring for each field)."""

    task: str | None = None
    task_config: Mapping[str, Any] = field(default_factory=dict)
    output: str | None = None
    vocab: Mapping[str, Any] | None = None
    phonemes: Mapping[str, Any] | None = None
    labels: list[str] | None = None
    label_info: list[Mapping[str, Any]] | None = None
    threshold: float | None = None
    data: str | None = None
    dataset: str | None = None
    license: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    check_subset: int | None = None
    seed: int | None = None
    members: list[Mapping[str, Any]] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def max_len(self) -> int:
        """How many tokens (or letters) a text is cut to."""
        return int(self.task_config.get("max_len", DEFAULT_MAX_LEN))

    @property
    def trained(self) -> bool:
        """Whether this is a model ``attnzoo train`` wrote (it has a task and a vocabulary)."""
        return self.task is not None and self.vocab is not None

    def tokenizer(self, length: int | None = None) -> Tokenizer | None:
        """The word tokenizer of a text model (predict's, and what an exported file carries), or None: no
        vocabulary, or a G2P model, which reads letters. ``length``: the one length it pads every row to
        (what an exported graph with a fixed length takes); None pads to each batch's longest text."""
        if self.vocab is None or self.output == "g2p":
            return None
        from attnzoo.io.text import Tokenizer, Vocabulary  # torch comes with it: only when asked for

        return Tokenizer(Vocabulary.from_json(self.vocab), self.max_len, length=length)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None, where: Any = "the model") -> RunRecord:
        """The record of a metadata mapping, every field checked; a malformed one is a ``WeightsError``
        naming it."""
        metadata = dict(metadata or {})
        values: dict[str, Any] = {}
        for name, (check, what) in _CHECKS.items():
            value = metadata.pop(name, None)
            if value is not None and not check(value):
                raise WeightsError(
                    f"{where}: its recorded {name!r} is {value!r:.80}, expected {what}; the file was not "
                    f"written by attnzoo train or was edited"
                )
            values[name] = value
        max_len = (values["task_config"] or {}).get("max_len")
        if max_len is not None and not (_is_int(max_len) and max_len > 0):
            raise WeightsError(
                f"{where}: its recorded task_config.max_len is {max_len!r:.40}, expected a positive integer; "
                f"the file was not written by attnzoo train or was edited"
            )
        values["task_config"] = values["task_config"] or {}
        values["metrics"] = values["metrics"] or {}
        return cls(**values, extra=metadata)

    @classmethod
    def of(cls, model: Any, where: Any = None) -> RunRecord:
        """The record a loaded or created module carries (empty for a module without one)."""
        return cls.from_metadata(getattr(model, "attnzoo_metadata", None), where or type(model).__name__)

    def to_metadata(self) -> dict[str, Any]:
        """The inverse of :meth:`from_metadata`: the plain mapping written with the weights."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}
