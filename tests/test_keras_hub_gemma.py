"""keras-hub's Gemma (1, 2) and Gemma 3 (text) convert without keras-hub: GemmaBackbone / GemmaCausalLM and
Gemma3Backbone / Gemma3CausalLM, their decoder blocks (soft caps, sliding windows, post norms, q/k norms, the
two rope wavelengths) and Gemma's RMSNormalization (``1 + scale``).

The fixtures (tests/data/keras_hub_lm/<family>/, made by tests/keras_hub_lm_fixtures.py with keras-hub 0.32,
whose docstring says what each key holds): ``gemma`` (Gemma 1: 4 query heads on 2 key/value heads, head_dim
8), ``gemma2`` (post norms, attention soft cap 3, final soft cap 1, a window of 4 in the even layers),
``gemma3`` (6 layers: five local with a window of 4 and wavelength 10 000, one global at 1 000 000, q/k
norms). Keras's outputs are on a right-padded and a left-padded batch; the converted model must agree within
1e-5 at every position of both. A query that has no key left (a left-padded position; in a windowed layer,
a right-padded one more than w - 1 past its row's last token) is zeros in Keras, and so here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ExportError, WeightsError
from attnzoo.keras import convert_keras_model, to_transformers
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.hub_gemma import convert_rms_normalization
from attnzoo.keras.registry import Refused

from .conftest import ROOT, run_without_keras

DATA = ROOT / "tests" / "data" / "keras_hub_lm"
FAMILIES = ("gemma", "gemma2", "gemma3")
TOLERANCE = 1e-5


@cache
def expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / family / "expected.npz"))


@cache
def converted(family: str, file: str):
    return convert_keras_model(DATA / family / file)


def predict(model, family: str, side: str) -> np.ndarray:
    e = expected(family)
    inputs = {key: torch.from_numpy(e[f"{side}/{key}"]) for key in ("token_ids", "padding_mask")}
    with torch.no_grad():
        return model(**inputs).float().numpy()  # by keyword, as Keras names the inputs


def close(got: np.ndarray, want: np.ndarray, what: str, tolerance: float = TOLERANCE) -> float:
    assert got.shape == want.shape, what
    worst = float(np.abs(got - want).max())
    print(f"{what}: max difference {worst:.3g}")  # shown with -s: the measurements the docs and reports quote
    assert worst <= tolerance, f"{what}: max difference {worst:.3g}"
    return worst


def variant(tmp_path: Path, family: str, file: str, **changes) -> Path:
    """A copy of the family's ``file`` (a .keras archive) whose backbone's constructor arguments are changed."""
    out = tmp_path / f"{family}_{'_'.join(changes)}.keras"
    with zipfile.ZipFile(DATA / family / file) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                inner = config["config"].get("backbone", config)["config"]
                inner.update(changes)
                data = json.dumps(config).encode()
            target.writestr(item, data)
    return out


# -- the fast tier: every position of both batches, decoding, the options, the refusals -------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_backbone_gives_keras_s_states_at_every_position(family, side):
    assert (expected(family)[f"{side}/padding_mask"] == 0).any()  # the padding is exercised
    close(predict(converted(family, "backbone.keras"), family, side), expected(family)[f"{side}/backbone"], family)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_causal_lm_gives_keras_s_logits_at_every_position(family, side):
    close(predict(converted(family, "causal_lm.keras"), family, side), expected(family)[f"{side}/logits"], family)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decoding_gives_keras_s_32_tokens(family, use_cache):
    """Keras's greedy tokens (the plain forward each step) and keras-hub's own cached generate, which agree
    here; attnzoo's with its KV cache (a windowed layer's holding its w latest keys) and without."""
    e = expected(family)
    np.testing.assert_array_equal(e["generate/tokens"], e["greedy/tokens"])
    prompt = torch.from_numpy(e["greedy/prompt"])
    tokens = converted(family, "causal_lm.keras").generate(prompt, 32, use_cache=use_cache)
    assert torch.equal(tokens[:, :5], prompt.long())
    np.testing.assert_array_equal(tokens[:, 5:].numpy(), e["greedy/tokens"])


def test_a_windowed_layer_s_cache_keeps_its_latest_w_keys_and_a_global_one_all():
    """Gemma 3's local layers (window 4) hold the 4 latest keys after a 5-token prompt and one step; its global
    layer holds all 6: no later query can reach the ones a window forgets."""
    from attnzoo.keras.converters.hub_gemma import HubGemmaDecoder
    from attnzoo.layers.kv_cache import DecodingCache

    model = converted("gemma3", "causal_lm.keras")
    prompt = torch.from_numpy(expected("gemma3")["greedy/prompt"]).long()
    blocks = [m for m in model.modules() if isinstance(m, HubGemmaDecoder)]
    cache = DecodingCache(prompt.shape[0])
    with torch.no_grad():
        for tokens in (prompt, prompt[:, :1]):
            model(token_ids=tokens, padding_mask=torch.ones_like(tokens), cache=cache)
    held = [cache.keys_values(block, prompt.shape[0]) for block in blocks]
    assert [len(kv) for kv in held] == [4, 4, 4, 4, 4, 6]
    assert [kv.length for kv in held] == [6] * 6


def test_rotary_scaling_divides_every_frequency_as_keras_hub_s_linear_rope():
    """keras-hub's RotaryEmbedding(scaling_factor=f) turns position p of pair j by p · θ_j / f: one head of 4
    at position 3 with f = 8, θ_j = wavelength^(-2j/4)."""
    from attnzoo.keras.converters.hub_rotary import rotate

    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 1, 4)
    angles = [3 * t / 8 for t in (1.0, 100.0**-0.5)]
    c, s = [np.cos(a) for a in angles], [np.sin(a) for a in angles]
    want = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 3 * c[0] + 1 * s[0], 4 * c[1] + 2 * s[1]]
    np.testing.assert_allclose(rotate(x, 3, 100.0, divisor=8.0).flatten().numpy(), want, atol=1e-6)


@pytest.mark.parametrize(
    ("family", "key", "changes"),
    [
        ("gemma2", "nocap", {"final_logit_soft_cap": None, "attention_logit_soft_cap": None}),
        ("gemma2", "nowindow", {"use_sliding_window_attention": False}),
        ("gemma3", "nowindow", {"use_sliding_window_attention": False}),
    ],
)
def test_the_same_weights_without_soft_caps_or_window_give_keras_s_logits_without_them(tmp_path, family, key, changes):
    """Keras's logits of a model built without the option (and the same weights): the option is what the
    converted model computes, not a constant of it (Gemma 3 without its window: every layer global, at
    wavelength 1 000 000)."""
    model = convert_keras_model(variant(tmp_path, family, "causal_lm.keras", **changes))
    want = expected(family)[f"{key}/logits"]
    assert np.abs(want - expected(family)["right/logits"]).max() > 1e-2  # the option changes the logits
    close(predict(model, family, "right"), want, f"{family} {key}")


def test_a_lora_fine_tuned_gemma_converts_with_keras_s_merged_kernels():
    """keras 3 saves a LoRA-enabled EinsumDense's kernel merged (kernel + A @ B · alpha / rank) and no
    adapters: the file converts as any, to the adapted model's logits."""
    model = convert_keras_model(DATA / "gemma" / "causal_lm_lora.keras")
    want = expected("gemma")["lora/logits"]
    assert np.abs(want - expected("gemma")["right/logits"]).max() > 1e-2
    close(predict(model, "gemma", "right"), want, "LoRA")


