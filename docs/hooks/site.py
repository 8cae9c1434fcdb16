"""The docs site's generated pages: one per registered variant and one per pretrained model, made from the
live registry when the site is built (``mkdocs build``; mkdocs.yml names this file among its ``hooks``).

A variant's page: its summary, options (type, card value, what null means), calling convention, the
card's ``formula`` drawn as MathML (with the factory's docstring folded under it), the FLOPs torch counts
as T, d, L and w double with one measured
line from ``benchmarks/results`` where one names it, the papers it cites (with BibTeX from
docs/references.bib), the weights it loads, what the conformance kit checks on it, and pictures that
:mod:`attnzoo.tools.plots` draws from the real layer. A pretrained model's page: its data, metrics with
their definitions (docs/training.md's table), baseline, licence and the attention on a real example.
A plugin installed when the site is built gets the same pages: everything comes from the registry, and
every text from a card, a plugin's code or a file is written as text (:func:`_text`): it makes no tag, link
or include on the page. Nothing here is committed as a copy: the pages exist in the built site only.
"""

from __future__ import annotations

import html
import inspect
import io
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import torch

from attnzoo.core import create, list_models, model_info
from attnzoo.core.signatures import config_rows
from attnzoo.core.spec import ModelSpec, thaw
from attnzoo.errors import ConfigError
from attnzoo.train.predict import predict

__all__ = [
    "Reference",
    "bibliography",
    "cited",
    "measured_line",
    "metric_definitions",
    "variant_page",
    "pretrained_page",
    "variants_index",
    "page_path",
    "on_config",
    "on_files",
    "on_page_markdown",
]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
VARIANTS, MODELS = "variants", "models"
EXAMPLE_TEXTS = {  # a real input for each kind of pretrained output, drawn on its page
    "multilabel": "a large wild cat with a striped coat",
    "multiclass": "a large wild cat with a striped coat",
    "g2p": "attention",
}
log = logging.getLogger("mkdocs.plugins.attnzoo")  # under "mkdocs": a warning fails `mkdocs build --strict`


def page_path(name: str, folder: str = VARIANTS) -> str:
    """The page of a variant or pretrained model, relative to docs/ (``provider:name`` -> ``provider--name``)."""
    return f"{folder}/{name.replace(':', '--')}.md"


# -- references ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    key: str
    surname: str  # of the first author: what a card's citation names
    year: str
    title: str
    url: str
    bibtex: str


def _field(entry: str, name: str) -> str:
    found = re.search(rf"\b{name}\s*=\s*\{{(.*?)\}},?\s*$", entry, flags=re.M)
    return found.group(1).strip() if found else ""


