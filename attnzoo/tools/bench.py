"""``attnzoo bench``: the cost of a variant on your shapes, measured the way that survives a noisy machine.

    attnzoo bench mha gqa embed_dim=256 num_heads=8 num_kv_heads=2 --seq 1024 --backward
    attnzoo bench linear_self mha embed_dim=64 num_heads=4 --sweep seq=512,1024,2048 --json

For each variant (built from its card: card defaults < your key=value pairs; required values must be
given) and each point of the sweep: the median and spread of the time of one step (forward, or forward
and backward with ``--backward``) over rounds in which the variants alternate (so drift on a shared
machine hits them all alike); throughput; peak memory of one step (CUDA: ``max_memory_allocated``
above what was allocated before; CPU: the peak resident size of a fresh process above its size just
before the step); FLOPs as torch's ``FlopCounterMode`` counts them and the GFLOP/s achieved; and the
kernel route the step took (fused SDPA and which kernel, or explicit matmul + softmax, ...), read off
the aten operators it dispatched. Inputs come from the variant's calling convention, with every other
sample padded by 20 %.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from attnzoo.core import create, model_info
from attnzoo.core.children import run_python
from attnzoo.errors import ConfigError
from attnzoo.io.text import printable

__all__ = [
    "Case",
    "Measurement",
    "build_step",
    "time_alternating",
    "route_and_flops",
    "peak_memory",
    "rss_peak_of",
    "run",
    "format_table",
    "format_csv",
    "plot",
]


@dataclass(frozen=True)
class Case:
    """One thing to measure: a registered variant, its config, and the shapes and settings of a step."""

    name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    batch: int = 8
    seq: int = 512
    dtype: str = "float32"
    device: str = "cpu"
    backward: bool = False
    compile: bool = False
    queries: int = 3  # length of a second sequence axis (query_key, decoder_encoder, ...), where there is one
    label: str = ""  # how tables name it; default the variant's name

    @property
    def shown(self) -> str:
        return self.label or self.name


@dataclass
class Measurement:
    case: Case
    median_ms: float
    spread_ms: tuple[float, float]  # the first and third quartile of the per-round medians
    rounds: int
    samples_per_s: float
    tokens_per_s: float
    route: str
    gflop: float | None
    gflops_per_s: float | None
    peak_mib: float | None
    compile_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("case"))
        out["config"] = dict(self.case.config)
        return out


def _padded_lengths(batch: int, seq: int) -> list[int]:
    return [seq if b % 2 == 0 else max(1, int(seq * 0.8)) for b in range(batch)]


def _cuda_devices(device: str) -> list[int]:
    return list(range(torch.cuda.device_count())) if device.startswith("cuda") else []


def build_step(case: Case) -> tuple[Callable[[], Any], Any]:
    """A zero-argument step of ``case`` (fresh weights, inputs from its convention) and the model."""
    from attnzoo.conventions import get_convention, model_config, sample_inputs

    spec = model_info(case.name)
    if not spec.convention:
        raise ConfigError(f"{case.name}: its card names no convention, so bench cannot build its inputs")
    convention = get_convention(spec.convention)
    # the same weights and inputs every time, and the caller's random generators as they were
    with torch.random.fork_rng(devices=_cuda_devices(case.device)):
        torch.manual_seed(0)
        model = create(case.name, config=dict(case.config) or None, dtype=case.dtype, device=case.device)
        model.train(case.backward)
        convention = convention.for_config(model_config(model))
        sample = sample_inputs(
            model,
            convention,
            batch=case.batch,
            seq=case.seq,
            queries=case.queries,
            lengths=_padded_lengths(case.batch, case.seq) if convention.has_mask else None,
        )
    if case.device != "cpu" or not any(True for _ in model.parameters()):
        sample = convention.cast(sample, device=case.device)
    if case.backward:
        sample = sample.with_tensors(
            **{k: t.detach().requires_grad_() for k, t in sample.tensors.items() if t.is_floating_point()}
        )
    args, kwargs = sample.call_arguments()
    with torch.no_grad():
        model(*args, **kwargs)  # lazy sizes
    runner = torch.compile(model) if case.compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    leaves = [t for t in sample.tensors.values() if t.requires_grad]

    def step():
        if not case.backward:
            with torch.no_grad():
                return runner(*args, **kwargs)
        for p in (*params, *leaves):
            p.grad = None
        out = runner(*args, **kwargs)
        first = out[0] if isinstance(out, (tuple, list)) else out
        first.float().sum().backward()
        return out

    return step, model


def time_alternating(
    steps: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 7,
    min_run_time: float = 0.5,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each step, one median per round; the steps alternate within every round.
    ``progress`` is told what is being measured (``"round 2/7: mha"``) as it starts."""
    from torch.utils import benchmark

    threads = threads or torch.get_num_threads()
    for name, step in steps.items():  # warm-up: allocator, lazy kernels, autotuning
        if progress is not None:
            progress(f"warm-up: {name}")
        step()
    per_round: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name, step in steps.items():
            if progress is not None:
                progress(f"round {r + 1}/{rounds}: {name}")
            timer = benchmark.Timer("step()", globals={"step": step}, num_threads=threads)
            per_round[name].append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return per_round


