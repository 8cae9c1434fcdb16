"""One trainer for every recipe: ``attnzoo train RECIPE.yaml [key=value ...]``.

A recipe (omegaconf YAML, see ``recipes/``) names the registered model, its tag, the task and the
training settings. The trainer shows a progress bar, evaluates on the validation split every epoch,
keeps the best epoch, and writes a resumable checkpoint after each epoch (``--resume`` continues from
it: same data order, same random state). At the end it scores the best model on the test split and on
the fixed subset that tests re-evaluate, trains the TF-IDF + linear baseline on the same split, and
exports float16 weights whose safetensors metadata carries config, vocabulary, labels, metrics, data
source and licence.

Under ``torchrun --nproc_per_node=N`` it trains with DistributedDataParallel (gloo on the CPU): every
batch is cut into N equal parts, one per rank, and DDP averages their gradients, so the optimisation
is the same as one process with ``batch_size`` (up to summation order); rank 0 evaluates and writes.

``train.device`` (``auto``: CUDA when there is one, else the CPU) places the model and its batches;
the weights are always written from CPU tensors. ``train.time_budget_min`` fits the number of epochs
to a time budget: 20 training steps are timed first, and ``epochs`` becomes the most that fit (never
more than the recipe's); the report and the card say how many ran.

Checkpoints hold no pickle: tensors (model, optimizer state, random state) in safetensors, the rest in
JSON.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import attnzoo
from attnzoo.core.config import check_yaml_file
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError, ThresholdWarning
from attnzoo.io.weights import encode_metadata, write_weights
from attnzoo.layers.modes import kept_modes
from attnzoo.train.checkpoint import load_checkpoint, read_record, save_checkpoint
from attnzoo.train.tasks import build_task, task_of

__all__ = [
    "train",
    "load_recipe",
    "builtin_recipes",
    "complete_recipe",
    "evaluate_file",
    "evaluate_pretrained",
    "ThresholdWarning",
]


RECIPES = Path(__file__).parent / "recipes"


def builtin_recipes() -> dict[str, Path]:
    """The recipes that ship with attnzoo, by name (the file name without .yaml)."""
    return {p.stem: p for p in sorted(RECIPES.glob("*.yaml"))}


def recipe_summary(path: Path) -> str:
    """The first comment line of a recipe: what it trains."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def check_overrides(overrides: list[str]) -> None:
    """Every override is ``section.key=value`` with a key (``=5`` or ``train.=3`` is a mistake, said so)."""
    import re

    for pair in overrides:
        key = pair.split("=", 1)[0]
        if "=" not in pair or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
            raise ConfigError(f"override {pair!r}: expected section.key=value, such as train.epochs=5")


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """A recipe from a file, or a built-in one by name (``tiny_wordnet`` or ``tiny_wordnet.yaml``)."""
    from omegaconf import DictConfig, OmegaConf

    path = Path(path)
    if not path.is_file():
        name = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.name
        builtin = builtin_recipes().get(name)
        if builtin is None or path.parent != Path("."):
            raise ConfigError(
                f"recipe {str(path)!r} not found: not a file, and not a built-in recipe "
                f"({', '.join(builtin_recipes())}; attnzoo train --list)"
            )
        path = builtin
    check_overrides(overrides or [])
    check_yaml_file(path, f"recipe {path.name}")
    try:
        loaded = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001 - YAML syntax, a python tag, bad UTF-8: all the file's fault
        raise ConfigError(
            f"recipe {path.name}: not a YAML mapping attnzoo can read ({' '.join(str(e).split())[:200]})"
        ) from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"recipe {path.name}: expected a mapping of sections (model, data or task, config, train)")
    try:
        recipe = OmegaConf.merge(loaded, OmegaConf.from_dotlist(list(overrides or [])))
        container = OmegaConf.to_container(recipe, resolve=True)
    except Exception as e:  # noqa: BLE001 - omegaconf's own errors (an interpolation, a type clash)
        raise ConfigError(f"recipe {path.name}: {' '.join(str(e).split())[:300]}") from None
    data = complete_recipe(container, where=f"recipe {path.name}")
    data["recipe_file"] = path.name
    return data