@lru_cache(maxsize=4)
def bibliography(path: Path = DOCS / "references.bib") -> tuple[Reference, ...]:
    """The entries of a BibTeX file written as docs/references.bib is (one ``field = {value}`` a line)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    entries = []
    for match in re.finditer(r"^@\w+\{(\w+),\n(.*?)\n\}", text, flags=re.M | re.S):
        entry = match.group(0)
        first = _field(entry, "author").split(" and ")[0]
        surname = first.strip("{}").split()[0] if first.startswith("{") else first.split()[-1]
        url = _field(entry, "url")
        entries.append(Reference(match.group(1), surname, _field(entry, "year"), _field(entry, "title"), url, entry))
    return tuple(entries)


def cited(reference: str, entries: tuple[Reference, ...] | None = None) -> list[Reference]:
    """The entries a card's ``reference`` cites: its first author's surname, then the year, in one clause
    (``Shaw, Uszkoreit and Vaswani 2018`` cites shaw2018, not vaswani2017)."""
    found = []
    for clause in reference.split(";"):
        for entry in bibliography() if entries is None else entries:
            if re.search(rf"\b{re.escape(entry.surname)}\b[^;]*?\b{entry.year}\b", clause) and entry not in found:
                found.append(entry)
    return found


# -- measured lines from benchmarks/results ----------------------------------------------------------------
def _timing(record: Mapping[str, Any]) -> str:
    if "median_ms" in record:
        return f"{record['median_ms']:.3g} ms median per step"
    parts = [
        f"{label} {record[key] * 1e3:.3g} ms"
        for key, label in (("fwd_s", "forward"), ("fwd_bwd_s", "forward + backward"))
        if key in record
    ]
    return ", ".join(parts)


def _speed_of(record: Mapping[str, Any]) -> float | None:
    for key in ("median_ms", "fwd_s"):
        if isinstance(record.get(key), (int, float)):
            return float(record[key])
    return None


def _lines_in(data: Any, name: str, where: str) -> list[tuple[bool, str]]:
    """(whether the variant is the reference of its group, the line) for every record that names it."""
    found: list[tuple[bool, str]] = []
    keys = (name, f"attnzoo {name}", f"attnzoo ({name})")
    if isinstance(data, list):
        rows = [r for r in data if isinstance(r, Mapping)]
        for i, row in enumerate(rows):
            if row.get("name") == name and _speed_of(row) is not None:
                # a group starts at its reference, the row whose ratio_to_first is 1
                first = next((r for r in reversed(rows[: i + 1]) if r.get("ratio_to_first") == 1.0), row)
                setting = f"T = {row.get('seq')}, {json.dumps(row.get('config', {}))}"
                line = f"{_timing(row)} ({setting}; {row.get('route', '')})"
                if first is not row and isinstance(row.get("ratio_to_first"), float):
                    line += f", {row['ratio_to_first']:.2f}x the time of `{first.get('name')}` in the same run"
                found.append((first is row, f"{line} [{where}]"))
    elif isinstance(data, Mapping):
        for key, value in data.items():
            if key in keys and isinstance(value, Mapping) and _speed_of(value) is not None:
                first_key, first = next(iter(data.items()))
                line = _timing(value)
                if first_key != key and isinstance(first, Mapping) and _speed_of(first):
                    line += f", {_speed_of(value) / _speed_of(first):.2f}x the time of {first_key!r} in the same run"  # type: ignore[operator]
                found.append((first_key == key, f"{line} [{where}, {key!r}]"))
            else:
                found += _lines_in(value, name, f"{where} > {key}")
    return found


def measured_line(name: str, results: Path = RESULTS) -> str | None:
    """One measured line naming ``name`` in the benchmark results (one where it is compared with a
    reference, when there is one), with the file, the place in it and the machine; None if none names it."""
    found: list[tuple[bool, str]] = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        machine = data.get("machine", "") if isinstance(data, Mapping) else ""
        found += [(ref, f"{line} on {machine}" if machine else line) for ref, line in _lines_in(data, name, path.name)]
    compared = [line for ref, line in found if not ref]
    lines = compared or [line for _, line in found]
    return lines[0] if lines else None


# -- metric definitions (docs/training.md, "Metrics") -------------------------------------------------------
@lru_cache(maxsize=2)
def metric_definitions(path: Path = DOCS / "training.md") -> tuple[tuple[str, str], ...]:
    """(pattern, definition) for each row of the metrics table: ``precision_at_k`` -> ``precision_at_\\d+``,
    ``stress_free_*`` -> a prefix."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[1] and not cells[1].startswith("---"):
            for name in re.findall(r"`([a-z_*\[\]0-9]+)`", cells[0]):
                pattern = re.escape(name).replace(r"\*", "").replace("_k", r"_\d+")
                rows.append((pattern + ("" if name.endswith("*") else "$"), cells[1]))
    return tuple(rows)


def _define(metric: str) -> str:
    prefixes = [d for p, d in metric_definitions() if not p.endswith("$") and re.search(rf"(^|_){p}", metric)]
    bases = [(len(p), d) for p, d in metric_definitions() if p.endswith("$") and re.search(rf"(^|_){p}", metric)]
    parts = prefixes + ([max(bases)[1]] if bases else [])
    return "; ".join(parts) or "see the notes below"


# -- a variant's sections -------------------------------------------------------------------------------------
def _factory(spec: ModelSpec) -> Any:
    if callable(spec.factory):
        return spec.factory
    import importlib

    module, _, attr = spec.factory.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def _types(factory: Any) -> dict[str, str]:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    shown = {}
    for key, param in params.items():
        if param.annotation is not inspect.Parameter.empty:
            shown[key] = (
                param.annotation
                if isinstance(param.annotation, str)
                else getattr(param.annotation, "__name__", str(param.annotation))
            )
        elif param.default not in (inspect.Parameter.empty, None):
            shown[key] = type(param.default).__name__
    return shown


# -- card text on a page --------------------------------------------------------------------------------------
# Everything a card, a plugin's code or a file gives (summaries, references, reasons, option names, defaults,
# annotations, docstrings, BibTeX, error messages) reaches a page through these helpers only. Each character
# HTML or Markdown (with its extensions: tables' |, attr_list's {}, snippets' --8<--, details' ???) could read
# as syntax is written as a character reference, which Markdown passes through as text and the browser shows
# as that character: the text can open no tag, link, attribute, table cell or include.
_SPECIAL = frozenset("\\`*_{}[]()#+-.!|<>&\"'~=:?^$%@;/")


