"""The families added for breadth against their obvious baselines, with ``attnzoo bench``'s own code.

    python benchmarks/breadth.py [--rounds 5] [--quick] [--write-docs]

* ``linear_self`` against ``mha`` over T = 512 .. 16,384 (B = 1, E = 256, 4 heads): time and peak
  memory of a forward pass; linear attention's cost grows linearly in T, softmax attention's
  quadratically (SDPA keeps memory linear but not time).
* ``gqa`` (2 key/value heads) against ``mha`` (8 heads) at B = 8, T = 1,024, E = 512: the projections
  shrink, the attention does not.
* sparsemax and 1.5-entmax against softmax, as the normaliser of ``dot`` over [8, 256, 1024] scores.

Writes benchmarks/results/breadth.json and, with --write-docs, the tables into docs/performance.md.
Every number is a median of alternating rounds on this machine; the ratios are what carries over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, THREADS, machine_line, markdown_table, setup_threads, update_doc_section, write_json  # noqa: E402

from attnzoo.tools.bench import Case, run  # noqa: E402


def _rows(results, key):
    out = []
    first = {}
    for m in results:
        point = getattr(m.case, key) if key in ("seq", "batch") else m.case.config.get(key)
        first.setdefault(point, m.median_ms)
        out.append(
            {
                "name": m.case.shown,
                key: point,
                "median_ms": m.median_ms,
                "spread_ms": list(m.spread_ms),
                "ratio_to_first": m.median_ms / first[point],
                "peak_mib": m.peak_mib,
                "route": m.route,
                "gflops_per_s": m.gflops_per_s,
                "config": dict(m.case.config),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="shorter sweeps (a smoke run)")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    setup_threads()
    rounds = 2 if args.quick else args.rounds
    out = {"machine": machine_line()}

    seqs = [512, 2048] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    config = {"embed_dim": 256, "num_heads": 4}
    out["linear_vs_mha"] = _rows(
        run(
            [Case("mha", config, batch=1, seq=512), Case("linear_self", config, batch=1, seq=512)],
            sweep=("seq", seqs),
            rounds=rounds,
            min_run_time=0.3,
            threads=THREADS,
        ),
        "seq",
    )

    gqa_config = {"embed_dim": 512, "num_heads": 8}
    cases = [
        Case("mha", gqa_config, batch=8, seq=1024),
        Case("gqa", {**gqa_config, "num_kv_heads": 2}, batch=8, seq=1024),
    ]
    out["gqa_vs_mha"] = [
        *_rows(run(cases, rounds=rounds, min_run_time=0.5, threads=THREADS), "seq"),
        *_rows(
            run(
                [Case(c.name, c.config, batch=8, seq=1024, backward=True) for c in cases],
                rounds=rounds,
                min_run_time=0.5,
                threads=THREADS,
                memory=False,
            ),
            "seq",
        ),
    ]
    # a fair comparison needs equal heads and widths: the gqa card defaults to no biases, mha to biases
    for row in out["gqa_vs_mha"]:
        row["note"] = "mha has biases (nn.MultiheadAttention's layout), gqa none"

    norm_cases = [
        Case("dot", {"normalizer": n}, batch=8, seq=1024, queries=1024, label=n)
        for n in ("softmax", "sparsemax", "entmax15")
    ]
    results = run(norm_cases, rounds=rounds, min_run_time=0.5, threads=THREADS)
    results += run(
        [Case(c.name, c.config, batch=8, seq=1024, queries=1024, label=c.label, backward=True) for c in norm_cases],
        rounds=rounds,
        min_run_time=0.5,
        threads=THREADS,
        memory=False,
    )
    out["normalizers"] = [{**r, "normalizer": r["config"]["normalizer"]} for r in _rows(results, "seq")]
    write_json(HERE / "results" / "breadth.json", out)

    lines = [f"Measured with `python benchmarks/breadth.py` ({machine_line()}); `attnzoo bench` runs the same code."]
    lines += [
        "",
        "**linear_self against mha** (forward, B = 1, E = 256, 4 heads):",
        "",
        markdown_table(
            ["T", "mha ms", "linear_self ms", "mha / linear", "mha MiB", "linear MiB"],
            [
                [
                    r["seq"],
                    f"{r['median_ms']:.2f}",
                    f"{lin['median_ms']:.2f}",
                    f"{r['median_ms'] / lin['median_ms']:.2f}x",
                    f"{r['peak_mib']:.1f}",
                    f"{lin['peak_mib']:.1f}",
                ]
                for r, lin in zip(out["linear_vs_mha"][0::2], out["linear_vs_mha"][1::2], strict=True)
            ],
        ),
    ]
    g = out["gqa_vs_mha"]
    lines += [
        "",
        "**gqa (2 key/value heads) against mha (8 heads)**, B = 8, T = 1,024, E = 512:",
        "",
        markdown_table(
            ["", "mha ms", "gqa ms", "mha / gqa"],
            [
                [
                    "forward",
                    f"{g[0]['median_ms']:.1f}",
                    f"{g[1]['median_ms']:.1f}",
                    f"{g[0]['median_ms'] / g[1]['median_ms']:.2f}x",
                ],
                [
                    "forward+backward",
                    f"{g[2]['median_ms']:.1f}",
                    f"{g[3]['median_ms']:.1f}",
                    f"{g[2]['median_ms'] / g[3]['median_ms']:.2f}x",
                ],
            ],
        ),
    ]
    n = out["normalizers"]
    lines += [
        "",
        "**Normalisers of `dot`** (B = 8, 1,024 queries over 1,024 keys, E = 16):",
        "",
        markdown_table(
            ["normaliser", "forward ms", "x softmax", "forward+backward ms", "x softmax"],
            [
                [
                    n[i]["normalizer"],
                    f"{n[i]['median_ms']:.1f}",
                    f"{n[i]['median_ms'] / n[0]['median_ms']:.2f}",
                    f"{n[i + 3]['median_ms']:.1f}",
                    f"{n[i + 3]['median_ms'] / n[3]['median_ms']:.2f}",
                ]
                for i in range(3)
            ],
        ),
    ]
    lines += [
        "",
        "Sparsemax and entmax find each row's threshold from its few candidates (no full sort), yet still "
        "cost several times softmax on the CPU: pick them for their exact zeros (sparse, readable attention), "
        "not for speed.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        update_doc_section(ROOT / "docs" / "performance.md", "breadth", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
