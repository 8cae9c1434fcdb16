"""keras-hub's BART and T5 written through the Hugging Face door as ``BartModel`` /
``BartForConditionalGeneration`` and ``T5Model`` / ``T5ForConditionalGeneration`` folders.

The slow tier writes each family's backbone and task (tests/data/keras_hub_seq2seq/<family>/preset, the backbone
from a copy without task.json), loads all four in ONE child process where keras, keras_hub and attnzoo cannot be
imported (tests/conftest.py's ``run_without_keras``), and compares transformers' outputs with Keras's saved ones
(expected.npz): the encoder's and decoder's states within 1e-5 at every position of the right-padded batch and,
for BART, of the left-padded one (transformers masks the padded keys as keras-hub does), the logits within 1e-6
of their scale, and transformers' greedy ``generate`` from Keras's prompts gives Keras's 16 tokens. The fast tier
checks what the folders hold and what the door refuses.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnzoo.errors import ExportError
from attnzoo.keras import to_transformers
from attnzoo.keras.converters.hub_t5 import T5, relative_buckets
from attnzoo.keras.transformers_form import HubSource

from .conftest import run_cli, run_without_keras
from .test_keras_hub_seq2seq import DATA, INPUTS, expected

AUTOS = {"backbone": "AutoModel", "lm": "AutoModelForSeq2SeqLM"}


def write(tmp_path, family: str, kind: str):
    source = DATA / family / "preset"
    if kind == "backbone":
        source = shutil.copytree(source, tmp_path / f"{family}_backbone_preset")
        (source / "task.json").unlink()
    folder = to_transformers(source, tmp_path / f"{family}_{kind}")
    return folder, json.loads((folder / "config.json").read_text()), load_file(folder / "model.safetensors")


# -- the fast tier: what each family writes, what the door refuses --------------------------------------------


def test_bart_writes_its_positions_under_two_offset_rows_and_forces_no_token(tmp_path):
    folder, config, tensors = write(tmp_path, "bart", "lm")
    assert config["architectures"] == ["BartForConditionalGeneration"] and config["model_type"] == "bart"
    assert (config["d_model"], config["encoder_layers"], config["decoder_attention_heads"]) == (32, 2, 4)
    assert config["forced_eos_token_id"] is None and config["scale_embedding"] is False
    positions = tensors["model.encoder.embed_positions.weight"]
    assert positions.shape == (32 + 2, 32) and not positions[:2].any()
    assert tensors["final_logits_bias"].shape == (1, 128) and not tensors["final_logits_bias"].any()
    assert "model.decoder.layers.1.encoder_attn.k_proj.bias" in tensors
    assert json.loads((folder / "generation_config.json").read_text()) == {}  # no tokenizer: no special ids


def test_the_command_writes_an_encoder_decoder_lm_and_says_to_load_it_as_a_seq2seq_lm(tmp_path):
    out = tmp_path / "t5"
    proc = run_cli("convert-keras", str(DATA / "t5" / "preset"), "-o", str(out), "--to", "transformers")
    assert proc.returncode == 0, proc.stderr
    assert f"AutoModelForSeq2SeqLM.from_pretrained({str(out)!r})" in proc.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["T5ForConditionalGeneration"] and config["tie_word_embeddings"] is True


def test_t5_writes_the_relative_bias_in_each_stack_s_first_block_and_its_gated_feed_forward(tmp_path):
    _, config, tensors = write(tmp_path, "t5", "backbone")
    assert config["architectures"] == ["T5Model"] and config["feed_forward_proj"] == "gated-relu"
    assert (config["d_kv"], config["relative_attention_num_buckets"], config["tie_word_embeddings"]) == (8, 32, True)
    bias = {name for name in tensors if "relative_attention_bias" in name}
    assert bias == {
        f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight" for side in ("encoder", "decoder")
    }
    assert tensors["decoder.block.1.layer.2.DenseReluDense.wi_1.weight"].shape == (64, 32)


def _t5_source(kind: str, **changes) -> HubSource:
    arguments = {"vocabulary_size": 128, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2, "num_heads": 4}
    layer = {"key_value_dim": 8, "epsilon": 1e-6, "activation": "relu", "gated": True}
    layer |= {k: v for k, v in changes.items() if k in layer}
    arguments |= {k: v for k, v in changes.items() if k not in layer}
    return HubSource("T5Seq2SeqLM", kind, arguments, {"transformer_encoder_layer_0": layer}, {})


@pytest.mark.parametrize(
    ("kind", "changes", "message"),
    [
        ("seq2seq_lm", {"tie_embedding_weights": False}, "ties T5's head to the embedding"),
        ("backbone", {"activation": "gelu"}, "'gelu' \\(gated\\) has no feed_forward_proj"),
        ("backbone", {"activation": "silu", "gated": False}, "'silu' has no feed_forward_proj"),
    ],
)
def test_the_t5_door_refuses_what_transformers_t5_cannot_compute(kind, changes, message):
    with pytest.raises(ExportError, match=message):
        T5.config(_t5_source(kind, **changes))


@pytest.mark.parametrize(
    ("activation", "gated", "written"),
    [
        ("relu", False, "relu"),
        ("gelu", False, "gelu"),
        ("gelu_approximate", True, "gated-gelu"),
        ("gelu_approximate", False, "gelu_new"),
    ],
)
def test_the_t5_door_names_each_feed_forward_as_transformers_reads_it(activation, gated, written):
    assert T5.config(_t5_source("backbone", activation=activation, gated=gated))["feed_forward_proj"] == written


# -- the slow tier: transformers loads the four folders in one child without keras, keras_hub or attnzoo -------

LOADER = r"""
import json, sys
import numpy as np
import torch
import transformers

