"""Pages generated from the registry so that they cannot go stale: the model catalogue
(docs/catalogue.md) and the table of pretrained models (docs/pretrained.md, from the cards' weights).

    python -m attnzoo.tools.catalogue            # rewrites both pages

A test compares each file with what ``render()`` and ``render_pretrained()`` return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnzoo.core import ModelSpec, list_models, model_info
from attnzoo.core.signatures import config_rows

__all__ = ["render", "render_pretrained", "PAGES"]


def _cell(text: Any) -> str:
    """Card text in a table cell: one line, its ``|`` and ``\\`` escaped (``|i - j|`` keeps the row's cells)
    and ``<`` written as ``&lt;`` (no tag)."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _config(spec: ModelSpec) -> str:
    """Every constructor argument, with the card's value or the default (none shown: required)."""
    parts = []
    for key, described in config_rows(spec):
        if described == "required":
            parts.append(f"`{key}`")
        elif described.startswith("null"):
            parts.append(f"`{key}`=null")
        else:
            parts.append(f"`{key}`={_cell(described.removeprefix('default '))}")
    return ", ".join(parts) or "-"


def _nulls(spec: ModelSpec) -> list[str]:
    return [
        f"| `{spec.name}` | `{key}` | {_cell(described.removeprefix('null: '))} |"
        for key, described in config_rows(spec)
        if described.startswith("null")
    ]


def render() -> str:
    lines = [
        "# Model catalogue",
        "",
        "Generated from the model cards in `registry/` by `python -m attnzoo.tools.catalogue`; a test keeps it",
        "in step with the registry. The config column lists every constructor argument (read from the",
        "factory's signature) with the card's value or the default; an argument without one is required.",
        "What `null` means for each argument is in the table after the catalogue (`attnzoo info NAME`",
        "says the same). One table per calling convention ([layers.md](layers.md#calling-conventions)).",
        "",
    ]
    exemptions, nulls = [], []
    specs = [model_info(name) for name in list_models(provider="attnzoo")]
    for kind, title in (("layer", "Layers"), ("model", "Models")):
        lines += [f"## {title}", ""]
        of_kind = [spec for spec in specs if spec.kind == kind]
        for convention in sorted({spec.convention for spec in of_kind}):
            lines += [f"### {kind.capitalize()}s called as `{convention or '-'}`", ""]
            lines += ["| name | summary | config | reference |", "|---|---|---|---|"]
            for spec in (spec for spec in of_kind if spec.convention == convention):
                cells = (_cell(spec.summary), _config(spec), _cell(spec.reference))
                lines.append(f"| `{spec.name}` | {' | '.join(cells)} |")
                exemptions += [
                    f"| `{spec.name}` | `{prop}` | {_cell(reason)} |" for prop, reason in spec.exempt.items()
                ]
                nulls += _nulls(spec)
            lines.append("")
    lines += ["## What null means", "", "| name | argument | null means |", "|---|---|---|", *nulls, ""]
    lines += [
        "## Exemptions from the conformance kit",
        "",
        "Every variant above passes every property of `attnzoo check` except these, each for the reason",
        "its card gives:",
        "",
        "| name | property | reason |",
        "|---|---|---|",
        *exemptions,
        "",
    ]
    lines += ["## Pretrained", "", "| name | dataset | metrics | file |", "|---|---|---|---|"]
    for name in list_models(pretrained=True, provider="attnzoo"):
        arch, tag = name.rsplit(".", 1)
        w = model_info(arch).weights[tag]
        metrics = ", ".join(f"{k} {v}" for k, v in w.metrics.items() if not k.startswith("subset_"))
        lines.append(f"| `{name}` | {_cell(w.dataset)} | {_cell(metrics)} | `{w.file}` |")
    return "\n".join(lines) + "\n"


def _fmt(metrics: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in metrics.items() if k != "model" and not k.startswith("subset_"))


def render_pretrained() -> str:
    lines = [
        "# Pretrained models",
        "",
        "Generated from the model cards by `python -m attnzoo.tools.catalogue`. Every model was trained here, on",
        "data that installs offline, by the recipe named in its card; the weights are float16 safetensors",
        "whose sha256 is checked on every load. Metrics are on the held-out test split of the recipe's",
        "grouped, seeded split; the baseline was trained on the same split in the same run. A test",
        "re-evaluates every model on the first 2,000 test examples and compares with the card's",
        "`subset_*` metrics (within 0.01). [pretrained-quality.md](pretrained-quality.md) compares the",
        "multi-label model with its baseline per label-frequency band.",
        "",
        "| name | task and data | split (train / val / test) | metrics | baseline | training | reproduce |",
        "|---|---|---|---|---|---|---|",
    ]
    details = []
    for name in list_models(pretrained=True, provider="attnzoo"):
        arch, tag = name.rsplit(".", 1)
        w = model_info(arch).weights[tag]
        splits = " / ".join(
            f"{w.splits.get(k, '?'):,}" if isinstance(w.splits.get(k), int) else "?" for k in ("train", "val", "test")
        )
        baseline = f"{w.baseline.get('model', '')}: {_fmt(w.baseline)}" if w.baseline else "-"
        recipe = w.recipe.rsplit("/", 1)[-1]
        seeds = ", ".join(map(str, w.seed)) if isinstance(w.seed, list) else None
        command = (
            f"`attnzoo train {recipe} seed=S` for S in {seeds}, joined by `python -m attnzoo.train.ensemble`"
            if seeds
            else f"`attnzoo train {recipe}`"
        )
        lines.append(
            f"| `{name}` | {_cell(w.dataset)} | {splits} | {_cell(_fmt(w.metrics))} | {_cell(baseline)} "
            f"| {_cell(w.train_time)} | {command} |"
        )
        details += [
            f"### `{name}`",
            "",
            f"- data: {w.data}",
            f"- licence: {w.license}",
            f"- recipe: `{w.recipe}` ({f'seeds {seeds}' if seeds else f'seed {w.seed}'})",
            f"- file: `weights/{w.file}`, sha256 `{w.sha256}`",
        ]
        if w.notes:
            details.append(f"- notes: {w.notes}")
        details.append("")
    return "\n".join(lines + [""] + details)


PAGES = {"catalogue.md": render, "pretrained.md": render_pretrained}


if __name__ == "__main__":
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent.parent / "docs"
    for page, make in PAGES.items():
        (docs / page).write_text(make())
        print(f"wrote {docs / page}")
