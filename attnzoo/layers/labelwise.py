"""Label-wise attention (seed 004; Chalkidis et al. 2019): one attention distribution per label.

    A   = softmax_T(H Waᵀ)              [B, L, T]   masked over T (True = attend)
    r_l = A_l H                          [B, L, h]
    y_l = <Wo_l, r_l> + bo_l             [B, L]      logits (sigmoid for probabilities)

H is [B, T, h], Wa and Wo are [L, h] (``shared_output=True`` gives the seed's single Wo [h]), bo [L].
The attention step is scaled dot-product attention with the label matrix as the query and scale 1,
so the forward pass without ``return_attention`` is one fused ``scaled_dot_product_attention`` call:
no [B, L, T] tensor is kept for backward and no Python loop runs over the labels.

Two parameter layouts, the same math:

* ``LabelwiseAttention`` (registry ``labelwise``) keeps the seed's per-label layout, a ``ParameterList``
  ``Wa_list.0 … Wa_list.{L-1}`` of [h] vectors, so the seed's state dicts load as they are.
* ``LabelwiseAttentionBatched`` (``labelwise_batched``) keeps one ``Wa`` [L, h] tensor.

Each loads the other's state dict: :func:`to_batched_state_dict` and :func:`to_per_label_state_dict`
convert explicitly, and ``load_state_dict`` applies them on the fly.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.parameter import is_lazy

from attnzoo.layers.core import check_positive, label_attention
from attnzoo.layers.label_head import LabelHead
from attnzoo.layers.lazy import ParameterGroup

# the per-label layout keeps a Python object per label; ICD-full coding has 8,921 labels
MAX_PER_LABEL = 100_000

__all__ = [
    "LabelwiseAttention",
    "LabelwiseAttentionBatched",
    "to_batched_state_dict",
    "to_per_label_state_dict",
]


def to_batched_state_dict(state_dict: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """Per-label layout (``Wa_list.i`` [h]) -> batched layout (``Wa`` [L, h]); other keys unchanged."""
    keys = [k for k in state_dict if k.startswith(prefix + "Wa_list.") and k[len(prefix) + 8 :].isdigit()]
    if not keys:
        return dict(state_dict)
    rows = sorted(keys, key=lambda k: int(k[len(prefix) + 8 :]))
    out = {k: v for k, v in state_dict.items() if k not in keys}
    out[prefix + "Wa"] = torch.stack([state_dict[k] for k in rows])
    return out


def to_per_label_state_dict(state_dict: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """Batched layout (``Wa`` [L, h]) -> per-label layout (``Wa_list.i`` [h]); other keys unchanged."""
    if prefix + "Wa" not in state_dict:
        return dict(state_dict)
    out = {k: v for k, v in state_dict.items() if k != prefix + "Wa"}
    for i, row in enumerate(state_dict[prefix + "Wa"].unbind(0)):
        out[f"{prefix}Wa_list.{i}"] = row
    return out


def _replace_in_place(state_dict: dict, converted: dict) -> None:
    """``load_state_dict`` hooks must edit the dict they are given."""
    if converted.keys() != state_dict.keys():
        state_dict.clear()
        state_dict.update(converted)


class LabelVectors(ParameterGroup):
    """The per-label vectors ``Wa_list.{l}``; printed as one line rather than one line per label."""

    def extra_repr(self) -> str:
        first = next(iter(self._parameters.values()), None)
        size = "lazy" if first is None or is_lazy(first) else list(first.shape)
        return f"{len(self._parameters)} x {size}"


class _LabelwiseBase(LabelHead):
    name = "labelwise"

    def __init__(
        self,
        num_labels: int,
        *,
        hidden_size: int | None = None,
        shared_output: bool = False,
        output: Literal["logits", "probs"] = "logits",
        chunk_size: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_labels, chunk_size=chunk_size)
        check_positive(self.name, "hidden_size", hidden_size)
        if output not in ("logits", "probs"):
            raise ValueError(f"{self.name}: output must be 'logits' or 'probs', got {output!r}")
        self.shared_output = shared_output
        self.output = output
        self.bo = nn.Parameter(torch.zeros(num_labels, device=device, dtype=dtype))
        self._make_holders()
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _make_holders(self) -> None:
        """Sub-modules that hold parameters, created before the parameters are."""

    # subclasses: how the label matrix Wa [L, h] is stored
    def _query_shapes(self, hidden: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def query_matrix(self) -> Tensor:
        raise NotImplementedError

    def _init_query(self) -> None:
        raise NotImplementedError

    def _parameter_shapes(self, sizes):
        h = sizes["hidden_size"]
        return {**self._query_shapes(h), "Wo": (h,) if self.shared_output else (self.num_labels, h)}

    def _sizes_from_parameters(self):
        return {"hidden_size": self.Wo.shape[-1]}

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self._init_query()
            nn.init.xavier_uniform_(self.Wo.view(-1, self.Wo.shape[-1]))
            nn.init.zeros_(self.bo)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        """x [B, T, h], mask [B, T] bool (True = attend) -> logits [B, L] (and A [B, L, T])."""
        x, keep = self.prepare(x, mask)
        # the label matrix Wa [L, h] is the query; keys = values = x
        reps, weights = label_attention(
            self.query_matrix(), x, x, keep, scale=1.0, return_attention=return_attention, chunk_size=self.chunk_size
        )
        logits = (reps * self.Wo).sum(-1) + self.bo  # [B, L]
        out = torch.sigmoid(logits) if self.output == "probs" else logits
        return (out, weights) if return_attention else out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shared_output={self.shared_output}, output={self.output!r}"


class LabelwiseAttention(_LabelwiseBase):
    """Label-wise attention with the seed's per-label parameters ``Wa_list.{l}`` [h] (see module doc).

    Args:
        num_labels: L, the number of labels.
        hidden_size: h; None infers it from the first input (``LazyModuleMixin``).
        shared_output: one output vector Wo [h] for all labels (the seed) instead of Wo [L, h].
        output: ``"logits"`` (for ``BCEWithLogitsLoss``) or ``"probs"`` (sigmoid applied).
        chunk_size: with ``return_attention``, materialise the weights this many labels at a time.

    Shapes: ``forward(x [B, T, h], mask [B, T] = None, return_attention=False)`` -> logits [B, L],
    or ``(logits [B, L], A [B, L, T])``.
    """

    name = "labelwise"

    def _make_holders(self) -> None:
        if self.num_labels > MAX_PER_LABEL:
            raise ValueError(
                f"labelwise keeps one parameter tensor per label, and {self.num_labels:,} labels would mean as many "
                f"Python objects (minutes to build); use labelwise_batched, which holds one [L, h] matrix and "
                f"loads labelwise state dicts"
            )
        self.Wa_list = LabelVectors()

    def _query_shapes(self, hidden):
        return {f"Wa_list.{i}": (hidden,) for i in range(self.num_labels)}

    def query_matrix(self) -> Tensor:
        # one stack of the per-label vectors; the attention itself is batched over labels
        return torch.stack([getattr(self.Wa_list, str(i)) for i in range(self.num_labels)])

    def _init_query(self) -> None:
        matrix = torch.empty(self.num_labels, self.hidden_size, device=self.bo.device, dtype=self.bo.dtype)
        nn.init.xavier_uniform_(matrix)
        for i, row in enumerate(matrix):
            getattr(self.Wa_list, str(i)).copy_(row)

    def convert_layout(self, state_dict, prefix) -> None:
        super().convert_layout(state_dict, prefix)
        _replace_in_place(state_dict, to_per_label_state_dict(state_dict, prefix))


class LabelwiseAttentionBatched(_LabelwiseBase):
    """Label-wise attention with one label matrix ``Wa`` [L, h]; same arguments and shapes as
    :class:`LabelwiseAttention`, whose state dicts it also loads."""

    name = "labelwise_batched"

    def _query_shapes(self, hidden):
        return {"Wa": (self.num_labels, hidden)}

    def query_matrix(self) -> Tensor:
        return self.Wa

    def _init_query(self) -> None:
        nn.init.xavier_uniform_(self.Wa)

    def convert_layout(self, state_dict, prefix) -> None:
        super().convert_layout(state_dict, prefix)
        _replace_in_place(state_dict, to_batched_state_dict(state_dict, prefix))
