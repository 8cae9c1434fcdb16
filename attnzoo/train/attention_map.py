"""A prediction's attention drawn as a heat map (``attnzoo predict --attention out.png``,
``result.plot_attention(path)``, ``attnzoo.plot_attention(result, path)``: one code path for the three):
rows are labels or phonemes, columns the tokens or letters.

The drawing reads a prediction through :class:`Attended`, the fields it draws, so that this module needs
nothing of :mod:`attnzoo.train.predict` (whose ``Prediction.plot_attention`` calls it)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from attnzoo.errors import ConfigError
from attnzoo.io.figures import pyplot

if TYPE_CHECKING:
    import torch

__all__ = ["Attended", "attention_figure", "plot_attention", "as_written"]


class ShownLabel(Protocol):
    """A label row of the drawing: its name, probability and side of the threshold."""

    @property
    def name(self) -> str: ...
    @property
    def probability(self) -> float: ...
    @property
    def above_threshold(self) -> bool: ...


class Attended(Protocol):
    """What a heat map is drawn from (``attnzoo.train.predict.Prediction`` is one): ``attention``
    [rows, tokens], what each row is, the tokens, the output kind, and for labels their scores and the
    decision threshold."""

    @property
    def output(self) -> str: ...
    @property
    def tokens(self) -> list[str]: ...
    @property
    def rows(self) -> list[str]: ...
    @property
    def labels(self) -> Sequence[ShownLabel]: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def attention(self) -> torch.Tensor | None: ...


def attention_figure(prediction: Attended, title: str = ""):
    """A heat map of a prediction's attention with a colour bar: rows are labels (their probability beside
    them, a dashed line under the last one at or above the threshold) or phonemes, columns the tokens (or
    letters). Texts are drawn as written (never as mathtext). Returns the matplotlib figure."""
    if prediction.attention is None:
        raise ConfigError("this prediction has no attention: call predict(..., return_attention=True)")
    plt = pyplot()
    weights = prediction.attention.detach().float().numpy()
    rows = [as_written(row) for row in prediction.rows]
    if prediction.output != "g2p" and prediction.labels and len(rows) == len(prediction.labels):
        rows = [f"{as_written(label.name)}  {label.probability:.2f}" for label in prediction.labels]
    height = max(2.4, 0.45 * len(rows) + 1.6)
    width = max(5.0, 0.5 * len(prediction.tokens) + 4.0)
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(weights, aspect="auto", cmap="viridis", vmin=0.0)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="attention weight")
    tokens = [as_written(token) for token in prediction.tokens]
    ax.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    if prediction.output == "multilabel" and prediction.labels:
        above = sum(label.above_threshold for label in prediction.labels)
        if 0 < above < len(prediction.labels):
            ax.axhline(above - 0.5, color="white", linewidth=1.5, linestyle="--")
            ax.text(
                len(prediction.tokens) - 0.5,
                above - 0.5,
                f"threshold {prediction.threshold:.2f} ",
                color="white",
                fontsize=7,
                ha="right",
                va="bottom",
            )
    default = "phoneme-to-letter alignment" if prediction.output == "g2p" else "attention over the text"
    lines = textwrap.wrap(title or default, width=max(30, int(width * 9)))
    ax.set_title("\n".join(as_written(line) for line in lines), fontsize=9)
    fig.tight_layout()
    return fig


def as_written(text: str) -> str:
    """A user's text for a matplotlib label, drawn as written: every ``$`` escaped, so that "$5 and a dog
    $7" is not read as mathtext. Escaping holds whatever the settings (``text.usetex``, a tick label
    matplotlib makes anew), where turning parsing off on each label does not."""
    return text.replace("$", r"\$")


def plot_attention(result: Attended, path: str | Path, title: str = "") -> Path:
    """Draw what ``attnzoo.predict(..., return_attention=True)`` returned into ``path`` (.png, .pdf, .svg):
    the picture ``attnzoo predict --attention`` draws."""
    fig = attention_figure(result, title)
    path = Path(path)
    plt = pyplot()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
