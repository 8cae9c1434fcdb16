"""One training run's parts: what :func:`attnzoo.train.trainer.train` makes in its first steps and its
later steps (the epochs, publish.py's end) use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["Run"]


@dataclass
class Run:
    """One training run's parts, made by the first steps of :func:`train` and used by the later ones."""

    recipe: dict[str, Any]
    settings: dict[str, Any]
    output: Path
    rank: int
    world: int
    verbose: bool
    seed: int
    started: float
    task: Any = None
    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    device: Any = None
    stepper: Any = None  # steps.Stepper: precision and accumulation
    sizes: dict[str, int] = field(default_factory=dict)
    split_sizes: dict[str, int] = field(default_factory=dict)  # rows per split, over every rank
    epochs: int = 0
    steps_per_epoch: int = 1
    state: dict[str, Any] = field(default_factory=dict)
    average: dict[str, torch.Tensor] | None = None  # the mean weights of the last average_last epochs
    best_state: dict[str, torch.Tensor] | None = None  # the best epoch's weights (every rank holds them)
    smoothing: float = 0.0  # train.label_smoothing, given to the task's loss
    port: Any = None  # the converted keras-hub model a run fine-tunes (port.py), else None

    @property
    def checkpoint(self) -> Path:
        return self.output / "checkpoint"

    @property
    def best_path(self) -> Path:
        return self.output / "best.safetensors"

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, flush=True)