def complete_recipe(data: Any, where: str = "recipe") -> dict[str, Any]:
    """Check a recipe's sections; a ``data:`` section (the user's files) becomes the task ``files``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of sections (model, data or task, config, train)")
    if "data" in data and "task" in data:
        raise ConfigError(
            f"{where}: give either a data section (your files) or a task section (a bundled data set), not both"
        )
    if "data" in data:
        if not isinstance(data["data"], dict):
            raise ConfigError(f"{where}: the data section must be a mapping (train:, text:, labels:, ...)")
        data["task"] = {"name": "files", **data.pop("data")}
        data.setdefault("tag", "custom")
    data.setdefault("train", {})
    for key in ("model", "tag", "task"):
        if key not in data:
            raise ConfigError(f"{where}: missing section {key!r}" + (" (or data)" if key == "task" else ""))
    check_recipe_keys(data, where)
    data["train"] = {**TRAIN_DEFAULTS, **data["train"]}
    return data


# A recipe's keys, section by section (the schema every recipe and key=value override is checked against;
# a typo is an error naming the closest key, never silently a default). docs/training.md lists them.
RECIPE_KEYS = frozenset(["model", "tag", "seed", "task", "config", "train", "check_subset", "output", "recipe_file"])
TRAIN_DEFAULTS = {"epochs": 10, "batch_size": 32, "lr": 0.002}  # what `attnzoo train --model ...` uses too
TRAIN_KEYS = frozenset(["epochs", "batch_size", "lr", "weight_decay", "clip", "warmup_steps", "threads", "device"])
TRAIN_KEYS |= frozenset(["time_budget_min", "patience", "average_last", "label_smoothing"])
TASK_KEYS = frozenset(["name", "max_len", "limit", "split_seed", "fractions", "vocab", "num_labels"])
TASK_KEYS |= frozenset(["beam_size", "length_penalty", "threshold"])
DATA_KEYS = frozenset(["name", "task", "train", "validation", "test", "text", "labels", "target", "label_separator"])
DATA_KEYS |= frozenset(["labels_file", "validation_fraction", "split_seed", "max_len", "vocab", "limit"])
DATA_KEYS |= frozenset(["beam_size", "length_penalty", "evaluate_file", "threshold"])
VOCAB_KEYS = frozenset(["min_freq", "max_size"])


def check_recipe_keys(data: dict[str, Any], where: str) -> None:
    """Every key of a (completed) recipe is one the trainer reads; an unknown one is a ``ConfigError``
    naming it and the closest valid keys."""
    from attnzoo.errors import close_matches

    def check(section: Any, allowed: frozenset[str], prefix: str) -> None:
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: {prefix.rstrip('.') or 'the recipe'} must be a mapping of key: value")
        for key in section:
            if key not in allowed:
                hint = close_matches(str(key), allowed)
                did_you_mean = f"did you mean {', '.join(prefix + h for h in hint)}? " if hint else ""
                raise ConfigError(
                    f"{where}: unknown key {prefix}{key}; {did_you_mean}valid keys: {', '.join(sorted(allowed))}"
                )

    check(data, RECIPE_KEYS, "")
    check(data["train"], TRAIN_KEYS, "train.")
    files = data["task"].get("name") == "files" if isinstance(data["task"], dict) else False
    check(data["task"], DATA_KEYS if files else TASK_KEYS, "data." if files else "task.")
    if isinstance(data["task"].get("vocab"), dict):
        check(data["task"]["vocab"], VOCAB_KEYS, ("data." if files else "task.") + "vocab.")
    if "config" in data and not isinstance(data["config"], dict):
        raise ConfigError(f"{where}: config must be a mapping of the model's config keys")


# -- distributed -------------------------------------------------------------------------------------------
def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if world > 1 else 0
    return rank, world


def _barrier(world: int) -> None:
    if world > 1:
        torch.distributed.barrier()


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
    return tqdm(
        total=total,
        disable=not enabled,
        desc=description,
        mininterval=2.0,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )


def _device(setting: str | None) -> torch.device:
    if setting in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(setting)
    except RuntimeError:
        raise ConfigError(f"train.device must be auto, cpu, cuda or cuda:N, got {setting!r}") from None


def _on(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _epochs_within(budget_min: float, task, model, optimizer, batch_size: int, epochs: int, device) -> int:
    """How many epochs fit in ``budget_min`` minutes, from 20 timed training steps (after 3 warm-up steps);
    the weights and optimizer state are restored afterwards, so the measurement leaves no trace."""
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
    batches = task.batches("train", batch_size, generator=generator)
    model.train()
    elapsed = 0.0
    for n, batch in zip(range(23), batches, strict=False):
        if n == 3:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        loss = task.loss(model, _on(batch, device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = (time.perf_counter() - start) / 20
    model.load_state_dict(saved_model)
    optimizer.load_state_dict(saved_opt)
    steps = max(1, len(task.splits["train"]) // batch_size)
    per_epoch = elapsed * steps * 1.25 + 5  # evaluation and checkpoint each epoch
    return max(1, min(epochs, int(budget_min * 60 // per_epoch)))


def model_sizes(model_name: str, sizes: dict[str, int]) -> dict[str, int]:
    """The task's sizes under the model's own parameter names: a model that counts ``num_classes`` gets
    the label count as that (and the other way round)."""
    import attnzoo
    from attnzoo.core.config import factory_parameters
    from attnzoo.core.create import resolve_factory

    spec = attnzoo.model_info(model_name)
    if spec.convention not in ("", "tokens_to_labels", "tokens_to_tokens"):
        raise ConfigError(
            f"{model_name} is called as {spec.convention!r}; the trainer trains text models "
            f"(tokens_to_labels: attnzoo list shows them with their convention) and G2P-style "
            f"models (tokens_to_tokens)"
        )
    params, _, _ = factory_parameters(resolve_factory(spec))
    swap = {"num_labels": "num_classes", "num_classes": "num_labels"}
    return {swap[k] if k not in params and swap.get(k) in params else k: v for k, v in sizes.items()}


# train.KEY: (int or float, the lowest value, whether the lowest itself is allowed, whether null is allowed
# (null: the default, or off), a bound the value must stay below)
_NUMBERS: dict[str, tuple[type, float, bool, bool, float]] = {
    "epochs": (int, 1, True, False, math.inf),
    "batch_size": (int, 1, True, False, math.inf),
    "lr": (float, 0.0, True, False, math.inf),  # 0 is allowed: a frozen run (tests use it)
    "weight_decay": (float, 0.0, True, True, math.inf),
    "clip": (float, 0.0, True, True, math.inf),  # 0 or null: no clipping
    "warmup_steps": (int, 0, True, True, math.inf),
    "threads": (int, 1, True, True, math.inf),
    "time_budget_min": (float, 0.0, False, True, math.inf),
    "patience": (int, 1, True, True, math.inf),
    "average_last": (int, 0, True, True, math.inf),  # 0 or null: off
    "label_smoothing": (float, 0.0, True, True, 1.0),  # 0 or null: off
}


def _checked_numbers(settings: dict[str, Any]) -> dict[str, Any]:
    """The train section with its numeric keys as numbers; a value that is not one (``train.lr=abc``, a
    negative batch size, 2.5 epochs) is a ``ConfigError`` naming the key and what it takes."""
    out = dict(settings)
    for key, (kind, lowest, inclusive, nullable, below) in _NUMBERS.items():
        if key not in out or (out[key] is None and nullable):
            continue
        value = out[key]
        wanted = (
            f"train.{key} must be {'a whole number' if kind is int else 'a number'} "
            f"{'>=' if inclusive else '>'} {lowest:g}{f' and < {below:g}' if below < math.inf else ''}"
            f"{' (or null)' if nullable else ''}, got {value!r}"
        )
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            raise ConfigError(wanted) from None
        if not math.isfinite(number) or (kind is int and not number.is_integer()):
            raise ConfigError(wanted)
        if number < lowest or (number == lowest and not inclusive) or number >= below:
            raise ConfigError(wanted)
        out[key] = int(number) if kind is int else number
    return out


def _have_sklearn(verbose: bool) -> bool:
    """The TF-IDF baseline needs scikit-learn (the train extra); without it the baseline is skipped, said once."""
    import importlib.util

    if importlib.util.find_spec("sklearn") is not None:
        return True
    if verbose:
        print("baseline skipped: the TF-IDF baseline needs scikit-learn (pip install 'attnzoo[train]')", flush=True)
    return False


def _stop_early(state: dict[str, Any], patience: int, epochs: int, rank: int, world: int) -> bool:
    """Rank 0 decides (it holds the validation scores); every rank learns the decision."""
    stop = rank == 0 and state["epoch"] < epochs and state["epoch"] - (state["best_epoch"] or 0) >= patience
    if world > 1:
        flag = torch.tensor([int(stop)])
        torch.distributed.broadcast(flag, 0)
        stop = bool(flag.item())
    return stop


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


@dataclass
class _Run:
    """One training run's parts, made by the first steps of :func:`train` and used by the later ones."""

    recipe: dict[str, Any]
    settings: dict[str, Any]
    output: Path
    rank: int
    world: int
    verbose: bool
    seed: int
    started: float
    task: Any = None
    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    device: Any = None
    sizes: dict[str, int] = field(default_factory=dict)
    epochs: int = 0
    steps_per_epoch: int = 1
    state: dict[str, Any] = field(default_factory=dict)
    average: dict[str, torch.Tensor] | None = None  # the mean weights of the last average_last epochs
    smoothing: float = 0.0  # train.label_smoothing, given to the task's loss

    @property
    def checkpoint(self) -> Path:
        return self.output / "checkpoint"

    @property
    def best_path(self) -> Path:
        return self.output / "best.safetensors"

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, flush=True)


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
    the final scoring and the files.
    """
    _check_export(recipe, export)
    run = _start(recipe, output, resume, overwrite, quiet)
    run.task = build_task(recipe["task"])
    baseline = baseline and _have_sklearn(run.verbose)  # said at the start, not after the last epoch
    for note in getattr(run.task, "notes", []):
        run.say(note)
    key, fixed = _threshold_setting(run.task)  # a bad data.threshold fails now, not after training
    if fixed is None and hasattr(run.task, "threshold_problem") and run.task.splits["val"]:
        problem = run.task.threshold_problem(run.task.splits["val"])
        if problem:  # said now too, so that a run can be stopped and given more validation data
            run.say(f"note: {problem}; {key}=0.5 decides at a fixed 0.5 instead")
    check_label_memory(run.task, run.settings["batch_size"])
    _build_model(run)
    _schedule(run, resume)
    data = run.task.describe_data()
    if resume:
        _resume(run, data)
    run.state["data"] = data
    last = _run_epochs(run, stop_after)
    if run.rank != 0:
        return {}
    if last < run.epochs:
        run.say(f"stopped after epoch {last} of {run.epochs}; continue with --resume")
        return {"stopped_after": last, "history": run.state["history"]}
    return _finish(run, export, baseline)


def _weights_name(recipe: dict[str, Any]) -> str:
    return f"{recipe['model']}-{recipe['tag']}.safetensors"


def _check_export(recipe: dict[str, Any], export: str | Path | None) -> None:
    """``export`` checked before any work: the run must not train and then find it cannot write there."""
    if export is None:
        return
    folder = Path(export)
    if not folder.is_dir():
        raise ConfigError(f"--export {folder}: not an existing folder; create it first, or export elsewhere")
    target = folder / _weights_name(recipe)
    if target.exists() or target.is_symlink():
        raise ConfigError(
            f"--export {folder} already holds {target.name}, and export never replaces a file (--overwrite is "
            f"about the run folder); move that file away, or export into another folder"
        )


def _start(recipe: dict[str, Any], output: str | Path | None, resume: bool, overwrite: bool, quiet: bool) -> _Run:
    """Threads, seed and the run folder (checked before any work)."""
    rank, world = _distributed()
    settings = _checked_numbers(recipe["train"])
    torch.set_num_threads(settings.get("threads") or max(1, (os.cpu_count() or 2) // world))
    seed = int(recipe.get("seed", 0))
    torch.manual_seed(seed)
    folder = Path(output or recipe.get("output") or f"runs/{recipe['model']}-{recipe['tag']}")
    if rank == 0:
        _check_run_folder(folder, resume, overwrite)
    verbose = rank == 0 and not quiet
    return _Run(recipe, settings, folder, rank, world, verbose, seed, time.perf_counter())


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


def _build_model(run: _Run) -> None:
    """The model sized for the task, on its device, and its optimizer; label smoothing checked."""
    import attnzoo

    settings, task = run.settings, run.task
    run.device = _device(settings.get("device", "auto"))
    run.sizes = model_sizes(run.recipe["model"], task.model_config())
    config = {**run.sizes, **run.recipe.get("config", {})}
    run.model = attnzoo.create(run.recipe["model"], config=config, device=run.device)
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


def _schedule(run: _Run, resume: bool) -> None:
    """How many epochs (the recipe's, what fits a time budget, or the checkpoint's), and the learning rate:
    linear warm-up, then cosine to 10 % of ``lr``."""
    settings = run.settings
    epochs, batch_size = settings["epochs"], settings["batch_size"]
    if batch_size % run.world:
        raise ConfigError(f"batch_size {batch_size} must divide by the number of processes {run.world}")
    if settings.get("time_budget_min") and not resume:
        budget = settings["time_budget_min"]
        epochs = _epochs_within(budget, run.task, run.model, run.optimizer, batch_size, epochs, run.device)
        run.say(f"{epochs} epochs fit in the time budget of {budget} min")
    elif resume and run.checkpoint.is_dir():
        epochs = read_record(run.checkpoint)[0]["epochs"]
    run.epochs = epochs
    run.steps_per_epoch = steps_per_epoch = max(1, len(run.task.splits["train"]) // batch_size)
    warmup = settings.get("warmup_steps") or 0

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, epochs * steps_per_epoch - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    run.scheduler = torch.optim.lr_scheduler.LambdaLR(run.optimizer, lr_factor)
    run.state = {"epoch": 0, "best": None, "best_epoch": None, "history": [], "elapsed": 0.0, "epochs": epochs}


def _resume(run: _Run, data: str) -> None:
    """The last complete checkpoint's model, optimizer, random state, schedule step and best weights."""
    if not run.checkpoint.is_dir():
        raise ConfigError(f"--resume: no checkpoint in {run.checkpoint}")
    run.state, saved = load_checkpoint(run.checkpoint, run.model, run.optimizer, data=data)
    run.average = saved.get("average")
    if "best" in saved:  # the best weights as of the checkpoint, whatever a killed run left in best_path
        write_weights(saved["best"], run.best_path, overwrite=True, sidecar=True)
    # the scheduler's own step count (an epoch's batches are ceil(n / batch), not steps_per_epoch)
    _restore_schedule(run.scheduler, int(run.state.get("step", run.state["epoch"] * run.steps_per_epoch)))
    run.started -= run.state["elapsed"]


