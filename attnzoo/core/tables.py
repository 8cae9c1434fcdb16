"""One table of named entries, filled by attnzoo's built-ins and by plugins through the same ``register``.

Every name table a plugin adds to (CLI verbs, calling conventions, and the models' table in registry.py,
which keeps a loser reachable under its qualified name) follows one collision policy:

- the first registration of a name wins: built-ins register first, then the plugins in plugin order, then
  what the running process adds;
- a later registration of a taken name by another provider is skipped, with one :class:`PluginWarning`
  that says who provides what;
- ``override=True`` replaces an entry on purpose, without a warning.

    table = PluginTable("command")
    register = table.register_for("attnzoo")       # what a hook gets: bound to its provider
    register("list", run_list)
    table.register_for("my_plugin")("list", other)  # skipped, with a PluginWarning naming both
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from attnzoo.errors import PluginWarning

__all__ = ["PluginTable"]

V = TypeVar("V")


class PluginTable(Generic[V]):
    """Name -> (value, provider), in registration order, under the collision policy above. ``what`` names
    the kind of entry in warnings ("command", "calling convention")."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, tuple[V, str]] = {}

    def add(self, name: str, value: V, *, provider: str, override: bool = False) -> bool:
        """Add ``name``; False (and one warning) when another provider holds it and ``override`` is False."""
        held = self._entries.get(name)
        if held is not None and not override:
            if held[1] != provider or held[0] is not value:
                warnings.warn(
                    f"attnzoo: {provider!r} registers the {self.what} {name!r}, which {held[1]!r} provides; the "
                    f"first is kept (override=True replaces it on purpose)",
                    PluginWarning,
                    stacklevel=3,
                )
            return False
        self._entries[name] = (value, provider)
        return True

    def register_for(self, provider: str, check: Callable[[str, Any], None] | None = None) -> Callable[..., bool]:
        """The ``register(name, value, *, override=False)`` a provider's hook receives; ``check`` refuses a
        bad entry by raising (the caller records that as the provider's failure)."""

        def register(name: str, value: V, *, override: bool = False) -> bool:
            if check is not None:
                check(name, value)
            return self.add(name, value, provider=provider, override=override)

        return register

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> V:
        return self._entries[name][0]

    def get(self, name: str, default: Any = None) -> Any:
        entry = self._entries.get(name)
        return default if entry is None else entry[0]

    def provider(self, name: str) -> str:
        """Who registered ``name``."""
        return self._entries[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, V]]:
        return [(name, value) for name, (value, _) in self._entries.items()]
