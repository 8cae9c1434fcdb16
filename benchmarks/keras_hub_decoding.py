"""Cached greedy decoding of a converted keras-hub ``GPT2CausalLM`` against transformers' ``GPT2LMHeadModel``
with the same weights, in one run.

    python benchmarks/keras_hub_decoding.py [--rounds 5] [--tokens 128] [--quick] [--write-docs]

The model is a keras-hub GPT-2 at 4 layers, hidden 256, 4 heads, an intermediate size of 1024, a vocabulary of
1000 and 256 positions, with random weights. keras-hub is not needed: the script writes the ``.keras`` file
keras-hub's ``GPT2CausalLM.save`` writes (config.json of the task over its ``GPT2Backbone``, metadata.json,
model.weights.h5 with the backbone's variables under its layers' paths) with h5py, converts it with
:func:`attnzoo.keras.convert_keras_model`, and copies the same arrays into
``GPT2LMHeadModel(GPT2Config(...))`` (GPT-2's fused ``c_attn`` and ``Conv1D`` layouts; ``gelu_new`` is
keras-hub's tanh-approximated GELU; the head tied to the token embedding as in both).

Before timing, the script checks that both give the same logits on the prompt (to 1e-4), that attnzoo's
cached generation gives the tokens of its uncached one (the whole sequence recomputed each step), and that
transformers' greedy tokens are attnzoo's. Then it times greedy generation of ``--tokens`` new tokens after
a 16-token prompt: ``model.generate(ids, N)`` (attnzoo, each step one token through the per-layer KV caches)
and ``generate(do_sample=False, use_cache=True, min_new_tokens=N)`` (transformers' own loop and cache),
alternating in rounds on one thread. Tokens per second and the speed-up (transformers' time over attnzoo's,
the median of per-round ratios; > 1: attnzoo is faster). Writes benchmarks/results/keras_hub_decoding.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    keras_archive,
    markdown_table,
    paired_speedup,
    steady_allocator,
    transformers_greedy,
    update_doc_section,
    write_json,
)

from attnzoo.tools import bench  # noqa: E402

VOCAB, HIDDEN, LAYERS, HEADS, POSITIONS, PROMPT = 1000, 256, 4, 4, 256, 16
INTERMEDIATE = 4 * HIDDEN
THREADS = 1  # a step of this model is a few small matrix products: one thread, as benchmarks/decoding.py


def random_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's variables by keras-hub's names: ``token``, ``position``, ``final/{gamma,beta}`` and, per layer
    ``i``, ``i/{ln1,ln2}/{gamma,beta}``, ``i/{query,key,value}/{kernel [D, H, d],bias [H, d]}``,
    ``i/out/{kernel [H, d, D],bias}``, ``i/{fc,proj}/{kernel,bias}``."""
    rng = np.random.default_rng(seed)
    d = HIDDEN // HEADS

    def normal(*shape: int, scale: float = HIDDEN**-0.5) -> np.ndarray:  # kernels: 1 / sqrt(fan-in)
        return (rng.standard_normal(shape) * scale).astype("float32")

    # embeddings large enough that the tied head's logits spread out: greedy decoding then wanders
    # over the vocabulary instead of repeating one token, and ties (rounding-dependent picks) are rare
    w = {"token": normal(VOCAB, HIDDEN, scale=0.5), "position": normal(POSITIONS, HIDDEN, scale=0.5)}
    w["final/gamma"], w["final/beta"] = 1 + normal(HIDDEN, scale=0.1), normal(HIDDEN)
    for i in range(LAYERS):
        for norm in ("ln1", "ln2"):
            w[f"{i}/{norm}/gamma"], w[f"{i}/{norm}/beta"] = 1 + normal(HIDDEN, scale=0.1), normal(HIDDEN)
        for name in ("query", "key", "value"):
            w[f"{i}/{name}/kernel"], w[f"{i}/{name}/bias"] = normal(HIDDEN, HEADS, d), normal(HEADS, d)
        w[f"{i}/out/kernel"], w[f"{i}/out/bias"] = normal(HEADS, d, HIDDEN), normal(HIDDEN)
        w[f"{i}/fc/kernel"], w[f"{i}/fc/bias"] = normal(HIDDEN, INTERMEDIATE), normal(INTERMEDIATE)
        w[f"{i}/proj/kernel"] = normal(INTERMEDIATE, HIDDEN, scale=INTERMEDIATE**-0.5)
        w[f"{i}/proj/bias"] = normal(HIDDEN)
    return w


