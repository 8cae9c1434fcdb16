"""The plugin host: one pluggy ``PluginManager``, entry-point discovery, isolation, environment switches.

Plugins are the entry points of group ``attnzoo``; a plugin's name is its entry-point name. Each loads
inside its own try/except, and every hook call runs each implementation in its own try/except too: a
failure is recorded once (``attnzoo plugins`` shows it), that implementation is skipped from then on,
and the next one answers. The built-in cards and the default device handling are a plugin like any
other, registered first and answering last.

This module knows nothing of the registry: ``attnzoo.core.registry`` owns the one :class:`PluginHost` of
each table it builds (the host and the name table are built together and swapped in together), and
gives :meth:`PluginHost.register_models` a ``register`` bound to each plugin in turn.

Switches, read at call time (the registry rebuilds its table when they change):
``ATTNZOO_DISABLE_PLUGIN_AUTOLOAD=1`` loads no third-party plugin; ``ATTNZOO_PLUGINS=a,b`` loads only
those (entry-point or distribution names); ``ATTNZOO_BLOCK_PLUGINS=x`` skips x;
``ATTNZOO_STRICT_PLUGINS=1`` raises ``PluginError`` at the first problem instead of recording it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, Protocol

import pluggy

from attnzoo.core import hookspecs, resources
from attnzoo.core.hookspecs import hookimpl
from attnzoo.core.spec import BUILTIN_PROVIDER
from attnzoo.errors import PluginError, PluginWarning

__all__ = [
    "PluginInfo",
    "PluginHost",
    "State",
    "current_state",
    "autoload_disabled",
    "child_environment",
    "strict",
    "ENTRY_POINT_GROUP",
    "Registrar",
]

ENV_DISABLE = "ATTNZOO_DISABLE_PLUGIN_AUTOLOAD"
ENV_ALLOW = "ATTNZOO_PLUGINS"
ENV_BLOCK = "ATTNZOO_BLOCK_PLUGINS"
ENV_STRICT = "ATTNZOO_STRICT_PLUGINS"
ENTRY_POINT_GROUP = "attnzoo"


@dataclass
class PluginInfo:
    """One plugin as ``attnzoo plugins`` shows it."""

    name: str
    distribution: str
    version: str
    status: str  # loaded | failed | blocked
    error: str | None = None  # the first problem, for a failed plugin the reason it failed
    models: list[str] = field(default_factory=list)  # qualified names it registered
    problems: list[str] = field(default_factory=list)  # every recorded problem, in order
    entry_point: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _name_set(name: str) -> frozenset[str]:
    return frozenset(p.strip().lower() for p in os.environ.get(name, "").split(",") if p.strip())


class Registrar(Protocol):
    """What one plugin's ``attnzoo_register_models`` call registers into (the registry makes one per plugin)."""

    names: list[str]  # the qualified names it registered
    problems: list[str]  # entries refused, collisions

    def register(self, name: str, factory: Any = None, **fields: Any) -> Any: ...

    def take_back(self) -> list[str]:
        """Remove what was registered (the hook raised); the bare names it had tried."""
        ...


class State(NamedTuple):
    """The plugin switches a registry table was filled under (it refills itself when they change)."""

    disabled: bool  # no third-party plugin is loaded
    allow: frozenset[str]  # only these (entry-point or distribution names), when not empty
    block: frozenset[str]  # never these
    strict: bool  # the first problem raises PluginError


_autoload_off: contextvars.ContextVar[bool] = contextvars.ContextVar("attnzoo_autoload_off", default=False)


@contextlib.contextmanager
def autoload_disabled() -> Iterator[None]:
    """Within the block no third-party plugin is loaded (as with ATTNZOO_DISABLE_PLUGIN_AUTOLOAD=1),
    without touching the environment: ``attnzoo --no-plugins`` runs its command inside it."""
    token = _autoload_off.set(True)
    try:
        yield
    finally:
        _autoload_off.reset(token)


def child_environment() -> dict[str, str] | None:
    """The environment for a child process that must see the switches this one runs under (the
    :func:`autoload_disabled` block included), or None when the inherited one says it all."""
    if _autoload_off.get() and not _flag(ENV_DISABLE):
        return {**os.environ, ENV_DISABLE: "1"}
    return None