def _text(text: Any) -> str:
    """Card text as inline Markdown that renders as exactly that text, on one line."""
    return "".join(f"&#{ord(c)};" if c in _SPECIAL else c for c in " ".join(str(text).split()))


def _code(text: Any) -> str:
    """Card text in a code font (a ``<code>`` element, not backticks: a backtick in the text cannot end it,
    and a ``|`` in a table cell is escaped instead of shown as ``\\|``)."""
    return f"<code>{_text(text)}</code>"


def _pre(text: str, summary: str | None = None) -> list[str]:
    """Verbatim text (a docstring, a BibTeX entry) as a raw HTML block Markdown leaves alone, folded under
    ``summary`` when one is given; escaped, so no line of it is a tag or a snippet include."""
    body = f"<pre><code>{html.escape(text, quote=False)}</code></pre>"
    if summary is not None:
        body = f'<details class="note"><summary>{html.escape(summary, quote=False)}</summary>{body}</details>'
    return ["", body.replace("\n", "&#10;"), ""]  # one line: a blank line inside cannot end the block


def _link(url: str, label: str) -> str:
    """An ``http(s)`` link from a card or a bibliography, or its label alone when the URL is anything else
    (``javascript:``, ``data:``, a relative path)."""
    if not re.fullmatch(r"https?://[^\s<>\"'`\\]+", url):
        return _text(label)
    return f'<a href="{html.escape(url, quote=True)}">{_text(label)}</a>'


def _options(spec: ModelSpec, factory: Any) -> list[str]:
    types = _types(factory)
    lines = ["| option | type | value on the card | null means |", "|---|---|---|---|"]
    for key, described in config_rows(spec):
        value, null = described, ""
        if described.startswith("null"):
            value, null = "null", described.removeprefix("null: ")
        lines.append(
            f"| {_code(key)} | {_code(types.get(key, '-'))} | {_text(value.removeprefix('default '))} | {_text(null)} |"
        )
    return lines


def _layout(spec: ModelSpec, layer: Any) -> list[str]:
    """The weights it loads: its state dict under the example config, Keras's class, reference checkpoints."""
    from attnzoo.interop.convert import SOURCES, TARGETS

    lines: list[str] = []
    state: Mapping[str, Any] = getattr(layer, "state_dict", dict)()
    if state:
        rows = [f"{key:40s} {list(getattr(t, 'shape', []))}" for key, t in list(state.items())[:24]]
        rows += [f"... {len(state) - 24} more"] * (len(state) > 24)
        lines += ["State dict under the example config (safetensors names and shapes):", *_pre("\n".join(rows))]
    keras_class = getattr(layer, "keras_class", "")
    if keras_class:
        lines.append(
            f"- Keras: {_code('keras.layers.' + str(keras_class))}; its weights load with "
            "`attnzoo.keras.load_keras_weights` ([keras-migration.md](../keras-migration.md))."
        )
    for source, targets in TARGETS.items():
        if spec.name in targets:
            lines.append(
                f"- Reference checkpoints: `attnzoo convert-checkpoint FILE --from {source} --model {spec.name}` "
                f"reads {SOURCES[source]} ([reference-checkpoints.md](../reference-checkpoints.md))."
            )
    for tag in spec.weights:
        full = f"{spec.name}.{tag}"
        lines.append(f"- Pretrained: [{_code(full)}](../{page_path(full, MODELS)})")  # tags are [a-z0-9_]
    return lines or ["This variant loads no other layout than its own state dict."]


def _applies(prop: str, conv: Any, layer: Any) -> str:
    """Why a property has nothing to check on this variant (the kit's own conditions), or ""."""
    self_attention = conv.name == "sequence_to_sequence"
    if prop in ("masked_values", "padding", "fully_masked") and not conv.has_mask:
        return f"its convention ({conv.name}) has no mask"
    if prop == "causal" and not (self_attention and getattr(layer, "causal", False)):
        return "checked on causal self-attention layers"
    if prop == "window" and not (self_attention and getattr(layer, "window", None) is not None):
        return "checked on layers built with a window"
    if prop == "incremental" and not (
        self_attention and getattr(layer, "causal", False) and hasattr(layer, "new_cache")
    ):
        return "checked on causal layers with new_cache()"
    if prop == "cross":
        takes = "context" in inspect.signature(layer.forward).parameters if hasattr(layer, "forward") else False
        plain = not getattr(layer, "causal", False) and getattr(layer, "window", None) is None
        if not (conv.name in ("sequence_to_sequence", "cross_attention") and takes and plain):
            return "checked on attention layers that take context="
    return ""