_KERNELS = {
    "_scaled_dot_product_flash_attention_for_cpu": "SDPA (flash, CPU)",
    "_scaled_dot_product_flash_attention": "SDPA (flash)",
    "_scaled_dot_product_efficient_attention": "SDPA (memory-efficient)",
    "_scaled_dot_product_cudnn_attention": "SDPA (cuDNN)",
    "_scaled_dot_product_attention_math": "SDPA (math)",
}


def route_and_flops(step: Callable[[], Any]) -> tuple[str, float | None]:
    """The kernel route one step takes (from the aten operators it dispatches) and its FLOPs."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    seen: set[str] = set()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    # torch counts the CUDA SDPA kernels but not the CPU flash kernel: counted the same way here, or a CPU
    # step's attention would count for nothing
    from torch.utils.flop_counter import sdpa_flop_count

    def cpu_flash_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    cpu_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    counter = FlopCounterMode(display=False, custom_mapping={cpu_flash: cpu_flash_flops} if cpu_flash else None)
    with counter, Recorder():
        step()
    routes = sorted({label for op, label in _KERNELS.items() if op in seen})
    if routes:
        route = " + ".join(routes)
    elif "_softmax" in seen or "softmax" in seen:
        route = "explicit (matmul + softmax)"
    elif "elu" in seen:
        route = "linear attention (elu + 1 features)"
    elif "lstm" in seen or "gru" in seen or "_thnn_fused_lstm_cell" in seen:
        route = "recurrent"
    else:
        route = "other"
    total = counter.get_total_flops()
    return route, (total / 1e9 if total else None)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


def rss_peak_of(step: Callable[[], Any]) -> tuple[int, int]:
    """(resident bytes just before ``step``, peak resident bytes during it), in this process (Linux).
    Run it in a fresh process: a warm allocator hides what a step needs."""
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the resident size now
        f.write("5")
    step()
    return before, _status("VmHWM")


_PROBE = """
import json, sys, torch
from attnzoo.tools.bench import Case, build_step, rss_peak_of
case = Case(**json.loads(sys.argv[1]))
if sys.argv[2] != "0":
    torch.set_num_threads(int(sys.argv[2]))
