"""One optimizer step: its passes (gradient accumulation), in the recipe's precision.

``train.precision``:

* ``fp32``: as the weights are;
* ``bf16``: the forward pass (and the loss) under ``torch.autocast`` in bfloat16, on CUDA and on the CPU
  (refused on a GPU without bfloat16: before Ampere). On a CPU whose oneDNN has no bfloat16 kernels
  (x86 without AVX-512), oneDNN is switched off for the forward pass: autocast would still send the LSTM
  there, and oneDNN fails to build it; torch's own kernels run instead (the LSTM in float32);
* ``fp16``: autocast in float16, the loss scaled by torch's ``GradScaler`` (float16 gradients underflow
  without it; a step whose gradients overflow is skipped and the scale lowered); CUDA only (the CPU's
  autocast has no float16 LSTM).

The weights and the optimizer's state stay float32 in every precision (autocast casts copies per
operation), and the checkpoint and the run folder are written in float32.

``train.accumulate`` K: a step is K passes (forward and backward) whose gradients add up before the
optimizer steps; DistributedDataParallel reduces the gradients once, after the last pass (``no_sync`` on
the others). Each pass's loss is weighted by its share of the step's rows (shares.py), so ``batch_size=8,
accumulate=4`` takes the steps of ``batch_size=32``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from attnzoo.errors import ConfigError

__all__ = ["PRECISIONS", "check_precision", "Stepper"]

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: Any, device: torch.device) -> str:
    """``train.precision`` if this device can train in it; a ConfigError naming what it can do otherwise."""
    if precision not in PRECISIONS:
        raise ConfigError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return precision
    if not torch.amp.autocast_mode.is_autocast_available(device.type):
        raise ConfigError(f"train.precision={precision}: torch has no autocast on {device.type}; use fp32 there")
    if device.type == "cpu" and precision == "fp16":
        raise ConfigError(
            "train.precision=fp16 is for CUDA: on the CPU torch computes few operations in float16 (its LSTM none); "
            "use bf16 there (bfloat16 autocast), or fp32"
        )
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        name = torch.cuda.get_device_name(device)
        raise ConfigError(
            f"train.precision=bf16: {name} does not compute in bfloat16 (torch.cuda.is_bf16_supported() is False; "
            f"GPUs before Ampere); use fp16 there (float16 with a gradient scaler), or fp32"
        )
    return precision


def _onednn_computes_bfloat16() -> bool:
    """Whether this CPU's oneDNN has bfloat16 kernels (x86: AVX-512; Arm: its BF16 instructions)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def _on(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class Stepper:
    """Takes optimizer steps: ``step(passes)`` with ``passes`` a list of (batch, weight), one per pass.

    ``model`` is the module whose weights are trained, ``ddp`` what the loss calls (the DDP wrapper under
    several processes, else the model itself); ``world`` the number of processes, whose mean DDP takes."""

    def __init__(
        self,
        task,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        device: torch.device,
        precision: str = "fp32",
        clip: float | None = None,
        smoothing: float = 0.0,
        ddp: torch.nn.Module | None = None,
        world: int = 1,
    ) -> None:
        self.task, self.model, self.optimizer, self.device = task, model, optimizer, device
        self.ddp = model if ddp is None else ddp
        self.dtype = PRECISIONS[precision]
        self.clip, self.smoothing, self.world = clip, smoothing, world
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        # asked once: the CPU does not change between passes
        self.onednn_off = device.type == "cpu" and self.dtype == torch.bfloat16 and not _onednn_computes_bfloat16()

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        if self.onednn_off:
            stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        stack.enter_context(torch.autocast(self.device.type, dtype=self.dtype))
        return stack

    def step(self, passes: list[tuple[dict[str, Any], float]]) -> float:
        """One optimizer step over the passes; returns this rank's part of the step's mean loss
        (the sum over its passes of weight x pass loss: over every rank, the step's mean loss)."""
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for k, (batch, weight) in enumerate(passes):
            last = k == len(passes) - 1
            # DDP reduces the gradients at the backward of the last pass only
            no_sync = getattr(self.ddp, "no_sync", None)
            sync = contextlib.nullcontext() if last or no_sync is None else no_sync()
            with sync:
                with self.autocast():
                    loss = self.task.loss(self.ddp, _on(batch, self.device), label_smoothing=self.smoothing)
                # DDP averages over the ranks: times the world, the ranks' weighted losses add up
                self.scaler.scale(loss.float() * (weight * self.world)).backward()
            total += loss.item() * weight
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return total
