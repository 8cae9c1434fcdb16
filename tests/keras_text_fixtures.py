"""Make the text fixtures of tests/test_keras_text.py with keras 3 and TensorFlow (run once; the files are
committed). Keras builds TextVectorization, StringLookup and IntegerLookup with TensorFlow on every
backend, so these models cannot be made in the test's own environment:

    python -m venv /work/tfenv && /work/tfenv/bin/pip install tensorflow-cpu keras h5py numpy
    /work/tfenv/bin/python tests/keras_text_fixtures.py tests/data/keras_text

Each case is a small keras-io-style model with its text layers adapted on a small corpus and every
weight moved off its initial value, saved as ``<case>.keras`` (and ``<case>.h5`` where the vocabulary
is in the config). ``expected.npz`` holds, per case, the inputs (texts as unicode arrays) and Keras's
outputs: ``<case>/in/<i>``, ``<case>/out/<k>``. The texts cover case, punctuation, unknown words, texts
longer and shorter than ``output_sequence_length``, empty texts, tabs, newlines and non-ASCII letters.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

rng = np.random.default_rng(0)

CORPUS = [
    "The cat sat on the mat.",
    "A dog barked at the cat; the cat ran!",
    "Movies are great, great fun -- really (truly) great.",
    "I didn't like it: the plot was thin & the acting worse?",
    "school bus stop",
    "the the the cat",
    "école thin",
]
TEXTS = [
    "The CAT sat.",  # case, punctuation
    "the zebra quacked loudly",  # unknown words
    "",  # empty
    "a dog barked at the cat the cat ran and the mat was great great fun really truly",  # longer than L
    "Movies\tare\ngreat,  fun!!!",  # tabs, newlines, repeated spaces
    "ÉCOLE école Schoolbus école-bus",  # non-ASCII capitals stay (tf.strings.lower is ASCII-only)
    "it's the plot: thin\u00a0and\u2003worse",  # non-breaking and em spaces are not whitespace to TF
    "   leading and trailing   ",
]


def randomise(model):
    for weight in model.weights:
        if "float" in str(weight.dtype) and "lookup" not in weight.path:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.5 + value * 0.5)


def classifier():
    """keras-io's end-to-end text classifier: strings in, TextVectorization, Embedding, two strided
    convolutions, global max pooling, a sigmoid; the ids are a second output."""
    vectorize = layers.TextVectorization(max_tokens=25, output_sequence_length=12)
    vectorize.adapt(CORPUS)
    text = keras.Input((1,), dtype="string", name="text")
    ids = vectorize(text)
    x = layers.Embedding(25, 6)(ids)
    x = layers.Conv1D(5, 3, strides=2, activation="relu")(x)
    x = layers.Conv1D(4, 2, strides=2, activation="relu")(x)
    x = layers.GlobalMaxPooling1D()(x)
    return keras.Model(text, [ids, layers.Dense(1, activation="sigmoid")(x)]), [TEXTS]


def open_length():
    """No output_sequence_length (padded to the longest text of the batch), standardize='lower', strings of
    shape (), an Embedding with mask_zero before an LSTM."""
    vectorize = layers.TextVectorization(standardize="lower", split="whitespace")
    vectorize.adapt(CORPUS)
    text = keras.Input((), dtype="string", name="text")
    ids = vectorize(text)
    x = layers.LSTM(4)(layers.Embedding(vectorize.vocabulary_size(), 5, mask_zero=True)(ids))
    return keras.Model(text, [ids, layers.Dense(3, activation="softmax")(x)]), [TEXTS, TEXTS[:3]]


def characters():
    """split='character' with ngrams=2 and standardize='strip_punctuation'; and split=None."""
    chars = layers.TextVectorization(standardize="strip_punctuation", split="character", ngrams=2)
    chars.adapt(CORPUS)
    whole = layers.TextVectorization(standardize="lower_and_strip_punctuation", split=None, output_sequence_length=3)
    whole.adapt(["school bus stop", "the cat", "a dog barked"])
    text = keras.Input((1,), dtype="string", name="text")
    return keras.Model(text, [chars(text), whole(text)]), [TEXTS + ["School bus stop!", "the CAT"]]


def lookups():
    """StringLookup over tokens with a mask token, IntegerLookup with two OOV indices (floormod) and a
    mask token, into Embeddings."""
    strings = layers.StringLookup(mask_token="")
    strings.adapt(np.array([["red", "green", "blue"], ["blue", "blue", ""]]))
    integers = layers.IntegerLookup(num_oov_indices=2, mask_token=0)
    integers.adapt(np.array([[7, 9, 11], [9, 11, 13]]))
    words = keras.Input((None,), dtype="string", name="words")
    codes = keras.Input((None,), dtype="int64", name="codes")
    a, b = strings(words), integers(codes)
    x = layers.Concatenate()([layers.Embedding(5, 3)(a), layers.Embedding(7, 3)(b)])
    pooled = layers.GlobalAveragePooling1D()(x)
    words_in = np.array([["red", "blue", "purple", ""], ["", "", "green", "RED"], ["blue", "blue", "blue", "x"]])
    codes_in = np.array([[7, 0, 8, 13], [9, 10, 11, -3], [0, 0, 0, 5]])
    return keras.Model([words, codes], [a, b, pooled]), [words_in, codes_in]


def given_vocabulary():
    """A vocabulary given in the config (so the legacy .h5 holds it too)."""
    vectorize = layers.TextVectorization(vocabulary=["cat", "dog", "the", "great"], output_sequence_length=5)
    text = keras.Input((1,), dtype="string", name="text")
    ids = vectorize(text)
    x = layers.GlobalAveragePooling1D()(layers.Embedding(6, 4)(ids))
    return keras.Model(text, [ids, layers.Dense(2)(x)]), [TEXTS]


CASES = {
    "classifier": classifier,
    "open_length": open_length,
    "characters": characters,
    "lookups": lookups,
    "given_vocabulary": given_vocabulary,
}


def _array(x):
    x = np.asarray(x)
    return x.astype(str) if x.dtype.kind in ("U", "S", "O") else x


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, make in CASES.items():
        model, batches = make()
        randomise(model)
        model.save(os.path.join(out, f"{name}.keras"))
        if name in ("given_vocabulary", "classifier"):  # the classifier's .h5 has no vocabulary: refused
            model.save(os.path.join(out, f"{name}.h5"))
        for b, inputs in enumerate(batches if name != "lookups" else [batches]):
            inputs = inputs if name == "lookups" else [inputs]
            feed = [tf.constant(_array(x)) for x in inputs]
            if model.inputs[0].shape[1:] == (1,):
                feed = [tf.reshape(x, (-1, 1)) if x.dtype == tf.string else x for x in feed]
            outputs = model(feed if len(feed) > 1 else feed[0], training=False)
            outputs = [np.asarray(y) for y in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
            for i, x in enumerate(inputs):
                expected[f"{name}/{b}/in/{i}"] = _array(x)
            for k, y in enumerate(outputs):
                expected[f"{name}/{b}/out/{k}"] = np.asarray(y)
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)
    print(f"wrote {len(CASES)} cases to {out} with keras {keras.__version__} ({keras.backend.backend()})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_text")
