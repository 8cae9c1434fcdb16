"""What an attnzoo attention backend costs inside a Hugging Face model, against transformers' own, in one run.

    python benchmarks/integrations.py [--rounds 5] [--quick] [--write-docs]
    python benchmarks/integrations.py --sizes --batch 8 --lengths 256 1024 --rounds 2 --threads 1 \
        --backends attnzoo_softmax attnzoo_window attnzoo_sparsemax attnzoo_entmax15

A small Llama (built from a config, random weights: speed does not depend on them) runs with
``attn_implementation`` = ``sdpa``, ``eager`` and each registered attnzoo backend, the models sharing one
state dict:

* **forward**: one forward over B sequences of T tokens (a prefill, or a training step's forward), no grad;
  tokens/s = B·T / time.
* **decode**: ``generate`` of N new tokens from a prompt of P tokens with the KV cache, greedy;
  tokens/s = B·N / time.

``--sizes`` measures the forward alone at ``--batch`` × each of ``--lengths``, unpadded (transformers
skips the mask of an unpadded causal batch, as for sdpa) and padded (the first sequence's first quarter
is padding: every model call gets a mask), for ``--backends`` against sdpa and eager, and writes
benchmarks/results/integrations_sizes.json. At each size it also times the **attention call alone**: the
query, key, value and mask of the sdpa model's first layer, as transformers hands them to its attention
function (captured in that forward), given to each backend's registered function and to transformers'
own ``sdpa`` function. ``attention_share`` is the sdpa model's layers × that call's time over its whole
forward: even a free attention leaves a whole-model ratio of at least 1 - share.

Ratios are paired per round against ``eager`` and ``sdpa`` (times of one round are taken seconds apart);
``eager (control)`` is eager timed as a second implementation, so its distance from 1 is the noise of the
run. Writes benchmarks/results/integrations.json and, with --write-docs, the table into
docs/integrations.md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import (  # noqa: E402
    HERE,
    ROOT,
    machine_line,
    markdown_table,
    paired_speedup,
    setup_threads,
    time_rounds,
    update_doc_section,
    write_json,
)

import attnzoo.integrations.transformers as azt  # noqa: E402

CONTROL = "eager (control)"


def llama_config(quick: bool):
    from transformers import LlamaConfig

    width = 128 if quick else 256
    return LlamaConfig(
        vocab_size=1000,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2 if quick else 4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )


def models(quick: bool, backends: list[str], *, control: bool = True) -> dict[str, torch.nn.Module]:
    """One model per implementation, all with the same weights."""
    from transformers import AutoModelForCausalLM

    config = llama_config(quick)
    torch.manual_seed(0)
    first = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    built = {}
    for impl in ["sdpa", "eager", *([CONTROL] if control else []), *backends]:
        # a config of its own: from_config writes the implementation into the config it is given
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl.split(" ")[0])
        model.load_state_dict(first.state_dict())
        built[impl] = model.eval()
    assert all(m.config._attn_implementation == name.split(" ")[0] for name, m in built.items())
    return built


def _forward(model, ids, mask=None):
    def step():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    return step


def _decode(model, prompt, new: int):
    def step():
        with torch.no_grad():
            return model.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
            )

    return step


def measure(built, steps, tokens: int, rounds: int, min_run_time: float) -> list[dict]:
    impls = {name: steps(model) for name, model in built.items()}
    for step in impls.values():  # warm-up: the attnzoo backends build their attention modules on the first call
        step()
    per_round = time_rounds(impls, rounds=rounds, min_run_time=min_run_time)
    rows = []
    for name, times in per_round.items():
        rows.append(
            {
                "implementation": name,
                "seconds": statistics.median(times),
                "tokens_per_s": tokens / statistics.median(times),
                "time_over_eager": 1 / paired_speedup(per_round["eager"], times),
                "time_over_sdpa": 1 / paired_speedup(per_round["sdpa"], times),
            }
        )
    return rows


def _table(rows: list[dict]) -> str:
    return markdown_table(
        ["implementation", "tokens/s", "time / eager", "time / sdpa"],
        [
            [
                f"`{r['implementation']}`",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['time_over_eager']:.2f}",
                f"{r['time_over_sdpa']:.2f}",
            ]
            for r in rows
        ],
    )


def _docs(out: dict) -> str:
    s = out["sizes"]
    return "\n".join(
        [
            f"Measured by `{out['command']}` ({out['machine']}): a Llama of {s['layers']} layers, "
            f"width {s['width']}, {s['heads']} query and {s['kv_heads']} key/value heads; the control times eager "
            "again, so its distance from 1.00 is the noise of the run.",
            "",
            f"**Forward** over {s['batch']} × {s['length']} tokens:",
            "",
            _table(out["forward"]),
            "",
            f"**Decode**: `generate` of {s['new']} tokens after a prompt of {s['prompt']}, batch {s['batch']}, "
            "with the KV cache:",
            "",
            _table(out["decode"]),
        ]
    )


def _first_attention_call(model, ids, mask) -> tuple:
    """(module, query, key, value, attention_mask, kwargs) of the first layer's attention call in one forward
    of ``model`` (an sdpa model): recorded by a function registered beside sdpa, which then runs sdpa."""
    from transformers import AttentionInterface, AttentionMaskInterface

    sdpa = AttentionInterface()["sdpa"]
    calls = []

    def recording(module, query, key, value, attention_mask, **kwargs):
        calls.append((module, query, key, value, attention_mask, kwargs))
        return sdpa(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("recording_sdpa", recording)
    AttentionMaskInterface.register("recording_sdpa", AttentionMaskInterface()["sdpa"])
    model.set_attn_implementation("recording_sdpa")
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    finally:
        model.set_attn_implementation("sdpa")
    return calls[0]


def attention_alone(call: tuple, backends: list[str], rounds: int) -> list[dict]:
    """Each backend's registered function and transformers' sdpa function on one recorded call."""
    from transformers import AttentionInterface

    module, q, k, v, mask, kwargs = call
    interface = AttentionInterface()

    def step(name):
        fn = interface[name]

        def run():
            with torch.no_grad():
                return fn(module, q, k, v, mask, **kwargs)

        return run

    impls = {name: step(name) for name in ["sdpa", *backends]}
    for run in impls.values():  # warm-up: a backend builds its attention module on its first call
        run()
    per_round = time_rounds(impls, rounds=rounds, min_run_time=0.0)
    return [
        {
            "implementation": name,
            "seconds": statistics.median(times),
            "time_over_sdpa": 1 / paired_speedup(per_round["sdpa"], times),
        }
        for name, times in per_round.items()
    ]


def sizes(args, backends: list[str]) -> int:
    """The forward at ``--batch`` × each of ``--lengths``, unpadded and padded, and the attention call alone
    (see the module doc)."""
    built = models(False, backends, control=False)
    config = llama_config(False)
    gen = torch.Generator().manual_seed(1)
    results = []
    for length in args.lengths:
        ids = torch.randint(1, config.vocab_size, (args.batch, length), generator=gen)
        padded = torch.ones_like(ids)
        padded[0, : length // 4] = 0  # left padding of the first sequence
        for name, mask in (("unpadded", None), ("padded", padded)):
            rows = measure(
                built, lambda m, ids=ids, mask=mask: _forward(m, ids, mask), args.batch * length, args.rounds, 0.0
            )
            alone = attention_alone(_first_attention_call(built["sdpa"], ids, mask), backends, args.rounds)
            whole = next(r["seconds"] for r in rows if r["implementation"] == "sdpa")
            share = config.num_hidden_layers * alone[0]["seconds"] / whole
            results.append(
                {"length": length, "padding": name, "rows": rows, "attention": alone, "attention_share": share}
            )
            print(f"\nforward, batch {args.batch} × {length}, {name}:")
            print(_table(rows))
            print(f"the attention call alone (sdpa's: {share:.0%} of sdpa's forward), time / sdpa's:")
            print(", ".join(f"{r['implementation']} {r['time_over_sdpa']:.2f}" for r in alone[1:]))
    out = {
        "command": " ".join(["python benchmarks/integrations.py", *sys.argv[1:]]),
        "machine": machine_line() + " (a shared machine, loaded: ratios only)",
        "transformers": __import__("transformers").__version__,
        "sizes": {
            "layers": config.num_hidden_layers,
            "width": config.hidden_size,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "batch": args.batch,
        },
        "forward": results,
    }
    write_json(HERE / "results" / "integrations_sizes.json", out)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=common.THREADS, help="torch threads (1 holds steadier on a shared machine)"
    )
    parser.add_argument("--sizes", action="store_true", help="the forward at --batch × --lengths, padded and not")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--backends", nargs="+", default=None, help="attnzoo backends to time (default: all)")
    args = parser.parse_args()
    common.THREADS = args.threads  # read by setup_threads, time_rounds and machine_line
    setup_threads()
    backends = azt.register()
    if args.backends:
        backends = [b for b in backends if b in args.backends]
    if args.sizes:
        return sizes(args, backends)
    built = models(args.quick, backends)
    config = llama_config(args.quick)
    batch, length = (2, 64) if args.quick else (4, 256)
    prompt_length, new = (8, 8) if args.quick else (32, 32)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, config.vocab_size, (batch, length), generator=gen)
    prompt = torch.randint(1, config.vocab_size, (batch, prompt_length), generator=gen)
    min_run_time = 0.2 if args.quick else 1.0
    out = {
        "command": " ".join(["python benchmarks/integrations.py", *sys.argv[1:]]),
        "machine": machine_line(),
        "transformers": __import__("transformers").__version__,
        "sizes": {
            "layers": config.num_hidden_layers,
            "width": config.hidden_size,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "batch": batch,
            "length": length,
            "prompt": prompt_length,
            "new": new,
        },
        "forward": measure(built, lambda m: _forward(m, ids), batch * length, args.rounds, min_run_time),
        "decode": measure(built, lambda m: _decode(m, prompt, new), batch * new, args.rounds, min_run_time),
    }
    write_json(HERE / "results" / "integrations.json", out)
    text = _docs(out)
    print(text)
    if args.write_docs:
        update_doc_section(ROOT / "docs" / "integrations.md", "integrations-cost", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
