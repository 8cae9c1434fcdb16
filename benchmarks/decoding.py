"""Cached decoding of docs/decoding.md's language model, against x-transformers, transformers' Llama and the
bare computation, in one run.

    python benchmarks/decoding.py [--rounds 7] [--tokens 256] [--quick] [--write-docs]

The model is the page's ``DecoderLM``, taken from the page itself (its first runnable code block), at
64 wide, 2 layers, 4 heads, RoPE, a vocabulary of 256: greedy generation of ``--tokens`` new tokens after
a 16-token prompt, each step through the attention layers' KV caches. Before timing, the script checks
that the cached generation gives the tokens of the uncached one (the whole prefix recomputed each step),
and the same of each library it compares with.

* **against x-transformers**: ``AutoregressiveWrapper(TransformerWrapper(Decoder(...))).generate(...,
  temperature=0, cache_kv=True)`` at the same sizes (dim 64, depth 2, 4 heads of 16, rotary positions
  on all 16 dimensions, RMSNorm, a 4x GELU feed-forward, the same key/value heads: the same parameter
  count, which the script prints), each library through its own generation loop and its own cache.
  Tokens per second, and the speed-up (x-transformers' time over ours, the median of the per-round
  ratios; > 1: attnzoo is faster).
* **against transformers' Llama**: ``LlamaForCausalLM(LlamaConfig(...)).generate(..., do_sample=False,
  use_cache=True)`` with random weights at the same sizes (hidden 64, 2 layers, 4 heads of 16, the same
  key/value heads, RoPE base 10000, RMSNorm, vocabulary 256, an untied head) and a gated MLP of
  intermediate size 172, whose 3 x 64 x 172 weights are as many as the page's 4x GELU MLP's 33,088
  weights and biases allow (the parameter counts are in the JSON): transformers' own generation loop
  and its own dynamic cache, exactly ``--tokens`` new tokens (``min_new_tokens``, no end token).
* **against one token's compute through SDPA**: the same weights decoded by a loop written directly in
  torch, with nothing but each token's arithmetic: RMSNorm, the projections, RoPE from tables computed
  once (x·cos + partner(x)·sin, as attnzoo computes it), the new keys and values written into
  preallocated buffers, one ``F.scaled_dot_product_attention`` over them, the MLP and the head. It
  generates the same tokens (the script checks), so the ratio of the two per-step times is what the
  model's layers, checks and cache bookkeeping add to the arithmetic.

Times are medians of rounds in which the implementations alternate, on one thread (a step of this model
is too small to split between threads); writes
benchmarks/results/decoding.json and, with --write-docs, the table into docs/performance.md. A library that
is not installed is left out; without x-transformers the results go to decoding-without-x-transformers.json
and the docs are not written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    ROOT,
    markdown_table,
    paired_speedup,
    steady_allocator,
    transformers_greedy,
    update_doc_section,
    write_json,
)

from attnzoo.tools import bench  # noqa: E402

PAGE = ROOT / "docs" / "decoding.md"
VOCAB, DIM, DEPTH, HEADS, PROMPT = 256, 64, 2, 4, 16
# One thread: a decoding step of a 64-wide model is a chain of operations on a few thousand numbers,
# too small to split; on a shared machine a second thread only adds the wait for it to be scheduled.
THREADS = 1


def page_namespace() -> dict:
    """The names docs/decoding.md's first runnable Python block defines (``DecoderLM``, ``pick``)."""
    text = PAGE.read_text(encoding="utf-8")
    code = re.search(r"<!-- runnable -->\n```python\n(.*?)^```", text, re.S | re.M)
    if code is None:
        raise SystemExit(f"{PAGE}: no runnable Python block")
    namespace: dict = {}
    exec(compile(code.group(1), str(PAGE), "exec"), namespace)
    return namespace


def ours(kv_heads: int | None) -> torch.nn.Module:
    torch.manual_seed(0)
    return page_namespace()["DecoderLM"](VOCAB, dim=DIM, depth=DEPTH, heads=HEADS, kv_heads=kv_heads).eval()


def theirs(kv_heads: int | None, max_len: int):
    from x_transformers import AutoregressiveWrapper, Decoder, TransformerWrapper

    torch.manual_seed(0)
    net = TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=max_len,
        use_abs_pos_emb=False,
        attn_layers=Decoder(
            dim=DIM,
            depth=DEPTH,
            heads=HEADS,
            attn_dim_head=DIM // HEADS,
            attn_kv_heads=kv_heads or HEADS,
            rotary_pos_emb=True,
            rotary_emb_dim=DIM // HEADS,  # every dimension of a head turned, as attnzoo's RoPE does
            use_rmsnorm=True,
            verbose=False,
        ),
    )
    return AutoregressiveWrapper(net).eval()


