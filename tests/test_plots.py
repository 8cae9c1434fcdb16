"""attnzoo's pictures (attnzoo/tools/plots.py): ``plot_pattern`` shows exactly the keys a layer may see,
measured on the real layer, against patterns written out here; the score by distance is ALiBi's formula;
``plot_attention`` draws what ``attnzoo predict --attention`` draws; the names are public and light."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError, UnknownModelError

from .conftest import run_cli, run_python

pytest.importorskip("matplotlib")

from attnzoo.tools.plots import ALLOWED, HIDDEN, PADDING, pattern_figure, profile  # noqa: E402


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)


def _cells_in_png(figure, png: np.ndarray, rows: int, keys: int) -> np.ndarray:
    """bool [rows, keys]: which cells of the figure's first axes are drawn in the 'allowed' colour in the
    saved image (cell centres located through the axes' data-to-pixel transform)."""
    figure.canvas.draw()
    ax = figure.axes[0]
    height = png.shape[0]
    seen = np.zeros((rows, keys), dtype=bool)
    for i in range(rows):
        for j in range(keys):
            x, y = ax.transData.transform((j, i))
            colour = png[int(round(height - y)), int(round(x)), :3] * 255
            near_allowed = np.abs(colour - _rgb(ALLOWED)).max() < 8
            near_hidden = np.abs(colour - _rgb(HIDDEN)).max() < 8
            assert near_allowed or near_hidden, f"cell ({i}, {j}) has colour {colour}"
            seen[i, j] = near_allowed
    return seen


def _band(rows: int, keys: int, real: int, window: int, causal: bool) -> np.ndarray:
    """The allowed (i, j) pairs, written out: |i - j| <= w (j <= i when causal), real keys only."""
    allowed = np.zeros((rows, keys), dtype=bool)
    for i in range(rows):
        for j in range(real):
            allowed[i, j] = abs(i - j) <= window and (j <= i or not causal)
    return allowed


def test_the_picture_of_a_causal_window_layer_shows_exactly_the_allowed_pairs(tmp_path):
    """The README's call: gqa_rope_window with a window of 4, drawn on a padded input."""
    import matplotlib.image

    path = attnzoo.plot_pattern("gqa_rope_window", tmp_path / "p.png", window=4)
    figure = pattern_figure("gqa_rope_window", window=4)
    drawn = np.asarray(figure.axes[0].images[0].get_array()).astype(bool)
    rows, keys = drawn.shape
    expected = _band(rows, keys, keys - PADDING, window=4, causal=True)
    assert keys > 2 * 4 + 1, "the input is too short to show the band"
    np.testing.assert_array_equal(drawn, expected)
    png = matplotlib.image.imread(path)
    assert png.shape[:2] == tuple(int(v) for v in figure.canvas.get_width_height()[::-1])
    np.testing.assert_array_equal(_cells_in_png(figure, png, rows, keys), expected)


def test_a_layer_object_is_drawn_as_built_and_left_as_the_caller_had_it(tmp_path):
    layer = attnzoo.create("local_self", num_heads=2, window=2, embed_dim=8)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    attnzoo.plot_pattern(layer, tmp_path / "layer.png")
    assert layer.training and next(layer.parameters()).dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())
    found = profile(layer)
    rows, keys = found.pattern.shape
    np.testing.assert_array_equal(found.pattern, _band(rows, keys, keys - PADDING, window=2, causal=False))


def test_a_sparse_normaliser_shows_every_allowed_key_though_its_weights_are_exact_zeros():
    """sparsemax gives allowed keys exactly zero weight; the pattern is what the layer may see, not its support."""
    found = profile("relpos_sparsemax")
    rows, keys = found.pattern.shape
    expected = np.zeros((rows, keys), dtype=bool)
    expected[:, : keys - PADDING] = True
    np.testing.assert_array_equal(found.pattern, expected)
    assert ((found.weights == 0) & found.pattern[None]).any(), "no allowed key got a zero weight"


def test_exact_zeros_are_marked_and_label_attention_is_drawn_per_label():
    """Each cell of a weights picture whose weight is exactly 0 carries a dot (and the title says so); the
    rows of label attention are labels."""
    from attnzoo.tools.plots import weights_figure

    found = profile("sparsemax", num_heads=1)
    ax = weights_figure(found).axes[0]
    dots = [line for line in ax.lines if line.get_marker() == "."]
    assert "dot: exactly 0" in ax.get_title() and len(dots) == 1
    marked = sorted(zip(dots[0].get_ydata().tolist(), dots[0].get_xdata().tolist(), strict=True))
    assert marked == sorted(map(tuple, np.argwhere(found.weights[0] == 0).tolist())) and marked
    labels = weights_figure(profile("labelwise", num_labels=3)).axes[0]
    assert labels.get_ylabel() == "label" and labels.get_title().startswith("each label's attention weights")


