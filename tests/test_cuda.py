"""On CUDA, every variant computes what it computes on the CPU (forward and gradients), stays finite in
bfloat16, and the paths that only CUDA takes (the fused label core at any size) match the explicit one.

Skipped without a GPU; run on one with ``python -m pytest tests/test_cuda.py``. TF32 is switched off so
that the comparison is of the code, not of the tensor cores' rounding.
"""

from __future__ import annotations

import copy

import pytest
import torch

import attnzoo
from attnzoo.conventions import get_convention, sample_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

NAMES = [n for n in attnzoo.list_models(provider="attnzoo") if attnzoo.model_info(n).convention]
TOL = dict(atol=2e-4, rtol=2e-4)


@pytest.fixture(autouse=True)
def exact_matmuls():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _tensors(item)]
    return []


def _loss(out):
    return sum(t.float().sum() for t in _tensors(out) if t.is_floating_point() and t.requires_grad)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_forward_and_gradients_match_the_cpu(name):
    spec = attnzoo.model_info(name)
    convention = get_convention(spec.convention).for_config(spec.example)
    torch.manual_seed(0)
    cpu = attnzoo.create(name, config=dict(spec.example)).eval()
    sample = sample_inputs(cpu, convention)
    args, kwargs = sample.call_arguments()
    want = cpu(*args, **kwargs)  # also gives lazy layers their sizes
    gpu = copy.deepcopy(cpu).cuda()
    gpu_args, gpu_kwargs = convention.cast(sample, device="cuda").call_arguments()
    got = gpu(*gpu_args, **gpu_kwargs)
    for w, g in zip(_tensors(want), _tensors(got), strict=True):
        assert g.device.type == "cuda"
        torch.testing.assert_close(g.cpu(), w, **TOL)
    # gradients in training mode (cuDNN's RNN backward refuses eval mode), with dropout switched off
    for model in (cpu, gpu):
        model.train()
        for module in model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd):
                module.p = 0.0
            elif isinstance(getattr(module, "dropout", None), float):
                module.dropout = 0.0
    loss_cpu, loss_gpu = _loss(cpu(*args, **kwargs)), _loss(gpu(*gpu_args, **gpu_kwargs))
    if isinstance(loss_cpu, torch.Tensor):
        loss_cpu.backward()
        loss_gpu.backward()
        for (key, p), q in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
            if p.grad is not None:
                torch.testing.assert_close(q.grad.cpu(), p.grad, **TOL, msg=f"{name}: gradient of {key}")
    half = copy.deepcopy(cpu).to("cuda", torch.bfloat16)
    half_args, half_kwargs = convention.cast(sample, dtype=torch.bfloat16, device="cuda").call_arguments()
    with torch.no_grad():
        assert all(
            torch.isfinite(t.float()).all() for t in _tensors(half(*half_args, **half_kwargs)) if t.is_floating_point()
        ), name


def test_the_fused_label_core_matches_the_explicit_form_at_icd_scale():
    """On CUDA the label core always takes scaled_dot_product_attention; on the CPU small sizes take the
    explicit form. Same weights, 2,000 labels over 700 positions with padding: the same logits."""
    torch.manual_seed(0)
    head = attnzoo.create("laat", num_labels=2000, hidden_size=64, attention_size=32).eval()
    x = torch.randn(3, 700, 64)
    mask = torch.ones(3, 700, dtype=torch.bool)
    mask[1, 400:] = False
    mask[2, :] = False  # a sample with nothing to attend to
    with torch.no_grad():
        want = head(x, mask)
        got = copy.deepcopy(head).cuda()(x.cuda(), mask.cuda())
    torch.testing.assert_close(got.cpu(), want, **TOL)


@pytest.mark.parametrize("beam", [1, 4])
def test_g2p_decodes_the_same_on_cuda(beam):
    model = attnzoo.create("g2p_seq2seq.cmudict", pretrained=True).eval()
    letters = torch.tensor([[3, 4, 5, 6, 7, 0], [8, 9, 10, 11, 12, 13]])
    want, _ = model.generate(letters, beam_size=beam)
    got, _ = copy.deepcopy(model).cuda().generate(letters.cuda(), beam_size=beam)
    assert got.cpu().tolist() == want.tolist()