def _run_epochs(run: _Run, stop_after: int | None) -> int:
    """Train, validate and checkpoint epoch after epoch; returns the last epoch this run was to reach (the
    recipe's last one when it stopped early)."""
    last = run.epochs if stop_after is None else min(run.epochs, run.state["epoch"] + stop_after)
    patience = run.settings.get("patience")  # early stopping: epochs without a better validation score
    ddp = torch.nn.parallel.DistributedDataParallel(run.model) if run.world > 1 else run.model
    for epoch in range(run.state["epoch"], last):
        loss = _train_epoch(run, ddp, epoch)
        if run.rank == 0:
            _end_epoch(run, epoch, loss)
        _barrier(run.world)
        if patience is not None and _stop_early(run.state, patience, run.epochs, run.rank, run.world):
            run.say(
                f"early stop: no better validation {run.task.main_metric} for {patience} epochs; the best is "
                f"epoch {run.state['best_epoch']}"
            )
            run.state["stopped_early"] = run.state["epoch"]
            return run.epochs  # what follows is the end of the run
    return last


def _train_epoch(run: _Run, ddp, epoch: int) -> float:
    """One pass over this rank's share of the training split, in the epoch's seeded order; the mean loss."""
    run.model.train()
    settings = run.settings
    generator = torch.Generator().manual_seed(run.seed * 1000 + epoch)
    bar = _progress(run.steps_per_epoch, run.verbose, f"epoch {epoch + 1}/{run.epochs}")
    total, count = 0.0, 0
    batches = run.task.batches("train", settings["batch_size"], generator=generator, rank=run.rank, world=run.world)
    for batch in batches:
        loss = run.task.loss(ddp, _on(batch, run.device), label_smoothing=run.smoothing)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if settings.get("clip"):
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), settings["clip"])
        run.optimizer.step()
        run.scheduler.step()
        total, count = total + loss.item(), count + 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{total / count:.4f}", refresh=False)
    if bar is not None:
        bar.close()
    return total / max(count, 1)


