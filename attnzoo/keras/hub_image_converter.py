"""A keras-hub preset folder's image converter (``preprocessor.json``'s ``image_converter``), which says how
raw images become the model's input: keras-hub's ``ImageConverter`` resizes them to ``image_size`` and
computes ``x * scale + offset`` (per channel where ``scale`` and ``offset`` are lists).

``save_to_preset`` of an image task with its preprocessor writes ``preprocessor.json`` (the preprocessor's
class, its ``image_converter`` inline). :func:`carried_image_converter` reads it as data from a stranger
(within ``ATTNZOO_MAX_CONFIG_BYTES``, JSON no deeper than ``ATTNZOO_MAX_DEPTH``) into a
:class:`~attnzoo.keras.image_converter.PortImageConverter` the converted model carries.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooWarning, ConfigError, WeightsError
from attnzoo.keras.hub_tokenizers.preset import PREPROCESSOR_CONFIG, read_layer_config, serialized_layer
from attnzoo.keras.image_converter import ImageConversion, PortImageConverter

__all__ = ["keras_hub_image_converter", "carried_image_converter", "SETTINGS", "CONVERTER_CLASSES"]

# keras-hub's ImageConverter and the subclasses of the image families attnzoo converts (none adds a method)
CONVERTER_CLASSES = ("ImageConverter", "ResNetImageConverter", "EfficientNetImageConverter")
CONVERTER_CLASSES += ("MobileNetImageConverter", "DenseNetImageConverter", "DeiTImageConverter", "ViTImageConverter")
CONVERTER_CLASSES += ("DINOV2ImageConverter",)

# the ImageConverter's arguments that say what it computes, as get_config writes them
SETTINGS = ("image_size", "scale", "offset", "crop_to_aspect_ratio", "pad_to_aspect_ratio", "interpolation")
SETTINGS += ("antialias",)


def _converter_config(preset: Path) -> tuple[str, dict[str, Any]] | None:
    """The class name and config of ``preprocessor.json``'s image converter; ``None`` where it has none."""
    path = preset / PREPROCESSOR_CONFIG
    if not path.is_file():
        return None
    _, config = read_layer_config(path, "keras-hub preprocessor config")
    converter = config.get("image_converter")
    if converter is None:
        return None
    return serialized_layer(converter, path, "keras-hub preprocessor's image_converter")


def keras_hub_image_converter(preset: str | Path) -> PortImageConverter:
    """The image converter of a keras-hub preset folder's ``preprocessor.json``, as a model's
    ``image_converter`` (``model.preprocess(images)``). A folder without one is a ``WeightsError``; a class or
    a setting attnzoo does not compute a ``ConfigError`` naming it."""
    folder = Path(preset)
    found = _converter_config(folder)
    if found is None:
        raise WeightsError(
            f"{folder}: no {PREPROCESSOR_CONFIG} with an image_converter (save_to_preset of an image task)"
        )
    name, config = found
    where = str(folder / PREPROCESSOR_CONFIG)
    if name not in CONVERTER_CLASSES:
        raise ConfigError(
            f"{where}: keras-hub's {name} is an image converter attnzoo does not compute; it computes "
            f"{', '.join(CONVERTER_CLASSES)}"
        )
    return PortImageConverter(ImageConversion.of(name, config, where))


def carried_image_converter(path: str | Path) -> PortImageConverter | None:
    """The image converter a model converted from ``path`` carries: a preset folder's, else ``None``. One
    attnzoo does not compute (or a malformed one) is left behind with a warning naming the converter, its
    settings and what to apply by hand: the model converts without it (it takes the converter's output)."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    found = None
    try:
        found = _converter_config(folder)
        return None if found is None else keras_hub_image_converter(folder)
    except (ConfigError, WeightsError) as e:
        said = e
    shown = ", ".join(f"{key} {found[1].get(key)!r:.120}" for key in SETTINGS if key in found[1]) if found else ""
    warnings.warn(
        f"{folder}: the model converts without its image converter{f' ({found[0]}: {shown})' if found else ''}: "
        f"{said}. The model takes the converter's output, not raw images: resize raw images to image_size and "
        f"compute x * scale + offset yourself before calling the model",
        AttnzooWarning,
        stacklevel=3,
    )
    return None
