"""Peak memory of a training run on one process and on each of two (torchrun, gloo), on one training file.

    python benchmarks/distributed_memory.py [--rows 20000] [--words 1500] [--batch-size 32] [--accumulate 1]

It writes a CSV of ``--rows`` training rows (seeded words from a 5,000-word list, ``--words`` a row on
average, 1 to 4 of 50 labels) and a validation file of a tenth of that, then trains ``conv_caml`` on them
for one epoch (``data.max_len=2500``, the length of an ICD document; ``train.batch_size`` and
``train.accumulate`` from the flags), once as one process and once under
``torchrun --nproc_per_node 2``. Each process records its VmHWM (the peak resident size, from
/proc/self/status) as it exits; the table gives it and the part above the VmHWM of a process that only
imports the trainer (what every process pays before it reads a row); a second table gives each process's
VmRSS as each of the trainer's phases ends (reading the rows, building the model, the epochs, the final
scoring), which says what the peak is made of. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def vm_hwm_mib(key: str = "VmHWM") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status (Linux only)")


PHASES = ("build_task", "_build_model", "_run_epochs", "finish")  # the trainer's, in the order they run


def record_phases(into: dict[str, list[float]]) -> None:
    """Wrap the trainer's phases so that each adds this process's [VmRSS, VmHWM] (MiB) as it ends to ``into``
    (and ``start`` as the run begins): what each phase leaves held, and the peak so far."""
    import attnzoo.train.trainer as trainer

    def wrapped(name: str, phase):
        def run(*args, **kwargs):
            into.setdefault("start", [vm_hwm_mib("VmRSS"), vm_hwm_mib()])
            out = phase(*args, **kwargs)
            into[name] = [vm_hwm_mib("VmRSS"), vm_hwm_mib()]
            return out

        return run

    for name in PHASES:
        setattr(trainer, name, wrapped(name, getattr(trainer, name)))


def write_rows(path: Path, rows: int, words: int, seed: int) -> None:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(5000)]
    with open(path, "w", encoding="utf-8") as out:
        out.write("text,labels\n")
        for _ in range(rows):
            count = rng.randint(words // 2, words * 3 // 2)
            labels = "|".join(sorted({f"l{rng.randrange(50)}" for _ in range(rng.randint(1, 4))}))
            out.write(" ".join(rng.choices(vocabulary, k=count)) + "," + labels + "\n")


def child(record: Path, args: list[str]) -> None:
    """Run ``attnzoo`` with ``args`` in this process; its VmHWM is written to ``record`` at exit."""
    rank = os.environ.get("RANK", "0")
    phases: dict[str, list[float]] = {}
    record_phases(phases)
    out = record / f"rank-{rank}.json"
    atexit.register(lambda: out.write_text(json.dumps({"vm_hwm_mib": vm_hwm_mib(), "phases": phases})))
    from attnzoo.cli.app import main

    sys.argv = ["attnzoo", *args]
    code = main()
    sys.exit(code)


def baseline_mib() -> float:
    """The VmHWM of a process that imports the trainer and does nothing else."""
    code = "import attnzoo.train.trainer, sys; sys.path.insert(0, sys.argv[1]); import distributed_memory as d; "
    code += "print(d.vm_hwm_mib())"
    out = subprocess.run([sys.executable, "-c", code, str(HERE)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def measure(folder: Path, processes: int, train: Path, validation: Path, steps: list[str]) -> dict:
    record = folder / f"np{processes}"
    record.mkdir()
    args = ["train", "--model", "conv_caml", "--train", str(train), "--validation", str(validation), "--epochs", "1"]
    args += [*steps, "--no-baseline", "--quiet", "--output", str(folder / f"run{processes}")]
    args += ["data.max_len=2500", "config.embed_dim=16", "config.hidden=16", "train.threads=1"]
    script = [str(Path(__file__).resolve()), "--child", str(record), "--"]
    if processes == 1:
        command = [sys.executable, *script, *args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"]
        command += ["--master_port=29571", *script, *args]
    started = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    ranks = [json.loads((record / f"rank-{r}.json").read_text()) for r in range(processes)]
    return {
        "processes": processes,
        "vm_hwm_mib": [r["vm_hwm_mib"] for r in ranks],
        "seconds": time.perf_counter() - started,
        "phases_rss_hwm_mib": [r["phases"] for r in ranks],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--words", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "distributed_memory.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, [a for a in args.rest if a != "--"])
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_rows(folder / "train.csv", args.rows, args.words, seed=1)
        write_rows(folder / "validation.csv", args.rows // 10, args.words, seed=2)
        size = (folder / "train.csv").stat().st_size / 2**20
        base = baseline_mib()
        steps = ["--batch-size", str(args.batch_size), f"train.accumulate={args.accumulate}"]
        one = measure(folder, 1, folder / "train.csv", folder / "validation.csv", steps)
        two = measure(folder, 2, folder / "train.csv", folder / "validation.csv", steps)
    single = one["vm_hwm_mib"][0]
    rows = [("1 process", single, single - base, 1.0, one["seconds"])]
    for rank, peak in enumerate(two["vm_hwm_mib"]):
        rows.append((f"2 processes, rank {rank}", peak, peak - base, peak / single, two["seconds"]))
    print(f"training file: {args.rows:,} rows, {size:,.0f} MiB; a process that imports the trainer: {base:.0f} MiB")
    print("| run | VmHWM (MiB) | above the import (MiB) | of one process | wall (s) |")
    print("|---|---|---|---|---|")
    for name, peak, above, ratio, seconds in rows:
        print(f"| {name} | {peak:,.0f} | {above:,.0f} | {ratio:.2f}x | {seconds:.0f} |")
    print("\nVmRSS after each of the trainer's phases (MiB; the VmHWM so far in brackets):")
    print("| run | " + " | ".join(["start", *PHASES]) + " |")
    print("|---|" + "---|" * (len(PHASES) + 1))
    for name, phases in [("1 process", one["phases_rss_hwm_mib"][0])] + [
        (f"2 processes, rank {r}", p) for r, p in enumerate(two["phases_rss_hwm_mib"])
    ]:
        cells = [f"{phases[k][0]:,.0f} ({phases[k][1]:,.0f})" if k in phases else "-" for k in ("start", *PHASES)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    result = {
        "rows": args.rows,
        "words": args.words,
        "batch_size": args.batch_size,
        "accumulate": args.accumulate,
        "file_mib": size,
        "import_mib": base,
        "one_process": one,
        "two_processes": two,
        "ratios": [peak / single for peak in two["vm_hwm_mib"]],
        "ratios_above_import": [(peak - base) / (single - base) for peak in two["vm_hwm_mib"]],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