def _end_epoch(run: _Run, epoch: int, loss: float) -> None:
    """Rank 0 after an epoch: the running average, validation, the checkpoint, the best weights."""
    state, model = run.state, run.model
    average_last = run.settings.get("average_last") or 0
    if average_last and epoch + 1 > run.epochs - average_last:
        averaged = state.get("averaged_epochs", 0)
        run.average = _running_mean(run.average, model.state_dict(), averaged)
        state["averaged_epochs"] = averaged + 1
    scores = run.task.validate(model, run.task.splits["val"])
    main = scores[run.task.main_metric]
    state["history"].append({"epoch": epoch + 1, "train_loss": loss, **scores})
    improved = state["best"] is None or main > state["best"]
    if improved:
        state["best"], state["best_epoch"] = main, epoch + 1
    state["epoch"], state["step"] = epoch + 1, run.scheduler.last_epoch
    state["elapsed"] = time.perf_counter() - run.started
    best = model.state_dict() if improved else None
    save_checkpoint(run.checkpoint, model, run.optimizer, state, best=best, average=run.average)
    if best is not None:  # after the checkpoint: a resume restores best_path from it
        write_weights(best, run.best_path, overwrite=True, sidecar=True)
    run.say(
        f"epoch {epoch + 1}/{run.epochs}: train loss {loss:.4f}, val "
        + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
        + f" ({state['elapsed'] / 60:.1f} min)"
    )


