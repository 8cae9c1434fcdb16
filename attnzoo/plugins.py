"""The plugin host: one pluggy ``PluginManager``, entry-point discovery, isolation, environment switches.

Plugins are the entry points of group ``attnzoo``; a plugin's name is its entry-point name. They load
lazily, the first time the registry is needed, each inside its own try/except, and every hook call runs
each implementation in its own try/except too: a failure is recorded once (``attnzoo plugins`` shows
it), that implementation is skipped from then on, and the next one answers. The built-in cards and the
default device handling are a plugin like any other, registered first and answering last.

Switches, read at call time (the table is rebuilt when they change):
``ATTNZOO_DISABLE_PLUGIN_AUTOLOAD=1`` loads no third-party plugin; ``ATTNZOO_PLUGINS=a,b`` loads only
those (entry-point or distribution names); ``ATTNZOO_BLOCK_PLUGINS=x`` skips x;
``ATTNZOO_STRICT_PLUGINS=1`` raises ``PluginError`` at the first problem instead of recording it.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import pluggy

from . import hookspecs, resources
from .errors import PluginError
from .hookspecs import hookimpl
from .spec import BUILTIN_PROVIDER

__all__ = ["PluginInfo", "list_plugins", "call_first", "current_state", "populate", "reset"]

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


def current_state() -> tuple:
    """The switches as they are now; the registry refills itself when they change."""
    return (_flag(ENV_DISABLE), _name_set(ENV_ALLOW), _name_set(ENV_BLOCK), _flag(ENV_STRICT))


def _strict() -> bool:
    return _flag(ENV_STRICT)


class BuiltinPlugin:
    """attnzoo's own cards and device handling, registered through the same hooks as a third party."""

    @hookimpl
    def attnzoo_register_models(self, register):
        for card in sorted(resources.cards_dir().glob("*.yaml")):
            register(card.stem, config=str(card))

    @hookimpl(trylast=True)
    def attnzoo_resolve_device(self, device):
        if device != "auto":
            return None
        import torch

        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    @hookimpl(trylast=True)
    def attnzoo_place_model(self, model, device, dtype):
        import torch

        if device is not None and not isinstance(device, torch.device):
            return None  # a string torch does not know: nobody claimed it
        return model.to(device=device, dtype=dtype)


class _Host:
    def __init__(self) -> None:
        self.manager: pluggy.PluginManager | None = None
        self.infos: dict[str, PluginInfo] = {}
        self.order: list[str] = []
        self.skipped: set[tuple[str, str]] = set()  # (plugin, hook) pairs that raised once
        self.attempted: dict[str, list[str]] = {}  # plugin -> names its failed register hook tried


_host = _Host()


def reset() -> None:
    global _host
    _host = _Host()


def _version() -> str:
    from . import __version__

    return __version__


def _entry_points() -> list:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _record_problem(info: PluginInfo, message: str, *, failed: bool) -> None:
    """Record a plugin's problem once: on its info (``attnzoo plugins``), as one warning, or, in strict
    mode, as the ``PluginError`` that stops everything. ``failed`` marks the whole plugin failed."""
    if failed:
        info.status = "failed"
    info.error = info.error or message
    info.problems.append(message)
    if _strict():
        raise PluginError(f"plugin {info.name!r} ({info.distribution} {info.version}): {message}")
    what = "failed" if failed else "skipped"
    warnings.warn(f"attnzoo: plugin {info.name!r} ({info.distribution}) {what}: {message}", stacklevel=3)


def _load_entry_points(manager: pluggy.PluginManager, host: _Host) -> None:
    disabled, allow, block, _ = current_state()
    if disabled:
        return
    for ep in _entry_points():
        dist = ep.dist.name if getattr(ep, "dist", None) is not None else ""
        version = ep.dist.version if getattr(ep, "dist", None) is not None else ""
        info = PluginInfo(ep.name, dist, version, "loaded", entry_point=ep.value)
        key = ep.name if ep.name not in host.infos else f"{ep.name} ({dist})"
        host.infos[key] = info
        host.order.append(key)
        keys = {ep.name.lower(), dist.lower()}
        if allow and not keys & allow:
            info.status, info.error = "blocked", f"not in {ENV_ALLOW}"
            continue
        if keys & block:
            info.status, info.error = "blocked", f"listed in {ENV_BLOCK}"
            continue
        if key != ep.name or ep.name == BUILTIN_PROVIDER:
            _record_problem(info, f"the plugin name {ep.name!r} is taken; rename the entry point", failed=True)
            continue
        try:
            plugin = ep.load()
            manager.register(plugin, name=ep.name)
        except PluginError:
            raise
        except Exception as e:  # noqa: BLE001 - a broken plugin must never break attnzoo
            _record_problem(info, f"import of {ep.value!r} raised {type(e).__name__}: {e}", failed=True)


