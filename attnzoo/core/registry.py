"""The name -> spec table: registration, collisions, lookup and listing; the one owner of plugin state.

The table fills itself on first use by calling every plugin's ``attnzoo_register_models`` hook, the
built-in cards included (they are registered by a built-in plugin through the same ``register``
callable as third parties). Nothing here imports torch or a factory.

State has one owner: :class:`Registry` holds one :class:`Snapshot` (the name table together with the
:class:`~attnzoo.core.plugins.PluginHost` that filled it, and the switches it was filled under). A new
snapshot is built aside, under a lock, and swapped in with one assignment, so a reader sees the old
table or the new one, never a half-built one; eight threads asking at once fill it once.

Collision policy (shared/DESIGN.md): every spec is reachable by its qualified name
``provider:name``; the bare ``name`` belongs to whoever registered it first (built-ins first of all).
A plugin that registers a taken name keeps only its qualified name and one warning says who provides
what; ``override=True`` takes the bare name on purpose. An in-process ``register`` of a taken name is a
``ConfigError`` unless ``override=True``.
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnzoo.core import plugins, resources
from attnzoo.core.cards import read_card, spec_from_card
from attnzoo.core.plugins import PluginHost, PluginInfo, State
from attnzoo.core.spec import BUILTIN_PROVIDER, LOCAL_PROVIDER, ModelSpec, WeightsSpec, parse_name
from attnzoo.core.tables import PluginTable
from attnzoo.errors import ConfigError, PluginError, PluginWarning, UnknownModelError, close_matches

__all__ = [
    "register",
    "list_models",
    "model_info",
    "resolve",
    "list_plugins",
    "REGISTRY",
    "Registration",
    "natural_key",
]


def natural_key(text: str) -> list[int | str]:
    """Sort key that orders ``m2`` before ``m10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class _Table:
    """Qualified name -> spec, and which qualified name answers each bare name."""

    def __init__(self) -> None:
        self.specs: dict[str, ModelSpec] = {}
        self.owner: dict[str, str] = {}

    def copy(self) -> _Table:
        other = _Table()
        other.specs, other.owner = dict(self.specs), dict(self.owner)
        return other

    def add(self, spec: ModelSpec, *, override: bool, context: Registration | None) -> None:
        qualified = spec.qualified_name
        if qualified in self.specs and not override:
            raise ConfigError(
                f"{spec.name!r} is already registered by {spec.provider!r}; pass override=True to replace it"
            )
        owner = self.owner.get(spec.name)
        if owner is not None and owner != qualified and not override:
            if context is None:
                raise ConfigError(
                    f"{spec.name!r} is already provided by {self.specs[owner].provider!r}; pass override=True "
                    f"to replace it (the old entry stays reachable as {owner!r})"
                )
            holder = self.specs[owner].provider
            what = "the built-in name" if holder == BUILTIN_PROVIDER else "the name"
            context.problem(
                f"registers {what} {spec.name!r}, which {holder!r} already provides; the name stays with "
                f"{holder!r} and this entry is reachable as {qualified!r} (override=True takes it on purpose)"
            )
            self.specs[qualified] = spec
            context.names.append(qualified)
            return
        self.specs[qualified] = spec
        self.owner[spec.name] = qualified
        if context is not None:
            context.names.append(qualified)

    def remove(self, qualified_names: Iterable[str]) -> None:
        """Take back entries (a plugin whose hook raised half-way loses what it registered)."""
        for qualified in qualified_names:
            spec = self.specs.pop(qualified, None)
            if spec is not None and self.owner.get(spec.name) == qualified:
                del self.owner[spec.name]
                # hand the bare name back to an entry that was shadowed by this one, if any
                for other_q, other in self.specs.items():
                    if other.name == spec.name:
                        self.owner[spec.name] = other_q
                        break

    def display_name(self, spec: ModelSpec) -> str:
        """The shortest name that reaches ``spec``: bare if it owns its name, else qualified."""
        return spec.name if self.owner.get(spec.name) == spec.qualified_name else spec.qualified_name


@dataclass
class Registration:
    """One plugin's ``attnzoo_register_models`` call in progress: the ``register`` bound to that plugin
    (the same signature as :func:`register`), and what it added to the table being built."""

    provider: str
    table: _Table
    strict: bool = False
    names: list[str] = field(default_factory=list)  # qualified names added during this call
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        @functools.wraps(register)
        def register_for_plugin(*args: Any, **kwargs: Any) -> ModelSpec | None:
            bound = inspect.signature(register).bind(*args, **kwargs)
            bound.apply_defaults()
            fields = dict(bound.arguments)
            return _register(self, fields.pop("name"), fields.pop("factory"), fields)

        self.register = register_for_plugin

    def problem(self, message: str) -> None:
        if self.strict:
            raise PluginError(f"plugin {self.provider!r}: {message}")
        self.problems.append(message)
        warnings.warn(f"attnzoo: plugin {self.provider!r}: {message}", PluginWarning, stacklevel=5)

    def take_back(self) -> list[str]:
        self.table.remove(self.names)
        return [qualified.split(":", 1)[1] for qualified in self.names]


