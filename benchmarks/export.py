"""Deploy what you ported: every Keras model file the tests hold, converted, exported to ONNX and .pt2, and
each written file run at 3 shapes per open axis against the eager model.

    KERAS_BACKEND=torch python benchmarks/export.py [--budget 900] [--only NAME ...]

The models: every whole-model file under tests/data (Keras 2 .h5, keras-hub and text .keras) and, when
Keras is installed, the ones tests/keras_export_oracle.py and tests/keras_oracle_rows.py build (saved
into a temporary folder). For each model and format the row says: ``written`` (and whether the file,
run again here at three sizes per open axis that export did not use, matches eager within 1e-4),
``refused`` (export's reason, which should name the layer or input), or ``not converted``, and how long
``attnzoo.export`` took (trace, write and its own checks; ``export_seconds``). Prints a table
and writes benchmarks/results/export.json; the summary counts files written that differ (the promise: 0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOLERANCE = 1e-4

_SAVE_ROWS = """
import os, sys, warnings
os.environ["KERAS_BACKEND"] = "torch"
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[2])
import keras, keras_oracle_rows
for name, build in keras_oracle_rows.ROWS.items():
    try:
        build().save(os.path.join(sys.argv[1], f"row_{name}.keras"))
    except Exception as e:
        print(name, type(e).__name__, e, file=sys.stderr)
"""


def model_files(work: Path) -> list[Path]:
    """tests/data's whole-model files, then (with Keras) the ones the oracles build, saved into ``work``."""
    files = sorted(p for p in (ROOT / "tests" / "data").rglob("*") if p.suffix in (".keras", ".h5"))
    files = [p for p in files if not p.name.endswith(".weights.h5")]
    try:
        import importlib.util

        if importlib.util.find_spec("keras") is None:
            return files
    except ValueError:
        return files
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    subprocess.run([sys.executable, str(ROOT / "tests" / "keras_export_oracle.py"), str(work)], env=env, check=True)
    subprocess.run([sys.executable, "-c", _SAVE_ROWS, str(work), str(ROOT / "tests")], env=env, check=False)
    return files + sorted(p for p in work.glob("*.keras"))


def _independent_shapes(model) -> list[tuple[int, dict]]:
    """Three shapes per open axis that export's own check did not use: 2t + 3, t + 2 and t - 1 (odd and
    even around the traced size t), each with another batch size."""
    from attnzoo.interop.keras_axes import keras_axes

    axes = keras_axes(model)
    out = []
    for batch, grow in ((3, lambda t: 2 * t + 3), (1, lambda t: t + 2), (2, lambda t: max(1, t - 1))):
        out.append((batch, {**axes.sizes, **{k: grow(axes.sizes[k]) for k in axes.open}}))
    return out


def run_again(path: Path, model) -> tuple[float, int]:
    """The written file run here at :func:`_independent_shapes` against eager: (largest difference, shapes
    run); a shape eager refuses is skipped."""
    from attnzoo.conventions import get_convention, model_config
    from attnzoo.interop.export_check import largest_difference, onnx_runner, pt2_runner
    from attnzoo.interop.export_plan import eager
    from attnzoo.interop.keras_axes import keras_inputs

    run = pt2_runner(path) if path.suffix == ".pt2" else onnx_runner(path, model)
    in_band = get_convention("keras_inputs").for_config(model_config(model)).in_band
    worst, count = 0.0, 0
    for n, (batch, sizes) in enumerate(_independent_shapes(model)):
        args = keras_inputs(model, batch, sizes, in_band=in_band, seed=100 + n)
        try:
            want = eager(model, args, {})
        except (RuntimeError, ValueError):
            continue
        try:
            worst = max(worst, largest_difference(run(args, {}), want))
        except Exception:  # noqa: BLE001 - a file that refuses a shape it declares open counts as differing
            worst = float("inf")
        count += 1
    return worst, count


def one(path: Path, work: Path) -> list[dict]:
    import attnzoo
    from attnzoo.errors import AttnzooError
    from attnzoo.keras import convert_keras_model

    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    try:
        model = convert_keras_model(path)
    except Exception as e:  # noqa: BLE001 - the row says why
        return [{"model": name, "format": "-", "status": "not converted", "reason": f"{type(e).__name__}: {e}"[:300]}]
    rows = []
    for suffix in (".onnx", ".pt2"):
        target = work / f"{path.stem}{suffix}"
        start = time.perf_counter()
        row = {"model": name, "format": suffix[1:]}
        try:
            result = attnzoo.export(model, target, overwrite=True)
        except AttnzooError as e:
            row.update(status="refused", reason=str(e)[:400])
        else:
            row["export_seconds"] = round(time.perf_counter() - start, 1)  # trace, write and export's checks
            worst, count = run_again(target, model)
            row.update(
                status="written",
                open=list(result.open_axes),
                fixed=list(result.static_axes),
                export_checked=len(result.checked_shapes),
                rerun_shapes=count,
                rerun_max_abs_diff=worst,
                differs=not worst <= TOLERANCE,
            )
            target.unlink()
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=900.0, help="seconds; models past it are listed as not run")
    parser.add_argument("--only", nargs="*", help="model file names (stems) to run")
    parser.add_argument("--out", default=str(HERE / "results" / "export.json"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = model_files(work)
        if args.only:
            files = [p for p in files if p.stem in args.only]
        start = time.perf_counter()
        for path in files:
            if time.perf_counter() - start > args.budget:
                rows.append({"model": path.name, "format": "-", "status": "not run (time budget)"})
                continue
            new = one(path, work)
            rows.extend(new)
            for r in new:
                took = f"{r['export_seconds']:6.1f} s" if "export_seconds" in r else " " * 8
                reason = r.get("reason", "")[:90]
                print(f"{r['model']:<44} {r['format']:<5} {r['status']:<13} {took} {reason}", flush=True)
    written = [r for r in rows if r["status"] == "written"]
    summary = {
        "models": len({r["model"] for r in rows}),
        "written": len(written),
        "written_that_differ": sum(r["differs"] for r in written),
        "refused": sum(r["status"] == "refused" for r in rows),
        "not_converted": sum(r["status"] == "not converted" for r in rows),
        "not_run": sum(r["status"].startswith("not run") for r in rows),
        "export_seconds_total": round(sum(r.get("export_seconds", 0.0) for r in rows), 1),
        "export_seconds_max": max((r.get("export_seconds", 0.0) for r in rows), default=0.0),
        "torch": torch.__version__,
    }
    print("\n| model | format | status | export (s) | open | detail |\n|---|---|---|---|---|---|")
    for r in rows:
        detail = (
            f"rerun at {r['rerun_shapes']} shapes: {r['rerun_max_abs_diff']:.2g}" if r["status"] == "written" else ""
        ) or r.get("reason", "")[:120]
        took = r.get("export_seconds", "")
        print(f"| {r['model']} | {r['format']} | {r['status']} | {took} | {', '.join(r.get('open', []))} | {detail} |")
    print(json.dumps(summary))
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
