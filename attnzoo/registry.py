"""The name -> spec table: registration, collisions, lookup and listing.

The table fills itself on first use by calling every plugin's ``attnzoo_register_models`` hook, the
built-in cards included (they are registered by a built-in plugin through the same ``register``
callable as third parties). Nothing here imports torch or a factory.

Collision policy (shared/DESIGN.md): every spec is reachable by its qualified name
``provider:name``; the bare ``name`` belongs to whoever registered it first (built-ins first of all).
A plugin that registers a taken name keeps only its qualified name and one warning says who provides
what; ``override=True`` takes the bare name on purpose. An in-process ``register`` of a taken name is a
``ConfigError`` unless ``override=True``.
"""

from __future__ import annotations

import contextvars
import fnmatch
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import resources
from .cards import read_card, spec_from_card
from .errors import ConfigError, PluginError, UnknownModelError, close_matches
from .spec import BUILTIN_PROVIDER, LOCAL_PROVIDER, ModelSpec, WeightsSpec, parse_name

__all__ = ["register", "list_models", "model_info", "resolve", "REGISTRY", "Registration", "natural_key"]


class AttnzooWarning(UserWarning):
    """Something worth knowing that did not stop attnzoo: a name collision, a skipped card."""


@dataclass
class Registration:
    """Who is registering right now (set by the plugin host around each plugin's hook call)."""

    provider: str
    strict: bool = False
    names: list[str] = field(default_factory=list)  # qualified names added during this call
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        if self.strict:
            raise PluginError(f"plugin {self.provider!r}: {message}")
        self.problems.append(message)
        warnings.warn(f"attnzoo: plugin {self.provider!r}: {message}", AttnzooWarning, stacklevel=4)


_current: contextvars.ContextVar[Registration | None] = contextvars.ContextVar("attnzoo_registration", default=None)


