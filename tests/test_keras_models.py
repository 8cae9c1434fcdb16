"""Whole Keras models: a .keras / .h5 file converts without Keras and predicts what Keras predicts.

Keras 3 (torch backend, tests/keras_oracle.py in a subprocess) is the oracle: it builds each model,
moves its weights off their initial values, saves it, and runs it on batches padded on the right, on
the left, in the middle, fully and not at all. attnzoo converts the file and must agree within 1e-5
wherever Keras's output is finite; where Keras divides 0 by 0 (a fully masked average), attnzoo's
output is finite. Random models come from a grammar drawn by hypothesis; named models cover the
seeds' shapes and the rest of the coverage table. Keras 2 files, made once with tf_keras
(tests/keras2_fixtures.py), are committed under tests/data/keras2 with their expected outputs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError

from .conftest import ROOT, require_data, run_python

KERAS2 = ROOT / "tests" / "data" / "keras2"
ATOL = RTOL = 1e-5


class Oracle:
    """The Keras subprocess: one JSON request per line, one answer per line."""

    def __init__(self) -> None:
        env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "keras_oracle.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def ask(self, **request) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the Keras oracle exited"
        answer = json.loads(line)
        assert answer["ok"], answer.get("traceback", answer)
        return answer

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="session")
def oracle():
    import importlib.util

    have = importlib.util.find_spec("keras") is not None and importlib.util.find_spec("h5py") is not None
    require_data(have, "keras 3 and h5py (the test extra)")
    keras = Oracle()
    yield keras
    keras.close()


def outputs_of(model, io: dict, batch: int) -> tuple[list[torch.Tensor], list[np.ndarray]]:
    inputs = []
    i = 0
    while f"in/{batch}/{i}" in io:
        inputs.append(torch.from_numpy(io[f"in/{batch}/{i}"]))
        i += 1
    with torch.no_grad():
        got = model(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    want = []
    k = 0
    while f"out/{batch}/{k}" in io:
        want.append(io[f"out/{batch}/{k}"])
        k += 1
    return got, want


def assert_matches_keras(model, folder: Path, what: str) -> None:
    io = dict(np.load(folder / "io.npz"))
    batch = 0
    while f"in/{batch}/0" in io:
        got, want = outputs_of(model, io, batch)
        assert len(got) == len(want), f"{what}: {len(got)} outputs, Keras has {len(want)}"
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            g = g.numpy()
            assert g.shape == w.shape, f"{what}, output {k}: shape {g.shape}, Keras {w.shape}"
            finite = np.isfinite(w)
            assert np.isfinite(g).all(), f"{what}, output {k}: non-finite values"
            diff = np.abs(g[finite] - w[finite])
            bound = ATOL + RTOL * np.abs(w[finite])
            assert (diff <= bound).all(), (
                f"{what}, batch {batch}, output {k}: max difference {diff.max():.2e} from Keras "
                f"(at {np.unravel_index(np.argmax(diff - bound), diff.shape)})"
            )
        batch += 1


def convert_both(oracle, tmp_path: Path, **request) -> Path:
    answer = oracle.ask(dir=str(tmp_path), **request)
    assert [Path(f).name for f in answer["files"]] == ["model.keras", "model.h5"]
    return tmp_path


# -- random models from a grammar ---------------------------------------------------------------------------
CELLS = st.sampled_from(["lstm", "gru", "simple_rnn"])


@st.composite
def rnn_block(draw, kind="rnn"):
    block = {"type": kind, "cell": draw(CELLS), "units": draw(st.integers(2, 5))}
    block["go_backwards"] = kind == "rnn" and draw(st.booleans())  # Bidirectional sets its own
    if block["cell"] == "gru":
        block["reset_after"] = draw(st.booleans())
    if block["cell"] != "simple_rnn" and draw(st.booleans()):
        block["recurrent_activation"] = draw(st.sampled_from(["hard_sigmoid", "tanh"]))
    if kind == "bidirectional":
        block["merge_mode"] = draw(st.sampled_from(["concat", "sum", "mul", "ave"]))
    return block


SIMPLE_BLOCKS = st.one_of(
    rnn_block(),
    rnn_block("bidirectional"),
    st.fixed_dictionaries(
        {"type": st.just("dense"), "units": st.integers(2, 6), "activation": st.sampled_from(["relu", "tanh", "gelu"])}
    ),
    st.fixed_dictionaries({"type": st.just("time_distributed"), "units": st.integers(2, 5)}),
    st.fixed_dictionaries(
        {
            "type": st.just("conv1d"),
            "filters": st.integers(2, 5),
            "kernel": st.integers(1, 3),
            "padding": st.sampled_from(["same", "causal"]),
            "dilation": st.integers(1, 2),
        }
    ),
    st.just({"type": "layer_norm"}),
    st.just({"type": "dropout"}),
    st.fixed_dictionaries(
        {"type": st.just("activation"), "activation": st.sampled_from(["softsign", "selu", "swish"])}
    ),
    # the 1-D rows of keras-io's models, each keeping the length (so branches still merge)
    st.fixed_dictionaries(
        {"type": st.sampled_from(["separable1d", "depthwise1d", "conv1d_transpose"]), "filters": st.integers(2, 4)}
        | {"kernel": st.integers(1, 3), "multiplier": st.integers(1, 2)}
    ),
    st.sampled_from(
        [{"type": "resample"}, {"type": "pad_crop"}, {"type": "normalization"}]
        + [{"type": "rescaling", "scale": scale, "offset": -0.3} for scale in (0.5, 2.0)]
    ),
)
FUNCTIONAL_BLOCKS = st.one_of(
    SIMPLE_BLOCKS,
    st.fixed_dictionaries(
        {"type": st.just("mha"), "heads": st.integers(1, 2), "key_dim": st.integers(2, 4), "residual": st.booleans()}
    ),
    st.fixed_dictionaries(
        {"type": st.just("attention"), "use_scale": st.booleans(), "score_mode": st.sampled_from(["dot", "concat"])}
    ),
    st.just({"type": "additive"}),
)


@st.composite
def recipes(draw):
    form = draw(st.sampled_from(["functional", "sequential"]))
    if draw(st.booleans()):
        source = {"kind": "tokens", "vocab": 12, "embed": draw(st.integers(2, 6)), "mask_zero": draw(st.booleans())}
    else:
        source = {"kind": "features", "dim": draw(st.integers(2, 5)), "masking": draw(st.booleans())}
    blocks = SIMPLE_BLOCKS if form == "sequential" else FUNCTIONAL_BLOCKS
    branches = [draw(st.lists(blocks, min_size=1, max_size=3))]
    recipe = {"form": form, "input": source, "branches": branches}
    if form == "functional" and draw(st.booleans()):
        # two branches ending in the same width, merged
        width = draw(st.integers(2, 4))
        second = draw(st.lists(blocks, min_size=1, max_size=2))
        for branch in (branches[0], second):
            branch.append({"type": "dense", "units": width, "activation": "linear"})
        branches.append(second)
        recipe["merge"] = draw(
            st.sampled_from(["add", "concatenate", "multiply", "average", "maximum", "minimum", "subtract"])
        )
    reduce = draw(
        st.sampled_from(["average", "max", "last_rnn"] + (["last_step", "none"] if form == "functional" else []))
    )
    recipe["reduce"] = reduce
    if reduce == "last_rnn":
        recipe["reduce_rnn"] = draw(rnn_block())
    recipe["head"] = {
        "units": draw(st.integers(1, 3)),
        "activation": draw(st.sampled_from(["softmax", "sigmoid", None])),
    }
    recipe["sequence_output"] = form == "functional" and reduce != "none" and draw(st.booleans())
    return recipe


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recipe=recipes(), seed=st.integers(0, 2**16))
def test_random_models_predict_what_keras_predicts(oracle, tmp_path_factory, recipe, seed):
    folder = convert_both(
        oracle, tmp_path_factory.mktemp("grammar"), recipe=recipe, seed=seed, batches=[[5, 6], [3, 2]]
    )
    for name in ("model.keras", "model.h5"):
        assert_matches_keras(convert_keras_model(folder / name), folder, f"{name} of {recipe}")


# -- named models: the seeds' shapes and the coverage table --------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "seed001",
        "seed003",
        "shared_and_nested",
        "two_inputs_two_outputs",
        "transformer",
        "states",
        "vision",
        "shapes_and_merges",
    ],
)
def test_named_models_predict_what_keras_predicts_from_both_files(oracle, tmp_path, name):
    batches = [[5, 7], [1, 4]] if name not in ("seed001", "vision", "shapes_and_merges") else [[3, 1], [1, 1]]
    folder = convert_both(oracle, tmp_path, name=name, seed=1, batches=batches)
    for file in ("model.keras", "model.h5"):
        assert_matches_keras(convert_keras_model(folder / file), folder, f"{name} ({file})")


def _label_wise(config, weights):
    """What the example plugin registers for its LabelWiseAttention (seed 004): attnzoo's lwan."""
    from attnzoo.keras import load_keras_arrays

    labels, hidden = weights[0].shape
    layer = attnzoo.create("lwan", num_labels=labels, hidden_size=hidden, output="probs")
    return load_keras_arrays(layer, weights)


