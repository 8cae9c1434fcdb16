"""A keras-hub preset folder's image converter (``preprocessor.json``'s ``image_converter``), which says how
raw images become the model's input: keras-hub's ``ImageConverter`` resizes them to ``image_size`` and
computes ``x * scale + offset`` (per channel where ``scale`` and ``offset`` are lists).

``save_to_preset`` of an image task with its preprocessor writes ``preprocessor.json`` (the preprocessor's
class, its ``image_converter`` inline). :func:`carried_image_converter` reads it as data from a stranger
(within ``ATTNZOO_MAX_CONFIG_BYTES``, JSON no deeper than ``ATTNZOO_MAX_DEPTH``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooWarning, WeightsError
from attnzoo.keras.hub_tokenizers.preset import PREPROCESSOR_CONFIG, _layer_config, serialized_layer

__all__ = ["carried_image_converter", "SETTINGS"]

# the ImageConverter's arguments that say what it computes, as get_config writes them
SETTINGS = ("image_size", "scale", "offset", "crop_to_aspect_ratio", "pad_to_aspect_ratio", "interpolation")
SETTINGS += ("antialias",)


def _converter_config(preset: Path) -> tuple[str, dict[str, Any]] | None:
    """The class name and config of ``preprocessor.json``'s image converter; ``None`` where it has none."""
    path = preset / PREPROCESSOR_CONFIG
    if not path.is_file():
        return None
    _, config = _layer_config(path, "keras-hub preprocessor config")
    converter = config.get("image_converter")
    if converter is None:
        return None
    return serialized_layer(converter, path, "keras-hub preprocessor's image_converter")


def carried_image_converter(path: str | Path) -> None:
    """Warn where the preset folder ``path`` holds an image converter: the model converts without it (it
    takes the converter's output, not raw images), and the warning says what to apply by hand."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    try:
        found = _converter_config(folder)
    except WeightsError as e:
        warnings.warn(f"{folder}: the model converts without its image converter: {e}", AttnzooWarning, stacklevel=3)
        return None
    if found is None:
        return None
    name, config = found
    shown = ", ".join(f"{key} {config.get(key)!r:.120}" for key in SETTINGS if key in config)
    warnings.warn(
        f"{folder / PREPROCESSOR_CONFIG}: the model converts without keras-hub's {name} ({shown}); the model "
        f"takes its output, not raw images: resize raw images to image_size and compute x * scale + offset "
        f"yourself before calling the model",
        AttnzooWarning,
        stacklevel=3,
    )
    return None
