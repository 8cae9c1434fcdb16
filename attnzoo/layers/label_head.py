"""The base of every label-attention head: a learned label matrix attends over a sequence.

    x [B, T, h], mask [B, T] (True = attend)  ->  logits [B, L]  (+ A [B, L, T] with return_attention)

:class:`LabelHead` holds what every head shares, so a head is its parameters and its formula:

* ``num_labels`` and ``chunk_size`` checked in the constructor (keyword-only after ``num_labels``);
* the hidden size ``h`` given or inferred on the first call (:class:`~attnzoo.layers.lazy.LazyLayer`);
* :meth:`prepare`, which checks ``x`` and the mask, and zeroes padded positions (whatever they hold)
  before any arithmetic;
* state-dict layouts of reference repositories: ``renames`` (their key -> ours) and ``drops`` (keys
  they create but never use), applied by ``load_state_dict`` whether or not the sizes are known yet.

A new head subclasses it, implements ``_parameter_shapes``, ``_sizes_from_parameters``,
``reset_parameters`` and ``forward`` (calling ``prepare`` first and ``core.label_attention`` for the
attention), and gets the conformance kit's ``sequence_to_labels`` properties for free.
"""

from __future__ import annotations

from torch import Tensor

from attnzoo.layers.core import check_input, check_mask, check_positive, neutralise
from attnzoo.layers.lazy import LazyLayer

__all__ = ["LabelHead", "rename_keys"]


def rename_keys(state_dict: dict, prefix: str, renames: dict[str, str], drop: tuple[str, ...] = ()) -> None:
    """Translate a reference repository's keys in place (``load_state_dict`` pre-hooks must edit in place)."""
    for old, new in renames.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)
    for key in drop:
        state_dict.pop(prefix + key, None)


class LabelHead(LazyLayer):
    """Shared frame of the label-attention heads (see the module doc).

    Args:
        num_labels: L, the number of labels.
        chunk_size: with ``return_attention``, materialise the weights this many labels at a time
            (None: all at once).
    """

    name = "label_head"
    renames: dict[str, str] = {}
    drops: tuple[str, ...] = ()
    # the head's values are x itself and its scores are masked after they are computed, so bounded
    # padding cannot matter (core.neutralise); False for a head that projects x into its values
    weighs_inputs = True

    def __init__(self, num_labels: int, *, chunk_size: int | None = None) -> None:
        super().__init__()
        check_positive(self.name, "num_labels", num_labels, allow_none=False)
        check_positive(self.name, "chunk_size", chunk_size)
        self.num_labels = num_labels
        self.chunk_size = chunk_size
        self._register_load_state_dict_pre_hook(self._layout_pre_hook)

    # -- state-dict layouts ----------------------------------------------------------------------------
    def convert_layout(self, state_dict: dict, prefix: str) -> None:
        """Turn a foreign layout of this head's keys into ours, in place (subclasses may add more)."""
        rename_keys(state_dict, prefix, self.renames, self.drops)

    def _layout_pre_hook(self, state_dict, prefix, *args) -> None:
        self.convert_layout(state_dict, prefix)

    def _lazy_load_hook(self, state_dict, prefix, *args) -> None:
        self.convert_layout(state_dict, prefix)  # before the lazy parameters read their shapes from it
        super()._lazy_load_hook(state_dict, prefix, *args)

    # -- sizes and inputs ------------------------------------------------------------------------------
    @property
    def hidden_size(self) -> int | None:
        return self.size("hidden_size")

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "hidden"))
        return {"hidden_size": x.shape[-1]}

    def prepare(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Check ``x`` [B, T, h] and ``mask`` [B, T]; return x with padded positions zeroed, and the mask
        as bool [B, T] (or None)."""
        like = next(iter(self.parameters()), None)
        check_input(self.name, "x", x, ("batch", "seq", self.hidden_size or "hidden"), like=like)
        checked = check_mask(self.name, mask, x.shape[0], 1, x.shape[1], like=x)
        keep = None if checked is None else checked[:, 0]
        return neutralise(x, keep, bounded_is_safe=self.weighs_inputs), keep

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, hidden_size={self.hidden_size}"
