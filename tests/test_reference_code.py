"""Checkpoints made by the reference repositories' own code, converted and compared (opt-in).

test_reference_checkpoints.py rebuilds each reference model from its math; this module goes one step further and
imports the reference code itself, so that nothing in between can be a misreading. It needs checkouts of the
reference repositories, which CI does not have, so it runs only when ``ATTNZOO_REFERENCE_CODE`` names a folder
holding them::

    $ATTNZOO_REFERENCE_CODE/caml-mimic    (jamesmullenbach/caml-mimic: learn/models.py, constants.py)
    $ATTNZOO_REFERENCE_CODE/LAAT          (aehrc/LAAT: src/models/...)
    $ATTNZOO_REFERENCE_CODE/PLM-ICD       (MiuLab/PLM-ICD: src/modeling_roberta.py; needs transformers)

Their imports of gensim (word vectors, unused with random embeddings) are satisfied by empty stand-ins.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from argparse import Namespace
from pathlib import Path

import pytest
import torch

import attnzoo
from attnzoo.interop.convert import convert_checkpoint

ROOT = Path(os.environ.get("ATTNZOO_REFERENCE_CODE", "/nonexistent"))
pytestmark = pytest.mark.skipif(not ROOT.is_dir(), reason="set ATTNZOO_REFERENCE_CODE to run the reference code")
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture
def reference_import(monkeypatch):
    """Import a module from a reference checkout, with gensim stood in for and sys.modules restored after."""
    for name in (
        "gensim",
        "gensim.models",
        "gensim.models.fasttext",
        "gensim.models.word2vec",
        "gensim.models.keyedvectors",
        "dataproc",
        "dataproc.extract_wvs",
    ):
        stand_in = types.ModuleType(name)
        stand_in.KeyedVectors = stand_in.FastText = stand_in.Word2Vec = object
        stand_in.extract_wvs = stand_in
        monkeypatch.setitem(sys.modules, name, stand_in)

    def load(checkout: str, module: str):
        folder = ROOT / checkout
        if not folder.is_dir():
            pytest.skip(f"no {folder}")
        monkeypatch.syspath_prepend(str(folder))
        return importlib.import_module(module)

    yield load
    for name in [n for n in sys.modules if n.split(".")[0] in ("src", "learn", "constants", "modeling_roberta")]:
        del sys.modules[name]


@pytest.mark.parametrize("kernel", [3, 10])
def test_caml_conv_attn_pool(tmp_path, reference_import, kernel):
    models = reference_import("caml-mimic", "learn.models")
    torch.manual_seed(0)
    reference = models.ConvAttnPool(
        Y=9,
        embed_file=None,
        kernel_size=kernel,
        num_filter_maps=16,
        lmbda=0,
        gpu=False,
        dicts={"ind2w": {i: f"w{i}" for i in range(40)}},
        embed_size=12,
    ).eval()
    torch.save(reference.cpu().state_dict(), tmp_path / "model_best_prec_at_8.pth")  # persistence.save_everything
    model, _ = convert_checkpoint(tmp_path / "model_best_prec_at_8.pth", "caml", "conv_caml")
    tokens = torch.randint(1, 42, (3, 25))
    want, _, want_attention = reference(tokens, torch.zeros(3, 9))
    got, attention = model(tokens, return_attention=True)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(attention, want_attention, **TOL)
    # padding: CAML attends over it; an all-True mask asks attnzoo for the same
    padded = tokens.clone()
    padded[0, 15:] = 0
    torch.testing.assert_close(
        model(padded, mask=torch.ones_like(padded, dtype=torch.bool)), reference(padded, torch.zeros(3, 9))[0], **TOL
    )


def _laat(reference_import, labels, projection):
    rnn = reference_import("LAAT", "src.models.rnn")
    vocab = types.SimpleNamespace(
        n_words=lambda: 50,
        word_embeddings=None,
        n_level=lambda: len(labels),
        all_n_labels=lambda: labels,
        n_labels=lambda level: labels[level],
    )
    args = Namespace(
        use_last_hidden_state=0,
        mode="rand",
        n_layers=1,
        hidden_size=8,
        bidirectional=1,
        attention_mode="label",
        rnn_model="LSTM",
        dropout=0.3,
        embedding_size=10,
        joint_mode="hierarchical",
        level_projection_size=projection,
        d_a=7,
        r=-1,
    )
    torch.manual_seed(0)
    return rnn.RNN(vocab, args).eval()


def _save_like_trainer(model, path):
    torch.save(
        {
            "epoch": 3,
            "state_dict": model.state_dict(),
            "best_val": {},
            "test_scores": {},
            "optimiser": torch.optim.Adam(model.parameters()).state_dict(),
            "best_epoch_num": 3,
        },
        path,
    )


def test_laat_rnn(tmp_path, reference_import):
    reference = _laat(reference_import, [11], projection=128)
    _save_like_trainer(reference, tmp_path / "best_model.pkl")
    model, _ = convert_checkpoint(tmp_path / "best_model.pkl", "laat", "bilstm_laat")
    tokens = torch.randint(1, 50, (3, 20))
    (want,), _ = reference(tokens, torch.tensor([20, 20, 20]))
    torch.testing.assert_close(model(tokens), want, **TOL)


@pytest.mark.parametrize("projection", [5, 128])
def test_jointlaat_rnn(tmp_path, reference_import, projection):
    reference = _laat(reference_import, [4, 11], projection=projection)
    _save_like_trainer(reference, tmp_path / "best_model.pkl")
    model, _ = convert_checkpoint(tmp_path / "best_model.pkl", "laat", "bilstm_joint_laat")
    tokens = torch.randint(1, 50, (3, 20))
    (parents, children), _ = reference(tokens, torch.tensor([20, 20, 20]))
    got_children, got_parents = model(tokens, return_parents=True)
    torch.testing.assert_close(got_children, children, **TOL)
    torch.testing.assert_close(got_parents, parents, **TOL)


@pytest.mark.parametrize("mode", ["laat", "laat-split"])
def test_plm_icd_roberta_head(tmp_path, reference_import, mode):
    pytest.importorskip("transformers")
    from transformers import RobertaConfig

    modeling = reference_import("PLM-ICD/src", "modeling_roberta")
    config = RobertaConfig(
        vocab_size=60,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=20,
        max_position_embeddings=40,
        num_labels=7,
    )
    config.model_mode = mode
    torch.manual_seed(0)
    reference = modeling.RobertaForMultilabelClassification(config).eval()
    reference.save_pretrained(tmp_path / "plm")  # model.safetensors
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")
    input_ids = torch.randint(3, 60, (2, 3, 8))  # [batch, chunks, chunk size]
    with torch.no_grad():
        (want,) = reference(input_ids=input_ids, return_dict=False)
        hidden = reference.roberta(input_ids.view(-1, 8))[0].view(2, 24, 16)
    config = {"split_size": 8} if mode == "laat-split" else {}
    for path in (tmp_path / "plm" / "model.safetensors", tmp_path / "pytorch_model.bin"):
        head, _ = convert_checkpoint(
            path, "plm-icd", "laat", config=config, output=tmp_path / "head.safetensors", overwrite=True
        )
        torch.testing.assert_close(head(hidden), want, **TOL)
        torch.testing.assert_close(attnzoo.load(tmp_path / "head.safetensors")(hidden), want, **TOL)
