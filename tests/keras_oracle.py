"""Keras 3 (torch backend) as the oracle of the whole-model converter, run as a subprocess.

    KERAS_BACKEND=torch python tests/keras_oracle.py

reads one JSON request per line on stdin and answers one JSON line on stdout:

    {"recipe": {...}, "dir": "/tmp/x", "seed": 3, "batches": [[4, 7], [2, 3]]}
    -> {"ok": true, "files": ["/tmp/x/model.keras", "/tmp/x/model.h5"], "outputs": 2}

It builds the model the recipe describes (see ``build``), moves every weight off its initial value
(seeded), saves it as ``model.keras`` and legacy ``model.h5``, and writes ``io.npz``: for each batch
size and length, inputs whose rows are padded on the right, on the left, in the middle, fully and not
at all (``in/<b>/<i>``), and Keras's outputs (``out/<b>/<k>``). Nothing here uses attnzoo: the expected
values are Keras's. Recipes are plain data so that hypothesis can draw and shrink them in the test.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import keras  # noqa: E402
import keras_oracle_files  # noqa: E402 - beside this file, which runs as a script
import keras_oracle_rows  # noqa: E402 - beside this file, which runs as a script
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402

PATTERNS = ("right", "full", "left", "middle", "empty")


@keras.saving.register_keras_serializable(package="attnzoo_example")
class LabelWiseAttention(keras.layers.Layer):
    """The example plugin's custom layer (seed 004): masked label-wise attention, probabilities out."""

    def __init__(self, n_labels, **kwargs):
        super().__init__(**kwargs)
        self.n_labels = n_labels
        self.supports_masking = True

    def build(self, input_shape):
        h = input_shape[-1]
        self.Wa = self.add_weight(name="Wa", shape=(self.n_labels, h), initializer="he_normal")
        self.Wo = self.add_weight(name="Wo", shape=(self.n_labels, h), initializer="he_normal")
        self.bo = self.add_weight(name="bo", shape=(self.n_labels,), initializer="zeros")

    def call(self, x, mask=None):
        scores = ops.einsum("bth,lh->blt", x, self.Wa)
        if mask is not None:
            scores = ops.where(ops.expand_dims(mask, 1), scores, -1e9)
        reps = ops.einsum("blt,bth->blh", ops.softmax(scores, axis=-1), x)
        return ops.sigmoid(ops.sum(reps * self.Wo, axis=-1) + self.bo)

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return {**super().get_config(), "n_labels": self.n_labels}


@keras.saving.register_keras_serializable(package="attnzoo_tests")
class Unconvertible(keras.layers.Layer):
    """A custom layer no converter takes."""

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(input_shape[-1], 2))

    def call(self, x):
        return ops.matmul(x, self.w)


# -- recipes ----------------------------------------------------------------------------------------------
def _rnn(block, sequences=True):
    kind = {"lstm": layers.LSTM, "gru": layers.GRU, "simple_rnn": layers.SimpleRNN}[block["cell"]]
    extra = {}
    if block["cell"] == "gru":
        extra["reset_after"] = block.get("reset_after", True)
    if block["cell"] != "simple_rnn" and block.get("recurrent_activation"):
        extra["recurrent_activation"] = block["recurrent_activation"]
    return kind(
        block["units"],
        return_sequences=sequences,
        go_backwards=block.get("go_backwards", False),
        activation=block.get("activation", "tanh"),
        **extra,
    )


def _block(x, block):
    """One sequence block of a recipe: [B, T, D] in, [B, T, D'] out (the attention blocks take x twice)."""
    kind = block["type"]
    if kind == "mha":
        out = layers.MultiHeadAttention(block["heads"], block["key_dim"])(x, x)
        return layers.Add()([x, out]) if block.get("residual") else out
    if kind == "attention":
        return layers.Attention(use_scale=block.get("use_scale", False), score_mode=block.get("score_mode", "dot"))(
            [x, x]
        )
    if kind == "additive":
        return layers.AdditiveAttention()([x, x])
    for layer in _layers(block):
        x = layer(x)
    return x


