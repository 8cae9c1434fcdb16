"""What every benchmark here shares: alternating timing, peak memory in a subprocess, tables, JSON.

The timing and the resident-size probe are ``attnzoo.tools.bench``'s (what ``attnzoo bench`` runs); this file
adds what only these scripts need: the fixed thread count, implementations that are not registered
variants (naive references), the docs tables.

Times are medians over rounds in which the implementations alternate, so that drift on a shared
machine hits them all alike; what carries over to other machines is the ratio against the reference
measured in the same run, not the absolute time. Peak memory is measured in a fresh subprocess per
implementation (``ru_maxrss`` after one forward+backward, minus the resident size just before it).

The timing process raises glibc's mmap and trim thresholds (``mallopt``), so that freed temporaries
are reused instead of returned to the system and faulted in again on the next call, as jemalloc or
tcmalloc would do. With glibc's defaults the 20 MB temporaries of LAAT-50 are faulted in again on
some calls and not others, depending on the heap's layout rather than on the code: measured in one
process, attnzoo's LAAT-50 forward took 52.7 ms against the naive 41.3 ms with the defaults (10,000
page faults per call against none) and 43.4 against 42.9 ms with the thresholds raised.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnzoo.tools import bench

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
THREADS = 2


def setup_threads() -> None:
    torch.set_num_threads(THREADS)
    steady_allocator()


def steady_allocator() -> bool:
    """Keep freed memory in the process (glibc: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD 1 GiB); False
    where the C library is not glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_trim_threshold, -1)) and bool(mallopt(m_mmap_threshold, 1 << 30))


def time_rounds(
    impls: dict[str, Callable[[], object]], *, rounds: int, min_run_time: float, budget: dict[str, float] | None = None
) -> dict[str, list[float]]:
    """Seconds per call of each zero-argument callable, one median per round, alternating implementations
    each round (``attnzoo.tools.bench.time_alternating``, the same code as ``attnzoo bench``).

    ``budget`` caps the run time per round of slow implementations (seconds), e.g. a Python loop.
    """
    per_round: dict[str, list[float]] = {name: [] for name in impls}
    capped = {name for name in impls if (budget or {}).get(name, min_run_time) < min_run_time}
    for name, times in bench.time_alternating(
        {n: f for n, f in impls.items() if n not in capped}, rounds=rounds, min_run_time=min_run_time, threads=THREADS
    ).items():
        per_round[name] = times
    if capped:
        slow = bench.time_alternating(
            {n: impls[n] for n in capped}, rounds=rounds, min_run_time=min(budget[n] for n in capped), threads=THREADS
        )
        per_round.update(slow)
    return per_round


def time_alternating(
    impls: dict[str, Callable[[], object]], *, rounds: int, min_run_time: float, budget: dict[str, float] | None = None
) -> dict[str, float]:
    """The median over rounds of :func:`time_rounds` for each implementation."""
    per_round = time_rounds(impls, rounds=rounds, min_run_time=min_run_time, budget=budget)
    return {name: statistics.median(times) for name, times in per_round.items()}


def noise_floor(drifts: list[float]) -> float:
    """The lowest speed-up still read as "no slower": 1 minus the farthest an A/A control (the same code
    timed as two implementations) drifted from 1 in the same run, and never below 0.95."""
    return max(0.95, 1 - max(abs(1 - d) for d in drifts))


def paired_speedup(reference: list[float], times: list[float]) -> float:
    """How many times faster than ``reference`` (> 1: faster): the median over rounds of the ratio within
    each round. Both times of a round are taken within seconds of each other, so the slow drifts of a
    shared machine (another tenant, the clock) cancel, which a ratio of two medians does not do."""
    return statistics.median(r / t for r, t in zip(reference, times, strict=True))


def gemm_throughput(size: int = 2048, rounds: int = 5) -> float:
    """GFLOP/s of a large float32 matmul on this machine: the practical roofline of attention."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    seconds = time_alternating({"mm": lambda: torch.matmul(a, b)}, rounds=rounds, min_run_time=0.5)["mm"]
    return 2 * size**3 / seconds / 1e9


_PROBE = r"""
import sys, importlib, torch
torch.set_num_threads({threads})
sys.path.insert(0, {bench!r})
from attnzoo.tools.bench import rss_peak_of
module = importlib.import_module({module!r})
step = getattr(module, {factory!r})(*{args!r})
print(*rss_peak_of(step))
"""


def peak_memory(module: str, factory: str, *args) -> dict[str, float]:
    """Peak memory of one call of ``module.factory(*args)()`` in a fresh interpreter.

    ``factory`` builds inputs and parameters and returns the step to measure. Returns MiB: ``extra``
    (the peak above the resident size just before the step) and ``max_rss`` (the process's peak
    during the step, inputs and torch included).
    """
    code = _PROBE.format(threads=THREADS, bench=str(HERE), module=module, factory=factory, args=args)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    before, peak = (int(v) for v in out.stdout.split()[-2:])
    return {"extra_mib": (peak - before) / 2**20, "max_rss_mib": peak / 2**20}


def transformers_greedy(model, prompt: torch.Tensor, new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy generation through transformers' own loop: exactly ``new_tokens`` tokens (no end token)."""
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=use_cache,
        pad_token_id=0,
    )


def keras_archive(path: Path, config: dict, fill: Callable[[Any], None], keras_version: str = "3.15.1") -> Path:
    """A ``.keras`` zip as keras 3 writes one: ``config`` as config.json, metadata.json, and the
    model.weights.h5 that ``fill(h5py_file)`` writes (variables under ``layers/<path>/vars/<index>``)."""
    import io
    import zipfile

    import h5py

    weights = io.BytesIO()
    with h5py.File(weights, "w") as f:
        fill(f)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("metadata.json", json.dumps({"keras_version": keras_version}))
        archive.writestr("model.weights.h5", weights.getvalue())
    return path


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")


def update_doc_section(doc: Path, key: str, text: str) -> None:
    """Replace the text between ``<!-- key:begin -->`` and ``<!-- key:end -->`` in a docs page."""
    content = doc.read_text() if doc.exists() else ""
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in content and end in content:
        content = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, content, flags=re.S)
    else:
        content = content.rstrip() + "\n\n" + block + "\n"
    doc.write_text(content)
    print(f"updated {doc} [{key}]")


def machine_line() -> str:
    return f"torch {torch.__version__}, {THREADS} threads, float32, CPU"
