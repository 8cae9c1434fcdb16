"""Keras weight import: keras 3 ``.weights.h5`` and legacy Keras 2 ``.h5`` files into attnzoo layers.

    from attnzoo.keras import load_keras_weights
    layer = attnzoo.create("keras_mha", num_heads=4, key_dim=16)
    load_keras_weights(layer, "model.weights.h5", layer="multi_head_attention")

Needs ``h5py`` (the ``keras`` extra); Keras itself is not needed to import weights.
"""

from .importer import keras_layers_in, load_keras_weights

__all__ = ["load_keras_weights", "keras_layers_in"]
