"""sparsemax and entmax15 against the entmax package (Peters, Niculae & Martins's reference code, its
full sort), forward and backward, on the rows where a threshold search could go wrong: long rows (the
candidates path), near-uniform rows whose support is wider than any top-k, ties at the threshold, fully
masked rows, huge magnitudes, half precision."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnzoo.layers.normalizers import normalize

entmax = pytest.importorskip("entmax")

KINDS = ["sparsemax", "entmax15"]


def _reference(kind: str, scores: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The entmax package's full sort in the scores' dtype, masked keys at -inf; a row with none kept is
    zeros."""
    z = scores if keep is None else scores.masked_fill(~keep, float("-inf"))
    empty = torch.isinf(z).all(-1, keepdim=True)
    out = getattr(entmax, kind)(torch.where(empty, 0.0, z), dim=-1)
    return torch.where(empty, 0.0, out)


def _rows(kind: str, length: int) -> torch.Tensor:
    """[6, length] rows: random, spread, near-uniform (support > 64), ties at the threshold, all equal,
    one huge score."""
    gen = torch.Generator().manual_seed(length)
    rows = [torch.randn(length, generator=gen), 4 * torch.randn(length, generator=gen)]
    rows.append(1e-3 * torch.randn(length, generator=gen))  # near-uniform: nearly every key in the support
    tie = torch.full((length,), -2.0 if kind == "entmax15" else -1.0)
    tie[0] = 0.0  # the rest sit exactly at the threshold (sparsemax's tau = -1; entmax15's tau = -1 on z/2)
    rows += [tie, torch.zeros(length), torch.randn(length, generator=gen).index_fill(0, torch.tensor([3]), 50.0)]
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length", [16, 300, 1024])
def test_weights_and_gradients_equal_the_entmax_package(kind, length, dtype):
    """In the same dtype, to its rounding (in float32 the tied rows' keys at the threshold get weights
    of 1e-7 from it in both)."""
    scores = _rows(kind, length).to(dtype).requires_grad_()
    upstream = torch.randn(scores.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    got = normalize(scores, None, kind=kind)
    (grad,) = torch.autograd.grad(got, scores, upstream)
    reference = scores.detach().clone().requires_grad_()
    want = _reference(kind, reference, None)
    (want_grad,) = torch.autograd.grad(want, reference, upstream)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, want_grad)
    if dtype == torch.float64:  # the same support: the exact zeros of the full sort
        assert torch.equal(got > 1e-12, want > 1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_masked_rows_and_fully_masked_rows(kind):
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(3, 4, 200, generator=gen, dtype=torch.float64) * 3
    keep = torch.rand(3, 1, 200, generator=gen) > 0.4
    keep[1] = False  # nothing to attend to
    keep[2, :, :150] = False  # few keys left, all inside one stretch
    got = normalize(scores, keep, kind=kind)
    torch.testing.assert_close(got, _reference(kind, scores, keep.expand_as(scores)))
    assert (got[1] == 0).all() and (got[~keep.expand_as(got)] == 0).all()
    scores.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: normalize(t, keep[:, :, :40], kind=kind), (scores[:, :, :40],))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scale", [1e4, 1e30])
def test_huge_scores_on_long_rows(kind, scale):
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(4, 512, generator=gen) * scale
    got = normalize(scores, None, kind=kind)
    torch.testing.assert_close(got.sum(-1), torch.ones(4))
    want = _reference(kind, scores.double(), None)
    if scale < 1e30:
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-4)
    else:  # float32 and float64 round 1e30-sized scores differently; both are one-hot
        assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_long_rows_with_empty_rows_give_no_nan(kind, dtype):
    scores = torch.randn(2, 3, 128, dtype=dtype).requires_grad_()
    keep = torch.ones(2, 3, 128, dtype=torch.bool)
    keep[0, 1] = False
    got = normalize(scores, keep, kind=kind)
    (grad,) = torch.autograd.grad(got.float().square().sum(), scores)
    assert got.dtype == dtype and torch.isfinite(got).all() and torch.isfinite(grad).all()
    assert (got[0, 1] == 0).all()
    torch.testing.assert_close(got.float()[keep.any(-1)].sum(-1), torch.ones(5), atol=1e-2, rtol=0)


@settings(max_examples=15, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    length=st.integers(1, 120),
    levels=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_rows_of_few_distinct_values_match_the_full_sort(kind, length, levels, seed):
    """Many ties (scores from a few levels), at lengths on both sides of the chunked search."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (3, length), generator=gen).double() / 2
    torch.testing.assert_close(normalize(scores, None, kind=kind), _reference(kind, scores, None))


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_last_axis(kind):
    scores = torch.randn(2, 64, 3, dtype=torch.float64)
    torch.testing.assert_close(
        normalize(scores, None, dim=1, kind=kind), _reference(kind, scores.transpose(1, 2), None).transpose(1, 2)
    )


@pytest.mark.parametrize("kind", KINDS)
def test_overwrite_works_in_the_callers_scores_only_when_it_may(kind):
    """``overwrite=True`` (the attention core's chunks, which made the scores) gives the same weights, with
    the mask given apart or already in the scores, and leaves the scores rewritten; without it, or where
    autograd records the scores, they stay as given."""
    scores = _rows(kind, 1024)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(2)) > 0.3
    want = _reference(kind, scores, keep)
    given = scores.clone()
    torch.testing.assert_close(normalize(given, keep, kind=kind), want)
    assert torch.equal(given, scores)
    scratch = scores.masked_fill(~keep, float("-inf"))
    with torch.no_grad():
        got = normalize(scratch, None, kind=kind, overwrite=True)
    torch.testing.assert_close(got, want)
    assert not torch.equal(scratch.nan_to_num(), scores.masked_fill(~keep, float("-inf")).nan_to_num())
    with torch.no_grad():  # the mask given beside the scratch is written into it
        torch.testing.assert_close(normalize(scores.clone(), keep, kind=kind, overwrite=True), want)
    recorded = scores.clone().requires_grad_()
    normalize(recorded, keep, kind=kind, overwrite=True).sum().backward()
    assert torch.equal(recorded.detach(), scores) and recorded.grad is not None