def natural_key(text: str) -> list:
    """Sort key that orders ``m2`` before ``m10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}  # qualified name -> spec
        self._owner: dict[str, str] = {}  # bare name -> qualified name that answers it
        self._local: list[tuple[ModelSpec, bool]] = []  # in-process registrations, replayed on reload
        self._state: object = None  # the plugin switches the table was filled under

    # -- filling -----------------------------------------------------------------------------------
    def ensure(self) -> None:
        from . import plugins  # the host fills the table; imported late because it imports us

        state = plugins.current_state()
        if state == self._state:
            return
        self._specs.clear()
        self._owner.clear()
        self._state = None
        plugins.populate(self)  # may raise PluginError in strict mode: the table is then retried
        for spec, override in self._local:
            try:
                self._add(spec, override=override, context=None)
            except ConfigError as e:  # a plugin switched on since took the name: the plugin keeps it
                warnings.warn(f"attnzoo: your register({spec.name!r}) lost its name after a reload: {e}",
                              AttnzooWarning, stacklevel=2)
                self._specs[spec.qualified_name] = spec
        self._state = state

    def reset(self) -> None:
        """Forget everything, local registrations included (tests use this)."""
        self._local.clear()
        self._state = None
        from . import plugins

        plugins.reset()

    def _add(self, spec: ModelSpec, *, override: bool, context: Registration | None) -> None:
        qualified = spec.qualified_name
        if qualified in self._specs and not override:
            raise ConfigError(
                f"{spec.name!r} is already registered by {spec.provider!r}; pass override=True to replace it"
            )
        owner = self._owner.get(spec.name)
        if owner is not None and owner != qualified and not override:
            if context is None:
                raise ConfigError(
                    f"{spec.name!r} is already provided by {self._specs[owner].provider!r}; pass override=True "
                    f"to replace it (the old entry stays reachable as {owner!r})"
                )
            holder = self._specs[owner].provider
            what = "the built-in name" if holder == BUILTIN_PROVIDER else "the name"
            context.problem(
                f"registers {what} {spec.name!r}, which {holder!r} already provides; the name stays with "
                f"{holder!r} and this entry is reachable as {qualified!r} (override=True takes it on purpose)"
            )
            self._specs[qualified] = spec
            context.names.append(qualified)
            return
        self._specs[qualified] = spec
        self._owner[spec.name] = qualified
        if context is not None:
            context.names.append(qualified)

    def remove(self, qualified_names: Iterable[str]) -> None:
        """Take back entries (a plugin whose hook raised half-way loses what it registered)."""
        for qualified in qualified_names:
            spec = self._specs.pop(qualified, None)
            if spec is not None and self._owner.get(spec.name) == qualified:
                del self._owner[spec.name]
                # hand the bare name back to an entry that was shadowed by this one, if any
                for other_q, other in self._specs.items():
                    if other.name == spec.name:
                        self._owner[spec.name] = other_q
                        break

    # -- lookup ------------------------------------------------------------------------------------
    def all_specs(self) -> dict[str, ModelSpec]:
        self.ensure()
        return dict(self._specs)

    def display_name(self, spec: ModelSpec) -> str:
        """The shortest name that reaches ``spec``: bare if it owns its name, else qualified."""
        return spec.name if self._owner.get(spec.name) == spec.qualified_name else spec.qualified_name

    def resolve(self, name: str) -> tuple[ModelSpec, str | None]:
        """The spec a name refers to and the tag it asks for (None when it names no tag)."""
        self.ensure()
        parsed = parse_name(name)
        if parsed is None:
            hint = close_matches(str(name).lower().replace("-", "_"), self._known_names())
            raise UnknownModelError(
                f"{name!r} is not a valid model name: expected [provider:]arch[.tag] in lower case "
                f"([a-z][a-z0-9_]*){self._did_you_mean(hint)}",
                name=str(name),
                suggestions=hint,
            )
        if parsed.provider is not None:
            spec = self._specs.get(f"{parsed.provider}:{parsed.arch}")
        else:
            qualified = self._owner.get(parsed.arch)
            spec = self._specs.get(qualified) if qualified else None
        if spec is None:
            wanted = f"{parsed.provider}:{parsed.arch}" if parsed.provider else parsed.arch
            hint = close_matches(wanted, self._known_names())
            from . import plugins

            why = plugins.explain_missing(parsed.arch, parsed.provider)
            raise UnknownModelError(
                f"unknown model {wanted!r}{self._did_you_mean(hint)}{why}; `attnzoo list` shows every name",
                name=str(name),
                suggestions=hint,
            )
        if parsed.tag is not None and parsed.tag not in spec.weights:
            tags = ", ".join(spec.weights) or "none"
            raise UnknownModelError(
                f"{spec.name!r} has no pretrained tag {parsed.tag!r} (its tags: {tags})",
                name=str(name),
                suggestions=[f"{spec.name}.{t}" for t in spec.weights],
            )
        return spec, parsed.tag

    def _known_names(self) -> list[str]:
        names = [self.display_name(s) for s in self._specs.values()]
        names += [f"{self.display_name(s)}.{t}" for s in self._specs.values() for t in s.weights]
        return names

    @staticmethod
    def _did_you_mean(hint: list[str]) -> str:
        return f" (did you mean {', '.join(map(repr, hint))}?)" if hint else ""

    def names(self, *, pretrained: bool, provider: str | None) -> list[str]:
        self.ensure()
        out = []
        for spec in self._specs.values():
            if provider is not None and spec.provider != provider:
                continue
            shown = self.display_name(spec)
            if pretrained:
                out.extend(f"{shown}.{tag}" for tag in spec.weights)
            else:
                out.append(shown)
        return out


REGISTRY = Registry()


def _as_patterns(patterns: str | Iterable[str] | None) -> list[str]:
    if patterns is None:
        return []
    if isinstance(patterns, str):
        return [patterns]
    return list(patterns)


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
    *,
    config: Mapping[str, Any] | str | Path | None,
    summary: str,
    kind: str,
    weights: Mapping[str, Any] | None,
    reference: str,
    default_tag: str | None,
    provider: str,
) -> ModelSpec:
    if isinstance(config, (str, Path)):
        card_path = Path(config)
        card = read_card(card_path)
        if card.get("name") not in (None, name):
            raise ConfigError(f"model card {card_path.name}: its name {card.get('name')!r} is not {name!r}")
        # a card's weights live next to it, except for the built-in cards (weights/ at the top level)
        in_builtin = card_path.resolve().parent == resources.cards_dir().resolve()
        weights_dir = resources.weights_dir() if in_builtin else card_path.resolve().parent
        defaults = {"name": name, "factory": factory, "summary": summary, "kind": kind, "reference": reference}
        return spec_from_card(
            card,
            source=str(card_path),
            provider=provider,
            weights_dir=str(weights_dir),
            defaults={k: v for k, v in defaults.items() if v},
        )
    if factory is None:
        raise ConfigError(f"register({name!r}): give a factory ('module:attr' or a callable) or a card path as config=")
    try:
        return ModelSpec(
            name=name,
            factory=factory,
            kind=kind,
            summary=summary,
            reference=reference,
            config=dict(config or {}),
            weights=_weights_specs(weights),
            default_tag=default_tag,
            provider=provider,
            source=f"register() by {provider}",
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
    default_tag: str | None = None,
) -> ModelSpec | None:
    """Register a model under ``name``.

    ``factory`` is a ``"module:attr"`` string (imported only when the model is created) or a callable;
    ``config`` is a dict of constructor defaults (``"???"`` = required) or the path of a model card.
    Called from a plugin's ``attnzoo_register_models`` hook, a bad entry is recorded against that
    plugin and skipped; called directly, it raises ``ConfigError``. Returns the registered spec.
    """
    context = _current.get()
    if context is None:
        REGISTRY.ensure()
    provider = context.provider if context is not None else LOCAL_PROVIDER
    try:
        spec = _build_spec(
            name, factory, config=config, summary=summary, kind=kind, weights=weights,
            reference=reference, default_tag=default_tag, provider=provider,
        )
        REGISTRY._add(spec, override=override, context=context)
    except ConfigError as e:
        if context is None:
            raise
        context.problem(str(e))
        return None
    if context is None:
        REGISTRY._local.append((spec, override))
    return spec


def registering_as(context: Registration) -> contextvars.Token:
    """Make ``register`` calls count for ``context`` until the returned token is reset."""
    return _current.set(context)


def done_registering(token: contextvars.Token) -> None:
    _current.reset(token)
