"""How long a converted folder at the node limit takes to load, and what the bounded readers cost (issue 58).

    python benchmarks/hostile_limits.py [--nodes N] [--rounds 3]

A converted Keras folder of a chain of ``activation`` layers, ``N`` layers and calls together (default:
``ATTNZOO_MAX_GRAPH_NODES``, the limit), is saved and then loaded with ``attnzoo.load`` in a fresh
interpreter each round (nothing cached between rounds: the YAML parse, the checks, the emitted module and
its compile all count), next to the time of each step that reads the file: ``config.yaml`` parsed by
:func:`attnzoo.io.limits.load_yaml` (one pass of PyYAML's C parser), the same file through
``yaml.load(CSafeLoader)`` and through the pure-Python ``yaml.safe_load`` that read it before, and
refusals that must end at once (``[[[...]]]`` 200,000 deep, a graph one node past the limit).
Writes benchmarks/results/hostile_limits.json. Times are medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, machine_line, markdown_table, write_json  # noqa: E402

LOAD = (  # wall and CPU seconds: on a shared machine the CPU time is what the load itself costs
    "import sys, time; t, c = time.perf_counter(), time.process_time(); import attnzoo; attnzoo.load(sys.argv[1]); "
    "print(time.perf_counter() - t, time.process_time() - c)"
)


def chain(layers: int) -> dict:
    """A converted graph of ``layers`` chained ReLU activations (one call each): 2 * layers nodes."""
    return {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": "x", "name": "x", "shape": [None, 4], "dtype": "float32"}],
        "layers": {
            f"a{i}": {"op": "activation", "activation": "relu", "keras": {"name": f"a{i}", "class": "Activation"}}
            for i in range(layers)
        },
        "calls": [
            {"id": f"a{i}", "layer": f"a{i}", "args": [{"ref": [f"a{i - 1}" if i else "x", 0]}], "kwargs": {}}
            for i in range(layers)
        ],
        "outputs": [[f"a{layers - 1}", 0]],
    }


def timed(function, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def refused(function) -> float:
    started = time.perf_counter()
    try:
        function()
    except Exception as e:  # noqa: BLE001 - the refusal is what is timed
        assert "ATTNZOO_MAX" in str(e), e
    else:
        raise AssertionError("not refused")
    return time.perf_counter() - started


def main() -> None:
    import torch
    import yaml

    import attnzoo
    from attnzoo.io.limits import limit, load_yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=limit("ATTNZOO_MAX_GRAPH_NODES"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["ATTNZOO_MAX_GRAPH_NODES"] = str(args.nodes)  # the limit the refusal row meets
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "chain"
        attnzoo.save(attnzoo.create("keras_model", graph=chain(args.nodes // 2)), folder)
        text = (folder / "config.yaml").read_text()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        loads = [
            [
                float(v)
                for v in subprocess.run(
                    [sys.executable, "-c", LOAD, str(folder)], capture_output=True, text=True, check=True, env=env
                ).stdout.split()
            ]
            for _ in range(args.rounds)
        ]
        rows = [
            ["attnzoo.load, fresh interpreter (wall)", statistics.median(w for w, _ in loads)],
            ["attnzoo.load, fresh interpreter (CPU)", statistics.median(c for _, c in loads)],
            ["config.yaml: load_yaml (C parser, one pass)", timed(lambda: load_yaml(text, "x"), args.rounds)],
            [
                "config.yaml: yaml.load(CSafeLoader)",
                timed(lambda: yaml.load(text, Loader=yaml.CSafeLoader), args.rounds),
            ],
            ["config.yaml: yaml.safe_load (pure Python, before)", timed(lambda: yaml.safe_load(text), 1)],
            ["refused: [[[...]]] 200,000 deep", refused(lambda: load_yaml("[" * 200_000 + "]" * 200_000, "x"))],
            [
                "refused: a graph one node past the limit",
                refused(lambda: attnzoo.create("keras_model", graph=chain(args.nodes // 2 + 1))),
            ],
        ]
    print(
        f"# {machine_line()}; {args.nodes:,} nodes, config.yaml {len(text) / 2**20:.1f} MiB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(markdown_table(["what", "seconds"], [[what, f"{t:.2f}"] for what, t in rows]))
    write_json(
        HERE / "results" / "hostile_limits.json",
        {
            "machine": machine_line(),
            "nodes": args.nodes,
            "config_yaml_bytes": len(text.encode()),
            "seconds": dict(rows),
            "loads": loads,
        },
    )


if __name__ == "__main__":
    main()