def _finish(run: _Run, export: str | Path | None, baseline: bool) -> dict[str, Any]:
    """The shipped model (best epoch or average, in float16, threshold tuned on validation), scored on the
    test split and subset; the weights file, the run folder and report.json written."""
    from attnzoo.io.weights import read_weights

    task, model, recipe = run.task, run.model, run.recipe
    if run.average is not None:
        _judge_average(task, model, run.average, run.state, run.best_path, run.verbose)
    model.load_state_dict(read_weights(run.best_path, sha256=None)[0])
    # the weights ship in float16: tune and measure the model as it will be loaded
    half = float16_state(model)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in half.items()})
    notes = _decision_threshold(run)
    subset_size = int(recipe.get("check_subset", 2000))
    test, subset, metrics = card_metrics(task, model, subset_size)
    report = _report(run, test, subset, len(task.subset(subset_size)), baseline)
    report["warnings"] = notes
    extra = {
        **task.metadata(),
        "metrics": metrics,
        "dataset": task.dataset,
        "license": task.license,
        "recipe": recipe,
        "check_subset": subset_size,
        "seed": run.seed,
        "torch_version": torch.__version__,
    }
    target = _write_weights(run, half, extra, export, report)
    # the run folder itself loads: attnzoo.load(output), attnzoo predict OUTPUT, attnzoo evaluate OUTPUT
    model.attnzoo_metadata = extra
    attnzoo.save(model.cpu(), run.output, overwrite=True)
    report["card_entry"] = _card_entry(run, report, metrics, target)
    run.output.mkdir(parents=True, exist_ok=True)
    (run.output / "report.json").write_text(json.dumps(report, indent=1))
    shown = report["subset"]["size"]  # what the subset really holds: the test split may be smaller
    whole = " (the whole test split)" if shown == len(task.splits["test"]) else ""
    run.say(
        f"test: {test or 'no test split'}\nsubset[{shown}]{whole}: {subset}\nbaseline: {report['baseline']}\n"
        f"weights: {target} sha256 {report['sha256']} ({report['train_time_s'] / 60:.1f} min)\n"
        f"run folder: {run.output} (attnzoo.load, attnzoo predict and attnzoo evaluate take it)"
    )
    return report


