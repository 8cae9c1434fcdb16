"""The named models of tests/keras_oracle.py for the layers keras-io's models use beyond the first table:
transposed, separable, depthwise and 3-D convolutions, resampling, padding, cropping, the preprocessing
and augmentation layers, TimeDistributed over RNNs, nested models as outputs, and the models that test
what a user meets when something does not convert. Imported by the oracle (``NAMED.update(ROWS)``).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402

ROWS = {}


def row(fn):
    ROWS[fn.__name__] = fn
    return fn


@keras.saving.register_keras_serializable(package="keras_io")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """keras-io's own class of this name (text_classification_with_transformer), not keras-hub's."""

    def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.maxlen, self.vocab_size, self.embed_dim = maxlen, vocab_size, embed_dim
        self.token_emb = layers.Embedding(vocab_size, embed_dim)
        self.pos_emb = layers.Embedding(maxlen, embed_dim)

    def call(self, x):
        positions = ops.arange(0, ops.shape(x)[-1], 1)
        return self.token_emb(x) + self.pos_emb(positions)

    def get_config(self):
        return {
            **super().get_config(),
            "maxlen": self.maxlen,
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
        }


@row
def keras_io_token_and_position():
    inp = keras.Input((None,), dtype="int32", name="ids")
    return keras.Model(inp, layers.Dense(2)(TokenAndPositionEmbedding(12, 20, 4)(inp)))


@row
def images():
    """keras-io's vision rows: Rescaling of uint8 images, the transposed convolutions of an autoencoder
    (same, valid, output_padding), separable and depthwise convolutions, resampling, padding, cropping,
    CenterCrop (a crop, and a resize where the image is smaller), an adapted Normalization."""
    inp = keras.Input((9, 8, 3), dtype="uint8", name="image")
    x = layers.Rescaling(1.0 / 127.5, offset=-1.0)(inp)
    norm = layers.Normalization(axis=-1)
    norm.adapt(np.random.default_rng(5).standard_normal((20, 9, 8, 3)) * 2 + 1)
    x = norm(x)
    up = layers.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(x)
    valid = layers.Conv2DTranspose(2, (4, 3), strides=(2, 3), padding="valid", output_padding=(1, 2))(x)
    sep = layers.SeparableConv2D(5, 3, padding="same", depth_multiplier=2, activation="relu")(up)
    depth = layers.DepthwiseConv2D((3, 2), depth_multiplier=2, strides=2, use_bias=False)(sep)
    bilinear = layers.UpSampling2D((2, 3), interpolation="bilinear")(depth)
    nearest = layers.UpSampling2D(2)(depth)
    padded = layers.ZeroPadding2D(((1, 2), (0, 3)))(nearest)
    cropped = layers.Cropping2D(((1, 0), (2, 1)))(padded)
    centre = layers.CenterCrop(5, 6)(cropped)
    grown = layers.CenterCrop(30, 24)(depth)
    pooled = layers.GlobalAveragePooling2D()(layers.Conv2D(3, 2)(centre))
    return keras.Model(inp, [valid, bilinear, centre, grown, layers.Dense(2, activation="softmax")(pooled)])


@row
def augmented():
    """keras-io's vision models put their augmentation and resizing inside the model: Resizing (bilinear,
    nearest, with crop_to_aspect_ratio) of uint8 images, the random layers (the identity at inference)."""
    inp = keras.Input((11, 13, 3), dtype="uint8", name="image")
    x = layers.Resizing(16, 12)(inp)  # uint8 in, uint8 out (rounded), as Keras does
    x = layers.RandomFlip("horizontal")(x)
    x = layers.RandomRotation(0.1)(x)
    x = layers.RandomZoom(0.2)(x)
    x = layers.RandomTranslation(0.1, 0.1)(x)
    x = layers.RandomContrast(0.2)(x)
    x = layers.Rescaling(1.0 / 255)(x)
    small = layers.Resizing(7, 5, interpolation="nearest")(x)
    cropped = layers.Resizing(6, 9, crop_to_aspect_ratio=True)(x)
    return keras.Model(inp, [x, small, cropped, layers.Dense(2)(layers.GlobalAveragePooling2D()(cropped))])


@row
def volumes():
    """The 3-D rows: Conv3D, Conv3DTranspose, Max/AveragePooling3D, UpSampling3D, ZeroPadding3D,
    Cropping3D, GlobalAverage/MaxPooling3D."""
    inp = keras.Input((6, 5, 6, 2), name="volume")
    x = layers.Conv3D(3, (2, 3, 2), padding="same", activation="relu")(inp)
    x = layers.MaxPooling3D(2, padding="same")(x)
    x = layers.Conv3DTranspose(4, 2, strides=(2, 1, 2))(x)
    x = layers.AveragePooling3D((2, 1, 2))(x)
    x = layers.UpSampling3D((1, 2, 1))(x)
    x = layers.Cropping3D(((1, 0), (0, 1), (1, 1)))(layers.ZeroPadding3D((1, 0, 2))(x))
    return keras.Model(inp, [x, layers.GlobalAveragePooling3D()(x), layers.GlobalMaxPooling3D()(x)])


@row
def sequences():
    """The 1-D rows over an open length: an adapted Normalization, Conv1DTranspose with strides,
    SeparableConv1D, DepthwiseConv1D, UpSampling1D, ZeroPadding1D, Cropping1D, a strided Conv1D."""
    inp = keras.Input((None, 3), name="features")
    norm = layers.Normalization()
    norm.adapt(np.random.default_rng(6).standard_normal((30, 5, 3)) * 3 - 1)
    x = norm(inp)
    x = layers.Conv1DTranspose(4, 3, strides=2, padding="same")(x)
    x = layers.SeparableConv1D(5, 3, padding="same", activation="tanh")(x)
    x = layers.DepthwiseConv1D(2, depth_multiplier=2)(x)
    x = layers.UpSampling1D(3)(x)
    x = layers.Cropping1D((2, 1))(layers.ZeroPadding1D((1, 3))(x))
    y = layers.Conv1D(3, 3, strides=2, padding="same")(x)
    inverse = layers.Normalization(axis=None, mean=2.0, variance=4.0, invert=True)(y)
    return keras.Model(inp, [y, inverse, layers.GlobalMaxPooling1D()(y)])


@row
def time_distributed_rnn():
    """keras-io's hierarchical text shape: sentences of words, an RNN over each sentence's words
    (TimeDistributed over an LSTM, over a Bidirectional GRU), each sentence's padding masked."""
    inp = keras.Input((None, 4), dtype="int32", name="ids")  # [batch, sentences, words]
    e = layers.Embedding(20, 5, mask_zero=True)(inp)
    words = layers.TimeDistributed(layers.LSTM(3))(e)
    both = layers.TimeDistributed(layers.Bidirectional(layers.GRU(2, return_sequences=True)))(e)
    dense = layers.TimeDistributed(layers.Dense(2, activation="relu"))(words)
    return keras.Model(inp, [words, both, dense])