def current_state() -> State:
    """The switches as they are now; the registry refills itself when they change."""
    disabled = _flag(ENV_DISABLE) or _autoload_off.get()
    return State(disabled, _name_set(ENV_ALLOW), _name_set(ENV_BLOCK), _flag(ENV_STRICT))


def strict() -> bool:
    return _flag(ENV_STRICT)


class BuiltinPlugin:
    """attnzoo's own cards and device handling, registered through the same hooks as a third party.

    The floors above the core register their own built-ins in their own floor, through the same
    ``register`` a plugin's hook gets (the CLI its verbs, the Keras converter its converters), and ask
    the hooks only for the plugins'."""

    @hookimpl
    def attnzoo_register_models(self, register: Callable[..., Any]) -> None:
        for card in sorted(resources.cards_dir().glob("*.yaml")):
            register(card.stem, config=str(card))

    @hookimpl(trylast=True)
    def attnzoo_resolve_device(self, device: Any) -> Any:
        if device != "auto":
            return None
        import torch

        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    @hookimpl(trylast=True)
    def attnzoo_place_model(self, model: Any, device: Any, dtype: Any) -> Any:
        import torch

        if device is not None and not isinstance(device, torch.device):
            return None  # a string torch does not know: nobody claimed it
        return model.to(device=device, dtype=dtype)


def _version() -> str:
    from attnzoo.version import __version__

    return __version__


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


