"""keras-hub's DistilBERT family: ``DistilBertBackbone`` and ``DistilBertTextClassifier``, rebuilt from their
arguments.

* ``DistilBertBackbone``: token ids, padding mask -> ``token_and_position_embedding`` -> layer norm (ε 1e-12)
  and dropout -> post-norm ``TransformerEncoder`` layers (exact gelu) -> [B, T, D].
* ``DistilBertTextClassifier``: the backbone's state at the first token -> ``pooled_dense`` (relu) -> dropout
  -> ``logits``.
"""

from __future__ import annotations

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder

__all__ = ["distil_bert_graph"]

distil_bert_graph = keras_hub_model(
    "DistilBertBackbone",
    family="distil_bert",
    tasks={"DistilBertTextClassifier": first_token_classifier(False, "relu")},
)(token_and_position_encoder("token_and_position_embedding", 1e-12))