def _reduce(x, reduce, block=None):
    if reduce == "last_step":
        return x[:, -1]
    if reduce == "none":
        return x
    return _reduce_layer(reduce, block)(x)


def build(recipe):
    """A Keras model from a recipe (dicts and lists only)."""
    source = recipe["input"]
    if recipe.get("form") == "sequential":
        stack = [
            keras.Input((None,), dtype="int32") if source["kind"] == "tokens" else keras.Input((None, source["dim"]))
        ]
        if source["kind"] == "tokens":
            stack.append(layers.Embedding(source["vocab"], source["embed"], mask_zero=source["mask_zero"]))
        elif source.get("masking"):
            stack.append(layers.Masking(0.0))
        model = keras.Sequential(stack)
        for block in recipe["branches"][0]:
            for layer in _layers(block):
                model.add(layer)
        if recipe["reduce"] != "none":
            model.add(_reduce_layer(recipe["reduce"], recipe.get("reduce_rnn")))
        model.add(layers.Dense(recipe["head"]["units"], activation=recipe["head"].get("activation")))
        return model
    if source["kind"] == "tokens":
        inp = keras.Input((None,), dtype="int32", name="ids")
        x = layers.Embedding(source["vocab"], source["embed"], mask_zero=source["mask_zero"])(inp)
    else:
        inp = keras.Input((None, source["dim"]), name="features")
        x = layers.Masking(0.0)(inp) if source.get("masking") else inp
    ends = []
    for branch in recipe["branches"]:
        y = x
        for block in branch:
            y = _block(y, block)
        ends.append(y)
    if len(ends) > 1:
        merge = {"add": layers.Add, "concatenate": layers.Concatenate, "multiply": layers.Multiply}
        merge.update(average=layers.Average, maximum=layers.Maximum, minimum=layers.Minimum, subtract=layers.Subtract)
        seq = merge[recipe["merge"]]()(ends)
    else:
        seq = ends[0]
    pooled = _reduce(seq, recipe["reduce"], recipe.get("reduce_rnn"))
    out = layers.Dense(recipe["head"]["units"], activation=recipe["head"].get("activation"))(pooled)
    outputs = [out, seq] if recipe.get("sequence_output") else out
    return keras.Model(inp, outputs)


def _layers(block):
    """A block's layers: one, or a pair that keeps the length (a resampling and its inverse)."""
    kind = block["type"]
    if kind == "resample":  # twice as long, then pooled back
        return [layers.UpSampling1D(2), layers.MaxPooling1D(2)]
    if kind == "pad_crop":
        return [layers.ZeroPadding1D((1, 2)), layers.Cropping1D((2, 1))]
    if kind == "separable1d":
        return [layers.SeparableConv1D(block["filters"], block["kernel"], padding="same", depth_multiplier=2)]
    if kind == "depthwise1d":
        return [layers.DepthwiseConv1D(block["kernel"], padding="same", depth_multiplier=block["multiplier"])]
    if kind == "conv1d_transpose":
        return [layers.Conv1DTranspose(block["filters"], block["kernel"], padding="same")]
    if kind == "normalization":
        return [layers.Normalization(axis=-1)]
    if kind == "rescaling":
        return [layers.Rescaling(block["scale"], offset=block["offset"])]
    return [_single_layer(block)]


def _single_layer(block):
    kind = block["type"]
    if kind == "rnn":
        return _rnn(block)
    if kind == "bidirectional":
        return layers.Bidirectional(_rnn(block), merge_mode=block.get("merge_mode", "concat"))
    if kind == "dense":
        return layers.Dense(block["units"], activation=block.get("activation", "linear"))
    if kind == "time_distributed":
        return layers.TimeDistributed(layers.Dense(block["units"], activation=block.get("activation")))
    if kind == "conv1d":
        return layers.Conv1D(
            block["filters"], block["kernel"], padding=block["padding"], dilation_rate=block.get("dilation", 1)
        )
    if kind == "layer_norm":
        return layers.LayerNormalization()
    if kind == "dropout":
        return layers.Dropout(0.3)
    if kind == "activation":
        return layers.Activation(block["activation"])
    raise ValueError(f"block {kind!r} needs the functional form")


