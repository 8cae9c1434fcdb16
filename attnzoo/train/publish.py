"""The end of a training run: the model that ships, scored and written.

The best epoch (or the average of the last epochs, when it validates at least as well) in float16, its
multi-label decision threshold tuned on validation (or fixed by the recipe), scored on the test split and
on the fixed subset the tests re-evaluate; then the weights file with its metadata (config, vocabulary,
labels, metrics, data source, licence), the run folder that ``attnzoo.load`` reads, ``report.json`` and the
card's ``weights`` entry.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from attnzoo.core import model_info
from attnzoo.errors import ConfigError, ThresholdWarning
from attnzoo.io.folders import save
from attnzoo.io.weights import encode_metadata, write_weights
from attnzoo.train.metrics import better
from attnzoo.train.run import RunState

__all__ = ["finish", "weights_name", "threshold_setting", "float16_state", "card_metrics"]


def weights_name(recipe: dict[str, Any]) -> str:
    return f"{recipe['model']}-{recipe['tag']}.safetensors"


def finish(run: RunState, export: str | Path | None, baseline: bool) -> dict[str, Any]:
    """The shipped model (best epoch or average, in float16, threshold tuned on validation), scored on the
    test split and subset; the weights file, the run folder and report.json written. Every rank scores
    its rows (the counts are added); rank 0 writes and returns the report, the others {}."""
    from attnzoo.io.weights import read_weights

    task, model, recipe = run.task, run.model, run.setup.recipe
    if run.port is not None:
        return _finish_port(run, baseline)
    if run.average is not None and _judge_average(task, model, run.average, run.state, run.setup.verbose):
        run.best_state = run.average
        if run.setup.rank == 0:
            write_weights(run.average, run.setup.best_path, overwrite=True, sidecar=True)
    best = run.best_state if run.best_state is not None else read_weights(run.setup.best_path, sha256=None)[0]
    model.load_state_dict(best)
    # the weights ship in float16: tune and measure the model as it will be loaded
    half = float16_state(model)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in half.items()})
    notes = _decision_threshold(run)
    subset_size = int(recipe.get("check_subset", 2000))
    test, subset, metrics = card_metrics(task, model, subset_size)
    if run.setup.rank != 0:
        return {}
    report = _report(run, test, subset, min(subset_size, run.split_sizes["test"]), baseline)
    report["warnings"] = notes
    extra = {
        **task.metadata(),
        "metrics": metrics,
        "dataset": task.dataset,
        "license": task.license,
        "recipe": recipe,
        "check_subset": subset_size,
        "seed": run.setup.seed,
        "torch_version": torch.__version__,
        "ran": report["ran"],
    }
    target = _write_weights(run, half, extra, export, report)
    # the run folder itself loads: attnzoo.load(output), attnzoo predict OUTPUT, attnzoo evaluate OUTPUT
    model.attnzoo_metadata = extra
    save(model.cpu(), run.setup.output, overwrite=True)
    report["card_entry"] = _card_entry(run, report, metrics, target)
    run.setup.output.mkdir(parents=True, exist_ok=True)
    (run.setup.output / "report.json").write_text(json.dumps(report, indent=1))
    shown = report["subset"]["size"]  # what the subset really holds: the test split may be smaller
    whole = " (the whole test split)" if shown == len(task.splits["test"]) else ""
    run.setup.say(
        f"test: {test or 'no test split'}\nsubset[{shown}]{whole}: {subset}\nbaseline: {report['baseline']}\n"
        f"weights: {target} sha256 {report['sha256']} ({report['train_time_s'] / 60:.1f} min)\n"
        f"run folder: {run.setup.output} (attnzoo.load, attnzoo predict and attnzoo evaluate take it)"
    )
    return report


def _finish_port(run: RunState, baseline: bool) -> dict[str, Any]:
    """A fine-tuned port's end (port.py): the best epoch (or the kept average), scored on the test split,
    saved as the run folder in float32 with its tokenizer and the run's record in its metadata."""
    from attnzoo.io.weights import read_weights

    setup, task, model = run.setup, run.task, run.model
    if run.average is not None and _judge_average(task, model, run.average, run.state, setup.verbose):
        run.best_state = run.average
    model.load_state_dict(
        run.best_state if run.best_state is not None else read_weights(setup.best_path, sha256=None)[0]
    )
    test = task.evaluate(model, task.splits["test"]) if run.split_sizes["test"] else {}
    if setup.rank != 0:
        return {}
    report = _report(run, test, {}, 0, baseline)
    if setup.settings.get("lora") is not None:  # a Hugging Face base and its adapters (lora.py)
        from attnzoo.train.lora import save_lora

        save_lora(model.cpu(), setup.output, setup.settings["lora"]["save"])
        (setup.output / "report.json").write_text(json.dumps(report, indent=1))
        setup.say(
            f"test: {test or 'no test split'}\nrun folder: {setup.output} (base/ and {setup.settings['lora']['save']}/)"
        )
        return report
    model.attnzoo_metadata = {
        **task.metadata(),
        "metrics": {k: round(v, 4) for k, v in test.items()},
        "dataset": task.dataset,
        "license": task.license,
        "recipe": setup.recipe,
        "seed": setup.seed,
        "ran": report["ran"],
    }
    save(model.cpu(), setup.output, overwrite=True)
    (setup.output / "report.json").write_text(json.dumps(report, indent=1))
    setup.say(
        f"test: {test or 'no test split'}\nrun folder: {setup.output} (attnzoo.load takes it, with its tokenizer)"
    )
    return report


