"""One training run's parts, in two: :class:`RunSetup`, what the run starts from (the recipe, its checked
settings, the run folder, the process's place, the seed), fixed once :func:`attnzoo.train.trainer.train`
has read them; and :class:`RunState`, what the run builds from it step by step (the task, the model and
its optimizer, the schedule, the epochs' record) and the later steps (the epochs, publish.py's end) use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["RunSetup", "RunState"]


@dataclass(frozen=True)
class RunSetup:
    """What a run starts from, set before any work and never reassigned: the recipe and its checked
    ``settings`` (``train.*``, precision and LoRA included), the run folder, this process's ``rank`` of
    ``world`` and its ``device``, whether it speaks (rank 0, not quiet), and the seed."""

    recipe: dict[str, Any]
    settings: dict[str, Any]
    output: Path
    rank: int
    world: int
    verbose: bool
    seed: int
    device: torch.device

    @property
    def checkpoint(self) -> Path:
        return self.output / "checkpoint"

    @property
    def best_path(self) -> Path:
        return self.output / "best.safetensors"

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, flush=True)


@dataclass
class RunState:
    """What a run builds from its :class:`RunSetup`, filled by the steps of :func:`train` in turn and read
    by the later ones. ``started``: the clock the run's time is measured from (moved back on resume by the
    time the checkpoint had run)."""

    setup: RunSetup
    started: float
    port: Any = None  # the converted keras-hub model a run fine-tunes (port.py), else None
    task: Any = None
    split_sizes: dict[str, int] = field(default_factory=dict)  # rows per split, over every rank
    sizes: dict[str, int] = field(default_factory=dict)  # the task's sizes under the model's parameter names
    model: Any = None
    optimizer: Any = None
    smoothing: float = 0.0  # train.label_smoothing, given to the task's loss
    stepper: Any = None  # steps.Stepper: precision and accumulation
    epochs: int = 0
    steps_per_epoch: int = 1
    scheduler: Any = None
    state: dict[str, Any] = field(default_factory=dict)  # the epochs' record, as the checkpoint holds it
    average: dict[str, torch.Tensor] | None = None  # the mean weights of the last average_last epochs
    best_state: dict[str, torch.Tensor] | None = None  # the best epoch's weights (every rank holds them)
