"""keras-hub LoRA adapters (``backbone.enable_lora``, ``save_lora_weights``) merged into the converted weights, or
kept apart as a PEFT adapter folder beside the Hugging Face folder (attnzoo/keras/lora.py, lora_peft.py).

The fixtures (tests/keras_hub_lm_fixtures.py, tests/keras_hub_lora_fixtures.py, keras-hub 0.32): ``gemma/lora_preset``
(the base weights and its ``adapters.lora.h5``: rank 2 on each block's query and value) with Keras's adapted logits
``lora/logits`` in ``gemma/expected.npz``; ``llama/adapters.lora.h5`` (rank 2 on query, value, attention_output
and feedforward_output_dense) and ``phi3/adapters.lora.h5`` (query, value) beside their ``causal_lm_preset``, each
with Keras's adapted logits in ``lora.npz``; ``gemma/causal_lm_lora.keras``, what ``model.save`` writes of the
adapted Gemma (merged kernels). References: Keras's logits (merge), the merged model's own Hugging Face folder and
the formula ``W + lora_B @ lora_A · lora_alpha / r`` (the adapter folder's tensors), peft loading the folder
(slow: in a child that cannot import keras or attnzoo).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

from attnzoo.errors import ConfigError, ExportError, WeightsError
from attnzoo.keras import convert_keras_model, to_transformers

from .conftest import ROOT, run_cli, run_without_keras

DATA = ROOT / "tests" / "data" / "keras_hub_lm"
TOLERANCE = 1e-5
# family -> (the model, its adapters file or None for the preset's own, where Keras's adapted logits are)
CASES = {
    "gemma": ("gemma/lora_preset", None, "gemma/expected.npz"),
    "llama": ("llama/causal_lm_preset", "llama/adapters.lora.h5", "llama/lora.npz"),
    "phi3": ("phi3/causal_lm_preset", "phi3/adapters.lora.h5", "phi3/lora.npz"),
}


def _right(family: str) -> dict[str, torch.Tensor]:
    e = np.load(DATA / family / "expected.npz")
    return {key: torch.from_numpy(e[f"right/{key}"]) for key in ("token_ids", "padding_mask")}


def _adapted(family: str) -> np.ndarray:
    return np.load(DATA / CASES[family][2])["lora/logits"]


@cache
def converted(family: str, lora: str = "merge"):
    model, adapters, _ = CASES[family]
    given = DATA / adapters if adapters and lora != "none" else None
    return convert_keras_model(DATA / model, lora=lora, lora_weights=given)


def logits(model, family: str) -> np.ndarray:
    with torch.no_grad():
        return model(**_right(family)).float().numpy()


def close(got: np.ndarray, want: np.ndarray, what: str, tolerance: float = TOLERANCE) -> float:
    worst = float(np.abs(got - want).max())
    print(f"{what}: max difference {worst:.3g}")  # shown with -s: the measurements the docs quote
    assert worst <= tolerance, f"{what}: max difference {worst:.3g}"
    return worst


@pytest.mark.parametrize("family", sorted(CASES))
def test_the_adapters_merge_into_the_kernels_as_keras_computes_them(family):
    """Merged (the default): Keras's adapted logits at every position; lora='none': its base logits."""
    base = np.load(DATA / family / "expected.npz")["right/logits"]
    assert np.abs(_adapted(family) - base).max() > 1.0  # the adapters move the logits
    model = converted(family)
    close(logits(model, family), _adapted(family), f"{family} merged")
    assert model.keras_lora is None
    assert any(note.startswith("LoRA: ") and "merged" in note for note in model.keras_report.notes)
    close(logits(converted(family, "none"), family), base, f"{family} base")


def test_a_saved_lora_model_holds_merged_kernels_and_nothing_to_keep(tmp_path):
    """keras's model.save writes no A or B: the .keras file converts to the adapted model as it is, and
    lora='keep' (Python or the command) says there is nothing to keep and where adapters would come from."""
    path = DATA / "gemma" / "causal_lm_lora.keras"
    with zipfile.ZipFile(path) as archive:
        archive.extract("model.weights.h5", tmp_path)
    import h5py

    with h5py.File(tmp_path / "model.weights.h5") as f:
        names: list[str] = []
        f.visit(names.append)
    assert names and not [n for n in names if "lora" in n]
    with pytest.raises(ConfigError, match="holds no LoRA adapters to keep.*save_lora_weights"):
        convert_keras_model(path, lora="keep")
    proc = run_cli("convert-keras", str(path), "-o", str(tmp_path / "hf"), "--to", "transformers", "--lora", "keep")
    assert proc.returncode == 1 and "holds no LoRA adapters" in proc.stderr
    proc = run_cli("convert-keras", str(DATA / CASES["gemma"][0]), "-o", str(tmp_path / "az"), "--lora", "keep")
    assert proc.returncode == 2 and "add --to transformers" in proc.stderr
    assert not (tmp_path / "hf").exists() and not (tmp_path / "az").exists()


