"""Text from a Keras file never becomes code (issue 44): the emitted PyTorch module of a file whose names,
version or values are hostile imports without running them, parses, loads its own weights and equals the
converted model; and the converter's report and errors show control characters instead of sending them.

The hostile files are copies of tests/data/hostile/base.keras (made by tests/hostile_keras_fixtures.py) with
their config.json edited, so names Keras itself would refuse are planted too, and of a Keras 2 fixture with
its ``keras_version`` attribute edited. Each payload that would run writes a canary file; the canary must
not exist after the module is imported, built, loaded and run.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import attnzoo
from attnzoo.errors import AttnzooError, ConfigError
from attnzoo.io.text import printable
from attnzoo.keras import convert_keras_model
from attnzoo.keras.codegen import check_source, identifier, literal, usable

from .conftest import ROOT

BASE = ROOT / "tests" / "data" / "hostile" / "base.keras"
LAYERS = ("embedding", "lstm", "pool", "dense", "head", "masking", "features_dense", "features_pool")
OPERATIONS = ("not_equal", "not_equal_1", "any")  # what Keras records to compute the masks: names too
INPUTS = ("ids", "features")
CANARY = "{canary}"  # where a payload writes, filled in per test

# names that close the string, docstring or comment they are written into and run code, and names that
# break a module that splices them: a newline, quotes, a trailing backslash, \N{...}, NUL, what NFKC folds,
# Python's own names, control characters, bidirectional overrides
PAYLOADS = [
    'x"""\nimport pathlib; pathlib.Path(CANARY).write_text("pwned")\n"""',
    "x'''\nimport pathlib; pathlib.Path(CANARY).write_text('pwned')\n'''",
    "'); import pathlib; pathlib.Path(CANARY).write_text('pwned'); ('",
    '"]); import pathlib; pathlib.Path(CANARY).write_text("pwned")  #',
    "a\nimport pathlib; pathlib.Path(CANARY).write_text('pwned')\n#",
    "a\rb\x0cc\x0bd\x85e\u2028f",
    "quote\"and'apostrophe",
    "trailing\\",
    "\\N{BULLET}\\u0041\\x00",
    "nul\x00byte",
    "x²",
    "ｓｅｌｆ",
    "none",
    "None",
    "F",
    "torch",
    "nn",
    "layers",
    "__import__",
    "_",
    "l",
    "0day",
    "Recurrent",
    "KERAS_NAMES",
    "\x1b]0;pwned\x07\x1b[2J",
    "\u202eevil\u2066",
    "日本語の層",
    "A¨",  # NFKC: "A \u0308", a combining mark a name may hold but tokenize's pattern does not
]


def _payload(text: str, canary: Path) -> str:
    return text.replace("CANARY", repr(str(canary)))


def _plant(
    dst: Path,
    *,
    names: dict[str, str] | None = None,
    model_name: str | None = None,
    version: str | None = None,
    values: dict[str, dict] | None = None,
    classes: dict[str, str] | None = None,
    src: Path = BASE,
) -> Path:
    """A copy of ``src`` with layers (and inputs) renamed everywhere the config names them, the model renamed,
    ``metadata.json``'s version replaced, and config ``values`` / ``classes`` of layers set."""
    names, values, classes = names or {}, values or {}, classes or {}

    def walk(value):
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key == "name" and isinstance(item, str) and item in names:
                    out[key] = names[item]
                elif key in ("keras_history", "input_layers", "output_layers") and isinstance(item, list):
                    out[key] = _renamed_refs(item, names)
                else:
                    out[key] = walk(item)
            return out
        return [walk(v) for v in value] if isinstance(value, list) else value

    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(dst, "w") as out:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    layer["config"].update(values.get(layer["name"], {}))
                    layer["class_name"] = classes.get(layer["name"], layer["class_name"])
                config = walk(config)
                if model_name is not None:
                    config["config"]["name"] = model_name
                data = json.dumps(config).encode()
            elif info.filename == "metadata.json" and version is not None:
                data = json.dumps({**json.loads(data), "keras_version": version}).encode()
            out.writestr(info, data)
    return dst


