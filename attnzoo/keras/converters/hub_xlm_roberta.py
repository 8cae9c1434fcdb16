"""keras-hub's XLM-RoBERTa family: ``XLMRobertaBackbone`` and ``XLMRobertaTextClassifier``, rebuilt from their
arguments.

keras-hub's XLM-RoBERTa classes are RoBERTa's (``XLMRobertaBackbone`` subclasses ``RobertaBackbone``; the
classifier computes what ``RobertaTextClassifier`` does): the same graphs
(:mod:`attnzoo.keras.converters.hub_roberta`), under their own class names. Only the vocabulary differs
(a SentencePiece one), and the preset's tokenizer carries it.

Hugging Face form (:data:`XLM_ROBERTA`): ``XLMRobertaModel`` (no pooler: ``add_pooling_layer=False``) and
``XLMRobertaForSequenceClassification``, whose layouts and positions are RoBERTa's: the folder is
RoBERTa's (:mod:`attnzoo.keras.converters.hub_roberta` says which positions agree), under XLM-RoBERTa's
``model_type``.
"""

from __future__ import annotations

from attnzoo.keras.converters.hub_roberta import roberta_config, roberta_tensors
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder
from attnzoo.keras.transformers_form import TransformersForm

__all__ = ["xlm_roberta_graph", "XLM_ROBERTA"]

XLM_ROBERTA = TransformersForm(
    "xlm-roberta",
    {"backbone": "XLMRobertaModel", "task": "XLMRobertaForSequenceClassification"},
    roberta_config,
    roberta_tensors,
    load_with={"backbone": {"add_pooling_layer": False}},
)

xlm_roberta_graph = keras_hub_model(
    "XLMRobertaBackbone",
    family="xlm_roberta",
    tasks={"XLMRobertaTextClassifier": first_token_classifier(True, "tanh")},
    transformers=XLM_ROBERTA,
)(token_and_position_encoder("embeddings", 1e-5))
