"""Tiny factories for registry and config tests: they record what they were called with."""

from __future__ import annotations

from typing import Literal


class Recorder:
    """Stores its keyword arguments; stands in for a model where only the configuration matters."""

    def __init__(
        self,
        size: int,
        rate: float = 0.5,
        name: str = "x",
        flag: bool = False,
        mode: Literal["a", "b"] = "a",
        sizes: list[int] | None = None,
        extra: int | None = None,
    ):
        self.kwargs = dict(size=size, rate=rate, name=name, flag=flag, mode=mode, sizes=sizes, extra=extra)
