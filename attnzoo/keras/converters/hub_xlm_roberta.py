"""keras-hub's XLM-RoBERTa family: ``XLMRobertaBackbone`` and ``XLMRobertaTextClassifier``, rebuilt from their
arguments.

keras-hub's XLM-RoBERTa classes are RoBERTa's (``XLMRobertaBackbone`` subclasses ``RobertaBackbone``; the
classifier computes what ``RobertaTextClassifier`` does): the same graphs
(:mod:`attnzoo.keras.converters.hub_roberta`), under their own class names. Only the vocabulary differs
(a SentencePiece one), and the preset's tokenizer carries it.
"""

from __future__ import annotations

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder

__all__ = ["xlm_roberta_graph"]

xlm_roberta_graph = keras_hub_model(
    "XLMRobertaBackbone",
    family="xlm_roberta",
    tasks={"XLMRobertaTextClassifier": first_token_classifier(True, "tanh")},
)(token_and_position_encoder("embeddings", 1e-5))
