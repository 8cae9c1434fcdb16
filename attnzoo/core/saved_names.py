"""What folders saved by attnzoo 0.1.0 call by other names, and the names they go by today.

0.1.0 wrote its self-attention presets as subclasses of the attention core, and two of their settings
under names the core no longer takes: ``rope_self``'s ``base`` (today the core's ``rope_base``, which is
what the card says) and the layout ``"seed"`` (today ``"query_key_value"``). A saved folder is read as it
was written (its sha256 and its metadata agree with its ``config.yaml``); :func:`current_config` then
gives its config the names of today, once, on load. Nothing else in attnzoo knows the old names: a card
or a caller writing them gets the usual ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["current_config", "RENAMED_KEYS", "RENAMED_VALUES"]

RENAMED_KEYS: Mapping[str, Mapping[str, str]] = {"rope_self": {"base": "rope_base"}}  # model -> old key -> key
RENAMED_VALUES: Mapping[str, Mapping[Any, Any]] = {"layout": {"seed": "query_key_value"}}  # key -> old -> value


def current_config(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config``, saved under model ``name``, with its 0.1.0 keys and values under today's names.

    >>> current_config("rope_self", {"base": 500.0, "layout": "seed"})
    {'rope_base': 500.0, 'layout': 'query_key_value'}
    """
    keys = RENAMED_KEYS.get(name, {})
    out: dict[str, Any] = {}
    for key, value in config.items():
        key = keys.get(key, key)
        if isinstance(value, str) and value in RENAMED_VALUES.get(key, {}):
            value = RENAMED_VALUES[key][value]
        out[key] = value
    return out
