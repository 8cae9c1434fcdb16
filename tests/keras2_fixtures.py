"""Make the Keras 2 fixtures of tests/test_keras_models.py with tf_keras (run once; the files are committed).

    pip install tensorflow-cpu tf_keras h5py      # 1.9 GB: not a test dependency, never in CI
    python tests/keras2_fixtures.py tests/data/keras2 [CASE ...]    # CASE ...: only those, the rest kept

Each case is a small model saved with Keras 2's ``model.save("x.h5")``, weights moved off their initial
values, and ``expected.npz`` holds the inputs and Keras 2's outputs (``<case>/<batch>/in/<i>``,
``<case>/<batch>/out/<k>``). The cases are the ones whose semantics differ between Keras 2 and 3:
hard_sigmoid, GRU with reset_after=False, a masked Bidirectional (its config carries time_major),
MultiHeadAttention over fully masked rows, 'same' average pooling, nested and shared models, keras-io's
lstm_seq2seq (``initial_state`` recorded as extra tensors of one inbound node), the ``TFOpLambda`` /
``SlicingOpLambda`` layers tensor code writes, float ids into an Embedding, and CuDNNLSTM / CuDNNGRU.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402
from tf_keras import layers  # noqa: E402

rng = np.random.default_rng(0)


def ids(batch=5, length=6, vocab=20):
    x = rng.integers(1, vocab, size=(batch, length))
    x[0, 3:] = 0  # right
    x[2, :2] = 0  # left
    x[3, 1:4] = 0  # middle
    x[4] = 0  # fully padded
    return x


def token_model(body, vocab=20, width=8):
    inp = keras.Input((None,), dtype="int32")
    return keras.Model(inp, body(layers.Embedding(vocab, width, mask_zero=True)(inp)))


def cases():
    yield (
        "hard_sigmoid_lstm",
        token_model(lambda e: layers.LSTM(5, recurrent_activation="hard_sigmoid", return_sequences=True)(e)),
        [[ids()]],
    )
    yield (
        "gru_reset_before",
        token_model(
            lambda e: [layers.GRU(4, reset_after=False, return_sequences=True)(e), layers.GRU(4, reset_after=False)(e)]
        ),
        [[ids()]],
    )
    yield (
        "masked_bidirectional",
        token_model(
            lambda e: layers.GlobalAveragePooling1D()(layers.Bidirectional(layers.LSTM(4, return_sequences=True))(e))
        ),
        [[ids()]],
    )

    def attention(e):
        m = layers.MultiHeadAttention(2, 3)(e, e)
        return [m, layers.Attention()([e, m]), layers.AdditiveAttention()([e, e]), layers.Add()([e, m])]

    yield "mha_fully_masked", token_model(attention), [[ids()]]
    inp = keras.Input((11, 5))
    pooled = [
        layers.AveragePooling1D(3, strides=2, padding="same")(inp),
        layers.MaxPooling1D(2, padding="same")(inp),
        layers.Conv1D(4, 4, padding="same", strides=2)(inp),
    ]
    yield "same_padding", keras.Model(inp, pooled), [[rng.standard_normal((3, 11, 5)).astype("float32")]]
    head = keras.Sequential([layers.Dense(4, activation="relu"), layers.Dense(3)], name="head")
    inp = keras.Input((None,), dtype="int32")
    emb = layers.Embedding(20, 6, mask_zero=True)
    shared = layers.LSTM(5)
    joined = layers.Concatenate()([shared(emb(inp)), shared(layers.Dropout(0.2)(emb(inp)))])
    yield "nested_and_shared", keras.Model(inp, head(joined)), [[ids()]]
    yield (
        "sequential",
        keras.Sequential(
            [
                layers.Embedding(20, 6, mask_zero=True, input_shape=(None,)),
                layers.GRU(5),
                layers.Dense(2, activation="softmax"),
            ]
        ),
        [[ids()]],
    )


def one_hot(batch, length, tokens):
    x = np.zeros((batch, length, tokens), dtype="float32")
    x[np.arange(batch)[:, None], np.arange(length)[None, :], rng.integers(0, tokens, size=(batch, length))] = 1.0
    return x


def seq2seq_cases():
    """keras-io's lstm_seq2seq (character-level translation): the training model, whose decoder LSTM takes
    ``initial_state=[h, c]`` (Keras 2 records them as more tensors of its one inbound node), and the
    sampling models rebuilt from its layers, as the example does."""
    latent, enc_tokens, dec_tokens = 6, 7, 5
    encoder_inputs = keras.Input((None, enc_tokens))
    _, state_h, state_c = layers.LSTM(latent, return_state=True)(encoder_inputs)
    decoder_inputs = keras.Input((None, dec_tokens))
    decoder_lstm = layers.LSTM(latent, return_sequences=True, return_state=True)
    decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=[state_h, state_c])
    decoder_dense = layers.Dense(dec_tokens, activation="softmax")
    model = keras.Model([encoder_inputs, decoder_inputs], decoder_dense(decoder_outputs))
    yield "lstm_seq2seq", model, [[one_hot(4, 9, enc_tokens), one_hot(4, 6, dec_tokens)]]
    encoder_model = keras.Model(encoder_inputs, [state_h, state_c])
    yield "lstm_seq2seq_encoder", encoder_model, [[one_hot(3, 5, enc_tokens)]]
    h_in, c_in = keras.Input((latent,)), keras.Input((latent,))
    outputs, h, c = decoder_lstm(decoder_inputs, initial_state=[h_in, c_in])
    decoder_model = keras.Model([decoder_inputs, h_in, c_in], [decoder_dense(outputs), h, c])
    states = [rng.standard_normal((3, latent)).astype("float32") for _ in range(2)]
    yield "lstm_seq2seq_decoder", decoder_model, [[one_hot(3, 1, dec_tokens), *states]]


def keras_io_rows():
    """The layers keras-io's vision and sequence models add, as Keras 2 computes them: transposed,
    separable and depthwise convolutions, resampling, padding, cropping, Rescaling, random augmentations,
    an adapted Normalization, CenterCrop, Resizing, and TimeDistributed over an LSTM."""
    image = keras.Input((9, 8, 3))
    x = layers.Rescaling(1 / 127.5, offset=-1)(image)
    x = layers.RandomFlip()(layers.RandomBrightness(0.2, value_range=(-1, 1))(x))  # the identity at inference
    norm = layers.Normalization()
    norm.adapt(rng.standard_normal((20, 9, 8, 3)) * 2 + 1)
    x = norm(x)
    up = layers.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(x)
    valid = layers.Conv2DTranspose(2, (4, 3), strides=(2, 3), output_padding=(1, 2))(x)
    sep = layers.SeparableConv2D(5, 3, padding="same", depth_multiplier=2)(up)
    depth = layers.DepthwiseConv2D((3, 2), depth_multiplier=2, strides=2)(sep)
    bilinear = layers.UpSampling2D((2, 3), interpolation="bilinear")(depth)
    cropped = layers.Cropping2D(((1, 0), (2, 1)))(layers.ZeroPadding2D(((1, 2), (0, 3)))(bilinear))
    centre = layers.CenterCrop(5, 6)(cropped)
    resized = layers.Resizing(7, 11)(centre)
    outputs = [valid, centre, resized]
    yield "keras_io_vision", keras.Model(image, outputs), [[rng.standard_normal((2, 9, 8, 3)).astype("float32")]]
    features = keras.Input((None, 3))
    y = layers.Conv1DTranspose(4, 3, strides=2, padding="same")(features)
    y = layers.SeparableConv1D(5, 3, padding="same")(y)
    y = layers.UpSampling1D(2)(layers.DepthwiseConv1D(2)(y))
    words = keras.Input((None, 4), dtype="int32")
    sentences = layers.TimeDistributed(layers.LSTM(3))(layers.Embedding(20, 5, mask_zero=True)(words))
    ids = rng.integers(1, 20, size=(3, 4, 4))
    ids[0, 2:] = 0
    ids[1, :, 3:] = 0
    ids[2, 1, 1:] = 0
    inputs = [rng.standard_normal((3, 7, 3)).astype("float32"), ids]
    yield "keras_io_sequences", keras.Model([features, words], [y, sentences]), [inputs]


def tf_op_rows():
    """What tf.keras 2 writes for tensor code between layers: ``x + y``, ``tf.*`` calls and slices become
    ``TFOpLambda`` / ``SlicingOpLambda`` layers named by their TF function; float ids into an Embedding (a
    Keras 2 ``Input(shape=(T,))`` is float32), which Keras 2 casts to int32 (truncation toward zero)."""
    import tensorflow as tf

    frames = keras.Input((6, 4))
    dense = layers.Dense(4)(frames)
    x = dense + frames  # a residual: tf.__operators__.add
    scaled = tf.math.multiply(x, 2.0)
    shifted = 1.0 - tf.nn.relu(x)  # a number on the left of a difference
    flat = tf.reshape(scaled, (-1, 24))
    sliced = [x[:, 1:4, ::2], x[:, -1], x[..., 0], x[:, None, 1:3]]
    joined = tf.concat([tf.expand_dims(x, 1), tf.expand_dims(-dense, 1)], axis=1)
    third = tf.nn.relu(x) / 3
    pooled = tf.reduce_mean(tf.transpose(tf.math.square(x), perm=[0, 2, 1]), axis=-1, keepdims=True)
    gate = tf.nn.softmax(tf.matmul(x, tf.transpose(dense, perm=[0, 2, 1])), axis=-1)
    leaky = tf.where(x > 0.0, x, 0.5 * x)  # a number on the left of a product
    outputs = [x, shifted, third, flat, *sliced, joined, pooled, gate, leaky, tf.cast(x > 0.0, "float32")]
    batch = rng.standard_normal((4, 6, 4)).astype("float32")
    batch[1, 3:] = 0.0  # padded frames: on the right, on the left, fully
    batch[2, :2] = 0.0
    batch[3] = 0.0
    yield "tf_op_lambda", keras.Model(frames, outputs), [[batch]]
    ids_in = keras.Input((6,))  # float32, as Keras 2 declares it
    embedded = layers.Embedding(20, 5, mask_zero=True)(ids_in)
    plain = layers.Embedding(20, 3)(ids_in)
    model = keras.Model(ids_in, [layers.LSTM(4)(embedded), layers.Flatten()(plain)])
    float_ids = ids(5, 6).astype("float32")
    float_ids[0, :2] = [2.9, 7.2]  # Keras 2 truncates: rows 2 and 7
    yield "float_id_embedding", model, [[float_ids]]


def cudnn_rows():
    """``CuDNNLSTM`` and ``CuDNNGRU`` (tf.keras 2's GPU-only layers, saved here without running them) and
    the expected outputs from their CPU equivalents in tf_keras: an LSTM whose bias is the sum of the
    CuDNN layer's input and recurrent biases, a GRU(reset_after=True, recurrent_activation="sigmoid")
    whose [2, 3u] bias is the CuDNN one's two halves."""
    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

    def build(lstm, gru, **gru_options):
        seq = keras.Input((None, 3))
        return keras.Model(seq, [lstm(4, return_sequences=True)(seq), gru(5, go_backwards=True, **gru_options)(seq)])

    cudnn = build(CuDNNLSTM, CuDNNGRU)
    cpu = build(layers.LSTM, layers.GRU, reset_after=True, recurrent_activation="sigmoid")
    for layer in cudnn.layers[1:]:
        layer.set_weights([_moved(w, v.name) for w, v in zip(layer.get_weights(), layer.weights, strict=True)])
    lstm, gru = cudnn.layers[1].get_weights(), cudnn.layers[2].get_weights()
    cpu.layers[1].set_weights([lstm[0], lstm[1], lstm[2][:16] + lstm[2][16:]])
    cpu.layers[2].set_weights([gru[0], gru[1], gru[2].reshape(2, 15)])
    seq = rng.standard_normal((3, 7, 3)).astype("float32")
    seq[1, 4:] = 0.0  # zero frames at the end (CuDNN layers take no mask)
    return cudnn, cpu, [[seq]]


def _moved(value: np.ndarray, name: str) -> np.ndarray:
    """A weight off its initial value (a variance kept positive, an integer count left alone)."""
    if value.dtype.kind != "f":
        return value
    moved = rng.standard_normal(value.shape).astype("float32") * 0.4
    return np.abs(moved) + 0.5 if "variance" in name else moved


def main(out: str, only: list[str] | None = None) -> None:
    """Write every case, or with ``only`` those cases alone (the others' files and expected values stay)."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "expected.npz")
    expected = dict(np.load(path)) if only and os.path.exists(path) else {}
    cudnn, cpu, cudnn_batches = cudnn_rows()
    rows = [*cases(), *seq2seq_cases(), *keras_io_rows(), *tf_op_rows(), ("cudnn_rnn", cudnn, cudnn_batches)]
    for name, model, batches in rows:
        if only and name not in only:
            continue
        if model is not cudnn:  # its weights are moved already, and copied into its CPU equivalent
            for layer in model.layers:
                weights = layer.get_weights()
                if weights:
                    layer.set_weights([_moved(w, v.name) for w, v in zip(weights, layer.weights, strict=True)])
        model.save(os.path.join(out, f"{name}.h5"))
        runs = cpu if model is cudnn else model  # CuDNN kernels need a GPU: their CPU equivalent predicts
        for b, inputs in enumerate(batches):
            outputs = runs.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
            outputs = outputs if isinstance(outputs, list) else [outputs]
            for i, x in enumerate(inputs):
                expected[f"{name}/{b}/in/{i}"] = x
            for k, y in enumerate(outputs):
                expected[f"{name}/{b}/out/{k}"] = y
    np.savez_compressed(path, **expected)
    print(f"wrote {', '.join(only) if only else 'every case'} to {out} with tf_keras {keras.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras2", sys.argv[2:] or None)
