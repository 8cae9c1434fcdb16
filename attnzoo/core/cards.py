"""Model cards: the YAML files in ``registry/`` (and in plugins) turned into ``ModelSpec`` objects.

A card is read with PyYAML's C loader rather than omegaconf: listing must stay fast and torch-free, and
the only omegaconf syntax a card uses at this stage is the ``???`` marker, which is a plain string here.
omegaconf takes over in ``config.py`` when a model is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from attnzoo.core.spec import CARD_FIELDS, WEIGHTS_FIELDS, ModelSpec, WeightsSpec
from attnzoo.errors import ConfigError, close_matches
from attnzoo.io.limits import check_yaml_depth, read_bounded

__all__ = ["read_card", "spec_from_card", "CARD_KEYS", "WEIGHTS_KEYS"]

CARD_KEYS = CARD_FIELDS  # what a card may hold: the fields of ModelSpec
WEIGHTS_KEYS = WEIGHTS_FIELDS  # what one weights entry may hold: the fields of WeightsSpec

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_card(path: str | Path) -> dict[str, Any]:
    """The raw mapping of one card file; a ``ConfigError`` naming the file if it is not a YAML mapping."""
    path = Path(path)
    try:
        text = read_bounded(path, f"model card {path}", ConfigError)
        check_yaml_depth(text, f"model card {path.name}", ConfigError)  # the C composer recurses
        data = yaml.load(text, Loader=_Loader)
    except OSError as e:
        raise ConfigError(f"model card {path}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        reason = " ".join(str(e).split())
        raise ConfigError(f"model card {path.name}: not valid YAML ({reason[:300]})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"model card {path.name}: expected a YAML mapping with name, factory, config, got {type(data).__name__}"
        )
    return dict(data)


def _check_keys(where: str, data: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            hint = close_matches(str(key), allowed)
            did_you_mean = f" (did you mean {', '.join(map(repr, hint))}?)" if hint else ""
            raise ConfigError(f"{where}: unknown field {key!r}{did_you_mean}; card fields are {', '.join(allowed)}")


def _weights_from_card(where: str, weights: Any) -> dict[str, WeightsSpec]:
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise ConfigError(f"{where}: 'weights' must map tag -> {{file, sha256, ...}}, got {type(weights).__name__}")
    out = {}
    for tag, entry in weights.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"{where}: weights.{tag} must be a mapping with a source (file, url or hf_hub) and sha256"
            )
        _check_keys(f"{where}: weights.{tag}", entry, WEIGHTS_KEYS)
        if "sha256" not in entry:
            raise ConfigError(f"{where}: weights.{tag} has no 'sha256' (required for every source)")
        try:
            out[str(tag)] = WeightsSpec(tag=str(tag), **dict(entry))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: weights.{tag}: {e}") from None
    return out


def spec_from_card(
    data: Mapping[str, Any],
    *,
    source: str,
    provider: str,
    weights_dir: str = "",
    defaults: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Validate a card mapping and build its ``ModelSpec``.

    ``defaults`` fills fields the card leaves out (used when ``register(name, factory, config=card)``
    passes some fields as arguments). Every problem is a ``ConfigError`` that names ``source``.
    """
    where = f"model card {Path(source).name}" if source.endswith((".yaml", ".yml")) else source
    _check_keys(where, data, CARD_KEYS)
    merged = {**(defaults or {}), **{k: v for k, v in data.items() if v is not None}}
    for required in ("name", "factory"):
        if not merged.get(required):
            raise ConfigError(f"{where}: missing required field '{required}'")
    config = merged.get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: 'config' must be a mapping of constructor arguments, got {type(config).__name__}")
    given = {k: merged[k] for k in CARD_FIELDS if merged.get(k) is not None}
    for text in ("summary", "reference", "formula", "convention"):
        if text in given:
            given[text] = str(given[text])
    given["weights"] = _weights_from_card(where, merged.get("weights"))
    given["config"] = config
    try:
        return ModelSpec(**given, provider=provider, source=source, weights_dir=weights_dir)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
