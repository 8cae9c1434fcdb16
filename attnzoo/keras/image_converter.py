"""The image converter a converted keras-hub image model carries (:class:`PortImageConverter`): raw images in,
the model's input out, as keras-hub's ``ImageConverter`` computes it.

keras-hub's ``ImageConverter`` (the ``image_converter`` of an image classifier's preprocessor) takes images
[B, H, W, C] (or one [H, W, C]) of any size and

1. resizes them to ``image_size`` (h, w) as ``keras.ops.image.resize`` does: with ``crop_to_aspect_ratio``,
   first the centred largest box of the target's aspect ratio, ``ch = min(H, int(W * h / w))``,
   ``cw = min(W, int(H * w / h))``, from row ``int((H - ch) / 2)`` and column ``int((W - cw) / 2)``; then
   ``torch.nn.functional.interpolate`` (keras's torch backend): ``bilinear`` and ``bicubic`` half-pixel
   (``align_corners=False``), ``nearest`` as ``nearest-exact``, ``antialias`` as configured. Images of an
   integer dtype are resized in float32 and rounded back to their dtype (bicubic uint8 clipped to 0..255),
   as keras does; ``image_size`` ``None`` keeps the size;
2. computes ``y = x * scale + offset`` in float32, ``scale`` and ``offset`` one number or one per channel
   (ImageNet's ``1 / (255 * std)`` and ``-mean / std``), either ``None`` for none.

A port carries it as ``image_converter.json`` (:class:`ImageConversion`), written by ``attnzoo.save`` beside
``config.yaml`` and read back by ``attnzoo.load``; ``model.preprocess(images)`` computes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.limits import load_json
from attnzoo.keras.tokenizer import CarriesTokenizer
from attnzoo.keras.torch_layers.preprocessing import aspect_window

__all__ = ["ImageConversion", "PortImageConverter", "CarriesImageConverter", "CarriesPreprocessing"]
__all__ += ["IMAGE_CONVERTER_FILE", "INTERPOLATIONS"]

IMAGE_CONVERTER_FILE = "image_converter.json"
# keras's interpolation -> torch's mode (keras's torch backend); lanczos keras's torch backend does not compute
INTERPOLATIONS = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest-exact"}
FORMAT = 1

Numbers = float | tuple[float, ...] | None


@dataclass(frozen=True)
class ImageConversion:
    """``image_converter.json``: keras-hub's converter class and the settings it computes (the module
    docstring): ``image_size`` (h, w) or ``None``, ``scale`` and ``offset`` (a number, one per channel, or
    ``None``), ``crop_to_aspect_ratio``, ``interpolation`` (:data:`INTERPOLATIONS`), ``antialias``."""

    converter_class: str
    image_size: tuple[int, int] | None = None
    scale: Numbers = None
    offset: Numbers = None
    crop_to_aspect_ratio: bool = True
    interpolation: str = "bilinear"
    antialias: bool = False

    def to_json(self) -> bytes:
        return (json.dumps({"format": FORMAT, **asdict(self)}, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ImageConversion:
        """The record in ``data``, every field checked (a ``WeightsError`` naming the field)."""
        value = load_json(data, where, "the image converter record")
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise WeightsError(f"{where}: not an attnzoo image converter record of format {FORMAT}")
        if not isinstance(value.get("converter_class"), str):
            raise WeightsError(f"{where}: converter_class is {value.get('converter_class')!r:.40}, not a class name")
        return cls.of(value["converter_class"], value, where)

    @classmethod
    def of(cls, name: str, config: Mapping[str, Any], where: str) -> ImageConversion:
        """The settings of a converter's config (keras-hub's ``get_config``, or the record's), checked: a
        malformed value is a ``WeightsError``, a setting attnzoo does not compute a ``ConfigError``, each
        naming it."""
        if config.get("pad_to_aspect_ratio", False) is not False:
            raise ConfigError(
                f"{where}: {name} pads to the aspect ratio (pad_to_aspect_ratio "
                f"{config.get('pad_to_aspect_ratio')!r:.20}); attnzoo computes resizing with and without cropping"
            )
        interpolation = config.get("interpolation", "bilinear")
        if interpolation not in INTERPOLATIONS:
            raise ConfigError(
                f"{where}: {name}'s interpolation is {interpolation!r:.40}; attnzoo computes "
                f"{', '.join(INTERPOLATIONS)}"
            )
        dtype = config.get("dtype")
        policy = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
        if policy not in (None, "float32"):
            raise ConfigError(f"{where}: {name} computes in {policy!r:.40}; attnzoo computes float32's converter")
        for key in ("crop_to_aspect_ratio", "antialias"):
            if not isinstance(config.get(key, key == "crop_to_aspect_ratio"), bool):
                raise WeightsError(f"{where}: {key} is {config.get(key)!r:.40}, not true or false")
        return cls(
            converter_class=name,
            image_size=_size(config.get("image_size"), where),
            scale=_numbers(config.get("scale"), "scale", where),
            offset=_numbers(config.get("offset"), "offset", where),
            crop_to_aspect_ratio=config.get("crop_to_aspect_ratio", True),
            interpolation=interpolation,
            antialias=config.get("antialias", False),
        )


def _size(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == 2
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 1 << 16 for v in value):
        raise WeightsError(f"{where}: image_size is {value!r:.60}, not [height, width] of whole numbers >= 1")
    return (value[0], value[1])


def _numbers(value: Any, key: str, where: str) -> Numbers:
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if value is None:
        return None
    if number(value):
        return float(value)
    if isinstance(value, (list, tuple)) and 0 < len(value) <= 64 and all(number(v) for v in value):
        return tuple(float(v) for v in value)
    raise WeightsError(f"{where}: {key} is {value!r:.60}, not a number or a list of numbers (one per channel)")


class PortImageConverter:
    """keras-hub's ``ImageConverter`` of a converted model (see the module docstring)."""

    def __init__(self, conversion: ImageConversion) -> None:
        self.conversion = conversion

    @classmethod
    def from_files(cls, files: Mapping[str, bytes], where: str = "the saved folder") -> PortImageConverter:
        return cls(ImageConversion.from_json(files[IMAGE_CONVERTER_FILE], f"{where}/{IMAGE_CONVERTER_FILE}"))

    def files(self) -> dict[str, bytes]:
        """What ``attnzoo.save`` writes of it: file name -> bytes."""
        return {IMAGE_CONVERTER_FILE: self.conversion.to_json()}

    def resize(self, x: Any, size: tuple[int, int]) -> Any:
        """Images [B, H, W, C] resized to ``size`` as ``keras.ops.image.resize`` (torch backend) does, in
        their dtype (an integer dtype's rounded back)."""
        import torch
        import torch.nn.functional as F

        c = self.conversion
        work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        y = x.permute(0, 3, 1, 2).to(work)
        y = aspect_window(y, *size) if c.crop_to_aspect_ratio else y
        smooth = c.interpolation in ("bilinear", "bicubic")
        mode = INTERPOLATIONS[c.interpolation]
        y = F.interpolate(
            y, size=size, mode=mode, align_corners=False if smooth else None, antialias=c.antialias and smooth
        )
        if not x.dtype.is_floating_point:  # keras rounds an integer image back to its dtype
            y = y.round().clamp(0, 255) if c.interpolation == "bicubic" and x.dtype == torch.uint8 else y.round()
        return y.permute(0, 2, 3, 1).to(x.dtype)

    def __call__(self, images: Any) -> Any:
        """``images`` (a tensor or array [B, H, W, C] or [H, W, C], any size, any real dtype) as keras-hub's
        converter gives them: float32 [B, h, w, C] (or [h, w, C])."""
        import torch

        x = images if isinstance(images, torch.Tensor) else torch.as_tensor(images)
        if x.ndim not in (3, 4) or x.dtype == torch.bool or x.is_complex():
            raise ConfigError(
                f"preprocess takes images [batch, height, width, channels] or [height, width, channels] of real "
                f"numbers, got {x.ndim} dimensions of {x.dtype}"
            )
        single = x.ndim == 3
        x = x[None] if single else x
        c = self.conversion
        for key, value in (("scale", c.scale), ("offset", c.offset)):
            if isinstance(value, tuple) and len(value) not in (1, x.shape[-1]):  # one item is for every channel
                raise ConfigError(
                    f"{c.converter_class}'s {key} has one value per channel for {len(value)} channels; the images "
                    f"have {x.shape[-1]} (channels last: [batch, height, width, channels])"
                )
        if c.image_size is not None:
            x = self.resize(x, c.image_size)
        x = x.to(torch.float32)
        if c.scale is not None:
            x = x * torch.tensor(c.scale, dtype=torch.float32, device=x.device)
        if c.offset is not None:
            x = x + torch.tensor(c.offset, dtype=torch.float32, device=x.device)
        return x[0] if single else x

    def __repr__(self) -> str:
        c = self.conversion
        return f"PortImageConverter({c.converter_class}, image_size={c.image_size}, {c.interpolation})"


