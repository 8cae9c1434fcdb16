"""keras-hub's RoBERTa family: ``RobertaBackbone`` and ``RobertaTextClassifier``, rebuilt from their arguments.

* ``RobertaBackbone``: token ids, padding mask -> ``embeddings`` (a ``TokenAndPositionEmbedding``) -> layer
  norm (ε 1e-5) and dropout -> post-norm ``TransformerEncoder`` layers (exact gelu) -> [B, T, D].
* ``RobertaTextClassifier``: the backbone's state at the first token -> dropout -> ``pooled_dense`` (tanh)
  -> dropout -> ``logits``.
"""

from __future__ import annotations

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder

__all__ = ["roberta_graph"]

roberta_graph = keras_hub_model(
    "RobertaBackbone",
    family="roberta",
    tasks={"RobertaTextClassifier": first_token_classifier(True, "tanh")},
)(token_and_position_encoder("embeddings", 1e-5))
