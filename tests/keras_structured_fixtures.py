"""Make the fixtures of tests/test_keras_preprocessing.py with keras 3 and TensorFlow (run
once; the files are committed). Keras builds StringLookup, IntegerLookup, Hashing and HashedCrossing with
TensorFlow on every backend, and only the TensorFlow backend runs a model on string inputs, so these
models cannot be made in the test's own environment:

    python -m venv --system-site-packages /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu
    /tmp/tfenv/bin/python tests/keras_structured_fixtures.py tests/data/keras_structured

Each case is a small keras-io-style model of structured data (a list of inputs, one per column), its
lookups adapted on a small table and every float weight moved off its initial value, saved as
``<case>.keras`` (and ``<case>.h5`` where the vocabularies are in the config). ``expected.npz`` holds,
per case and batch, the inputs (strings as unicode arrays) and Keras's outputs: ``<case>/<b>/in/<i>``,
``<case>/<b>/out/<k>``. ``hashes/...`` holds Keras's ``Hashing`` bins of many strings and integers
(unicode, empty, every length up to 200 bytes and a few longer), unsalted and salted, with a bin count
near 2**62 so that the bins show (almost) the whole 64-bit hash.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

rng = np.random.default_rng(0)
BIG = 2**62 + 17  # bins near 2**62: the bin is the hash mod BIG, close to the hash itself
SALTS = (None, 7, [12345678901234, -5])

COLORS = np.array([["red"], ["green"], ["blue"], ["blue"], ["red"], ["école"], ["blue"]])
CITIES = np.array([[3], [7], [7], [11], [3], [7], [42]], dtype="int64")
AGES = np.array([[23.0], [41.0], [35.0], [62.0], [19.0], [50.0], [33.0]], dtype="float32")


def randomise(model):
    """Every Dense weight moved off its initial value (Normalization keeps its adapted statistics, which
    its call caches)."""
    for weight in model.weights:
        if "float" in str(weight.dtype) and "dense" in weight.path:
            value = np.asarray(keras.ops.convert_to_numpy(weight))
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.5 + value * 0.5)


def hash_strings():
    """Strings that exercise every branch of FarmHash (0-16, 17-32, 33-64 and over 64 bytes) and of
    SipHash (every length mod 8), in ASCII, Latin, CJK, emoji; with the empty string and NUL bytes."""
    out = ["", "a", "ab", "abc", "abcd", "hello", "école", "日本語", "\x00", "🙂x", "[UNK]", " "]
    for n in list(range(0, 140)) + [191, 192, 193, 255, 256, 257, 1000]:
        out.append("".join(chr(int(c)) for c in rng.integers(32, 0x2FF, size=n)))
        out.append("".join(chr(int(c)) for c in rng.integers(0x4E00, 0x4F00, size=max(n // 3, 1))))
    return np.array(out)


def structured():
    """keras-io's structured-data classifier: one input per column, a StringLookup and an IntegerLookup
    (one_hot), a Hashing of the colour (one_hot), a CategoryEncoding of the city code, an adapted
    Normalization of the age, a Discretization of the age (one_hot), all concatenated into a Dense
    classifier."""
    color = keras.Input((1,), dtype="string", name="color")
    city = keras.Input((1,), dtype="int64", name="city")
    age = keras.Input((1,), name="age")
    code = keras.Input((1,), dtype="int64", name="code")
    colors = layers.StringLookup(output_mode="one_hot")
    colors.adapt(COLORS)
    cities = layers.IntegerLookup(output_mode="one_hot")
    cities.adapt(CITIES)
    norm = layers.Normalization()
    norm.adapt(AGES)
    parts = [
        colors(color),
        cities(city),
        layers.Hashing(5, output_mode="one_hot")(color),
        layers.CategoryEncoding(6, output_mode="one_hot")(code),
        norm(age),
        layers.Discretization([25.0, 40.0, 55.0], output_mode="one_hot")(age),
    ]
    x = layers.Concatenate()(parts)
    x = layers.Dense(8, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    out = layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model([color, city, age, code], out)
    inputs = [
        np.array([["red"], ["pink"], ["école"], ["blue"], [""]]),
        np.array([[3], [7], [99], [-1], [11]], dtype="int64"),
        np.array([[23.0], [70.0], [40.0], [24.99], [55.0]], dtype="float32"),
        np.array([[0], [5], [2], [2], [1]], dtype="int64"),
    ]
    return model, [inputs]


def lookup_modes():
    """StringLookup and IntegerLookup in every output mode, with a mask token, several OOV indices
    (FarmHash, SipHash with a salt, floormod), pad_to_max_tokens, tf_idf with adapted idf weights."""
    words = keras.Input((3,), dtype="string", name="words")
    word = keras.Input((1,), dtype="string", name="word")
    codes = keras.Input((3,), dtype="int64", name="codes")
    code = keras.Input((1,), dtype="int64", name="code")
    # no empty string in the corpus: an unmasked "" at the vocabulary's end is lost on reading the
    # vocabulary.txt back, by Keras as by attnzoo (which refuses the file for it)
    corpus = np.array([["red", "green", "blue"], ["blue", "blue", "grey"], ["red", "pink", "x"]])
    numbers = np.array([[7, 9, 11], [9, 11, 13], [0, 9, 9]], dtype="int64")
    outputs = []
    for mode in ("int", "multi_hot", "count", "tf_idf"):
        for extra in ({}, {"mask_token": "", "num_oov_indices": 3}, {"num_oov_indices": 2, "salt": [5, 9]}):
            lookup = layers.StringLookup(output_mode=mode, **extra)
            lookup.adapt(corpus)
            outputs.append(lookup(words))
            numeric = {"mask_token": 0, "num_oov_indices": 3} if "mask_token" in extra else {}
            if "salt" in extra:
                numeric = {"num_oov_indices": 2, "oov_method": "farmhash", "salt": 5}
            ilookup = layers.IntegerLookup(output_mode=mode, **numeric)
            ilookup.adapt(numbers)
            outputs.append(ilookup(codes))
    one_hot = layers.StringLookup(output_mode="one_hot", num_oov_indices=2)
    one_hot.adapt(corpus)
    outputs.append(one_hot(word))
    padded = layers.StringLookup(output_mode="multi_hot", max_tokens=9, pad_to_max_tokens=True)
    padded.adapt(corpus)
    outputs.append(padded(words))
    ione_hot = layers.IntegerLookup(output_mode="one_hot", num_oov_indices=2, oov_method="farmhash")
    ione_hot.adapt(numbers)
    outputs.append(ione_hot(code))
    model = keras.Model([words, word, codes, code], outputs)
    inputs = [
        np.array([["red", "blue", "purple"], ["", "", "green"], ["blue", "blue", "blue"], ["école", "x", "RED"]]),
        np.array([["red"], ["mauve"], [""], ["blue"]]),
        np.array([[7, 0, 8], [9, 10, 11], [0, 0, 0], [13, -3, 123456789]], dtype="int64"),
        np.array([[7], [8], [0], [-4]], dtype="int64"),
    ]
    return model, [inputs]


def hashing():
    """Hashing of strings and integers in every output mode, with a salt and a mask value; HashedCrossing
    of a string and an integer feature (int and one_hot)."""
    words = keras.Input((3,), dtype="string", name="words")
    word = keras.Input((1,), dtype="string", name="word")
    numbers = keras.Input((3,), dtype="int64", name="numbers")
    number = keras.Input((1,), dtype="int64", name="number")
    outputs = [
        layers.Hashing(7)(words),
        layers.Hashing(7, salt=[3, 4])(words),
        layers.Hashing(7, salt=11, mask_value="")(words),
        layers.Hashing(6, output_mode="multi_hot")(words),
        layers.Hashing(6, output_mode="count", salt=2)(words),
        layers.Hashing(5, output_mode="one_hot")(word),
        layers.Hashing(9)(numbers),
        layers.Hashing(9, mask_value=0)(numbers),
        layers.Hashing(9, salt=1, output_mode="count")(numbers),
        layers.HashedCrossing(10)([word, number]),
        layers.HashedCrossing(6, output_mode="one_hot")([number, word]),
    ]
    model = keras.Model([words, word, numbers, number], outputs)
    inputs = [
        np.array([["red", "", "école"], ["日本語", "a", ""], ["x" * 70, "b", "c"]]),
        np.array([["red"], [""], ["🙂"]]),
        np.array([[0, 1, -1], [123456789012, 5, 0], [7, 7, 2**40]], dtype="int64"),
        np.array([[3], [-7], [0]], dtype="int64"),
    ]
    return model, [inputs]


def given():
    """Lookups whose vocabularies (and idf weights) are in the config, with a CategoryEncoding (count and
    multi_hot), a Normalization with invert=True and a Discretization (int) of several values: the
    legacy .h5 holds everything."""
    word = keras.Input((2,), dtype="string", name="word")
    code = keras.Input((2,), dtype="int64", name="code")
    value = keras.Input((2,), name="value")
    outputs = [
        layers.StringLookup(vocabulary=["a", "b", "c"], output_mode="tf_idf", idf_weights=[0.5, 1.5, 2.0])(word),
        layers.IntegerLookup(vocabulary=[4, 8], output_mode="count", mask_token=0)(code),
        layers.CategoryEncoding(10, output_mode="count")(code),
        layers.CategoryEncoding(9, output_mode="multi_hot")(code),
        layers.Normalization(mean=2.0, variance=9.0, invert=True)(value),
        layers.Discretization([-1.0, 0.0, 0.5])(value),
    ]
    x = layers.Concatenate()([outputs[0], outputs[1], outputs[4]])
    outputs.append(layers.Dense(3)(x))
    model = keras.Model([word, code, value], outputs)
    inputs = [
        np.array([["a", "c"], ["z", "a"], ["b", "b"]]),
        np.array([[4, 0], [8, 8], [3, 4]], dtype="int64"),
        np.array([[0.25, -1.0], [3.0, 0.5], [-7.0, 0.0]], dtype="float32"),
    ]
    return model, [inputs]


CASES = {"structured": structured, "lookup_modes": lookup_modes, "hashing": hashing, "given": given}
H5 = ("given", "hashing", "structured")  # structured.h5 lacks its adapted vocabularies (assets): refused


def _array(x):
    x = np.asarray(keras.ops.convert_to_numpy(x)) if not isinstance(x, np.ndarray) else x
    return x.astype(str) if x.dtype.kind in ("U", "S", "O") else x


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    strings = hash_strings()
    integers = np.concatenate([np.arange(-300, 300), rng.integers(-(2**62), 2**62, size=200)]).astype("int64")
    expected["hashes/strings"] = strings
    expected["hashes/integers"] = integers
    for i, salt in enumerate(SALTS):
        expected[f"hashes/{i}/strings"] = _array(layers.Hashing(BIG, salt=salt)(strings[:, None]))[:, 0]
        expected[f"hashes/{i}/integers"] = _array(layers.Hashing(BIG, salt=salt)(integers[:, None]))[:, 0]
    for name, make in CASES.items():
        model, batches = make()
        randomise(model)
        model.save(os.path.join(out, f"{name}.keras"))
        if name in H5:
            model.save(os.path.join(out, f"{name}.h5"))
        for b, inputs in enumerate(batches):
            for i, x in enumerate(inputs):
                expected[f"{name}/{b}/in/{i}"] = _array(x)
            outputs = model(inputs, training=False)
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            for k, y in enumerate(outputs):
                expected[f"{name}/{b}/out/{k}"] = _array(y)
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_structured")
