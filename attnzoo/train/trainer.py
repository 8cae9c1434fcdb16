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

Checkpoints hold no pickle: tensors (model, optimizer state, random state) in safetensors, the rest in
JSON.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError
from ..weights import encode_metadata, write_weights
from .sources import SOURCES
from .tasks import build_task

__all__ = ["train", "load_recipe", "evaluate_pretrained"]


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        builtin = Path(__file__).parent / "recipes" / path.name
        if builtin.is_file():
            path = builtin
        else:
            raise ConfigError(f"recipe {str(path)!r} not found (built-in recipes are in {builtin.parent})")
    recipe = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(list(overrides or [])))
    data = OmegaConf.to_container(recipe, resolve=True)
    for key in ("model", "tag", "task", "train"):
        if key not in data:
            raise ConfigError(f"recipe {path.name}: missing section {key!r}")
    data["recipe_file"] = path.name
    return data


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


# -- checkpoints -------------------------------------------------------------------------------------------
def _save_checkpoint(folder: Path, model, optimizer, state: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_weights(model.state_dict(), folder / "model.safetensors", overwrite=True, sidecar=True)
    opt = optimizer.state_dict()
    tensors = {"rng": torch.get_rng_state()}
    scalars: dict[str, Any] = {"param_groups": opt["param_groups"], "state": {}}
    for index, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value
            else:
                scalars["state"].setdefault(str(index), {})[key] = value
    write_weights(tensors, folder / "optimizer.safetensors", overwrite=True, sidecar=True)
    (folder / "trainer.json").write_text(json.dumps({**state, "optimizer": scalars}, indent=1))


def _load_checkpoint(folder: Path, model, optimizer) -> dict[str, Any]:
    from ..weights import read_weights

    model_state, _ = read_weights(folder / "model.safetensors", sha256=None)
    model.load_state_dict(model_state)
    tensors, _ = read_weights(folder / "optimizer.safetensors", sha256=None)
    saved = json.loads((folder / "trainer.json").read_text())
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    for index, entry in saved["optimizer"]["state"].items():
        state.setdefault(int(index), {}).update(entry)
    optimizer.load_state_dict({"state": state, "param_groups": saved["optimizer"]["param_groups"]})
    torch.set_rng_state(tensors["rng"])
    return saved


# -- training ----------------------------------------------------------------------------------------------
def _progress(total: int, enabled: bool, description: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with timm's dependencies
        return None
    return tqdm(total=total, disable=not enabled, desc=description, mininterval=2.0, file=sys.stderr,
                dynamic_ncols=True, leave=False)


def train(recipe: dict[str, Any], *, output: str | Path | None = None, resume: bool = False,
          export: str | Path | None = None, baseline: bool = True, quiet: bool = False,
          stop_after: int | None = None) -> dict[str, Any]:
    """Train a recipe; returns the final report (also written to ``OUTPUT/report.json``).

    ``stop_after`` ends this run after that many epochs (the schedule still spans the recipe's
    epochs); ``resume=True`` continues from the checkpoint in ``output``.
    """
    import attnzoo

    rank, world = _distributed()
    settings = recipe["train"]
    torch.set_num_threads(int(settings.get("threads", max(1, (os.cpu_count() or 2) // world))))
    seed = int(recipe.get("seed", 0))
    torch.manual_seed(seed)
    output = Path(output or recipe.get("output") or f"runs/{recipe['model']}-{recipe['tag']}")
    started = time.perf_counter()

    task = build_task(recipe["task"])
    model = attnzoo.create(recipe["model"], **task.model_config(), **recipe.get("config", {}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(settings["lr"]),
                                  weight_decay=float(settings.get("weight_decay", 0.0)))
    epochs, batch_size = int(settings["epochs"]), int(settings["batch_size"])
    if batch_size % world:
        raise ConfigError(f"batch_size {batch_size} must divide by the number of processes {world}")
    steps_per_epoch = max(1, len(task.splits["train"]) // batch_size)
    warmup = int(settings.get("warmup_steps", 0))

    def lr_factor(step: int) -> float:  # linear warm-up, then cosine to 10 %
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, epochs * steps_per_epoch - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    state: dict[str, Any] = {"epoch": 0, "best": None, "best_epoch": None, "history": [], "elapsed": 0.0}
    checkpoint = output / "checkpoint"
    best_path = output / "best.safetensors"
    if resume:
        if not (checkpoint / "trainer.json").is_file():
            raise ConfigError(f"--resume: no checkpoint in {checkpoint}")
        state = _load_checkpoint(checkpoint, model, optimizer)
        scheduler.last_epoch = state["epoch"] * steps_per_epoch - 1
        scheduler.step()
        started -= state["elapsed"]
    verbose = rank == 0 and not quiet
    last = epochs if stop_after is None else min(epochs, state["epoch"] + stop_after)
    for epoch in range(state["epoch"], last):
        model.train()
        generator = torch.Generator().manual_seed(seed * 1000 + epoch)
        bar = _progress(steps_per_epoch, verbose, f"epoch {epoch + 1}/{epochs}")
        total, count = 0.0, 0
        for batch in task.batches("train", batch_size, generator=generator, rank=rank, world=world):
            loss = task.loss(ddp, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if settings.get("clip"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), float(settings["clip"]))
            optimizer.step()
            scheduler.step()
            total, count = total + loss.item(), count + 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{total / count:.4f}", refresh=False)
        if bar is not None:
            bar.close()
        if rank == 0:
            scores = task.evaluate(model, task.splits["val"])
            main = scores[task.main_metric]
            state["history"].append({"epoch": epoch + 1, "train_loss": total / max(count, 1), **scores})
            if state["best"] is None or main > state["best"]:
                state["best"], state["best_epoch"] = main, epoch + 1
                write_weights(model.state_dict(), best_path, overwrite=True, sidecar=True)
            state["epoch"] = epoch + 1
            state["elapsed"] = time.perf_counter() - started
            _save_checkpoint(checkpoint, model, optimizer, state)
            if verbose:
                print(f"epoch {epoch + 1}/{epochs}: train loss {total / max(count, 1):.4f}, val "
                      + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
                      + f" ({state['elapsed'] / 60:.1f} min)", flush=True)
        _barrier(world)
    if rank != 0:
        return {}
    if last < epochs:
        if verbose:
            print(f"stopped after epoch {last} of {epochs}; continue with --resume", flush=True)
        return {"stopped_after": last, "history": state["history"]}

    from ..weights import read_weights

    model.load_state_dict(read_weights(best_path, sha256=None)[0])
    # the weights ship in float16: tune and measure the model as it will be loaded
    half = {k: v.detach().half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in half.items()})
    if hasattr(task, "tune_threshold"):
        task.tune_threshold(model, task.splits["val"])
    test = task.evaluate(model, task.splits["test"])
    subset_size = int(recipe.get("check_subset", 2000))
    subset = task.evaluate(model, task.subset(subset_size))
    train_time = time.perf_counter() - started
    report = {
        "model": recipe["model"], "tag": recipe["tag"], "task": task.name, "world_size": world,
        "split_sizes": task.split_sizes(), "best_epoch": state["best_epoch"], "history": state["history"],
        "test": test, "subset": {"size": subset_size, **subset}, "train_time_s": train_time,
        "baseline": task.baseline() if baseline else None,
        "data": "; ".join(SOURCES[k].describe() for k in task.data_keys),
    }
    metrics = {**{k: round(v, 4) for k, v in test.items()},
               **{f"subset_{k}": round(v, 4) for k, v in subset.items()}}
    extra = {**task.metadata(), "metrics": metrics, "dataset": task.dataset, "license": task.license,
             "recipe": recipe, "check_subset": subset_size, "seed": seed}
    config = {**task.model_config(), **recipe.get("config", {})}
    spec = attnzoo.model_info(recipe["model"])
    metadata = encode_metadata(recipe["model"], spec.factory_name, config, extra)
    file_name = f"{recipe['model']}-{recipe['tag']}.safetensors"
    target = Path(export) / file_name if export else output / file_name
    report["weights"] = str(target)
    report["sha256"] = write_weights(half, target, metadata=metadata, overwrite=not export, sidecar=not export)
    report["card_entry"] = {
        recipe["tag"]: {"file": file_name, "sha256": report["sha256"], "config": config, "metrics": metrics,
                        "dataset": task.dataset, "license": task.license,
                        "recipe": f"attnzoo/train/recipes/{recipe['recipe_file']}", "seed": seed,
                        "data": report["data"], "train_time": f"{train_time / 60:.0f} min on 2 CPU threads",
                        "splits": task.split_sizes(),
                        "baseline": {"model": "TF-IDF word 1-2 grams + linear SVM",
                                     **{k: round(v, 4) for k, v in (report["baseline"] or {}).items()}}}}
    output.mkdir(parents=True, exist_ok=True)
    (output / "report.json").write_text(json.dumps(report, indent=1))
    if verbose:
        print(f"test: {test}\nsubset[{subset_size}]: {subset}\nbaseline: {report['baseline']}\n"
              f"weights: {target} sha256 {report['sha256']} ({train_time / 60:.1f} min)")
    return report


def evaluate_pretrained(name: str, *, subset: bool = True, split: str = "test") -> dict[str, float]:
    """Re-evaluate shipped weights on their task's test split (or its fixed subset), from the weights'
    own metadata: the vocabulary, labels, threshold and split settings they were trained with."""
    import attnzoo

    model = attnzoo.create(name, pretrained=True).eval()
    meta = model.attnzoo_metadata
    task = build_task(meta["task_config"], metadata=meta)
    indices = task.subset(int(meta["check_subset"])) if subset else task.splits[split]
    return task.evaluate(model, indices)