# Llama's gated MLP has 3 * DIM * I weights (no biases); the page's MLP 2 * DIM * 4 * DIM weights and 5 * DIM
# biases: I = 172 gives 33,024 against 33,088, the closest count (and the same multiply-adds per token within 1 %).
LLAMA_INTERMEDIATE = round((8 * DIM * DIM + 5 * DIM) / (3 * DIM))


def llama(kv_heads: int | None, max_len: int):
    """transformers' LlamaForCausalLM at the page model's sizes, random weights (nothing downloaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=DIM,
        intermediate_size=LLAMA_INTERMEDIATE,
        num_hidden_layers=DEPTH,
        num_attention_heads=HEADS,
        num_key_value_heads=kv_heads or HEADS,
        max_position_embeddings=max_len,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def sdpa_generate(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding of ``model`` (a DecoderLM) written directly in torch: one token's arithmetic per step,
    keys and values in preallocated buffers, one F.scaled_dot_product_attention per layer."""
    batch, length = prompt.shape
    total = length + new_tokens
    d = DIM // HEADS
    inv = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float32) * 2 / d)
    angles = torch.arange(total, dtype=torch.float32)[:, None] * inv  # RoPE tables, computed once
    # spread over the head (the sine signed by pair): a rotation is then x * cos + partner(x) * sin, four
    # operations, the fewest RoPE takes (attnzoo computes it so too)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
    sin = torch.cat([-angles.sin(), angles.sin()], dim=-1)
    layers = []
    for block in model.blocks:
        attn = block.attn
        g = attn.num_kv_heads
        weights = (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight)
        keys, values = torch.zeros(batch, g, total, d), torch.zeros(batch, g, total, d)
        layers.append((block, weights, g, keys, values))

    def rope(x: torch.Tensor, at: slice) -> torch.Tensor:
        return x * cos[at] + x.roll(d // 2, dims=-1) * sin[at]

    def forward(tokens: torch.Tensor, start: int) -> torch.Tensor:
        x = model.embed(tokens)
        steps = tokens.shape[1]
        at = slice(start, start + steps)
        for block, (wq, wk, wv, wo), g, keys, values in layers:
            h = F.rms_norm(x, (DIM,), block.attn_norm.weight, block.attn_norm.eps)
            q = rope(F.linear(h, wq).view(batch, steps, HEADS, d).transpose(1, 2), at)
            keys[:, :, at] = rope(F.linear(h, wk).view(batch, steps, g, d).transpose(1, 2), at)
            values[:, :, at] = F.linear(h, wv).view(batch, steps, g, d).transpose(1, 2)
            out = F.scaled_dot_product_attention(
                q,
                keys[:, :, : start + steps],
                values[:, :, : start + steps],
                is_causal=steps > 1,
                enable_gqa=g != HEADS,
            )
            x = x + F.linear(out.transpose(1, 2).reshape(batch, steps, DIM), wo)
            x = x + block.mlp(F.rms_norm(x, (DIM,), block.mlp_norm.weight, block.mlp_norm.eps))
        return model.head(F.rms_norm(x[:, -1], (DIM,), model.norm.weight, model.norm.eps))

    with torch.no_grad():
        tokens = prompt
        logits = forward(prompt, 0)
        for position in range(length, total):
            next_token = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if position + 1 < total:
                logits = forward(next_token, position)
    return tokens


def measure(batch: int, kv_heads: int | None, tokens: int, rounds: int, min_run_time: float) -> dict:
    model = ours(kv_heads)
    try:
        reference = theirs(kv_heads, PROMPT + tokens)
    except ImportError:  # x-transformers not installed: attnzoo against the bare loop only
        reference = None
    try:
        hf = llama(kv_heads, PROMPT + tokens)
    except ImportError:
        hf = None
    prompt = torch.randint(0, VOCAB, (batch, PROMPT), generator=torch.Generator().manual_seed(0))
    ours_out = model.generate(prompt, tokens)
    if not torch.equal(ours_out, model.generate(prompt, tokens, use_cache=False)):
        raise SystemExit("attnzoo's cached generation differs from its uncached forward's greedy tokens")
    bare_out = sdpa_generate(model, prompt, tokens)
    if not torch.equal(ours_out, bare_out):
        raise SystemExit("the SDPA loop does not generate the model's tokens: it is not the same computation")
    if reference is not None:
        cached = reference.generate(prompt, tokens, temperature=0.0, cache_kv=True)
        if not torch.equal(cached, reference.generate(prompt, tokens, temperature=0.0, cache_kv=False)):
            raise SystemExit("x-transformers' cached generation differs from its uncached one")
    if hf is not None and not torch.equal(
        transformers_greedy(hf, prompt, tokens), transformers_greedy(hf, prompt, tokens, use_cache=False)
    ):
        raise SystemExit("transformers' cached Llama generation differs from its uncached one")
    steps = {
        "attnzoo": lambda: model.generate(prompt, tokens),
        "sdpa": lambda: sdpa_generate(model, prompt, tokens),
    }
    if reference is not None:
        steps["x-transformers"] = lambda: reference.generate(prompt, tokens, temperature=0.0, cache_kv=True)
    if hf is not None:
        steps["transformers"] = lambda: transformers_greedy(hf, prompt, tokens)
    times = bench.time_alternating(
        steps,
        rounds=rounds,
        min_run_time=min_run_time,
        threads=THREADS,
    )
    median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    row = {
        "batch": batch,
        "kv_heads": kv_heads or HEADS,
        "new_tokens": tokens,
        "parameters": {
            "attnzoo": sum(p.numel() for p in model.parameters()),
            "x-transformers": None if reference is None else sum(p.numel() for p in reference.parameters()),
            "transformers": None if hf is None else sum(p.numel() for p in hf.parameters()),
        },
        "llama_intermediate_size": LLAMA_INTERMEDIATE,
        "tokens_per_s": {name: batch * tokens / t for name, t in median.items()},
        "step_ms": {name: t / tokens * 1e3 for name, t in median.items()},
        "speedup_over_x_transformers": (
            None if reference is None else paired_speedup(times["x-transformers"], times["attnzoo"])
        ),
        "speedup_over_transformers": None if hf is None else paired_speedup(times["transformers"], times["attnzoo"]),
        "step_over_sdpa": 1 / paired_speedup(times["sdpa"], times["attnzoo"]),
    }
    print(row, flush=True)
    return row


REFERENCES = (("x-transformers", "speedup_over_x_transformers"), ("transformers", "speedup_over_transformers"))


def docs_table(out: dict) -> str:
    """The table of every row: tokens/s and attnzoo's speed-up over each library measured, the step over the
    SDPA loop's."""
    present = [(lib, key) for lib, key in REFERENCES if all(r[key] is not None for r in out["rows"])]
    rows = []
    for r in out["rows"]:
        row = [r["batch"], f"{HEADS} / {r['kv_heads']}", f"{r['tokens_per_s']['attnzoo']:,.0f}"]
        for lib, key in present:
            row += [f"{r['tokens_per_s'][lib]:,.0f}", f"**{r[key]:.2f}x**"]
        row += [f"{r['step_ms']['attnzoo']:.3f}", f"{r['step_ms']['sdpa']:.3f}", f"{r['step_over_sdpa']:.2f}"]
        rows.append(row)
    names = {"x-transformers": "x-transformers", "transformers": "transformers Llama"}
    header = (
        f"{out['machine']}; docs/decoding.md's `DecoderLM` (dim {DIM}, {DEPTH} layers, RoPE, "
        f"vocabulary {VOCAB}), greedy, {out['rows'][0]['new_tokens']} new tokens after a {PROMPT}-token prompt, "
        f"medians of {out['rounds']} alternating rounds (`{out['command']}`)."
    )
    columns = ["batch", "heads / kv heads", "attnzoo tokens/s"]
    for lib, _ in present:
        columns += [f"{names[lib]} tokens/s", f"attnzoo speed-up over {names[lib]}"]
    columns += ["attnzoo ms/step", "SDPA loop ms/step", "attnzoo / SDPA loop"]
    return header + "\n\n" + markdown_table(columns, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=256, help="new tokens per generation")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 32 tokens, 2 rounds")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    steady_allocator()
    tokens, rounds = (32, 2) if args.quick else (args.tokens, args.rounds)
    min_run_time = 0.05 if args.quick else 1.0
    out = {
        "machine": f"torch {torch.__version__}, {THREADS} thread, float32, CPU",
        "rounds": rounds,
        "rows": [
            measure(1, None, tokens, rounds, min_run_time),
            measure(1, 2, tokens, rounds, min_run_time),
            measure(8, None, tokens, rounds, min_run_time),
        ],
    }
    # without x-transformers installed: its own file, and no docs table (the page's table compares with it)
    alone = any(r["speedup_over_x_transformers"] is None for r in out["rows"])
    out["command"] = " ".join(["python benchmarks/decoding.py", *sys.argv[1:]])
    name = "decoding-quick" if args.quick else ("decoding-without-x-transformers" if alone else "decoding")
    write_json(HERE / "results" / f"{name}.json", out)
    text = docs_table(out)
    if args.write_docs and not args.quick and not alone:
        update_doc_section(ROOT / "docs" / "performance.md", "decoding", text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
