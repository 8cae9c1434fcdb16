"""attnzoo: a config-driven zoo of correct, masked, fast PyTorch attention layers.

    >>> import attnzoo
    >>> attnzoo.list_models("label*")
    >>> layer = attnzoo.create("labelwise", num_labels=50)   # hidden size inferred on the first call

Importing attnzoo, listing and reading model cards never import torch; ``create`` does.
"""

from attnzoo.core.create import create, load
from attnzoo.core.hookspecs import hookimpl
from attnzoo.core.plugins import PluginInfo
from attnzoo.core.registry import list_models, list_plugins, model_info, register
from attnzoo.core.spec import ModelSpec, WeightsSpec
from attnzoo.errors import AttnzooError, ConfigError, PluginError, UnknownModelError, WeightsError
from attnzoo.interop.export import export
from attnzoo.io.folders import save
from attnzoo.version import __version__

_SUBPACKAGES = ("keras", "layers", "models", "train")


def __getattr__(name: str):
    # subpackages import torch: reach them on first use (attnzoo.keras.load_keras_weights), not at import
    if name == "predict":
        from attnzoo.train.predict import predict

        return predict
    if name == "tokenizer":
        from attnzoo.train.tokenizer import tokenizer

        return tokenizer
    if name == "plot_pattern":  # matplotlib and torch load when a picture is drawn
        from attnzoo.tools.plots import plot_pattern

        return plot_pattern
    if name == "plot_attention":
        from attnzoo.train.attention_map import plot_attention

        return plot_attention
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnzoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the names reached on first use (predict, tokenizer, the subpackages) are listed before they are
    # imported, so that dir(attnzoo) and tab completion show every public name the docs use
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


__all__ = [
    "create",
    "load",
    "save",
    "export",
    "predict",
    "tokenizer",
    "plot_pattern",
    "plot_attention",
    "register",
    "list_models",
    "model_info",
    "list_plugins",
    "hookimpl",
    "ModelSpec",
    "WeightsSpec",
    "PluginInfo",
    "AttnzooError",
    "UnknownModelError",
    "ConfigError",
    "WeightsError",
    "PluginError",
    "__version__",
]
