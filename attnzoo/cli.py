"""The ``attnzoo`` command.

    attnzoo list [PATTERN ...] [--pretrained] [--provider P] [--json]
    attnzoo info NAME [--json]
    attnzoo plugins [--json]
    attnzoo create NAME [key=value ...] [--pretrained[=TAG]] [--device D] [--dtype T]

Tables for people, ``--json`` for programs. Exit status 2 for usage errors, 1 for failures, with a
one-line message (``--debug`` shows the traceback). ``--no-plugins`` skips third-party plugins. torch is
imported only by the verbs that build a model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import AttnzooError

__all__ = ["main"]

USAGE_ERROR = 2
FAILURE = 1


class UsageError(Exception):
    """A command line that cannot be run as written (exit status 2)."""


# -- output helpers ----------------------------------------------------------------------------------
def _width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, stretch: int = -1) -> None:
    """Print rows under headers in aligned columns; the ``stretch`` column is cut to fit the terminal."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    stretch %= len(headers)
    fixed = sum(w + 2 for i, w in enumerate(widths) if i != stretch)
    widths[stretch] = max(len(headers[stretch]), min(widths[stretch], _width() - fixed - 1))

    def line(values: Sequence[str]) -> str:
        parts = []
        for i, v in enumerate(values):
            if len(v) > widths[i]:
                v = v[: max(widths[i] - 1, 0)] + "…"
            parts.append(v.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    print(line(headers))
    for row in cells:
        print(line(row))


def _emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _metrics_text(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


# -- verbs -------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from .registry import list_models, model_info

    names = list_models(args.patterns or "*", pretrained=args.pretrained, provider=args.provider)
    rows = []
    for name in names:
        spec = model_info(name)
        tag = name.rsplit(".", 1)[1] if args.pretrained else None
        entry: dict[str, Any] = {"name": name, "kind": spec.kind, "provider": spec.provider, "summary": spec.summary}
        if tag is not None:
            entry["metrics"] = dict(spec.weights[tag].metrics)
            entry["dataset"] = spec.weights[tag].dataset
        rows.append(entry)
    if args.json:
        _emit_json(rows)
        return 0
    if not rows:
        print("no model matches" + (f" {' '.join(args.patterns)}" if args.patterns else ""), file=sys.stderr)
        return 0
    if args.pretrained:
        print_table(
            ["NAME", "DATASET", "METRICS"], [(r["name"], r["dataset"], _metrics_text(r["metrics"])) for r in rows]
        )
    else:
        print_table(
            ["NAME", "KIND", "PROVIDER", "SUMMARY"], [(r["name"], r["kind"], r["provider"], r["summary"]) for r in rows]
        )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .registry import model_info

    spec = model_info(args.name)
    data = spec.to_dict()
    if args.json:
        _emit_json(data)
        return 0
    print(f"{spec.name}  ({spec.kind}, provider {spec.provider})")
    for key in ("summary", "reference", "factory", "source"):
        if data[key]:
            print(f"  {key + ':':<11}{data[key]}")
    from .signatures import config_rows

    print("  config (every constructor argument):")
    rows = config_rows(spec)
    if not rows:
        print("    (none)")
    for key, described in rows:
        print(f"    {key:<20}{described}")
    if data["weights"]:
        print("  weights:" + (f"  (default {spec.default_tag})" if spec.default_tag else ""))
        for tag, w in data["weights"].items():
            print(f"    {spec.name}.{tag}")
            print(f"      {'file:':<12}{w['file']}  sha256 {w['sha256'][:16]}…")
            for key in ("dataset", "license", "recipe", "train_time"):
                if w[key]:
                    print(f"      {key + ':':<12}{w[key]}")
            if w["metrics"]:
                print(f"      {'metrics:':<12}{_metrics_text(w['metrics'])}")
            if w["baseline"]:
                print(f"      {'baseline:':<12}{_metrics_text(w['baseline'])}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from .registry import list_plugins

    infos = list_plugins()
    if args.json:
        _emit_json([i.to_dict() for i in infos])
        return 0
    rows = []
    for info in infos:
        status = info.status
        if info.status == "loaded" and info.problems:
            status += f" ({len(info.problems)} problem{'s' * (len(info.problems) > 1)})"
        rows.append((info.name, info.distribution, info.version, status, len(info.models), info.error or ""))
    print_table(["NAME", "DISTRIBUTION", "VERSION", "STATUS", "MODELS", "ERROR"], rows)
    return 0


def _describe_output(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe_output(v) for v in value) + ")"
    return type(value).__name__


def cmd_create(args: argparse.Namespace) -> int:
    from .config import parse_overrides
    from .create import create

    try:
        overrides = parse_overrides(args.overrides)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    import torch
    from torch.nn.parameter import is_lazy

    from .registry import model_info

    spec = model_info(args.name)
    model = create(args.name, pretrained=args.pretrained, device=args.device, dtype=args.dtype, **overrides)
    shapes = None
    if spec.convention:
        from .conventions import get_convention, sample_inputs

        device = None if any(True for _ in model.parameters()) or args.device is None else torch.device(args.device)
        placement: dict[str, Any] = {"device": device} if device else {}
        sample = sample_inputs(model, get_convention(spec.convention), **placement)
        inputs, kwargs = sample.call_arguments()
        with torch.no_grad():
            model.eval()
            output = model(*inputs, **kwargs)
        shown = [*inputs, *kwargs.values()]
        shapes = (", ".join(_describe_output(t) for t in shown), _describe_output(output))

    print(model)
    params = list(model.parameters())
    count = sum(p.numel() for p in params if not is_lazy(p))
    lazy = sum(1 for p in params if is_lazy(p))
    print(f"parameters: {count:,}" + (f" (+{lazy} lazy, sized on the first call)" if lazy else ""))
    if shapes:
        print(f"dummy forward: ({shapes[0]}) -> {shapes[1]}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import warnings

    from .registry import list_models, model_info
    from .testing import check_model, format_table

    names: list[str] = []
    for pattern in args.patterns or ["*"]:
        if any(c in pattern for c in "*?["):
            provider, _, glob = pattern.rpartition(":")  # 'my_plugin:*' = every model of that provider
            found = [f"{provider}:{n}" if provider else n for n in list_models(glob, provider=provider or None)]
        else:
            model_info(pattern)  # an exact name, provider-qualified or not; unknown: a clear error
            found = [pattern]
        if not found:
            raise UsageError(f"no model matches {pattern!r}; `attnzoo list` shows every name")
        names += [n for n in found if n not in names]
    reports = []
    for name in names:
        if args.in_process:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose; results say what matters
                report = check_model(name, only=args.property or None, slow=args.slow)
        else:
            report = _check_in_child(name, args.property, args.slow)
        reports.append(report)
        if not args.json and not args.quiet:
            table = format_table([report], width=_width(), variant_width=max(map(len, names)), whole=args.verbose)
            lines = table.split("\n")
            print("\n".join(lines[: len(lines) - 1] if not reports[:-1] else lines[1:-1]), flush=True)
    if args.json:
        _emit_json([r.to_dict() for r in reports])
    else:
        failed = [r.variant for r in reports if not r.ok]
        summary = format_table(reports).rsplit("\n", 1)[1]
        print(f"{len(reports)} variant(s): {summary}" + (f"; failing: {', '.join(failed)}" if failed else ""))
    return FAILURE if any(not r.ok for r in reports) else 0


def _check_in_child(name: str, properties: list[str] | None, slow: bool) -> Any:
    """One variant checked in a process of its own (``attnzoo.testing.child``): a variant that ends the
    process or hangs fails the property it was in, and cannot end ``attnzoo check`` as a success."""
    import subprocess

    from .testing.kit import property_time_limit
    from .testing.report import FAILED, Report, Result

    command = [sys.executable, "-m", "attnzoo.testing.child", name, *(["--slow"] if slow else [])]
    for prop in properties or []:
        command += ["--property", prop]
    # every property has its own alarm in the child; this bounds a child that blocks the alarm too
    limit = property_time_limit() * 20 + 120
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        lines, code = proc.stdout.splitlines(), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines, code = out.splitlines(), None
    for line in reversed(lines):
        if line.startswith("report "):
            data = json.loads(line[len("report ") :])
            return Report(data["variant"], data["convention"], [Result(**r) for r in data["results"]])
    running = next((line.split(" ", 1)[1] for line in reversed(lines) if line.startswith("start ")), "builds")
    how = f"ended its check process (exit status {code})" if code is not None else f"hung past {limit:g} s"
    return Report(name, "", [Result(name, running, FAILED, f"the variant {how} during {running}; no report")])


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .config import parse_overrides
    from .create import create, load
    from .export import export
    from .registry import model_info

    try:
        overrides = parse_overrides(args.overrides)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    if Path(args.source).is_dir():
        if overrides:
            raise UsageError("a saved folder rebuilds its own config; key=value pairs apply to a NAME only")
        model = load(args.source)
    else:
        spec = model_info(args.source)
        # the card's example fills what the command line leaves open, so `attnzoo export laat` works
        config = {**dict(spec.example), **overrides} if not args.pretrained else overrides
        model = create(args.source, pretrained=args.pretrained, config=config or None)
    result = export(
        model,
        args.output,
        dynamic=not args.static,
        return_attention=args.return_attention,
        overwrite=args.overwrite,
        batch=args.batch,
        seq=args.seq,
    )
    if args.json:
        _emit_json(
            {
                "path": str(result.path),
                "format": result.format,
                "max_abs_diff": result.max_abs_diff,
                "checked_on": result.checked_on,
                "static_axes": list(result.static_axes),
                "metadata": sorted(result.metadata or {}),
                "notes": list(result.notes),
            }
        )
        return 0
    fixed = f"; fixed: {', '.join(result.static_axes)}" if result.static_axes else ""
    shapes = ", ".join(f"{k} {v}" for k, v in result.checked_on.items())
    print(
        f"wrote {result.path} ({result.format}); checked against the eager model on {shapes}: max abs "
        f"difference {result.max_abs_diff:.3g}{fixed}"
    )
    if result.metadata:
        print(f"the file carries: {', '.join(sorted(result.metadata))}")
    for note in result.notes:
        print(f"note: {note}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import Case, format_csv, format_table, plot, run
    from .config import parse_overrides
    from .create import parse_dtype
    from .registry import model_info

    pairs = [p for p in args.names if "=" in p]
    names = [p for p in args.names if "=" not in p]
    if not names:
        raise UsageError("name at least one registered variant (`attnzoo list` shows them) or saved folder to measure")
    try:
        config = parse_overrides(pairs)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    from pathlib import Path

    from .weights import read_folder

    folders: dict[str, dict[str, Any]] = {}  # a saved folder (a converted Keras model) measures its own config
    for name in names:
        if Path(name).is_dir():
            record = read_folder(name)
            folders[name] = {"name": record["name"], "config": {**record["config"], **config}}
            model_info(record["name"])
        else:
            model_info(name)
    parse_dtype(args.dtype)
    sweep = None
    if args.sweep:
        key, _, values = args.sweep.partition("=")
        if not key or not values:
            raise UsageError(f"--sweep wants KEY=V1,V2,..., e.g. seq=512,1024,2048; got {args.sweep!r}")
        sweep = (key, [parse_overrides([f"v={v}"])["v"] for v in values.split(",")])
    cases = [
        Case(
            folders[name]["name"] if name in folders else name,
            folders[name]["config"] if name in folders else config,
            label=Path(name).name if name in folders else "",
            batch=args.batch,
            seq=args.seq,
            dtype=args.dtype,
            device=args.device,
            backward=args.backward,
            compile=args.compile,
        )
        for name in names
    ]
    results = run(
        cases,
        sweep=sweep,
        rounds=args.rounds,
        min_run_time=args.min_run_time,
        memory=not args.no_memory,
        threads=args.threads,
        progress=_terminal_progress() if sys.stderr is not None and sys.stderr.isatty() else None,
    )
    if sys.stderr is not None and sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    if args.json:
        _emit_json([m.to_dict() for m in results])
    elif args.csv:
        sys.stdout.write(format_csv(results))
    else:
        step = "forward+backward" if args.backward else "forward"
        print(
            f"{step} of one batch, {args.dtype}, {args.device}, {torch_threads()} threads, median of "
            f"{args.rounds} alternating rounds"
        )
        print(format_table(results, sweep[0] if sweep else None))
    if args.plot:
        if sweep is None:
            raise UsageError("--plot draws a sweep; add --sweep KEY=V1,V2,...")
        print(f"plot: {plot(results, sweep[0], args.plot)}", file=sys.stderr)
    return 0


def _terminal_progress() -> Any:
    """One status line on stderr, rewritten in place: what bench is measuring now, and for how long."""
    import time

    started = time.monotonic()

    def show(what: str) -> None:
        print(f"\r\033[K[{time.monotonic() - started:5.0f} s] {what}", end="", file=sys.stderr, flush=True)

    return show


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# what `attnzoo train` needs beyond the core install: attnzoo[train]
TRAIN_EXTRA = {"sklearn": "scikit-learn", "tqdm": "tqdm"}


def _require_train_extra(baseline: bool) -> None:
    """Checked before any work: a run must not train for an hour and then miss a package."""
    import importlib.util

    needed = {m: p for m, p in TRAIN_EXTRA.items() if baseline or m != "sklearn"}
    missing = [package for module, package in needed.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise UsageError(
            f"attnzoo train needs the train extra ({', '.join(missing)} missing): pip install 'attnzoo[train]'"
            + ("; or --no-baseline to train without the scikit-learn baseline" if missing == ["scikit-learn"] else "")
        )


def cmd_train(args: argparse.Namespace) -> int:
    from .train.trainer import builtin_recipes, complete_recipe, load_recipe, recipe_summary, train

    if args.list:
        rows = [(name, recipe_summary(path)) for name, path in builtin_recipes().items()]
        width = max(len(name) for name, _ in rows)
        for name, summary in rows:
            print(f"{name:<{width}}  {summary}")
        return 0
    flags = {
        k: getattr(args, k)
        for k in (
            "model",
            "train_file",
            "validation_file",
            "test_file",
            "text",
            "labels",
            "target",
            "label_separator",
            "labels_file",
            "task",
        )
    }
    _require_train_extra(baseline=not args.no_baseline)
    if args.recipe and args.recipe.count("=") and not args.recipe.endswith((".yaml", ".yml")):
        args.overrides, args.recipe = [args.recipe, *args.overrides], None  # key=value given first
    if args.recipe is None:
        if not (flags["model"] and flags["train_file"]):
            raise UsageError(
                "give a recipe (a YAML file or a built-in name: attnzoo train --list), or --model "
                "and --train for your own data file"
            )
        recipe = _recipe_from_flags(args, flags)
    else:
        if any(v is not None for k, v in flags.items() if k != "task"):
            raise UsageError(
                "--model, --train and the other data flags build a recipe of their own; give them "
                "without a recipe file, or put them into the recipe's data section"
            )
        recipe = load_recipe(args.recipe, args.overrides)
    if args.recipe is None:
        from omegaconf import OmegaConf

        from .train.trainer import check_overrides

        check_overrides(list(args.overrides))
        merged = OmegaConf.merge(OmegaConf.create(recipe), OmegaConf.from_dotlist(list(args.overrides)))
        recipe = complete_recipe(OmegaConf.to_container(merged, resolve=True), where="the command line")
    import contextlib

    # with --json, stdout carries the report alone: the progress lines go to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        report = train(
            recipe,
            output=args.output,
            resume=args.resume,
            export=args.export,
            baseline=not args.no_baseline,
            quiet=args.quiet,
            stop_after=args.stop_after,
            overwrite=args.overwrite,
        )
    if report and args.json:
        _emit_json(report)
    return 0


def _recipe_from_flags(args: argparse.Namespace, flags: dict) -> dict:
    """``attnzoo train --model M --train F ...``: the recipe those flags describe."""
    data = {
        "train": flags["train_file"],
        "validation": flags["validation_file"],
        "test": flags["test_file"],
        "text": flags["text"] or "text",
        "task": flags["task"] or "multi_label",
    }
    if data["task"] == "seq2seq":
        data["target"] = flags["target"] or "target"
    else:
        data["labels"] = flags["labels"] or "labels"
    if flags["label_separator"] is not None:
        data["label_separator"] = flags["label_separator"]
    if flags["labels_file"]:
        data["labels_file"] = flags["labels_file"]
    settings = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "clip": 1.0, "warmup_steps": 50}
    if args.patience is not None:
        settings["patience"] = args.patience
    return {
        "model": flags["model"],
        "tag": args.tag,
        "seed": 0,
        "data": {k: v for k, v in data.items() if v},
        "train": settings,
        "recipe_file": "flags",
    }


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .train.trainer import evaluate_file

    columns = {"text": args.text, "labels": args.labels, "target": args.target, "label_separator": args.label_separator}
    scores = evaluate_file(args.model, args.file, columns=columns, threshold=args.threshold)
    if args.json:
        _emit_json(scores)
    else:
        for key, value in scores.items():
            print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from .create import weights_path
    from .registry import list_models, model_info
    from .weights import sha256_file

    rows, failures = [], 0
    names = list_models(args.patterns or "*", pretrained=True)
    if not names:
        raise UsageError(
            f"no pretrained model matches {' '.join(args.patterns) or '*'}; `attnzoo list --pretrained` shows them"
        )
    for name in names:
        arch, tag = name.rsplit(".", 1)
        spec = model_info(arch)
        wspec = spec.weights[tag]
        path = weights_path(spec, wspec)
        if not path.is_file():
            if wspec.remote:  # not fetched yet: nothing to check, nothing wrong
                status = f"not cached (from {wspec.source}; `attnzoo download {name}`)"
            else:
                status, failures = f"MISSING ({path})", failures + 1
        else:
            actual = sha256_file(path)
            ok = actual == wspec.sha256
            status = (
                ("ok" + (" (cached)" if wspec.remote else ""))
                if ok
                else f"MISMATCH: card {wspec.sha256[:12]}… file {actual[:12]}…"
            )
            failures += not ok
        rows.append({"name": name, "file": str(path), "status": status})
    if args.json:
        _emit_json(rows)
    else:
        print_table(["NAME", "STATUS", "FILE"], [(r["name"], r["status"], r["file"]) for r in rows])
        print(
            f"{sum(r['status'].startswith('ok') for r in rows)} of {len(rows)} weight files match their cards"
            + (f"; {failures} do not" if failures else "")
        )
    return FAILURE if failures else 0


def cmd_download(args: argparse.Namespace) -> int:
    from .create import HUB_PREFIX, hub_folder
    from .registry import resolve
    from .sources import fetch, resolve_weights

    rows = []
    for name in args.names:
        if name.startswith(HUB_PREFIX):
            rows.append((name, str(hub_folder(name[len(HUB_PREFIX) :])), "fetched"))
            continue
        spec, tag = resolve(name)
        tags = [tag] if tag else list(spec.weights)
        if not tags:
            raise UsageError(
                f"{spec.name!r} has no pretrained weights; `attnzoo list --pretrained` shows the names that do"
            )
        for t in tags:
            wspec = spec.weights[t]
            path = fetch(wspec, name=f"{spec.name}.{t}") if wspec.remote else resolve_weights(spec, wspec)
            rows.append((f"{spec.name}.{t}", str(path), "cached" if wspec.remote else "bundled, nothing to fetch"))
    print_table(["NAME", "STATUS", "PATH"], [(n, st, p) for n, p, st in rows])
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from .sources import cache_entries, cache_home, clear_cache

    if args.action == "path":
        print(cache_home())
        return 0
    if args.action == "list":
        import fnmatch

        entries = [
            e
            for e in cache_entries()
            if args.pattern is None
            or any(fnmatch.fnmatchcase(k, args.pattern) for k in (e["name"], e["source"], e["sha256"]) if k)
        ]
        if args.json:
            _emit_json(entries)
        elif not entries:
            print(
                f"the cache ({cache_home()}) holds nothing" + (f" matching {args.pattern}" if args.pattern else ""),
                file=sys.stderr,
            )
        else:
            print_table(
                ["NAME", "MiB", "SHA256", "SOURCE"],
                [
                    (
                        e["name"] or "-",
                        f"{e['bytes'] / 2**20:.1f}" + (" (partial)" if e["partial"] else ""),
                        e["sha256"][:12] + "…",
                        e["source"],
                    )
                    for e in entries
                ],
            )
        return 0
    removed = clear_cache(args.pattern)
    print(f"removed {len(removed)} file(s) from {cache_home()}")
    return 0


def cmd_convert_keras(args: argparse.Namespace) -> int:
    if args.model is None:
        return _convert_keras_model(args)
    from pathlib import Path

    from .config import parse_overrides
    from .create import create
    from .keras import load_keras_weights
    from .weights import encode_metadata, write_weights

    if args.check or args.weights:
        raise UsageError("--check and --weights belong to a whole-model conversion (without --model)")
    try:
        overrides = parse_overrides(args.overrides)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    model = create(args.model, **overrides)
    load_keras_weights(model, args.file, layer=args.layer)
    info = model.attnzoo_config  # sizes left lazy in the config are set again by the weights on load
    metadata = encode_metadata(
        info["name"],
        info["factory"],
        info["config"],
        {"source": f"Keras weights {Path(args.file).name}" + (f", layer {args.layer}" if args.layer else "")},
    )
    digest = write_weights(model.state_dict(), args.output, metadata=metadata, overwrite=args.overwrite)
    print(f"wrote {args.output} ({info['name']}, sha256 {digest}); attnzoo.load({str(args.output)!r}) rebuilds it")
    return 0


def _convert_keras_model(args: argparse.Namespace) -> int:
    """``attnzoo convert-keras model.keras -o runs/model``: the whole model, saved as a loadable folder."""
    from pathlib import Path

    from .keras import convert_keras_model
    from .weights import save

    if args.layer or args.overrides:
        raise UsageError(
            "--layer and key=value go with --model NAME (one layer's weights); a whole model needs neither"
        )
    output = Path(args.output)
    if output.suffix == ".safetensors":
        raise UsageError(
            f"-o {output}: a whole Keras model is saved as a folder (config.yaml + model.safetensors); "
            f"give a folder, or --model NAME to convert one layer's weights into a .safetensors file"
        )
    if output.exists() and not output.is_dir():
        raise UsageError(f"-o {output}: exists and is not a folder; a converted model is saved as a folder")
    model = convert_keras_model(args.file, weights=args.weights)
    check = None
    if args.check:
        from .keras.check import check_against_keras

        check = check_against_keras(args.file, model)
        if not check.ok:
            where = ""
            if check.first_divergence:
                layer, difference = check.first_divergence
                where = f"; first layer that differs: {layer} (max difference {difference:.3g})"
            raise AttnzooError(
                f"{args.file}: the converted model differs from Keras by "
                f"{max(check.outputs):.3g} (tolerance {check.tolerance:g}){where}; nothing was written"
            )
    save(model, output, overwrite=args.overwrite)
    report = model.keras_report
    if args.json:
        payload: dict[str, Any] = {"output": str(output), **report.to_dict()}
        if check is not None:
            payload["check"] = {"outputs": check.outputs, "layers": check.layers, "tolerance": check.tolerance}
        print(json.dumps(payload, indent=2))
        return 0
    print(report.to_text())
    if check is not None:
        shown = ", ".join(f"{d:.2g}" for d in check.outputs)
        print(f"checked against Keras on padded inputs: max difference per output {shown}")
    print(f"wrote {output}; attnzoo.load({str(output)!r}) rebuilds it without Keras")
    return 0


def cmd_convert_checkpoint(args: argparse.Namespace) -> int:
    from .config import parse_overrides
    from .convert import convert_checkpoint

    try:
        overrides = parse_overrides(args.overrides)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    _, converted = convert_checkpoint(
        args.file, args.source, args.model, config=overrides, output=args.output, overwrite=args.overwrite
    )
    sizes = ", ".join(f"{k}={v}" for k, v in converted.config.items())
    print(f"wrote {args.output} ({args.model}: {sizes}); attnzoo.load({str(args.output)!r}) rebuilds it")
    for key, why in sorted(converted.dropped.items()):
        print(f"  left out {key}: {why}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    import warnings

    from .train.predict import UnknownTokensWarning, draw_attention, predict

    if args.attention:
        from pathlib import Path

        target = Path(args.attention)
        if target.exists() and not args.overwrite:
            raise UsageError(f"{target} already exists; pass --overwrite to replace it")
        if not target.parent.is_dir():
            raise UsageError(f"cannot write {target}: the folder {target.parent} does not exist")
        if target.suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
            raise UsageError(f"--attention wants an image file (.png, .pdf, .svg, .jpg), got {target.name}")
    name = args.name if not args.pretrained else f"{args.name.split('.')[0]}.{args.pretrained}"
    text = " ".join(args.text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8 reach argv as lone surrogates
        raise UsageError("the text is not valid UTF-8; pass it in UTF-8") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokensWarning)  # printed below, with the result
        result = predict(
            name,
            text,
            top=None if args.above_threshold else args.top,
            threshold=args.threshold,
            return_attention=bool(args.attention),
            beam_size=args.beam,
        )
    if args.above_threshold:
        result.labels = [label for label in result.labels if label.above_threshold]
        if result.attention is not None and result.output == "multilabel":
            result.attention = result.attention[: len(result.labels)]
            result.rows = result.rows[: len(result.labels)]
    if args.json:
        _emit_json(result.to_dict())
    else:
        print(result.render())
    if args.attention:
        path = draw_attention(result, args.attention, title=f"{args.name}: {text}")
        print(f"attention map: {path}", file=sys.stderr)
    return 0


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


# -- parser ------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: exit 2, one line
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    common.add_argument(
        "--no-plugins",
        action="store_true",
        default=argparse.SUPPRESS,
        help="skip third-party plugins (same as ATTNZOO_DISABLE_PLUGIN_AUTOLOAD=1)",
    )

    parser = _Parser(prog="attnzoo", description="A config-driven zoo of PyTorch attention layers.", parents=[common])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("list", parents=[common], help="list registered models")
    p.add_argument("patterns", nargs="*", metavar="PATTERN", help="fnmatch patterns such as 'label*'")
    p.add_argument("--pretrained", action="store_true", help="list pretrained tags (arch.tag)")
    p.add_argument("--provider", help="only models of this provider (attnzoo, local, a plugin name)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("info", parents=[common], help="show a model card")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("plugins", parents=[common], help="list plugins, their status and errors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("create", parents=[common], help="build a model and run a dummy forward")
    p.add_argument("name")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (values parsed as YAML)")
    p.add_argument(
        "--pretrained",
        nargs="?",
        const=True,
        default=False,
        metavar="TAG",
        help="load pretrained weights (the default tag, or TAG)",
    )
    p.add_argument("--device", help="cpu, cuda:1, auto, meta, or a plugin's device string")
    p.add_argument("--dtype", help="float32, bfloat16 or float16")
    p.set_defaults(func=cmd_create)
    p = sub.add_parser("check", parents=[common], help="run the conformance kit on registered variants")
    p.add_argument("patterns", nargs="*", metavar="PATTERN", help="fnmatch patterns (default: every variant)")
    p.add_argument("--verbose", "-v", action="store_true", help="every reason in full (the table cuts long ones)")
    p.add_argument(
        "--in-process", action="store_true", help="check in this process (faster; a variant can then end the run)"
    )
    p.add_argument("--property", action="append", metavar="P", help="only this property (repeatable)")
    p.add_argument("--slow", action="store_true", help="include the slow tier (torch.compile)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("export", parents=[common], help="export a model to .pt2 (torch.export) or .onnx, checked")
    p.add_argument("source", metavar="NAME|FOLDER", help="a registered name or a folder written by attnzoo.save")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config of NAME (its card's example fills the rest)"
    )
    p.add_argument("-o", "--output", required=True, help="OUT.pt2 or OUT.onnx")
    p.add_argument(
        "--pretrained", nargs="?", const=True, default=False, metavar="TAG", help="export pretrained weights"
    )
    p.add_argument(
        "--static", action="store_true", help="fix every axis at the traced size (default: batch and sequence dynamic)"
    )
    p.add_argument("--return-attention", action="store_true", help="export the attention weights as an output too")
    p.add_argument("--batch", type=_positive_int, default=2, help="batch size to trace with (it stays dynamic)")
    p.add_argument("--seq", type=_positive_int, help="sequence length to trace with (fixed for recurrent models)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("bench", parents=[common], help="time and memory of variants on your shapes")
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME|key=value",
        help="one or more registered variants (alternated round by round), then config pairs for all",
    )
    p.add_argument("--batch", type=_positive_int, default=8)
    p.add_argument("--seq", type=_positive_int, default=512)
    p.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or float64")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--backward", action="store_true", help="time forward and backward")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (compile time reported)")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...", help="vary seq, batch or a config key, e.g. seq=512,1024")
    p.add_argument("--rounds", type=_positive_int, default=7, help="alternating rounds (the median is reported)")
    p.add_argument("--min-run-time", type=float, default=0.5, help="seconds of timing per variant and round")
    p.add_argument("--threads", type=_positive_int, help="torch threads (default: torch's own choice)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true")
    group.add_argument("--csv", action="store_true")
    p.add_argument("--plot", metavar="PNG", help="with --sweep: plot time against the swept value")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "train",
        parents=[common],
        help="train a recipe, or a model on your own data file",
        description="attnzoo train RECIPE [key=value ...] | attnzoo train --model NAME --train FILE "
        "[--validation FILE] [--test FILE] --text COL --labels COL [key=value ...] | attnzoo train "
        "--list. Under torchrun (torchrun --nproc_per_node N -m attnzoo train ...) it trains with "
        "DistributedDataParallel.",
    )
    p.add_argument("recipe", nargs="?", help="a recipe YAML file or the name of a built-in recipe (--list)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="recipe overrides, e.g. train.epochs=2")
    p.add_argument("--list", action="store_true", help="list the built-in recipes")
    p.add_argument("--output", help="run folder (default runs/MODEL-TAG); attnzoo.load(DIR) rebuilds the model")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's checkpoint")
    p.add_argument("--overwrite", action="store_true", help="start again in a run folder that holds a run")
    p.add_argument("--export", metavar="DIR", help="also write the weights file into DIR (never overwrites)")
    p.add_argument("--stop-after", type=int, metavar="EPOCHS", help="end this run after EPOCHS epochs (resume later)")
    p.add_argument("--no-baseline", action="store_true", help="skip the TF-IDF baseline")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    own = p.add_argument_group("your own data (instead of a recipe)")
    own.add_argument("--model", help="a registered text model (tokens_to_labels or tokens_to_tokens)")
    own.add_argument("--train", dest="train_file", metavar="FILE", help=".csv, .tsv, .jsonl, .parquet or a folder")
    own.add_argument("--validation", dest="validation_file", metavar="FILE", help="else 10%% of train, seeded")
    own.add_argument("--test", dest="test_file", metavar="FILE")
    own.add_argument("--text", metavar="COL", help="the text column (default text)")
    own.add_argument("--labels", metavar="COL", help="the label column (default labels)")
    own.add_argument("--target", metavar="COL", help="seq2seq: the target column (default target)")
    own.add_argument("--label-separator", metavar="S", help="splits a string of labels (default |)")
    own.add_argument("--labels-file", metavar="FILE", help="every label, one a line (fixes their order)")
    own.add_argument("--task", choices=["multi_label", "single_label", "seq2seq"], help="default multi_label")
    own.add_argument("--tag", default="custom", help="the run's tag (names the weights file)")
    own.add_argument("--epochs", type=_positive_int, default=10)
    own.add_argument("--batch-size", type=_positive_int, default=32)
    own.add_argument("--lr", type=float, default=0.002)
    own.add_argument(
        "--patience", type=_positive_int, help="stop after this many epochs without a better validation score"
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "predict", parents=[common], help="run a pretrained model or a trained run on a text (or a word, for G2P)"
    )
    p.add_argument(
        "name",
        help="a pretrained name (bilstm_labelwise.wordnet), or a run folder or weights file written by attnzoo train",
    )
    p.add_argument("text", nargs="+")
    p.add_argument("--pretrained", metavar="TAG", help="the tag, when the name has none and the default is not wanted")
    p.add_argument("--top", type=_positive_int, default=5, help="how many labels to show (a positive number)")
    p.add_argument(
        "--above-threshold",
        action="store_true",
        help="show every label at or above the decision threshold, and only those",
    )
    p.add_argument(
        "--threshold",
        type=_probability,
        help="the multi-label decision threshold (default: the one stored with the weights, tuned on validation)",
    )
    p.add_argument("--beam", type=_positive_int, default=1, help="G2P: beam size (1 = greedy)")
    p.add_argument("--attention", metavar="PNG", help="draw the attention map into this file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --attention file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("evaluate", parents=[common], help="score a trained model on a data file")
    p.add_argument("model", help="a run folder or weights file from attnzoo train (or a pretrained name)")
    p.add_argument("file", help="a .csv, .tsv, .jsonl or .parquet file (or folder) with the training columns")
    p.add_argument("--text", metavar="COL", help="override the text column")
    p.add_argument("--labels", metavar="COL", help="override the label column")
    p.add_argument("--target", metavar="COL", help="override the seq2seq target column")
    p.add_argument("--label-separator", metavar="S")
    p.add_argument("--threshold", type=_probability, help="multi-label threshold (default: tuned on validation)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("verify", parents=[common], help="check every weights file (bundled or cached) against its card")
    p.add_argument("patterns", nargs="*", metavar="PATTERN")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("download", parents=[common], help="fetch pretrained weights into the cache (for offline use)")
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME[.TAG]|hf-hub:ORG/REPO",
        help="a model (every tag), one tag, or a saved folder on the Hub",
    )
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("cache", parents=[common], help="show or empty the weights cache")
    p.add_argument("action", choices=["list", "path", "clear"])
    p.add_argument("pattern", nargs="?", help="fnmatch pattern over name, source or sha256 (list, clear)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser(
        "convert-checkpoint",
        parents=[common],
        help="convert a CAML, LAAT, PLM-ICD or medical-coding checkpoint into safetensors",
    )
    p.add_argument("file", help="the reference's .pth, .bin or .safetensors file")
    p.add_argument("--from", dest="source", required=True, choices=["caml", "laat", "plm-icd", "medical-coding"])
    p.add_argument(
        "--model",
        required=True,
        help="the attnzoo model (conv_caml, caml, bilstm_laat, laat, bilstm_joint_laat, joint_laat)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config the shapes do not say (split_size=...)")
    p.add_argument("-o", "--output", required=True, help="the .safetensors file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.set_defaults(func=cmd_convert_checkpoint)

    p = sub.add_parser(
        "convert-keras", parents=[common], help="convert a whole Keras model, or one layer's weights, to attnzoo"
    )
    p.add_argument("file", help="a .keras, a legacy .h5 or a config.json (whole model); a .weights.h5 with --model")
    p.add_argument(
        "--model", help="one attention layer's weights into this attnzoo layer (keras_dot, keras_mha, lwan, ...)"
    )
    p.add_argument("--layer", help="with --model: the Keras layer (group name or layer name) when the file has several")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="with --model: config of the attnzoo layer")
    p.add_argument("--weights", help="the weights file of a config.json (default: the .weights.h5 beside it)")
    p.add_argument("--check", action="store_true", help="run Keras beside the result on padded inputs first")
    p.add_argument("--json", action="store_true", help="the conversion report as JSON")
    p.add_argument("-o", "--output", required=True, help="a folder (whole model) or a .safetensors file (--model)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(func=cmd_convert_keras)

    return parser


MAX_MESSAGE = 600  # characters of one error line; the rest is behind --debug


def one_line(message: object, limit: int = MAX_MESSAGE) -> str:
    """A message as one line of at most ``limit`` characters (listings joined with '; ')."""
    lines = [" ".join(line.split()) for line in str(message).splitlines()]
    text = "; ".join(line for line in lines if line)
    if len(text) > limit:
        text = text[: limit - 45].rstrip() + " … (run again with --debug for all of it)"
    return text


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = one_line(message)
    print(text if text.startswith("attnzoo:") else f"attnzoo: warning: {text}", file=sys.stderr)


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``attnzoo list | head -1``): not an error, and no noise at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:  # started with stdout closed (`attnzoo list >&-`): run, and say where output went
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        if sys.stderr is not None:
            print("attnzoo: standard output is closed; what this command prints is discarded", file=sys.stderr)
    debug = "--debug" in argv
    if not debug:
        import warnings

        warnings.showwarning = _one_line_warning
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # key=value pairs may come after options (`convert-keras F --model M num_heads=2`)
        if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        elif extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `attnzoo --help`)")
        if getattr(args, "no_plugins", False):
            os.environ["ATTNZOO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        if args.command is None:
            parser.print_help()
            return USAGE_ERROR
        code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except UsageError as e:
        if debug:
            raise
        print(f"attnzoo: usage error: {one_line(e)}", file=sys.stderr)
        return USAGE_ERROR
    except (AttnzooError, ValueError, OSError) as e:
        if debug:
            raise
        print(f"attnzoo: error: {one_line(e)}", file=sys.stderr)
        return FAILURE
    except KeyboardInterrupt:
        print("attnzoo: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug of ours: still one line, and how to see more
        if debug:
            raise
        print(
            f"attnzoo: internal error: {type(e).__name__}: {one_line(e, 300)} (run again with --debug for the "
            f"traceback)",
            file=sys.stderr,
        )
        return FAILURE


if __name__ == "__main__":
    sys.exit(main())
