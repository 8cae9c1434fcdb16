"""Pictures of attention, drawn by attnzoo from the real layers: the one place where attnzoo draws.

    attnzoo.plot_pattern("gqa_rope_window", "p.png", window=4)    # your own configuration
    attnzoo.plot_attention(attnzoo.predict(name, text, return_attention=True), "a.png")

A variant's pictures are *measured* on a small padded input (the last ``PADDING`` positions of the
drawn sample are padding), never redrawn from a formula:

- **pattern**: which keys each query (or label, or output row) may see. Key j counts as seen by row i
  when changing the input at j alone (a random change of the features, or another token id) changes
  output row i; a layer that ignores padding, the future or keys beyond its window shows it here.
  Image blocks ([B, C, H, W]) show instead which pixels the output at the centre pixel depends on.
- **weights**: the attention weights of one forward (``return_attention=True``), up to four heads.
- **distance** (position schemes: ``alibi``, ``rope``, ``relpos``): the score e_ij - e_ii against the
  distance j - i, read off the weights of a sequence of identical tokens (so only position changes the
  score) as log A_ij - log A_ii, through a softmax copy of the layer.

Names are built from the card's ``example`` config with your keys over it, seeded, in float64.
"""

from __future__ import annotations

import copy
import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnzoo.core import create, model_info
from attnzoo.errors import ConfigError
from attnzoo.io.figures import pyplot

if TYPE_CHECKING:
    from attnzoo.conventions import Convention, Sample

__all__ = [
    "AttentionProfile",
    "profile",
    "pattern_figure",
    "weights_figure",
    "distance_figure",
    "panel_figure",
    "plot_pattern",
    "pyplot",
    "PADDING",
]

PADDING = 3  # padded positions at the end of the drawn sample (when the convention has a mask)
SEQ = 10  # positions of the drawn sample; a windowed layer gets room for its band
DISTANCE_SEQ = 16
MAX_HEADS = 4  # weight panels drawn
POSITION_SCHEMES = ("alibi", "rope", "relpos")
ALLOWED, HIDDEN = "#1f4e79", "#eeeeee"


@dataclass
class AttentionProfile:
    """What the pictures of one layer show, measured on it.

    ``pattern`` bool [rows, keys]: row i depends on key j; ``length``: keys at and after it are padding;
    ``weights`` [panels, rows, keys] or None; ``distance`` (Δ [n], scores [heads, n]) or None;
    ``pixels`` bool [H, W] (image blocks: what the centre pixel's output depends on) or None."""

    name: str
    convention: str
    config: dict[str, Any]
    rows: str  # what a row is: "query i", "label", "output row", ...
    pattern: np.ndarray | None = None
    length: int = 0
    padded_rows: bool = False  # rows at and after ``length`` are padded queries
    weights: np.ndarray | None = None
    panels: list[str] = field(default_factory=list)
    weight_axes: tuple[str, str] = ("row", "key j")
    distance: tuple[np.ndarray, np.ndarray] | None = None
    positions: str = "none"
    pixels: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


# -- building what is drawn ----------------------------------------------------------------------------
def _layer(name_or_layer: Any, config: Mapping[str, Any]) -> tuple[torch.nn.Module, str, str, dict[str, Any]]:
    """(a float64 eval-mode copy of the layer, its name, its convention, its config)."""
    from attnzoo.conventions import model_config
    from attnzoo.core.spec import thaw

    if isinstance(name_or_layer, str):
        spec = model_info(name_or_layer)
        merged = {**thaw(spec.example), **dict(config)}
        layer = create(name_or_layer, config=merged)
        return layer.eval().double(), name_or_layer, spec.convention, model_config(layer)
    if not isinstance(name_or_layer, torch.nn.Module):
        raise ConfigError(f"plot_pattern draws a registered name or a layer, got {type(name_or_layer).__name__}")
    if config:
        raise ConfigError("config keys go with a name (plot_pattern('gqa', path, window=4)); a layer is drawn as built")
    made = getattr(name_or_layer, "attnzoo_config", None)
    name = made.get("name") if isinstance(made, Mapping) else None
    convention = model_info(name).convention if name else getattr(name_or_layer, "convention", "")
    if not convention:
        raise ConfigError(
            f"plot_pattern does not know how to call this {type(name_or_layer).__name__}: pass a layer made "
            "by attnzoo.create (or its registered name)"
        )
    layer = copy.deepcopy(name_or_layer).eval().double()  # the caller's layer keeps its mode and dtype
    return layer, str(name or type(name_or_layer).__name__), convention, model_config(name_or_layer)