class CarriesImageConverter:
    """What a converted model gets of its keras-hub image converter: ``image_converter`` (a
    :class:`PortImageConverter` or ``None``) and ``preprocess(images)``."""

    @property
    def image_converter(self) -> PortImageConverter | None:
        return self.__dict__.get("_port_image_converter")

    @image_converter.setter
    def image_converter(self, value: PortImageConverter | None) -> None:
        if value is not None and not isinstance(value, PortImageConverter):
            raise ConfigError(
                f"a converted model's image_converter is a PortImageConverter "
                f"(attnzoo.keras.keras_hub_image_converter(PRESET)) or None, got {type(value).__name__}"
            )
        self.__dict__["_port_image_converter"] = value

    def preprocess(self, images: Any) -> Any:
        """Raw ``images`` [B, H, W, C] (any size, pixels as keras-hub's ``classifier.predict`` takes them) as
        keras-hub's image converter gives them to the model: float32 [B, h, w, C] (the module docstring)."""
        if self.image_converter is None:
            raise ConfigError(
                f"this {type(self).__name__} carries no image converter: convert the keras-hub preset folder that "
                f"holds it (save_to_preset of the task with its preprocessor writes preprocessor.json), or attach "
                f"one: model.image_converter = attnzoo.keras.keras_hub_image_converter('PRESET_FOLDER')"
            )
        return self.image_converter(images)


class CarriesPreprocessing(CarriesTokenizer, CarriesImageConverter):
    """A converted model's tokenizer and image converter; ``attnzoo_files``: the files of both, which
    ``attnzoo.save`` writes beside the weights and ``attnzoo.load`` gives back."""

    @property  # type: ignore[override]
    def attnzoo_files(self) -> dict[str, bytes]:
        files = dict(CarriesTokenizer.attnzoo_files.fget(self))  # type: ignore[attr-defined]
        return files | (self.image_converter.files() if self.image_converter is not None else {})

    @attnzoo_files.setter
    def attnzoo_files(self, files: Mapping[str, bytes]) -> None:
        CarriesTokenizer.attnzoo_files.fset(self, files)  # type: ignore[attr-defined]
        has = IMAGE_CONVERTER_FILE in files
        self.image_converter = PortImageConverter.from_files(files) if has else None
