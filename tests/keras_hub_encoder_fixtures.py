"""Make the keras-hub text-encoder fixtures of tests/test_keras_hub_encoders.py with keras 3 (torch backend)
and keras-hub (run once; the files are committed, keras-hub is no test dependency):

    PYTHONHASHSEED=0 KERAS_BACKEND=torch python tests/keras_hub_encoder_fixtures.py tests/data/keras_hub_encoders

or, to make only some cases and keep the others' files and entries of expected.npz, with their names after
the folder (``... tests/data/keras_hub_encoders deberta_v3_classifier``).

Each case is a tiny keras-hub model (vocabulary 100, width 32, 2 heads, 16 positions), every weight moved off
its initial value (``w = rng.standard_normal(shape) * 0.3 + w * 0.5``, the seed derived from the case's name),
saved as ``<case>.keras`` (``model.save``; its config keeps only the constructor's arguments) or, for the
tasks, as the folder ``<case>_preset`` its ``save_to_preset`` writes (task.json, task.weights.h5 with the
head's weights, config.json and model.weights.h5 with the backbone's; no preprocessor):

* ``electra``: ``ElectraBackbone`` (embedding_dim 16, projected to the width 32);
* ``albert``: ``AlbertBackbone`` (embedding_dim 16; 3 layers in 1 group: one ``TransformerEncoder`` called
  3 times, its weights held once);
* ``albert_groups``: ``AlbertBackbone`` with 4 layers in 2 groups (layers 0-1 call group 0's encoder, 2-3
  group 1's);
* ``xlm_roberta``: ``XLMRobertaBackbone``; ``xlm_roberta_classifier``: ``XLMRobertaTextClassifier`` (3
  classes) as a preset folder;
* ``bert_masked_lm``: ``BertMaskedLM`` over a BertBackbone, as a preset folder (its ``mlm_head``, a
  ``MaskedLMHead``, reads the backbone's token embedding again);
* ``f_net``: ``FNetBackbone``;
* ``deberta_v3``: ``DebertaV3Backbone`` (bucket_size 4, so that relative distances past it are bucketed);
  ``deberta_v3_classifier``: ``DebertaV3TextClassifier`` (3 classes) over such a backbone, as a preset folder;
  ``deberta_v3_masked_lm``: ``DebertaV3MaskedLM`` over such a backbone, as a preset folder (a class attnzoo
  converts only through keras-hub's graph);
* ``roberta_masked_lm``: ``RobertaMaskedLM``, as a preset folder (its head reverses the token table inside the
  backbone's ``TokenAndPositionEmbedding``; through keras-hub's graph only).

``expected.npz`` holds each case's inputs and Keras's outputs (``predict``): ``<case>/in/<name>`` and
``<case>/out/<name>``; token ids in [1, 100) padded on the right to 12 with 0 (rows of 12, 7, 1 and 10
real tokens, ``padding_mask`` 0 at the padding), ``segment_ids`` 0/1 at real tokens, ``mask_positions`` [4,
3] positions inside each row's real tokens. The script reloads each file and checks it gives the same.
"""

from __future__ import annotations

import os
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