jobs, given = json.load(open(sys.argv[1])), np.load(sys.argv[2])
out = {}
for job in jobs:
    name = job["name"]
    model, info = getattr(transformers, job["auto"]).from_pretrained(job["folder"], output_loading_info=True)
    model.eval()
    out[f"{name}/loading"] = np.array(json.dumps({k: sorted(v) for k, v in info.items() if v}))
    for side in job["sides"]:
        inputs = {key: torch.from_numpy(given[f"{job['family']}/{side}/{key}"]) for key in job["inputs"]}
        with torch.no_grad():
            result = model(**inputs)
        for key in job["outputs"]:
            out[f"{name}/{side}/{key}"] = getattr(result, key).float().numpy()
    if job["auto"] == "AutoModelForSeq2SeqLM":
        rows = []
        for r in range(2):  # transformers prepends decoder_start_token_id unless the prompt starts with it
            at = f"{job['family']}/greedy/"
            row = {key: torch.from_numpy(given[at + key][r : r + 1]) for key in job["inputs"][:3]}
            start = int(row["decoder_input_ids"][0, 0])
            rows.append(model.generate(**row, max_new_tokens=16, do_sample=False, decoder_start_token_id=start))
        out[f"{name}/generated"] = torch.cat(rows).numpy()
out["blocked"] = np.array([sys.modules[name] is None for name in ("keras", "keras_hub", "attnzoo")])
np.savez(sys.argv[3], **out)
"""
HF_INPUTS = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
JOBS = [(family, kind) for family in ("bart", "t5") for kind in ("backbone", "lm")]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    given, specs = {}, []
    for family in ("bart", "t5"):
        e = expected(family)
        sides = [side for side in ("right", "left") if f"{side}/logits" in e]
        for side in sides:
            given |= {
                f"{family}/{side}/{theirs}": e[f"{side}/{ours}"].astype(np.int64)
                for theirs, ours in zip(HF_INPUTS, INPUTS, strict=True)
            }
        greedy = (e["greedy/encoder_token_ids"], e["greedy/encoder_padding_mask"], e["greedy/prompt"])
        given |= {
            f"{family}/greedy/{key}": value.astype(np.int64) for key, value in zip(HF_INPUTS, greedy, strict=False)
        }
        for kind in ("backbone", "lm"):
            folder, _, _ = write(root, family, kind)
            outputs = ["last_hidden_state", "encoder_last_hidden_state"] if kind == "backbone" else ["logits"]
            spec = {"name": f"{family}/{kind}", "family": family, "folder": str(folder), "auto": AUTOS[kind]}
            specs.append({**spec, "sides": sides, "inputs": list(HF_INPUTS), "outputs": outputs})
    (root / "jobs.json").write_text(json.dumps(specs))
    np.savez(root / "given.npz", **given)
    proc = run_without_keras(LOADER, str(root / "jobs.json"), str(root / "given.npz"), str(root / "out.npz"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(root / "out.npz"))


@pytest.mark.slow
def test_the_child_could_import_neither_keras_nor_keras_hub_nor_attnzoo_and_loaded_every_weight(loaded):
    assert loaded["blocked"].all()
    for family, kind in JOBS:
        assert json.loads(str(loaded[f"{family}/{kind}/loading"])) == {}, (family, kind)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "kind"), JOBS)
def test_transformers_gives_keras_s_states_and_logits_at_every_position(loaded, family, kind):
    e = expected(family)
    for side in [s for s in ("right", "left") if f"{s}/logits" in e]:
        if kind == "backbone":
            pairs = [("last_hidden_state", "decoder_sequence_output", 1e-5)]
            pairs += [("encoder_last_hidden_state", "encoder_sequence_output", 1e-5)]
        else:
            pairs = [("logits", "logits", 1e-6 * float(np.abs(e[f"{side}/logits"]).max()))]
        for theirs, ours, tolerance in pairs:
            worst = float(np.abs(loaded[f"{family}/{kind}/{side}/{theirs}"] - e[f"{side}/{ours}"]).max())
            print(f"{family} {kind} {side} {ours}: max difference {worst:.3g}")  # shown with -s
            assert worst <= tolerance, (side, ours, worst)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bart", "t5"])
def test_transformers_greedy_generate_gives_keras_s_tokens(loaded, family):
    e = expected(family)
    want = np.concatenate([e["greedy/prompt"], e["greedy/tokens"]], axis=1)
    np.testing.assert_array_equal(loaded[f"{family}/lm/generated"], want)


@pytest.mark.slow
def test_t5_relative_buckets_are_transformers_at_every_distance_both_ways():
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-300, 301)[None, :]
    for bidirectional in (True, False):
        theirs = T5Attention._relative_position_bucket(relative, bidirectional, num_buckets=32, max_distance=128)
        torch.testing.assert_close(relative_buckets(relative, bidirectional), theirs, rtol=0, atol=0)