def test_alibi_scores_by_distance_are_the_papers_slopes():
    """e_ij - e_ii = -m_h |j - i| with m_h = 2^(-8 (h + 1) / H) for H a power of two (Press et al. 2022)."""
    found = profile("alibi_self", num_heads=4)
    delta, scores = found.distance
    slopes = np.array([2.0 ** (-8.0 * (h + 1) / 4) for h in range(4)])
    assert len(delta) > 8 and (delta < 0).any() and (delta > 0).any()
    np.testing.assert_allclose(scores, -slopes[:, None] * np.abs(delta)[None, :], atol=1e-9)


def test_an_image_block_shows_the_pixels_the_centre_pixel_reads():
    """Coordinate attention gates a pixel by its row and its column; squeeze-and-excitation by the whole image."""
    cross = profile("coord_attn").pixels
    side = cross.shape[0]
    expected = np.zeros_like(cross)
    expected[side // 2, :] = True
    expected[:, side // 2] = True
    np.testing.assert_array_equal(cross, expected)
    assert profile("se").pixels.all()


def test_what_cannot_be_drawn_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="attnzoo.create"):
        attnzoo.plot_pattern(torch.nn.Linear(2, 2), tmp_path / "x.png")
    with pytest.raises(ConfigError, match="registered name or a layer"):
        attnzoo.plot_pattern(123, tmp_path / "x.png")
    with pytest.raises(ConfigError, match="config keys go with a name"):
        attnzoo.plot_pattern(attnzoo.create("mha", embed_dim=8, num_heads=2), tmp_path / "x.png", window=3)
    with pytest.raises(UnknownModelError):
        attnzoo.plot_pattern("no_such_variant", tmp_path / "x.png")
    with pytest.raises(ConfigError, match="window"):
        attnzoo.plot_pattern("local_self", tmp_path / "x.png", window=0)


@pytest.mark.slow
def test_plot_attention_draws_from_python_what_the_cli_draws(tmp_path):
    import matplotlib.image

    name, text = "bilstm_labelwise.wordnet", "a large wild cat with a striped coat"
    proc = run_cli("predict", name, text, "--attention", str(tmp_path / "cli.png"))
    assert proc.returncode == 0, proc.stderr
    result = attnzoo.predict(name, text, return_attention=True)
    attnzoo.plot_attention(result, tmp_path / "python.png", title=f"{name}: {text}")
    # the door on the result, where a Python user looks after predict
    assert result.plot_attention(tmp_path / "method.png", title=f"{name}: {text}") == tmp_path / "method.png"
    cli, python, method = (matplotlib.image.imread(tmp_path / f) for f in ("cli.png", "python.png", "method.png"))
    assert cli.shape == python.shape and cli.shape[0] > 100
    np.testing.assert_array_equal(cli, python)
    np.testing.assert_array_equal(cli, method)


def test_the_result_s_picture_draws_texts_as_written(tmp_path, monkeypatch):
    """``result.plot_attention`` labels its rows and columns as the CLI does: the label names with their
    probabilities, the tokens, each ``$`` escaped so that matplotlib draws it rather than reading mathtext."""
    import matplotlib.image

    import attnzoo.train.attention_map as attention_map
    from attnzoo.train.predict import Label, Prediction

    labels = [Label("a", "cost $5", 0.9, True), Label("b", "dog $7", 0.2, False)]
    attention = torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.5, 0.5]])
    tokens = ["$5", "and", "$7"]
    result = Prediction("x", "multilabel", tokens, labels=labels, threshold=0.5, attention=attention, rows=["a", "b"])
    figures = []
    drawing = attention_map.attention_figure

    def kept(*args, **kwargs):
        figures.append(drawing(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(attention_map, "attention_figure", kept)
    path = result.plot_attention(tmp_path / "labels.png", title="price $x$")
    ax = figures[0].axes[0]
    # written out by hand: each name, two spaces, its probability; every $ escaped
    assert [t.get_text() for t in ax.get_yticklabels()] == [r"cost \$5  0.90", r"dog \$7  0.20"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [r"\$5", "and", r"\$7"]
    assert ax.get_title() == r"price \$x\$"
    assert matplotlib.image.imread(path).shape[0] > 100


def test_the_picture_functions_are_public_and_import_attnzoo_stays_light():
    proc = run_python(
        "import sys, attnzoo\n"
        "names = dir(attnzoo)\n"
        "assert {'plot_pattern', 'plot_attention', 'predict'} <= set(names) & set(attnzoo.__all__), names\n"
        "assert 'matplotlib' not in sys.modules and 'torch' not in sys.modules\n"
        "assert callable(attnzoo.plot_pattern) and 'matplotlib' not in sys.modules\n"
    )
    assert proc.returncode == 0, proc.stderr