def test_adapters_that_do_not_fit_or_are_not_one_are_refused(tmp_path):
    with pytest.raises(WeightsError, match="does not fit layer .*saved from another model"):
        convert_keras_model(DATA / "llama" / "causal_lm_preset", lora_weights=DATA / "phi3" / "adapters.lora.h5")
    with pytest.raises(ConfigError, match="lora must be one of"):
        convert_keras_model(DATA / "gemma" / "lora_preset", lora="merged")
    folder = tmp_path / "preset"
    shutil.copytree(DATA / "gemma" / "lora_preset", folder)
    shutil.copy(folder / "adapters.lora.h5", folder / "other.lora.h5")
    with pytest.raises(ConfigError, match="holds 2 adapter files .*lora_weights="):
        convert_keras_model(folder)
    with pytest.raises(WeightsError, match="not an HDF5 file"):
        convert_keras_model(folder, lora_weights=folder / "config.json")


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """gemma and llama written with lora='keep' (the path; the converted model) and merged, in one folder."""
    root = tmp_path_factory.mktemp("lora")
    to_transformers(DATA / CASES["gemma"][0], root / "gemma", lora="keep")
    to_transformers(converted("gemma"), root / "gemma_merged")
    preset = DATA / CASES["llama"][0]
    to_transformers(converted("llama", "keep"), root / "llama", lora="keep", preset=preset)
    to_transformers(converted("llama"), root / "llama_merged", preset=preset)
    return root


@pytest.mark.parametrize("family", ["gemma", "llama"])
def test_the_kept_adapters_are_peft_s_lora_of_the_merged_model(kept, family):
    """adapter/ holds peft's LoRA: the base weights plus lora_B @ lora_A · lora_alpha / r (each module's rank
    from rank_pattern) are the merged model's Hugging Face weights, and every other weight is the base's."""
    from safetensors.torch import load_file

    folder = kept / family
    base, merged = load_file(folder / "model.safetensors"), load_file(kept / f"{family}_merged" / "model.safetensors")
    config = json.loads((folder / "adapter" / "adapter_config.json").read_text())
    adapter = load_file(folder / "adapter" / "adapter_model.safetensors")
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert Path(config["base_model_name_or_path"]) == folder.resolve()
    modules = {"gemma": ("q_proj", "v_proj"), "llama": ("q_proj", "v_proj", "o_proj", "down_proj")}[family]
    kinds = {"q_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn", "down_proj": "mlp"}
    want = sorted(f"model.layers.{i}.{kinds[m]}.{m}" for i in range(2) for m in modules)
    assert config["target_modules"] == want
    heads = {"gemma": {"q_proj": 4, "v_proj": 2}, "llama": {"q_proj": 4, "v_proj": 2, "o_proj": 1, "down_proj": 1}}
    for name in want:
        a, b = adapter[f"base_model.model.{name}.lora_A.weight"], adapter[f"base_model.model.{name}.lora_B.weight"]
        key = name.replace(".", "\\.")
        r, alpha = config["rank_pattern"].get(key, config["r"]), config["alpha_pattern"].get(key, config["lora_alpha"])
        assert a.shape[0] == b.shape[1] == r == 2 * heads[family][name.rsplit(".", 1)[1]]  # keras's rank 2 per head
        delta = (b.double() @ a.double()) * (alpha / r)
        close((base[f"{name}.weight"].double() + delta).numpy(), merged[f"{name}.weight"].double().numpy(), name, 1e-6)
    untouched = [k for k in base if k.removesuffix(".weight") not in want]
    assert untouched and all(torch.equal(base[k], merged[k]) for k in untouched)


def test_a_module_transformers_fuses_is_refused_by_name(tmp_path):
    """transformers' Phi-3 holds the query, key and value in one qkv_proj: the adapters cannot be peft's LoRA
    of one module, so lora='keep' is refused naming the layer, and nothing is written."""
    with pytest.raises(ExportError, match="LoRA adapter on .*value_dense.* has no transformers module.*lora='merge'"):
        to_transformers(converted("phi3", "keep"), tmp_path / "phi3", lora="keep")
    with pytest.raises(ExportError, match="converted with lora='keep'"):
        to_transformers(converted("phi3", "keep"), tmp_path / "phi3")
    with pytest.raises(ExportError, match="holds none"):
        to_transformers(converted("phi3"), tmp_path / "phi3", lora="keep")
    assert not (tmp_path / "phi3").exists()


PEFT = r"""
import sys
import numpy as np
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

out = {}
given = np.load(sys.argv[1])
for name in sys.argv[3:]:
    base = AutoModelForCausalLM.from_pretrained(name)
    model = PeftModel.from_pretrained(base, name + "/adapter").eval()
    with torch.no_grad():
        out[name] = model(
            input_ids=torch.from_numpy(given[name + "/ids"]), attention_mask=torch.from_numpy(given[name + "/mask"])
        ).logits.numpy()
out["blocked"] = np.array([sys.modules[m] is None for m in ("keras", "keras_hub", "attnzoo")])
np.savez(sys.argv[2], **out)
"""


@pytest.mark.slow
def test_peft_loads_the_adapter_folder_and_gives_keras_s_adapted_logits(kept):
    """PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(DIR), DIR/adapter), with neither keras nor
    attnzoo importable: Keras's adapted logits at every real position (transformers' padded ones differ)."""
    given = {}
    for family in ("gemma", "llama"):
        right = _right(family)
        given[f"{family}/ids"] = right["token_ids"].numpy().astype(np.int64)
        given[f"{family}/mask"] = right["padding_mask"].numpy().astype(np.int64)
    np.savez(kept / "given.npz", **given)
    proc = run_without_keras(PEFT, str(kept / "given.npz"), str(kept / "out.npz"), "gemma", "llama", cwd=kept)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = np.load(kept / "out.npz")
    assert out["blocked"].all()
    for family in ("gemma", "llama"):
        real = given[f"{family}/mask"].astype(bool)
        close(out[family][real], _adapted(family)[real], f"{family} peft")
