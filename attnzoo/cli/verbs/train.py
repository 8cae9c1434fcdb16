"""``attnzoo train``: train a recipe, or a model on your own data file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from attnzoo.cli.common import UsageError, emit_json, positive_int, say

HELP = "train a recipe, or a model on your own data file"
DESCRIPTION = (
    "attnzoo train RECIPE [key=value ...] | attnzoo train --model NAME --train FILE "
    "[--validation FILE] [--test FILE] --text COL --labels COL [key=value ...] | attnzoo train "
    "--list. Under torchrun (torchrun --nproc_per_node N -m attnzoo train ...) it trains with "
    "DistributedDataParallel."
)


def arguments(p: argparse.ArgumentParser) -> None:
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
    own.add_argument(
        "--model",
        help="a registered text model (tokens_to_labels or tokens_to_tokens), or a folder attnzoo.save wrote for a "
        "converted keras-hub text classifier or causal LM with its tokenizer",
    )
    own.add_argument("--train", dest="train_file", metavar="FILE", help=".csv, .tsv, .jsonl, .parquet or a folder")
    own.add_argument("--validation", dest="validation_file", metavar="FILE", help="else 10%% of train, seeded")
    own.add_argument("--test", dest="test_file", metavar="FILE")
    own.add_argument("--text", metavar="COL", help="the text column (default text)")
    own.add_argument("--labels", metavar="COL", help="the label column (default labels)")
    own.add_argument("--target", metavar="COL", help="seq2seq: the target column (default target)")
    own.add_argument("--label-separator", metavar="S", help="splits a string of labels (default |)")
    own.add_argument("--labels-file", metavar="FILE", help="every label, one a line (fixes their order)")
    own.add_argument(
        "--task",
        choices=["multi_label", "single_label", "seq2seq", "causal_lm"],
        help="default multi_label (a port: its own, single_label or causal_lm)",
    )
    own.add_argument("--tag", default="custom", help="the run's tag (names the weights file)")
    own.add_argument("--epochs", type=positive_int, default=10)
    own.add_argument("--batch-size", type=positive_int, default=32)
    own.add_argument("--lr", type=float, default=0.002)
    own.add_argument(
        "--patience", type=positive_int, help="stop after this many epochs without a better validation score"
    )


def run(args: argparse.Namespace) -> int:
    from attnzoo.train.recipe import (
        builtin_recipes,
        check_overrides,
        complete_recipe,
        load_recipe,
        recipe_summary,
        resolved_recipe,
    )
    from attnzoo.train.trainer import train

    if args.list:
        rows = [(name, recipe_summary(path)) for name, path in builtin_recipes().items()]
        width = max(len(name) for name, _ in rows)
        for name, summary in rows:
            say(f"{name:<{width}}  {summary}")
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
        recipe = _with_overrides(lambda: load_recipe(args.recipe), lambda: load_recipe(args.recipe, args.overrides))
    if args.recipe is None:
        from omegaconf import OmegaConf

        def merged() -> dict:
            check_overrides(list(args.overrides))
            both = OmegaConf.merge(OmegaConf.create(recipe), OmegaConf.from_dotlist(list(args.overrides)))
            return complete_recipe(resolved_recipe(both, "the command line"), where="the command line")

        recipe = _with_overrides(lambda: None, merged)
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
        emit_json(report)
    return 0


def _with_overrides(without: Callable[[], Any], with_them: Callable[[], Any]) -> Any:
    """``with_them()``, where a ConfigError that ``without()`` (the same recipe before the command line's
    key=value pairs) does not raise is the command line's: a usage error (exit 2), not a failure."""
    from attnzoo.errors import ConfigError

    try:
        return with_them()
    except ConfigError as e:
        error = e
    try:
        without()
    except ConfigError:
        raise error from None  # the recipe has a mistake of its own: a failure
    raise UsageError(str(error)) from None


# what `attnzoo train` needs beyond the core install: attnzoo[train]
TRAIN_EXTRA = {"sklearn": "scikit-learn", "tqdm": "tqdm"}


def _require_train_extra(baseline: bool) -> None:
    """Checked before any work: a run must not train for an hour and then miss a package (or find it broken:
    each is imported, and extra_import_message says which way it failed)."""
    import importlib

    from attnzoo.errors import extra_import_message

    needed = {m: p for m, p in TRAIN_EXTRA.items() if baseline or m != "sklearn"}
    failed: dict[str, BaseException] = {}
    for module, package in needed.items():
        try:
            importlib.import_module(module)
        except Exception as e:  # absent, or installed and broken
            failed[package] = e
    if failed:
        what = f"attnzoo train needs the train extra ({', '.join(failed)})"
        message = extra_import_message(what, "train", next(iter(failed.values())), *needed)
        no_baseline = "; or --no-baseline to train without the scikit-learn baseline"
        raise UsageError(message + (no_baseline if list(failed) == ["scikit-learn"] else ""))


def _recipe_from_flags(args: argparse.Namespace, flags: dict) -> dict:
    """``attnzoo train --model M --train F ...``: the recipe those flags describe."""
    from attnzoo.train.port import KINDS, is_port, port_kind

    port = KINDS[port_kind(flags["model"])] if is_port(flags["model"]) else None  # a converted keras-hub model
    data = {
        "train": flags["train_file"],
        "validation": flags["validation_file"],
        "test": flags["test_file"],
        "text": flags["text"] or "text",
        "task": flags["task"] or port or "multi_label",
    }
    if data["task"] == "seq2seq":
        data["target"] = flags["target"] or "target"
    elif data["task"] != "causal_lm" or flags["labels"]:  # a causal LM learns the text alone
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
