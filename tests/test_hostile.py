"""Bad input never hurts: the classes of the hostile probe, each with a test of its own.

Masks and tensors of every variant are covered by the conformance kit (masked_values, fully_masked,
bad_inputs) and by tests/test_fuzz.py; a killed save by tests/test_save_crash.py; hostile Keras files
by tests/test_keras.py. Here: configs, files, the command line, threads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError, UnknownModelError, WeightsError

from .conftest import ROOT, run_cli, run_python


# -- configs: refused at create(), before anything is built --------------------------------------------
@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("qkv_self", dict(dropout=1.5), "probability in \\[0, 1\\)"),
        ("qkv_self", dict(dropout=float("nan")), "finite number"),
        ("laat", dict(num_labels=3, chunk_size=-1), "chunk_size must be a positive int"),
        ("laat", dict(num_labels=3, attention_size=0), "attention_size must be a positive int"),
        ("labelwise", dict(num_labels=0), "num_labels must be a positive int"),
        ("keras_mha", dict(num_heads=-2, key_dim=4), "num_heads must be a positive int"),
        ("bilstm_labelwise", dict(vocab_size=10, num_labels=3, dropout=-0.1), "probability"),
        ("cnn_bilstm_attn", dict(num_classes=3, backbone="no_such_net"), "unknown timm backbone"),
    ],
)
def test_bad_config_values_are_config_errors_naming_the_key(name, overrides, message):
    with pytest.raises(ConfigError, match=message):
        attnzoo.create(name, **overrides)


def test_non_floating_dtypes_are_refused():
    for dtype in (torch.complex64, torch.int64, torch.bool, "int8"):
        with pytest.raises(ConfigError, match="dtype must be"):
            attnzoo.create("labelwise", num_labels=3, dtype=dtype)


def test_a_model_too_large_for_the_machine_is_refused_before_allocation():
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"needs [\d,.]+ GiB for its parameters, more than the [\d,.]+ GiB"):
        attnzoo.create("labelwise_batched", num_labels=10**9, hidden_size=512)
    with pytest.raises(ConfigError, match="use labelwise_batched"):
        attnzoo.create("labelwise", num_labels=10**9)
    assert time.perf_counter() - start < 5


def test_interpolations_in_a_weights_file_stay_plain_strings(tmp_path, monkeypatch):
    from attnzoo.io.weights import encode_metadata, write_weights

    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "probs")  # were it resolved, the config would be valid
    layer = attnzoo.create("labelwise_batched", num_labels=2, hidden_size=3)
    meta = encode_metadata(
        "labelwise_batched",
        layer.attnzoo_config["factory"],
        {"num_labels": 2, "hidden_size": 3, "output": "${oc.env:ATTNZOO_TEST_SECRET}"},
    )
    path = tmp_path / "w.safetensors"
    write_weights(layer.state_dict(), path, metadata=meta)
    with pytest.raises(
        ConfigError, match=r"'output' expects 'logits' \| 'probs', got '\$\{oc.env:ATTNZOO_TEST_SECRET\}'"
    ):
        attnzoo.load(path)


def test_malformed_metadata_is_a_one_line_weights_error(tmp_path):
    from attnzoo.io.weights import write_weights

    path = tmp_path / "w.safetensors"
    write_weights({"a": torch.zeros(2)}, path, metadata={"attnzoo.name": "labelwise", "attnzoo.config": "{oops"})
    with pytest.raises(WeightsError, match="not valid JSON") as err:
        attnzoo.load(path)
    assert "\n" not in str(err.value)


def test_a_config_file_with_a_config_section_and_a_bad_key_names_the_file(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("config:\n  num_labels: 4\n")
    assert attnzoo.create("labelwise", config=good).num_labels == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_lables: 4\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'num_lables'.*in config file .*bad.yaml"):
        attnzoo.create("labelwise", config=bad)


# -- the command line ----------------------------------------------------------------------------------------
def test_a_closed_pipe_ends_quietly():
    proc = subprocess.run(
        f"{sys.executable} -m attnzoo list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        executable="/bin/bash",
    )
    assert proc.stdout.startswith("NAME") and proc.stderr == ""
    proc = subprocess.run(
        f"set -o pipefail; {sys.executable} -m attnzoo list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        executable="/bin/bash",
    )
    assert proc.returncode == 0


def test_every_error_is_one_short_line():
    for args in (
        ["info", "x" * 100_000],
        ["create", "labelwise", "num_labels=" + "9" * 50_000],
        ["create", "labelwise", "num_labels=-3"],
        ["info", "Bad Name!"],
    ):
        proc = run_cli(*args)
        assert proc.returncode in (1, 2)
        assert proc.stderr.count("\n") == 1 and len(proc.stderr) < 800, proc.stderr[:300]


def test_verify_with_no_match_and_a_non_positive_top_are_usage_errors():
    assert run_cli("verify", "nosuch").returncode == 2
    assert run_cli("check", "nosuch*").returncode == 2
    assert run_cli("predict", "g2p_seq2seq.cmudict", "hello", "--top", "0").returncode == 2


def test_predict_never_overwrites_an_attention_map_unasked(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "map.png"
    target.write_bytes(b"mine")
    proc = run_cli("predict", "g2p_seq2seq.cmudict", "hello", "--attention", str(target))
    assert proc.returncode == 2 and "already exists" in proc.stderr and proc.stdout == ""
    assert target.read_bytes() == b"mine"
    proc = run_cli("predict", "g2p_seq2seq.cmudict", "hello", "--attention", str(target), "--overwrite")
    assert proc.returncode == 0 and target.read_bytes()[:4] == b"\x89PNG"


# -- threads ---------------------------------------------------------------------------------------------
def test_eight_threads_fill_the_registry_once_without_warnings():
    proc = run_python(
        """
        import json, threading, warnings
        warnings.simplefilter("always")
        import attnzoo
        results, caught = [], []
        def work():
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                results.append(attnzoo.list_models())
                caught.extend(str(x.message) for x in w)
        threads = [threading.Thread(target=work) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        print(json.dumps({"sizes": sorted({len(r) for r in results}), "warnings": caught,
                          "problems": [p.problems for p in attnzoo.list_plugins()]}))
    """.replace("\n        ", "\n"),
        env={"ATTNZOO_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    out = json.loads(proc.stdout)
    assert out == {"sizes": [len(attnzoo.list_models())], "warnings": [], "problems": [[]]}, proc.stderr


def test_flipping_switches_while_threads_create_never_loses_a_builtin():
    proc = run_python(
        """
        import os, threading, attnzoo
        errors, sizes, stop = [], set(), threading.Event()
        def create():
            while not stop.is_set():
                try:
                    attnzoo.create("labelwise", num_labels=3)
                    sizes.add(len(attnzoo.list_models(provider="attnzoo")))
                except Exception as e:
                    errors.append(repr(e))
        threads = [threading.Thread(target=create) for _ in range(8)]
        [t.start() for t in threads]
        for i in range(200):
            os.environ["ATTNZOO_BLOCK_PLUGINS"] = "x" if i % 2 else "y,z"
        stop.set(); [t.join() for t in threads]
        print(len(errors), sorted(sizes))
    """.replace("\n        ", "\n"),
        env={"ATTNZOO_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    count, sizes = proc.stdout.split(" ", 1)
    assert count == "0" and sizes.strip() == f"[{len(attnzoo.list_models(provider='attnzoo'))}]", (
        proc.stdout + proc.stderr
    )


def test_unknown_names_stay_key_errors_with_short_messages():
    with pytest.raises(UnknownModelError) as err:
        attnzoo.model_info("q" * 10_000)
    assert len(str(err.value)) < 400 and isinstance(err.value, KeyError)


def test_an_empty_pretrained_tag_is_refused_not_read_as_the_default():
    import attnzoo
    from attnzoo.errors import ConfigError

    from .conftest import run_cli

    with pytest.raises(ConfigError, match="names no tag"):
        attnzoo.create("bilstm_labelwise", pretrained="")
    proc = run_cli("create", "bilstm_labelwise", "--pretrained=")
    assert proc.returncode != 0 and "names no tag" in proc.stderr


@pytest.mark.parametrize("override", ["=5", "train.=3", "train..epochs=2", "epochs"])
def test_a_malformed_training_override_is_refused(override):
    from .conftest import run_cli

    proc = run_cli("train", "tiny_wordnet", override, "--output", "/nonexistent/never")
    assert proc.returncode != 0 and "expected section.key=value" in proc.stderr, proc.stderr


def test_a_closed_standard_output_is_no_internal_error():
    import subprocess
    import sys

    from .conftest import ROOT

    command = [sys.executable, "-m", "attnzoo", "list"]
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.returncode == 0
    closed = subprocess.run(
        f"{sys.executable} -m attnzoo list >&-", shell=True, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert closed.returncode == 0 and "internal error" not in closed.stderr
    assert "standard output is closed" in closed.stderr


@pytest.mark.parametrize(
    "text",
    ["model: [unclosed", "- a\n- list\n", "model: !!python/object/apply:os.system ['echo hi']\n", "\xff\xfe bad"],
)
def test_a_broken_recipe_file_is_a_config_error_not_an_internal_error(tmp_path, text):
    from .conftest import run_cli

    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    proc = run_cli("train", str(recipe), "--output", str(tmp_path / "run"))
    assert proc.returncode in (1, 2) and "internal error" not in proc.stderr, proc.stderr
    assert "recipe.yaml" in proc.stderr and "hi\n" not in proc.stdout
