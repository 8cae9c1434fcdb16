"""The named models of tests/keras_oracle.py for Keras files as people have them (issue 50): activations
with an axis (softmax, log_softmax) on every layer family that takes an ``activation``, keras-io's
segmentation U-Net, the video classifier's boolean mask input, dict inputs and outputs, and the layers
``keras.applications`` ship (LayerScale, StochasticDepth, axial MultiHeadAttention). Imported by the
oracle (``NAMED.update(ROWS)``).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
from keras import layers  # noqa: E402

ROWS = {}


def row(fn):
    ROWS[fn.__name__] = fn
    return fn


# -- activations over Keras's last axis, family by family ---------------------------------------------------
@row
def softmax_conv():
    """Conv1D/2D/3D with a softmax (and a log_softmax), channels last and channels first."""
    seq = keras.Input((7, 3), name="sequence")
    image = keras.Input((6, 5, 3), name="image")
    volume = keras.Input((4, 3, 4, 2), name="volume")
    return keras.Model(
        [seq, image, volume],
        [
            layers.Conv1D(4, 3, padding="causal", activation="softmax")(seq),
            layers.Conv2D(5, 3, padding="same", activation="softmax")(image),
            layers.Conv2D(3, 2, strides=2, activation="log_softmax")(image),
            layers.Conv2D(4, 2, data_format="channels_first", activation="softmax")(layers.Permute((3, 1, 2))(image)),
            layers.Conv3D(3, 2, padding="same", activation="softmax")(volume),
        ],
    )


@row
def softmax_separable_depthwise():
    seq = keras.Input((7, 3), name="sequence")
    image = keras.Input((6, 5, 3), name="image")
    return keras.Model(
        [seq, image],
        [
            layers.SeparableConv1D(4, 3, padding="same", activation="softmax")(seq),
            layers.DepthwiseConv1D(3, depth_multiplier=2, activation="softmax")(seq),
            layers.SeparableConv2D(5, 3, padding="same", depth_multiplier=2, activation="softmax")(image),
            layers.DepthwiseConv2D(2, depth_multiplier=2, activation="log_softmax")(image),
        ],
    )


@row
def softmax_transpose():
    seq = keras.Input((7, 3), name="sequence")
    image = keras.Input((6, 5, 3), name="image")
    volume = keras.Input((4, 3, 4, 2), name="volume")
    return keras.Model(
        [seq, image, volume],
        [
            layers.Conv1DTranspose(4, 3, strides=2, padding="same", activation="softmax")(seq),
            layers.Conv2DTranspose(5, 3, strides=2, padding="same", activation="softmax")(image),
            layers.Conv3DTranspose(3, 2, strides=(2, 1, 2), activation="log_softmax")(volume),
        ],
    )


@row
def softmax_dense():
    """Dense on 2-D, 3-D and 4-D inputs (Keras's last axis is the units)."""
    vec = keras.Input((3,), name="vector")
    seq = keras.Input((None, 3), name="sequence")
    image = keras.Input((6, 5, 3), name="image")
    return keras.Model(
        [vec, seq, image],
        [
            layers.Dense(4, activation="softmax")(vec),
            layers.Dense(4, activation="softmax")(seq),
            layers.Dense(5, activation="log_softmax")(image),
        ],
    )


@row
def softmax_recurrent():
    """SimpleRNN, GRU and LSTM whose activation (and recurrent_activation) is a softmax."""
    seq = keras.Input((None, 3), name="sequence")
    x = layers.Masking(0.0)(seq)
    return keras.Model(
        seq,
        [
            layers.SimpleRNN(4, activation="softmax", return_sequences=True)(x),
            layers.GRU(3, activation="softmax", return_sequences=True)(x),
            layers.LSTM(3, activation="softmax", recurrent_activation="softmax", return_sequences=True)(x),
            layers.GRU(3, activation="softmax", reset_after=False)(x),
        ],
    )


@row
def unet_softmax():
    """keras-io's oxford_pets segmentation shape, small: a U-Net ending in a per-pixel softmax."""
    inp = keras.Input((16, 16, 3), name="image")
    x = layers.Conv2D(8, 3, strides=2, padding="same")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    skip = x
    x = layers.SeparableConv2D(16, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    residual = layers.Conv2D(16, 1, strides=2, padding="same")(skip)
    x = layers.add([x, residual])
    x = layers.Conv2DTranspose(8, 3, padding="same", activation="relu")(x)
    x = layers.UpSampling2D(2)(x)
    x = layers.Concatenate()([x, skip])
    x = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(x)
    return keras.Model(inp, layers.Conv2D(4, 3, activation="softmax", padding="same")(x))


# -- masks from inputs -------------------------------------------------------------------------------------
@row
def video_classifier():
    """keras-io's video classifier: per-frame features and a boolean frame mask, GRU(frames, mask=mask)."""
    frames = keras.Input((6, 5), name="frames")
    mask = keras.Input((6,), dtype="bool", name="frame_mask")
    x = layers.GRU(4, return_sequences=True)(frames, mask=mask)
    x = layers.GRU(3)(x)
    x = layers.Dropout(0.4)(x)
    x = layers.Dense(4, activation="relu")(x)
    return keras.Model([frames, mask], layers.Dense(3, activation="softmax")(x))


@row
def explicit_masks():
    """An explicit mask from a boolean input for every recurrent family and for attention layers."""
    seq = keras.Input((None, 3), name="sequence")
    mask = keras.Input((None,), dtype="bool", name="mask")
    lstm = layers.LSTM(3, return_sequences=True)(seq, mask=mask)
    simple = layers.SimpleRNN(3)(seq, mask=mask)
    both = layers.Bidirectional(layers.GRU(2, return_sequences=True))(seq, mask=mask)
    attention = layers.Attention()([lstm, lstm], mask=[mask, mask])
    additive = layers.AdditiveAttention()([both, both], mask=[mask, mask])
    pair = keras.ops.logical_and(keras.ops.expand_dims(mask, 1), keras.ops.expand_dims(mask, 2))
    mha = layers.MultiHeadAttention(2, 3)(lstm, lstm, attention_mask=pair)
    return keras.Model([seq, mask], [simple, attention, additive, mha])


# -- dict and nested inputs and outputs ------------------------------------------------------------------
@row
def dict_inputs():
    """keras-io's structured-data shape: one named Input per column, a dict of them, a dict of outputs."""
    columns = {
        "age": keras.Input((1,), name="age"),
        "thal": keras.Input((1,), dtype="int32", name="thal"),
        "chol": keras.Input((1,), name="chol"),
    }
    numeric = layers.Concatenate()([columns["age"], columns["chol"]])
    thal = layers.Flatten()(layers.Embedding(5, 2)(columns["thal"]))
    x = layers.Dense(4, activation="relu")(layers.Concatenate()([numeric, thal]))
    return keras.Model(
        inputs=columns, outputs={"risk": layers.Dense(1, activation="sigmoid")(x), "score": layers.Dense(2)(x)}
    )


@row
def nested_lists():
    """Inputs and outputs as nested lists: [a, [b, c]] in, [[y], z] out."""
    a, b, c = keras.Input((3,), name="a"), keras.Input((2,), name="b"), keras.Input((None, 2), name="c")
    joined = layers.Concatenate()([a, b, layers.GlobalAveragePooling1D()(c)])
    return keras.Model([a, [b, c]], [[layers.Dense(2)(joined)], layers.Dense(1)(joined)])


@row
def nested_dict_model():
    """A model of a dict of inputs called inside another model, on a dict."""
    x, y = keras.Input((3,), name="x"), keras.Input((2,), name="y")
    inner = keras.Model({"y": y, "x": x}, layers.Dense(2)(layers.Concatenate()([x, y])), name="inner")
    p, q = keras.Input((3,), name="p"), keras.Input((2,), name="q")
    return keras.Model([p, q], layers.Dense(1)(inner({"x": p, "y": q})))


# -- keras.applications' own layers, axial attention -------------------------------------------------------
@row
def applications_layers():
    """ConvNeXt's LayerScale and StochasticDepth, InceptionResNetV2's CustomScaleLayer, and axial
    MultiHeadAttention over [B, H, W, C]: along W with an attention mask, over H and W together, and
    Keras's default axes."""
    from keras.src.applications.convnext import LayerScale, StochasticDepth
    from keras.src.applications.inception_resnet_v2 import CustomScaleLayer

    image = keras.Input((4, 5, 6), name="image")
    rows = keras.Input((4, 5, 5), dtype="bool", name="row_mask")  # [B, H, W query, W key]
    x = layers.Conv2D(6, 3, padding="same")(image)
    scaled = LayerScale(0.5, 6)(x)
    branch = StochasticDepth(0.3)(scaled)
    summed = CustomScaleLayer(0.2)([image, branch])
    along_w = layers.MultiHeadAttention(2, 3, attention_axes=(2,))(summed, summed, attention_mask=rows)
    both = layers.MultiHeadAttention(2, 3, attention_axes=(1, 2))(summed, image)
    default = layers.MultiHeadAttention(1, 4, value_dim=2, output_shape=3)(image, summed)
    along_h, scores = layers.MultiHeadAttention(2, 2, attention_axes=-3)(image, image, return_attention_scores=True)
    return keras.Model([image, rows], [along_w, both, default, along_h, scores])


# the smallest of each keras.applications family, random weights (no download), at its smallest input
APPLICATIONS = {
    "ConvNeXtTiny": 32,
    "DenseNet121": 32,
    "EfficientNetB0": 32,
    "EfficientNetV2B0": 32,
    "InceptionResNetV2": 75,
    "InceptionV3": 75,
    "MobileNet": 32,
    "MobileNetV2": 32,
    "MobileNetV3Small": 32,
    "ResNet50": 32,
    "ResNet50V2": 32,
    "VGG16": 32,
    "Xception": 71,
}


def _application(name, size):
    def build():
        # logits out: a final softmax of near-uniform probabilities would hide differences
        shape = (size, size, 3)
        return getattr(keras.applications, name)(weights=None, input_shape=shape, classes=5, classifier_activation=None)

    return build


for _name, _size in APPLICATIONS.items():
    ROWS[f"application_{_name}"] = _application(_name, _size)


@row
def application_small():
    """The fast tier's application: MobileNet at width 0.25, 32 x 32 (about 0.2M weights)."""
    return keras.applications.MobileNet(
        weights=None, input_shape=(32, 32, 3), alpha=0.25, classes=5, classifier_activation=None
    )