def _kit(spec: ModelSpec, conv: Any, layer: Any) -> list[str]:
    from attnzoo.testing import PROPERTIES

    built_in = spec.provider == "attnzoo"
    lines = [
        f"`attnzoo check {spec.name}` runs the conformance kit on this variant, with inputs built from its "
        "convention and its card's `example`"
        + ("; `tests/test_conformance.py` runs every property on every built-in variant in CI." if built_in else "."),
        "",
        "| property | promise | here |",
        "|---|---|---|",
    ]
    for name, prop in PROPERTIES.items():
        reason = _applies(name, conv, layer)
        if name in spec.exempt:
            status = f"exempt: {_text(spec.exempt[name])}"
        elif reason:
            status = f"nothing to check ({reason})"
        else:
            status = "checked" + (" (slow tier: `attnzoo check --slow`)" if prop.slow else "")
        lines.append(f"| {_code(name)} | {_text(prop.promise)} | {status} |")
    return lines


# MathML Core, which browsers draw without a script or a font from elsewhere: the elements and attributes a
# formula needs, nothing that links, styles or runs (latex2mathml passes \\href, \\style and the text of
# \\text{...} through as they are, so its output is rebuilt from these alone)
# fmt: off
_MATHML_TAGS = frozenset([
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "mfrac", "msqrt",
    "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom",
    "menclose", "semantics", "mmultiscripts", "mprescripts", "none",
])
_MATHML_ATTRIBUTES = frozenset([
    "display", "mathvariant", "stretchy", "fence", "form", "separator", "lspace", "rspace", "accent",
    "accentunder", "movablelimits", "largeop", "symmetric", "minsize", "maxsize", "linethickness",
    "columnalign", "rowspacing", "columnspacing", "displaystyle", "scriptlevel", "width", "height", "depth",
    "notation", "rowalign", "bevelled",
])
# fmt: on


class _MathML(HTMLParser):
    """latex2mathml's output rebuilt from the allowed elements and attributes, every text escaped; what it
    holds beyond them is listed in ``dropped``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.dropped: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _MATHML_TAGS:
            self.dropped.append(tag)
            return
        kept = []
        for key, value in attrs:
            if key in _MATHML_ATTRIBUTES and value is not None and re.fullmatch(r"[\w .%+-]*", value):
                kept.append(f' {key}="{value}"')
            elif key != "xmlns":  # the namespace is written by mathml() itself
                self.dropped.append(f"{tag} {key}=")
        self.out.append(f"<{tag}{''.join(kept)}>")

    def handle_endtag(self, tag: str) -> None:
        if tag in _MATHML_TAGS:
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if "\\" in data:  # a command latex2mathml does not know is kept as its raw text
            self.dropped.append(data)
        self.out.append(html.escape(data, quote=False))


def mathml(latex: str) -> str:
    """A card's LaTeX formula as display MathML, made when the site is built (no script and no network
    when the page is read); a formula latex2mathml cannot read, or one that names an element or attribute
    outside MathML Core's drawing set (a link, a style), is a ``ConfigError`` naming what to change."""
    try:
        from latex2mathml.converter import convert
    except ImportError as error:
        raise ConfigError(
            "the docs site draws each card's formula with latex2mathml: pip install -e '.[docs]'"
        ) from error
    try:
        converted = convert(latex, display="block")
    except Exception as error:  # noqa: BLE001 - latex2mathml raises its own and built-in types
        why = f"{type(error).__name__}: {error}"
        raise ConfigError(f"formula {latex!r} is not LaTeX latex2mathml reads: {why}") from None
    parser = _MathML()
    parser.feed(converted)
    parser.close()
    if parser.dropped:
        raise ConfigError(
            f"formula {latex!r} asks for {sorted(set(parser.dropped))}: a formula draws math only, with the "
            "commands latex2mathml knows (no links, styles or tags)"
        )
    return '<math xmlns="http://www.w3.org/1998/Math/MathML"' + "".join(parser.out).removeprefix("<math")


def _parts(latex: str) -> list[str]:
    """A formula cut at its top-level ``, \\quad`` (browsers do not break MathML lines): one line each."""
    parts, depth, start = [], 0, 0
    for found in re.finditer(r"[{}]|,?\s*\\quad\b", latex):
        if found.group() in "{}":
            depth += 1 if found.group() == "{" else -1
        elif depth == 0 and found.group().startswith(","):
            parts.append(latex[start : found.start()])
            start = found.end()
    return [part.strip() for part in [*parts, latex[start:]] if part.strip()]


