"""The training loop: ``attnzoo train RECIPE.yaml [key=value ...]`` once the recipe is read (recipe.py).

The trainer sizes the model for the task, trains with AdamW and a warm-up-then-cosine schedule, shows a
progress bar on a terminal (a line per epoch otherwise), evaluates on the validation split every epoch,
keeps the best epoch, and writes a resumable checkpoint after each epoch (``--resume`` continues from
it: same data order, same random state). At the end publish.py scores and writes the model that ships.

Under ``torchrun --nproc_per_node=N`` it trains with DistributedDataParallel (distributed.py: each
process on its own GPU with NCCL, or on the CPU with gloo): each rank reads its share of the rows, trains
on the ones of each step it holds, and DDP combines their gradients, so the optimisation is the same as
one process with ``batch_size`` (up to summation order; shares.py); validation and test are scored by
every rank on its rows, in passes no larger than its share of a training pass, and their counts added;
rank 0 writes. ``train.precision`` and ``train.accumulate`` are steps.py's.

``train.device`` (``auto``: this process's GPU when there is one, else the CPU) places the model and its
batches; the weights are always written from CPU tensors. ``train.time_budget_min`` fits the number of epochs
to a time budget: 20 training steps are timed first, and ``epochs`` becomes the most that fit (never
more than the recipe's); the report and the card say how many ran.

Checkpoints hold no pickle: tensors (model, optimizer state, random state) in safetensors, the rest in
JSON.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnzoo.core import create, model_info
from attnzoo.errors import ConfigError, extra_import_message
from attnzoo.io.weights import write_weights
from attnzoo.train.checkpoint import load_checkpoint, read_record, save_checkpoint
from attnzoo.train.distributed import Setup, all_gather_objects, all_sum, barrier, process_group
from attnzoo.train.lora import check_lora, lora_port
from attnzoo.train.metrics import better
from attnzoo.train.port import build_port_task, check_model_path, fit_port, is_port, load_port
from attnzoo.train.publish import finish, threshold_setting, weights_name
from attnzoo.train.recipe import check_tag, checked_numbers
from attnzoo.train.run import RunSetup, RunState
from attnzoo.train.steps import Stepper, check_precision
from attnzoo.train.tasks import build_task

__all__ = ["train", "model_sizes", "check_label_memory"]


def _restore_schedule(scheduler, step: int) -> None:
    """Put a LambdaLR at ``step`` optimizer steps, as if it had stepped that often (no warning about
    stepping before the optimizer: the optimizer's own state is restored separately)."""
    scheduler.last_epoch = step
    groups = scheduler.optimizer.param_groups
    for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base * factor(step)


def _running_mean(
    mean: dict[str, torch.Tensor] | None, current: dict[str, torch.Tensor], count: int
) -> dict[str, torch.Tensor]:
    """The mean of ``count`` state dicts, updated with ``current``: ``m += (w - m) / (count + 1)`` for
    floating tensors; other tensors (counters) are taken from ``current``."""
    if mean is None or count == 0:
        return {k: v.detach().clone() for k, v in current.items()}
    for key, value in current.items():
        if value.is_floating_point():
            mean[key] += (value.detach() - mean[key]) / (count + 1)
        else:
            mean[key] = value.detach().clone()
    return mean


# -- training ----------------------------------------------------------------------------------------------
def _progress(total: int, enabled: bool, description: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with timm's dependencies
        return None
    # on a terminal only: piped into a log, a bar is a flood of carriage returns; the epoch line says it all
    return tqdm(
        total=total,
        disable=not (enabled and sys.stderr.isatty()),
        desc=description,
        mininterval=2.0,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )


def _epochs_within(budget_min: float, run: RunState, epochs: int) -> int:
    """How many epochs fit in ``budget_min`` minutes, from 20 timed training steps (after 3 warm-up steps);
    the weights and optimizer state are restored afterwards, so the measurement leaves no trace. Rank 0's
    measure decides for every rank."""
    model, optimizer, device = run.model, run.optimizer, run.setup.device
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = optimizer.state_dict()
    saved_opt = {
        "state": {
            i: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in e.items()}
            for i, e in saved_opt["state"].items()
        },
        "param_groups": saved_opt["param_groups"],
    }
    generator = torch.Generator().manual_seed(12345)
    accumulate = run.setup.settings.get("accumulate") or 1
    steps = run.task.steps(run.setup.settings["batch_size"], accumulate=accumulate, generator=generator)
    stepper = Stepper(
        run.task, model, optimizer, device=device, precision=run.setup.settings.get("precision") or "fp32"
    )
    model.train()
    elapsed = 0.0
    for n, passes in zip(range(23), steps, strict=False):
        if n == 3:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        stepper.step(passes)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = (time.perf_counter() - start) / 20
    model.load_state_dict(saved_model)
    optimizer.load_state_dict(saved_opt)
    per_epoch = elapsed * run.steps_per_epoch * 1.25 + 5  # evaluation and checkpoint each epoch
    return all_gather_objects(max(1, min(epochs, int(budget_min * 60 // per_epoch))))[0]


def model_sizes(model_name: str, sizes: dict[str, int]) -> dict[str, int]:
    """The task's sizes under the model's own parameter names: a model that counts ``num_classes`` gets
    the label count as that (and the other way round)."""
    from attnzoo.core.config import factory_parameters
    from attnzoo.core.create import resolve_factory

    spec = model_info(model_name)
    if spec.convention not in ("", "tokens_to_labels", "tokens_to_tokens"):
        raise ConfigError(
            f"{model_name} is called as {spec.convention!r}; the trainer trains text models "
            f"(tokens_to_labels: attnzoo list shows them with their convention) and G2P-style "
            f"models (tokens_to_tokens)"
        )
    params, _, _ = factory_parameters(resolve_factory(spec))
    swap = {"num_labels": "num_classes", "num_classes": "num_labels"}
    return {swap[k] if k not in params and swap.get(k) in params else k: v for k, v in sizes.items()}


def _have_sklearn(verbose: bool) -> bool:
    """The TF-IDF baseline needs scikit-learn (the train extra); without it (or with one that fails to import)
    the baseline is skipped, said once, with extra_import_message's reason."""
    try:
        import sklearn  # noqa: F401
    except Exception as e:
        if verbose:
            what = "baseline skipped: the TF-IDF baseline needs scikit-learn"
            print(extra_import_message(what, "train", e, "sklearn"), flush=True)
        return False
    return True


def _stop_early(state: dict[str, Any], patience: int, epochs: int) -> bool:
    """Every rank decides alike: the validation scores are every rank's counts added."""
    return state["epoch"] < epochs and state["epoch"] - (state["best_epoch"] or 0) >= patience


def _check_run_folder(output: Path, resume: bool, overwrite: bool) -> None:
    """A run folder that holds a run is continued (--resume) or replaced (--overwrite), never silently; a
    folder that holds anything else the trainer would write over (someone's weights) is not a run folder."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} exists and is not a folder; a run is a folder")
    written = (
        "checkpoint",
        "config.yaml",
        "report.json",
        "model.safetensors",
        "best.safetensors",
        "average.safetensors",
    )
    held = [name for name in written if (output / name).exists()]
    if held and not (output / "report.json").exists() and not (output / "checkpoint").is_dir() and not overwrite:
        raise ConfigError(
            f"{output} holds {', '.join(held)} but no run of attnzoo train (no report.json or checkpoint); "
            f"training would write over them: choose another --output, or pass --overwrite if they may go"
        )
    if held and not resume and not overwrite:
        raise ConfigError(
            f"{output} already holds a run ({', '.join(held)}); pass --resume to continue it, "
            f"--overwrite to start again in it, or --output for a new folder"
        )


def train(
    recipe: dict[str, Any],
    *,
    output: str | Path | None = None,
    resume: bool = False,
    export: str | Path | None = None,
    baseline: bool = True,
    quiet: bool = False,
    stop_after: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train a recipe; returns the final report (also written to ``OUTPUT/report.json``).

    ``stop_after`` ends this run after that many epochs (the schedule still spans the recipe's
    epochs); ``resume=True`` continues from the checkpoint in ``output``. The steps: set up the run,
    build the task and model, the learning-rate schedule, restore a checkpoint, the epochs, and (rank 0)
    the final scoring and the files. A process group the run made (torchrun) is destroyed when it ends,
    by an error too.
    """
    _check_export(recipe, export)
    check_model_path(recipe["model"])
    settings = checked_numbers(recipe["train"])
    settings["lora"] = check_lora(settings.get("lora"), port=is_port(recipe["model"]))
    with process_group(settings.get("device", "auto"), batch_size=settings["batch_size"]) as where:
        run = _start(recipe, settings, where, output, resume, overwrite, quiet)
        return _train(run, resume, export, baseline, stop_after)


def _train(
    run: RunState, resume: bool, export: str | Path | None, baseline: bool, stop_after: int | None
) -> dict[str, Any]:
    """The run once set up: the task and model, the schedule, a checkpoint restored, the epochs, the end."""
    recipe = run.setup.recipe
    if is_port(recipe["model"]):  # a converted keras-hub model's folder (port.py)
        run.port = load_port(recipe["model"])
        learnt = (getattr(run.port, "attnzoo_metadata", None) or {}).get("labels")  # a run folder trained again
        rank, world = run.setup.rank, run.setup.world
        run.task = build_port_task(recipe["task"], run.port.tokenizer, rank=rank, world=world, head_labels=learnt)
    else:
        run.task = build_task(recipe["task"], rank=run.setup.rank, world=run.setup.world)
    run.split_sizes = run.task.split_sizes()
    if not run.split_sizes["train"] or len(run.task.splits["train"]) == 0:
        raise ConfigError(f"{run.setup.world} processes for {run.split_sizes['train']} training rows: each needs one")
    baseline = baseline and _have_sklearn(run.setup.verbose)  # said at the start, not after the last epoch
    if baseline and run.setup.world > 1:
        run.setup.say("baseline skipped: the TF-IDF baseline fits every training row in one process; run it alone")
        baseline = False
    for note in getattr(run.task, "notes", []):
        run.setup.say(note)
    key, fixed = threshold_setting(run.task)  # a bad data.threshold fails now, not after training
    if fixed is None and hasattr(run.task, "threshold_problem") and run.split_sizes["val"]:
        problem = run.task.threshold_problem(run.task.splits["val"])
        if problem:  # said now too, so that a run can be stopped and given more validation data
            run.setup.say(f"note: {problem}; {key}=0.5 decides at a fixed 0.5 instead")
    check_label_memory(run.task, run.setup.settings["batch_size"])
    # scored in passes no larger than a training pass's share, so a rank's peak does not hold a scoring batch
    # that one process would take (task_kinds.Task.score_batch)
    run.task.score_batch = min(run.task.score_batch, run.setup.settings["batch_size"] // run.setup.world)
    _build_model(run)
    _schedule(run, resume)
    data = run.task.describe_data()
    if resume:
        _resume(run, data)
    run.state["data"] = data
    last = _run_epochs(run, stop_after)
    if last < run.epochs:
        run.setup.say(f"stopped after epoch {last} of {run.epochs}; continue with --resume")
        return {"stopped_after": last, "history": run.state["history"]} if run.setup.rank == 0 else {}
    return finish(run, export, baseline)  # every rank scores; rank 0 writes and reports


def _check_export(recipe: dict[str, Any], export: str | Path | None) -> None:
    """``export`` checked before any work: the run must not train and then find it cannot write there."""
    if export is None:
        return
    if is_port(recipe["model"]):
        raise ConfigError("--export writes a registered model's weights file; a port's run folder is the model itself")
    folder = Path(export)
    if not folder.is_dir():
        raise ConfigError(f"--export {folder}: not an existing folder; create it first, or export elsewhere")
    target = folder / weights_name(recipe)
    if target.exists() or target.is_symlink():
        raise ConfigError(
            f"--export {folder} already holds {target.name}, and export never replaces a file (--overwrite is "
            f"about the run folder); move that file away, or export into another folder"
        )


def _start(
    recipe: dict[str, Any],
    settings: dict[str, Any],
    where: Setup,
    output: str | Path | None,
    resume: bool,
    overwrite: bool,
    quiet: bool,
) -> RunState:
    """The run's setup: precision checked for the process's device (distributed.py), threads, seed and the
    run folder, all checked before any work; the state starts empty."""
    settings["precision"] = check_precision(settings.get("precision") or "fp32", where.device)
    world = where.world_size
    torch.set_num_threads(settings.get("threads") or max(1, (os.cpu_count() or 2) // world))
    seed = int(recipe.get("seed", 0))
    torch.manual_seed(seed)
    name = Path(recipe["model"]).name if is_port(recipe["model"]) else recipe["model"]
    folder = Path(output or recipe.get("output") or f"runs/{name}-{check_tag(recipe['tag'], 'recipe')}")
    if is_port(recipe["model"]) and folder.resolve() == Path(recipe["model"]).resolve():
        # --overwrite is about a run folder: here it would replace the port the run starts from, and the same
        # command run again would fine-tune the fine-tuned model
        raise ConfigError(
            f"--output {folder} is the --model port folder: the run would replace the port it starts from; "
            f"write the run into another folder (--output)"
        )
    if where.rank == 0:
        _check_run_folder(folder, resume, overwrite)
    verbose = where.rank == 0 and not quiet
    run_setup = RunSetup(recipe, settings, folder, where.rank, world, verbose, seed, where.device)
    return RunState(run_setup, time.perf_counter())


def check_label_memory(task: Any, batch_size: int) -> None:
    """Refuse, before the model is built, a label count whose tensors cannot fit in this machine's memory
    (a million labels would otherwise end in the allocator's out-of-memory error mid-run): the task's
    :meth:`label_tensors`, each against the memory available now. A lower bound: the model and its
    optimizer come on top."""
    from attnzoo.core.memory import available_bytes

    available = available_bytes()
    if available is None:
        return
    for what, need, advice in task.label_tensors(batch_size):
        if need > available:
            labels = len(getattr(task, "label_names", None) or getattr(task, "class_names", None) or [])
            raise ConfigError(
                f"{task.name}: {labels:,} labels do not fit in this machine's memory: {what} need "
                f"{need / 2**30:,.1f} GiB, and {available / 2**30:,.1f} GiB is available; {advice}, keep fewer "
                f"labels (data.labels_file lists the ones to keep; the most frequent usually carry the metrics), or "
                f"train on a machine with more memory"
            )


def _build_model(run: RunState) -> None:
    """The model sized for the task, on its device, and its optimizer; label smoothing checked."""

    settings, task = run.setup.settings, run.task
    lora = settings["lora"]
    if run.port is not None:
        run.model = fit_port(run.port, task, run.setup.recipe.get("config", {}), run.setup.say)
        if lora is not None:  # peft on the port's Hugging Face form
            run.model = lora_port(run.model, lora, causal=task.lower_is_better)
        run.model = run.model.to(run.setup.device)
    else:
        run.sizes = model_sizes(run.setup.recipe["model"], task.model_config())
        config = {**run.sizes, **run.setup.recipe.get("config", {})}
        run.model = create(run.setup.recipe["model"], config=config, device=run.setup.device)
    run.optimizer = torch.optim.AdamW(
        run.model.parameters(), lr=settings["lr"], weight_decay=settings.get("weight_decay") or 0.0
    )
    smoothing = settings.get("label_smoothing") or 0.0
    if smoothing and not task.takes_label_smoothing:
        raise ConfigError(
            f"train.label_smoothing applies to a softmax over classes (single-label and seq2seq tasks); "
            f"{task.name} trains with a per-label sigmoid: remove it"
        )
    run.smoothing = smoothing
    # several processes: DDP wraps the model, with this process's GPU (None on the CPU)
    ids = [run.setup.device.index] if run.setup.device.type == "cuda" else None
    ddp = torch.nn.parallel.DistributedDataParallel(run.model, device_ids=ids) if run.setup.world > 1 else None
    run.stepper = Stepper(
        task,
        run.model,
        run.optimizer,
        device=run.setup.device,
        precision=settings["precision"],
        clip=settings.get("clip"),
        smoothing=smoothing,
        ddp=ddp,
        world=run.setup.world,
    )


def _schedule(run: RunState, resume: bool) -> None:
    """How many epochs (the recipe's, what fits a time budget, or the checkpoint's), and the learning rate:
    linear warm-up, then cosine to 10 % of ``lr``."""
    settings = run.setup.settings
    epochs = settings["epochs"]
    step_rows = settings["batch_size"] * (settings.get("accumulate") or 1)  # rows an optimizer step takes
    run.steps_per_epoch = steps_per_epoch = max(1, run.split_sizes["train"] // step_rows)
    if settings.get("time_budget_min") and not resume:
        budget = settings["time_budget_min"]
        epochs = _epochs_within(budget, run, epochs)
        run.setup.say(f"{epochs} epochs fit in the time budget of {budget} min")
    elif resume and run.setup.checkpoint.is_dir():
        epochs = read_record(run.setup.checkpoint)[0]["epochs"]
    run.epochs = epochs
    warmup = settings.get("warmup_steps") or 0

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, epochs * steps_per_epoch - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    run.scheduler = torch.optim.lr_scheduler.LambdaLR(run.optimizer, lr_factor)
    run.state = {"epoch": 0, "best": None, "best_epoch": None, "history": [], "elapsed": 0.0, "epochs": epochs}


def _resume(run: RunState, data: str) -> None:
    """The last complete checkpoint's model, optimizer, random state, schedule step and best weights."""
    if not run.setup.checkpoint.is_dir():
        raise ConfigError(f"--resume: no checkpoint in {run.setup.checkpoint}")
    run.state, saved = load_checkpoint(run.setup.checkpoint, run.model, run.optimizer, data=data)
    run.average, run.best_state = saved.get("average"), saved.get("best")
    written = run.state.get("world_size", 1)
    if written != run.setup.world:
        run.setup.say(
            f"resuming a run of {written} process(es) on {run.setup.world}: the same steps (the order of the rows "
            f"does not depend on the number of processes), up to summation order"
        )
    if run.state.get("scaler"):
        run.stepper.scaler.load_state_dict(run.state["scaler"])
    if "best" in saved and run.setup.rank == 0:  # the best weights as of the checkpoint, whatever a killed run left
        write_weights(saved["best"], run.setup.best_path, overwrite=True, sidecar=True)
    # the scheduler's own step count (an epoch's batches are ceil(n / batch), not steps_per_epoch)
    _restore_schedule(run.scheduler, int(run.state.get("step", run.state["epoch"] * run.steps_per_epoch)))
    run.started -= run.state["elapsed"]


def _run_epochs(run: RunState, stop_after: int | None) -> int:
    """Train, validate and checkpoint epoch after epoch; returns the last epoch this run was to reach (the
    recipe's last one when it stopped early)."""
    last = run.epochs if stop_after is None else min(run.epochs, run.state["epoch"] + stop_after)
    patience = run.setup.settings.get("patience")  # early stopping: epochs without a better validation score
    for epoch in range(run.state["epoch"], last):
        loss = _train_epoch(run, epoch)
        _end_epoch(run, epoch, loss)
        barrier()
        if patience is not None and _stop_early(run.state, patience, run.epochs):
            run.setup.say(
                f"early stop: no better validation {run.task.main_metric} for {patience} epochs; the best is "
                f"epoch {run.state['best_epoch']}"
            )
            run.state["stopped_early"] = run.state["epoch"]
            return run.epochs  # what follows is the end of the run
    return last


def _train_epoch(run: RunState, epoch: int) -> float:
    """One pass over the training split, in the epoch's seeded order (this rank: the rows it holds of
    each step); the mean loss of the steps, over every rank."""
    run.model.train()
    settings = run.setup.settings
    generator = torch.Generator().manual_seed(run.setup.seed * 1000 + epoch)
    bar = _progress(run.steps_per_epoch, run.setup.verbose, f"epoch {epoch + 1}/{run.epochs}")
    total, count = 0.0, 0
    accumulate = settings.get("accumulate") or 1
    for passes in run.task.steps(settings["batch_size"], accumulate=accumulate, generator=generator):
        total, count = total + run.stepper.step(passes), count + 1
        run.scheduler.step()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{total / count:.4f}", refresh=False)
    if bar is not None:
        bar.close()
    return all_sum(torch.tensor(total, dtype=torch.float64)).item() / max(count, 1)


def _end_epoch(run: RunState, epoch: int, loss: float) -> None:
    """After an epoch, on every rank: the running average and validation (every rank's rows); rank 0
    writes the checkpoint and the best weights."""
    state, model = run.state, run.model
    average_last = run.setup.settings.get("average_last") or 0
    if average_last and epoch + 1 > run.epochs - average_last:
        averaged = state.get("averaged_epochs", 0)
        run.average = _running_mean(run.average, model.state_dict(), averaged)
        state["averaged_epochs"] = averaged + 1
    scores = run.task.validate(model, run.task.splits["val"])
    main = scores[run.task.main_metric]
    state["history"].append({"epoch": epoch + 1, "train_loss": loss, **scores})
    improved = better(run.task, main, state["best"])
    if improved:
        state["best"], state["best_epoch"] = main, epoch + 1
        run.best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    state["epoch"], state["step"] = epoch + 1, run.scheduler.last_epoch
    state["elapsed"] = time.perf_counter() - run.started
    state["world_size"] = run.setup.world
    if run.stepper.scaler.is_enabled():
        state["scaler"] = run.stepper.scaler.state_dict()
    if run.setup.rank == 0:
        best = run.best_state if improved else None
        save_checkpoint(run.setup.checkpoint, model, run.optimizer, state, best=best, average=run.average)
        if best is not None:  # after the checkpoint: a resume restores best_path from it
            write_weights(best, run.setup.best_path, overwrite=True, sidecar=True)
    run.setup.say(
        f"epoch {epoch + 1}/{run.epochs}: train loss {loss:.4f}, val "
        + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
        + f" ({state['elapsed'] / 60:.1f} min)"
    )
