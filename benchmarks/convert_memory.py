"""Peak memory of converting a keras-hub ``LlamaBackbone`` ``.keras`` file, float32 and bfloat16, against its
weights' bytes.

    python benchmarks/convert_memory.py [--quick] [--write-docs]

The model is a keras-hub Llama of 12 layers, hidden 768, 12 query heads sharing 4 key/value heads, an
intermediate size of 3072 and a vocabulary of 32,000 with an untied output embedding (153M parameters), with
random weights. keras-hub is not needed: the script writes the ``.keras`` file keras-hub's
``LlamaBackbone.save`` writes (config.json, metadata.json, model.weights.h5 with each layer's variables under
its path) with h5py, one array in memory at a time, the weights file on disk and stored in the zip; the
bfloat16 file is what a ``LlamaBackbone(..., dtype="bfloat16")`` saves: each variable a dataset of 2-byte
opaque values with the attribute ``dtype="bfloat16"`` (keras 3's ``H5Entry``), the config's dtype policy
``bfloat16``.

Each file is converted by :func:`attnzoo.keras.convert_keras_model` in a fresh interpreter, which first
imports torch and attnzoo and converts a 1-layer Llama of the same family (so that imports, registries and the
first compilation are paid before), then converts the file and saves the model with ``attnzoo.save``; another
fresh interpreter loads a saved 1-layer Llama, then the saved model with ``attnzoo.load``. The peak is the
process's peak resident size during the conversion (the load) (VmHWM, reset just before it) minus its resident
size just before it: what the step itself needs, the returned model included. ``ratio`` is that peak over the
bytes of the model's tensors (the weights in the dtype the model holds them in). Linux only (/proc).
Writes benchmarks/results/convert_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, markdown_table, update_doc_section, write_json  # noqa: E402

import attnzoo  # noqa: E402
from attnzoo.keras import convert_keras_model  # noqa: E402

SIZES = {"vocabulary_size": 32000, "hidden_dim": 768, "num_layers": 12, "num_query_heads": 12}
SIZES |= {"num_key_value_heads": 4, "intermediate_dim": 3072}
QUICK = {"vocabulary_size": 4000, "hidden_dim": 256, "num_layers": 2, "num_query_heads": 4}
QUICK |= {"num_key_value_heads": 2, "intermediate_dim": 512}
TARGET = 1.15  # the issue's bound: the peak at most 1.15x the weights' bytes


def llama_config(sizes: dict[str, int], dtype: str) -> dict:
    """config.json of keras-hub 0.32's ``LlamaBackbone(**sizes, dtype=dtype)``."""
    policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype}, "registered_name": None}
    rope = {"rope_max_wavelength": 10000, "rope_position_scaling_factor": 1.0}
    config = {"name": "llama_backbone", "trainable": True, "dtype": policy, **sizes, **rope}
    config |= {"layer_norm_epsilon": 1e-6, "dropout": 0}
    return {
        "module": "keras_hub.src.models.llama.llama_backbone",
        "class_name": "LlamaBackbone",
        "config": config,
        "registered_name": "keras_hub>LlamaBackbone",
        "build_config": {"input_shape": None},
        "compile_config": {},
    }


def llama_variables(sizes: dict[str, int]):
    """(group, variable name, shapes) of each layer of keras-hub's Llama, in the file's layout."""
    d, v, n = sizes["hidden_dim"], sizes["vocabulary_size"], sizes["num_query_heads"]
    kv, ff, head = sizes["num_key_value_heads"], sizes["intermediate_dim"], d // n
    yield "reversible_embedding", "token_embedding", [(v, d), (d, v)]
    for i in range(sizes["num_layers"]):
        layer = "llama_transformer_decoder" + (f"_{i}" if i else "")
        yield layer, f"transformer_layer_{i}", []
        yield f"{layer}/_self_attention_layernorm", "self_attention_layernorm", [(d,)]
        yield f"{layer}/_self_attention_layer", "self_attention", []
        for dense, name, shape in (
            ("_query_dense", "query", (d, n, head)),
            ("_key_dense", "key", (d, kv, head)),
            ("_value_dense", "value", (d, kv, head)),
            ("_output_dense", "attention_output", (n, head, d)),
        ):
            yield f"{layer}/_self_attention_layer/{dense}", name, [shape]
        yield f"{layer}/_feedforward_layernorm", "feedforward_layernorm", [(d,)]
        yield f"{layer}/_feedforward_gate_dense", "feedforward_gate_dense", [(d, ff)]
        yield f"{layer}/_feedforward_intermediate_dense", "feedforward_intermediate_dense", [(d, ff)]
        yield f"{layer}/_feedforward_output_dense", "feedforward_output_dense", [(ff, d)]
    yield "llama_layer_norm", "sequence_output_layernorm", [(d,)]