def _reduce_layer(reduce, block):
    if reduce == "average":
        return layers.GlobalAveragePooling1D()
    if reduce == "max":
        return layers.GlobalMaxPooling1D()
    return _rnn(block, sequences=False)


NAMED = {}  # models the targeted tests ask for by name


def named(fn):
    NAMED[fn.__name__] = fn
    return fn


@named
def seed001():
    """Seed 001's shape: a CNN over a spectrogram, frequency pooled away, a BiLSTM over time, attention
    pooling (dot attention of every frame, then the masked mean), a softmax classifier."""
    inp = keras.Input((16, 24, 1), name="spectrogram")  # [freq, time, channels]
    x = layers.Conv2D(4, (3, 3), padding="same", activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D((2, 1))(x)
    x = layers.Conv2D(6, (3, 3), padding="same", activation="relu")(x)
    x = layers.MaxPooling2D((8, 1))(x)  # [1, 24, 6]
    x = layers.Permute((2, 1, 3))(x)
    x = layers.Reshape((24, 6))(x)
    h = layers.Bidirectional(layers.LSTM(5, return_sequences=True))(x)
    a = layers.Attention(use_scale=True)([h, h])
    pooled = layers.GlobalAveragePooling1D()(a)
    return keras.Model(inp, layers.Dense(3, activation="softmax")(pooled))


@named
def seed004():
    """Seed 004's shape: Embedding(mask_zero) -> BiLSTM -> a custom label-wise attention from a plugin."""
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(30, 8, mask_zero=True)(inp)
    h = layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x)
    return keras.Model(inp, LabelWiseAttention(5)(h))


@named
def seed003():
    """Seed 003's shape: an LSTM encoder-decoder whose decoder attends to the encoder (Luong)."""
    src = keras.Input((None,), dtype="int32", name="source")
    tgt = keras.Input((None,), dtype="int32", name="target_in")
    enc = layers.Embedding(20, 8, mask_zero=True)(src)
    enc_seq, h, c = layers.LSTM(6, return_sequences=True, return_state=True)(enc)
    dec = layers.Embedding(15, 8, mask_zero=True)(tgt)
    dec_seq = layers.LSTM(6, return_sequences=True)(dec, initial_state=[h, c])
    context = layers.Attention()([dec_seq, enc_seq])
    joined = layers.Concatenate()([dec_seq, context])
    state = layers.Dense(6, activation="tanh")(joined)
    return keras.Model([src, tgt], layers.Dense(15, activation="softmax")(state))


@named
def unsupported():
    inp = keras.Input((None,), dtype="int32")
    x = layers.Embedding(20, 4)(inp)
    y = layers.Lambda(lambda t: t * 2)(x)
    return keras.Model(inp, Unconvertible(name="mystery")(y))


@named
def shared_and_nested():
    inner_in = keras.Input((None, 8))
    inner = keras.Model(inner_in, layers.Dense(4)(layers.GRU(5, return_sequences=True)(inner_in)), name="encoder")
    head = keras.Sequential([layers.Dense(3, activation="tanh"), layers.Dense(2)], name="head")
    inp = keras.Input((None,), dtype="int32", name="ids")
    e = layers.Embedding(20, 8, mask_zero=True)(inp)
    a, b = inner(e), inner(layers.Dropout(0.5)(e))
    return keras.Model(inp, head(layers.GlobalAveragePooling1D()(layers.Add()([a, b]))))


@named
def two_inputs_two_outputs():
    q = keras.Input((None,), dtype="int32", name="query")
    d = keras.Input((None,), dtype="int32", name="document")
    embed = layers.Embedding(20, 8, mask_zero=True)
    encode = layers.Bidirectional(layers.GRU(4, return_sequences=True))
    hq, hd = encode(embed(q)), encode(embed(d))
    context = layers.Attention()([hq, hd])
    joined = layers.Concatenate()([hq, context])
    return keras.Model([q, d], [layers.GlobalAveragePooling1D()(joined), layers.GlobalMaxPooling1D()(hd)])


