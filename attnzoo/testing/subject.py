"""A variant under test (:class:`Subject`) and the verdicts its properties give (:class:`Failure`,
:class:`NotApplicable`), with the comparison every property uses (:func:`same_outputs`).

    subject = Subject("mha", ("mha",), convention, build)
    model, sample = subject.materialised()        # lazy sizes fixed by one call
    outputs, weights = subject.run(model, sample, return_attention=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.conventions import Convention, Sample

__all__ = ["Subject", "Failure", "NotApplicable", "same_outputs", "config_of", "float_tensors", "HALF"]


HALF = (torch.bfloat16, torch.float16)


class Failure(AssertionError):
    """A property that does not hold; the message says how."""


class NotApplicable(Exception):
    """The property has nothing to check for this variant (shown as skipped, with the reason)."""


@dataclass
class Subject:
    """A variant under test: how to build it, how to call it, and the inputs that fit it.

    ``build(dtype=None, device=None)`` returns a fresh module in eval mode with fixed random weights.
    ``sample`` is the reference input (float32, CPU), sized by the first built instance.
    """

    name: str
    names: tuple[str, ...]  # every name an error message may use for this variant
    convention: Convention
    build: Callable[..., nn.Module]
    kind: str = "layer"
    registered: bool = True
    seq: int = 7

    def __post_init__(self) -> None:
        self._sizes: dict[str, int] | None = None

    # -- inputs ------------------------------------------------------------------------------------
    def sample(
        self,
        *,
        batch: int = 2,
        seq: int | None = None,
        lengths: Sequence[int] | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        model: nn.Module | None = None,
    ) -> Sample:
        generator = torch.Generator().manual_seed(seed)
        config = config_of(model) if model is not None else {}
        return self.convention.sample(
            config,
            batch=batch,
            seq=self.seq if seq is None else seq,
            lengths=lengths,
            dtype=dtype,
            generator=generator,
            sizes=self._sizes,
        )

    def materialised(self, dtype: torch.dtype | None = None) -> tuple[nn.Module, Sample]:
        """A built instance that has seen one batch (lazy sizes fixed), and that batch."""
        model = self.build()
        sample = self.sample(model=model)
        self._sizes = dict(sample.sizes)
        self.run(model, sample)
        if dtype is not None:
            model = model.to(dtype)
            sample = self.convention.cast(sample, dtype)
        return model, sample

    # -- calls -------------------------------------------------------------------------------------
    def run(
        self, model: nn.Module, sample: Sample, *, return_attention: bool = False, grad: bool = False
    ) -> tuple[list[Tensor], Tensor | None]:
        args, kwargs = sample.call_arguments(return_attention=return_attention)
        with torch.set_grad_enabled(grad):
            out = model(*args, **kwargs)
        try:
            return self.convention.split(out, return_attention=return_attention)
        except ValueError as e:
            raise Failure(f"{'with' if return_attention else 'without'} return_attention: {e}") from None

    def attention_modes(self) -> tuple[bool, ...]:
        return (False, True) if self.convention.attention == "flag" else (False,)

    def names_in(self, message: str) -> bool:
        return any(n and n in message for n in self.names)


def config_of(model: nn.Module) -> dict[str, Any]:
    info = getattr(model, "attnzoo_config", None)
    return dict(info.get("config") or {}) if isinstance(info, dict) else {}


def float_tensors(values: Sequence[Any]) -> list[Tensor]:
    return [v for v in values if isinstance(v, Tensor) and v.is_floating_point()]


def same_outputs(
    a: Sequence[Tensor], b: Sequence[Tensor], what: str, *, atol: float = 1e-5, rtol: float = 1e-4
) -> None:
    if len(a) != len(b):
        raise Failure(f"{what}: {len(a)} outputs vs {len(b)}")
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            raise Failure(f"{what}: output part {i} has shape {list(x.shape)} vs {list(y.shape)}")
        if x.is_floating_point() and not torch.isfinite(x).all():
            raise Failure(f"{what}: output part {i} holds NaN or inf")
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol):
            diff = (x.double() - y.double()).abs().max().item()
            raise Failure(f"{what}: output part {i} differs by up to {diff:.3g}")
