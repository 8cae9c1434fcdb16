"""Recipes: what ``attnzoo train`` trains, read and checked before any work.

A recipe (omegaconf YAML, see ``recipes/``) names the registered model, its tag, the task (a bundled data
set) or the data (the user's files), the model's config and the training settings. ``load_recipe`` reads
a file or a built-in recipe by name with ``key=value`` overrides; ``complete_recipe`` checks a recipe given
as a dict; every key is checked against the schema below, and the numeric training settings by
``checked_numbers`` (a typo or a negative batch size is a ``ConfigError`` naming the key).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from attnzoo.core.config import check_yaml_file
from attnzoo.errors import ConfigError

__all__ = [
    "RECIPES",
    "builtin_recipes",
    "recipe_summary",
    "check_overrides",
    "load_recipe",
    "complete_recipe",
    "resolved_recipe",
    "check_tag",
    "check_recipe_keys",
    "checked_numbers",
    "TRAIN_DEFAULTS",
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
    except Exception as e:  # noqa: BLE001 - omegaconf's own errors (a type clash)
        raise ConfigError(f"recipe {path.name}: {' '.join(str(e).split())[:300]}") from None
    data = complete_recipe(resolved_recipe(recipe, f"recipe {path.name}"), where=f"recipe {path.name}")
    data["recipe_file"] = path.name
    return data


def resolved_recipe(recipe: Any, where: str) -> Any:
    """An omegaconf recipe as plain data, its interpolations resolved, except in ``tag``: the tag names the
    run folder, and ``tag: ${oc.env:SECRET}`` would copy an environment variable into a folder's name."""
    from omegaconf import OmegaConf

    try:
        if "tag" in recipe and OmegaConf.is_interpolation(recipe, "tag"):
            raw = OmegaConf.to_container(recipe, resolve=False).get("tag")  # type: ignore[union-attr]
            raise ConfigError(f"{where}: tag {raw!r} is an interpolation; a tag is a name ({TAG_RULE}), written out")
        return OmegaConf.to_container(recipe, resolve=True)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - omegaconf's own errors (an interpolation, a type clash)
        raise ConfigError(f"{where}: {' '.join(str(e).split())[:300]}") from None


TAG_RULE = "letters, digits, '_', '.' and '-', no '..'"


def check_tag(tag: Any, where: str) -> str:
    """A recipe's ``tag``: a name, never a path (the run folder is ``runs/<model>-<tag>``, and a tag
    ``../../x`` would put it outside ``runs/``); a ``ConfigError`` naming the tag otherwise."""
    import re

    if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", tag) or ".." in tag:
        raise ConfigError(f"{where}: tag {tag!r} is not a name; a tag holds {TAG_RULE} (it names the run folder)")
    return tag


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
    check_tag(data["tag"], where)
    data["train"] = {**TRAIN_DEFAULTS, **data["train"]}
    return data


# A recipe's keys, section by section (the schema every recipe and key=value override is checked against;
# a typo is an error naming the closest key, never silently a default). docs/training.md lists them.
RECIPE_KEYS = frozenset(["model", "tag", "seed", "task", "config", "train", "check_subset", "output", "recipe_file"])
TRAIN_DEFAULTS = {"epochs": 10, "batch_size": 32, "lr": 0.002}  # what `attnzoo train --model ...` uses too
TRAIN_KEYS = frozenset(["epochs", "batch_size", "lr", "weight_decay", "clip", "warmup_steps", "threads", "device"])
TRAIN_KEYS |= frozenset(["time_budget_min", "patience", "average_last", "label_smoothing"])
TRAIN_KEYS |= frozenset(["precision", "accumulate"])  # fp32 | bf16 | fp16 (steps.py); passes per optimizer step
TRAIN_KEYS |= frozenset(["lora"])  # a port's LoRA (lora.py): {rank, alpha, targets, save, dropout}
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
    "accumulate": (int, 1, True, True, math.inf),  # null: 1
}


def checked_numbers(settings: dict[str, Any]) -> dict[str, Any]:
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
