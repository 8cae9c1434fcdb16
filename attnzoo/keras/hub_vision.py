"""The pieces keras-hub's image families' builders share (:mod:`attnzoo.keras.hub_families` says why a
builder exists): most of keras-hub's convolutional backbones (ResNet, ...) are functional graphs of plain
Keras layers, so their builders write those layers' records as Keras writes them, and the layers convert
through attnzoo's own converters of ``Conv2D``, ``BatchNormalization``, ``MaxPooling2D``, ...

:class:`ImageGraph` is a :class:`~attnzoo.keras.hub_graph.HubGraph` that knows the model's
``data_format`` and writes those layers; :func:`image_classifier_graph` is the builder of keras-hub's
``ImageClassifier`` tasks (the backbone, a global pooler, dropout, a dense head); :func:`config_keys`
refuses a constructor argument a builder does not compute, by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.hub_graph import Builder, HubGraph, backbone_record, number, positive, tensor

__all__ = ["ImageGraph", "image_classifier_graph", "pooled_head", "ImageHead", "config_keys", "int_list", "COMMON_KEYS"]

# what every keras-hub model's get_config writes besides its own arguments
COMMON_KEYS = frozenset(["name", "trainable", "dtype"])


def config_keys(config: dict[str, Any], known: Iterable[str], where: str) -> None:
    """Refuse a constructor argument the builder does not read (a newer keras-hub's, a hand edit): a model
    rebuilt without it would compute something else silently."""
    unknown = sorted(set(config) - set(known) - COMMON_KEYS)
    if unknown:
        raise WeightsError(
            f"{where}: its config has {', '.join(map(repr, unknown[:8]))}, which attnzoo does not compute "
            f"(it reads {', '.join(sorted(known))}); save the model with keras-hub 0.32's arguments"
        )


def int_list(config: dict[str, Any], key: str, where: str, length: int | None = None) -> list[int]:
    """``config[key]``, a non-empty list of positive ints (of ``length`` items where given)."""
    value = config.get(key)
    ok = isinstance(value, (list, tuple)) and len(value) > 0
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    if not ok or (length is not None and len(value) != length):
        size = f"{length} " if length is not None else ""
        raise WeightsError(f"{where}: its config's {key} is {value!r}; a list of {size}positive ints")
    return list(value)


class ImageGraph(HubGraph):
    """A :class:`HubGraph` of an image model in ``data_format`` (``channels_last``, Keras's default, or
    ``channels_first``), writing plain Keras layers' records as Keras writes them."""

    def __init__(self, dtype: Any, data_format: Any, where: str) -> None:
        super().__init__(dtype)
        if data_format is None:
            data_format = "channels_last"  # keras.config.image_data_format()'s default, as keras-hub reads it
        if data_format not in ("channels_last", "channels_first"):
            raise WeightsError(f"{where}: data_format {data_format!r}; channels_last or channels_first")
        self.data_format = data_format
        self.channel_axis = -1 if data_format == "channels_last" else 1
        self._unnamed: dict[str, int] = {}

    def images(self, shape: Any, where: str, name: str = "images") -> str:
        """The image input of ``shape`` (H, W, C or C, H, W; H and W may be None: any size)."""
        ok = isinstance(shape, (list, tuple)) and len(shape) == 3
        ok = ok and all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in shape)
        channels = shape[-1 if self.data_format == "channels_last" else 0] if ok else None
        if not ok or channels is None:
            raise WeightsError(f"{where}: image_shape {shape!r} is not 3 sizes with a known channel count")
        return self.input(name, list(shape), "float32")

    def auto_name(self, base: str) -> str:
        """A name as Keras gives an unnamed layer (``average_pooling2d``, ``average_pooling2d_1``, ...); only
        layers without weights are left unnamed, so the name need only be unique."""
        count = self._unnamed.get(base, 0)
        self._unnamed[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def conv(
        self,
        x: str,
        name: str,
        filters: int,
        kernel: int | Sequence[int],
        strides: int = 1,
        padding: str = "valid",
        *,
        use_bias: bool = False,
        activation: Any = "linear",
        groups: int = 1,
    ) -> str:
        kernel = [kernel, kernel] if isinstance(kernel, int) else list(kernel)
        config = {"filters": filters, "kernel_size": kernel, "strides": [strides, strides], "padding": padding}
        config |= {"data_format": self.data_format, "dilation_rate": [1, 1], "groups": groups}
        config |= {"activation": activation, "use_bias": use_bias}
        return self.layer("Conv2D", name, config, [tensor(x)])

    def batch_norm(
        self, x: str, name: str, epsilon: float = 1e-3, momentum: float = 0.99, axis: int | None = None
    ) -> str:
        """``BatchNormalization`` over the channel axis (or ``axis``, as a layer that names it records it)."""
        config = {"axis": self.channel_axis if axis is None else axis, "momentum": momentum, "epsilon": epsilon}
        config |= {"center": True, "scale": True}
        return self.layer("BatchNormalization", name, config, [tensor(x)])

    def activation(self, x: str, name: str, function: Any = "relu") -> str:
        return self.layer("Activation", name, {"activation": function}, [tensor(x)])

    def zero_pad(self, x: str, name: str, padding: int | list[list[int]]) -> str:
        pads = [[padding, padding], [padding, padding]] if isinstance(padding, int) else padding
        return self.layer("ZeroPadding2D", name, {"padding": pads, "data_format": self.data_format}, [tensor(x)])

    def pool(self, x: str, name: str, kind: str, size: int, strides: int, padding: str = "valid") -> str:
        """``MaxPooling2D`` (``kind`` "max") or ``AveragePooling2D`` ("average")."""
        config = {"pool_size": [size, size], "padding": padding, "strides": [strides, strides]}
        config["data_format"] = self.data_format
        return self.layer(f"{kind.capitalize()}Pooling2D", name, config, [tensor(x)])

    def add(self, inputs: list[str], name: str) -> str:
        return self.layer("Add", name, {}, [[tensor(x) for x in inputs]])

    def pad(self, x: str, pixels: int, value: float) -> str:
        """``keras.ops.pad`` of ``pixels`` on each side of H and W with ``value`` (an operation, as Keras
        records ``ops.pad(x, pad_width, constant_values=value)``)."""
        spatial = [[pixels, pixels], [pixels, pixels]]
        width = [[0, 0], *spatial, [0, 0]] if self.data_format == "channels_last" else [[0, 0], [0, 0], *spatial]
        return self.layer(
            "Pad",
            self.auto_name("pad"),
            {"pad_width": width, "mode": "constant"},
            [tensor(x)],
            {"constant_values": value},
            registered="Pad",
            module="keras.src.ops.numpy",
        )


# what an image classifier computes after its backbone: head(graph, features, config, data_format, where)
ImageHead = Callable[[HubGraph, str, dict[str, Any], str, str], str]


def pooled_head(g: HubGraph, x: str, config: dict[str, Any], data_format: str, where: str) -> str:
    """keras-hub's ``ImageClassifier`` head: ``pooler`` (``GlobalAveragePooling2D`` for ``pooling`` "avg",
    ``GlobalMaxPooling2D`` for "max", in the backbone's data_format) -> ``output_dropout`` ->
    ``predictions`` (``Dense(num_classes, activation)``)."""
    pooling = config.get("pooling", "avg")
    if pooling not in ("avg", "max"):
        raise WeightsError(f"{where}: pooling {pooling!r}; keras-hub's ImageClassifier pools by 'avg' or 'max'")
    pooler = "GlobalAveragePooling2D" if pooling == "avg" else "GlobalMaxPooling2D"
    x = g.layer(pooler, "pooler", {"data_format": data_format, "keepdims": False}, [tensor(x)])
    x = g.layer("Dropout", "output_dropout", {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])
    settings = {"units": positive(config, "num_classes", where), "activation": config.get("activation") or "linear"}
    return g.layer("Dense", "predictions", settings, [tensor(x)])


def image_classifier_graph(
    backbones: Sequence[str],
    build_backbone: Builder,
    head: ImageHead = pooled_head,
    known: Sequence[str] = ("pooling", "activation", "dropout"),
) -> Builder:
    """The builder of keras-hub's ``<X>ImageClassifier`` over a backbone of one of the classes ``backbones``
    (built by ``build_backbone``): images -> the backbone (nested, under its own name) -> ``head``
    (:func:`pooled_head` by default). ``known``: the task's arguments besides ``backbone``,
    ``preprocessor`` and ``num_classes`` (any other is refused by name)."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        config_keys(config, ("backbone", "preprocessor", "num_classes", *known), where)
        inner, name, kind = backbone_record(config, where, backbones)
        built = build_backbone(inner, f"{where}: {kind}")
        shape = built["config"]["layers"][0]["config"]["batch_shape"][1:]  # the backbone's image input
        g = HubGraph(config.get("dtype"))
        images = g.input("images", shape, "float32")
        x = g.nested({**built, "name": name}, name, [tensor(images)])
        x = head(g, x, config, inner.get("data_format") or "channels_last", where)
        return g.functional(str(config.get("name") or "image_classifier"), {"images": images}, x)

    return build