def keras_hub_file(path: Path, w: dict[str, np.ndarray]) -> Path:
    """The ``.keras`` zip keras-hub 0.32's ``GPT2CausalLM(backbone, preprocessor=None).save(path)`` writes for
    these weights (keras 3.15's layout: each layer's variables under ``layers/<its path>/vars/<index>``)."""

    backbone = {
        "name": "gpt2_backbone",
        "trainable": True,
        "vocabulary_size": VOCAB,
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "hidden_dim": HIDDEN,
        "intermediate_dim": INTERMEDIATE,
        "dropout": 0.1,
        "max_sequence_length": POSITIONS,
    }
    config = {
        "module": "keras_hub.src.models.gpt2.gpt2_causal_lm",
        "class_name": "GPT2CausalLM",
        "config": {
            "backbone": {
                "module": "keras_hub.src.models.gpt2.gpt2_backbone",
                "class_name": "GPT2Backbone",
                "config": backbone,
                "registered_name": "keras_hub>GPT2Backbone",
            },
            "preprocessor": None,
            "name": "gpt2_causal_lm",
        },
        "registered_name": "keras_hub>GPT2CausalLM",
    }

    def fill(f) -> None:

        def put(group: str, name: str, *arrays: np.ndarray) -> None:
            variables = f.require_group(f"layers/gpt2_backbone/layers/{group}/vars")
            variables.attrs["name"] = name
            for index, array in enumerate(arrays):
                variables.create_dataset(str(index), data=array)

        put("reversible_embedding", "token_embedding", w["token"])
        put("position_embedding", "position_embedding", w["position"])
        put("layer_normalization", "layer_norm", w["final/gamma"], w["final/beta"])
        for i in range(LAYERS):
            layer = "transformer_decoder" + (f"_{i}" if i else "")
            put(layer, f"transformer_layer_{i}")
            put(
                f"{layer}/_self_attention_layer_norm",
                "self_attention_layer_norm",
                w[f"{i}/ln1/gamma"],
                w[f"{i}/ln1/beta"],
            )
            put(
                f"{layer}/_feedforward_layer_norm",
                "feedforward_layer_norm",
                w[f"{i}/ln2/gamma"],
                w[f"{i}/ln2/beta"],
            )
            put(f"{layer}/_self_attention_layer", "self_attention")
            for dense, name in (("query_dense", "query"), ("key_dense", "key"), ("value_dense", "value")):
                arrays = w[f"{i}/{name}/kernel"], w[f"{i}/{name}/bias"]
                put(f"{layer}/_self_attention_layer/{dense}", name, *arrays)
            out = w[f"{i}/out/kernel"], w[f"{i}/out/bias"]
            put(f"{layer}/_self_attention_layer/output_dense", "attention_output", *out)
            fc, proj = (w[f"{i}/fc/kernel"], w[f"{i}/fc/bias"]), (w[f"{i}/proj/kernel"], w[f"{i}/proj/bias"])
            put(f"{layer}/_feedforward_intermediate_dense", "feedforward_intermediate_dense", *fc)
            put(f"{layer}/_feedforward_output_dense", "feedforward_output_dense", *proj)
        f.require_group("layers/gpt2_backbone/vars").attrs["name"] = "gpt2_backbone"
        f.require_group("vars").attrs["name"] = "gpt2_causal_lm"

    return keras_archive(path, config, fill)