def _threshold_setting(task: Any) -> tuple[str, float | None]:
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


def _decision_threshold(run: _Run) -> list[str]:
    """Set a multi-label task's decision threshold: the run's fixed one (``data.threshold``), else the best
    on validation; a validation split too small to tune on is a warning (returned, said and warned)."""
    task, model = run.task, run.model
    key, fixed = _threshold_setting(task)
    if not hasattr(task, "tune_threshold"):
        return []
    if fixed is not None:
        task.threshold = fixed
        return []
    val = task.splits["val"]
    problem = task.threshold_problem(val)
    if not val:
        task.threshold = 0.5
        note = f"there is no validation split to tune the decision threshold on: it stays at 0.5 (set {key})"
    elif problem is not None:
        task.tune_threshold(model, val)  # on validation only
        note = (
            f"{problem}: the tuned threshold {task.threshold:.2f} may not carry over to new data. To decide at "
            f"the fixed 0.5 instead, train with {key}=0.5, or predict and evaluate with --threshold 0.5 "
            f"(threshold=0.5 from Python)"
        )
    else:
        task.tune_threshold(model, val)
        return []
    run.say(f"warning: {note}")
    warnings.warn(note, ThresholdWarning, stacklevel=4)
    return [note]


def _report(run: _Run, test: dict, subset: dict, subset_size: int, baseline: bool) -> dict[str, Any]:
    task, state = run.task, run.state
    return {
        "model": run.recipe["model"],
        "tag": run.recipe["tag"],
        "task": task.name,
        "world_size": run.world,
        "split_sizes": task.split_sizes(),
        "epochs": run.epochs,
        "best_epoch": state["best_epoch"],
        "stopped_early": state.get("stopped_early"),
        "average": state.get("average"),
        "history": state["history"],
        "device": str(run.device),
        "test": test,
        "subset": {"size": subset_size, **subset},
        "train_time_s": time.perf_counter() - run.started,
        "baseline": task.baseline() if baseline and test else None,
        "data": state["data"],  # described (files hashed) once, at the start of the run
    }