def write_llama(path: Path, sizes: dict[str, int], dtype: str, seed: int = 0) -> int:
    """The ``.keras`` file of a random Llama of ``sizes`` whose variables are ``dtype`` (float32 or bfloat16);
    returns its number of parameters."""
    import h5py

    rng = np.random.default_rng(seed)
    count = 0
    with tempfile.TemporaryDirectory(prefix="convert-memory-") as scratch:
        weights = Path(scratch) / "model.weights.h5"
        with h5py.File(weights, "w") as f:
            f.require_group("vars").attrs["name"] = "llama_backbone"
            for name in ("input_layer", "input_layer_1"):
                f.require_group(f"layers/{name}/vars").attrs["name"] = name
            for group, name, shapes in llama_variables(sizes):
                variables = f.require_group(f"layers/{group}/vars")
                variables.attrs["name"] = name
                for index, shape in enumerate(shapes):
                    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[0] ** -0.5)
                    count += values.size
                    if dtype == "bfloat16":  # keras's H5Entry: the bfloat16 values as 2-byte opaque data
                        bits = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()
                        variables.create_dataset(str(index), data=bits.view("V2")).attrs["dtype"] = "bfloat16"
                    else:
                        variables.create_dataset(str(index), data=values)
        with zipfile.ZipFile(path, "w") as archive:  # stored, as keras writes it
            archive.writestr("config.json", json.dumps(llama_config(sizes, dtype)))
            archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
            archive.write(weights, "model.weights.h5")
    return count


_CHILD = r"""
import json, sys
import torch
import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.tools.bench import rss_peak_of
torch.set_num_threads(2)
step, warm, path, folder = sys.argv[1:5]
if step == "convert":
    convert_keras_model(warm)  # imports, registries, the first compilation: paid before the measure
    make = lambda: convert_keras_model(path)
else:
    attnzoo.load(warm)
    make = lambda: attnzoo.load(folder)
held = []
before, peak = rss_peak_of(lambda: held.append(make()))
model = held[0]
if step == "convert":
    attnzoo.save(model, folder)
tensors = list(model.state_dict().values())
dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.is_floating_point()})
nbytes = sum(t.numel() * t.element_size() for t in tensors)
print(json.dumps({"before": before, "peak": peak, "weights_bytes": nbytes, "dtypes": dtypes}))
"""


def measure(step: str, warm: Path, path: Path, folder: Path) -> dict:
    """Peak resident bytes of ``step`` (``convert``: converting ``path``, then saving it to ``folder``; ``load``:
    ``attnzoo.load(folder)``) in a fresh interpreter, above its resident size before."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", _CHILD, step, str(warm), str(path), str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": reason[:300]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    extra = out["peak"] - out["before"]
    return {**out, "extra_bytes": extra, "ratio": extra / out["weights_bytes"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 2-layer Llama of hidden 256 (a smoke run)")
    parser.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    args = parser.parse_args()
    sizes = QUICK if args.quick else SIZES
    rows = []
    with tempfile.TemporaryDirectory(prefix="convert-memory-") as folder:
        warm = Path(folder) / "warm.keras"
        write_llama(warm, {**QUICK, "num_layers": 1, "vocabulary_size": 100}, "float32")
        attnzoo.save(convert_keras_model(warm), Path(folder) / "warm")
        for dtype in ("float32", "bfloat16"):
            path, saved = Path(folder) / f"llama-{dtype}.keras", Path(folder) / f"llama-{dtype}"
            parameters = write_llama(path, sizes, dtype)
            for step, source in (("convert", warm), ("load", Path(folder) / "warm")):
                result = measure(step, source, path, saved)
                row = {"file": dtype, "step": step, "parameters": parameters, "file_bytes": path.stat().st_size}
                rows.append({**row, **result})
                print(json.dumps(rows[-1]))
    headers = ["file", "step", "parameters", "file MiB", "model's dtype", "weights MiB", "peak above MiB"]
    headers.append("peak / weights")
    table = []
    for row in rows:
        what = "`convert_keras_model(file)`" if row["step"] == "convert" else "`attnzoo.load(saved folder)`"
        start = [row["file"], what, f"{row['parameters'] / 1e6:.0f}M", f"{row['file_bytes'] / 2**20:,.0f}"]
        if "error" in row:
            table.append([*start, f"refused: {row['error'][:80]}", "", "", ""])
            continue
        weights, extra = f"{row['weights_bytes'] / 2**20:,.0f}", f"{row['extra_bytes'] / 2**20:,.0f}"
        table.append([*start, ", ".join(row["dtypes"]), weights, extra, f"**{row['ratio']:.2f}x**"])
    text = markdown_table(headers, table)
    print(text)
    shape = ", ".join(f"{k} {v}" for k, v in sizes.items())
    name = "convert_memory-quick.json" if args.quick else "convert_memory.json"
    write_json(HERE / "results" / name, {"sizes": sizes, "target": TARGET, "torch": torch.__version__, "rows": rows})
    if args.write_docs and not args.quick:
        intro = (
            f"torch {torch.__version__}, CPU, 2 threads; a keras-hub LlamaBackbone ({shape}), its `.keras` "
            f"written with h5py; the peak resident size of `convert_keras_model(file)`, and of `attnzoo.load` of "
            f"the folder `attnzoo.save` wrote of it, each in a fresh interpreter, above its resident size just "
            f"before (`python benchmarks/convert_memory.py --write-docs`)."
        )
        update_doc_section(ROOT / "docs" / "performance.md", "convert-memory", intro + "\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