def _renamed_refs(refs: list, names: dict[str, str]) -> list:
    if refs and isinstance(refs[0], str):  # one [name, node, index]
        return [names.get(refs[0], refs[0]), *refs[1:]]
    return [_renamed_refs(r, names) if isinstance(r, list) else r for r in refs]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[3, 5, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6], [0, 0, 7, 8, 0, 9]])
    features = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(0))
    features[0, 4:] = 0.5  # Masking's value: masked steps
    features[2, :2] = 0.5
    return ids, features


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"port_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _class_of(source: str) -> str:
    (cls,) = [node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    return cls


def _assert_port_is_data(model, tmp_path: Path, canary: Path, inputs=None, source: str | None = None) -> object:
    """Save ``model``, write its source, import it, build it, load the folder's weights and run it: the canary
    is never written, and the port equals the model. Returns the imported module (its outputs as ``outputs``)."""
    folder = tmp_path / f"folder_{uuid.uuid4().hex[:8]}"
    attnzoo.save(model, folder)
    source = model.to_source() if source is None else source
    path = folder.with_suffix(".py")
    path.write_text(source, encoding="utf-8")
    module = _import(path)
    port = getattr(module, _class_of(source))()
    port.load_state_dict(load_file(folder / "model.safetensors"))
    port.eval()
    inputs = _inputs() if inputs is None else inputs
    with torch.no_grad():
        got, want = port(*inputs), model(*inputs)
    assert not canary.exists(), "the file's text ran as code"
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6, equal_nan=True)
    module.outputs = got
    return module


def test_a_layer_is_an_attribute_only_where_its_name_cannot_mean_anything_else(tmp_path):
    """``layers.dense`` for a plain name; a literal key where the name is a keyword, private, not ASCII or
    one of nn.ModuleDict's own attributes (``layers.keys`` would be the method, not the layer)."""
    # layers the module declares (the pooling is written in forward, with no layer)
    names = {"embedding": "keys", "lstm": "for", "dense": "_private", "features_dense": "training", "head": "têtê"}
    model = convert_keras_model(_plant(tmp_path / "names.keras", names=names))
    # the model's own keys: a name of nn.ModuleDict's gets a _ (it could not be a key otherwise)
    assert {"keys_", "for", "_private", "training_", "têtê"} <= set(model.layers)
    assert {model.keras_names[k] for k in ("keys_", "training_")} == {"keys", "training"}
    source = model.to_source()
    for key in ("_private", "têtê"):
        assert f'layers["{key}"](' in source
    assert 'layers["for"],' in source and "layers.for" not in source  # the LSTM, run_rnn's first argument
    assert "layers.keys_(" in source and "layers.training_(" in source
    _assert_port_is_data(model, tmp_path, tmp_path / "canary")


# -- a hostile name in every slot ---------------------------------------------------------------------------
@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_a_hostile_name_in_every_slot_stays_data(tmp_path, payload):
    canary = tmp_path / "canary"
    text = _payload(payload, canary)
    names = {name: f"{i}{text}" if i else text for i, name in enumerate((*LAYERS, *OPERATIONS, *INPUTS))}
    file = _plant(tmp_path / "hostile.keras", names=names, model_name=text, version=f"3.15.1{text}")
    model = convert_keras_model(file)
    module = _assert_port_is_data(model, tmp_path, canary)
    # the file's text is kept, as data: every name the module made up maps back to the Keras name it stands for
    assert set(module.KERAS_NAMES.values()) <= {*names.values(), text}
    assert {names[layer] for layer in LAYERS} <= _kept_names(module)  # each layer's output is named
    assert text in _kept_names(module) and f"3.15.1{text}" == module.KERAS_VERSION
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert module.KERAS_NAMES.get(_class_of(source), _class_of(source)) == text
    assert usable(_class_of(source)) and _class_of(source) not in _module_names(source)


