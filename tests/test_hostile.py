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


@pytest.mark.slow
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


# -- issue 40: what the hostile probes still found ------------------------------------------------------------
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_a_billion_laughs_config_or_recipe_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """omegaconf before 2.4 expands every alias (the probe's hang); 2.4 stops at its own limit with its own
    message: either way attnzoo refuses the file first, saying why. A few aliases stay fine."""
    monkeypatch.setenv("OMEGACONF_MAX_YAML_EXPANDED_NODES", str(10**9))  # as omegaconf 2.3: no limit of its own
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml: its aliases \(\*name\) expand into more than 100,000"):
        attnzoo.create("labelwise", num_labels=3, config=bomb)
    assert time.perf_counter() - start < 10
    proc = run_cli("train", str(bomb), "--output", str(tmp_path / "run"))
    assert proc.returncode == 1 and "recipe bomb.yaml: its aliases" in proc.stderr, proc.stderr
    endless = tmp_path / "endless.yaml"
    endless.write_text("num_labels: &n [*n]\n")
    with pytest.raises(ConfigError, match="its aliases"):
        attnzoo.create("labelwise", config=endless)
    fine = tmp_path / "fine.yaml"
    fine.write_text("config: &c {num_labels: 4}\nname: labelwise\n")
    assert attnzoo.create("labelwise", config=fine).num_labels == 4


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64, torch.bool])
def test_a_weights_file_of_another_kind_of_number_is_refused_naming_the_tensors(tmp_path, dtype):
    """load_state_dict copies a complex tensor into a real parameter (its real part, or the parameter
    turns complex with assign=True) and refuses an int64 one in its own words; a float16 file converts."""
    from attnzoo.io.weights import encode_metadata, write_weights

    layer = attnzoo.create("labelwise_batched", num_labels=2, hidden_size=3)
    meta = encode_metadata("labelwise_batched", layer.attnzoo_config["factory"], layer.attnzoo_config["config"])
    path = tmp_path / "w.safetensors"
    write_weights({k: v.to(dtype) for k, v in layer.state_dict().items()}, path, metadata=meta)
    shown = str(dtype).removeprefix("torch.")
    with pytest.raises(
        WeightsError, match=rf"numbers of another kind: .*Wa is {shown} in the file, float32 in the model"
    ):
        attnzoo.load(path)
    with pytest.raises(WeightsError, match="numbers of another kind"):
        attnzoo.create("labelwise_batched", weights=path)
    half = tmp_path / "half.safetensors"
    write_weights({k: v.half() for k, v in layer.state_dict().items()}, half, metadata=meta)
    assert attnzoo.load(half).Wa.dtype == torch.float32


def _edited_keras2_file(tmp_path, edit):
    """tests/data/keras2/sequential.h5 (Embedding, GRU, Dense; written by tf_keras), edited by ``edit``."""
    import shutil

    h5py = pytest.importorskip("h5py")
    path = tmp_path / "edited.h5"
    shutil.copy(ROOT / "tests" / "data" / "keras2" / "sequential.h5", path)
    with h5py.File(path, "r+") as f:
        edit(f["model_weights"], h5py)
    return path