@named
def transformer():
    inp = keras.Input((None,), dtype="int32", name="ids")
    e = layers.Embedding(20, 8, mask_zero=True)(inp)
    a = layers.MultiHeadAttention(2, 4)(e, e)
    x = layers.LayerNormalization()(layers.Add()([e, a]))
    f = layers.Dense(8)(layers.Dense(16, activation="relu")(x))
    x = layers.LayerNormalization()(layers.Add()([x, f]))
    return keras.Model(inp, layers.Dense(2)(layers.GlobalAveragePooling1D()(x)))


@named
def states():
    inp = keras.Input((None, 3), name="features")
    m = layers.Masking(0.0)(inp)
    t = layers.TimeDistributed(layers.Dense(4, activation="relu"))(m)
    seq, h, c = layers.LSTM(5, return_sequences=True, return_state=True)(t)
    last = layers.LSTM(5)(t, initial_state=[h, c])
    return keras.Model(inp, [last, seq[:, -1], h])


@named
def vision():
    inp = keras.Input((9, 8, 3), name="image")
    x = layers.Conv2D(4, (3, 2), padding="same", strides=(2, 1), activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D(2, padding="same")(x)
    x = layers.Conv2D(5, 2, padding="valid", groups=1, dilation_rate=1)(x)
    g = layers.GlobalAveragePooling2D()(x)
    flat = layers.Flatten()(layers.AveragePooling2D(2, padding="valid")(x))
    return keras.Model(inp, [layers.Dense(3, activation="softmax")(flat), g])


@named
def shapes_and_merges():
    """The shape layers, the merges of 2-D inputs, the activation layers, RMS layer norm, Identity."""
    seq = keras.Input((6, 4), name="sequence")
    vec = keras.Input((4,), name="vector")
    x = layers.LayerNormalization(axis=-1, epsilon=1e-2)(seq)
    x = layers.Dense(4, activation="gelu")(x)
    joined = layers.Concatenate()([x, layers.RepeatVector(6)(vec)])
    t = layers.Reshape((4, 12))(layers.Permute((2, 1))(joined))
    d = layers.Dot(axes=(2, 2), normalize=True)([t, t])
    m = layers.Multiply()([vec, vec])
    s = layers.Subtract()([m, vec])
    a = layers.Average()([m, s])
    hi, lo = layers.Maximum()([a, vec]), layers.Minimum()([a, vec])
    act = layers.ELU(alpha=0.5)(layers.Activation("selu")(hi))
    leaky = layers.ReLU(max_value=0.5, negative_slope=0.1, threshold=0.05)(layers.LeakyReLU(0.2)(lo))
    soft = layers.Softmax()(layers.PReLU()(act))
    rms = layers.LayerNormalization(rms_scaling=True)(t)
    noisy = layers.GaussianNoise(0.3)(layers.Identity()(layers.Flatten()(rms)))
    return keras.Model([seq, vec], [d, leaky, soft, noisy, layers.Dense(2, activation="hard_sigmoid")(soft)])


@named
def uneven_same_average_pool():
    """An AveragePooling1D whose 'same' window is uneven: keras 3's torch backend counts the padding there."""
    inp = keras.Input((6, 3), name="features")
    return keras.Model(inp, layers.AveragePooling1D(3, strides=2, padding="same")(inp))


@named
def stateful():
    inp = keras.Input(batch_shape=(2, None, 3))
    return keras.Model(inp, layers.LSTM(4, stateful=True)(inp))


NAMED.update(keras_oracle_rows.ROWS)  # the rows keras-io's models added (a module of their own)
NAMED.update(keras_oracle_files.ROWS)  # Keras files as people have them (issue 50)


# -- inputs and the serving loop ------------------------------------------------------------------------
def _keep(batch, length):
    """[batch, length] bool: True where a row holds data, each row padded by its pattern."""
    keep = np.ones((batch, length), dtype=bool)
    for b in range(batch):
        pattern = PATTERNS[b % len(PATTERNS)]
        cut = max(1, length // 2)
        if pattern == "right":
            keep[b, cut:] = False
        elif pattern == "left":
            keep[b, : length - cut] = False
        elif pattern == "middle" and length > 2:
            keep[b, 1 : length - 1] = False
        elif pattern == "empty":
            keep[b] = False
    return keep


def _inputs(model, batch, length, rng):
    """One array per model input; rows padded by PATTERNS (ids 0, all-zero feature frames, or False in a
    bool mask input, padded along its own second axis)."""
    arrays = []
    keep = _keep(batch, length)
    for tensor in model.inputs:
        shape = [batch] + [length if d is None else d for d in tensor.shape[1:]]
        if "bool" in str(tensor.dtype):  # a mask input: False on the padding, as the other inputs are padded
            own = _keep(batch, shape[1])
            x = np.broadcast_to(own.reshape(own.shape + (1,) * (len(shape) - 2)), shape).copy()
        elif "int" in str(tensor.dtype):
            vocab = _vocab(model, tensor)
            x = rng.integers(1, vocab, size=shape)
            if tensor.shape[1] is None:  # padding along the open length only
                x = np.where(keep[(...,) + (None,) * (len(shape) - 2)] if len(shape) > 2 else keep, x, 0)
            if len(shape) == 3 and tensor.shape[1] is None:  # sentences of words: some lose their last words
                x[1::2, :, shape[2] // 2 :] = 0
        else:
            x = rng.standard_normal(shape).astype("float32")
            if len(shape) == 3 and tensor.shape[1] is None:
                x = x * keep[:, :, None]
        arrays.append(x)
    return arrays


def _vocab(model, tensor):
    for layer in model.layers:
        if isinstance(layer, layers.Embedding):
            for node in layer._inbound_nodes:
                if any(t is tensor for t in node.input_tensors):
                    return layer.input_dim
    return 10


def _randomise(model, rng, gentle=False):
    """Every weight moved off its initial value (a variance kept positive; Normalization's count, an
    integer, left alone), and Normalization's constants refreshed from its moved statistics. ``gentle``:
    each weight moved by about a tenth of itself, for the deep keras.applications, whose activations
    the full move sends to inf and NaN in Keras itself."""
    for weight in model.weights:
        if "float" not in str(weight.dtype):
            continue
        value = weight.numpy()
        noise = rng.standard_normal(value.shape).astype("float32")
        moved = value * (1 + 0.1 * noise) + 0.01 * noise if gentle else noise * 0.4 + value * 0.5
        if "variance" in weight.path:
            moved = np.abs(moved) + 0.5
        weight.assign(moved)
    for layer in _all_layers(model):
        if isinstance(layer, layers.Normalization):
            layer.finalize_state()


def _all_layers(model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _all_layers(layer)


def serve(request):
    rng = np.random.default_rng(request.get("seed", 0))
    model = NAMED[request["name"]]() if "name" in request else build(request["recipe"])
    _randomise(model, rng, gentle=str(request.get("name", "")).startswith("application_"))
    folder = request["dir"]
    os.makedirs(folder, exist_ok=True)
    files = [os.path.join(folder, "model.keras"), os.path.join(folder, "model.h5")]
    model.save(files[0])
    model.save(files[1])
    arrays = {}
    for b, (batch, length) in enumerate(request.get("batches", [[5, 6], [2, 3]])):
        inputs = _inputs(model, batch, length, rng)
        feed = inputs if len(inputs) > 1 else inputs[0]
        if isinstance(getattr(model, "_inputs_struct", None), dict):  # a dict of named inputs, fed by name
            feed = dict(zip(sorted(model._inputs_struct), inputs, strict=True))  # model.inputs: sorted keys
        outputs = keras.tree.flatten(model.predict(feed, verbose=0))  # a dict's values in sorted key order
        for i, x in enumerate(inputs):
            arrays[f"in/{b}/{i}"] = x
        for k, y in enumerate(outputs):
            arrays[f"out/{b}/{k}"] = np.asarray(y)
    np.savez(os.path.join(folder, "io.npz"), **arrays)
    return {"ok": True, "files": files, "outputs": len(model.outputs)}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = serve(json.loads(line))
        except Exception as e:  # noqa: BLE001 - reported to the test, which shows it
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