def ran(run: RunState) -> dict[str, Any]:
    """What ran, for the run's record: precision, accumulation, processes, device and versions."""
    from attnzoo.version import __version__

    device = run.setup.device
    return {
        "precision": run.setup.settings.get("precision") or "fp32",
        "accumulate": run.setup.settings.get("accumulate") or 1,
        "world_size": run.setup.world,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "attnzoo": __version__,
    }


def threshold_setting(task: Any) -> tuple[str, float | None]:
    """The recipe key of a fixed decision threshold (``data.threshold`` or ``task.threshold``) and its
    value (None: tuned on validation); a ConfigError for anything but a probability, or for a task that
    decides without a threshold."""
    key = ("data." if task.config.get("name") == "files" else "task.") + "threshold"
    fixed = task.config.get("threshold")
    if fixed is None:
        return key, None
    if isinstance(fixed, bool) or not isinstance(fixed, (int, float)) or not 0 < fixed < 1:
        raise ConfigError(f"{key} must be a probability between 0 and 1, got {fixed!r}")
    if not hasattr(task, "tune_threshold"):
        raise ConfigError(f"{key} is the multi-label decision threshold; the {task.name} task has none")
    return key, float(fixed)


def _decision_threshold(run: RunState) -> list[str]:
    """Set a multi-label task's decision threshold: the run's fixed one (``data.threshold``), else the best
    on validation; a validation split too small to tune on is a warning (returned, said and warned)."""
    task, model = run.task, run.model
    key, fixed = threshold_setting(task)
    if not hasattr(task, "tune_threshold"):
        return []
    if fixed is not None:
        task.threshold = fixed
        return []
    val = task.splits["val"]
    if not run.split_sizes["val"]:
        task.threshold = 0.5
        note = f"there is no validation split to tune the decision threshold on: it stays at 0.5 (set {key})"
    elif (problem := task.threshold_problem(val)) is not None:
        task.tune_threshold(model, val)  # on validation only
        note = (
            f"{problem}: the tuned threshold {task.threshold:.2f} may not carry over to new data. To decide at "
            f"the fixed 0.5 instead, train with {key}=0.5, or predict and evaluate with --threshold 0.5 "
            f"(threshold=0.5 from Python)"
        )
    else:
        task.tune_threshold(model, val)
        return []
    # said once, as a warning: the command line prints it as "attnzoo: warning: ...", Python as warnings do
    if run.setup.rank == 0:
        warnings.warn(note, ThresholdWarning, stacklevel=4)
    return [note]


def _report(run: RunState, test: dict, subset: dict, subset_size: int, baseline: bool) -> dict[str, Any]:
    task, state = run.task, run.state
    return {
        "model": run.setup.recipe["model"],
        "tag": run.setup.recipe["tag"],
        "task": task.name,
        "world_size": run.setup.world,
        "split_sizes": run.split_sizes,
        "epochs": run.epochs,
        "best_epoch": state["best_epoch"],
        "stopped_early": state.get("stopped_early"),
        "average": state.get("average"),
        "history": state["history"],
        "device": str(run.setup.device),
        "test": test,
        "subset": {"size": subset_size, **subset},
        "train_time_s": time.perf_counter() - run.started,
        "baseline": task.baseline() if baseline and test else None,
        "data": state["data"],  # described (files hashed) once, at the start of the run
        "ran": ran(run),
    }