@dataclass(frozen=True)
class Snapshot:
    """One consistent state: the name table, the plugins that filled it, the switches it was filled under."""

    table: _Table
    host: PluginHost
    state: State
    version: int
    # what plugins register through hooks other than models (the kit's conventions), per hook, asked for on
    # first use (such a hook may import torch) and dropped with the snapshot
    collected: dict[str, PluginTable[Any]] = field(default_factory=dict)


class Registry:
    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._local: list[tuple[ModelSpec, bool]] = []  # in-process registrations, replayed on rebuild
        self._local_items: dict[str, dict[str, tuple[Any, bool]]] = {}  # in-process entries (value, override)
        self._lock = threading.RLock()
        self._version = 0

    # -- filling -----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current snapshot, rebuilt first when the plugin switches changed since it was built."""
        state = plugins.current_state()
        snap = self._snapshot
        if snap is not None and snap.state == state:
            return snap
        with self._lock:
            snap = self._snapshot
            if snap is None or snap.state != state:
                snap = self._build(state)  # may raise PluginError in strict mode: then retried next time
                self._snapshot = snap
            return snap

    def _build(self, state: State) -> Snapshot:
        host = PluginHost(state)
        host.load()
        table = _Table()
        host.register_models(lambda provider: Registration(provider=provider, table=table, strict=state.strict))
        for spec, override in self._local:
            try:
                table.add(spec, override=override, context=None)
            except ConfigError as e:  # a plugin switched on since took the name: the plugin keeps it
                warnings.warn(
                    f"attnzoo: your register({spec.name!r}) lost its name after a reload: {e}",
                    PluginWarning,
                    stacklevel=2,
                )
                table.specs[spec.qualified_name] = spec
        self._version += 1
        return Snapshot(table, host, state, self._version)

    def add_local(self, spec: ModelSpec, *, override: bool) -> None:
        """An in-process ``register``: a new snapshot with the entry added (copy, then swap)."""
        with self._lock:
            snap = self.snapshot()
            table = snap.table.copy()
            table.add(spec, override=override, context=None)
            self._local.append((spec, override))
            self._version += 1
            self._snapshot = replace(snap, table=table, version=self._version)

    def reset(self) -> None:
        """Forget everything, local registrations included (tests use this)."""
        with self._lock:
            self._local.clear()
            self._snapshot = None

    # -- the plugins' other hooks -------------------------------------------------------------------
    def first_result(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a firstresult hook of the current plugins, each implementation isolated: the first
        non-None answer wins."""
        return self.snapshot().host.first_result(hook_name, **kwargs)

    def each_plugin(self, hook_name: str, arguments: Callable[[str], dict[str, Any]]) -> None:
        """Call every plugin's implementation of a hook, each isolated, with the arguments
        ``arguments(plugin)`` builds for it (a ``register`` bound to that plugin)."""
        self.snapshot().host.each_plugin(hook_name, arguments)

    def collected(
        self,
        hook_name: str,
        *,
        what: str,
        builtins: Mapping[str, Any] | None = None,
        check: Callable[[str, Any], None] | None = None,
    ) -> PluginTable[Any]:
        """The :class:`PluginTable` a hook ``hook_name(register)`` fills, for the current plugins: the
        ``builtins`` first, then each plugin's entries (each plugin isolated: ``check`` refusing an entry
        counts as that plugin's failure), then the in-process entries of :meth:`add_item`; one collision
        policy (tables.py). Collected once per snapshot, on first use."""
        snap = self.snapshot()
        with self._lock:
            if hook_name not in snap.collected:
                table: PluginTable[Any] = PluginTable(what)
                for name, value in (builtins or {}).items():
                    table.add(name, value, provider=BUILTIN_PROVIDER)
                snap.host.each_plugin(hook_name, lambda plugin: {"register": table.register_for(plugin, check)})
                for name, (value, override) in self._local_items.get(hook_name, {}).items():
                    table.add(name, value, provider=LOCAL_PROVIDER, override=override)
                snap.collected[hook_name] = table
            return snap.collected[hook_name]

    def add_item(self, hook_name: str, name: str, value: Any, *, override: bool = False) -> None:
        """An in-process entry of the table :meth:`collected` gives for ``hook_name`` (kept across rebuilds),
        added after the plugins' under the same policy (``override=True`` replaces on purpose)."""
        with self._lock:
            self._local_items.setdefault(hook_name, {})[name] = (value, override)
            self.snapshot().collected.pop(hook_name, None)

    # -- lookup ------------------------------------------------------------------------------------
    def display_name(self, spec: ModelSpec) -> str:
        return self.snapshot().table.display_name(spec)

    def resolve(self, name: str) -> tuple[ModelSpec, str | None]:
        """The spec a name refers to and the tag it asks for (None when it names no tag)."""
        snap = self.snapshot()
        table = snap.table
        parsed = parse_name(name)
        if parsed is None:
            shown = str(name)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            hint = close_matches(str(name)[:80].lower().replace("-", "_"), self._known_names(table))
            raise UnknownModelError(
                f"{shown!r} is not a valid model name: expected [provider:]arch[.tag] in lower case "
                f"([a-z][a-z0-9_]*){self._did_you_mean(hint)}",
                name=shown,
                suggestions=hint,
            )
        if parsed.provider is not None:
            spec = table.specs.get(f"{parsed.provider}:{parsed.arch}")
        else:
            qualified = table.owner.get(parsed.arch)
            spec = table.specs.get(qualified) if qualified else None
        if spec is None:
            wanted = f"{parsed.provider}:{parsed.arch}" if parsed.provider else parsed.arch
            shown = wanted if len(wanted) <= 80 else wanted[:77] + "..."
            hint = close_matches(wanted[:80], self._known_names(table))
            why = snap.host.explain_missing(parsed.arch, parsed.provider)
            raise UnknownModelError(
                f"unknown model {shown!r}{self._did_you_mean(hint)}{why}; `attnzoo list` shows every name",
                name=shown,
                suggestions=hint,
            )
        if parsed.tag is not None and parsed.tag not in spec.weights:
            tags = ", ".join(spec.weights) or "none"
            raise UnknownModelError(
                f"{spec.name!r} has no pretrained tag {parsed.tag[:40]!r} (its tags: {tags})",
                name=str(name),
                suggestions=[f"{spec.name}.{t}" for t in spec.weights],
            )
        return spec, parsed.tag

    @staticmethod
    def _known_names(table: _Table) -> list[str]:
        names = [table.display_name(s) for s in table.specs.values()]
        names += [f"{table.display_name(s)}.{t}" for s in table.specs.values() for t in s.weights]
        return names

    @staticmethod
    def _did_you_mean(hint: list[str]) -> str:
        return f" (did you mean {', '.join(map(repr, hint))}?)" if hint else ""

    def names(self, *, pretrained: bool, provider: str | None) -> list[str]:
        table = self.snapshot().table
        out: list[str] = []
        for spec in table.specs.values():
            if provider is not None and spec.provider != provider:
                continue
            shown = table.display_name(spec)
            if pretrained:
                out.extend(f"{shown}.{tag}" for tag in spec.weights)
            else:
                out.append(shown)
        return out


REGISTRY = Registry()


def list_plugins() -> list[PluginInfo]:
    """Every plugin found (the built-in one first), with its status, models and problems."""
    return REGISTRY.snapshot().host.plugin_list()


def table_version() -> int:
    """Changes whenever the table is rebuilt or added to (caches keyed on the registry use it)."""
    return REGISTRY.snapshot().version


def _as_patterns(patterns: str | Iterable[str] | None) -> list[str]:
    if patterns is None:
        return []
    if isinstance(patterns, str):
        return [patterns]
    values = list(patterns) if isinstance(patterns, Iterable) else None
    if values is None or not all(isinstance(p, str) for p in values):
        raise ConfigError(f"list_models takes fnmatch patterns: a string or a list of them, got {patterns!r:.60}")
    return values


def list_models(
    include: str | Iterable[str] = "*",
    exclude: str | Iterable[str] | None = None,
    *,
    pretrained: bool = False,
    provider: str | None = None,
) -> list[str]:
    """Registered names matching the fnmatch patterns, in natural order.

    With ``pretrained=True`` the names are ``arch.tag``, one per pretrained tag; a pattern matches the
    full name or its architecture part.
    """

    def matches(name: str, patterns: list[str]) -> bool:
        arch = name.split(".", 1)[0]
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(arch, p) for p in patterns)

    include_patterns = _as_patterns(include) or ["*"]
    exclude_patterns = _as_patterns(exclude)
    names = REGISTRY.names(pretrained=pretrained, provider=provider)
    names = [n for n in names if matches(n, include_patterns) and not matches(n, exclude_patterns)]
    return sorted(set(names), key=natural_key)