def _kept_names(module) -> set[str]:
    """The Keras names the module keeps: those ``KERAS_NAMES`` maps its made-up names to, and its names that
    are the file's own (``KERAS_NAMES`` lists only names that differ)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    own |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    assert all(k != v for k, v in module.KERAS_NAMES.items()), "KERAS_NAMES maps a name to itself"
    return set(module.KERAS_NAMES.values()) | own


def _module_names(source: str) -> set[str]:
    """The names the module's imports bind (a class named like one would shadow it)."""
    tree = ast.parse(source)
    return {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def test_names_that_python_folds_together_stay_two_variables(tmp_path):
    """NFKC makes ``ﬁ`` and ``fi`` (and ``x²`` and ``x2``) one Python name; a layer may be named like the
    mask variable of another (``e`` and ``e_mask``), or like a name the module imports."""
    canary = tmp_path / "canary"
    names = {
        "dense": "ﬁ",
        "head": "fi",
        "features_dense": "x²",
        "features_pool": "x2",
        "embedding": "e",
        "lstm": "e_mask",
        "pool": "conv_padding",
    }
    model = convert_keras_model(_plant(tmp_path / "folds.keras", names=names, model_name="ﬁ"))
    module = _assert_port_is_data(model, tmp_path, canary)
    assert {module.KERAS_NAMES.get(k, k) for k in ("fi", "fi_2")} == {"ﬁ", "fi"}


@pytest.mark.parametrize("name", ["Recurrent", "super"])  # none, F, torch, ...: PAYLOADS name the model too
def test_a_model_named_like_python_s_or_the_module_s_own_names_gets_a_class_that_works(tmp_path, name):
    # a hard_sigmoid LSTM is no nn.LSTM: the module imports the Recurrent node class, whose name the model takes
    hard = {"lstm": {"recurrent_activation": "hard_sigmoid"}}
    model = convert_keras_model(_plant(tmp_path / "named.keras", model_name=name, values=hard))
    source = model.to_source()
    cls = _class_of(source)
    assert usable(cls) and cls not in _module_names(source) and "Recurrent" in _module_names(source)
    _assert_port_is_data(model, tmp_path, tmp_path / "canary", source=source)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_masking_value_that_is_not_finite_is_written_as_a_float_literal(tmp_path, value):
    model = convert_keras_model(_plant(tmp_path / "nan.keras", values={"masking": {"mask_value": value}}))
    source = model.to_source()
    assert {math.inf: 'float("inf")', -math.inf: '-float("inf")'}.get(value, 'float("nan")') in source
    _assert_port_is_data(model, tmp_path, tmp_path / "canary", source=source)


def test_a_bare_config_json_with_hostile_names_stays_data(tmp_path):
    """``model.to_json()``'s form: the config.json with its weights file beside it."""
    canary = tmp_path / "canary"
    text = _payload(PAYLOADS[0], canary)
    names = {name: f"{i}{text}" for i, name in enumerate((*LAYERS, *OPERATIONS, *INPUTS))}
    with zipfile.ZipFile(_plant(tmp_path / "hostile.keras", names=names, model_name=text)) as archive:
        archive.extractall(tmp_path / "bare", members=["config.json", "model.weights.h5"])
    model = convert_keras_model(tmp_path / "bare" / "config.json")
    _assert_port_is_data(model, tmp_path, canary)


@pytest.mark.slow
def test_a_file_keras_itself_saved_with_hostile_names_runs_nothing_and_equals_keras(tmp_path, monkeypatch):
    """Keras accepts these names (it refuses "/" in any name and "." in a layer with weights on torch, so the
    payloads reach the canary through getattr and the environment): the file is Keras's own, and Keras's
    outputs are the oracle."""
    pytest.importorskip("keras")
    canary = tmp_path / "canary"
    monkeypatch.setenv("HOSTILE_CANARY", str(canary))
    path = 'getattr(__import__("pathlib"), "Path")(getattr(__import__("os"), "environ")["HOSTILE_CANARY"])'
    code = f'getattr({path}, "write_text")("pwned")'
    names = {
        "ids": "ｓｅｌｆ",
        "features": "x²",
        "embedding": f'x"""\n{code}\n"""',
        "lstm": f"'); {code}; ('",
        "pool": "trailing\\",
        "dense": "ﬁ",
        "head": "fi",
        "masking": "a\nb\rc\\N{BULLET}",  # (a NUL Keras cannot save: h5py refuses it)
        "features_dense": "\x1b]0;pwned\x07\x1b[2J",
        "features_pool": "x2",
    }
    plant = {"names": names, "model_name": "x'''\n" + code + "\n'''"}
    (tmp_path / "plant.json").write_text(json.dumps(plant), encoding="utf-8")
    script = ROOT / "tests" / "hostile_keras_fixtures.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--plant", str(tmp_path / "plant.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "torch"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    keras_io = np.load(tmp_path / "keras.npz")
    inputs = [torch.from_numpy(keras_io["arr_0"]), torch.from_numpy(keras_io["arr_1"])]
    model = convert_keras_model(tmp_path / "hostile.keras")
    module = _assert_port_is_data(model, tmp_path, canary, inputs=inputs)
    assert set(names.values()) <= _kept_names(module)
    for k, got in enumerate(module.outputs):
        np.testing.assert_allclose(got.numpy(), keras_io[f"arr_{k + 2}"], rtol=1e-5, atol=1e-5)


# -- a converted folder shared without its .keras file ------------------------------------------------------
def _hostile_graph(graph: dict, text: str) -> tuple[dict, dict[str, str]]:
    """``graph`` with ``text`` in every string a converted folder's config.yaml holds: layer keys (no ".",
    which torch refuses in a module's name), call ids, input names, the Keras names and classes, the
    model's name and version. Returns the graph and the old -> new layer keys."""
    graph = copy.deepcopy(graph)
    key_text = text.replace(".", "_")
    keys = {key: f"{i}{key_text}" for i, key in enumerate(graph["layers"])}
    ids = {call["id"]: f"{i}{text}" for i, call in enumerate(graph["calls"])}
    ids.update({spec["id"]: f"in{i}{text}" for i, spec in enumerate(graph["inputs"])})

    def refs(value):
        if isinstance(value, dict) and "ref" in value:
            return {"ref": [ids[value["ref"][0]], value["ref"][1]]}
        if isinstance(value, dict):
            return {k: refs(v) for k, v in value.items()}
        return [refs(v) for v in value] if isinstance(value, list) else value

    graph["layers"] = {keys[k]: {**spec, "keras": {"name": text, "class": text}} for k, spec in graph["layers"].items()}
    for call in graph["calls"]:
        call["id"], call["layer"] = ids[call["id"]], keys.get(call["layer"], call["layer"])
        call["args"], call["kwargs"] = refs(call["args"]), refs(call["kwargs"])
    for spec in graph["inputs"]:
        spec["id"], spec["name"] = ids[spec["id"]], text
    graph["outputs"] = [[ids[call], index] for call, index in graph["outputs"]]
    graph["name"], graph["keras_version"] = text, f"3.15.1{text}"
    return graph, keys


@pytest.mark.parametrize("payload", PAYLOADS[:5] + ["nul\x00byte", "ｓｅｌｆ", "\x1b[2J"], ids=range(8))
def test_a_converted_folder_shared_without_its_keras_file_stays_data(tmp_path, payload):
    canary = tmp_path / "canary"
    text = _payload(payload, canary)
    converted = convert_keras_model(BASE)
    graph, keys = _hostile_graph(converted.graph, text)
    graph["layers"][keys["masking"]]["mask_value"] = math.nan
    planted = attnzoo.create("keras_model", graph=graph)
    renamed = {}
    for name, tensor in converted.state_dict().items():
        _, key, rest = name.split(".", 2)  # layers.<key>.<parameter>
        renamed[f"layers.{keys[key]}.{rest}"] = tensor
    planted.load_state_dict(renamed)
    attnzoo.save(planted, tmp_path / "shared")  # a stranger's folder: config.yaml and model.safetensors
    model = attnzoo.load(tmp_path / "shared")
    _assert_port_is_data(model, tmp_path, canary)


# -- a Keras 2 .h5 whose keras_version attribute is hostile --------------------------------------------------
def test_a_keras2_h5_version_attribute_stays_data(tmp_path):
    h5py = pytest.importorskip("h5py")
    canary = tmp_path / "canary"
    file = tmp_path / "sequential.h5"
    shutil.copy(ROOT / "tests" / "data" / "keras2" / "sequential.h5", file)
    version = _payload('2.15.0"""\nimport pathlib; pathlib.Path(CANARY).write_text("pwned")\n"""', canary)
    with h5py.File(file, "r+") as handle:
        handle.attrs["keras_version"] = version
    model = convert_keras_model(file)
    expected = dict(np.load(ROOT / "tests" / "data" / "keras2" / "expected.npz"))
    inputs = [torch.from_numpy(expected[f"sequential/0/in/{i}"]) for i in range(len(model.inputs_spec))]
    module = _assert_port_is_data(model, tmp_path, canary, inputs=inputs)
    assert version == module.KERAS_VERSION
    port = getattr(module, _class_of(Path(module.__file__).read_text(encoding="utf-8")))()
    port.load_state_dict(model.state_dict())
    with torch.no_grad():  # and it is still Keras 2's model: Keras 2's own outputs
        np.testing.assert_allclose(port.eval()(*inputs).numpy(), expected["sequential/0/out/0"], atol=1e-5)


# -- the command line: the module it writes, the report and the errors it prints -------------------------------
def test_convert_keras_writes_a_module_that_runs_nothing_and_prints_control_characters_escaped(tmp_path, capsys):
    from attnzoo.cli.app import main

    canary = tmp_path / "canary"
    text = _payload("\x1b]0;pwned\x07\x1b[2J'); import pathlib; pathlib.Path(CANARY).write_text('pwned') #", canary)
    file = _plant(tmp_path / "hostile.keras", names={"lstm": text, "head": f"1{text}"}, model_name=text)
    code = main(["convert-keras", str(file), "-o", str(tmp_path / "out"), "--emit-py", str(tmp_path / "port.py")])
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;pwned\\x07\\x1b[2J" in out
    model = attnzoo.load(tmp_path / "out")
    module = _import(tmp_path / "port.py")
    port = getattr(module, _class_of((tmp_path / "port.py").read_text(encoding="utf-8")))()
    port.load_state_dict(load_file(tmp_path / "out" / "model.safetensors"))
    with torch.no_grad():
        for g, w in zip(port.eval()(*_inputs()), model(*_inputs()), strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-6)
    assert not canary.exists()

    bogus = _plant(tmp_path / "bogus.keras", names={"lstm": text}, classes={"lstm": "NoSuchLayer"})
    code = main(["convert-keras", str(bogus), "-o", str(tmp_path / "out2")])
    err = capsys.readouterr().err
    assert code == 1 and "NoSuchLayer" in err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;pwned\\x07" in err


def test_the_emitted_modules_pass_ruff_check_isolated(tmp_path):
    """docs/keras-source.md says the module passes ``ruff check``: with ruff's own defaults and its import
    sorting, for hostile names and for every Keras 2 fixture."""
    for i, payload in enumerate(PAYLOADS[:10:2]):
        text = _payload(payload, tmp_path / "canary")
        names = {name: f"{k}{text}" for k, name in enumerate(LAYERS)}
        model = convert_keras_model(_plant(tmp_path / f"h{i}.keras", names=names, model_name=text))
        (tmp_path / f"hostile_{i}.py").write_text(model.to_source(), encoding="utf-8")
    for file in sorted((ROOT / "tests" / "data" / "keras2").glob("*.h5")):
        (tmp_path / f"keras2_{file.stem}.py").write_text(convert_keras_model(file).to_source(), encoding="utf-8")
    for extra in ([], ["--extend-select", "I"]):
        check = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", *extra, "."],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert check.returncode == 0, check.stdout[-3000:]


# -- the doors themselves -------------------------------------------------------------------------------------
def test_identifier_folds_with_nfkc_and_keeps_names_apart():
    used: set[str] = set()
    assert [identifier(t, used) for t in ("ﬁ", "fi", "x²", "ｓｅｌｆ", "print", "a b", "1st", "", "l")] == [
        "fi",
        "fi_2",
        "x2",
        "self_",
        "print_",
        "a_b",
        "v_1st",
        "x",
        "l_",
    ]
    assert identifier("none", set(), camel=True) == "KerasNone"
    assert identifier("my model", set(), camel=True) == "MyModel"
    assert not usable("ｓｅｌｆ") and not usable("F") and not usable("class") and usable("MyPort")


@pytest.mark.parametrize("value", [None, True, 3, -0.0, 1e-300, 'it\'s "q"\\\n\x00\u202e', [1, (2,), {"a": ()}]])
def test_literal_is_a_plain_literal_that_reads_back(value):
    written = literal(value)
    assert ast.literal_eval(written) == value and type(ast.literal_eval(written)) is type(value)


def test_literal_writes_non_finite_floats_and_refuses_other_objects():
    assert literal([math.nan, math.inf, -math.inf]) == '[float("nan"), float("inf"), -float("inf")]'
    with pytest.raises(ConfigError, match="not a plain literal"):
        literal(object())
    with pytest.raises(ConfigError, match="nested more than"):
        nested: list = []
        for _ in range(100):
            nested = [nested]
        literal(nested)


GOOD = '''"""A port."""

import torch
from torch import nn

KERAS_VERSION = "3"
KERAS_NAMES = {"Port": "port"}


class Port(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleDict()
        self.layers["dense"] = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.layers
        # Dense
        dense = torch.relu(layers["dense"](x))
        return dense
'''


def test_a_layer_bound_to_a_local_by_its_key_is_called_through_it():
    """How the emitter writes the call of a layer whose key is long (a nested model's path)."""
    check_source(
        GOOD.replace(
            'dense = torch.relu(layers["dense"](x))', 'layer = layers["dense"]\n        dense = torch.relu(layer(x))'
        )
    )
    check_source(
        GOOD.replace(
            'dense = torch.relu(layers["dense"](x))', "layer = layers.dense\n        dense = torch.relu(layer(x))"
        )
    )


@pytest.mark.parametrize(
    "old, new, what",
    [
        ('KERAS_VERSION = "3"', 'KERAS_VERSION = "3"\nimport os', "import of 'os'"),
        ('KERAS_VERSION = "3"', 'KERAS_VERSION = __import__("os")', "module-level value"),
        ('KERAS_VERSION = "3"', 'print("pwned")', "module-level Expr"),
        ("        return dense", '        exec("pwned")\n        return dense', "Expr statement"),
        ("        return dense", '        dense = eval("1")\n        return dense', "call of 'eval'"),
        ("        return dense", '        dense = open("x")\n        return dense', "call of 'open'"),
        ("        return dense", "        dense = dense.__class__\n        return dense", "attribute '__class__'"),
        ("        return dense", '        """pwned"""\n        return dense', "Expr statement"),
        ("        return dense", "        torch = dense\n        return dense", "shadows a name"),
        ("        return dense", "        return dense + 'x'", "string constant outside"),
        ("        # Dense", "        # Dense; import os", "comment"),
        ("class Port(nn.Module):", "class Port(object):", "not a plain nn.Module"),
        ("class Port(nn.Module):", "@print\nclass Port(nn.Module):", "not a plain nn.Module"),
        ("        return dense", "        return dense\n    x = 1", "class body"),
        ('KERAS_NAMES = {"Port": "port"}', 'KERAS_NAMES = {"Port": "port"', "syntax error"),
        # a local is callable only while it is bound to one of the module's layers by its string key
        (
            "        dense = torch.relu(",
            "        layer = x\n        dense = torch.relu(layer(x) + ",
            "call of 'layer'",
        ),
        (
            "        dense = torch.relu(",
            '        layer = layers["dense"]\n        layer = x\n        dense = torch.relu(layer(x) + ',
            "call of 'layer'",
        ),
        (
            "        dense = torch.relu(",
            '        layer = layers["dense"]\n        layer, y = x, x\n        dense = torch.relu(layer(x) + ',
            "call of 'layer'",
        ),
    ],
)
def test_check_source_refuses_what_the_emitter_never_writes(old, new, what):
    check_source(GOOD)  # the well-formed module passes
    assert old in GOOD
    with pytest.raises(ConfigError, match=what):
        check_source(GOOD.replace(old, new))


def test_printable_escapes_every_control_character_and_nothing_else():
    text = "a\x1b]0;t\x07\x1b[2J\n\t\r\x00\x7f\x85\x9b\u202e\u2066\u200f\u061c b\\x é 日 ﬁ"
    assert printable(text) == (
        "a\\x1b]0;t\\x07\\x1b[2J\\x0a\\x09\\x0d\\x00\\x7f\\x85\\x9b\\u202e\\u2066\\u200f\\u061c b\\x é 日 ﬁ"
    )
    assert printable("plain text, (Dense) -> dense: [5, 3]") == "plain text, (Dense) -> dense: [5, 3]"


# -- any Unicode at all -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_fuzz_any_unicode_names_model_names_and_versions_stay_data(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    canary = tmp_path / "canary"
    names = st.text(min_size=1, max_size=16)

    @hypothesis.settings(max_examples=8, deadline=None, derandomize=True, database=None)
    @hypothesis.given(layers=st.lists(names, min_size=3, max_size=3, unique=True), model=names, version=names)
    def run(layers, model, version):
        planted = dict(zip(("lstm", "dense", "head"), layers, strict=True))
        file = _plant(tmp_path / "fuzz.keras", names=planted, model_name=model, version=f"3.{version}")
        try:
            converted = convert_keras_model(file)
        except AttnzooError as e:  # a refusal is an attnzoo error that names the layer (or the model)
            assert any(printable(n)[:20] in str(e) or repr(n)[1:20] in str(e) for n in [*layers, model]), str(e)
            return
        module = _assert_port_is_data(converted, tmp_path, canary)
        assert set(layers) <= _kept_names(module)

    run()