def _formula(spec: ModelSpec, factory: Any) -> list[str]:
    """The card's formula drawn as MathML, then the factory's and its module's docstrings, folded."""
    if spec.formula:
        try:
            drawn = "".join(mathml(part) for part in _parts(spec.formula))
            lines = ["", f'<div class="formula">{drawn}</div>', ""]
        except ConfigError as error:
            log.warning(f"attnzoo site: {spec.name}: {error}")
            lines = ['!!! warning "This formula could not be drawn"', "", f"    {_text(error)}", ""]
    else:
        where = "[model-cards.md](../model-cards.md)"
        lines = [f"Its card states no formula (a card's `formula:` field, in LaTeX: {where}).", ""]
    if spec.fixed:  # a preset: what sets it apart from the core it is a card over
        fixed = ", ".join(f"{_code(key)} = {_code(json.dumps(thaw(value)))}" for key, value in spec.fixed.items())
        lines += [f"What sets it apart: its card fixes {fixed} on its factory.", ""]
    name = spec.factory if isinstance(spec.factory, str) else spec.factory_name
    lines += _pre(inspect.getdoc(factory) or "(none)", summary=f"The docstring of its factory, {name}")
    module = inspect.getmodule(factory)
    text = inspect.getdoc(module) if module is not None else None
    if text:
        lines += _pre(text, summary=f"The docstring of its module, {module.__name__}")  # type: ignore[union-attr]
    return lines


def _references(spec: ModelSpec) -> list[str]:
    lines = [f"Card: {_text(spec.reference or '-')}", ""]
    for entry in cited(spec.reference):
        link = f" {_link(entry.url, entry.url)}" if entry.url else ""
        lines += [f"- {_text(entry.title)} ({_text(entry.year)}).{link}"]
        lines += _pre(entry.bibtex, summary=f"BibTeX: {entry.key}")
    return lines


COST_SEQ = 64  # the base length of the cost table (it doubles to 128)
D_KEYS = ("embed_dim", "hidden_size", "dim", "input_size", "d_model", "channels", "hidden", "query_size")
L_KEYS = ("num_labels", "num_classes")


def _flops(name: str, config: Mapping[str, Any], seq: int) -> tuple[str, float | None]:
    """The kernel route and the GFLOP of one sample's forward (``attnzoo bench``'s own counting)."""
    from attnzoo.tools.bench import Case, build_step, route_and_flops

    step, _ = build_step(Case(name, dict(config), batch=1, seq=seq))
    return route_and_flops(step)


def _cost(spec: ModelSpec, example: Mapping[str, Any]) -> list[str]:
    """Counted FLOPs of one sample's forward at base sizes, and as each of T, d, L, w doubles."""
    seq = COST_SEQ
    axes: list[tuple[str, str | None, int]] = [("T (sequence)", None, seq)]
    d_key = next((k for k in D_KEYS if k in spec.config), None)
    if d_key:
        axes.append((f"d (`{d_key}`)", d_key, 32))
    axes += [(f"L (`{k}`)", k, 16) for k in L_KEYS if k in spec.config][:1]
    if "window" in spec.config and {**thaw(spec.config), **example}.get("window") is not None:
        axes.append(("w (`window`)", "window", 8))
    base = {**example, **{key: size for _, key, size in axes if key}}
    route, flops = _flops(spec.name, base, seq)
    if not flops:
        return [f"torch's FlopCounterMode counts no matrix product in one forward (route: {route})."]
    shown = ", ".join(f"{label.split()[0]} = {size}" for label, _, size in axes)
    lines = [
        f"Multiply-adds of matrix products, convolutions and attention kernels in one sample's forward, as "
        f"`torch.utils.flop_counter` counts them (recurrent cells are not counted), at {shown}, and as each "
        f"size doubles (x2: linear in it, x4: quadratic). Kernel route: {route}.",
        "",
        "| size | from → to | MFLOP | growth |",
        "|---|---|---|---|",
    ]
    for label, key, size in axes:
        try:
            bigger = _flops(spec.name, {**base, key: 2 * size} if key else base, seq if key else 2 * seq)[1]
        except Exception as error:  # noqa: BLE001 - a size the variant refuses is shown, not fatal
            lines.append(f"| {label} | {size} → {2 * size} | - | not built: {_text(error)} |")
            continue
        growth = f"x{bigger / flops:.2f}" if bigger else "-"
        lines.append(f"| {label} | {size} → {2 * size} | {flops * 1e3:.3g} → {(bigger or 0) * 1e3:.3g} | {growth} |")
    return lines


def _png(fig: Any) -> bytes:
    from attnzoo.tools.plots import pyplot

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        pyplot().close(fig)
    return buffer.getvalue()