def model_info(name: str) -> ModelSpec:
    """The ``ModelSpec`` of a registered name (``arch``, ``arch.tag`` or ``provider:arch``)."""
    return REGISTRY.resolve(name)[0]


def resolve(name: str) -> tuple[ModelSpec, str | None]:
    return REGISTRY.resolve(name)


def _weights_specs(weights: Mapping[str, Any] | None) -> dict[str, WeightsSpec]:
    out = {}
    for tag, entry in (weights or {}).items():
        out[tag] = entry if isinstance(entry, WeightsSpec) else WeightsSpec(tag=tag, **dict(entry))
    return out


def _build_spec(
    name: str,
    factory: str | Callable[..., Any] | None,
    config: Mapping[str, Any] | str | Path | None,
    given: Mapping[str, Any],
    provider: str,
) -> ModelSpec:
    """The spec of a ``register`` call: ``given`` holds its other card fields (summary, weights, ...), which
    a card named by ``config`` overrides."""
    if isinstance(config, (str, Path)):
        card_path = Path(config)
        card = read_card(card_path)
        if card.get("name") not in (None, name):
            raise ConfigError(f"model card {card_path.name}: its name {card.get('name')!r} is not {name!r}")
        # a card's weights live next to it, except for the built-in cards (weights/ at the top level)
        in_builtin = card_path.resolve().parent == resources.cards_dir().resolve()
        weights_dir = resources.weights_dir() if in_builtin else card_path.resolve().parent
        defaults = {"name": name, "factory": factory, **{k: v for k, v in given.items() if k != "weights"}}
        return spec_from_card(
            card,
            source=str(card_path),
            provider=provider,
            weights_dir=str(weights_dir),
            defaults={k: v for k, v in defaults.items() if v},
        )
    if factory is None:
        raise ConfigError(f"register({name!r}): give a factory ('module:attr' or a callable) or a card path as config=")
    fields = {k: v for k, v in given.items() if v is not None}
    try:
        fields["weights"] = _weights_specs(given.get("weights"))
        return ModelSpec(
            name=name,
            factory=factory,
            config=dict(config or {}),
            provider=provider,
            source=f"register() by {provider}",
            **fields,
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"register({name!r}): {e}") from None


