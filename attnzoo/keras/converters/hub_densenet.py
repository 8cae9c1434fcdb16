"""keras-hub's DenseNet family: ``DenseNetBackbone`` (keras-hub 0.32's ``densenet_backbone.py``) and
``DenseNetImageClassifier`` over it, rebuilt from their arguments as graphs of plain Keras layers (every
batch norm ε 1.001e-5, Keras's momentum 0.99), which convert through attnzoo's own converters.

* stem: ``conv1_conv`` (64 filters, 7x7, stride 2, same) -> ``conv1_bn`` -> ``conv1_relu`` -> ``pool1``
  (3x3 max, stride 2, same);
* each stack ``stack<s>``: ``num_repeats`` conv blocks ``stack<s>_block<i>`` (bn, relu, 1x1 to
  4 x ``growth_rate``, bn, relu, 3x3 to ``growth_rate``, then ``_concat`` with the block's input on the
  channels), and between stacks ``transition<s>`` (bn, relu, 1x1 to ``int(channels x compression_ratio)``,
  2x2 average pool of stride 2);
* ``bn``, ``relu`` after the last stack.

keras-hub builds the graph in the loading machine's ``keras.config.image_data_format()``, which no config
records: attnzoo reads it channels last, Keras's default. No Hugging Face form.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import number, positive, tensor
from attnzoo.keras.hub_vision import ImageGraph, config_keys, image_classifier_graph, int_list

__all__ = ["densenet_graph"]

_EPS = 1.001e-5
_KEYS = ("stackwise_num_repeats", "image_shape", "compression_ratio", "growth_rate")


def _norm_relu(g: ImageGraph, x: str, name: str) -> str:
    return g.activation(g.batch_norm(x, f"{name}_bn", _EPS), f"{name}_relu")


def densenet_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``DenseNetBackbone``: images [B, H, W, C] -> the stem -> dense stacks and transitions -> ``bn``,
    ``relu`` -> [B, H / 32, W / 32, channels]."""
    config_keys(config, _KEYS, where)
    g = ImageGraph(config.get("dtype"), "channels_last", where)
    repeats = int_list(config, "stackwise_num_repeats", where)
    growth = positive(config, "growth_rate", where, 32)
    ratio = number(config, "compression_ratio", where, 0.5)
    if not 0 < ratio <= 1:
        raise WeightsError(f"{where}: compression_ratio {ratio!r}; a fraction in (0, 1]")
    x = g.images(config.get("image_shape", [None, None, 3]), where)
    images, channels = x, 64
    x = g.activation(g.batch_norm(g.conv(x, "conv1_conv", 64, 7, 2, "same"), "conv1_bn", _EPS), "conv1_relu")
    x = g.pool(x, "pool1", "max", 3, 2, "same")
    for s, count in enumerate(repeats, start=1):
        for i in range(1, count + 1):
            name = f"stack{s}_block{i}"
            y = g.conv(_norm_relu(g, x, f"{name}_1"), f"{name}_1_conv", 4 * growth, 1)
            y = g.conv(_norm_relu(g, y, f"{name}_2"), f"{name}_2_conv", growth, 3, 1, "same")
            x = g.layer("Concatenate", f"{name}_concat", {"axis": -1}, [[tensor(x), tensor(y)]])
            channels += growth
        if s < len(repeats):
            channels = int(channels * ratio)
            x = g.conv(_norm_relu(g, x, f"transition{s}"), f"transition{s}_conv", channels, 1)
            x = g.pool(x, f"transition{s}_pool", "average", 2, 2)
    x = g.activation(g.batch_norm(x, "bn", _EPS), "relu")
    return g.functional(str(config.get("name", "dense_net_backbone")), {"images": images}, x)


keras_hub_model(
    "DenseNetBackbone",
    family="densenet",
    tasks={"DenseNetImageClassifier": image_classifier_graph(("DenseNetBackbone",), densenet_graph)},
)(densenet_graph)
