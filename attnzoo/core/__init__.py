"""The core: names to specs to built, placed modules.

``spec`` and ``record`` (plain data), ``cards`` (YAML cards to specs), ``resources`` (where the built-in
cards and weights live), ``hookspecs`` and ``plugins`` (the pluggy host), ``registry`` (the one name
table), ``config`` (merging and checking a config against the factory), ``signatures`` (what a factory
takes), ``create`` (``create``, ``load``), ``children`` (attnzoo's Python child processes, cut off from the
caller's folder). It imports ``attnzoo.errors`` and ``attnzoo.io`` only, and reaches ``layers/`` and
``models/`` through the cards' factory strings at ``create()`` time. Importing it does not import torch.
"""

from attnzoo.core.create import create, load
from attnzoo.core.hookspecs import hookimpl
from attnzoo.core.plugins import PluginInfo
from attnzoo.core.registry import list_models, list_plugins, model_info, register
from attnzoo.core.spec import ModelSpec, WeightsSpec

__all__ = [
    "create",
    "load",
    "list_models",
    "model_info",
    "register",
    "list_plugins",
    "hookimpl",
    "ModelSpec",
    "WeightsSpec",
    "PluginInfo",
]
