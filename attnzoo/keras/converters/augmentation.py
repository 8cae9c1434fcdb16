"""Keras's random image augmentation layers, their nodes and converters; each computes as its torch module
in :mod:`attnzoo.keras.torch_layers` (``RandomFlip`` is ``KerasRandomFlip``, its first base), which the
emitted module declares (:func:`write_augmentation`). The identity at inference (``model.eval()``), Keras's random
transformation in training (``model.train()``), each image of the batch drawn on its own.

Images are [B, H, W, C] (``channels_first``: [B, C, H, W]) or one image without its batch axis. The
geometric layers (RandomRotation, RandomZoom, RandomTranslation: :mod:`attnzoo.keras.converters.affine`)
move pixels through an affine map from each output pixel ``(x, y)`` (column, row) to the input point
``(a0 x + a1 y + a2, b0 x + b1 y + b2)``:

=====================  ===========================================================================
``RandomRotation``     angle θ ~ U(360° · factor): ``a0 = b1 = cos θ``, ``a1 = -sin θ``, ``b0 = sin θ``
                       about the centre ``((W - 1) / 2, (H - 1) / 2)``
``RandomZoom``         ``a0 = zx``, ``b1 = zy``, ``a2 = (W - 1) / 2 · (1 - zx)``, ``b2 = (H - 1) / 2 ·
                       (1 - zy)``; ``zy ~ U(1 + height_factor)``, ``zx ~ U(1 + width_factor)`` (``zy``
                       when ``width_factor`` is None): above 1 zooms out
``RandomTranslation``  ``a2 = -W · u``, ``b2 = -H · v``; ``v ~ U(height_factor)``, ``u ~ U(width_factor)``
``RandomContrast``     ``(x - m) · f + m`` (``m`` each channel's mean over the image), f ~ U(1 - lower,
                       1 + upper), clipped to ``value_range``
``RandomBrightness``   ``x + δ · (hi - lo)``, δ ~ U(factor), clipped to ``value_range = (lo, hi)``
``RandomCrop``         one window of the target size at a uniform offset for the batch (an image not
                       larger on both axes: its centred window of the target's aspect ratio, resized)
``RandomHeight/Width`` (Keras 2) the batch resized to ``int(H · f)`` rows (columns), f ~ U(1 + factor)
=====================  ===========================================================================

Keras's factor conventions are kept, its odd ones too: keras 3's RandomContrast turns ``factor=0.2`` into
``(0, 0.2)``, so contrast only grows, in [1, 1.2]. The random numbers are torch's (``torch.manual_seed``
makes them repeatable), not Keras's; a factor range of zero width gives Keras's transformation exactly.
``KerasModel.augmentation(False)`` makes every layer here the identity in training too, for data
augmented before the model. RandomFlip is here too; GaussianNoise and GaussianDropout are noise layers
(:mod:`attnzoo.keras.converters.regularization`).
"""

from __future__ import annotations

import math
from typing import Any

from attnzoo.keras.arguments import channels_first, expect_variables
from attnzoo.keras.emit import Writer
from attnzoo.keras.nodes import NODES, Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.torch_layers.augmentation import (
    FLIPS,
    KerasAugmentation,
    KerasRandomBrightness,
    KerasRandomContrast,
    KerasRandomCrop,
    KerasRandomFlip,
    KerasRandomResize,
)

__all__ = ["RandomAugmentation", "AUGMENT_NOTE", "factor_range", "write_augmentation"]

AUGMENT_NOTE = "the identity at inference; Keras's random {} in training (model.train())"


class RandomAugmentation(Node, KerasAugmentation):
    """The node of a Keras random augmentation layer: the node protocol over
    :class:`~attnzoo.keras.torch_layers.KerasAugmentation`'s ``forward`` (a family's node class is
    ``class RandomX(KerasRandomX, RandomAugmentation)``: the torch module's settings and transformation,
    this class's calls)."""

    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def compute(self, x, mask):
        return KerasAugmentation.forward(self, x)


class RandomContrast(KerasRandomContrast, RandomAugmentation):
    __doc__ = KerasRandomContrast.__doc__
    op = "random_contrast"


class RandomBrightness(KerasRandomBrightness, RandomAugmentation):
    __doc__ = KerasRandomBrightness.__doc__
    op = "random_brightness"


class RandomCrop(KerasRandomCrop, RandomAugmentation):
    __doc__ = KerasRandomCrop.__doc__
    op = "random_crop"


class RandomResize(KerasRandomResize, RandomAugmentation):
    __doc__ = KerasRandomResize.__doc__
    op = "random_resize"


class RandomFlip(KerasRandomFlip, RandomAugmentation):
    __doc__ = KerasRandomFlip.__doc__
    op = "random_flip"


class Augmentation(RandomAugmentation):
    """An augmentation layer of a folder saved before attnzoo converted its transformation (its config has
    only ``keras_class``): the identity at inference, and in training an error unless
    ``model.augmentation(False)``."""

    op = "augmentation"

    def __init__(self, *, keras_class: str) -> None:
        super().__init__()
        self.keras_class = keras_class

    def transform(self, images):
        raise ValueError(
            f"{self.keras_class} augments its input in training, and this folder was saved without its "
            f"settings; convert the Keras file again to train with it, or call model.augmentation(False) to "
            f"train without it (data augmented before the model)"
        )