def populate(registry) -> None:
    """Build the plugin manager and let every plugin register its models into ``registry``."""
    from .registry import Registration, done_registering, register, registering_as

    host = _Host()
    manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
    manager.add_hookspecs(hookspecs)
    manager.register(BuiltinPlugin(), name=BUILTIN_PROVIDER)
    host.infos[BUILTIN_PROVIDER] = PluginInfo(BUILTIN_PROVIDER, "attnzoo", _version(), "loaded",
                                              entry_point="attnzoo.plugins:BuiltinPlugin")
    host.order.append(BUILTIN_PROVIDER)
    global _host
    _host = host
    host.manager = manager
    _load_entry_points(manager, host)

    impls = {impl.plugin_name: impl for impl in manager.hook.attnzoo_register_models.get_hookimpls()}
    for name in host.order:
        info, impl = host.infos[name], impls.get(name)
        if impl is None or info.status != "loaded":
            continue
        context = Registration(provider=name, strict=_strict())
        token = registering_as(context)
        try:
            impl.function(*[{"register": register}[arg] for arg in impl.argnames])
        except PluginError:
            raise
        except Exception as e:  # noqa: BLE001
            registry.remove(context.names)
            host.attempted[name] = [q.split(":", 1)[1] for q in context.names]
            context.names.clear()
            _record_problem(info, f"attnzoo_register_models raised {type(e).__name__}: {e}", failed=True)
        finally:
            done_registering(token)
        info.models = list(context.names)
        info.problems = context.problems + info.problems
        if info.error is None and info.problems:
            info.error = info.problems[0]


def _ensure() -> _Host:
    from .registry import REGISTRY

    REGISTRY.ensure()
    return _host


def call_first(hook_name: str, **kwargs: Any) -> Any:
    """Call a firstresult hook, each implementation isolated: the first non-None answer wins."""
    host = _ensure()
    caller = getattr(host.manager.hook, hook_name)
    for impl in reversed(caller.get_hookimpls()):  # pluggy's own call order
        if impl.hookwrapper or getattr(impl, "wrapper", False) or (impl.plugin_name, hook_name) in host.skipped:
            continue
        try:
            result = impl.function(*[kwargs[arg] for arg in impl.argnames])
        except Exception as e:  # noqa: BLE001
            if impl.plugin_name == BUILTIN_PROVIDER:
                raise  # our own default: a real error for the caller, not a plugin problem
            host.skipped.add((impl.plugin_name, hook_name))  # recorded once, skipped from now on
            _record_problem(host.infos[impl.plugin_name], f"{hook_name} raised {type(e).__name__}: {e}",
                            failed=False)
            continue
        if result is not None:
            return result
    return None


def list_plugins() -> list[PluginInfo]:
    """Every plugin found (the built-in one first), with its status, models and problems."""
    host = _ensure()
    return [host.infos[name] for name in host.order]


def explain_missing(arch: str, provider: str | None) -> str:
    """Why a name may be missing: the plugin it belongs to failed, or was blocked."""
    host = _host
    if provider is not None and provider in host.infos:
        info = host.infos[provider]
        if info.status != "loaded":
            return f"; plugin {provider!r} ({info.distribution}) is {info.status}: {info.error}"
    for name, attempted in host.attempted.items():
        if arch in attempted:
            return f"; it belongs to plugin {name!r}, which failed: {host.infos[name].error}"
    failed = [i for i in host.infos.values() if i.status == "failed"]
    if failed:
        listed = "; ".join(f"{i.name!r} ({i.distribution}): {i.error}" for i in failed)
        return f"; note that plugins failed to load and may provide it: {listed}"
    return ""
