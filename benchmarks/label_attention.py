"""Label attention at real scale: attnzoo's LAAT head against the naive batched form and the per-label loop.

    python benchmarks/label_attention.py [--rounds 5] [--sweep] [--write-docs]

Sizes: LAAT-50 (B=8, T=2500, h=512, d_a=256, L=50) and LAAT-full (B=4, T=2500, h=512, d_a=512,
L=8921), float32, 2 threads, forward and forward+backward, with a padding mask. The per-label loop is
timed on a subset of the labels and extrapolated (said so in the table). Peak memory of one
forward+backward is measured in a fresh process per implementation. The GEMM throughput of the machine
(a 2048³ matmul) is measured in the same run, and every time is also given as the fraction of that
roofline achieved on the floor of the work: the two GEMMs of label attention (scores and A·H),
2·B·T·L·(d_a + h) FLOPs forward, three times that forward+backward.

``--sweep`` adds time and memory against the number of labels (50 to 8,921, LAAT-full otherwise) and
a plot; ``--write-docs`` writes the tables and the plot into docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    ROOT,
    gemm_throughput,
    machine_line,
    markdown_table,
    noise_floor,
    paired_speedup,
    peak_memory,
    setup_threads,
    time_rounds,
    update_doc_section,
    write_json,
)

import attnzoo  # noqa: E402

SIZES = {
    "LAAT-50": dict(B=8, T=2500, h=512, d_a=256, L=50),
    "LAAT-full": dict(B=4, T=2500, h=512, d_a=512, L=8921),
}
NAIVE, CONTROL, OURS = "naive batched (scores, softmax, bmm)", "naive batched again (A/A control)", "attnzoo laat"
IMPLS = [NAIVE, "per-label loop", OURS]
LOOP_LABELS = 16  # the loop is timed on this many labels and scaled to L


def build(
    impl: str, backward: bool, B: int, T: int, h: int, d_a: int, L: int, labels: int | None = None, padded: bool = True
) -> Callable[[], object]:
    """A zero-argument step (forward, or forward+backward) of one implementation on fresh inputs;
    ``padded``: every other sample has its last 20 % masked (else the mask is all True)."""
    torch.manual_seed(0)
    x = torch.randn(B, T, h, requires_grad=True)
    mask = torch.ones(B, T, dtype=torch.bool)
    if padded:
        mask[1::2, int(T * 0.8) :] = False
    head = attnzoo.create("laat", num_labels=L, hidden_size=h, attention_size=d_a)
    W, U = head.first_linear.weight, head.second_linear.weight
    w3, b3 = head.third_linear.weight, head.third_linear.bias
    params = [x, *head.parameters()]
    if impl in (NAIVE, CONTROL):  # the control is the same code, timed as a separate implementation

        def forward():
            z = torch.tanh(F.linear(x, W))
            scores = torch.matmul(U, z.transpose(1, 2)).masked_fill(~mask[:, None, :], torch.finfo(x.dtype).min)
            reps = torch.bmm(scores.softmax(-1), x)
            return (reps * w3).sum(-1) + b3
    elif impl == "per-label loop":
        subset = range(labels or L)

        def forward():
            z = torch.tanh(F.linear(x, W))
            outs = []
            for label in subset:
                a = torch.matmul(z, U[label]).masked_fill(~mask, torch.finfo(x.dtype).min).softmax(-1)
                outs.append((torch.bmm(a.unsqueeze(1), x).squeeze(1) * w3[label]).sum(-1) + b3[label])
            return torch.stack(outs, 1)
    else:

        def forward():
            return head(x, mask)

    def step():
        for p in params:
            p.grad = None
        out = forward()
        if backward:
            out.sum().backward()
        return out

    return step


def memory_step(size: str, impl: str, labels: int | None = None) -> Callable[[], object]:
    spec = dict(SIZES[size])
    if labels is not None:
        spec["L"] = labels
    return build(impl, True, **spec, labels=LOOP_LABELS if impl == "per-label loop" else None)


def floor_flops(B: int, T: int, h: int, d_a: int, L: int) -> float:
    return 2 * B * T * L * (d_a + h)


def run_size(name: str, rounds: int, gflops: float, memory: bool) -> dict:
    spec = SIZES[name]
    if spec["L"] <= 1000:  # cheap sizes get more rounds: their differences are a few per cent
        rounds *= 3
    # at cheap sizes the forms differ by a few per cent, so the naive form is also timed twice as two
    # implementations: their ratio (the A/A control) shows how far two identical codes drift apart
    impls = IMPLS + ([CONTROL] if spec["L"] <= 1000 else [])
    results: dict[str, dict] = {impl: {} for impl in impls}
    for backward in (False, True):
        steps = {
            impl: build(impl, backward, **spec, labels=LOOP_LABELS if impl == "per-label loop" else None)
            for impl in impls
        }
        times = time_rounds(steps, rounds=rounds, min_run_time=1.0)
        times["per-label loop"] = [t * spec["L"] / LOOP_LABELS for t in times["per-label loop"]]  # every label
        key = "fwd_bwd_s" if backward else "fwd_s"
        for impl, t in times.items():
            results[impl][key] = statistics.median(t)
            results[impl]["speedup_" + key] = paired_speedup(times[NAIVE], t)
    flops = floor_flops(**spec)
    for impl, r in results.items():
        r["fwd_roofline"] = flops / r["fwd_s"] / 1e9 / gflops
        r["fwd_bwd_roofline"] = 3 * flops / r["fwd_bwd_s"] / 1e9 / gflops
        if memory and impl != CONTROL:
            r.update(peak_memory("label_attention", "memory_step", name, impl))
    return results


def sweep(labels: list[int], rounds: int) -> dict:
    """Time of naive batched vs attnzoo at LAAT-full sizes, varying L: forward and forward+backward, on a
    padded batch and on an unpadded one; peak memory of forward+backward on the padded batch. The naive
    form is timed twice, as two implementations (the A/A control): how far their times drift apart is the
    noise any other ratio in the same run carries. Up to 1,000 labels, three times the rounds."""
    impls = [NAIVE, CONTROL, OURS]
    out = {}
    for L in labels:
        spec = {**SIZES["LAAT-full"], "L": L}
        out[L] = {i: {} for i in impls}
        for padded in (True, False):
            for backward in (False, True):
                times = time_rounds(
                    {i: build(i, backward, **spec, padded=padded) for i in impls},
                    rounds=3 * rounds if L <= 1000 else rounds,
                    min_run_time=0.5,
                )
                key = f"{'fwd_bwd' if backward else 'fwd'}_{'padded' if padded else 'unpadded'}_s"
                for i in impls:
                    out[L][i][key] = statistics.median(times[i])
                    out[L][i]["speedup_" + key] = paired_speedup(times[NAIVE], times[i])
        for i in (NAIVE, OURS):
            out[L][i].update(peak_memory("label_attention", "memory_step", "LAAT-full", i, L))
        for i in impls:
            out[L][i]["fwd_bwd_s"] = out[L][i]["fwd_bwd_padded_s"]
        ours = out[L][OURS]
        print(
            f"L={L}: attnzoo over naive "
            + ", ".join(f"{k[8:-2]} {v:.2f}x" for k, v in ours.items() if k.startswith("speedup_")),
            flush=True,
        )
    return out


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted(data)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for impl, style in ((NAIVE, "o--"), (OURS, "s-")):
        ax1.plot(labels, [data[L][impl]["fwd_bwd_s"] for L in labels], style, label=impl)
        ax2.plot(labels, [data[L][impl]["extra_mib"] for L in labels], style, label=impl)
    for ax, title in ((ax1, "forward+backward time (s)"), (ax2, "peak memory above inputs (MiB)")):
        ax.set_xscale("log")
        ax.set_xlabel("number of labels L (B=4, T=2500, h=512, d_a=512)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def no_slower_check(what: str, control: list[dict], ours: list[dict], keys: tuple[str, ...]) -> tuple[str, bool, str]:
    """ "No slower than naive" judged against the noise of the same run: every speed-up of attnzoo over
    naive (paired by round) must be at least the lowest seen between naive and its A/A control (two
    timings of the same code), and never below 0.95x."""
    ratios = [o["speedup_" + k] for o in ours for k in keys]
    drift = [c["speedup_" + k] for c in control for k in keys]
    floor = noise_floor(drift)
    return (
        f"{what} no slower than naive batched (fwd and fwd+bwd, padded and not), beyond the noise of the run",
        min(ratios) >= floor,
        f"slowest {min(ratios):.2f}x, fastest {max(ratios):.2f}x; naive against itself "
        f"{min(drift):.2f}-{max(drift):.2f}x, so the floor is {floor:.2f}x",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)  # the sweep takes one fewer; 2 was too few to judge 5 %
    parser.add_argument("--sizes", nargs="*", default=list(SIZES))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--json", default=str(HERE / "results" / "label_attention.json"))
    args = parser.parse_args()
    setup_threads()

    gflops = gemm_throughput()
    print(f"GEMM throughput (2048^3 float32 matmul): {gflops:.0f} GFLOP/s", flush=True)
    results, sections = {}, []
    for name in args.sizes:
        results[name] = run_size(name, args.rounds, gflops, not args.no_memory)
        rows = []
        for impl, r in results[name].items():
            label = impl + (f" (timed on {LOOP_LABELS} labels, extrapolated)" if impl == "per-label loop" else "")
            rows.append(
                [
                    label,
                    f"{r['fwd_s'] * 1e3:.0f}",
                    f"{r['fwd_bwd_s'] * 1e3:.0f}",
                    f"{r['speedup_fwd_bwd_s']:.2f}x",
                    f"{100 * r['fwd_roofline']:.0f} % / {100 * r['fwd_bwd_roofline']:.0f} %",
                    f"{r['extra_mib']:.0f}" if "extra_mib" in r else "-",
                    f"{r['max_rss_mib']:.0f}" if "max_rss_mib" in r else "-",
                ]
            )
        spec = ", ".join(f"{k}={v}" for k, v in SIZES[name].items())
        table = markdown_table(
            [
                "implementation",
                "fwd ms",
                "fwd+bwd ms",
                "speed-up vs naive (fwd+bwd)",
                "roofline fwd / fwd+bwd",
                "peak extra MiB",
                "max RSS MiB",
            ],
            rows,
        )
        sections.append(f"**{name}** ({spec}, padding mask)\n\n{table}\n")
        print(sections[-1], flush=True)

    checks = []
    if "LAAT-full" in results:
        naive, ours = results["LAAT-full"][NAIVE], results["LAAT-full"][OURS]
        speed = ours["speedup_fwd_bwd_s"]
        checks.append(("LAAT-full fwd+bwd >= 1.4x faster than naive batched", speed >= 1.4, f"{speed:.2f}x"))
        if "max_rss_mib" in ours:
            ratio = ours["max_rss_mib"] / naive["max_rss_mib"]
            extra = ours["extra_mib"] / naive["extra_mib"]
            checks.append(
                (
                    "LAAT-full peak memory (max RSS) at most half of naive batched",
                    ratio <= 0.5,
                    f"max RSS {ratio:.2f}x, extra above inputs {extra:.2f}x",
                )
            )
    if "LAAT-50" in results:
        r = results["LAAT-50"]
        checks.append(no_slower_check("LAAT-50", [r[CONTROL]], [r[OURS]], ("fwd_s", "fwd_bwd_s")))

    swept = sweep([50, 200, 1000, 3000, 8921], max(1, args.rounds - 1)) if args.sweep else None
    if swept:
        keys = ("fwd_unpadded_s", "fwd_bwd_unpadded_s", "fwd_padded_s", "fwd_bwd_padded_s")
        runs = [swept[L] for L in sorted(swept)]
        checks.append(
            no_slower_check(
                f"LAAT at {min(swept)}-{max(swept)} labels (sweep)",
                [r[CONTROL] for r in runs],
                [r[OURS] for r in runs],
                keys,
            )
        )
    lines = [f"- {'met' if ok else 'NOT met'}: {what} ({detail})" for what, ok, detail in checks]
    print("\n".join(lines))

    write_json(
        Path(args.json),
        {
            "machine": machine_line(),
            "gemm_gflops": gflops,
            "results": results,
            "sweep": swept,
            "targets": [dict(target=w, met=ok, measured=d) for w, ok, d in checks],
        },
    )
    if args.write_docs:
        text = (
            f"Measured with `python benchmarks/label_attention.py --sweep --write-docs` ({machine_line()}; "
            f"median of {args.rounds} alternating rounds, {3 * args.rounds} at 50 labels; the sweep "
            f"{max(1, args.rounds - 1)}, {3 * max(1, args.rounds - 1)} up to 1,000 labels; GEMM roofline "
            f"{gflops:.0f} GFLOP/s measured in the same run).\n\n"
            + "\n".join(sections)
            + "\nTargets:\n\n"
            + "\n".join(lines)
            + "\n"
        )
        if swept:
            image = ROOT / "docs" / "label_attention_scaling.png"
            plot(swept, image)
            naive_key, ours_key = NAIVE, OURS
            rows = []
            for L in sorted(swept):
                n, o, c = swept[L][naive_key], swept[L][ours_key], swept[L][CONTROL]
                keys = ("fwd_unpadded_s", "fwd_bwd_unpadded_s", "fwd_padded_s", "fwd_bwd_padded_s")
                drift = [c["speedup_" + k] for k in keys]
                rows.append(
                    [
                        L,
                        *(f"{o['speedup_' + k]:.2f}x" for k in keys),
                        f"{min(drift):.2f}-{max(drift):.2f}x",
                        f"{o['fwd_bwd_padded_s']:.3f}",
                        f"{n['extra_mib']:.0f}",
                        f"{o['extra_mib']:.0f}",
                    ]
                )
            text += (
                "\nAgainst the number of labels (speed-up of attnzoo over naive batched; > 1 is faster; the A/A "
                "column is naive batched timed against itself, the noise of the row):\n\n"
                + markdown_table(
                    [
                        "L",
                        "fwd, unpadded",
                        "fwd+bwd, unpadded",
                        "fwd, padded",
                        "fwd+bwd, padded",
                        "naive / naive again (A/A)",
                        "attnzoo fwd+bwd s (padded)",
                        "naive extra MiB",
                        "attnzoo extra MiB",
                    ],
                    rows,
                )
                + "\n\n![time and memory against labels](label_attention_scaling.png)\n"
            )
        update_doc_section(ROOT / "docs" / "performance.md", "label_attention", text)


if __name__ == "__main__":
    main()