@row
def nested_outputs():
    """Outputs straight from nested models (keras-io's lstm_seq2seq sampling models composed): a
    functional model's output, a Sequential's, and an encoder's states."""
    i = keras.Input((4,))
    inner = keras.Model(i, layers.Dense(3)(i), name="inner")
    stack = keras.Sequential([layers.Dense(2, activation="tanh")], name="stack")
    seq = keras.Input((None, 3))
    _, h, c = layers.LSTM(4, return_state=True)(seq)
    encoder = keras.Model(seq, [h, c], name="encoder")
    x = keras.Input((4,), name="vector")
    steps = keras.Input((None, 3), name="steps")
    return keras.Model([x, steps], [inner(x), stack(x), *encoder(steps)])


@row
def unsupported_builtin():
    inp = keras.Input((6, 4), name="features")
    return keras.Model(inp, layers.GroupNormalization(groups=2)(layers.Dense(4)(inp)))


@row
def strided_text_classifier():
    """keras-io's text classifier from scratch: two strided valid convolutions (too short for length 8)."""
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(30, 8)(inp)
    x = layers.Conv1D(6, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(6, 7, padding="valid", activation="relu", strides=3)(x)
    return keras.Model(inp, layers.Dense(1, activation="sigmoid")(layers.GlobalMaxPooling1D()(x)))
