"""The label-attention family: every head is attention with a learned label matrix as the query.

H is the encoder output [B, T, h], L the number of labels, A [B, L, T] masked over T (True = attend)::

    LWAN  (Chalkidis et al. 2019)  A = softmax_T(H Waᵀ)          y_l = <Wo_l, A_l H> + bo_l        Wa, Wo [L, h]; bo [L]
    CAML  (Mullenbach et al. 2018) A = softmax_T(H Uᵀ)           y_l = <β_l, A_l H> + b_l          U, β [L, h]; b [L]
    LAAT  (Vu et al. 2020)         Z = tanh(H Wᵀ), A = softmax_T(Z Uᵀ)
                                                                 y_l = <w_l, A_l H> + b_l          W [d_a, h]; U [L, d_a]; w [L, h]; b [L]
    JointLAAT (Vu et al. 2020)     LAAT for the L1 parent labels, then g = sigmoid(P sigmoid(y¹)) [p];
                                   LAAT for the L labels with   y_l = <w_l, [A_l H; g]> + b_l    P [p, L1]; w [L, h + p]
    PLM-CA (Edin et al. 2024)      A = softmax_T(Q (H Wkᵀ + bk)ᵀ),  Y = LayerNorm(A (H Wvᵀ + bv)),
                                                                 y_l = <w, Y_l> + b                Q [L, h]; Wk, Wv [h, h]; w [h] shared

(CAML's H is its tanh(conv) output; the full models in ``attnzoo/models/text.py`` supply it.) All heads
route through ``core.label_attention``: below a few million score elements on the CPU the explicit
form, otherwise one fused ``scaled_dot_product_attention`` call that keeps no [B, L, T] tensor for
backward; with ``return_attention`` the weights are materialised ``chunk_size`` labels at a time.

The heads' state dicts also accept the reference repositories' key names through ``load_state_dict``
and ``create(weights=...)``: CAML (``U.weight``, ``final.weight``, ``final.bias``; the unused ``U.bias`` is
dropped), LAAT (``attention.{first,second,third}_linears.<level>``; JointLAAT levels 0 and 1) and PLM-ICD
(``first_linear``, ``second_linear``, ``third_linear``). Whole reference checkpoints (encoders, training
state, keys that are never used) go through ``attnzoo convert-checkpoint`` (``attnzoo/convert.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import check_positive, label_attention, tracing
from attnzoo.layers.keras_layers import KerasVar
from attnzoo.layers.label_head import LabelHead
from attnzoo.layers.labelwise import LabelwiseAttentionBatched

__all__ = ["LWAN", "CAMLHead", "LAATHead", "JointLAATHead", "PLMCAHead", "keras_he_normal_"]


def keras_he_normal_(tensor: torch.Tensor) -> torch.Tensor:
    """Keras's ``he_normal`` on a 2-D weight: truncated normal (±2σ) with σ = sqrt(2 / fan_in), where
    Keras takes fan_in = shape[0] (its kernels are [in, out]), corrected for the truncation."""
    std = math.sqrt(2.0 / tensor.shape[0]) / 0.87962566103423978
    return nn.init.trunc_normal_(tensor, std=std, a=-2 * std, b=2 * std)


class LWAN(LabelwiseAttentionBatched):
    """LabelWiseAttention of Chalkidis et al. 2019, the Keras original of seed 004.

    Args: ``num_labels``, ``hidden_size`` (None: inferred), ``output`` ("logits" | "probs"; the Keras
    layer returns probabilities), ``chunk_size``. Initialisation as the original: Wa, Wo he_normal,
    bo zeros. The original ignores padding; here ``mask`` [B, T] is applied when given.

    Shapes: ``forward(x [B, T, h], mask [B, T] = None, return_attention=False)`` -> logits [B, L]
    (or probabilities), or ``(…, A [B, L, T])``.
    """

    name = "lwan"

    def __init__(
        self,
        num_labels: int,
        *,
        hidden_size: int | None = None,
        output: str = "logits",
        chunk_size: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            num_labels,
            hidden_size=hidden_size,
            shared_output=False,
            output=output,
            chunk_size=chunk_size,
            device=device,
            dtype=dtype,
        )

    def reset_parameters(self) -> None:
        with torch.no_grad():
            keras_he_normal_(self.Wa)
            keras_he_normal_(self.Wo)
            nn.init.zeros_(self.bo)

    def keras_layout(self) -> list[KerasVar]:
        return [KerasVar("Wa", "vars/0", "Wa"), KerasVar("Wo", "vars/1", "Wo"), KerasVar("bo", "vars/2", "bo")]

    def keras_shapes(self) -> dict[str, tuple[int | None, ...]]:
        """Keras shapes (None where the hidden size is still lazy): the label count is known from the start."""
        h = self.hidden_size
        return {"Wa": (self.num_labels, h), "Wo": (self.num_labels, h), "bo": (self.num_labels,)}


class CAMLHead(LabelHead):
    """CAML's per-label attention and output (Mullenbach et al. 2018), over the conv features H.

    Args: ``num_labels``, ``hidden_size`` (d_c, the conv filters; None: inferred), ``chunk_size``.
    Parameters as the reference: ``U.weight`` [L, h], ``final.weight`` [L, h], ``final.bias`` [L];
    xavier-uniform init. Shapes: ``forward(x [B, T, h], mask [B, T] = None, return_attention=False)``
    -> logits [B, L], or ``(logits, A [B, L, T])``.
    """

    name = "caml"
    drops = ("U.bias",)  # the reference's U is an nn.Linear whose bias the formula never uses

    def __init__(
        self, num_labels: int, *, hidden_size: int | None = None, chunk_size: int | None = None, device=None, dtype=None
    ) -> None:
        super().__init__(num_labels, chunk_size=chunk_size)
        check_positive(self.name, "hidden_size", hidden_size)
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        h, L = sizes["hidden_size"], self.num_labels
        return {"U.weight": (L, h), "final.weight": (L, h), "final.bias": (L,)}

    def _sizes_from_parameters(self):
        return {"hidden_size": self.U.weight.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.U.weight)
        nn.init.xavier_uniform_(self.final.weight)
        nn.init.zeros_(self.final.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = self.prepare(x, mask)
        reps, weights = label_attention(
            self.U.weight, x, x, mask, return_attention=return_attention, chunk_size=self.chunk_size
        )
        logits = (reps * self.final.weight).sum(-1) + self.final.bias
        return (logits, weights) if return_attention else logits


def _laat_shapes(prefix: str, labels: int, hidden: int, attention: int, output_in: int) -> dict:
    return {
        f"{prefix}first_linear.weight": (attention, hidden),
        f"{prefix}second_linear.weight": (labels, attention),
        f"{prefix}third_linear.weight": (labels, output_in),
        f"{prefix}third_linear.bias": (labels,),
    }


class LAATHead(LabelHead):
    """LAAT's label attention (Vu et al. 2020): additive-style keys Z = tanh(H Wᵀ), label queries U.

    Args: ``num_labels``, ``hidden_size`` (None: inferred), ``attention_size`` (d_a), ``chunk_size``,
    ``split_size`` (None: off): PLM-ICD's ``laat-split`` mode, attention within each segment of
    ``split_size`` positions and each label's logit the maximum over the segments (a segment with no
    real position takes no part; a sample with none gets the bias).
    Parameters as PLM-ICD names them: ``first_linear.weight`` W [d_a, h], ``second_linear.weight`` U
    [L, d_a], ``third_linear.weight`` w [L, h] and ``.bias`` b [L]; LAAT's repository layout loads too.
    Init N(0, 0.03) as the paper. Shapes: ``forward(x [B, T, h], mask [B, T] = None,
    return_attention=False)`` -> logits [B, L], or ``(logits, A [B, L, T])`` (with ``split_size``, each
    segment's weights sum to one).
    """

    name = "laat"
    renames = {
        "attention.first_linears.0.weight": "first_linear.weight",
        "attention.second_linears.0.weight": "second_linear.weight",
        "attention.third_linears.0.weight": "third_linear.weight",
        "attention.third_linears.0.bias": "third_linear.bias",
    }

    def __init__(
        self,
        num_labels: int,
        *,
        hidden_size: int | None = None,
        attention_size: int = 512,
        chunk_size: int | None = None,
        split_size: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_labels, chunk_size=chunk_size)
        check_positive(self.name, "hidden_size", hidden_size)
        check_positive(self.name, "attention_size", attention_size, allow_none=False)
        check_positive(self.name, "split_size", split_size)
        self.attention_size = attention_size
        self.split_size = split_size
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        h = sizes["hidden_size"]
        return _laat_shapes("", self.num_labels, h, self.attention_size, h)

    def _sizes_from_parameters(self):
        return {"hidden_size": self.first_linear.weight.shape[1]}

    def reset_parameters(self) -> None:
        for name in self._lazy_names:
            param = self.tensor(name)
            nn.init.zeros_(param) if name.endswith("bias") else nn.init.normal_(param, std=0.03)

    def attend(self, x: Tensor, mask: Tensor | None, return_attention: bool, prefix: str = ""):
        first = self.tensor(f"{prefix}first_linear.weight")
        second = self.tensor(f"{prefix}second_linear.weight")
        keys = F.linear(x, first)
        # tanh in place on the fresh projection (linear's backward keeps x and W, not its output): one
        # [B, T, d_a] tensor fewer to allocate and fill; graphs (export, compile) keep the plain form
        keys = torch.tanh(keys) if tracing() else keys.tanh_()  # Z [B, T, d_a]
        return label_attention(second, keys, x, mask, return_attention=return_attention, chunk_size=self.chunk_size)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = self.prepare(x, mask)
        if self.split_size is not None:
            return self._split_forward(x, mask, return_attention)
        reps, weights = self.attend(x, mask, return_attention)
        logits = (reps * self.third_linear.weight).sum(-1) + self.third_linear.bias
        return (logits, weights) if return_attention else logits

    def _split_forward(self, x: Tensor, mask: Tensor | None, return_attention: bool):
        """laat-split: [B, T, h] as [B·C, S, h] segments (padded with masked zeros to a multiple of S)."""
        batch, seq, hidden = x.shape
        size = self.split_size
        assert size is not None  # forward() comes here only with a split size
        segments = -(-seq // size) if seq else 0
        keep = torch.ones(batch, seq, dtype=torch.bool, device=x.device) if mask is None else mask
        extra = segments * size - seq
        if extra:
            x, keep = F.pad(x, (0, 0, 0, extra)), F.pad(keep, (0, extra))
        x, keep = x.reshape(batch * segments, size, hidden), keep.reshape(batch * segments, size)
        reps, weights = self.attend(x, keep, return_attention)
        logits = ((reps * self.third_linear.weight).sum(-1) + self.third_linear.bias).view(batch, segments, -1)
        present = keep.view(batch, segments, size).any(-1)  # [B, C]
        logits = (
            logits.masked_fill(~present[..., None], torch.finfo(logits.dtype).min).amax(dim=1)
            if segments
            else logits.new_zeros(batch, self.num_labels)
        )
        has_any = present.any(-1, keepdim=True)
        logits = torch.where(has_any, logits, self.third_linear.bias.expand_as(logits))
        if not return_attention:
            return logits
        weights = weights.view(batch, segments, self.num_labels, size).permute(0, 2, 1, 3)
        return logits, weights.reshape(batch, self.num_labels, segments * size)[..., :seq]

    def extra_repr(self) -> str:
        split = f", split_size={self.split_size}" if self.split_size else ""
        return f"{super().extra_repr()}, attention_size={self.attention_size}{split}"


class JointLAATHead(LAATHead):
    """JointLAAT (Vu et al. 2020): LAAT over the L1 parent labels, whose probabilities, projected to
    ``projection_size`` and squashed, join every child label's vector before its output layer.

    Args: ``num_labels`` (children), ``num_parent_labels``, ``hidden_size``, ``attention_size``,
    ``projection_size`` (128 in the paper), ``chunk_size``. Parameters: ``parent.*`` and ``child.*``
    (LAAT's), ``projection.weight`` P [p, L1]; the LAAT repository's levels 0 and 1 load.

    Shapes: ``forward(x [B, T, h], mask [B, T] = None, return_attention=False, return_parents=False)``
    -> child logits [B, L]; ``return_parents`` adds the parent logits [B, L1], ``return_attention``
    the child weights A [B, L, T] (last).
    """

    name = "joint_laat"
    renames = {
        f"attention.{part}_linears.{level}.{kind}": f"{who}.{part}_linear.{kind}"
        for part in ("first", "second", "third")
        for level, who in ((0, "parent"), (1, "child"))
        for kind in ("weight", "bias")
    }

    def __init__(
        self,
        num_labels: int,
        num_parent_labels: int,
        *,
        hidden_size: int | None = None,
        attention_size: int = 512,
        projection_size: int = 128,
        chunk_size: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        check_positive(self.name, "num_parent_labels", num_parent_labels, allow_none=False)
        check_positive(self.name, "projection_size", projection_size, allow_none=False)
        self.num_parent_labels, self.projection_size = num_parent_labels, projection_size
        super().__init__(
            num_labels,
            hidden_size=hidden_size,
            attention_size=attention_size,
            chunk_size=chunk_size,
            device=device,
            dtype=dtype,
        )

    def _parameter_shapes(self, sizes):
        h, d_a, p = sizes["hidden_size"], self.attention_size, self.projection_size
        return {
            **_laat_shapes("parent.", self.num_parent_labels, h, d_a, h),
            **_laat_shapes("child.", self.num_labels, h, d_a, h + p),
            "projection.weight": (p, self.num_parent_labels),
        }

    def _sizes_from_parameters(self):
        return {"hidden_size": self.parent.first_linear.weight.shape[1]}

    def forward(
        self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False, return_parents: bool = False
    ):
        x, mask = self.prepare(x, mask)
        parent_reps, _ = self.attend(x, mask, False, "parent.")
        third = self.parent.third_linear
        parent_logits = (parent_reps * third.weight).sum(-1) + third.bias  # [B, L1]
        g = torch.sigmoid(F.linear(torch.sigmoid(parent_logits), self.projection.weight))  # [B, p]
        reps, weights = self.attend(x, mask, return_attention, "child.")
        w = self.child.third_linear.weight
        h = reps.shape[-1]
        # <w_l, [v_l; g]> without building the [B, L, h + p] concatenation
        logits = (reps * w[:, :h]).sum(-1) + g @ w[:, h:].T + self.child.third_linear.bias
        out: tuple = (logits,)
        if return_parents:
            out += (parent_logits,)
        if return_attention:
            out += (weights,)
        return out if len(out) > 1 else logits

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_parent_labels={self.num_parent_labels}, "
            f"projection_size={self.projection_size}"
        )


class PLMCAHead(LabelHead):
    """PLM-CA's cross-attention head (Edin et al. 2024): label queries over projected keys and values,
    LayerNorm, one output vector shared by all labels.

    Args: ``num_labels``, ``hidden_size`` (None: inferred), ``scaled`` (divide scores by sqrt(h); the
    formula has no scale), ``chunk_size`` (None: all labels at once). Shapes: ``forward(x [B, T, h], mask [B, T] = None,
    return_attention=False)`` -> logits [B, L], or ``(logits, A [B, L, T])``.
    """

    name = "plm_ca"
    weighs_inputs = False  # its values are a projection of x

    def __init__(
        self,
        num_labels: int,
        *,
        hidden_size: int | None = None,
        scaled: bool = False,
        chunk_size: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_labels, chunk_size=chunk_size)
        check_positive(self.name, "hidden_size", hidden_size)
        self.scaled = scaled
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        h = sizes["hidden_size"]
        return {
            "label_queries": (self.num_labels, h),
            "key.weight": (h, h),
            "key.bias": (h,),
            "value.weight": (h, h),
            "value.bias": (h,),
            "norm.weight": (h,),
            "norm.bias": (h,),
            "output.weight": (h,),
            "output.bias": (1,),
        }

    def _sizes_from_parameters(self):
        return {"hidden_size": self.label_queries.shape[1]}

    def reset_parameters(self) -> None:
        h = self.label_queries.shape[1]
        nn.init.normal_(self.label_queries, std=h**-0.5)
        for part in (self.key, self.value):
            nn.init.xavier_uniform_(part.weight)
            nn.init.zeros_(part.bias)
        nn.init.ones_(self.norm.weight)
        nn.init.zeros_(self.norm.bias)
        nn.init.normal_(self.output.weight, std=h**-0.5)
        nn.init.zeros_(self.output.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = self.prepare(x, mask)
        keys = F.linear(x, self.key.weight, self.key.bias)
        values = F.linear(x, self.value.weight, self.value.bias)
        scale = keys.shape[-1] ** -0.5 if self.scaled else 1.0
        reps, weights = label_attention(
            self.label_queries,
            keys,
            values,
            mask,
            scale=scale,
            return_attention=return_attention,
            chunk_size=self.chunk_size,
        )
        normed = F.layer_norm(reps, reps.shape[-1:], self.norm.weight, self.norm.bias)
        logits = normed @ self.output.weight + self.output.bias
        return (logits, weights) if return_attention else logits
