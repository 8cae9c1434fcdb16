"""A converted model built on the meta device is real once its weights are assigned: every tensor a node holds is
in its converter's state (a lookup's keys, a Discretization's boundaries, an LSTM's zero second bias: made from the
config, returned with the file's tensors; RoPE's angles are computed as a call runs), so the weights fill every
parameter and buffer. :func:`refuse_meta_left` says which tensor broke that, rather than leave it on meta."""

from __future__ import annotations

import itertools
from typing import Any

from torch import Tensor, nn

from attnzoo.errors import WeightsError

__all__ = ["meta_tensors", "refuse_meta_left"]


def meta_tensors(module: nn.Module) -> list[str]:
    """The names of ``module``'s tensors on the meta device: parameters, buffers and tensors its modules hold as
    plain attributes."""
    found = []
    for prefix, inner in module.named_modules():
        owned = {**inner._parameters, **inner._buffers}
        owned.update((k, v) for k, v in vars(inner).items() if isinstance(v, Tensor))
        found += [f"{prefix}.{name}" if prefix else name for name, t in owned.items() if t is not None and t.is_meta]
    return found


def refuse_meta_left(model: nn.Module, incompatible: Any) -> None:
    """A ``load_state_dict`` post-hook: after a whole state dict is assigned to a model built on meta (a
    conversion, ``attnzoo.load``), a tensor still on meta is one a node makes when built that the weights do not
    hold, and the model would fail at its first call; a ``WeightsError`` names it."""
    if incompatible.missing_keys:
        return
    left = meta_tensors(model)
    if left and any(not t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
        raise WeightsError(
            f"keras_model: {', '.join(left[:6])} {'is' if len(left) == 1 else 'are'} left on the meta device "
            f"after its weights were assigned: a node makes it when built and its converter's state does not "
            f"hold it; a converter returns every tensor its node holds"
        )