def test_a_keras_file_whose_layer_group_links_to_itself_is_refused_by_convert_and_the_cli(tmp_path):
    from attnzoo.keras import convert_keras_model

    def loop(weights, h5py):
        weights["dense_2"]["again"] = weights["dense_2"]  # the layer's group holds itself

    path = _edited_keras2_file(tmp_path, loop)
    with pytest.raises(WeightsError, match=r"/model_weights/dense_2 is linked from more than one place"):
        convert_keras_model(path)
    proc = run_cli("convert-keras", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "linked from more than one place" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_keras_dataset_read_in_huge_chunks_is_refused_from_the_file_metadata(tmp_path):
    """HDF5 decompresses a chunk whole: a 2-value bias stored in one 1.5 GiB gzip chunk took that much memory
    (a 4 GiB chunk aborted the process with std::bad_alloc). The size comes from the metadata, before any
    read; an unrelated layer's dataset is never read at all."""
    from attnzoo.keras import convert_keras_model

    def chunked(weights, h5py):
        group = weights["dense_2"]["dense_2"]
        del group["bias:0"]  # no values written: the chunk stays unallocated here, and the test stays small
        group.create_dataset("bias:0", shape=(2,), maxshape=(None,), dtype="float32", chunks=(3 * 2**27,))
        junk = weights.create_group("junk")  # a layer of the file that the model does not have
        junk.create_dataset("w", shape=(4,), maxshape=(None,), dtype="float32", chunks=(2**30 - 1,))

    path = _edited_keras2_file(tmp_path, chunked)
    with pytest.raises(WeightsError, match=r"bias:0 \[2\] takes 1.5 GiB to read, more than one variable"):
        convert_keras_model(path)

    def unrelated_only(weights, h5py):
        junk = weights.create_group("junk")
        junk.create_dataset("w", shape=(4,), maxshape=(None,), dtype="float32", chunks=(2**30 - 1,))

    assert convert_keras_model(_edited_keras2_file(tmp_path, unrelated_only)) is not None


def test_an_attention_map_onto_a_folder_is_a_usage_error_even_with_overwrite(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "map.png"
    folder.mkdir()
    proc = run_cli("predict", "bilstm_labelwise", "a dog", "--attention", str(folder), "--overwrite")
    assert proc.returncode == 2 and "is a folder; give the file to draw into" in proc.stderr, proc.stderr
    assert "Errno" not in proc.stderr and folder.is_dir()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: attnzoo.load(123), r"load\(\) .* takes a path \(a str or pathlib.Path\), got int"),
        (lambda: attnzoo.list_models(123), "list_models takes fnmatch patterns: a string or a list of them"),
        (lambda: attnzoo.list_models("*", [None]), "list_models takes fnmatch patterns"),
        (lambda: attnzoo.create("labelwise", num_labels=2, weights=123), r"weights= .* takes a path"),
        (lambda: attnzoo.predict("bilstm_labelwise", None), "predict takes a text .* got NoneType"),
        (lambda: attnzoo.predict("bilstm_labelwise", [1, 2]), "predict takes a text .* something else"),
        (
            lambda: attnzoo.load(ROOT / "weights" / "bilstm_labelwise-wordnet.safetensors", sha256=123),
            "sha256 must be a hex digest string",
        ),
        (lambda: attnzoo.export(attnzoo.create("laat", num_labels=2), 123), r"export\(model, path\) .* got int"),
        (lambda: attnzoo.predict("bilstm_labelwise", "a dog", threshold="x"), "threshold must be a probability"),
    ],
)
def test_arguments_of_the_wrong_type_are_config_errors_not_the_standard_librarys(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_a_config_value_json_cannot_hold_is_named_when_saving(tmp_path):
    layer = attnzoo.create("labelwise_batched", num_labels=2, hidden_size=3)
    layer.attnzoo_config["config"]["output"] = {1, 2}  # a set: what json.dumps refuses with a TypeError
    with pytest.raises(ConfigError, match=r"its config's 'output' is set .* which a weights file cannot hold"):
        attnzoo.save(layer, tmp_path / "saved")
    assert not (tmp_path / "saved").exists()


@pytest.mark.slow  # a CLI subprocess of 10-13 s: the README's test command stays within its 10 minutes
def test_an_override_the_recipe_has_no_key_for_is_a_usage_error(tmp_path):
    for override, message in (
        ("=5", "expected section.key=value"),
        ("train.epoch=1", "unknown key train.epoch; did you mean train.epochs"),
    ):
        proc = run_cli("train", "tiny_wordnet", override, "--output", str(tmp_path / "run"))
        assert proc.returncode == 2 and "usage error" in proc.stderr and message in proc.stderr, proc.stderr
    broken = tmp_path / "broken.yaml"  # the recipe file's own mistake stays a failure (exit 1)
    broken.write_text("model: bilstm_labelwise\ntag: x\ntask: {name: wordnet}\ntrain: {epoch: 1}\n")
    proc = run_cli("train", str(broken), "--output", str(tmp_path / "run"))
    assert proc.returncode == 1 and "unknown key train.epoch" in proc.stderr, proc.stderr


def test_a_non_positive_decoding_length_is_raised_where_the_user_called():
    """The traceback of generate(max_len=0) ends in generate itself, not in the helper that words it."""
    import traceback

    model = attnzoo.create("g2p_seq2seq", num_letters=8, num_phonemes=6)
    cache_owner = attnzoo.create("mha", embed_dim=8, num_heads=2)
    for call, message in (
        (lambda: model.generate(torch.tensor([[3, 4, 5]]), max_len=0), "max_len must be a positive int, got 0"),
        (lambda: model.generate(torch.tensor([[3, 4]]), beam_size=-1), "beam_size must be a positive int"),
        (lambda: cache_owner.new_cache(0), "batch_size must be a positive int"),
    ):
        with pytest.raises(ValueError, match=message) as err:
            call()
        last = traceback.extract_tb(err.value.__traceback__)[-1]
        assert not last.filename.endswith("layers/core.py"), last


def test_a_tiny_checkpoint_whose_strides_claim_terabytes_is_refused_before_allocating(tmp_path):
    """A few KB of pickle: tensors expanded from one value (stride 0) that claim 10^6 x 10^6 values."""
    path = tmp_path / "stride0.pth"
    torch.save({"embed.weight": torch.zeros(1).expand(10**6, 10**6), "U.weight": torch.zeros(3)}, path)
    assert path.stat().st_size < 8000
    from attnzoo.interop.convert import read_checkpoint

    with pytest.raises(WeightsError, match=r"'embed.weight' claims \[1000000, 1000000\] values .* storage of 4 bytes"):
        read_checkpoint(path)
    proc = run_cli("convert-checkpoint", str(path), "--from", "caml", "--model", "conv_caml", "-o", str(tmp_path / "o"))
    assert proc.returncode == 1 and "claims [1000000, 1000000]" in proc.stderr and "internal error" not in proc.stderr
    small = tmp_path / "small.pth"  # a modest expanded buffer (position ids saved as a view) still reads
    torch.save({"position_ids": torch.arange(8).expand(1, 8), "w": torch.ones(2, 2)}, small)
    assert read_checkpoint(small)["position_ids"].shape == (1, 8)


@pytest.mark.parametrize("flags", [["--batch", "1000000000"], ["--seq", "2000000000"]])
def test_export_at_sizes_this_machine_cannot_hold_is_refused_before_allocating(tmp_path, flags):
    started = time.perf_counter()
    proc = run_cli("export", "labelwise", "-o", str(tmp_path / "l.onnx"), *flags)
    assert proc.returncode == 1 and "makes example inputs of" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and time.perf_counter() - started < 120


def test_export_whose_forward_cannot_allocate_says_which_sizes_to_lower(tmp_path):
    from attnzoo.errors import ExportError

    layer = attnzoo.create("qkv_self", embed_dim=8)  # attention weights [2, 1, T, T]: 720 GB at T = 300,000
    with pytest.raises(ExportError, match="needs more memory than this machine has .* smaller --batch or --seq"):
        attnzoo.export(layer, tmp_path / "q.onnx", return_attention=True, seq=300_000)
    with pytest.raises(ConfigError, match="batch must be a positive whole number"):
        attnzoo.export(layer, tmp_path / "q.onnx", batch=0)
    assert list(tmp_path.iterdir()) == []


def test_train_export_into_a_folder_that_holds_the_file_fails_before_training(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("text,labels\n" + "".join(f"word{i} and more,lab{i % 2}\n" for i in range(40)))
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "bilstm_labelwise-custom.safetensors").write_bytes(b"someone's weights")
    args = ["train", "--model", "bilstm_labelwise", "--train", str(data), "--epochs", "1", "--no-baseline"]
    proc = run_cli(*args, "--export", str(shipped), "--output", str(tmp_path / "run"))
    assert proc.returncode == 1 and "already holds bilstm_labelwise-custom.safetensors" in proc.stderr, proc.stderr
    assert "move that file away, or export into another folder" in proc.stderr
    assert not (tmp_path / "run").exists() and "epoch" not in proc.stdout  # nothing trained
    assert (shipped / "bilstm_labelwise-custom.safetensors").read_bytes() == b"someone's weights"


UNTRACEABLE = """
import torch
from torch import nn


class Untraceable(nn.Module):
    def __init__(self, embed_dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x, mask=None, return_attention=False):
        y = self.proj(x)
        if float(y.sum()) > 0:  # python control flow on a value: no graph can hold it
            y = y * 2
        return y
"""


def _card_folder(tmp_path, name: str, module: str, source: str, factory: str, convention: str) -> dict:
    """A variant in a module of its own and a card for it, as the environment of a command that sees it."""
    import os

    (tmp_path / f"{module}.py").write_text(source)
    cards = tmp_path / "cards"
    cards.mkdir(exist_ok=True)
    (cards / f"{name}.yaml").write_text(
        f"name: {name}\nfactory: {module}:{factory}\nsummary: a hostile variant\nconvention: {convention}\n"
    )
    return {
        "ATTNZOO_REGISTRY_DIR": str(cards),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.mark.slow
def test_an_untraceable_models_export_error_keeps_torchs_reason_and_no_colour_codes(tmp_path):
    env = _card_folder(tmp_path, "untraceable", "untraceable_layer", UNTRACEABLE, "Untraceable", "sequence_to_sequence")
    for suffix in (".onnx",):  # the ONNX exporter's error: torch.export's, wrapped in coloured advice
        proc = run_cli("export", "untraceable", "-o", str(tmp_path / f"u{suffix}"), env=env)
        error = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1 and error.startswith("attnzoo: error:"), proc.stderr[-2000:]
        assert "GuardOnDataDependentSymNode: Could not guard on data-dependent expression" in error, error
        assert 'untraceable_layer.py", line 13, in forward' in error and "if float(y.sum()) > 0" in error, error
        assert "\x1b[" not in proc.stderr and "--debug for all of it" not in error and len(error) < 600


class _Pool(torch.nn.Module):
    """Attention pooling [B, T, H] -> [B, H]: the healthy part of the hostile variants below."""

    def __init__(self, hidden_size: int = 16):
        super().__init__()
        self.w = torch.nn.Linear(hidden_size, 1)

    def forward(self, x, mask=None, return_attention=False):
        scores = self.w(x).squeeze(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, -1) * (mask.any(-1, keepdim=True) if mask is not None else 1)
        out = (weights.unsqueeze(-1) * x).sum(1)
        return (out, weights) if return_attention else out


def test_check_model_restores_what_a_variant_changed_in_the_process_and_fails_it(tmp_path, monkeypatch):
    import os

    from attnzoo.testing import check_model

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    class ChangesTheProcess(_Pool):
        def forward(self, x, mask=None, return_attention=False):
            torch.set_anomaly_enabled(True)
            os.chdir(elsewhere)
            os.environ["ATTNZOO_HOME"] = str(elsewhere)
            os.environ["ATTNZOO_DISABLE_PLUGIN_AUTOLOAD"] = "0"
            out = super().forward(x, mask, return_attention)
            torch.set_default_dtype(torch.float64)
            torch.use_deterministic_algorithms(True)
            return out

    monkeypatch.setenv("ATTNZOO_HOME", str(tmp_path / "home"))
    cwd = os.getcwd()
    report = check_model(ChangesTheProcess, {"hidden_size": 16}, convention="sequence_to_vector", only=["shapes"])
    assert not torch.is_anomaly_enabled() and os.getcwd() == cwd
    assert os.environ["ATTNZOO_HOME"] == str(tmp_path / "home")
    assert os.environ["ATTNZOO_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert torch.get_default_dtype() == torch.float32 and not torch.are_deterministic_algorithms_enabled()
    (builds, shapes) = report.results
    assert builds.failed and shapes.failed, report.results
    for what in (
        "anomaly detection",
        "the working directory",
        "ATTNZOO_HOME in os.environ",
        "ATTNZOO_DISABLE_PLUGIN_AUTOLOAD in os.environ",
        "the default dtype (torch.float64)",
        "deterministic algorithms",
    ):
        assert f"{what}" in shapes.reason, shapes.reason
    healthy = check_model(_Pool, {"hidden_size": 16}, convention="sequence_to_vector", only=["shapes"])
    assert healthy.ok, healthy.results


HOSTILE_FORWARDS = """
import threading
import time

import torch


class Pool(torch.nn.Module):
    def __init__(self, hidden_size: int = 16):
        super().__init__()
        self.w = torch.nn.Linear(hidden_size, 1)

    def forward(self, x, mask=None, return_attention=False):
        out = x.mean(1) + 0 * self.w(x).sum()
        return (out, torch.ones(x.shape[:2]) / x.shape[1]) if return_attention else out


class StartsAThread(Pool):
    def forward(self, x, mask=None, return_attention=False):
        threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon: the process cannot end
        return super().forward(x, mask, return_attention)


class Interrupts(Pool):
    def forward(self, x, mask=None, return_attention=False):
        raise KeyboardInterrupt
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--in-process"]])
def test_attnzoo_check_ends_on_a_variant_that_leaves_a_thread_or_raises_keyboard_interrupt(tmp_path, mode):
    import os

    env = _card_folder(
        tmp_path, "starts_a_thread", "hostile_forwards", HOSTILE_FORWARDS, "StartsAThread", "sequence_to_vector"
    )
    env = {
        **env,
        **_card_folder(
            tmp_path, "interrupts", "hostile_forwards", HOSTILE_FORWARDS, "Interrupts", "sequence_to_vector"
        ),
    }
    command = [sys.executable, "-m", "attnzoo", "check", "starts_a_thread", "interrupts", "--json", *mode]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=180)
    assert proc.returncode == 1, proc.stderr[-2000:]
    reports = {r["variant"]: r for r in json.loads(proc.stdout)}
    reasons = {
        n: {x["property"]: x["reason"] for x in r["results"] if x["status"] == "failed"} for n, r in reports.items()
    }
    assert "a thread still running (Thread-1 (sleep)), not a daemon" in reasons["starts_a_thread"]["builds"]
    assert reasons["interrupts"]["builds"] == "raised KeyboardInterrupt itself (no Ctrl-C was pressed)"