step, _ = build_step(case)
step()
print(*rss_peak_of(step))
"""


def peak_memory(case: Case, threads: int | None = None) -> float | None:
    """MiB one step needs above what is allocated before it (None where this platform cannot tell)."""
    if case.device.startswith("cuda"):
        step, _ = build_step(case)
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    if case.device != "cpu" or not os.path.exists("/proc/self/clear_refs"):
        return None
    payload = json.dumps({**asdict(case), "config": dict(case.config)})
    proc = run_python(["-c", _PROBE, payload, str(threads or 0)], timeout=1800)
    if proc.returncode != 0:
        raise ConfigError(f"{case.name}: measuring memory failed: {proc.stderr.strip().splitlines()[-1][:300]}")
    before, peak = (int(v) for v in proc.stdout.split()[-2:])
    return max(peak - before, 0) / 2**20


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def run(
    cases: Sequence[Case],
    *,
    sweep: tuple[str, Sequence[Any]] | None = None,
    rounds: int = 7,
    min_run_time: float = 0.5,
    memory: bool = True,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Measurement]:
    """Measure every case at every sweep point; at each point the cases alternate round by round.
    ``progress`` is told each step as it starts (``attnzoo bench`` shows it on a terminal). The caller's
    torch thread count and random generators are left as they were."""
    before = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=_cuda_devices(cases[0].device if cases else "cpu")):
            return _run(cases, sweep, rounds, min_run_time, memory, threads, progress)
    finally:
        torch.set_num_threads(before)  # the caller's thread count, whatever ``threads`` set


def _run(
    cases: Sequence[Case],
    sweep: tuple[str, Sequence[Any]] | None,
    rounds: int,
    min_run_time: float,
    memory: bool,
    threads: int | None,
    progress: Callable[[str], None] | None,
) -> list[Measurement]:
    def say(what: str) -> None:
        if progress is not None:
            progress(what)

    if threads:
        torch.set_num_threads(threads)
    points: list[list[Case]] = [list(cases)]
    if sweep is not None:
        key, values = sweep
        points = []
        for value in values:
            if key in ("batch", "seq"):
                points.append([replace(c, **{key: int(value)}) for c in cases])
            else:
                points.append([replace(c, config={**c.config, key: value}) for c in cases])
    shown = [c.shown for c in cases]
    if len(set(shown)) != len(shown):
        raise ConfigError(
            f"two cases are both called {sorted(n for n in shown if shown.count(n) > 1)[0]!r}; give them labels"
        )
    results = []
    for at, group in enumerate(points):
        where = f" (point {at + 1}/{len(points)})" if len(points) > 1 else ""
        steps, compile_times = {}, {}
        for case in group:
            say(f"building {case.shown}{where}")
            start = time.perf_counter()
            steps[case.shown], _ = build_step(case)
            if case.compile:
                steps[case.shown]()  # the first call compiles
                compile_times[case.shown] = time.perf_counter() - start
        routes = (
            {name: route_and_flops(step) for name, step in steps.items()}
            if not any(c.compile for c in group)
            else {name: ("compiled", None) for name in steps}
        )
        times = time_alternating(
            steps,
            rounds=rounds,
            min_run_time=min_run_time,
            threads=threads,
            progress=None if progress is None else (lambda what, where=where: say(what + where)),
        )
        for case in group:
            median = statistics.median(times[case.shown])
            route, gflop = routes[case.shown]
            if case.compile:
                _, gflop = route_and_flops(build_step(replace(case, compile=False))[0])
            results.append(
                Measurement(
                    case=case,
                    median_ms=median * 1e3,
                    spread_ms=tuple(v * 1e3 for v in _quartiles(times[case.shown])),
                    rounds=rounds,
                    samples_per_s=case.batch / median,
                    tokens_per_s=case.batch * case.seq / median,
                    route=route,
                    gflop=gflop,
                    gflops_per_s=(gflop / median) if gflop else None,
                    peak_mib=_measure_memory(case, threads, say) if memory else None,
                    compile_s=compile_times.get(case.shown),
                )
            )
    return results


def _measure_memory(case: Case, threads: int | None, say: Callable[[str], None]) -> float | None:
    say(f"peak memory: {case.shown} (a fresh process)")
    return peak_memory(case, threads)


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"


def format_table(results: Sequence[Measurement], sweep_key: str | None = None) -> str:
    """A table for people: one row per variant and sweep point, with the ratio to the first variant."""
    headers = [
        "NAME",
        *([sweep_key.upper()] if sweep_key else []),
        "MEDIAN ms",
        "IQR ms",
        "x FIRST",
        "tokens/s",
        "GFLOP/s",
        "PEAK MiB",
        "ROUTE",
    ]
    rows, first = [], {}
    for m in results:
        point = _point(m, sweep_key)
        first.setdefault(point, m.median_ms)
        rows.append(
            [
                printable(m.case.shown),  # a saved folder's name: shown, not sent to the terminal
                *([str(point)] if sweep_key else []),
                _fmt(m.median_ms),
                f"{_fmt(m.spread_ms[0])}-{_fmt(m.spread_ms[1])}",
                f"{m.median_ms / first[point]:.2f}",
                _fmt(m.tokens_per_s),
                _fmt(m.gflops_per_s),
                _fmt(m.peak_mib),
                m.route,
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def _point(m: Measurement, sweep_key: str | None) -> Any:
    if sweep_key is None:
        return None
    if sweep_key in ("batch", "seq"):
        return getattr(m.case, sweep_key)
    return m.case.config.get(sweep_key)


def format_csv(results: Sequence[Measurement]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    rows = [m.to_dict() for m in results]
    for row in rows:
        row["config"] = json.dumps(row["config"], sort_keys=True)
        row["spread_ms"] = f"{row['spread_ms'][0]:.6g}-{row['spread_ms'][1]:.6g}"
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def plot(results: Sequence[Measurement], sweep_key: str, path: str) -> str:
    """Median time against the sweep value, one line per variant, log-log; returns the path."""
    from attnzoo.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(m.case.shown for m in results):
        points = [(float(_point(m, sweep_key)), m.median_ms) for m in results if m.case.shown == name]
        ax.plot(*zip(*points, strict=True), marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(sweep_key)
    ax.set_ylabel("median ms per step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
