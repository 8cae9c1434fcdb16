"""docs/decoding.md's decoder language model, taken from the page as a reader copies it: it learns the
page's toy task and generates what the page says; cached generation equals generation that recomputes
the whole prefix at every step (tokens, greedy and sampled, and every step's logits), with grouped
heads and a sliding window too; a left-padded prompt generates what it generates alone; sampling keeps
to the top k."""

from __future__ import annotations

import pytest
import torch

from .conftest import ROOT
from .test_docs_commands import runnable_blocks

PAGE = ROOT / "docs" / "decoding.md"


def _page_code() -> list[str]:
    return [code for _, lang, code, _, _ in runnable_blocks(PAGE) if lang == "python"]


@pytest.fixture(scope="module")
def page():
    """The names the page's first block defines (DecoderLM, Block, pick)."""
    namespace: dict = {}
    exec(compile(_page_code()[0], str(PAGE), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def trained(page):
    """The page's second block run as it is: the model it trains."""
    namespace = dict(page)
    exec(compile(_page_code()[1], str(PAGE), "exec"), namespace)
    return namespace["model"]


@pytest.mark.slow
def test_the_page_trains_a_model_that_counts(trained):
    prompt = torch.tensor([[5, 6, 7, 8]])
    assert trained.generate(prompt, 24)[0].tolist() == [(5 + i) % 32 for i in range(28)]
    assert trained.generate(prompt, 24, use_cache=False)[0].tolist() == [(5 + i) % 32 for i in range(28)]


def _model(page, seed=0, **kwargs):
    torch.manual_seed(seed)
    return page["DecoderLM"](50, dim=32, depth=2, heads=4, **kwargs).eval()


@pytest.mark.parametrize("options", [{}, {"kv_heads": 2, "window": 3}, {"kv_heads": 1}])
def test_every_cached_step_gives_the_logits_of_the_causal_forward(page, options):
    model = _model(page, **options)
    tokens = torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)  # [B, T, V]: each position sees only its prefix (causal)
        cache = model.new_cache(3)
        steps = [model(tokens[:, :4], cache=cache)]  # a prompt of four, then one token at a time
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    if options.get("window"):  # the window keeps only its last w entries
        assert all(len(c) == options["window"] for c in cache)
    kv_heads = options.get("kv_heads", 4)  # grouped heads: the cache holds only the shared key/value heads
    assert all(c.keys.shape[1] == kv_heads and c.values.shape[1] == kv_heads for c in cache)


@pytest.mark.parametrize("options", [{}, {"kv_heads": 2, "window": 4}])
def test_cached_generation_equals_uncached_greedy_and_sampled(page, options):
    model = _model(page, **options).double()  # float64: a sample cannot flip on a rounding difference
    prompt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(2))
    greedy = model.generate(prompt, 20)
    assert torch.equal(greedy, model.generate(prompt, 20, use_cache=False))
    for seed in range(3):
        sampled = model.generate(prompt, 20, temperature=1.0, generator=torch.Generator().manual_seed(seed))
        again = model.generate(
            prompt, 20, temperature=1.0, generator=torch.Generator().manual_seed(seed), use_cache=False
        )
        assert torch.equal(sampled, again)
    assert not torch.equal(sampled, greedy)  # sampling at temperature 1 is not the argmax every time


def test_a_left_padded_prompt_generates_what_it_generates_alone(page):
    model = _model(page, kv_heads=2).double()
    short, long = torch.tensor([[7, 3, 9]]), torch.tensor([[1, 2, 3, 4, 5, 6]])
    padded = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = padded.new_ones(padded.shape, dtype=torch.bool)
    mask[0, :3] = False
    together = model.generate(padded, 8, prompt_mask=mask)
    assert together[0, 3:].tolist() == model.generate(short, 8)[0].tolist()
    assert together[1].tolist() == model.generate(long, 8)[0].tolist()
    assert torch.equal(together, model.generate(padded, 8, prompt_mask=mask, use_cache=False))


def test_sampling_keeps_to_the_top_k(page):
    logits = torch.randn(64, 20, generator=torch.Generator().manual_seed(3))
    allowed = logits.topk(3, dim=-1).indices
    for seed in range(5):
        picked = page["pick"](logits, 1.5, 3, torch.Generator().manual_seed(seed))
        assert (allowed == picked[:, None]).any(-1).all()
    assert torch.equal(page["pick"](logits, 1.0, 1), logits.argmax(-1))
    assert torch.equal(page["pick"](logits), logits.argmax(-1))