def test_attention_core_window_blocks_and_cache_on_cuda_match_the_cpu():
    from attnzoo.layers.attention import Attention

    torch.manual_seed(0)
    layer = Attention(64, num_heads=4, num_kv_heads=2, positions="rope", causal=True, window=16)
    x = torch.randn(2, 200, 64)
    keep = torch.ones(2, 200, dtype=torch.bool)
    keep[1, :30] = False
    on_gpu = copy.deepcopy(layer).cuda()
    torch.testing.assert_close(on_gpu(x.cuda(), keep.cuda()).cpu(), layer(x, keep), **TOL)  # the blocked path
    cache = on_gpu.new_cache(2)
    with torch.no_grad():
        steps = torch.cat(
            [on_gpu(x[:, t : t + 1].cuda(), keep[:, t : t + 1].cuda(), cache=cache) for t in range(40)], 1
        )
    torch.testing.assert_close(steps.cpu()[keep[:, :40]], layer(x[:, :40], keep[:, :40])[keep[:, :40]], **TOL)


@pytest.mark.parametrize(
    "path",
    [
        "tests/data/keras_hub_lm/gemma3/causal_lm.keras",  # rotary, windows of 4 and a global layer
        "tests/data/keras_hub_lm/bloom/causal_lm_preset",  # ALiBi
        "tests/data/keras_hub_models/gpt2_causal_lm.keras",  # learned positions, Keras's MultiHeadAttention
    ],
)
def test_a_converted_keras_hub_lm_decodes_on_its_cache_on_cuda_as_the_cpu_computes(path):
    """A prompt, then one token at a time on a DecodingCache, on CUDA: the CPU's uncached logits of the whole
    sequence; and generate runs on the device (its tokens' dtype and device)."""
    from attnzoo.keras import convert_keras_model
    from attnzoo.layers.kv_cache import DecodingCache

    from .conftest import ROOT

    model = convert_keras_model(ROOT / path).eval()
    vocabulary = model.graph["keras_hub_config"]["vocabulary_size"]
    ids = torch.randint(1, vocabulary, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(token_ids=ids, padding_mask=torch.ones_like(ids))
        on_gpu, cache, gpu_ids = copy.deepcopy(model).cuda(), DecodingCache(2), ids.cuda()
        steps = [on_gpu(token_ids=gpu_ids[:, :5], padding_mask=torch.ones_like(gpu_ids[:, :5]), cache=cache)]
        for i in range(5, 9):
            step = gpu_ids[:, i : i + 1]
            steps.append(on_gpu(token_ids=step, padding_mask=torch.ones_like(step), cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1).cpu(), want, **TOL)
    tokens = on_gpu.generate(gpu_ids[:, :5], 8)
    assert tokens.device.type == "cuda" and tokens.shape == (2, 13) and tokens.dtype == torch.int64


def test_training_in_bf16_on_the_gpu_scores_as_fp32_on_the_cpu_and_keeps_float32_weights(tmp_path):
    """train.precision=bf16 on this process's GPU (distributed.setup: cuda:LOCAL_RANK): the tiny WordNet
    preset within 0.02 test micro-F1 of fp32 on the CPU, its checkpoint written in float32."""
    import json

    from attnzoo.io.weights import read_weights
    from attnzoo.train import sources
    from attnzoo.train.recipe import load_recipe
    from attnzoo.train.trainer import train

    if not sources.available("wordnet_noun"):
        pytest.skip("WordNet (Debian wordnet-base) is not installed")
    reports = {}
    for name, overrides in (("cpu", ["train.device=cpu"]), ("gpu", ["train.device=auto", "train.precision=bf16"])):
        recipe = load_recipe("tiny_wordnet", ["task.limit=1500", *overrides])
        reports[name] = train(recipe, output=tmp_path / name, baseline=False, quiet=True)
    assert reports["gpu"]["device"] == "cuda:0"
    assert abs(reports["gpu"]["test"]["micro_f1"] - reports["cpu"]["test"]["micro_f1"]) <= 0.02
    record = json.loads((tmp_path / "gpu" / "checkpoint" / "trainer.json").read_text())
    path = tmp_path / "gpu" / "checkpoint" / record["folder"] / "model.safetensors"
    assert all(v.dtype == torch.float32 for v in read_weights(path, sha256=record["files"]["model"])[0].values())
