"""``ReversibleEmbedding`` (``keras.layers.ReversibleEmbedding``, before keras 3.15 keras-hub's): an embedding
whose table also maps hidden states back to token logits.

Keras computes, with ``embeddings`` E [input_dim, output_dim]:

* ``layer(ids)``: ``E[ids]`` [..., output_dim]; with ``mask_zero`` the mask ``ids != 0``;
* ``layer(x, reverse=True)``: ``logits = x @ K`` [..., input_dim], with ``K = E^T`` when ``tie_weights`` (one
  parameter, used both ways) else its own ``reverse_embeddings`` [output_dim, input_dim]; with
  ``logit_soft_cap`` c, ``tanh(logits / c) * c``. No mask comes out of the reverse call.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnzoo.keras.arguments import agrees, as_tensor, expect_variables
from attnzoo.keras.converters.core import write_embedding
from attnzoo.keras.emit import Writer
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.layers.core import check_tokens, soft_capped

__all__ = ["ReversibleEmbedding"]


class ReversibleEmbedding(Node):
    """``weight`` E [input_dim, output_dim] (and ``reverse_weight`` [output_dim, input_dim] when untied)."""

    op = "reversible_embedding"
    ids_below, casts_to_ids = "input_dim", True

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        mask_zero: bool = False,
        tie_weights: bool = True,
        logit_soft_cap: float | None = None,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(input_dim, output_dim))
        self.reverse_weight = None if tie_weights else nn.Parameter(torch.zeros(output_dim, input_dim))
        self.mask_zero, self.logit_soft_cap = mask_zero, logit_soft_cap

    def forward(self, args, kwargs, masks):
        x = args[0]
        if not kwargs.get("reverse"):
            check_tokens("ReversibleEmbedding", x, self.weight.shape[0], arg="input", rank=x.dim())
            return [F.embedding(x.long(), self.weight)], [x != 0 if self.mask_zero else None]
        kernel = self.weight.t() if self.reverse_weight is None else self.reverse_weight
        logits = torch.matmul(x, kernel.to(x.dtype))
        if self.logit_soft_cap is not None:
            logits = soft_capped(logits, self.logit_soft_cap)
        return [logits], [None]


@keras_layer("ReversibleEmbedding", call_arguments=("reverse",))
def convert_reversible_embedding(record, arrays, ctx):
    c = record.config
    tied = bool(c.get("tie_weights", True))
    expect_variables(arrays, 1 if tied else 2, "ReversibleEmbedding (" + ("tied" if tied else "untied") + ")")
    table = arrays[0]
    if table.ndim != 2:
        raise Refused(f"embeddings {list(table.shape)} is not 2-D")
    agrees(c, "input_dim", table.shape[0], "the embeddings table")
    agrees(c, "output_dim", table.shape[1], "the embeddings table")
    if c.get("reverse_dtype") not in (None, "float32"):
        raise Refused(f"reverse_dtype {c.get('reverse_dtype')!r}: only float32 logits are converted")
    if c.get("quantization_config") is not None:
        raise Refused("a quantized ReversibleEmbedding is not converted; save the float model")
    cap = c.get("logit_soft_cap")
    if cap is not None and not (isinstance(cap, (int, float)) and math.isfinite(cap) and cap > 0):
        raise Refused(f"logit_soft_cap {cap!r} is not a positive number")
    spec = {
        "op": "reversible_embedding",
        "input_dim": int(table.shape[0]),
        "output_dim": int(table.shape[1]),
        "mask_zero": bool(c.get("mask_zero", False)),
        "tie_weights": tied,
        "logit_soft_cap": None if cap is None else float(cap),
    }
    state = {"weight": as_tensor(table)}
    if not tied:
        if list(arrays[1].shape) != [table.shape[1], table.shape[0]]:
            raise Refused(f"reverse_embeddings {list(arrays[1].shape)} is not the table's transpose shape")
        state["reverse_weight"] = as_tensor(arrays[1])
    return Converted(spec, state)


# -- the torch form ---------------------------------------------------------------------------------------
@writes(ReversibleEmbedding)
def write_reversible_embedding(w: Writer, spec: dict[str, Any]) -> bool:
    """The lookup call (the only one written; a ``reverse=True`` call keeps its node): ``nn.Embedding`` of
    the ids as longs, whose ``weight`` is the one table; with ``mask_zero`` the mask ``ids != 0``: an
    Embedding's torch form. An untied layer (a second table for the reverse call) keeps its node, which
    holds both tables."""
    if spec.get("tie_weights", True) is not True:
        return False
    return write_embedding(w, spec)