def _write_weights(
    run: RunState, half: dict[str, torch.Tensor], extra: dict[str, Any], export: str | Path | None, report: dict
) -> Path:
    """The float16 weights file with its metadata, in the run folder or (never replacing one) in ``export``."""

    recipe = run.setup.recipe
    config = {**run.sizes, **recipe.get("config", {})}
    spec = model_info(recipe["model"])
    metadata = encode_metadata(recipe["model"], spec.factory_name, config, extra)
    file_name = weights_name(recipe)
    target = Path(export) / file_name if export else run.setup.output / file_name
    report["weights"] = str(target)
    report["sha256"] = write_weights(half, target, metadata=metadata, overwrite=not export, sidecar=not export)
    return target


def _card_entry(run: RunState, report: dict[str, Any], metrics: dict[str, Any], target: Path) -> dict[str, Any]:
    """The card's ``weights`` entry for this run, ready to paste into registry/MODEL.yaml."""
    task, recipe = run.task, run.setup.recipe
    return {
        recipe["tag"]: {
            "file": target.name,
            "sha256": report["sha256"],
            "num_params": sum(p.numel() for p in run.model.parameters()),
            "file_size": target.stat().st_size,
            "torch_version": torch.__version__,
            "config": {**run.sizes, **recipe.get("config", {})},
            "metrics": metrics,
            "dataset": task.dataset,
            "license": task.license,
            "recipe": f"attnzoo/train/recipes/{recipe.get('recipe_file', 'flags')}",
            "seed": run.setup.seed,
            "data": report["data"],
            "train_time": _describe_time(report["train_time_s"], run.epochs, run.setup.device),
            "splits": run.split_sizes,
            "baseline": {
                "model": "TF-IDF word 1-2 grams + linear SVM",
                **{k: round(v, 4) for k, v in (report["baseline"] or {}).items()},
            },
        }
    }


def float16_state(model) -> dict[str, torch.Tensor]:
    """The state dict as shipped weights hold it: floating tensors in float16, every tensor on the CPU."""
    return {k: v.detach().cpu().half() if v.is_floating_point() else v.cpu() for k, v in model.state_dict().items()}


def card_metrics(task, model, subset_size: int) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Score a finished model for its card: (the test split's metrics with the task's extras, the fixed
    subset's that the tests re-evaluate, both rounded to 4 places with the subset's as ``subset_*``).
    All empty when the task has no test split (on any rank)."""
    if not task.split_sizes()["test"]:
        return {}, {}, {}
    test = {**task.evaluate(model, task.splits["test"]), **task.extra_metrics(model, task.splits["test"])}
    subset = task.evaluate(model, task.subset(subset_size))
    metrics = {**{k: round(v, 4) for k, v in test.items()}, **{f"subset_{k}": round(v, 4) for k, v in subset.items()}}
    return test, subset, metrics


def _judge_average(task, model, average: dict[str, torch.Tensor], state: dict[str, Any], verbose: bool) -> bool:
    """Checkpoint averaging: validate the mean weights of the last epochs; whether to keep them as the model
    (they score at least as well as the best single epoch; recorded in ``state["average"]``)."""
    model.load_state_dict(average)
    scores = task.validate(model, task.splits["val"])
    kept = better(task, scores[task.main_metric], state["best"], ties=True)
    last = state["epoch"]
    state["average"] = {"epochs": [last - state["averaged_epochs"] + 1, last], "val": scores, "kept": kept}
    if verbose:
        first = state["average"]["epochs"][0]
        best = "none" if state["best"] is None else f"{state['best']:.4f} (epoch {state['best_epoch']})"
        print(
            f"average of epochs {first}-{last}: val {task.main_metric} {scores[task.main_metric]:.4f}, the best "
            f"single epoch {best}: " + ("the average is kept" if kept else "the best epoch is kept"),
            flush=True,
        )
    return kept


def _describe_time(seconds: float, epochs: int, device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    return f"{seconds / 60:.0f} min on {where} ({epochs} epochs)"