def test_seed004_converts_with_a_custom_layer_converter_and_reloads(oracle, tmp_path):
    folder = convert_both(oracle, tmp_path / "keras", name="seed004", seed=2, batches=[[4, 6]])
    with pytest.raises(
        UnsupportedKerasLayerError, match=r"label_wise_attention(_\d+)? \(attnzoo_example>LabelWiseAttention"
    ):
        convert_keras_model(folder / "model.keras")
    model = convert_keras_model(
        folder / "model.keras", custom_layers={"attnzoo_example>LabelWiseAttention": _label_wise}
    )
    assert_matches_keras(model, folder, "seed004")
    saved = attnzoo.save(model, tmp_path / "saved")
    assert_matches_keras(attnzoo.load(saved), folder, "seed004 reloaded")


def test_an_unsupported_model_lists_every_layer_it_cannot_convert(oracle, tmp_path):
    folder = convert_both(oracle, tmp_path, name="unsupported", seed=0, batches=[[2, 3]])
    for file in ("model.keras", "model.h5"):
        with pytest.raises(UnsupportedKerasLayerError) as caught:
            convert_keras_model(folder / file)
        text = str(caught.value)
        assert "2 layer(s) cannot be converted" in text and "nothing was converted" in text
        assert re.search(r"lambda(_\d+)? \(Lambda", text)  # Keras numbers default names per process
        assert "mystery (attnzoo_tests>Unconvertible" in text and "[4, 2]" in text  # name, class, shapes
        assert "attnzoo_register_keras_layers" in text
        assert [p["layer"].split("_")[0] for p in caught.value.layers] == ["lambda", "mystery"]


