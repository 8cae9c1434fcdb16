"""Configuration: merge the layers of config with omegaconf, then validate them against the factory.

Precedence, lowest first: the card's defaults < the pretrained tag's config < ``config=`` (a dict, a
``DictConfig`` or a YAML path) < ``**overrides``. A card marks a required value ``???``. Every key is
checked against the factory's signature, and every value against the parameter's annotation, before the
factory is called: a typo or a wrong type is a ``ConfigError`` that names the key, never a
``TypeError`` from deep inside a constructor.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnzoo.core.spec import ModelSpec, thaw
from attnzoo.errors import ConfigError, close_matches

__all__ = [
    "merge_config",
    "validate_config",
    "load_config_source",
    "user_config",
    "parse_overrides",
    "factory_parameters",
    "card_config",
    "check_yaml_file",
]


_FOLDER_KEYS = {"name", "factory", "sha256", "previous"}


def _section(loaded: Any) -> Any:
    """A config file may be a flat mapping of constructor arguments, or hold them under ``config:``
    (a saved folder's config.yaml does, beside its name, factory and digest)."""
    from omegaconf import DictConfig

    if "config" in loaded and isinstance(loaded.get("config"), DictConfig) and set(loaded) - {"config"} <= _FOLDER_KEYS:
        return loaded.config
    return loaded


def check_yaml_file(path: Path, where: str) -> None:
    """Refuse, before omegaconf builds it, a YAML file past the limits of :mod:`attnzoo.io.limits` (its
    size, its nesting: omegaconf's parser recurses) or whose aliases expand past ``MAX_YAML_NODES``
    (omegaconf before 2.4 expands them all: a "billion laughs" never ends)."""
    from attnzoo.io.folders import MAX_YAML_NODES, expanded_yaml_nodes
    from attnzoo.io.limits import check_yaml_depth, read_bounded

    try:
        text = read_bounded(path, where, ConfigError)
    except OSError:
        return  # the YAML reader says what is wrong with it
    check_yaml_depth(text, where, ConfigError)
    if expanded_yaml_nodes(text) > MAX_YAML_NODES:
        raise ConfigError(
            f"{where}: its aliases (*name) expand into more than {MAX_YAML_NODES:,} values; refusing to build "
            f"it (write the values out, or use fewer aliases of aliases)"
        )


def load_config_source(config: Any) -> Any:
    """A ``DictConfig`` from a dict, a ``DictConfig`` or the path of a YAML file."""
    from omegaconf import DictConfig, OmegaConf

    if config is None:
        return OmegaConf.create({})
    if isinstance(config, DictConfig):
        return config
    if isinstance(config, (str, Path)):
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist; pass a dict or the path of a YAML file")
        check_yaml_file(path, f"config file {path.name}")
        try:
            loaded = OmegaConf.load(path)
        except Exception as e:  # noqa: BLE001 - omegaconf raises several types for bad YAML
            reason = " ".join(str(e).split())[:200]
            raise ConfigError(f"config file {path.name}: cannot read it as YAML ({reason})") from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError(f"config file {path.name}: expected a mapping of key: value, got a list")
        return _section(loaded)
    if isinstance(config, Mapping):  # a card's frozen mapping (a spec's example) works as well
        return OmegaConf.create(thaw(config))
    raise ConfigError(f"config must be a dict, a DictConfig or a YAML path, got {type(config).__name__}")


def user_config(config: Any) -> dict[str, Any]:
    """The caller's ``config=`` (dict, DictConfig or YAML path) as a plain dict, its own omegaconf
    interpolations resolved, ``???`` kept for missing values."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    where = f"config file {Path(config).name}" if isinstance(config, (str, Path)) else "config="
    try:
        loaded = load_config_source(config)
        missing = OmegaConf.missing_keys(loaded)
        container = OmegaConf.to_container(loaded, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{where}: {' '.join(str(e).split())[:300]}") from None
    if not isinstance(container, dict):
        raise ConfigError(f"{where}: expected a mapping of key: value")
    for key in missing:
        container[key] = "???"
    return {str(k): v for k, v in container.items()}


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["num_labels=50", "mask=true"]`` -> ``{"num_labels": 50, "mask": True}`` (values parsed as YAML)."""
    from omegaconf import OmegaConf

    for pair in pairs:
        if "=" not in pair or pair.startswith("="):
            raise ConfigError(f"expected key=value, got {pair!r}")
    parsed = OmegaConf.to_container(OmegaConf.from_dotlist(list(pairs)), resolve=True)
    assert isinstance(parsed, dict)  # a dot list always builds a mapping
    return {str(k): v for k, v in parsed.items()}


def merge_config(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge plain mappings, lowest precedence first (nested mappings merge key by key).

    Values are taken as they are: a string such as ``${oc.env:SECRET}`` in a card, a tag or a weights
    file's metadata stays that string; only the caller's own ``config=`` is interpreted by omegaconf
    (:func:`user_config`).
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = merge_config(merged[key], value)
            else:
                merged[key] = value
    return merged


def card_config(spec: ModelSpec, *layers: tuple[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The card's defaults merged with ``layers`` (``(where, values)``, lowest precedence first) under the
    card's rules: a value it fixes stays as fixed (asking another is a ConfigError naming where the value
    came from), and a preset (a card with fixed values) takes only the keys its config lists."""
    fixed = thaw(spec.fixed)
    allowed = [*spec.config, *fixed]
    for where, layer in layers:
        for key, value in (layer or {}).items():
            if key in fixed and value != fixed[key]:
                raise ConfigError(
                    f"{spec.name}: {key} is fixed at {fixed[key]!r} by its card, and {where} asks for {value!r}; "
                    f"{_preset_hint(spec)}"
                )
            if fixed and key not in allowed:
                hint = close_matches(key, allowed)
                did_you_mean = f"did you mean {', '.join(map(repr, hint))}? " if hint else ""
                raise ConfigError(
                    f"{spec.name}: unknown config key {key!r} ({where}); {did_you_mean}valid keys: "
                    f"{', '.join(spec.config)}; {_preset_hint(spec)}"
                )
    return merge_config(thaw(spec.config), *(layer for _, layer in layers), fixed)


def _preset_hint(spec: ModelSpec) -> str:
    fixed = ", ".join(f"{k}={v!r}" for k, v in thaw(spec.fixed).items())
    return (
        f"{spec.name} is a preset ({fixed}); for other combinations use a card without fixed values over "
        f"{spec.factory_name} ('attention' is the attention core's)"
    )


def factory_parameters(factory: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool, dict[str, Any]]:
    """The named parameters of ``factory``, whether it takes ``**kwargs``, and resolved annotations."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: let the factory judge its arguments
        return {}, True, {}
    params = {
        name: p for name, p in signature.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    var_kw = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an unresolvable annotation only skips the type check
        hints = {}
    return params, var_kw, hints


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _fits(value: Any, annotation: Any) -> tuple[bool, Any]:
    """Whether ``value`` fits ``annotation``, and the value to pass (ints widen to float, lists to tuples)."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True, value
    if annotation is type(None):
        return value is None, value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return value in args, value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            ok, converted = _fits(value, option)
            if ok:
                return True, converted
        return False, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return True, float(value)
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    if origin in (list, tuple, Sequence, typing.Sequence) or annotation in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        item = args[0] if args and (origin is not tuple or len(args) == 2 and args[1] is Ellipsis) else Any
        converted = []
        for v in value:
            ok, c = _fits(v, item)
            if not ok:
                return False, value
            converted.append(c)
        return True, tuple(converted) if origin is tuple or annotation is tuple else converted
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return isinstance(value, Mapping), value
    if isinstance(annotation, type):
        return isinstance(value, annotation), value
    return True, value  # an annotation we do not understand: let the factory judge


def validate_config(
    factory: Callable[..., Any],
    config: Mapping[str, Any],
    *,
    model: str,
) -> dict[str, Any]:
    """Check ``config`` against ``factory``'s signature; return the keyword arguments to call it with."""
    params, var_kw, hints = factory_parameters(factory)
    for key in config:  # unknown keys first: a typo also leaves the real key missing
        if key not in params and not var_kw:
            hint = close_matches(key, params)
            did_you_mean = f"did you mean {', '.join(map(repr, hint))}? " if hint else ""
            raise ConfigError(
                f"{model}: unknown config key {key!r}; {did_you_mean}valid keys: {', '.join(params) or 'none'}"
            )
    kwargs: dict[str, Any] = {}
    for key, value in config.items():
        if value == "???":
            raise ConfigError(f"{model}: missing required config value {key!r}; pass {key}=... to create()")
        annotation = hints.get(key, inspect.Parameter.empty)
        ok, converted = _fits(value, annotation)
        if not ok:
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            finite = " (a finite number)" if isinstance(value, float) and not math.isfinite(value) else ""
            raise ConfigError(
                f"{model}: config key {key!r} expects {_type_name(annotation)}{finite}, got {shown} "
                f"({type(value).__name__})"
            )
        kwargs[key] = converted
    for name, param in params.items():
        if param.default is inspect.Parameter.empty and name not in kwargs:
            raise ConfigError(f"{model}: missing required config value {name!r}; pass {name}=... to create()")
    return kwargs