def _sample(layer: torch.nn.Module, conv: Convention, config: Mapping[str, Any], seq: int, length: int) -> Sample:
    from attnzoo.conventions import sample_inputs

    gen = torch.Generator().manual_seed(0)
    return sample_inputs(layer, conv, config=config, batch=1, seq=seq, queries=5, lengths=[length], generator=gen)


def _row_axis(conv: Convention, output: torch.Tensor) -> tuple[int | None, str]:
    """The axis of output 0 (batch excluded) whose entries are the rows of the pattern, and their name."""
    dims = conv.outputs[0]
    if conv.keyed_output and "keys" in dims:
        return dims.index("keys") - 1, "query i"
    if "queries" in dims:
        return dims.index("queries") - 1, "query i"
    if dims == ("batch", "*"):
        return 0, "label"
    return (0, "output row") if output.dim() >= 3 else (None, "output")


def _step(shape: torch.Size, gen: torch.Generator, sign: int, dtype: torch.dtype) -> torch.Tensor:
    """A random change of size 3 to 6 in the direction ``sign``: large enough to leave a ReLU's dead zone."""
    return sign * 3.0 * (torch.rand(shape, generator=gen, dtype=dtype) + 1.0)


def _perturbed_copies(conv: Convention, sample: Sample, gen: torch.Generator, sign: int) -> dict[str, torch.Tensor]:
    """Inputs of a batch of keys + 1: copy 0 as sampled, copy j + 1 with every masked input changed at key j
    (features moved by a random step; token ids replaced by other ids)."""
    seq = sample.sizes["keys"]
    tensors = {}
    for slot in conv.slots:
        base = sample.tensors[slot.name]
        batch_axis = slot.axes.index("batch")
        copies = base.repeat_interleave(seq + 1, dim=batch_axis)
        if slot.masked:
            key_axis = slot.axes.index("keys")
            for j in range(seq):
                view = copies.narrow(batch_axis, j + 1, 1).narrow(key_axis, j, 1)
                if slot.kind == "tokens":
                    vocab = sample.sizes[slot.vocab]
                    step = torch.randint(1, max(vocab - 1, 2), view.shape, generator=gen)
                    view.copy_(1 + (view.clamp(min=1) - 1 + step) % max(vocab - 1, 1))
                else:
                    view.add_(_step(view.shape, gen, sign, view.dtype))
        tensors[slot.name] = copies
    return tensors


def _softmax_copy(layer):
    """The layer itself, or a copy with a softmax normaliser: the scores are the same, and softmax gives
    every allowed key a weight (sparsemax's exact zeros would hide keys that are allowed)."""
    if getattr(layer, "normalizer", "softmax") == "softmax":
        return layer
    clone = copy.deepcopy(layer)
    clone.normalizer = "softmax"
    return clone


def _pattern(layer, conv: Convention, sample: Sample) -> tuple[np.ndarray, str]:
    """bool [rows, keys]: does output row i change when the input at key j alone changes?"""
    layer = _softmax_copy(layer)
    gen = torch.Generator().manual_seed(1)
    seen, rows = None, "output"
    for sign in (1, -1):  # both ways: a change that one side of a ReLU hides, the other shows
        copies = sample.with_tensors(**_perturbed_copies(conv, sample, gen, sign))
        args, kwargs = copies.call_arguments()
        with torch.no_grad():
            outputs, _ = conv.split(layer(*args, **kwargs), return_attention=False)
        out = outputs[0].double()
        axis, rows = _row_axis(conv, out[0])
        per_row = out.unsqueeze(1) if axis is None else out.movedim(axis + 1, 1)  # [keys + 1, rows, ...]
        changed = _changed(per_row.reshape(*per_row.shape[:2], -1))
        seen = changed if seen is None else seen | changed
    assert seen is not None
    return seen.T.numpy(), rows


def _changed(outputs: torch.Tensor) -> torch.Tensor:
    """bool [copies - 1, rows]: which rows of each perturbed copy (``outputs`` [copies, rows, n], copy 0 the
    reference) differ from the reference beyond float64 rounding."""
    change = (outputs[1:] - outputs[:1]).abs().amax(-1)
    return change > 1e-9 * outputs[:1].abs().amax(-1).clamp(min=1.0)


