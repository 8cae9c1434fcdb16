"""Make the keras-hub task preset folders of tests/test_keras_hub_tasks.py with keras 3 (torch backend) and
keras-hub (run once; the files are committed, keras-hub is no test dependency):

    KERAS_BACKEND=torch python tests/keras_hub_task_fixtures.py tests/data/keras_hub_models

``<case>_preset/`` for ``distil_bert_classifier`` and ``roberta_classifier`` (BERT's classifier preset, with
its WordPiece tokenizer, is tests/data/keras_hub_lm/bert/classifier_preset): the task of
``<case>.keras`` (made by tests/keras_hub_models_fixtures.py; its weights moved off their initial values,
its preprocessor None) reloaded with ``keras.saving.load_model`` and written by ``task.save_to_preset``:
task.json, task.weights.h5 (the head's weights), config.json and model.weights.h5 (the backbone's). The
script checks that ``keras_hub.models.TextClassifier.from_preset`` of the folder gives ``expected.npz``'s
``<case>/out/logits`` on ``<case>/in/*`` again (the logits Keras gave when the case was made).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

TASKS = ("distil_bert_classifier", "roberta_classifier")


def main(out: str) -> None:
    expected = np.load(os.path.join(out, "expected.npz"))
    for case in TASKS:
        task = keras.saving.load_model(os.path.join(out, f"{case}.keras"))
        folder = os.path.join(out, f"{case}_preset")
        task.save_to_preset(folder)
        again = keras_hub.models.TextClassifier.from_preset(folder)
        given = {key.split("/")[-1]: expected[key] for key in expected.files if key.startswith(f"{case}/in/")}
        got = np.asarray(again.predict(given, verbose=0))
        gap = float(np.abs(got - expected[f"{case}/out/logits"]).max())
        assert gap < 1e-6, (case, gap)
        print(f"{case}_preset: {sorted(os.listdir(folder))}, from_preset within {gap:.1e} of the logits")
    print(f"with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_models")