def _write_weights(
    run: _Run, half: dict[str, torch.Tensor], extra: dict[str, Any], export: str | Path | None, report: dict
) -> Path:
    """The float16 weights file with its metadata, in the run folder or (never replacing one) in ``export``."""
    import attnzoo

    recipe = run.recipe
    config = {**run.sizes, **recipe.get("config", {})}
    spec = attnzoo.model_info(recipe["model"])
    metadata = encode_metadata(recipe["model"], spec.factory_name, config, extra)
    file_name = _weights_name(recipe)
    target = Path(export) / file_name if export else run.output / file_name
    report["weights"] = str(target)
    report["sha256"] = write_weights(half, target, metadata=metadata, overwrite=not export, sidecar=not export)
    return target


def _card_entry(run: _Run, report: dict[str, Any], metrics: dict[str, Any], target: Path) -> dict[str, Any]:
    """The card's ``weights`` entry for this run, ready to paste into registry/MODEL.yaml."""
    task, recipe = run.task, run.recipe
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
            "seed": run.seed,
            "data": report["data"],
            "train_time": _describe_time(report["train_time_s"], run.epochs, run.device),
            "splits": task.split_sizes(),
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
    All empty when the task has no test split."""
    if not task.splits["test"]:
        return {}, {}, {}
    test = {**task.evaluate(model, task.splits["test"]), **task.extra_metrics(model, task.splits["test"])}
    subset = task.evaluate(model, task.subset(subset_size))
    metrics = {**{k: round(v, 4) for k, v in test.items()}, **{f"subset_{k}": round(v, 4) for k, v in subset.items()}}
    return test, subset, metrics


def _judge_average(
    task, model, average: dict[str, torch.Tensor], state: dict[str, Any], best_path: Path, verbose: bool
) -> None:
    """Checkpoint averaging: validate the mean weights of the last epochs, and keep them as the model when
    they score at least as well as the best single epoch (recorded in ``state["average"]``)."""
    model.load_state_dict(average)
    scores = task.validate(model, task.splits["val"])
    kept = state["best"] is None or scores[task.main_metric] >= state["best"]
    last = state["epoch"]
    state["average"] = {"epochs": [last - state["averaged_epochs"] + 1, last], "val": scores, "kept": kept}
    if kept:
        write_weights(average, best_path, overwrite=True, sidecar=True)
    if verbose:
        first = state["average"]["epochs"][0]
        best = "none" if state["best"] is None else f"{state['best']:.4f} (epoch {state['best_epoch']})"
        print(
            f"average of epochs {first}-{last}: val {task.main_metric} {scores[task.main_metric]:.4f}, the best "
            f"single epoch {best}: " + ("the average is kept" if kept else "the best epoch is kept"),
            flush=True,
        )


def _describe_time(seconds: float, epochs: int, device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    return f"{seconds / 60:.0f} min on {where} ({epochs} epochs)"


def evaluate_file(
    model_or_path: Any, path: str | Path, *, columns: dict[str, str] | None = None, threshold: float | None = None
) -> dict[str, Any]:
    """Score a trained model (a run folder, weights file, pretrained name or module) on a data file.

    The file is read with the data settings the model was trained with (columns, separator), which
    ``columns`` (``text``, ``labels``, ``target``, ``label_separator``) can override; the vocabulary,
    labels and the decision threshold (tuned on validation) come from the weights. A label the model
    does not know is an error naming the file and line."""
    import attnzoo

    if isinstance(model_or_path, torch.nn.Module):
        model = model_or_path
    elif Path(model_or_path).exists():
        model = attnzoo.load(model_or_path)
    else:
        model = attnzoo.create(str(model_or_path), pretrained=True)
    record = RunRecord.of(model, model_or_path if isinstance(model_or_path, (str, Path)) else None)
    kinds = {"multilabel": "multi_label", "multiclass": "single_label", "g2p": "seq2seq"}
    if not record.trained or record.output not in kinds:
        raise ConfigError("evaluate needs weights written by attnzoo train (they carry the vocabulary and labels)")
    config = dict(record.task_config)
    if config.get("name") != "files":  # a bundled task's model, scored on the user's file
        config = {"name": "files", "task": kinds[record.output], "max_len": record.max_len}
    config.setdefault("task", kinds[record.output])  # a data: section that left the task to be inferred
    config.update({k: v for k, v in (columns or {}).items() if v is not None})
    config["evaluate_file"] = str(path)
    for key in ("train", "validation", "test", "labels_file"):
        config.pop(key, None)
    metadata = record.to_metadata()
    if threshold is not None:  # the task decides at the threshold it is built with
        metadata["threshold"] = float(threshold)
    task = build_task(config, metadata=metadata)
    indices = task.splits["test"]
    with kept_modes(model):  # scored in eval mode; a caller's model (mid-training) gets its modes back
        scores = task.evaluate(model, indices)
    out: dict[str, Any] = {"file": str(path), "rows": len(indices), "task": config["task"], **scores}
    if getattr(task, "threshold", None) is not None and config["task"] == "multi_label":
        out["threshold"] = task.threshold
    return out


def evaluate_pretrained(name: str, *, subset: bool = True, split: str = "test") -> dict[str, float]:
    """Re-evaluate shipped weights on their task's test split (or its fixed subset), from the weights'
    own metadata: the vocabulary, labels, threshold and split settings they were trained with."""
    import attnzoo

    model = attnzoo.create(name, pretrained=True).eval()
    record = RunRecord.of(model, name)
    task = task_of(record, source=name)
    indices = task.subset(int(record.check_subset or 2000)) if subset else task.splits[split]
    return task.evaluate(model, indices)
