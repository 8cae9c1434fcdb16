"""What the attention core's options cost, each against the computation it replaces, in one run.

    python benchmarks/attention_core.py [--rounds 3] [--quick] [--write-docs] [--baseline REV]

* **window** (w = 128) in blocks against full attention (one SDPA call) and against the band-masked
  full computation the blocks replace, at T = 4,096 and 16,384, forward and forward + backward: time
  and peak extra memory (B = 1, E = 256, 4 heads).
* **decoding** 1,024 tokens one at a time with the KV cache against recomputing the causal forward over
  the prefix at every step; and the time of one cached step at growing positions, with and without a
  window.
* **relative positions** at T = 4,096: peak memory of ``relpos_self`` against ``alibi_self`` (which
  also adds a per-head bias to the scores) and against the previous implementation's [T, T, d] tables.
* **causal linear attention** in chunks against full causal attention (SDPA) and against the previous
  [B, h, T, d, d] running sum.
* **the core against the classes it replaced**: each self-attention name built from the core against
  the same class at ``--baseline`` (the last commit before the core; its files are read with git),
  forward and forward + backward at B = 8, T = 512, E = 256, 4 heads, with an A/A control.

Writes benchmarks/results/attention_core.json and, with --write-docs, the tables into
docs/performance.md. Times are medians of alternating rounds; memory is measured in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    ROOT,
    machine_line,
    markdown_table,
    paired_speedup,
    peak_memory,
    setup_threads,
    time_rounds,
    update_doc_section,
    write_json,
)

from attnzoo.layers.attention import Attention  # noqa: E402

BASELINE = "1d5cf50"  # the last commit before the attention core
EMBED, HEADS, WINDOW = 256, 4, 128


# -- steps (module-level: peak_memory runs them in a fresh interpreter) -----------------------------------
def _window_layer(form: str) -> Attention:
    torch.manual_seed(0)
    if form == "full":
        return Attention(EMBED, num_heads=HEADS)
    layer = Attention(EMBED, num_heads=HEADS, window=WINDOW)
    if form == "band":  # the same layer, as the masked full computation
        layer._use_blocks = lambda *args: False  # type: ignore[method-assign]
    return layer


def _step(layer, x: torch.Tensor, mask: torch.Tensor | None, backward: bool):
    """A zero-argument call of ``layer(x, mask)``: under no_grad, or forward and backward."""

    def step():
        if not backward:
            with torch.no_grad():
                return layer(x, mask)
        x.grad = None
        layer.zero_grad(set_to_none=True)
        layer(x, mask).sum().backward()

    return step


def window_step(form: str, seq: int, backward: bool):
    layer = _window_layer(form)
    x = torch.randn(1, seq, EMBED, requires_grad=backward)
    keep = torch.ones(1, seq, dtype=torch.bool)
    keep[0, -seq // 8 :] = False
    return _step(layer, x, keep, backward)


def _old_module(name: str):
    """A module of the baseline revision's attnzoo.layers (self_attention, linear_attention)."""
    folder = Path(tempfile.gettempdir()) / f"attnzoo-baseline-{BASELINE}"
    package = folder / "baseline_layers"
    if not (package / "self_attention.py").exists():
        package.mkdir(parents=True, exist_ok=True)
        for part in ("__init__", "core", "lazy", "normalizers", "self_attention", "linear_attention"):
            text = subprocess.run(
                ["git", "show", f"{BASELINE}:attnzoo/layers/{part}.py"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (package / f"{part}.py").write_text(text)
    sys.path.insert(0, str(folder))
    return importlib.import_module(f"baseline_layers.{name}")


def relpos_step(which: str, seq: int):
    torch.manual_seed(0)
    if which == "relpos_old":
        layer = _old_module("self_attention").RelativePositionSelfAttention(EMBED, num_heads=HEADS)
    else:
        import attnzoo

        layer = attnzoo.create(which, embed_dim=EMBED, num_heads=HEADS)
    x = torch.randn(1, seq, EMBED)
    keep = torch.ones(1, seq, dtype=torch.bool)
    keep[0, -seq // 8 :] = False
    return _step(layer, x, keep, False)


def causal_step(which: str, seq: int):
    torch.manual_seed(0)
    if which == "linear_old":
        layer = _old_module("linear_attention").LinearSelfAttention(EMBED, num_heads=HEADS, causal=True)
    elif which == "linear":
        from attnzoo.layers.linear_attention import LinearSelfAttention

        layer = LinearSelfAttention(EMBED, num_heads=HEADS, causal=True)
    else:
        layer = Attention(EMBED, num_heads=HEADS, causal=True)
    return _step(layer, torch.randn(1, seq, EMBED), None, False)


# -- measurements ---------------------------------------------------------------------------------------
def _median_ms(times: list[float]) -> float:
    return 1000 * sorted(times)[len(times) // 2]


def measure_window(seqs: list[int], rounds: int) -> list[dict]:
    rows = []
    for seq in seqs:
        for backward in (False, True):
            steps = {form: window_step(form, seq, backward) for form in ("full", "window", "band")}
            times = time_rounds(steps, rounds=rounds, min_run_time=0.2)
            memory = {form: peak_memory("attention_core", "window_step", form, seq, backward) for form in steps}
            row = {"seq": seq, "backward": backward}
            for form in steps:
                row[f"{form}_ms"] = _median_ms(times[form])
                row[f"{form}_mib"] = memory[form]["extra_mib"]
            row["full_over_window_time"] = paired_speedup(times["full"], times["window"])
            rows.append(row)
            print(row, flush=True)
    return rows


def _decode_layer(window: int | None) -> Attention:
    torch.manual_seed(0)
    return Attention(EMBED, num_heads=HEADS, causal=True, positions="rope", window=window).eval()


def measure_decoding(tokens: int, probes: list[int]) -> dict:
    layer = _decode_layer(None)
    x = torch.randn(1, tokens, EMBED)
    with torch.no_grad():
        start = time.perf_counter()
        cache = layer.new_cache(1)
        cached = [layer(x[:, t : t + 1], cache=cache) for t in range(tokens)]
        cached_s = time.perf_counter() - start
        start = time.perf_counter()
        recomputed = [layer(x[:, : t + 1])[:, -1:] for t in range(tokens)]
        recompute_s = time.perf_counter() - start
    error = (torch.cat(cached, 1) - torch.cat(recomputed, 1)).abs().max().item()
    result = {
        "tokens": tokens,
        "cached_s": cached_s,
        "recompute_s": recompute_s,
        "speedup": recompute_s / cached_s,
        "max_abs_difference": error,
        "per_step_ms": [],
    }
    for window in (None, WINDOW):
        layer = _decode_layer(window)
        for position in probes:
            cache = layer.new_cache(1)
            with torch.no_grad():
                layer(torch.randn(1, position, EMBED), cache=cache)  # a prompt up to the position
                step = torch.randn(1, 1, EMBED)
                runs = []
                for _ in range(5):
                    begin = time.perf_counter()
                    for _ in range(20):
                        layer(step, cache=cache)
                    runs.append((time.perf_counter() - begin) / 20)
            row = {"window": window, "position": position, "step_ms": _median_ms(runs), "held": len(cache)}
            result["per_step_ms"].append(row)
            print(row, flush=True)
    return result


def measure_relpos(seq: int) -> dict:
    out = {"seq": seq}
    for which in ("alibi_self", "relpos_self", "relpos_old"):
        out[f"{which}_mib"] = peak_memory("attention_core", "relpos_step", which, seq)["extra_mib"]
    steps = {which: relpos_step(which, seq) for which in ("alibi_self", "relpos_self", "relpos_old")}
    times = time_rounds(steps, rounds=3, min_run_time=0.2)
    out.update({f"{which}_ms": _median_ms(t) for which, t in times.items()})
    print(out, flush=True)
    return out


def measure_causal_linear(seqs: list[int], rounds: int) -> list[dict]:
    rows = []
    for seq in seqs:
        steps = {which: causal_step(which, seq) for which in ("full", "linear", "linear_old")}
        times = time_rounds(steps, rounds=rounds, min_run_time=0.2)
        row = {"seq": seq}
        for which in steps:
            row[f"{which}_ms"] = _median_ms(times[which])
            row[f"{which}_mib"] = peak_memory("attention_core", "causal_step", which, seq)["extra_mib"]
        row["full_over_linear_time"] = paired_speedup(times["full"], times["linear"])
        rows.append(row)
        print(row, flush=True)
    return rows


# the baseline's preset classes, the cards that replaced them, and the options measured
PRESETS = {
    "QKVSelfAttention": ("qkv_self", {}),
    "MultiHeadSelfAttention": ("mha", {}),
    "GroupedQueryAttention": ("gqa", {"num_kv_heads": 2}),
    "ALiBiSelfAttention": ("alibi_self", {"causal": True}),
    "RotarySelfAttention": ("rope_self", {}),
    "RelativePositionSelfAttention": ("relpos_self", {}),
    "LocalSelfAttention": ("local_self", {"window": 16}),
    "LinearSelfAttention": ("linear_self", {"causal": True}),
}


def measure_against_baseline(rounds: int) -> list[dict]:
    import attnzoo

    old_self, old_linear = _old_module("self_attention"), _old_module("linear_attention")
    rows = []
    for cls, (card, options) in PRESETS.items():
        old_mod = old_linear if cls == "LinearSelfAttention" else old_self
        for backward in (False, True):
            torch.manual_seed(0)
            old = getattr(old_mod, cls)(EMBED, num_heads=HEADS, **options).train(backward)
            torch.manual_seed(0)
            new = attnzoo.create(card, embed_dim=EMBED, num_heads=HEADS, **options).train(backward)
            x = torch.randn(8, 512, EMBED, requires_grad=backward)
            keep = torch.ones(8, 512, dtype=torch.bool)
            keep[1::2, 384:] = False

            steps = {"old": _step(old, x, keep, backward), "new": _step(new, x, keep, backward)}
            steps["old_again"] = _step(old, x, keep, backward)
            times = time_rounds(steps, rounds=rounds, min_run_time=0.3)
            row = {
                "class": cls,
                "backward": backward,
                "old_ms": _median_ms(times["old"]),
                "new_ms": _median_ms(times["new"]),
                "new_over_old_time": paired_speedup(times["old"], times["new"]) ** -1,
                "control": paired_speedup(times["old"], times["old_again"]) ** -1,
            }
            rows.append(row)
            print(row, flush=True)
    return rows


def _docs(out: dict) -> str:
    lines = [f"Measured with `python benchmarks/attention_core.py` ({machine_line()}).", ""]
    lines += [
        f"**The window** (w = {WINDOW}, B = 1, E = {EMBED}, {HEADS} heads, 1/8 padding): blocks against full "
        "attention (one SDPA call) and against the band-masked full computation they replace. Memory is the "
        "peak above what was allocated before the call.",
        "",
        markdown_table(
            ["T", "pass", "full ms", "window ms", "band ms", "full / window", "full MiB", "window MiB", "band MiB"],
            [
                [
                    f"{r['seq']:,}",
                    "fwd+bwd" if r["backward"] else "fwd",
                    f"{r['full_ms']:.0f}",
                    f"{r['window_ms']:.0f}",
                    f"{r['band_ms']:.0f}",
                    f"{r['full_over_window_time']:.2f}x",
                    f"{r['full_mib']:.0f}",
                    f"{r['window_mib']:.0f}",
                    f"{r['band_mib']:.0f}",
                ]
                for r in out["window"]
            ],
        ),
    ]
    d = out["decoding"]
    lines += [
        "",
        f"**Decoding** {d['tokens']:,} tokens (E = {EMBED}, {HEADS} heads, RoPE, causal): with the cache "
        f"{d['cached_s']:.2f} s, recomputing the causal forward at every step {d['recompute_s']:.1f} s: "
        f"**{d['speedup']:.0f}x** (largest difference between the two {d['max_abs_difference']:.1e}). One cached "
        "step at a growing position:",
        "",
        markdown_table(
            ["window", "position", "entries held", "ms per step"],
            [
                [r["window"] or "none", f"{r['position']:,}", f"{r['held']:,}", f"{r['step_ms']:.2f}"]
                for r in d["per_step_ms"]
            ],
        ),
    ]
    r = out["relpos"]
    lines += [
        "",
        f"**Relative positions** at T = {r['seq']:,} (forward, B = 1): peak extra memory `relpos_self` "
        f"{r['relpos_self_mib']:.0f} MiB, `alibi_self` {r['alibi_self_mib']:.0f} MiB "
        f"({r['relpos_self_mib'] / max(r['alibi_self_mib'], 1e-9):.2f}x), the previous [T, T, d] tables "
        f"{r['relpos_old_mib']:.0f} MiB; time {r['relpos_self_ms']:.0f} ms, {r['alibi_self_ms']:.0f} ms and "
        f"{r['relpos_old_ms']:.0f} ms.",
        "",
        "**Causal linear attention** in chunks against full causal attention (SDPA) and the previous "
        "[B, h, T, d, d] running sum (forward, B = 1):",
        "",
        markdown_table(
            [
                "T",
                "full ms",
                "linear ms",
                "previous linear ms",
                "full / linear",
                "full MiB",
                "linear MiB",
                "previous MiB",
            ],
            [
                [
                    f"{r['seq']:,}",
                    f"{r['full_ms']:.1f}",
                    f"{r['linear_ms']:.1f}",
                    f"{r['linear_old_ms']:.1f}",
                    f"{r['full_over_linear_time']:.2f}x",
                    f"{r['full_mib']:.0f}",
                    f"{r['linear_mib']:.0f}",
                    f"{r['linear_old_mib']:.0f}",
                ]
                for r in out["causal_linear"]
            ],
        ),
        "",
        f"**The core against the classes it replaced** (the same class at `{BASELINE}`, B = 8, T = 512, "
        f"E = {EMBED}, {HEADS} heads; the control times the old class against itself):",
        "",
        markdown_table(
            ["class", "pass", "old ms", "core ms", "core / old", "control"],
            [
                [
                    r["class"],
                    "fwd+bwd" if r["backward"] else "fwd",
                    f"{r['old_ms']:.2f}",
                    f"{r['new_ms']:.2f}",
                    f"{r['new_over_old_time']:.3f}",
                    f"{r['control']:.3f}",
                ]
                for r in out["baseline"]
            ],
        ),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--baseline", default=BASELINE, help="the revision whose classes the core replaced")
    parser.add_argument("--only", nargs="*", default=None, help="window decoding relpos causal_linear baseline")
    args = parser.parse_args()
    globals()["BASELINE"] = args.baseline
    setup_threads()
    quick = args.quick
    parts = set(args.only or ["window", "decoding", "relpos", "causal_linear", "baseline"])
    path = HERE / "results" / "attention_core.json"
    out = {"machine": machine_line()}
    if path.exists() and args.only:
        import json

        out = {**json.loads(path.read_text()), **out}
    if "window" in parts:
        out["window"] = measure_window([1024, 2048] if quick else [4096, 16384], args.rounds)
    if "decoding" in parts:
        out["decoding"] = measure_decoding(128 if quick else 1024, [128, 512] if quick else [256, 1024, 4096])
    if "relpos" in parts:
        out["relpos"] = measure_relpos(1024 if quick else 4096)
    if "causal_linear" in parts:
        out["causal_linear"] = measure_causal_linear([512, 1024] if quick else [512, 2048, 4096, 16384], args.rounds)
    if "baseline" in parts:
        out["baseline"] = measure_against_baseline(args.rounds)
    write_json(path, out)
    if args.write_docs and all(k in out for k in ("window", "decoding", "relpos", "causal_linear", "baseline")):
        update_doc_section(ROOT / "docs" / "performance.md", "attention-core", _docs(out))
    else:
        print(
            _docs(out) if all(k in out for k in ("window", "decoding", "relpos", "causal_linear", "baseline")) else ""
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