def _pictures(name: str) -> tuple[list[str], dict[str, bytes]]:
    """The pictures of a variant (markdown and PNG bytes by path under variants/)."""
    from attnzoo.tools import plots

    found = plots.profile(name)
    stem = name.replace(":", "--")
    images, lines = {}, []
    keys = found.pattern.shape[1] if found.pattern is not None else 0
    padded = keys - found.length
    sample = f"on an input of {keys} positions" + (f" whose last {padded} are padding" if padded else "")
    captions = {
        "pattern": (
            f"Which keys each {found.rows.split()[0]} sees, measured {sample}: a key counts as seen when changing "
            "the input at that key alone changes that output."
            if found.pixels is None
            else "Which pixels the output at the centre pixel (x) depends on, measured on 8x8 images: a pixel "
            "counts when changing it alone changes that output."
        ),
        "weights": "The attention weights of one forward on the same input (`return_attention=True`)"
        + (
            f", one row per {found.weight_axes[0].split()[0]}"
            + (
                f". The {int((found.weights == 0).sum())} cells marked with a red dot are exactly zero: a masked "
                "or causal key, a key outside the window, or a key the normaliser gives no weight at all "
                "(sparsemax and entmax do; softmax never does)."
                if (found.weights == 0).any()
                else ". No weight is exactly zero."
            )
            if found.weights is not None
            else "."
        ),
        "distance": "The score e_ij - e_ii by distance j - i for a sequence of identical tokens (only position "
        "changes the score), read off the weights as log A_ij - log A_ii.",
    }
    for panel in ("pattern", "weights", "distance"):
        fig = plots.panel_figure(found, panel)
        if fig is None:
            continue
        images[f"img/{stem}-{panel}.png"] = _png(fig)
        lines += [f"![{name}: {panel}](img/{stem}-{panel}.png)", "", f"*{captions[panel]}*", ""]
    lines += [line for note in found.notes for line in (f"*{_text(note)}.*", "")]
    return lines, images


def _shown(config: Mapping[str, Any]) -> str:
    text = json.dumps(config)
    return _code(text) if len(text) <= 160 else "(the `example:` of its card)"


def _finite(layer: Any, conv: Any, example: Mapping[str, Any]) -> bool:
    """One forward on the convention's sample inputs (a lazy layer takes its sizes here, so its state dict
    has shapes after it); False when an output holds NaN or an infinity."""
    from attnzoo.conventions import sample_inputs

    args, kwargs = sample_inputs(layer, conv.for_config(example)).call_arguments()
    with torch.no_grad():
        out = layer.eval()(*args, **kwargs)
    tensors = [out] if isinstance(out, torch.Tensor) else [t for t in _leaves(out) if isinstance(t, torch.Tensor)]
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _checked_pictures(
    name: str, layer: Any, conv: Any, example: Mapping[str, Any]
) -> tuple[list[str], dict[str, bytes]]:
    """The pictures of a variant, or a warning in their place when its output is not finite."""
    if conv is None:
        return ["(its card names no calling convention)"], {}
    if not _finite(layer, conv, example):
        log.warning(f"attnzoo site: {name}'s output on its example input holds NaN or an infinity: no pictures")
        return [
            '!!! warning "No pictures: this layer outputs NaN or an infinity"',
            "",
            "    On its card's example config and the convention's sample input, the layer's output is not finite; "
            "pictures measured from it would mean nothing. `attnzoo check` says which property fails.",
            "",
        ], {}
    return _pictures(name)


def variant_page(name: str) -> tuple[str, dict[str, bytes]]:
    """The page of a registered variant (markdown) and its images (PNG bytes by path under variants/)."""
    from attnzoo.conventions import get_convention

    spec = model_info(name)
    example = thaw(spec.example)
    factory = _factory(spec)
    conv = get_convention(spec.convention) if spec.convention else None
    layer = create(name, config=example)
    pictures, images = _checked_pictures(name, layer, conv, example)
    source = Path(spec.source)
    card = source.relative_to(ROOT) if source.is_absolute() and source.is_relative_to(ROOT) else spec.source
    factory_name = spec.factory if isinstance(spec.factory, str) else spec.factory_name
    lines = [
        f"# `{name}`",
        "",
        _text(spec.summary),
        "",
        f"- kind: {spec.kind}; provider: {_code(spec.provider)}; factory: {_code(factory_name)}",
        f"- card: {_code(card)}",
        f"- convention: {_code(spec.convention or '-')}" + (f": {_text(conv.description)}" if conv else ""),
        "",
        "## Pictures",
        "",
        "Measured on the layer and drawn when this site was built, from the card's example config "
        f'{_shown(example)} with seeded weights; `attnzoo.plot_pattern("{name}", path, **config)` draws '
        "the same pictures, side by side, for any config.",
        "",
        *pictures,
        "## Options",
        "",
        f'Set on the card, in `config=` or as keywords: `attnzoo.create("{name}", ...)`.',
        "",
        *_options(spec, factory),
        "",
        "## Calling convention",
        "",
        f"{_code(spec.convention or '-')}: {_text(conv.description) if conv else '-'}. The conventions are "
        "described in [layers.md](../layers.md#calling-conventions).",
        "",
        "## Formula",
        "",
        *_formula(spec, factory),
        "## Cost",
        "",
        *(
            _cost(spec, example)
            if spec.convention != "keras_inputs"
            else [  # the card's example graph is a stand-in: a converted model's cost is its own graph's
                "A converted model costs what the Keras model it was converted from costs: "
                "`attnzoo bench` on the converted folder counts it; `model.code` prints the forward it runs."
            ]
        ),
        "",
        f"Measured: {measured_line(name) or 'no benchmark in benchmarks/results names this variant'}.",
        "",
        "## References",
        "",
        *_references(spec),
        "## Weights it loads",
        "",
        *_layout(spec, layer),
        "",
        "## Conformance kit",
        "",
        *(_kit(spec, conv, layer) if conv else ["Its card names no calling convention: the kit cannot build inputs."]),
        "",
    ]
    return "\n".join(lines), images