M = keras_hub.models
BATCH, LENGTH, VOCAB = 4, 12, 100
LENGTHS = [12, 7, 1, 10]
S = {"num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64, "max_sequence_length": 16}


def bert_masked_lm():
    return M.BertMaskedLM(M.BertBackbone(vocabulary_size=VOCAB, **S), preprocessor=None)


def xlm_roberta_classifier():
    return M.XLMRobertaTextClassifier(M.XLMRobertaBackbone(vocabulary_size=VOCAB, **S), 3, preprocessor=None)


def deberta_v3_classifier():
    return M.DebertaV3TextClassifier(
        M.DebertaV3Backbone(vocabulary_size=VOCAB, bucket_size=4, **S), 3, preprocessor=None
    )


def deberta_v3_masked_lm():
    return M.DebertaV3MaskedLM(M.DebertaV3Backbone(vocabulary_size=VOCAB, bucket_size=4, **S), preprocessor=None)


def roberta_masked_lm():
    return M.RobertaMaskedLM(M.RobertaBackbone(vocabulary_size=VOCAB, **S), preprocessor=None)


ALBERT = {**S, "vocabulary_size": VOCAB, "embedding_dim": 16}
CASES = {  # name -> (make, inputs, saved as a preset folder)
    "electra": (lambda: M.ElectraBackbone(vocab_size=VOCAB, embedding_dim=16, **S), ("segment_ids",), False),
    "albert": (lambda: M.AlbertBackbone(**{**ALBERT, "num_layers": 3}), ("segment_ids",), False),
    "albert_groups": (
        lambda: M.AlbertBackbone(**{**ALBERT, "num_layers": 4, "num_groups": 2}),
        ("segment_ids",),
        False,
    ),
    "xlm_roberta": (lambda: M.XLMRobertaBackbone(vocabulary_size=VOCAB, **S), (), False),
    "xlm_roberta_classifier": (xlm_roberta_classifier, (), True),
    "bert_masked_lm": (bert_masked_lm, ("segment_ids", "mask_positions"), True),
    "f_net": (
        lambda: M.FNetBackbone(vocabulary_size=VOCAB, **{k: v for k, v in S.items() if k != "num_heads"}),
        ("segment_ids", "no_padding_mask"),
        False,
    ),
    "deberta_v3": (lambda: M.DebertaV3Backbone(vocabulary_size=VOCAB, bucket_size=4, **S), (), False),
    "deberta_v3_classifier": (deberta_v3_classifier, (), True),
    "deberta_v3_masked_lm": (deberta_v3_masked_lm, ("mask_positions",), True),
    "roberta_masked_lm": (roberta_masked_lm, ("mask_positions",), True),
}


def inputs(rng: np.random.Generator, extra: tuple[str, ...]) -> dict[str, np.ndarray]:
    padding = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    found = {"token_ids": rng.integers(1, VOCAB, (BATCH, LENGTH)).astype("int32") * padding}
    if "no_padding_mask" not in extra:
        found["padding_mask"] = padding
    if "segment_ids" in extra:
        found["segment_ids"] = (rng.integers(0, 2, (BATCH, LENGTH)) * padding).astype("int32")
    if "mask_positions" in extra:
        found["mask_positions"] = np.stack([rng.integers(0, n, 3) for n in LENGTHS]).astype("int32")
    return found


def outputs(model, given) -> dict[str, np.ndarray]:
    out = model.predict(given, verbose=0)
    if not isinstance(out, dict):
        out = {"output": out}
    return {key: np.asarray(value) for key, value in out.items()}


def main(out: str, only: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    expected, kept = {}, os.path.join(out, "expected.npz")
    unknown = sorted(set(only) - set(CASES))
    assert not unknown, f"no case {unknown}; the cases: {sorted(CASES)}"
    if only:  # the other cases' entries as they were
        expected = {k: v for k, v in np.load(kept).items() if k.split("/")[0] not in only}
    for name, (make, extra, preset) in CASES.items():
        if only and name not in only:
            continue
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        model = make()
        for weight in model.weights:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
        given = inputs(rng, extra)
        got = outputs(model, given)
        expected.update({f"{name}/in/{k}": v for k, v in given.items()})
        expected.update({f"{name}/out/{k}": v for k, v in got.items()})
        if preset:
            path = os.path.join(out, f"{name}_preset")
            model.save_to_preset(path)
            again = type(model).from_preset(path)
        else:
            path = os.path.join(out, f"{name}.keras")
            model.save(path)
            again = keras.saving.load_model(path)
        for key, value in outputs(again, given).items():
            assert np.array_equal(value, got[key]), (name, key)
        print(f"{name}: {type(model).__name__} -> {os.path.basename(path)}, {[v.shape for v in got.values()]}")
    np.savez_compressed(kept, **expected)
    print(f"with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_encoders", sys.argv[2:])