def register(
    name: str,
    factory: str | Callable[..., Any] | None = None,
    *,
    config: Mapping[str, Any] | str | Path | None = None,
    summary: str = "",
    kind: str = "layer",
    weights: Mapping[str, Any] | None = None,
    override: bool = False,
    reference: str = "",
    formula: str = "",
    default_tag: str | None = None,
    convention: str = "",
    example: Mapping[str, Any] | None = None,
    exempt: Mapping[str, str] | None = None,
    fixed: Mapping[str, Any] | None = None,
    backends: Sequence[str] | None = None,
) -> ModelSpec | None:
    """Register a model under ``name``.

    ``factory`` is a ``"module:attr"`` string (imported only when the model is created) or a callable;
    ``config`` is a dict of constructor defaults (``"???"`` = required) or the path of a model card.
    ``convention``, ``example`` and ``exempt`` are what the conformance kit (``attnzoo check``) needs:
    how the model is called, the smallest config that builds it, and property -> reason for a promise
    it cannot keep. ``fixed`` makes a preset: factory arguments no caller may change (and then only the
    keys of ``config`` are taken).
    ``formula`` is what it computes, in LaTeX (the docs site draws it).
    ``backends`` names the libraries it can serve as an attention backend for (``["transformers"]``: see
    ``attnzoo.integrations``).
    Called from a plugin's ``attnzoo_register_models`` hook, a bad entry is recorded against that
    plugin and skipped; called directly, it raises ``ConfigError``. Returns the registered spec.
    """
    fields = {k: v for k, v in locals().items() if k not in ("name", "factory")}
    return _register(None, name, factory, fields)


def _register(
    into: Registration | None, name: str, factory: str | Callable[..., Any] | None, fields: dict[str, Any]
) -> ModelSpec | None:
    """:func:`register` for the process (``into`` None: errors raise) or into one plugin's registration
    (errors are recorded against the plugin and the entry is skipped)."""
    provider = into.provider if into is not None else LOCAL_PROVIDER
    override, config = fields.pop("override"), fields.pop("config")
    try:
        spec = _build_spec(name, factory, config, fields, provider)
        if into is None:
            REGISTRY.add_local(spec, override=override)
        else:
            into.table.add(spec, override=override, context=into)
    except ConfigError as e:
        if into is None:
            raise
        into.problem(str(e))
        return None
    return spec