def _licence(text: str) -> str:
    """A licence line (escaped) whose ``docs/licenses/FILE`` becomes a link to the notice."""
    parts = re.split(r"docs/(licenses/[\w.\-]+)", text)  # odd parts: the notices' paths, [\w.-] only
    return "".join(f"[{part}](../{part})" if i % 2 else _text(part) for i, part in enumerate(parts))


def _example(name: str) -> tuple[list[str], dict[str, bytes]]:
    """The attention of the pretrained model on a real input, drawn as ``attnzoo predict --attention``."""
    from attnzoo.train.attention_map import attention_figure

    model = create(name, pretrained=True)
    kind = (getattr(model, "attnzoo_metadata", None) or {}).get("output")
    text = EXAMPLE_TEXTS.get(str(kind))
    if text is None:
        return [f"(no example input for a model whose output is {_text(repr(kind))})"], {}
    result = predict(model, text, return_attention=True)
    if result.attention is None:
        return [f"`attnzoo.predict` returns no attention for {_code(name)}."], {}
    path = f"img/{name.replace(':', '--')}-attention.png"
    shown = (
        " ".join(result.phonemes)
        if result.output == "g2p"
        else ", ".join(f"{label.name} {label.probability:.2f}" for label in result.labels)
    )
    lines = [
        f'`result = attnzoo.predict("{name}", "{text}", return_attention=True)` predicts: {_text(shown)}. '
        "`attnzoo.plot_attention(result, path)` draws its attention (the picture `attnzoo predict --attention` "
        "draws):",
        "",
        f"![{name}: attention on {text!r}]({path})",
        "",
    ]
    return lines, {path: _png(attention_figure(result, title=f"{name}: {text}"))}


def pretrained_page(name: str) -> tuple[str, dict[str, bytes]]:
    """The page of a pretrained model (``arch.tag``) and its images (PNG bytes by path under models/)."""
    arch, tag = name.rsplit(".", 1)
    spec = model_info(arch)
    w = spec.weights[tag]
    splits = " / ".join(f"{w.splits[k]:,}" if k in w.splits else "?" for k in ("train", "val", "test"))
    seeds = ", ".join(map(str, w.seed)) if isinstance(w.seed, list) else str(w.seed)
    example, images = _example(name)
    lines = [
        f"# `{name}`",
        "",
        f"[`{arch}`](../{page_path(arch)}) trained on {_text(w.dataset)}. {_text(spec.summary)}.",
        "",
        "| what | value |",
        "|---|---|",
        f"| data | {_text(w.data or '-')} |",
        f"| split (train / val / test) | {splits} |",
        f"| licence | {_licence(w.license) if w.license else '-'} |",
        f"| recipe | {_code('attnzoo train ' + w.recipe.rsplit('/', 1)[-1])} ({_code(w.recipe)}), "
        f"seed {_text(seeds)} |",
        f"| training | {_text(w.train_time or '-')} |",
        f"| file | {_code(('weights/' if w.file else '') + str(w.source))}, sha256 {_code(w.sha256)} |",
        f"| config | {_code(json.dumps(thaw(w.config)))} |",
        "",
        "## Metrics",
        "",
        "On the held-out test split; what each name means is docs/training.md's definition "
        "([Metrics](../training.md#metrics)).",
        "",
        "| metric | value | definition |",
        "|---|---|---|",
        *[f"| {_code(key)} | {_text(value)} | {_text(_define(key))} |" for key, value in w.metrics.items()],
        "",
        "## Baseline",
        "",
        (
            f"{_text(w.baseline.get('model', ''))}, on the same split: "
            + ", ".join(f"{_code(k)} {_text(v)}" for k, v in w.baseline.items() if k != "model")
            if w.baseline
            else "None recorded for this model."
        ),
        "",
        "## On a real example",
        "",
        *example,
        *(["## Notes", "", _text(w.notes), ""] if w.notes else []),
    ]
    return "\n".join(lines), images


