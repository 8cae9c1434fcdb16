"""keras-hub's GPT-2 family: ``GPT2Backbone`` and ``GPT2CausalLM``, rebuilt from their arguments.

* ``GPT2Backbone``: token ids, padding mask -> ``token_embedding`` (tied ``ReversibleEmbedding``) +
  ``position_embedding`` -> dropout -> pre-norm causal ``TransformerDecoder`` layers (gelu_approximate, ε
  1e-5, masked by ``padding_mask`` as ``decoder_padding_mask``) -> final ``layer_norm`` -> [B, T, D].
* ``GPT2CausalLM``: the backbone -> ``token_embedding(state, reverse=True)`` -> logits [B, T, vocabulary]
  (:func:`attnzoo.keras.hub_graph.causal_lm_graph`).

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own.

Hugging Face form (:data:`GPT2`): ``GPT2Model`` and ``GPT2LMHeadModel`` (its head tied to ``wte``, as
keras-hub's is to ``token_embedding``). transformers' GPT-2 keeps its projections in ``Conv1D`` layers whose
weight is [in, out] (``y = x W + b``), the query, key and value side by side in one ``c_attn`` [D, 3D]; the
converted model's are ``nn.Linear``'s [out, in], so each is transposed. Positions are 0, 1, ... in both, the
activation is the tanh gelu (``gelu_new``), ε 1e-5. keras-hub's tokenizer is not read: the special token
ids are left unset unless the tokenizer seam knows them (transformers' GPT-2 default, 50256, would not fit
a vocabulary of another size).
"""

from __future__ import annotations

from typing import Any

import torch

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import (
    GELU_TANH,
    HubGraph,
    number,
    position_embedding,
    positive,
    tensor,
    transformer_blocks,
)
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["gpt2_graph", "GPT2"]


def _gpt2_config(m: HubSource) -> dict[str, Any]:
    dropout = float(m.arguments.get("dropout") or 0.0)
    return {
        "vocab_size": m.size("vocabulary_size"),
        "n_positions": m.size("max_sequence_length", 1024),
        "n_embd": m.size("hidden_dim"),
        "n_layer": m.size("num_layers"),
        "n_head": m.size("num_heads"),
        "n_inner": m.size("intermediate_dim"),
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": dropout,
        "embd_pdrop": dropout,
        "attn_pdrop": dropout,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


def _gpt2_tensors(m: HubSource) -> Tensors:
    """transformers' GPT-2 weights: ``Conv1D`` kernels [in, out] (the converted ``nn.Linear``'s transposed)."""
    base = "transformer." if m.kind == "causal_lm" else ""
    yield f"{base}wte.weight", m.tensor("token_embedding.weight")
    yield f"{base}wpe.weight", m.tensor("position_embedding.position")
    for i in range(m.size("num_layers")):
        at, to = f"transformer_layer_{i}.", f"{base}h.{i}."
        yield f"{to}ln_1.weight", m.tensor(f"{at}attention_norm.weight")
        yield f"{to}ln_1.bias", m.tensor(f"{at}attention_norm.bias")
        projections = [m.tensor(f"{at}attention.{name}.weight") for name in ("query", "key", "value")]
        yield f"{to}attn.c_attn.weight", torch.cat([w.T for w in projections], dim=1)
        biases = [m.tensor(f"{at}attention.{name}.bias") for name in ("query", "key", "value")]
        yield f"{to}attn.c_attn.bias", torch.cat(biases)
        yield f"{to}attn.c_proj.weight", m.tensor(f"{at}attention.output.weight").T
        yield f"{to}attn.c_proj.bias", m.tensor(f"{at}attention.output.bias")
        yield f"{to}ln_2.weight", m.tensor(f"{at}feedforward_norm.weight")
        yield f"{to}ln_2.bias", m.tensor(f"{at}feedforward_norm.bias")
        yield f"{to}mlp.c_fc.weight", m.tensor(f"{at}intermediate.weight").T
        yield f"{to}mlp.c_fc.bias", m.tensor(f"{at}intermediate.bias")
        yield f"{to}mlp.c_proj.weight", m.tensor(f"{at}output_dense.weight").T
        yield f"{to}mlp.c_proj.bias", m.tensor(f"{at}output_dense.bias")
    yield f"{base}ln_f.weight", m.tensor("layer_norm.weight")
    yield f"{base}ln_f.bias", m.tensor("layer_norm.bias")


GPT2 = TransformersForm("gpt2", {"backbone": "GPT2Model", "causal_lm": "GPT2LMHeadModel"}, _gpt2_config, _gpt2_tensors)


@keras_hub_model("GPT2Backbone", family="gpt2", causal_lm="GPT2CausalLM", transformers=GPT2)
def gpt2_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    hidden = positive(config, "hidden_dim", where)
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)])
    p = position_embedding(g, t, positive(config, "max_sequence_length", where, 1024))
    x = g.layer("Add", "embeddings_add", {}, [[tensor(t), tensor(p)]])
    x = g.layer("Dropout", "embeddings_dropout", {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])
    x = transformer_blocks(g, x, config, where, GELU_TANH, 1e-5, decoder=True)
    x = g.layer("LayerNormalization", "layer_norm", {"axis": [-1], "epsilon": 1e-5}, [tensor(x)])
    return g.functional(str(config.get("name", "gpt2_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)
