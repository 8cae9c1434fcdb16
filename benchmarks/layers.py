"""Each seed variant against the seed's own formulation, written naively: time and peak memory.

    python benchmarks/layers.py [--rounds 7] [--quick] [--no-memory] [--write-docs]

Prints a table per variant (forward, forward+backward, ratio to the reference, peak memory), checks
the targets of the seed-variant issue, writes benchmarks/results/layers.json and, with --write-docs,
the table into docs/performance.md. float32, 2 threads, CPU.
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

Step = Callable[[], object]


def _mask(batch: int, seq: int) -> torch.Tensor:
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[1::2, int(seq * 0.8) :] = False  # every other sample padded by 20 %
    return mask


def _step(fn: Callable[[], torch.Tensor], params: list[torch.Tensor], backward: bool) -> Step:
    def run():
        for p in params:
            p.grad = None
        out = fn()
        if backward:
            (out[0] if isinstance(out, tuple) else out).sum().backward()
        return out

    return run


# -- label-wise attention (seed 004) ---------------------------------------------------------------------
def labelwise(impl: str, backward: bool, B=8, T=2500, h=512, L=50) -> Step:
    torch.manual_seed(0)
    x = torch.randn(B, T, h, requires_grad=True)
    mask = _mask(B, T)
    layer = attnzoo.create("labelwise_batched", num_labels=L, hidden_size=h)
    wa, wo, bo = (
        layer.Wa.detach().clone().requires_grad_(),
        layer.Wo.detach().clone().requires_grad_(),
        layer.bo.detach().clone().requires_grad_(),
    )
    params = [x, wa, wo, bo]
    if impl == "seed loop (per label)":
        rows = [wa[i] for i in range(L)]

        def fn():
            reps = []
            for w in rows:  # the seed's ParameterList loop
                a = torch.matmul(x, w).masked_fill(~mask, torch.finfo(x.dtype).min).softmax(dim=1)
                reps.append(torch.bmm(a.unsqueeze(1), x).squeeze(1))
            return (torch.stack(reps, 1) * wo).sum(-1) + bo
    elif impl == "batched matmul+softmax+bmm":

        def fn():
            s = torch.matmul(x, wa.T).masked_fill(~mask[..., None], torch.finfo(x.dtype).min)
            return (torch.bmm(s.softmax(dim=1).transpose(1, 2), x) * wo).sum(-1) + bo
    elif impl == "SDPA, label matrix as query":

        def fn():
            r = F.scaled_dot_product_attention(
                wa.expand(B, 1, L, h), x[:, None], x[:, None], attn_mask=mask[:, None, None, :], scale=1.0
            )
            return (r.squeeze(1) * wo).sum(-1) + bo
    else:
        model = attnzoo.create(impl, num_labels=L, hidden_size=h)
        model.load_state_dict(layer.state_dict())
        params = [x, *model.parameters()]

        def fn():
            return model(x, mask)

    return _step(fn, params, backward)


# -- seed 000: Keras attention ------------------------------------------------------------------------------
def keras_attn(impl: str, backward: bool, B=32, T=200, E=256, C=10) -> Step:
    torch.manual_seed(0)
    x = torch.randn(B, T, E, requires_grad=True)
    layer = attnzoo.create("keras_attn", num_classes=C, embed_dim=E)
    ws = layer.Ws
    if impl == "seed 000 (permute, matmul, exp, einsum)":

        def fn():
            at = torch.tanh(torch.matmul(ws, x.permute(0, 2, 1)))
            at = torch.exp(at - torch.max(at, dim=-1, keepdims=True).values)
            at = at / torch.sum(at, dim=-1, keepdims=True)
            return torch.einsum("ijk,ikl->ijl", at, x)
    else:

        def fn():
            return layer(x)

    return _step(fn, [x, ws], backward)


# the same code timed as a second implementation: how far it drifts from itself is the noise of the run
SEED_001_AGAIN = "seed 001 answer again (A/A control)"


# -- seed 001's answer: QKV self-attention --------------------------------------------------------------------
def qkv_self(impl: str, backward: bool, B=16, T=512, D=256) -> Step:
    torch.manual_seed(0)
    x = torch.randn(B, T, D, requires_grad=True)
    mask = _mask(B, T)
    layer = attnzoo.create("qkv_self", embed_dim=D)
    if impl == "nn.MultiheadAttention (need_weights=False)":
        mha = torch.nn.MultiheadAttention(D, 1, batch_first=True)

        def fn():
            return mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0]

        params = [x, *mha.parameters()]
    elif impl in ("seed 001 answer (3 Linear, matmul, softmax)", SEED_001_AGAIN):
        q, k, v = (torch.nn.Linear(D, D) for _ in range(3))

        def fn():
            s = torch.matmul(q(x), k(x).transpose(-2, -1)) / D**0.5
            s = s.masked_fill(~mask[:, None, :], torch.finfo(s.dtype).min)
            return torch.matmul(s.softmax(-1), v(x))

        params = [x, *q.parameters(), *k.parameters(), *v.parameters()]
    else:

        def fn():
            return layer(x, mask)

        params = [x, *layer.parameters()]
    return _step(fn, params, backward)


# -- attention pooling ------------------------------------------------------------------------------------------
def attn_pool(impl: str, backward: bool, B=32, T=200, H=256) -> Step:
    torch.manual_seed(0)
    x = torch.randn(B, T, H, requires_grad=True)
    mask = _mask(B, T)
    layer = attnzoo.create("attn_pool", hidden_size=H)
    if impl == "naive (Linear, tanh, matmul v, softmax, bmm)":

        def fn():
            e = torch.matmul(torch.tanh(F.linear(x, layer.W, layer.b)), layer.v)
            a = e.masked_fill(~mask, torch.finfo(e.dtype).min).softmax(-1)
            return torch.bmm(a.unsqueeze(1), x).squeeze(1)
    else:

        def fn():
            return layer(x, mask)

    return _step(fn, [x, *layer.parameters()], backward)


# -- seed 003: score functions and Luong attention ----------------------------------------------------------------
def scores(impl: str, backward: bool, B=32, Tq=50, Tk=100, d=256) -> Step:
    torch.manual_seed(0)
    q, k = torch.randn(B, Tq, d, requires_grad=True), torch.randn(B, Tk, d, requires_grad=True)
    kind = impl.split()[-1]
    layer = attnzoo.create(
        {"(dot)": "dot", "(general)": "general", "(additive)": "additive"}[kind],
        **({} if kind == "(dot)" else {"query_size": d, "key_size": d}),
    )
    if impl.startswith("seed 003"):

        def fn():
            if kind == "(dot)":
                s = torch.matmul(q, k.permute(0, 2, 1))
            elif kind == "(general)":
                s = torch.matmul(torch.matmul(q, layer.weight), k.permute(0, 2, 1))
            else:
                s = torch.matmul(
                    torch.tanh(
                        F.linear(q, layer.query_proj, layer.bias)[:, :, None] + F.linear(k, layer.key_proj)[:, None]
                    ),
                    layer.v,
                )
            w = s.softmax(dim=-1)
            return torch.bmm(w, k), w
    else:

        def fn():
            return layer(q, k)

    return _step(lambda: sum(t.sum() for t in fn()), [q, k, *layer.parameters()], backward)


CASES: dict[str, dict] = {
    "labelwise": dict(
        build=labelwise,
        size="B=8, T=2500, h=512, L=50, padding mask",
        reference="seed loop (per label)",
        impls=[
            "seed loop (per label)",
            "batched matmul+softmax+bmm",
            "SDPA, label matrix as query",
            "labelwise_batched",
            "labelwise",
        ],
        slow={"seed loop (per label)": 0.2},
    ),
    "qkv_self": dict(
        build=qkv_self,
        size="B=16, T=512, D=256, 1 head, padding mask, no weights returned",
        reference="nn.MultiheadAttention (need_weights=False)",
        impls=[
            "nn.MultiheadAttention (need_weights=False)",
            "seed 001 answer (3 Linear, matmul, softmax)",
            SEED_001_AGAIN,
            "qkv_self",
        ],
        controls={SEED_001_AGAIN},
    ),
    "keras_attn": dict(
        build=keras_attn,
        size="B=32, T=200, E=256, C=10, no mask",
        reference="seed 000 (permute, matmul, exp, einsum)",
        impls=["seed 000 (permute, matmul, exp, einsum)", "keras_attn"],
    ),
    "attn_pool": dict(
        build=attn_pool,
        size="B=32, T=200, H=256, padding mask",
        reference="naive (Linear, tanh, matmul v, softmax, bmm)",
        impls=["naive (Linear, tanh, matmul v, softmax, bmm)", "attn_pool"],
    ),
}
for _kind in ("dot", "general", "additive"):
    CASES[_kind] = dict(
        build=scores,
        size="B=32, Tq=50, Tk=100, d=256, no mask, weights returned",
        reference=f"seed 003 fixed ({_kind})",
        impls=[f"seed 003 fixed ({_kind})", f"attnzoo ({_kind})"],
    )


def memory_step(case: str, impl: str) -> Step:
    """Entry point of the memory probe (one forward+backward in a fresh process)."""
    return CASES[case]["build"](impl, True)


def run_case(name: str, spec: dict, rounds: int, min_run_time: float, memory: bool) -> dict:
    """Median times of every implementation, and its speed-up over the reference paired by round
    (``fwd_ratio``, ``fwd_bwd_ratio``); ``vs`` holds its speed-up over each other implementation."""
    results: dict[str, dict] = {}
    for backward in (False, True):
        steps = {impl: spec["build"](impl, backward) for impl in spec["impls"]}
        times = time_rounds(steps, rounds=rounds, min_run_time=min_run_time, budget=spec.get("slow"))
        key = "fwd_bwd" if backward else "fwd"
        for impl, t in times.items():
            r = results.setdefault(impl, {"vs": {}})
            r[key + "_s"] = statistics.median(t)
            r[key + "_ratio"] = paired_speedup(times[spec["reference"]], t)
            for other, t_other in times.items():
                r["vs"].setdefault(other, {})[key] = paired_speedup(t_other, t)
    for impl in spec["impls"]:
        if memory and impl not in spec.get("controls", ()):
            results[impl].update(peak_memory("layers", "memory_step", name, impl))
    return results


def targets(all_results: dict) -> list[tuple[str, bool, str]]:
    """The targets of docs/performance.md, every speed-up paired by round (see ``run_case``)."""
    lw = all_results["labelwise"]
    ours, per_label = lw["labelwise_batched"], lw["labelwise"]
    loop_speedup = ours["fwd_bwd_ratio"]  # the reference of this case is the loop
    best = min(
        ours["vs"]["batched matmul+softmax+bmm"]["fwd_bwd"], ours["vs"]["SDPA, label matrix as query"]["fwd_bwd"]
    )
    qs = all_results["qkv_self"]
    qkv = qs["qkv_self"]
    over_mha = qkv["vs"]["nn.MultiheadAttention (need_weights=False)"]
    over_seed = qkv["vs"]["seed 001 answer (3 Linear, matmul, softmax)"]
    drift = qs[SEED_001_AGAIN]["vs"]["seed 001 answer (3 Linear, matmul, softmax)"]["fwd_bwd"]
    floor = noise_floor([drift])
    ka = all_results["keras_attn"]["keras_attn"]
    return [
        (
            "labelwise_batched fwd+bwd >= 20x faster than the per-label loop",
            loop_speedup >= 20,
            f"{loop_speedup:.1f}x",
        ),
        (
            "labelwise_batched fwd+bwd within 1.1x of the faster of batched and SDPA",
            best >= 1 / 1.1,
            f"{1 / best:.2f}x the time of the best",
        ),
        (
            "labelwise within 1.2x of labelwise_batched (fwd+bwd)",
            per_label["vs"]["labelwise_batched"]["fwd_bwd"] >= 1 / 1.2,
            f"{1 / per_label['vs']['labelwise_batched']['fwd_bwd']:.2f}x the time",
        ),
        (
            "qkv_self no slower than nn.MultiheadAttention (fwd and fwd+bwd)",
            over_mha["fwd"] >= 1 and over_mha["fwd_bwd"] >= 1,
            f"fwd {over_mha['fwd']:.2f}x, fwd+bwd {over_mha['fwd_bwd']:.2f}x faster",
        ),
        (
            "qkv_self fwd+bwd no slower than seed 001's explicit form, beyond the noise of the run",
            over_seed["fwd_bwd"] >= floor,
            f"fwd+bwd {over_seed['fwd_bwd']:.2f}x, the seed against itself {drift:.2f}x, so the "
            f"floor is {floor:.2f}x; forward alone {over_seed['fwd']:.2f}x",
        ),
        (
            "keras_attn no slower than seed 000's form (fwd and fwd+bwd)",
            ka["fwd_ratio"] >= 1 and ka["fwd_bwd_ratio"] >= 1,
            f"fwd {ka['fwd_ratio']:.2f}x, fwd+bwd {ka['fwd_bwd_ratio']:.2f}x faster",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-run-time", type=float, default=0.5)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--json", default=str(HERE / "results" / "layers.json"))
    args = parser.parse_args()
    setup_threads()

    all_results, sections = {}, []
    for name in args.cases:
        spec = CASES[name]
        results = run_case(name, spec, args.rounds, args.min_run_time, not args.no_memory)
        all_results[name] = results
        rows = []
        for impl, r in results.items():
            mem = f"{r['extra_mib']:.0f}" if "extra_mib" in r else "-"
            rows.append(
                [
                    impl,
                    f"{r['fwd_s'] * 1e3:.2f}",
                    f"{r['fwd_bwd_s'] * 1e3:.2f}",
                    f"{r['fwd_ratio']:.2f}x",
                    f"{r['fwd_bwd_ratio']:.2f}x",
                    mem,
                ]
            )
        table = markdown_table(
            ["implementation", "fwd ms", "fwd+bwd ms", "speed-up fwd", "speed-up fwd+bwd", "peak extra MiB"], rows
        )
        section = f"**{name}** ({spec['size']}; speed-up against: {spec['reference']})\n\n{table}\n"
        print(section, flush=True)
        sections.append(section)

    checks = targets(all_results) if {"labelwise", "qkv_self", "keras_attn"} <= set(all_results) else []
    lines = [f"- {'met' if ok else 'NOT met'}: {what} ({detail})" for what, ok, detail in checks]
    print("\n".join(lines))
    write_json(
        Path(args.json),
        {
            "machine": machine_line(),
            "rounds": args.rounds,
            "results": all_results,
            "targets": [dict(target=w, met=ok, measured=d) for w, ok, d in checks],
        },
    )
    if args.write_docs:
        text = (
            f"Measured with `python benchmarks/layers.py --write-docs` ({machine_line()}, median of "
            f"{args.rounds} alternating rounds; peak memory in a fresh process per implementation).\n\n"
            + "\n".join(sections)
            + "\nTargets:\n\n"
            + "\n".join(lines)
        )
        update_doc_section(ROOT / "docs" / "performance.md", "layers", text)


if __name__ == "__main__":
    main()