def variants_index(names: list[str]) -> str:
    """The section page of the variants: one row per variant, with its pattern."""
    lines = [
        "# Variants",
        "",
        "Every registered variant, each with a page generated from its card and its layer when this site was "
        "built: pictures, options, formula, cost, references, weights, and the conformance kit's properties. "
        "[catalogue.md](../catalogue.md) is the same list as one table.",
        "",
    ]
    for kind, title in (("layer", "Layers"), ("model", "Models")):
        lines += [f"## {title}", "", "| variant | summary | pattern |", "|---|---|---|"]
        for name in names:
            spec = model_info(name)
            if spec.kind == kind:
                stem = name.replace(":", "--")
                picture = f"![{name}](img/{stem}-pattern.png){{ width=160 }}" if spec.convention else ""
                lines.append(f"| [`{name}`]({stem}.md) | {_text(spec.summary)} | {picture} |")
        lines.append("")
    return "\n".join(lines)


# -- mkdocs hooks ---------------------------------------------------------------------------------------------
def _nav_with_pages(nav: Any, variants: list[str], models: list[str]) -> Any:
    """mkdocs.yml's nav with the generated pages under ``variants/index.md`` and ``pretrained.md``."""
    if isinstance(nav, list):
        return [_nav_with_pages(item, variants, models) for item in nav]
    if isinstance(nav, dict):
        out = {}
        for title, value in nav.items():
            if value == f"{VARIANTS}/index.md":
                value = [value, *[{name: page_path(name)} for name in variants]]
            elif value == "pretrained.md":
                value = [value, *[{name: page_path(name, MODELS)} for name in models]]
            out[title] = _nav_with_pages(value, variants, models)
        return out
    return nav


def on_config(config: Any) -> Any:
    config["nav"] = _nav_with_pages(config["nav"], list_models(), list_models(pretrained=True))
    # docs/getting-started.md includes README.md: found next to mkdocs.yml, wherever mkdocs is run from; no
    # other file outside docs/ can be included (a file base path allows that file alone)
    snippets = config["mdx_configs"].setdefault("pymdownx.snippets", {})
    top = Path(config["config_file_path"]).resolve().parent
    snippets.update(base_path=[str(Path(config["docs_dir"]).resolve()), str(top / "README.md")])
    snippets.update(restrict_base_path=True, url_download=False)
    return config


def _generate(make: Callable[[str], tuple[str, dict[str, bytes]]], name: str) -> tuple[str, dict[str, bytes]]:
    try:
        return make(name)
    except Exception as error:  # noqa: BLE001 - one broken (plugin) variant must not hide the others' pages
        log.warning(f"attnzoo site: the page of {name} could not be generated: {type(error).__name__}: {error}")
        return f"# `{name}`\n\nThis page could not be generated: {_code(f'{type(error).__name__}: {error}')}\n", {}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages and their pictures to the site (nothing is written under docs/)."""
    import time

    from mkdocs.structure.files import File

    started = time.perf_counter()
    variants, models = list_models(), list_models(pretrained=True)
    pages: dict[str, str | bytes] = {f"{VARIANTS}/index.md": variants_index(variants)}
    for folder, names, make in ((VARIANTS, variants, variant_page), (MODELS, models, pretrained_page)):
        for name in names:
            text, images = _generate(make, name)
            pages[page_path(name, folder)] = text
            pages.update({f"{folder}/{path}": data for path, data in images.items()})
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    log.info(
        f"attnzoo site: {len(variants)} variant and {len(models)} model pages in {time.perf_counter() - started:.1f} s"
    )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """On the site, the names in the catalogue's and the pretrained table's rows link to their pages."""
    if page.file.src_uri not in ("catalogue.md", "pretrained.md"):
        return markdown
    variants, models = set(list_models()), set(list_models(pretrained=True))

    def link(match: re.Match[str]) -> str:
        name = match.group(1)
        target = page_path(name, MODELS) if name in models else page_path(name) if name in variants else None
        return f"| [`{name}`]({target}) |" if target else match.group(0)

    return re.sub(r"^\| `([a-z0-9_.:\-]+)` \|", link, markdown, flags=re.M)