def transformers_gpt2(w: dict[str, np.ndarray]):
    """``GPT2LMHeadModel`` holding the same weights (its head tied to ``wte``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=POSITIONS,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=INTERMEDIATE,
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(config).eval()
    t = {key: torch.from_numpy(value) for key, value in w.items()}
    state = {"transformer.wte.weight": t["token"], "transformer.wpe.weight": t["position"]}
    state["transformer.ln_f.weight"], state["transformer.ln_f.bias"] = t["final/gamma"], t["final/beta"]
    for i in range(LAYERS):
        h = f"transformer.h.{i}"
        state[f"{h}.ln_1.weight"], state[f"{h}.ln_1.bias"] = t[f"{i}/ln1/gamma"], t[f"{i}/ln1/beta"]
        state[f"{h}.ln_2.weight"], state[f"{h}.ln_2.bias"] = t[f"{i}/ln2/gamma"], t[f"{i}/ln2/beta"]
        qkv = ("query", "key", "value")
        state[f"{h}.attn.c_attn.weight"] = torch.cat([t[f"{i}/{n}/kernel"].reshape(HIDDEN, HIDDEN) for n in qkv], 1)
        state[f"{h}.attn.c_attn.bias"] = torch.cat([t[f"{i}/{n}/bias"].reshape(HIDDEN) for n in qkv])
        state[f"{h}.attn.c_proj.weight"] = t[f"{i}/out/kernel"].reshape(HIDDEN, HIDDEN)
        state[f"{h}.attn.c_proj.bias"] = t[f"{i}/out/bias"]
        state[f"{h}.mlp.c_fc.weight"], state[f"{h}.mlp.c_fc.bias"] = t[f"{i}/fc/kernel"], t[f"{i}/fc/bias"]
        state[f"{h}.mlp.c_proj.weight"], state[f"{h}.mlp.c_proj.bias"] = t[f"{i}/proj/kernel"], t[f"{i}/proj/bias"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [name for name in missing if name != "lm_head.weight" and not name.endswith(".attn.bias")]
    if left or unexpected:
        raise SystemExit(f"GPT2LMHeadModel's weights not all set: missing {left}, unexpected {unexpected}")
    model.tie_weights()
    return model


def measure(batch: int, tokens: int, rounds: int, min_run_time: float, folder: Path) -> dict:
    from attnzoo.keras import convert_keras_model

    w = random_weights()
    ours = convert_keras_model(keras_hub_file(folder / f"gpt2_causal_lm_{batch}.keras", w)).eval()
    return compare(ours, transformers_gpt2(w), batch, tokens, rounds, min_run_time, VOCAB)


def compare(ours, theirs, batch: int, tokens: int, rounds: int, min_run_time: float, vocab: int) -> dict:
    """Check that the converted model ``ours`` and transformers' ``theirs`` are one model (logits on a random
    prompt to 1e-4, attnzoo's cached tokens its uncached ones, transformers' greedy tokens attnzoo's), then time
    their greedy generation of ``tokens`` new tokens, alternating in rounds; the row of the results."""
    prompt = torch.randint(1, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        logits = ours({"token_ids": prompt, "padding_mask": torch.ones_like(prompt)})
        reference = theirs(prompt).logits
    gap = float((logits - reference).abs().max())
    if gap > 1e-4:
        raise SystemExit(f"the converted model's logits differ from transformers' by {gap}: not the same model")
    out = ours.generate(prompt, tokens)
    if not torch.equal(out, ours.generate(prompt, tokens, use_cache=False)):
        raise SystemExit("attnzoo's cached generation differs from its uncached greedy tokens")
    if not torch.equal(out, transformers_greedy(theirs, prompt, tokens)):
        raise SystemExit("transformers' greedy tokens differ from attnzoo's")
    steps = {
        "attnzoo": lambda: ours.generate(prompt, tokens),
        "transformers": lambda: transformers_greedy(theirs, prompt, tokens),
    }
    times = bench.time_alternating(steps, rounds=rounds, min_run_time=min_run_time, threads=THREADS)
    median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    row = {
        "batch": batch,
        "new_tokens": tokens,
        "logits_max_gap": gap,
        "parameters": {
            "attnzoo": sum(p.numel() for p in ours.parameters()),
            "transformers": sum(p.numel() for p in theirs.parameters()),
        },
        "tokens_per_s": {name: batch * tokens / t for name, t in median.items()},
        "step_ms": {name: t / tokens * 1e3 for name, t in median.items()},
        "speedup_over_transformers": paired_speedup(times["transformers"], times["attnzoo"]),
    }
    print(row, flush=True)
    return row


def table(out: dict) -> str:
    rows = [
        [
            r["batch"],
            f"{r['tokens_per_s']['attnzoo']:,.0f}",
            f"{r['tokens_per_s']['transformers']:,.0f}",
            f"**{r['speedup_over_transformers']:.2f}x**",
        ]
        for r in out["rows"]
    ]
    header = (
        f"{out['machine']}; a converted keras-hub GPT2CausalLM ({LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, "
        f"vocabulary {VOCAB}) against GPT2LMHeadModel with the same weights, greedy, "
        f"{out['rows'][0]['new_tokens']} new tokens after a {PROMPT}-token prompt, medians of {out['rounds']} "
        f"alternating rounds (`{out['command']}`)."
    )
    columns = ["batch", "attnzoo tokens/s", "transformers GPT-2 tokens/s", "attnzoo speed-up"]
    return header + "\n\n" + markdown_table(columns, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per generation")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 tokens, 2 rounds")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    steady_allocator()
    tokens, rounds = (16, 2) if args.quick else (args.tokens, args.rounds)
    min_run_time = 0.05 if args.quick else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(batch, tokens, rounds, min_run_time, Path(tmp)) for batch in (1, 8)]
    out = {
        "machine": f"torch {torch.__version__}, {THREADS} thread, float32, CPU",
        "rounds": rounds,
        "rows": rows,
        "command": " ".join(["python benchmarks/keras_hub_decoding.py", *sys.argv[1:]]),
    }
    write_json(HERE / "results" / f"keras_hub_decoding{'-quick' if args.quick else ''}.json", out)
    print(table(out))
    if args.write_docs and not args.quick:
        update_doc_section(HERE.parent / "docs" / "performance.md", "keras-hub-decoding", table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