def _weights(layer, conv: Convention, sample: Sample) -> tuple[np.ndarray | None, list[str], tuple[str, str]]:
    if conv.attention == "none":
        return None, [], ("", "")
    args, kwargs = sample.call_arguments(return_attention=True)
    with torch.no_grad():
        _, weights = conv.split(layer(*args, **kwargs), return_attention=True)
    if not isinstance(weights, torch.Tensor):
        return None, [], ("", "")
    w = weights[0].double()
    if w.shape[-1] < 2:  # one weight per sample (a pooled summary): nothing to draw
        return None, [], ("", "")
    dims = conv.weights or ()
    named = len(dims) >= 2 and dims[-1] == "keys"
    if w.dim() == 1:
        w = w[None]
    # a row is a query, a label (label attention: one row of weights per label) or an output row
    row = "query i" if named and dims[-2] in ("keys", "queries") else "label" if "labels" in conv.name else "row"
    axes = (row, "key j" if named else "axis 2")
    heads = w.reshape(-1, *w.shape[-2:])
    panels = [f"head {h}" for h in range(heads.shape[0])] if heads.shape[0] > 1 else ["weights"]
    return heads[:MAX_HEADS].numpy(), panels[:MAX_HEADS], axes


def _distance(layer, conv: Convention, config: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(Δ = j - i, the score e_ij - e_ii of each head) for identical tokens, on the row that sees most keys."""
    if getattr(layer, "positions", None) not in POSITION_SCHEMES or conv.attention == "none":
        return None
    clone = _softmax_copy(layer)  # log-weights are then the scores, up to a constant per row
    sample = _sample(clone, conv, config, DISTANCE_SEQ, DISTANCE_SEQ)
    same = {}
    for slot in conv.slots:
        tensor = sample.tensors[slot.name]
        if slot.kind == "float":
            for axis in ("keys", "queries"):
                if axis in slot.axes:
                    i = slot.axes.index(axis)
                    tensor = tensor.narrow(i, 0, 1).expand_as(tensor).clone()
        same[slot.name] = tensor
    args, kwargs = sample.with_tensors(**same).call_arguments(return_attention=True)
    with torch.no_grad():
        _, weights = conv.split(clone(*args, **kwargs), return_attention=True)
    if not isinstance(weights, torch.Tensor) or weights.dim() < 3:
        return None
    w = weights[0].double()
    w = w.reshape(-1, *w.shape[-2:])  # [heads, queries, keys]
    seen = (w > 0).any(0).sum(-1)  # keys each query row sees
    middle = (w.shape[1] - 1) / 2
    row = max(range(w.shape[1]), key=lambda i: (int(seen[i]), -abs(i - middle)))
    keys = torch.nonzero((w[:, row] > 0).any(0)).flatten()
    logs = w[:, row, keys].log()
    own = w[:, row, row].log() if row < w.shape[-1] and bool((w[:, row, row] > 0).all()) else logs.amax(-1)
    return (keys - row).numpy(), (logs - own[:, None]).numpy()


def _pixels(layer, conv: Convention, config: Mapping[str, Any]) -> np.ndarray:
    """bool [H, W]: pixels whose change alone changes the output at the centre pixel, on any of three
    random images whose channels have different means (a block whose ReLUs are all off for one image
    still shows what it reads on another)."""
    side, images = 8, 3
    gen = torch.Generator().manual_seed(2)
    sample = conv.sample(config, batch=images, seq=side, sizes={"height": side}, dtype=torch.float64, generator=gen)
    seen = torch.zeros(side * side, 1, dtype=torch.bool)
    offsets = 2.0 * torch.randn(images, sample.sizes["channels"], 1, 1, generator=gen, dtype=torch.float64)
    for x in (sample.tensors["x"] + offsets).split(1):  # channels of different means: a gate has inputs to read
        for sign in (1, -1):
            copies = x.repeat(side * side + 1, 1, 1, 1)
            for p in range(side * side):
                copies[p + 1, :, p // side, p % side] += _step(x.shape[1:2], gen, sign, x.dtype)
            with torch.no_grad():
                out = layer(copies)[:, :, side // 2, side // 2]
            seen |= _changed(out[:, None])
    return seen.reshape(side, side).numpy()


def profile(name_or_layer: Any, **config: Any) -> AttentionProfile:
    """Measure what :func:`plot_pattern` draws: the pattern, one forward's weights and, for position
    schemes, the score by distance (see the module's doc for how each is read off the layer)."""
    from attnzoo.conventions import get_convention

    with torch.random.fork_rng(devices=[]):  # the same pictures every time, the caller's random state kept
        torch.manual_seed(0)
        layer, name, convention, built = _layer(name_or_layer, config)
        return _measure(layer, name, get_convention(convention).for_config(built), built)


def _measure(layer, name: str, conv: Convention, built: dict[str, Any]) -> AttentionProfile:
    convention = conv.name
    found = AttentionProfile(name, convention, built, rows="output", positions=str(getattr(layer, "positions", "none")))
    if conv.name == "image_to_image":
        found.pixels = _pixels(layer, conv, built)
        found.notes.append(f"{name} returns no attention weights (convention {convention})")
        if found.pixels.sum() == 1:
            found.notes.append(
                "as built (before any training), the output at the centre pixel depends on that pixel alone"
            )
        return found
    window = getattr(layer, "window", None)
    seq = SEQ if not isinstance(window, int) else min(max(SEQ, 2 * window + 6), 40)
    length = seq - PADDING if conv.has_mask else seq
    sample = _sample(layer, conv, built, seq, length)
    args, kwargs = sample.call_arguments()
    with torch.no_grad():
        layer(*args, **kwargs)  # a lazy layer takes its sizes here, before any copy of it is made
    found.pattern, found.rows = _pattern(layer, conv, sample)
    found.length, found.padded_rows = length, conv.keyed_output
    found.weights, found.panels, found.weight_axes = _weights(layer, conv, sample)
    if found.weights is None:
        found.notes.append(f"{name} returns no attention weights (convention {convention})")
    found.distance = _distance(layer, conv, built)
    return found


# -- drawing -------------------------------------------------------------------------------------------
def _grid(ax, rows: int, keys: int) -> None:
    ax.set_xticks(range(keys))
    ax.set_yticks(range(rows))
    ax.tick_params(labelsize=7)
    ax.set_xticks(np.arange(-0.5, keys, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)


def _mark_padding(ax, found: AttentionProfile, keys: int, rows: int, xlabel: str) -> None:
    """A dashed line where the padding starts (and the padded queries, when rows are positions)."""
    if found.length and found.length < keys:
        ax.axvline(found.length - 0.5, color="#c0392b", linestyle="--", linewidth=1.2)
        xlabel += f"  (padding from {found.length}, right of the dashed line)"
        if found.padded_rows and rows == keys:
            ax.axhline(found.length - 0.5, color="#c0392b", linestyle="--", linewidth=1.2)
    ax.set_xlabel(xlabel, fontsize=8)


def draw_pattern(ax, found: AttentionProfile) -> None:
    """The pattern on ``ax``: one cell per (row, key), dark where the row depends on the key."""
    from matplotlib.colors import ListedColormap

    if found.pixels is not None:
        ax.imshow(found.pixels.astype(float), cmap=ListedColormap([HIDDEN, ALLOWED]), vmin=0, vmax=1)
        side = found.pixels.shape[0]
        ax.plot([side // 2], [side // 2], marker="x", color="#c0392b", markersize=9)
        _grid(ax, *found.pixels.shape)
        ax.set_xlabel("pixel column", fontsize=8)
        ax.set_ylabel("pixel row", fontsize=8)
        ax.set_title("pixels the centre pixel's output depends on", fontsize=9, parse_math=False)
        return
    assert found.pattern is not None
    rows, keys = found.pattern.shape
    ax.imshow(found.pattern.astype(float), cmap=ListedColormap([HIDDEN, ALLOWED]), vmin=0, vmax=1, aspect="auto")
    _grid(ax, rows, keys)
    _mark_padding(ax, found, keys, rows, "key j")
    ax.set_ylabel(found.rows, fontsize=8)
    ax.set_title(f"which keys each {found.rows.split()[0]} sees", fontsize=9, parse_math=False)


def draw_weights(ax, found: AttentionProfile, panel: int = 0, figure=None) -> None:
    assert found.weights is not None
    weights = found.weights[panel]
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    _grid(ax, *weights.shape)
    _mark_padding(ax, found, weights.shape[1], weights.shape[0], found.weight_axes[1])
    ax.set_ylabel(found.weight_axes[0], fontsize=8)
    zeros = np.argwhere(weights == 0)  # sparse normalisers and masks give exact zeros: marked, not just dark
    if len(zeros):
        ax.plot(zeros[:, 1], zeros[:, 0], linestyle="none", marker=".", markersize=3, color="#e74c3c")
    per = "each label's " if found.weight_axes[0] == "label" else ""
    head = f", {found.panels[panel]}" if found.panels[panel].startswith("head") else ""
    marked = " (dot: exactly 0)" if len(zeros) else ""
    ax.set_title(f"{per}attention weights{head}{marked}", fontsize=9, parse_math=False)
    if figure is not None:
        figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)


def draw_distance(ax, found: AttentionProfile) -> None:
    assert found.distance is not None
    delta, scores = found.distance
    for h, curve in enumerate(scores[:8]):
        ax.plot(delta, curve, marker="o", markersize=3, linewidth=1.2, label=f"head {h}")
    from matplotlib.ticker import MaxNLocator

    ax.axvline(0, color="#888888", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("distance j - i", fontsize=8)
    ax.set_ylabel("score e_ij - e_ii", fontsize=8)
    ax.set_title(f"{found.positions}: score by distance (identical tokens)", fontsize=9, parse_math=False)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    if len(scores) > 1:
        ax.legend(fontsize=7)


def _cell_size(found: AttentionProfile) -> tuple[float, float]:
    grid = found.pattern if found.pattern is not None else found.pixels
    rows, keys = grid.shape if grid is not None else (8, 8)
    return max(3.2, 0.32 * keys + 1.6), max(2.6, 0.3 * rows + 1.5)


def pattern_figure(name_or_layer: Any, **config: Any):
    """A figure of the pattern, then (when measured) the weights of head 0 and the score by distance;
    ``figure.axes[0]`` is the pattern. ``name_or_layer`` may be an :class:`AttentionProfile`."""
    found = name_or_layer if isinstance(name_or_layer, AttentionProfile) else profile(name_or_layer, **config)
    plt = pyplot()
    panels = ["pattern"] + (["weights"] if found.weights is not None else []) + (["distance"] * bool(found.distance))
    width, height = _cell_size(found)
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels) + 0.6 * (len(panels) - 1), height))
    axes = np.atleast_1d(axes)
    for ax, panel in zip(axes, panels, strict=True):
        if panel == "pattern":
            draw_pattern(ax, found)
        elif panel == "weights":
            draw_weights(ax, found, 0, fig)
        else:
            draw_distance(ax, found)
    shown = ", ".join(f"{k}={v}" for k, v in found.config.items() if v is not None)
    fig.suptitle("\n".join(textwrap.wrap(f"{found.name}: {shown}", 110)), fontsize=8, parse_math=False)
    fig.tight_layout()
    return fig


def panel_figure(found: AttentionProfile, panel: str):
    """One picture of ``found`` alone: ``"pattern"``, ``"weights"`` (every head drawn, up to four) or
    ``"distance"``; None when the layer has nothing of that kind to draw."""
    if panel == "weights":
        return weights_figure(found) if found.weights is not None else None
    if panel == "distance":
        return distance_figure(found) if found.distance is not None else None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_cell_size(found))
    draw_pattern(ax, found)
    fig.tight_layout()
    return fig


def weights_figure(found: AttentionProfile):
    """The weights of a real forward, one panel per head (at most four, two to a row)."""
    assert found.weights is not None
    plt = pyplot()
    count = len(found.panels)
    columns = min(count, 2)
    rows = math.ceil(count / columns)
    width, height = _cell_size(found)
    fig, axes = plt.subplots(rows, columns, figsize=((width + 0.8) * columns, height * rows), squeeze=False)
    for panel, ax in enumerate(axes.flat):
        if panel < count:
            draw_weights(ax, found, panel, fig)
        else:
            ax.set_visible(False)
    fig.tight_layout()
    return fig


def distance_figure(found: AttentionProfile):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    draw_distance(ax, found)
    fig.tight_layout()
    return fig


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (any format matplotlib writes: .png, .pdf, .svg) and close it."""
    plt = pyplot()
    path = Path(path)
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def plot_pattern(name_or_layer: Any, path: str | Path, **config: Any) -> Path:
    """Draw a layer's attention pattern (which keys each query sees), the weights of a real forward and,
    for position schemes, the score by distance, into ``path``: a registered name built from its card's
    example config with ``config`` over it (``plot_pattern("gqa_rope_window", "p.png", window=4)``), or a
    layer made by ``attnzoo.create``. The input is small and padded (its last 3 positions)."""
    return save(pattern_figure(name_or_layer, **config), path)