class PluginHost:
    """The plugins of one registry table: their manager, what each registered, and what went wrong.

    Built aside by the registry (:meth:`load`, then :meth:`register_models`) and swapped in with the
    table; after that only the failure bookkeeping of hook calls changes, under the host's own lock.
    """

    def __init__(self, state: State) -> None:
        self.state = state
        self.manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.manager.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.order: list[str] = []
        self.skipped: set[tuple[str, str]] = set()  # (plugin, hook) pairs that raised once
        self.attempted: dict[str, list[str]] = {}  # plugin -> names its failed register hook tried
        self._lock = threading.Lock()

    # -- building ----------------------------------------------------------------------------------
    def load(self) -> None:
        """Register the built-in plugin, then every entry point the switches allow, each isolated."""
        self.manager.register(BuiltinPlugin(), name=BUILTIN_PROVIDER)
        self._add_info(
            BUILTIN_PROVIDER,
            PluginInfo(
                BUILTIN_PROVIDER, "attnzoo", _version(), "loaded", entry_point="attnzoo.core.plugins:BuiltinPlugin"
            ),
        )
        disabled, allow, block, _ = self.state
        if disabled:
            return
        for ep in _entry_points():
            dist = ep.dist.name if getattr(ep, "dist", None) is not None else ""
            version = ep.dist.version if getattr(ep, "dist", None) is not None else ""
            info = PluginInfo(ep.name, dist, version, "loaded", entry_point=ep.value)
            key = ep.name if ep.name not in self.infos else f"{ep.name} ({dist})"
            self._add_info(key, info)
            keys = {ep.name.lower(), dist.lower()}
            if allow and not keys & allow:
                info.status, info.error = "blocked", f"not in {ENV_ALLOW}"
                continue
            if keys & block:
                info.status, info.error = "blocked", f"listed in {ENV_BLOCK}"
                continue
            if key != ep.name or ep.name == BUILTIN_PROVIDER:
                self.record(info, f"the plugin name {ep.name!r} is taken; rename the entry point", failed=True)
                continue
            try:
                plugin = ep.load()
                self.manager.register(plugin, name=ep.name)
            except PluginError:
                raise
            except Exception as e:  # noqa: BLE001 - a broken plugin must never break attnzoo
                self.record(info, f"import of {ep.value!r} raised {type(e).__name__}: {e}", failed=True)

    def _add_info(self, key: str, info: PluginInfo) -> None:
        self.infos[key] = info
        self.order.append(key)

    def register_models(self, registrar_for: Callable[[str], Registrar]) -> None:
        """Call every loaded plugin's ``attnzoo_register_models`` (the built-in cards first, then the plugins in
        load order), each with the ``register`` that ``registrar_for(plugin)`` binds to it. A hook that raises
        is recorded against its plugin, which is marked failed, and what it registered is taken back."""
        impls = {impl.plugin_name: impl for impl in self.manager.hook.attnzoo_register_models.get_hookimpls()}
        for name in self.order:
            info, impl = self.infos[name], impls.get(name)
            if impl is None or info.status != "loaded":
                continue
            registrar = registrar_for(name)
            try:
                impl.function(*[{"register": registrar.register}[arg] for arg in impl.argnames])
            except PluginError:
                raise
            except Exception as e:  # noqa: BLE001 - a broken plugin must never break attnzoo
                self.attempted[name] = registrar.take_back()
                self.record(info, f"attnzoo_register_models raised {type(e).__name__}: {e}", failed=True)
            else:
                info.models = list(registrar.names)
            finally:
                info.problems = list(registrar.problems) + info.problems
                if info.error is None and info.problems:
                    info.error = info.problems[0]

    # -- calling -----------------------------------------------------------------------------------
    def record(self, info: PluginInfo, message: str, *, failed: bool) -> None:
        """Record a plugin's problem once: on its info (``attnzoo plugins``), as one warning, or, in strict
        mode, as the ``PluginError`` that stops everything. ``failed`` marks the whole plugin failed."""
        with self._lock:
            if failed:
                info.status = "failed"
            info.error = info.error or message
            info.problems.append(message)
        if self.state.strict:
            raise PluginError(f"plugin {info.name!r} ({info.distribution} {info.version}): {message}")
        what = "failed" if failed else "skipped"
        warnings.warn(
            f"attnzoo: plugin {info.name!r} ({info.distribution}) {what}: {message}", PluginWarning, stacklevel=3
        )

    def _implementations(self, hook_name: str) -> list[Any]:
        caller = getattr(self.manager.hook, hook_name)
        impls = []
        for impl in reversed(caller.get_hookimpls()):  # pluggy's own call order
            if impl.hookwrapper or getattr(impl, "wrapper", False) or (impl.plugin_name, hook_name) in self.skipped:
                continue
            impls.append(impl)
        return impls

    def _call(self, impl: Any, hook_name: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        try:
            return True, impl.function(*[kwargs[arg] for arg in impl.argnames])
        except Exception as e:  # noqa: BLE001
            if impl.plugin_name == BUILTIN_PROVIDER:
                raise  # our own default: a real error for the caller, not a plugin problem
            with self._lock:
                first = (impl.plugin_name, hook_name) not in self.skipped
                self.skipped.add((impl.plugin_name, hook_name))  # recorded once, skipped from now on
            if first:
                self.record(self.infos[impl.plugin_name], f"{hook_name} raised {type(e).__name__}: {e}", failed=False)
            return False, None

    def first_result(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a firstresult hook, each implementation isolated: the first non-None answer wins."""
        for impl in self._implementations(hook_name):
            ok, result = self._call(impl, hook_name, kwargs)
            if ok and result is not None:
                return result
        return None

    def each_plugin(self, hook_name: str, arguments: Callable[[str], dict[str, Any]]) -> None:
        """Call every implementation of a hook, each isolated, with the arguments ``arguments(plugin)``
        builds for that plugin (a ``register`` that records who registered what)."""
        for impl in self._implementations(hook_name):
            self._call(impl, hook_name, arguments(impl.plugin_name))

    def plugin_list(self) -> list[PluginInfo]:
        return [self.infos[name] for name in self.order]

    def explain_missing(self, arch: str, provider: str | None) -> str:
        """Why a name may be missing: the plugin it belongs to failed, or was blocked."""
        if provider is not None and provider in self.infos:
            info = self.infos[provider]
            if info.status != "loaded":
                return f"; plugin {provider!r} ({info.distribution}) is {info.status}: {info.error}"
        for name, attempted in self.attempted.items():
            if arch in attempted:
                return f"; it belongs to plugin {name!r}, which failed: {self.infos[name].error}"
        failed = [i for i in self.infos.values() if i.status == "failed"]
        if failed:
            listed = "; ".join(f"{i.name!r} ({i.distribution}): {i.error}" for i in failed)
            return f"; note that plugins failed to load and may provide it: {listed}"
        return ""
