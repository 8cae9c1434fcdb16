"""Cached greedy decoding of a converted keras-hub ``LlamaCausalLM`` and ``GemmaCausalLM`` against transformers'
``LlamaForCausalLM`` and ``GemmaForCausalLM`` loading the Hugging Face folder attnzoo's door writes for them.

    python benchmarks/keras_hub_lm_decoding.py [--rounds 5] [--tokens 128] [--quick] [--write-docs]

Each model is a committed tiny fixture's preset (``tests/data/keras_hub_lm/{llama,gemma}``, keras-hub 0.32) scaled
up through its config: 4 layers, hidden 256, 8 query heads on 4 key/value heads of 32, a vocabulary of 1000;
Llama's intermediate size 1024, Gemma's 512 (its gate and up projections are half of it wide). keras-hub is not
needed: the script writes the preset folder (config.json, task.json, metadata.json and model.weights.h5 with
every variable of the fixture's layout at the scaled shape, random; layers 2 and 3 as layer 1's groups), converts
it with :func:`attnzoo.keras.convert_keras_model`, writes it with :func:`attnzoo.keras.to_transformers` and loads
that folder with ``AutoModelForCausalLM`` (no weight copied by hand).

Then, as ``benchmarks/keras_hub_decoding.py`` does for GPT-2 (its :func:`compare`): the logits on a random prompt
agree to 1e-4, attnzoo's cached tokens are its uncached ones and transformers' greedy tokens; greedy generation of
``--tokens`` new tokens after a 16-token prompt, batch 1 and 8, CPU, one thread, alternating rounds; the speed-up
is transformers' time over attnzoo's (median of per-round ratios; > 1: attnzoo is faster). Writes
benchmarks/results/keras_hub_lm_decoding.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, markdown_table, steady_allocator, update_doc_section, write_json  # noqa: E402
from keras_hub_decoding import PROMPT, THREADS, compare  # noqa: E402

LAYERS = 4
FIXTURES = ROOT / "tests" / "data" / "keras_hub_lm"
# each family's preset, and its tiny sizes -> the benchmark's (every tiny size is a distinct number, so a
# variable's scaled shape is its shape with each size replaced)
FAMILIES = {
    "llama": ("llama/causal_lm_preset", {256: 1000, 32: 256, 64: 1024, 4: 8, 2: 4, 8: 32}),
    "gemma": ("gemma/lora_preset", {256: 1000, 32: 256, 64: 512, 4: 8, 2: 4, 8: 32}),
}
SIZES = ("vocabulary_size", "hidden_dim", "intermediate_dim", "num_query_heads", "num_key_value_heads", "head_dim")
BLOCK = re.compile(r"^(?P<name>decoder_block|transformer_layer)_(?P<i>\d+)$")


def scaled_preset(family: str, folder: Path, seed: int = 0) -> Path:
    """The family's fixture preset at the benchmark's sizes, random weights, written into ``folder``."""
    import h5py

    preset, sizes = FAMILIES[family]
    source = FIXTURES / preset
    folder.mkdir(parents=True)
    backbone = json.loads((source / "config.json").read_text())
    for key in SIZES:
        if key in backbone["config"]:
            backbone["config"][key] = sizes[backbone["config"][key]]
    backbone["config"]["num_layers"] = LAYERS
    task = json.loads((source / "task.json").read_text())
    task["config"]["backbone"]["config"], task["config"]["preprocessor"] = backbone["config"], None
    (folder / "config.json").write_text(json.dumps(backbone, indent=2))
    (folder / "task.json").write_text(json.dumps(task, indent=2))
    shutil.copy(source / "metadata.json", folder / "metadata.json")
    rng = np.random.default_rng(seed)

    def random(shape: tuple[int, ...]) -> np.ndarray:
        scaled = tuple(sizes[n] for n in shape)
        if len(scaled) == 1:  # a norm's scale
            return (1 + 0.1 * rng.standard_normal(scaled)).astype("float32")
        # the embeddings large enough that greedy decoding wanders over the vocabulary (as in GPT-2's benchmark)
        scale = 0.5 if scaled[0] == sizes[256] else float(np.prod(scaled[:-1])) ** -0.5
        return (rng.standard_normal(scaled) * scale).astype("float32")

    with h5py.File(source / "model.weights.h5") as tiny, h5py.File(folder / "model.weights.h5", "w") as out:
        template = None
        for key, group in tiny["layers"].items():
            name = group["vars"].attrs["name"]
            match = BLOCK.match(name)
            template = (key, match["name"]) if match and match["i"] == "1" else template
            tiny.copy(group, out.require_group("layers"), name=key, shallow=False)
        for i in range(2, LAYERS):  # the further blocks: layer 1's groups under the next names
            key, name = template
            out["layers"].copy(out["layers"][key], f"{key.rsplit('_', 1)[0]}_{i}")
            out["layers"][f"{key.rsplit('_', 1)[0]}_{i}"]["vars"].attrs["name"] = f"{name}_{i}"
        for attr, value in tiny["vars"].attrs.items():
            out.require_group("vars").attrs[attr] = value
        datasets: list[str] = []
        out.visititems(lambda path, item: datasets.append(path) if isinstance(item, h5py.Dataset) else None)
        for path in datasets:
            shape = out[path].shape
            del out[path]
            out.create_dataset(path, data=random(shape))
    return folder


def measure(family: str, batches: tuple[int, ...], tokens: int, rounds: int, min_run_time: float, tmp: Path):
    from transformers import AutoModelForCausalLM

    from attnzoo.keras import convert_keras_model, to_transformers

    preset = scaled_preset(family, tmp / family)
    ours = convert_keras_model(preset).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer in the preset: the folder has none
        to_transformers(ours, tmp / f"{family}_hf")
    theirs = AutoModelForCausalLM.from_pretrained(tmp / f"{family}_hf").eval()
    vocab = FAMILIES[family][1][256]
    rows = []
    for batch in batches:
        row = compare(ours, theirs, batch, tokens, rounds, min_run_time, vocab)
        rows.append({"family": family, "class": type(theirs).__name__, **row})
    return rows


def table(out: dict) -> str:
    rows = [
        [
            r["class"],
            r["batch"],
            f"{r['tokens_per_s']['attnzoo']:,.0f}",
            f"{r['tokens_per_s']['transformers']:,.0f}",
            f"**{r['speedup_over_transformers']:.2f}x**",
        ]
        for r in out["rows"]
    ]
    header = (
        f"{out['machine']}; converted keras-hub LlamaCausalLM and GemmaCausalLM ({LAYERS} layers, hidden 256, 8 "
        f"query heads on 4 key/value heads, vocabulary 1000, random weights) against transformers' class loading "
        f"the folder `--to transformers` writes, greedy, {out['rows'][0]['new_tokens']} new tokens after a "
        f"{PROMPT}-token prompt, medians of {out['rounds']} alternating rounds (`{out['command']}`)."
    )
    columns = ["transformers class", "batch", "attnzoo tokens/s", "transformers tokens/s", "attnzoo speed-up"]
    return header + "\n\n" + markdown_table(columns, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per generation")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 tokens, 2 rounds")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    steady_allocator()
    tokens, rounds = (16, 2) if args.quick else (args.tokens, args.rounds)
    min_run_time = 0.05 if args.quick else 1.0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            rows += measure(family, (1, 8), tokens, rounds, min_run_time, Path(tmp))
    out = {
        "machine": f"torch {torch.__version__}, {THREADS} thread, float32, CPU",
        "rounds": rounds,
        "rows": rows,
        "command": " ".join(["python benchmarks/keras_hub_lm_decoding.py", *sys.argv[1:]]),
    }
    write_json(HERE / "results" / f"keras_hub_lm_decoding{'-quick' if args.quick else ''}.json", out)
    print(table(out))
    if args.write_docs and not args.quick:
        update_doc_section(HERE.parent / "docs" / "performance.md", "keras-hub-lm-decoding", table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
