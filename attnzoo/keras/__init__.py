"""Keras models and layers into attnzoo, with no Keras at run time (json and h5py read the files).

Whole models (``.keras``, legacy ``.h5``, or ``config.json`` + weights) become native modules::

    from attnzoo.keras import convert_keras_model
    model = convert_keras_model("model.keras")      # a keras_model: attnzoo.save / load rebuild it
    y = model(ids)                                  # inputs in the Keras model's order

One attention layer's weights go into the matching attnzoo layer::

    from attnzoo.keras import load_keras_weights
    layer = attnzoo.create("keras_mha", num_heads=4, key_dim=16)
    load_keras_weights(layer, "model.weights.h5", layer="multi_head_attention")

A keras-hub model (a Backbone, a causal LM, a classifier) becomes a folder transformers' Auto classes load::

    from attnzoo.keras import to_transformers
    to_transformers("gpt2_causal_lm.keras", "gpt2-hf")   # config.json, generation_config.json, safetensors

A keras-hub preset folder's tokenizer goes with its model (``tokenizers``, the ``tokenizers`` extra)::

    model = convert_keras_model("gpt2_preset")         # save_to_preset of the task with its preprocessor
    model(model.tokenize(["Hello"]))                   # keras-hub's token_ids and padding_mask
    tokenizer = keras_hub_tokenizer("gpt2_preset")     # the tokenizer alone

and an image model's image converter (preprocessor.json's ``image_converter``)::

    model = convert_keras_model("resnet_preset")       # an ImageClassifier saved with its preprocessor
    model(model.preprocess(raw_images))                # resized, x * scale + offset, as keras-hub does

Needs ``h5py`` (the ``keras`` extra); Keras itself is never imported, nor transformers to write a folder.
"""

from attnzoo.keras.convert import ConversionReport, UnsupportedKerasLayerError, convert_keras_model
from attnzoo.keras.hub_image_converter import keras_hub_image_converter
from attnzoo.keras.hub_tokenizers.preset import keras_hub_tokenizer
from attnzoo.keras.importer import keras_layers_in, load_keras_arrays, load_keras_weights
from attnzoo.keras.transformers_folder import to_transformers

__all__ = [
    "convert_keras_model",
    "to_transformers",
    "keras_hub_tokenizer",
    "keras_hub_image_converter",
    "load_keras_weights",
    "load_keras_arrays",
    "keras_layers_in",
    "ConversionReport",
    "UnsupportedKerasLayerError",
]
