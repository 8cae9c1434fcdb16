"""Keras's geometric augmentation layers, RandomRotation, RandomZoom and RandomTranslation: their nodes and
converters. The computation is the torch modules' of :mod:`attnzoo.keras.torch_layers.geometric` (an affine
map per image, sampled as keras 3 samples it), which the emitted module declares
(:func:`~attnzoo.keras.converters.augmentation.write_augmentation`)."""

from __future__ import annotations

from typing import Any

from attnzoo.keras.arguments import channels_first, expect_variables
from attnzoo.keras.converters.augmentation import AUGMENT_NOTE, RandomAugmentation, factor_range, write_augmentation
from attnzoo.keras.nodes import writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.torch_layers.geometric import (
    FILL_MODES,
    KerasRandomRotation,
    KerasRandomTranslation,
    KerasRandomZoom,
)

__all__ = ["RandomRotation", "RandomZoom", "RandomTranslation"]


class RandomRotation(KerasRandomRotation, RandomAugmentation):
    __doc__ = KerasRandomRotation.__doc__
    op = "random_rotation"


class RandomZoom(KerasRandomZoom, RandomAugmentation):
    __doc__ = KerasRandomZoom.__doc__
    op = "random_zoom"


class RandomTranslation(KerasRandomTranslation, RandomAugmentation):
    __doc__ = KerasRandomTranslation.__doc__
    op = "random_translation"


# the torch form: the torch module, as every augmentation's
writes(RandomRotation, RandomZoom, RandomTranslation)(write_augmentation)


def _affine_options(record) -> dict[str, Any]:
    c = record.config
    interpolation, fill_mode = c.get("interpolation", "bilinear"), c.get("fill_mode", "reflect")
    if interpolation not in ("bilinear", "nearest"):
        raise Refused(f"interpolation {interpolation!r} is not bilinear or nearest")
    if fill_mode not in FILL_MODES:
        raise Refused(f"fill_mode {fill_mode!r} is not one of {', '.join(FILL_MODES)}")
    fill_value = c.get("fill_value", 0.0)
    if isinstance(fill_value, bool) or not isinstance(fill_value, (int, float)):
        raise Refused(f"fill_value {fill_value!r} is not a number")
    return {
        "interpolation": interpolation,
        "fill_mode": fill_mode,
        "fill_value": float(fill_value),
        "channels_first": channels_first(c),
    }


@keras_layer("RandomRotation")
def convert_random_rotation(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomRotation")
    spec = {"op": "random_rotation", "factor": factor_range(record.config.get("factor"), "factor", (-1.0, 1.0))}
    return Converted({**spec, **_affine_options(record)}, {}, [AUGMENT_NOTE.format("rotation")])


@keras_layer("RandomZoom")
def convert_random_zoom(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomZoom")
    c = record.config
    width = c.get("width_factor")
    spec = {"op": "random_zoom", "height_factor": factor_range(c.get("height_factor"), "height_factor", (-1.0, 1.0))}
    spec["width_factor"] = None if width is None else factor_range(width, "width_factor", (-1.0, 1.0))
    return Converted({**spec, **_affine_options(record)}, {}, [AUGMENT_NOTE.format("zoom")])


@keras_layer("RandomTranslation")
def convert_random_translation(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomTranslation")
    c = record.config
    spec = {"op": "random_translation"}
    for key in ("height_factor", "width_factor"):
        spec[key] = factor_range(c.get(key), key, (-1.0, 1.0))
    return Converted({**spec, **_affine_options(record)}, {}, [AUGMENT_NOTE.format("translation")])