def test_a_bfloat16_gemma_converts_to_bfloat16_within_keras_s_own_bfloat16_rounding():
    """keras-hub's Gemma built with dtype="bfloat16": the file holds bfloat16 variables and converts to a
    bfloat16 module, which computes in bfloat16 where Keras does (norms and softmax in float32). Two bfloat16
    runs of one model differ by their rounding (8 bits of mantissa), so the bound is Keras's own: the converted
    logits are no farther from Keras's bfloat16 logits than those are from Keras's float32 ones, at the worst
    position and on average (measured: 0.17 and 0.013 against 0.31 and 0.022, logits up to 8.1)."""
    model = convert_keras_model(DATA / "gemma" / "causal_lm_bf16.keras")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    e = expected("gemma")
    got, keras_bf16 = predict(model, "gemma", "right"), e["bf16/logits"]
    own = np.abs(keras_bf16 - e["right/logits"])  # Keras's bfloat16 rounding
    assert own.max() > 0.1  # it is a bfloat16 run
    difference = np.abs(got - keras_bf16)
    print(f"bfloat16: max difference {difference.max():.3g} (Keras's own {own.max():.3g})")
    assert difference.max() <= own.max() and difference.mean() <= own.mean()
    prompt = torch.from_numpy(e["greedy/prompt"])
    assert torch.equal(model.generate(prompt, 16), model.generate(prompt, 16, use_cache=False))


