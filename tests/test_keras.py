"""Keras parity: keras 3 (torch backend) builds each layer with random weights, saves .weights.h5 and
legacy .h5, and runs it; attnzoo imports the files and must agree to 1e-6 on the same inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError

from .conftest import ROOT, require_data

TOL = dict(atol=1e-6, rtol=1e-6)


@pytest.fixture(scope="session")
def keras_dir(tmp_path_factory):
    try:
        import importlib.util

        have_keras = importlib.util.find_spec("keras") is not None and importlib.util.find_spec("h5py") is not None
    except ValueError:
        have_keras = False
    require_data(have_keras, "keras 3 and h5py (the test extra)")
    out = tmp_path_factory.mktemp("keras")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "keras_fixtures.py"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def fixtures(keras_dir):
    data = dict(np.load(keras_dir / "fixtures.npz"))
    cases = json.loads((keras_dir / "cases.json").read_text())["cases"]
    return {k: torch.from_numpy(v) for k, v in data.items()}, cases


def expected(arrays, case, run):
    outs = []
    i = 0
    while f"{case}/{run}/{i}" in arrays:
        outs.append(arrays[f"{case}/{run}/{i}"])
        i += 1
    return outs


RUNS = {
    "keras_dot": {
        "plain": lambda a, m: m(a["q"], a["v"], a["k"]),
        "masked": lambda a, m: m(
            a["q"], a["v"], a["k"], query_mask=a["q_mask"], value_mask=a["v_mask"], return_attention=True
        ),
        "causal": lambda a, m: m(
            a["q"], a["v"], a["k"], value_mask=a["v_mask"], use_causal_mask=True, return_attention=True
        ),
    },
    "keras_additive": {
        "plain": lambda a, m: m(a["q"], a["v"]),
        "masked": lambda a, m: m(a["q"], a["v"], query_mask=a["q_mask"], value_mask=a["v_mask"], return_attention=True),
        "causal": lambda a, m: m(a["q"], a["v"], value_mask=a["v_mask"], use_causal_mask=True, return_attention=True),
    },
    "keras_mha": {
        "plain": lambda a, m: m(a["mha_q"], a["mha_v"], a["mha_k"]),
        "masked": lambda a, m: m(
            a["mha_q"], a["mha_v"], a["mha_k"], attention_mask=a["mha_mask"], return_attention=True
        ),
        "causal": lambda a, m: m(a["mha_q"], a["mha_v"], a["mha_k"], use_causal_mask=True, return_attention=True),
    },
    "lwan": {"plain": lambda a, m: m(a["x"])},
    "keras_attn": {"plain": lambda a, m: m(a["x"])},
}

CASES = [
    "attention_dot",
    "attention_scaled",
    "attention_concat",
    "additive",
    "additive_noscale",
    "mha",
    "mha_nobias",
    "lwan",
    "keras_attn",
]


@pytest.mark.parametrize("fmt", ["weights.h5", "h5"])
@pytest.mark.parametrize("case", CASES)
def test_attnzoo_matches_keras_on_imported_weights(fixtures, keras_dir, case, fmt):
    arrays, cases = fixtures
    spec = cases[case]
    model = attnzoo.create(spec["name"], **spec["config"]).eval()  # sizes inferred from the weights
    attnzoo.keras.load_keras_weights(model, keras_dir / f"{case}.{fmt}")
    for run, call in RUNS[spec["name"]].items():
        with torch.no_grad():
            out = call(arrays, model)
        outs = list(out) if isinstance(out, tuple) else [out]
        want = expected(arrays, case, run)
        if run == "masked" and spec["name"] in ("keras_dot", "keras_additive"):
            # a masked query attends to nothing here; Keras returns scores of the padded query anyway
            want[-1] = want[-1].masked_fill(~arrays["q_mask"].bool()[..., None], 0.0)
        assert len(outs) == len(want), (case, run)
        for got, ref in zip(outs, want, strict=True):
            torch.testing.assert_close(got, ref, **TOL, msg=f"{case}/{run}")


@pytest.mark.slow
def test_convert_keras_cli_writes_a_file_attnzoo_load_rebuilds(fixtures, keras_dir, tmp_path):
    arrays, _ = fixtures
    out = tmp_path / "mha.safetensors"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo",
            "convert-keras",
            str(keras_dir / "mha.weights.h5"),
            "--model",
            "keras_mha",
            "num_heads=2",
            "key_dim=3",
            "value_dim=4",
            "output_shape=7",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    model = attnzoo.load(out).eval()
    with torch.no_grad():
        got = model(arrays["mha_q"], arrays["mha_v"], arrays["mha_k"])
    torch.testing.assert_close(got, expected(arrays, "mha", "plain")[0], **TOL)
    again = subprocess.run(proc.args, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 1 and "already exists" in again.stderr  # never overwritten unasked


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_wrong_shape_lists_what_the_file_has_and_leaves_the_model_alone(keras_dir):
    model = attnzoo.create("lwan", num_labels=4, hidden_size=8)
    before = _params(model)
    with pytest.raises(WeightsError) as err:
        attnzoo.keras.load_keras_weights(model, keras_dir / "lwan.weights.h5")
    message = str(err.value)
    assert "vars/0 [5, 8]" in message and "Wa [4, 8]" in message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_wrong_layer_name_and_wrong_kind_of_layer(keras_dir):
    model = attnzoo.create("keras_mha", num_heads=2, key_dim=3, value_dim=4, output_shape=7)
    with pytest.raises(WeightsError, match=r"(?s)no layer .nope.*multi_head_attention"):
        attnzoo.keras.load_keras_weights(model, keras_dir / "mha.h5", layer="nope")
    with pytest.raises(WeightsError, match="no layer fits"):
        attnzoo.keras.load_keras_weights(model, keras_dir / "lwan.weights.h5")
    layer = attnzoo.create("keras_dot", use_scale=True, score_mode="concat")
    with pytest.raises(WeightsError, match="missing vars/1"):  # the file has scale only
        attnzoo.keras.load_keras_weights(layer, keras_dir / "attention_scaled.weights.h5")


def test_extra_variables_are_not_silently_dropped(keras_dir):
    layer = attnzoo.create("keras_dot", use_scale=True)  # the concat file also has concat_score_weight
    with pytest.raises(WeightsError, match="no place for"):
        attnzoo.keras.load_keras_weights(layer, keras_dir / "attention_concat.h5")


def test_not_a_keras_file(tmp_path):
    bogus = tmp_path / "x.h5"
    bogus.write_text("hello")
    with pytest.raises(WeightsError, match="not an HDF5 file"):
        attnzoo.keras.load_keras_weights(attnzoo.create("lwan", num_labels=2), bogus)
    with pytest.raises(WeightsError, match="not found"):
        attnzoo.keras.load_keras_weights(attnzoo.create("lwan", num_labels=2), tmp_path / "missing.h5")


def test_mha_converts_to_and_from_torch_multihead_attention():
    from attnzoo.layers.keras_mha import mha_from_torch, mha_to_torch

    torch.manual_seed(0)
    layer = attnzoo.create("keras_mha", num_heads=4, key_dim=4, query_size=16, value_size=16, key_size=16)
    mha = mha_to_torch(layer)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5]).bool()
    ours, ours_w = layer(x, x, value_mask=mask, return_attention=True)
    theirs, theirs_w = mha(x, x, x, key_padding_mask=~mask, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours_w, theirs_w, atol=1e-6, rtol=1e-6)
    back = mha_from_torch(mha)
    torch.testing.assert_close(back(x, x, value_mask=mask), ours, atol=1e-6, rtol=1e-6)
    odd = attnzoo.create("keras_mha", num_heads=2, key_dim=3, query_size=16, value_size=16)
    with pytest.raises(ValueError, match="cannot hold"):
        mha_to_torch(odd)


# -- hostile files: refused before anything is read ------------------------------------------------------
def _hostile(path, build):
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        build(f, h5py)
    return path


def _mha_group(f, name="multi_head_attention", heads=2, key_dim=3, dim=6):
    for sub in ("query_dense", "key_dense", "value_dense"):
        g = f.create_group(f"layers/{name}/{sub}/vars")
        g["0"] = np.zeros((dim, heads, key_dim), dtype="float32")
        g["1"] = np.zeros((heads, key_dim), dtype="float32")
    g = f.create_group(f"layers/{name}/output_dense/vars")
    g["0"] = np.zeros((heads, key_dim, dim), dtype="float32")
    g["1"] = np.zeros((dim,), dtype="float32")


@pytest.mark.parametrize(
    "case, message",
    [
        ("cycle", "linked from more than one place"),
        ("shared", "linked from more than one place"),
        ("chunk_bomb", r"\[2, 2, 3\] takes 1.5 GiB to read"),
        ("soft_link", "is a soft link"),
        ("external_link", "is an external link"),
        ("strings", "not numbers"),
        ("bomb", "GiB to read, more than a Keras attention weight"),
        ("deep", "nested deeper"),
        ("legacy_missing", "not a dataset"),
    ],
)
def test_hostile_keras_files_are_refused_before_reading(tmp_path, case, message):
    def build(f, h5py):
        _mha_group(f)
        g = f["layers/multi_head_attention"]
        if case == "cycle":
            g["loop"] = f["layers"]  # a hard link back up the tree
        elif case == "shared":  # one array under two names
            g["key_dense/vars"]["2"] = g["query_dense/vars/0"]
        elif case == "chunk_bomb":  # 48 bytes of values in chunks of 1.5 GiB, which HDF5 decompresses whole
            del f["layers/multi_head_attention/query_dense/vars/0"]
            f["layers/multi_head_attention/query_dense/vars"].create_dataset(
                "0", shape=(2, 2, 3), maxshape=(None, 2, 3), dtype="float32", chunks=(2**26, 2, 3)
            )
        elif case == "soft_link":
            g["dangling"] = h5py.SoftLink("/nowhere")
        elif case == "external_link":
            g["outside"] = h5py.ExternalLink("/etc/other.h5", "/")
        elif case == "strings":
            del f["layers/multi_head_attention/query_dense/vars/0"]
            f["layers/multi_head_attention/query_dense/vars"].create_dataset("0", data=np.array([b"abc"] * 6))
        elif case == "bomb":  # a few KiB on disk, 4 GiB once read
            del f["layers/multi_head_attention/query_dense/vars/0"]
            f["layers/multi_head_attention/query_dense/vars"].create_dataset(
                "0",
                shape=(50_000_000, 2, 3),
                dtype="float32",
                chunks=(1_000_000, 2, 3),
                compression="gzip",
                fillvalue=0,
            )
        elif case == "deep":
            path = "layers/multi_head_attention" + "/g" * 100
            f.create_group(path)
        elif case == "legacy_missing":
            for key in list(f):
                del f[key]
            f.attrs["layer_names"] = [b"mha"]
            f.create_group("mha").attrs["weight_names"] = [b"mha/query/kernel:0"]

    path = _hostile(tmp_path / f"{case}.weights.h5", build)
    model = attnzoo.create("keras_mha", num_heads=2, key_dim=3)
    with pytest.raises(WeightsError, match=message) as err:
        attnzoo.keras.load_keras_weights(model, path)
    assert len(str(err.value)) < 4000


def test_a_lazy_mha_of_the_wrong_head_count_is_refused_and_nothing_is_written(tmp_path):
    path = _hostile(tmp_path / "mha.weights.h5", lambda f, h5py: _mha_group(f, heads=4, key_dim=3))
    out = tmp_path / "converted.safetensors"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo",
            "convert-keras",
            str(path),
            "--model",
            "keras_mha",
            "num_heads=2",
            "key_dim=6",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 1 and not out.exists()
    assert "query.weight needs [?, 2, 6]" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["weights.h5", "h5"])
def test_convert_keras_refuses_a_file_without_the_asked_for_parameter_free_layer(keras_dir, tmp_path, fmt):
    """keras_dot without use_scale has no weights; a file with no Attention layer still gives no keras_dot."""
    out = tmp_path / "dot.safetensors"
    proc = subprocess.run(
        [sys.executable, "-m", "attnzoo", "convert-keras", str(keras_dir / f"mha.{fmt}"), "--model", "keras_dot"]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 1 and "holds no Attention layer for KerasDotAttention" in proc.stderr
    assert not out.exists()
    fine = subprocess.run(
        [sys.executable, "-m", "attnzoo", "convert-keras", str(keras_dir / f"attention_dot.{fmt}"), "--model"]
        + ["keras_dot", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert fine.returncode == 0, fine.stderr


def test_a_file_that_does_not_fit_names_the_layer_that_matters_first_in_the_one_line_error(tmp_path):
    """The MultiHeadAttention layer whose shapes differ is reported before the layers that hold none of the
    model's variables (these are named in one clause), so the CLI's one-line cut keeps what matters."""
    from .conftest import ROOT, run_cli

    data = ROOT / "tests" / "data" / "keras2" / "mha_fully_masked.h5"
    model = attnzoo.create("keras_mha", num_heads=3, key_dim=5)
    with pytest.raises(WeightsError) as err:
        attnzoo.keras.load_keras_weights(model, data)
    message = str(err.value)
    assert message.index("multi_head_attention: query/kernel: [8, 2, 3]") < message.index("hold none of its variables")
    assert "embedding" in message.split("hold none of its variables", 1)[1].split(")")[0]
    proc = run_cli(
        "convert-keras",
        str(data),
        "--model",
        "keras_mha",
        "num_heads=3",
        "key_dim=5",
        "-o",
        str(tmp_path / "x.safetensors"),
    )
    assert (
        proc.returncode == 1
        and "multi_head_attention: query/kernel: [8, 2, 3], query.weight needs [?, 3, 5]" in proc.stderr
    )
    assert not (tmp_path / "x.safetensors").exists()
