"""The model catalogue (docs/catalogue.md), generated from the registry so that it cannot go stale.

    python -m attnzoo.catalogue > docs/catalogue.md

A test compares the file with ``render()``.
"""

from __future__ import annotations

from .registry import list_models, model_info

__all__ = ["render"]


def _config(spec) -> str:
    parts = []
    for key, value in spec.config.items():
        parts.append(f"`{key}`" + ("" if value == "???" else f"={'null' if value is None else value}"))
    return ", ".join(parts) or "-"


def render() -> str:
    lines = [
        "# Model catalogue",
        "",
        "Generated from the model cards in `registry/` by `python -m attnzoo.catalogue`; a test keeps it",
        "in step with the registry. Required config keys have no default; `null` is a size inferred on",
        "the first call or a value derived from another (see `attnzoo info NAME`).",
        "",
    ]
    for kind, title in (("layer", "Layers"), ("model", "Models")):
        lines += [f"## {title}", "", "| name | summary | config | reference |", "|---|---|---|---|"]
        for name in list_models(provider="attnzoo"):
            spec = model_info(name)
            if spec.kind == kind:
                lines.append(f"| `{name}` | {spec.summary} | {_config(spec)} | {spec.reference} |")
        lines.append("")
    lines += ["## Pretrained", "", "| name | dataset | metrics | file |", "|---|---|---|---|"]
    for name in list_models(pretrained=True, provider="attnzoo"):
        arch, tag = name.rsplit(".", 1)
        w = model_info(arch).weights[tag]
        metrics = ", ".join(f"{k} {v}" for k, v in w.metrics.items() if not k.startswith("subset_"))
        lines.append(f"| `{name}` | {w.dataset} | {metrics} | `{w.file}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