def test_the_emitted_module_declares_torch_layers_and_passes_ruff(tmp_path):
    """The backbone's table is an ``nn.Embedding``; the blocks and norms are called as their nodes (Gemma's
    ``1 + scale`` RMSNorm is no torch layer); ``ruff check`` and ``ruff format --check`` leave it as it is."""
    code = converted("gemma2", "backbone.keras").code
    assert "nn.Embedding(256, 32)" in code and "HubGemmaDecoder(" in code and "offset=1.0" in code
    assert "* 5.656854152679443" in code  # the embeddings scaled by sqrt(32), as Keras's multiply records it
    (tmp_path / "port.py").write_text(code, encoding="utf-8")
    for arguments in (["check", "--isolated"], ["format", "--check", "--isolated"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "."], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, (arguments, result.stdout[-3000:])


# -- refusals ---------------------------------------------------------------------------------------------------


def test_a_gemma_3_with_images_or_an_embedding_head_is_refused_by_name(tmp_path):
    for key, value in (("vision_encoder", {"class_name": "Gemma3VisionEncoder"}), ("is_embedding_model", True)):
        with pytest.raises(WeightsError, match=f"its config has {key}"):
            convert_keras_model(variant(tmp_path, "gemma3", "backbone.keras", **{key: value}))


def test_a_gemma_3_with_bidirectional_attention_is_refused_naming_the_option(tmp_path):
    with pytest.raises(UnsupportedKerasLayerError, match="use_bidirectional_attention=True"):
        convert_keras_model(variant(tmp_path, "gemma3", "backbone.keras", use_bidirectional_attention=True))


def test_keras_hub_s_other_rms_normalization_classes_are_refused_naming_their_module():
    """keras_hub.layers.RMSNormalization (scale, no ε) and Gemma 4's (scale) share the registered name of
    Gemma's (1 + scale) but compute otherwise."""
    arrays = [np.zeros(4, np.float32)]
    for module in ("keras_hub.src.layers.modeling.rms_normalization", "keras_hub.src.models.gemma4.gemma4_layers"):
        with pytest.raises(Refused, match=f"RMSNormalization of {module} is not Gemma's"):
            convert_rms_normalization(SimpleNamespace(module=module, config={}), arrays, None)
    gemma = SimpleNamespace(module="keras_hub.src.models.gemma.rms_normalization", config={"epsilon": 1e-6})
    assert convert_rms_normalization(gemma, arrays, None).spec["offset"] == 1.0


# -- the Hugging Face form: what the folder says (the slow tier loads it) ---------------------------------------


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_gemma_1_is_written_as_transformers_gemma_and_gemma_2_as_its_gemma_2(tmp_path):
    from safetensors.torch import load_file

    one = to_transformers(converted("gemma", "causal_lm.keras"), tmp_path / "one")
    config = _config(one)
    assert config["architectures"] == ["GemmaForCausalLM"] and config["model_type"] == "gemma"
    assert (config["intermediate_size"], config["head_dim"], config["num_key_value_heads"]) == (32, 8, 2)
    assert config["hidden_act"] == "gelu_pytorch_tanh" and config["tie_word_embeddings"] is True
    tensors = load_file(one / "model.safetensors")
    assert "lm_head.weight" not in tensors  # tied to embed_tokens, as keras-hub's head is to its table
    state = converted("gemma", "causal_lm.keras").state_dict()
    # transformers' Gemma calls the norm before its MLP post_attention_layernorm
    pre_ffw = state["layers.gemma_backbone_1/decoder_block_0.pre_ffw_norm.weight"]
    torch.testing.assert_close(tensors["model.layers.0.post_attention_layernorm.weight"], pre_ffw, rtol=0, atol=0)
    two = _config(to_transformers(converted("gemma2", "causal_lm.keras"), tmp_path / "two"))
    assert two["architectures"] == ["Gemma2ForCausalLM"] and two["model_type"] == "gemma2"
    assert two["layer_types"] == ["sliding_attention", "full_attention"] and two["sliding_window"] == 4
    assert (two["attn_logit_softcapping"], two["final_logit_softcapping"], two["query_pre_attn_scalar"]) == (3, 1, 8)
    backbone = _config(to_transformers(converted("gemma2", "backbone.keras"), tmp_path / "backbone"))
    assert backbone["architectures"] == ["Gemma2Model"]


def test_gemma_3_is_written_as_transformers_gemma_3_text_model(tmp_path):
    config = _config(to_transformers(converted("gemma3", "causal_lm.keras"), tmp_path / "three"))
    assert config["architectures"] == ["Gemma3ForCausalLM"] and config["model_type"] == "gemma3_text"
    assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    rope = config["rope_parameters"]
    assert rope["full_attention"]["rope_theta"] == 1e6 and rope["sliding_attention"]["rope_theta"] == 1e4


def test_a_gemma_mix_transformers_has_no_class_for_is_refused_before_writing(tmp_path):
    """A soft cap without post norms is neither transformers' Gemma (no caps) nor its Gemma 2 (post norms)."""
    capped = convert_keras_model(variant(tmp_path, "gemma", "causal_lm.keras", attention_logit_soft_cap=5.0))
    with pytest.raises(ExportError, match="neither transformers' Gemma .* nor its Gemma 2"):
        to_transformers(capped, tmp_path / "capped")
    assert not (tmp_path / "capped").exists()


def test_a_gemma_3_whose_epsilon_is_not_its_q_k_norms_is_refused(tmp_path):
    """keras-hub's Gemma 3 attention normalises q and k with ε 1e-6 whatever layer_norm_epsilon says;
    transformers' with rms_norm_eps."""
    other = convert_keras_model(variant(tmp_path, "gemma3", "causal_lm.keras", layer_norm_epsilon=1e-5))
    with pytest.raises(ExportError, match="layer_norm_epsilon 1e-05: keras-hub normalises queries and keys"):
        to_transformers(other, tmp_path / "other")


# -- the slow tier: presets, save and load, transformers in a process without keras -----------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_preset_folders_give_keras_s_outputs(family):
    for side in ("right", "left"):
        close(predict(converted(family, "backbone_preset"), family, side), expected(family)[f"{side}/backbone"], side)
        close(predict(converted(family, "causal_lm_preset"), family, side), expected(family)[f"{side}/logits"], side)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_and_loaded_causal_lm_gives_keras_s_logits_and_greedy_tokens(tmp_path, family):
    again = attnzoo.load(attnzoo.save(converted(family, "causal_lm.keras"), tmp_path / "saved"))
    close(predict(again, family, "left"), expected(family)["left/logits"], family)
    prompt = torch.from_numpy(expected(family)["greedy/prompt"])
    np.testing.assert_array_equal(again.generate(prompt, 32)[:, 5:].numpy(), expected(family)["greedy/tokens"])


@pytest.mark.slow
def test_top_k_sampling_with_a_seed_is_the_same_with_and_without_the_cache():
    model = converted("gemma2", "causal_lm.keras")  # soft caps and a window: the cache's hardest case here
    prompt = torch.from_numpy(expected("gemma2")["greedy/prompt"])
    drawn = model.generate(prompt, 24, top_k=5, temperature=0.8, seed=3)
    assert torch.equal(model.generate(prompt, 24, top_k=5, temperature=0.8, seed=3, use_cache=False), drawn)
    assert not torch.equal(drawn, model.generate(prompt, 24))  # it did sample


def _hf_jobs() -> dict[str, dict]:
    """One case a family and batch: the folder's file, the Auto class, the inputs, what Keras gave."""
    jobs = {}
    for family in FAMILIES:
        e = expected(family)
        for side in ("right", "left"):
            inputs = {"input_ids": e[f"{side}/token_ids"], "attention_mask": e[f"{side}/padding_mask"]}
            lm = {"file": "causal_lm.keras", "auto": "AutoModelForCausalLM", "inputs": inputs, "outputs": ["logits"]}
            jobs[f"{family}_lm_{side}"] = {**lm, "want": e[f"{side}/logits"], "side": side}
        jobs[f"{family}_lm_right"] |= {"prompts": [e["greedy/prompt"]], "new": [32]}
        inputs = {"input_ids": e["right/token_ids"], "attention_mask": e["right/padding_mask"]}
        jobs[f"{family}_backbone"] = {
            "file": "backbone.keras",
            "auto": "AutoModel",
            "inputs": inputs,
            "outputs": ["last_hidden_state"],
            "want": e["right/backbone"],
            "side": "right",
        }
        jobs[f"{family}_preset"] = {**jobs[f"{family}_lm_right"], "file": "causal_lm_preset", "prompts": [], "new": []}
    # the bfloat16 file, written in bfloat16: within Keras's own bfloat16 rounding (see the bfloat16 test above)
    e = expected("gemma")
    own = float(np.abs(e["bf16/logits"] - e["right/logits"]).max())
    bf16 = {"file": "causal_lm_bf16.keras", "want": e["bf16/logits"], "tolerance": own, "prompts": [], "new": []}
    jobs["gemma_bf16"] = {**jobs["gemma_lm_right"], **bf16}
    return jobs


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """Every family's folders written here, loaded and run by transformers in ONE child process where keras,
    keras_hub and attnzoo cannot be imported (tests/test_keras_transformers_folder.py's loader)."""
    import warnings

    from .test_keras_transformers_folder import LOADER

    root = tmp_path_factory.mktemp("hf_gemma")
    jobs, given, specs = _hf_jobs(), {}, []
    for name, job in jobs.items():
        family = name.split("_")[0]
        folder = root / f"{family}_{job['file']}"
        if not folder.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a preset's tokenizer is not written yet: the door says so
                to_transformers(DATA / family / job["file"], folder)
        given |= {f"{name}/{key}": np.asarray(value, dtype=np.int64) for key, value in job["inputs"].items()}
        given |= {f"{name}/prompt_{i}": np.asarray(p, dtype=np.int64) for i, p in enumerate(job.get("prompts", []))}
        specs.append(
            {
                "name": name,
                "folder": str(folder),
                "auto": job["auto"],
                "kwargs": {},
                "inputs": sorted(job["inputs"]),
                "outputs": job["outputs"],
                "generate": job.get("new", []),
            }
        )
    (root / "jobs.json").write_text(json.dumps(specs))
    np.savez(root / "given.npz", **given)
    proc = run_without_keras(LOADER, str(root / "jobs.json"), str(root / "given.npz"), str(root / "out.npz"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(root / "out.npz")), jobs


def _reached(family: str, mask: np.ndarray) -> np.ndarray:
    """[B, T] bool: the positions whose query has a key in every layer (a real token at or before it, and, in a
    windowed layer, within its window). The others are padding no real token reads; Keras gives them zeros,
    transformers' eager softmax (Gemma 2's) the mean of every value."""
    config = json.loads(zipfile.ZipFile(DATA / family / "backbone.keras").read("config.json"))["config"]
    window = config["sliding_window_size"] if config["use_sliding_window_attention"] else mask.shape[1]
    positions = np.arange(mask.shape[1])
    last_real = np.where(mask.astype(bool), positions, -(10**9))
    latest = np.maximum.accumulate(last_real, axis=1)  # each position's latest real token at or before it
    return positions - latest < window


@pytest.mark.slow
def test_the_child_imported_neither_keras_nor_keras_hub_nor_attnzoo_and_loaded_every_weight(hf):
    out, jobs = hf
    assert out["blocked"].all()
    for name in jobs:
        assert json.loads(str(out[f"{name}/loading"])) == {}, name  # no missing, unexpected or mismatched weight
        assert str(out[f"{name}/dtype"]) == ("torch.bfloat16" if name == "gemma_bf16" else "torch.float32"), name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_hf_jobs()))
def test_transformers_gives_keras_s_outputs_at_every_position_a_key_reaches(hf, name):
    """Every position of the right-padded batch that has a key in each layer (all of them but, in a windowed
    model, the padding past the window); of the left-padded batch, the real tokens (transformers counts
    positions 0, 1, ... over the padding as keras-hub does, and a left-padded query with no key gets the mean of
    the values in transformers' eager attention, zeros in Keras)."""
    out, jobs = hf
    job, family = jobs[name], name.split("_")[0]
    got, want = out[f"{name}/{job['outputs'][0]}"], job["want"]
    mask = job["inputs"]["attention_mask"]
    keep = _reached(family, mask) if job["side"] == "right" else mask.astype(bool)
    assert keep[mask.astype(bool)].all()
    close(got[keep], want[keep], name, job.get("tolerance", TOLERANCE))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_greedy_generate_gives_keras_s_tokens(hf, family):
    out, _ = hf
    e = expected(family)
    np.testing.assert_array_equal(
        out[f"{family}_lm_right/generated_0"], np.concatenate([e["greedy/prompt"], e["greedy/tokens"]], axis=1)
    )
