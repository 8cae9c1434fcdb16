"""Issue 58: untrusted files stay data, second pass. Every file attnzoo reads is read in bounded time and
memory (sizes, depths, node counts, downloads), every hand-edited value of a converted folder is refused
at load naming the layer, the key and the value, and every name a file brings is printed escaped."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from attnzoo.core.cards import read_card
from attnzoo.core.config import user_config
from attnzoo.core.spec import WeightsSpec, parse_name
from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.folders import parse_folder_records, read_folder
from attnzoo.io.limits import LIMITS, limit, load_json, load_yaml
from attnzoo.io.weights import decode_metadata
from attnzoo.train.predict import Label, Prediction
from attnzoo.train.recipe import load_recipe, resolved_recipe

HOSTILE_LABEL = "\x1b]0;PWNED\x07\x1b[2J"


# -- names stay names ---------------------------------------------------------------------------------------
def test_predict_renders_label_names_from_the_run_escaped():
    label = Label(id=HOSTILE_LABEL, name=HOSTILE_LABEL, probability=0.9, above_threshold=True, description="\u202eg")
    text = Prediction(text="t", output="multilabel", tokens=["t"], labels=[label], threshold=0.5).render()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    # the escape written as text, as printable writes it: the name is still shown
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in text and "\\u202eg" in text


def test_every_verb_prints_names_from_files_escaped(capsys):
    from attnzoo.cli.common import say

    say(f"note: layer {HOSTILE_LABEL!s} fixed\nsecond line")
    out = capsys.readouterr().out
    assert out == "note: layer \\x1b]0;PWNED\\x07\\x1b[2J fixed\nsecond line\n"


@pytest.mark.parametrize("tag", ["../../../escape", "a/b", "a\\b", "..", "", "x\x1b[2J", "/abs", 3])
def test_a_recipe_tag_that_is_no_name_is_refused_naming_it(tmp_path, tag):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": "tiny", "tag": tag, "data": {"train": "t.csv"}}))
    with pytest.raises(ConfigError, match=r"recipe r\.yaml: tag .* is not a name; a tag holds letters") as e:
        load_recipe(recipe)
    assert repr(tag) in str(e.value)


def test_a_recipe_tag_is_never_an_interpolation(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "hunter2")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: tiny\ntag: ${oc.env:ATTNZOO_TEST_SECRET}\ndata: {train: t.csv}\n")
    with pytest.raises(ConfigError, match=r"recipe r\.yaml: tag '\$\{oc.env:ATTNZOO_TEST_SECRET\}' is an interp") as e:
        load_recipe(recipe)
    assert "hunter2" not in str(e.value)
    # the command line's recipe (flags and overrides) goes through the same door
    with pytest.raises(ConfigError, match="is an interpolation"):
        resolved_recipe(OmegaConf.create({"model": "tiny", "tag": "${oc.env:ATTNZOO_TEST_SECRET}"}), "here")


def test_a_recipe_tag_that_is_a_name_names_the_run_folder(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": "tiny", "tag": "v1.2_final-3", "data": {"train": "t.csv"}}))
    assert load_recipe(recipe)["tag"] == "v1.2_final-3"


def test_a_whole_value_pattern_takes_no_trailing_newline():
    digest = "a" * 64
    with pytest.raises(ValueError, match="must be 64 lower-case hex digits"):
        WeightsSpec(tag="hub", hf_hub="org/repo", sha256=digest + "\n")
    assert parse_name("laat\n") is None and parse_name("laat") is not None
    with pytest.raises(WeightsError, match=r"where: sha256 'a{64}\\n' is not 64 lower-case hex digits"):
        parse_folder_records(f"name: x\nfactory: a:b\nconfig: {{}}\nsha256: '{digest}\n\n'\n", "where")


# -- sizes, depths and numbers in the files attnzoo reads ----------------------------------------------------
def _folder(tmp_path, text: str) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir(exist_ok=True)
    (folder / "config.yaml").write_text(text)
    return folder


def test_a_config_yaml_one_byte_past_the_limit_is_refused_naming_size_and_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_MAX_CONFIG_BYTES", "1000")
    record = "name: x\nfactory: a:b\nconfig: {}\nsha256: " + "a" * 64 + "\n"
    folder = _folder(tmp_path, record + "#" * (1000 - len(record)))  # exactly at the limit: read
    assert read_folder(folder)["name"] == "x"
    (folder / "config.yaml").write_text(record + "#" * (1001 - len(record)))  # a comment one byte past it
    with pytest.raises(WeightsError, match=r"config\.yaml is over 1,000 bytes, over the limit of 1,000 bytes "):
        read_folder(folder)
    with pytest.raises(WeightsError, match=r"\(ATTNZOO_MAX_CONFIG_BYTES\).*raise the limit \(ATTNZOO_MAX_CONF"):
        read_folder(folder)


def test_a_limit_variable_that_is_no_number_is_named(monkeypatch):
    monkeypatch.setenv("ATTNZOO_MAX_DEPTH", "lots")
    with pytest.raises(ConfigError, match="ATTNZOO_MAX_DEPTH must be a whole number above 0, got 'lots'"):
        limit("ATTNZOO_MAX_DEPTH")


@pytest.mark.parametrize("depth", [3_000, 200_000])
def test_yaml_nested_deep_ends_at_once_naming_the_limit(tmp_path, depth):
    started = time.perf_counter()
    text = "name: x\nfactory: a:b\nsha256: " + "a" * 64 + "\nconfig: {v: " + "[" * depth + "]" * depth + "}\n"
    with pytest.raises(WeightsError, match=r"config\.yaml nests deeper than 100 levels \(at line 4\), over the limit"):
        read_folder(_folder(tmp_path, text))
    # a block document (indentation, no brackets) is counted the same way
    block = "".join(f"{' ' * i}k:\n" for i in range(500)) + " " * 500 + "v\n"
    with pytest.raises(WeightsError, match="nests deeper than 100 levels"):
        load_yaml(block, "block.yaml")
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("reader", ["config", "recipe", "card"])
def test_a_config_recipe_or_card_nested_200_000_deep_is_a_config_error(tmp_path, reader):
    path = tmp_path / "deep.yaml"
    path.write_text("model: tiny\ntag: t\ntask: {name: x}\nv: " + "[" * 200_000 + "]" * 200_000 + "\n")
    call = {"config": lambda: user_config(path), "recipe": lambda: load_recipe(path), "card": lambda: read_card(path)}
    with pytest.raises(ConfigError, match=r"deep\.yaml nests deeper than 100 levels \(at line 4\).*ATTNZOO_MAX_DEPTH"):
        call[reader]()


def test_a_100_000_digit_int_in_config_yaml_is_named_with_its_line(tmp_path):
    text = "name: x\nfactory: a:b\nsha256: " + "a" * 64 + "\nconfig: {units: " + "9" * 100_000 + "}\n"
    with pytest.raises(WeightsError, match=r"yaml: line 4: config\.units: 9{12}\.\.\. is an integer of 100,000 dig"):
        read_folder(_folder(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &x [1]\nb: *x\n", r"f\.yaml: line 2: uses YAML aliases"),
        ("a: !!python/object/apply:os.system [echo]\n", r"line 1: the tag 'tag:yaml.org,2002:python/object/apply:"),
        ("? [1]\n: 2\n", "line 1: a mapping key is a collection"),
        ("a\n---\nb\n", "holds 2 YAML documents"),
        ("<<: {a: 1}\n", "line 1: the tag 'tag:yaml.org,2002:merge'"),
    ],
)
def test_yaml_that_save_never_writes_is_refused_naming_the_line(text, message):
    with pytest.raises(WeightsError, match=message):
        load_yaml(text, "f.yaml")


def test_load_yaml_reads_what_safe_load_reads():
    text = "a: 1\nb: [1.5, null, true, '3', 0x10, 1e-3, 2026-01-01, .nan]\nc: {d: ~, 2: [[], {}]}\ne: !!str 4\n"
    reference = yaml.safe_load(text)
    got = load_yaml(text, "f")
    assert str(got) == str(reference) and got["c"] == reference["c"]


def test_metadata_json_nested_100_000_deep_is_a_weights_error_naming_the_key(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(WeightsError, match=r"w: metadata 'attnzoo.config' nests more than 1,000 levels deep, over the"):
        decode_metadata({"attnzoo.config": deep}, where="w")
    with pytest.raises(WeightsError, match=r"metadata 'attnzoo.meta.x' is not valid JSON \(Exceeds the limit"):
        decode_metadata({"attnzoo.meta.x": "9" * 100_000}, where="w")
    with pytest.raises(WeightsError, match=r"w: metadata 'attnzoo.config' nests deeper than 100 levels, over the"):
        decode_metadata({"attnzoo.config": '{"a": ' + "[" * 150 + "]" * 150 + "}"}, where="w")
    # brackets inside strings are text, not nesting
    assert load_json('{"a": "[[[[{{{{", "b": [["]"]]}', "w") == {"a": "[[[[{{{{", "b": [["]"]]}


# -- downloads and Hub files past their bounds, against a real server on 127.0.0.1 ---------------------------
class _Endless(http.server.BaseHTTPRequestHandler):
    """HTTP/1.0 bodies without Content-Length (they end when the connection closes): ``/endless`` sends
    64 KiB blocks for up to 10 s; any other path serves ``files[path]``."""

    files: dict[str, bytes] = {}

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - the http.server name
        self.send_response(200)
        self.end_headers()
        if self.path != "/endless":
            self.wfile.write(self.files.get(self.path, b""))
            return
        deadline = time.monotonic() + 10
        with contextlib.suppress(OSError):  # the client hung up, as it should
            while time.monotonic() < deadline:
                self.wfile.write(b"x" * (1 << 16))


@pytest.fixture
def endless():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.mark.parametrize("size", [300_000, None])
def test_a_stream_without_content_length_stops_at_its_bound_and_leaves_no_file(endless, tmp_path, monkeypatch, size):
    from attnzoo.io.sources import _download

    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
    monkeypatch.setenv("ATTNZOO_MAX_DOWNLOAD_BYTES", "500000")
    part = tmp_path / "w.part"
    started = time.monotonic()
    bound = r"the card's file_size \(300,000 bytes\)" if size else r"500,000 bytes \(ATTNZOO_MAX_DOWNLOAD_BYTES"
    with pytest.raises(WeightsError, match=rf"/endless: the body runs past {bound}.*download was stopped and its part"):
        _download(f"{endless}/endless", {}, part, "w", size=size)
    assert not part.exists() and time.monotonic() - started < 5


def test_a_hub_config_yaml_past_the_limit_is_refused_before_it_is_parsed(endless, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    import attnzoo

    monkeypatch.setenv("ATTNZOO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_ENDPOINT", endless)
    monkeypatch.setenv("ATTNZOO_MAX_CONFIG_BYTES", "2000")
    for name in ("ATTNZOO_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_Endless, "files", {"/org/repo/resolve/main/config.yaml": b"name: x\n#" + b"#" * 5000})
    with pytest.raises(WeightsError, match=r"hf-hub:org/repo \(http.*config\.yaml\) is over 2,000 bytes, over the"):
        attnzoo.create("hf-hub:org/repo")


def test_the_documented_limits_are_the_code_s():
    text = " ".join((Path(__file__).parent.parent / "docs" / "weights.md").read_text().split())
    for variable, (default, _) in LIMITS.items():
        assert f"`{variable}`" in text and f"{default:,}" in text, variable


# -- torchrun's variables ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number >= 1"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a whole number >= 1"),
        ({"WORLD_SIZE": "2", "RANK": "abc"}, "RANK='abc' is not a whole number >= 0"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1' is not a whole number >= 0"),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1.5"}, "LOCAL_RANK='1.5' is not a whole number"),
    ],
)
def test_torchrun_variables_that_are_no_numbers_are_named(monkeypatch, env, message):
    from attnzoo.train import distributed

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        distributed.setup("cpu")


# -- every value of a converted folder's spec, checked at load -----------------------------------------------
def _graph(layers: dict, calls: list | None = None, outputs: list | None = None) -> dict:
    keys = list(layers)
    return {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": "x", "name": "x", "shape": [None, 6, 4], "dtype": "float32"}],
        "layers": layers,
        "calls": calls
        if calls is not None
        else [
            {"id": f"c{i}", "layer": k, "args": [{"ref": [f"c{i - 1}" if i else "x", 0]}], "kwargs": {}}
            for i, k in enumerate(keys)
        ],
        "outputs": outputs or [[f"c{len(keys) - 1}", 0]],
    }


def _keras_model(graph):
    from attnzoo.core import create

    return create("keras_model", graph=graph)


DENSE = {"op": "dense", "units": 3, "in_features": 4, "activation": "linear", "use_bias": True}
CONV = {
    "op": "conv",
    "rank": 1,
    "filters": 2,
    "in_channels": 4,
    "kernel_size": [3],
    "strides": [1],
    "dilation_rate": [1],
}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"op": "activation", "activation": "pwned"}, r"activation 'pwned' is no activation attnzoo knows \(celu, "),
        ({**DENSE, "units": "four"}, r"\(dense\): units 'four' is not int"),
        ({**DENSE, "units": 0}, r"\(dense\): units 0 must be at least 1 \(a size\)"),
        ({**DENSE, "activation": "rm -rf"}, r"\(dense\): activation 'rm -rf' is no activation"),
        ({**DENSE, "units": 10**100_000}, r"units <a number too long to show> holds an integer of 332,193 bits, past"),
        ({**DENSE, "bias": 1}, r"\(dense\): takes no argument 'bias' \(it takes activation, in_features, units"),
        ({"op": "dense", "units": 3}, r"\(dense\): missing in_features"),
        ({**CONV, "strides": [1.5]}, r"\(conv\): strides \[1\.5\] is not list\[int\]"),
        ({"op": "nope"}, r": unknown op 'nope'; known: activation, "),
        ({"op": "operation", "name": "cast", "config": {"dtype": "complex512"}}, r"dtype 'complex512' is no dtype"),
        ({"op": "operation", "name": "__import__"}, r"name '__import__' is no operation attnzoo runs"),
        ({**CONV, "groups": 0}, r"\(conv\): groups 0 must be at least 1 \(a size\)"),
    ],
)
def test_a_hand_edited_layer_value_is_refused_at_load_naming_layer_key_and_value(spec, message):
    graph = _graph({"the_layer": {**spec, "keras": {"name": "the_layer", "class": "X"}}})
    with pytest.raises(ConfigError, match=r"keras_model: layer 'the_layer'.*" + message):
        _keras_model(graph)


def test_a_layernorm_epsilon_written_as_text_is_refused():
    norm = {"op": "layer_norm", "axis": [-1], "shape": [4], "epsilon": "1e-3", "center": True, "scale": True}
    with pytest.raises(ConfigError, match=r"layer 'norm' \(layer_norm\): epsilon '1e-3' is not float"):
        _keras_model(_graph({"norm": {**norm, "keras": {"name": "norm"}}}))
    with pytest.raises(ConfigError, match=r"epsilon -1\.0 must be a finite number >= 0"):
        _keras_model(_graph({"norm": {**norm, "epsilon": -1.0}}))


def test_a_ref_past_a_calls_outputs_is_refused_naming_the_call():
    relu = {"op": "activation", "activation": "relu"}
    with pytest.raises(ConfigError, match=r"call 'a' reads output 1 of 'x', which has 1 output$"):
        _keras_model(_graph({"a": relu}, calls=[{"id": "a", "layer": "a", "args": [{"ref": ["x", 1]}], "kwargs": {}}]))
    with pytest.raises(ConfigError, match=r"the outputs reads output -1 of 'c0'"):
        _keras_model(_graph({"a": relu}, outputs=[["c0", -1]]))
    passed = [{"id": "p", "layer": None, "args": [{"ref": ["x", 0]}], "kwargs": {}}]  # a nested model's input
    with pytest.raises(ConfigError, match=r"reads output 3 of 'p', which has 1 output"):
        _keras_model(
            _graph({"a": relu}, calls=[*passed, {"id": "a", "layer": "a", "args": [{"ref": ["p", 3]}], "kwargs": {}}])
        )


def test_a_graph_past_the_node_limit_is_refused_naming_its_size_and_the_variable(monkeypatch):
    monkeypatch.setenv("ATTNZOO_MAX_GRAPH_NODES", "10")
    layers = {f"a{i}": {"op": "activation", "activation": "relu"} for i in range(6)}
    with pytest.raises(ConfigError, match=r"the graph holds 12 layers and calls, over the limit of 10 .*GRAPH_NODES"):
        _keras_model(_graph(layers))


def test_a_zoo_node_holding_a_keras_model_is_refused():
    inner = _graph({"a": {"op": "activation", "activation": "relu"}})
    zoo = {"op": "zoo", "model": "keras_model", "config": {"graph": inner}}
    with pytest.raises(ConfigError, match="a zoo node holds another keras_model"):
        _keras_model(_graph({"z": zoo}))


@pytest.mark.parametrize("key", ["training", "forward", "keys", "__init__", "_modules", "", "a.b", 7])
def test_layer_names_keras_allows_and_module_dict_refuses_convert_and_load(tmp_path, key):
    import attnzoo

    graph = _graph({key: {**DENSE}, "other": {"op": "activation", "activation": "tanh"}})
    model = _keras_model(graph)
    x = torch.randn(2, 6, 4)
    dense = next(m for m in model.layers.values() if isinstance(m, torch.nn.Linear))
    expected = torch.tanh(x @ dense.weight.T + dense.bias)  # Dense then tanh, written out
    torch.testing.assert_close(model(x), expected)
    assert str(key) in [str(v) for v in model.keras_names.values()]  # the report keeps the Keras name
    if isinstance(key, str):  # a folder's config is JSON in the weights' metadata too: its keys are strings
        attnzoo.save(model, tmp_path / "saved")
        torch.testing.assert_close(attnzoo.load(tmp_path / "saved")(x), expected)


# -- sizes checked before they are allocated -------------------------------------------------------------------
def test_a_converted_layer_too_large_for_the_machine_is_refused_naming_it(monkeypatch):
    from attnzoo.core import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)  # a machine of 1 MiB
    big = {**DENSE, "units": 1000, "in_features": 1000, "keras": {"name": "big"}}  # 4 MB of float32
    with pytest.raises(ConfigError, match=r"keras_model needs 3\.8 MiB for its parameters, .*layers\.big\.weight"):
        _keras_model(_graph({"big": big}))


def test_export_at_a_batch_whose_activations_cannot_fit_is_refused_naming_the_layer(tmp_path, monkeypatch):
    from attnzoo.core import memory
    from attnzoo.interop.export import export

    wide = {**DENSE, "units": 64, "keras": {"name": "wide"}}
    model = _keras_model(_graph({"wide": wide, "out": {**DENSE, "in_features": 64, "keras": {"name": "out"}}}))
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 << 30)
    # one row: 6 x 64 float32 = 1,536 bytes at "wide"; at 10^9 rows, 1,430 GiB
    with pytest.raises(ConfigError, match=r"export at batch 1,000,000,000: .*the largest is layer 'wide' with 1,430"):
        export(model, tmp_path / "m.pt2", batch=1_000_000_000)