@writes(RandomContrast, RandomBrightness, RandomCrop, RandomResize, RandomFlip)  # the geometric ones: affine.py
def write_augmentation(w: Writer, spec: dict[str, Any]) -> bool:
    """A random augmentation as the torch module its node computes through (the node class's first base,
    ``KerasRandomFlip`` for ``RandomFlip``), declared with the node's arguments and called on the images;
    no mask comes out, as the node's."""
    x = w.tensor()
    if x is None:
        return False
    form = NODES[spec["op"]].__bases__[0]  # KerasRandomFlip for RandomFlip
    layer = w.declare(w.construct("attnzoo.keras.torch_layers", form, spec))
    w.assign(f"{layer}({x})")
    return True


# -- converters -------------------------------------------------------------------------------------------


def factor_range(value: Any, what: str, bounds: tuple[float, float]) -> list[float]:
    """Keras's ``factor``: a number f within ``bounds`` is ``(max(-|f|, bounds[0]), |f|)``; a pair is sorted
    as it is (keras 3's RandomContrast: ``0.2`` is ``(0, 0.2)``, ``(-0.2, 0.2)`` stays)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not bounds[0] <= float(value) <= bounds[1]:
            raise Refused(f"{what} {value!r} is outside [{bounds[0]}, {bounds[1]}]")
        lower, upper = max(-abs(float(value)), bounds[0]), abs(float(value))
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        lower, upper = sorted(float(v) for v in value)
    else:
        raise Refused(f"{what} {value!r} is not a number or a pair of numbers")
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise Refused(f"{what} {value!r} is not finite")
    return [lower, upper]


def _value_range(record) -> list[float]:
    value = record.config.get("value_range", (0, 255))
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
        raise Refused(f"value_range {value!r} is not a pair of numbers")
    return sorted(float(v) for v in value)


@keras_layer("RandomContrast")
def convert_random_contrast(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomContrast")
    if ctx.major < 3:  # tf.keras 2: f ~ U(1 - lower, 1 + upper) once per batch, clipped to [0, 255]
        factor = _keras2_contrast(record.config.get("factor"))
        spec = {"op": "random_contrast", "factor": factor, "value_range": [0.0, 255.0], "one_factor": True}
        notes = [AUGMENT_NOTE.format("contrast") + ", one factor for the batch, clipped to [0, 255] (Keras 2's)"]
    else:
        factor = factor_range(record.config.get("factor"), "factor", (0.0, 1.0))
        spec = {"op": "random_contrast", "factor": factor, "value_range": _value_range(record)}
        notes = [AUGMENT_NOTE.format("contrast")]
    spec["channels_first"] = channels_first(record.config)
    return Converted(spec, {}, notes)


def _keras2_contrast(value: Any) -> list[float]:
    """tf.keras 2's RandomContrast ``factor``: a number f is ``lower = upper = f``; a pair is ``(lower,
    upper)``, neither negative, ``lower`` at most 1."""
    pair = [value, value] if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
        raise Refused(f"factor {value!r} is not a number or a pair of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pair):
        raise Refused(f"factor {value!r} is not a number or a pair of finite numbers")
    lower, upper = float(pair[0]), float(pair[1])
    if lower < 0.0 or upper < 0.0 or lower > 1.0:
        raise Refused(f"factor {value!r}: tf.keras 2 takes no negative values and a lower bound of at most 1")
    return [lower, upper]


@keras_layer("RandomBrightness")
def convert_random_brightness(record, arrays, ctx):
    """tf.keras 2's RandomBrightness (2.9 on) draws and clips as keras 3's: δ per image, ``value_range``."""
    expect_variables(arrays, 0, "RandomBrightness")
    factor = factor_range(record.config.get("factor"), "factor", (-1.0, 1.0))
    spec = {"op": "random_brightness", "factor": factor, "value_range": _value_range(record)}
    spec["channels_first"] = channels_first(record.config)
    return Converted(spec, {}, [AUGMENT_NOTE.format("brightness")])


@keras_layer("RandomCrop")
def convert_random_crop(record, arrays, ctx):
    expect_variables(arrays, 0, "RandomCrop")
    c = record.config
    height, width = c.get("height"), c.get("width")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (height, width)):
        raise Refused(f"height {height!r} and width {width!r} are not positive ints")
    spec = {"op": "random_crop", "height": height, "width": width, "channels_first": channels_first(c)}
    spec["keras2"] = ctx.major < 3
    note = "a centred crop" if ctx.major < 3 else "the identity, as keras 3's call is"
    return Converted(spec, {}, [f"at inference {note}; a random crop in training (model.train())"])


@keras_layer("RandomHeight", "RandomWidth")
def convert_random_resize(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    c = record.config
    axis = "height" if record.class_name == "RandomHeight" else "width"
    interpolation = c.get("interpolation", "bilinear")
    if interpolation not in ("bilinear", "nearest"):
        raise Refused(f"interpolation {interpolation!r} is not converted (bilinear and nearest are)")
    factor = factor_range(c.get("factor"), "factor", (-1.0, math.inf))
    spec = {"op": "random_resize", "axis": axis, "factor": factor, "interpolation": interpolation}
    spec["channels_first"] = channels_first(c)
    return Converted(spec, {}, [AUGMENT_NOTE.format(f"{axis} resize")])


@keras_layer("RandomFlip")
def convert_random_flip(record, arrays, ctx):
    expect_variables(arrays, 0, record.class_name)
    mode = str(record.config.get("mode", "horizontal_and_vertical"))
    if mode not in FLIPS:
        raise Refused(f"mode {mode!r} is not one of {', '.join(FLIPS)}")
    spec = {"op": "random_flip", "mode": mode, "coin_per_axis": ctx.major < 3}
    spec["channels_first"] = channels_first(record.config)
    notes = ["the identity at inference; in training each image flipped with probability 1/2, as Keras does"]
    return Converted(spec, {}, notes)