@pytest.mark.slow
def test_a_converted_model_saves_and_loads_without_keras_installed(oracle, tmp_path):
    folder = convert_both(oracle, tmp_path / "k", name="transformer", seed=3, batches=[[5, 6]])
    code = f"""
import sys
for blocked in ("keras", "tensorflow", "tf_keras"):
    sys.modules[blocked] = None  # `import keras` now raises ImportError, as where it is not installed
import numpy as np, torch, attnzoo
from attnzoo.keras import convert_keras_model
model = convert_keras_model({str(folder / "model.keras")!r})
attnzoo.save(model, {str(tmp_path / "saved")!r})
again = attnzoo.load({str(tmp_path / "saved")!r})
io = dict(np.load({str(folder / "io.npz")!r}))
with torch.no_grad():
    a, b = model(torch.from_numpy(io["in/0/0"])), again(torch.from_numpy(io["in/0/0"]))
assert torch.equal(a, b)
want = io["out/0/0"]
finite = np.isfinite(want)  # a fully padded row averages 0 / 0 in Keras
print(float(np.abs(a.numpy()[finite] - want[finite]).max()))
loaded = [m for m, v in sys.modules.items() if v is not None and m.split(".")[0] in ("keras", "tensorflow", "tf_keras")]
print(sorted(loaded))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    diff, modules = proc.stdout.strip().splitlines()
    assert float(diff) < 1e-5
    assert modules == "[]"


# -- Keras 2 files, made once with tf_keras ------------------------------------------------------------------
def _keras2_cases() -> list[str]:
    return sorted(p.stem for p in KERAS2.glob("*.h5"))


@pytest.mark.parametrize("case", _keras2_cases())
def test_keras2_files_predict_what_tf_keras_predicted(case):
    expected = dict(np.load(KERAS2 / "expected.npz"))
    model = convert_keras_model(KERAS2 / f"{case}.h5")
    batch = 0
    while f"{case}/{batch}/in/0" in expected:
        inputs = []
        while f"{case}/{batch}/in/{len(inputs)}" in expected:
            inputs.append(torch.from_numpy(expected[f"{case}/{batch}/in/{len(inputs)}"]))
        with torch.no_grad():
            got = model(*inputs)
        got = list(got) if isinstance(got, tuple) else [got]
        for k, g in enumerate(got):
            want = expected[f"{case}/{batch}/out/{k}"]
            finite = np.isfinite(want)
            np.testing.assert_allclose(g.numpy()[finite], want[finite], atol=ATOL, rtol=RTOL, err_msg=f"{case} {k}")
        batch += 1
    assert batch > 0


def test_keras2_fixtures_cover_the_version_specific_semantics():
    cases = set(_keras2_cases())
    assert {"hard_sigmoid_lstm", "gru_reset_before", "masked_bidirectional", "mha_fully_masked"} <= cases
    report = convert_keras_model(KERAS2 / "hard_sigmoid_lstm.h5").keras_report.to_text()
    assert "Keras 2 hard_sigmoid" in report and "exact step loop" in report
    config = json.loads(__import__("h5py").File(KERAS2 / "masked_bidirectional.h5").attrs["model_config"])
    assert '"time_major"' in json.dumps(config)  # the key keras 3 cannot load, read here


@pytest.mark.slow
def test_seed004_converts_through_an_installed_plugin_hook(oracle, tmp_path):
    """The example plugin, pip-installed, registers its Keras layer through attnzoo_register_keras_layers."""
    from .test_plugins import EXAMPLE, _pip_install
    from .test_plugins import run as run_with_site

    folder = convert_both(oracle, tmp_path / "keras", name="seed004", seed=5, batches=[[4, 6]])
    site = tmp_path / "site"
    _pip_install([EXAMPLE], site)
    proc = run_with_site(
        site,
        f"""
        import numpy as np, torch, attnzoo
        from attnzoo.keras import convert_keras_model
        model = convert_keras_model({str(folder / "model.keras")!r})
        print(model.keras_report.to_text())
        attnzoo.save(model, {str(tmp_path / "saved")!r})
        io = dict(np.load({str(folder / "io.npz")!r}))
        with torch.no_grad():
            got = attnzoo.load({str(tmp_path / "saved")!r})(torch.from_numpy(io["in/0/0"]))
        print("max", float(np.abs(got.numpy() - io["out/0/0"]).max()))
        """,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "registered by example for attnzoo_example>LabelWiseAttention" in proc.stdout
    assert float(proc.stdout.split("max ")[-1]) < 1e-5


def test_a_stateful_rnn_is_refused_by_name(oracle, tmp_path):
    folder = convert_both(oracle, tmp_path, name="stateful", seed=0, batches=[[2, 3]])
    with pytest.raises(UnsupportedKerasLayerError, match=r"lstm(_\d+)? \(LSTM.*stateful=True"):
        convert_keras_model(folder / "model.keras")


# -- the command line ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_converts_a_whole_model_into_a_folder_that_loads(oracle, tmp_path):
    from .conftest import run_cli

    folder = convert_both(oracle, tmp_path / "k", name="seed003", seed=4, batches=[[3, 5]])
    out = tmp_path / "runs" / "seq2seq"
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    assert "checked against Keras on padded inputs" in proc.stdout, proc.stdout
    assert re.search(r"lstm(_\d+)? \(LSTM\) -> recurrent", proc.stdout)  # Keras numbers names per process
    assert_matches_keras(attnzoo.load(out), folder, "seed003 from the CLI")
    again = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(out))
    assert again.returncode == 1 and "already holds a saved model" in again.stderr  # nothing replaced unasked
    wrong = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(tmp_path / "x.safetensors"))
    assert wrong.returncode == 2 and "saved as a folder" in wrong.stderr
    bench = run_cli("bench", str(out), "--batch", "3", "--seq", "5", "--rounds", "1", "--no-memory", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)[0]["median_ms"] > 0


@pytest.mark.slow
def test_cli_check_names_the_first_layer_that_differs_and_writes_nothing(oracle, tmp_path):
    """keras 3's torch backend counts the padding of an uneven 'same' average window (TensorFlow and attnzoo
    do not): a real divergence, which --check must report by layer."""
    from .conftest import run_cli

    folder = convert_both(oracle, tmp_path / "k", name="uneven_same_average_pool", seed=0, batches=[[2, 6]])
    out = tmp_path / "out"
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(out), "--check")
    assert proc.returncode == 1
    assert re.search(r"first layer that differs: average_pooling1d(_\d+)? ", proc.stderr), proc.stderr
    assert "nothing was written" in proc.stderr
    assert not out.exists()


def test_cli_refuses_an_unsupported_model_and_writes_nothing(oracle, tmp_path):
    from .conftest import run_cli

    folder = convert_both(oracle, tmp_path / "k", name="unsupported", seed=0, batches=[[2, 3]])
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "mystery" in proc.stderr and "(Lambda" in proc.stderr
    assert not (tmp_path / "out").exists()


# -- files a hostile user hands over ------------------------------------------------------------------------
def _rewrite_config(source: Path, target: Path, edit) -> Path:
    import zipfile

    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return target


def test_hostile_keras_model_files_are_refused_with_one_clear_error(oracle, tmp_path):
    from attnzoo.errors import WeightsError

    folder = convert_both(oracle, tmp_path / "k", name="seed003", seed=1, batches=[[2, 3]])
    (tmp_path / "text.keras").write_text("not a model")
    with pytest.raises(WeightsError, match="not a Keras model file"):
        convert_keras_model(tmp_path / "text.keras")

    def dense_units(config):
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "Dense":
                layer["config"]["units"] += 1
                return

    edited = _rewrite_config(folder / "model.keras", tmp_path / "units.keras", dense_units)
    with pytest.raises(UnsupportedKerasLayerError, match=r"config says units=\d+ but the kernel has"):
        convert_keras_model(edited)

    def later_input(config):
        layers = config["config"]["layers"]
        layers.append(layers.pop(1))  # an Embedding moved after the layers that read it

    with pytest.raises(WeightsError, match="comes later in the config or does not exist"):
        convert_keras_model(_rewrite_config(folder / "model.keras", tmp_path / "order.keras", later_input))

    def no_layers(config):
        config["config"]["layers"] = "nothing"

    with pytest.raises(WeightsError, match="has no layer list"):
        convert_keras_model(_rewrite_config(folder / "model.keras", tmp_path / "nolayers.keras", no_layers))

    import h5py

    with h5py.File(tmp_path / "weights_only.h5", "w") as f:
        f.attrs["layer_names"] = [b"dense"]
    with pytest.raises(WeightsError, match="holds weights only"):
        convert_keras_model(tmp_path / "weights_only.h5")


def test_a_saved_graph_cannot_make_loading_reach_the_network(oracle, tmp_path):
    """A zoo node in a saved folder's config names a registered layer; a hub name or a tag is refused."""
    import yaml

    from attnzoo.errors import ConfigError

    folder = convert_both(oracle, tmp_path / "k", name="seed003", seed=1, batches=[[2, 3]])
    saved = attnzoo.save(convert_keras_model(folder / "model.keras"), tmp_path / "saved")
    record = yaml.safe_load((saved / "config.yaml").read_text())
    node = next(spec for spec in record["config"]["graph"]["layers"].values() if spec["op"] == "zoo")
    node["model"] = "hf-hub:someone/something"
    with pytest.raises(ConfigError, match="must be a registered layer's name"):
        attnzoo.create("keras_model", config=record["config"])


@pytest.mark.slow
def test_cli_check_says_when_keras_itself_cannot_load_a_keras2_file(tmp_path):
    """keras 3 refuses Keras 2 .h5 files with an LSTM ("time_major"); attnzoo converts them, and --check says
    there is no Keras to compare with rather than passing silently: the folder is written, the check marked
    as not run, in the report and in --json."""
    from .conftest import run_cli

    file = str(KERAS2 / "hard_sigmoid_lstm.h5")
    proc = run_cli("convert-keras", file, "-o", str(tmp_path / "checked"), "--check")
    assert proc.returncode == 0, proc.stderr
    assert "not checked: Keras" in proc.stdout and "cannot load" in proc.stdout and "time_major" in proc.stdout
    assert "--reference FILE.npz" in proc.stdout and (tmp_path / "checked" / "config.yaml").exists()
    proc = run_cli("convert-keras", file, "-o", str(tmp_path / "json"), "--check", "--json")
    check = json.loads(proc.stdout)["check"]
    assert check["ran"] is False and "time_major" in check["reason"] and "outputs" not in check
