"""attnzoo's converters of Keras's classes, one file per family, each converter beside the node it builds.

Importing this package imports every family in :data:`FAMILIES`, in that order, and each module's
``@keras_layer`` decorators fill the registry (:mod:`attnzoo.keras.registry`): Keras's layers, its
operations and keras-hub's layers alike. Adding a Keras class is adding (or extending) one file here and
naming a new file in :data:`FAMILIES` (a test checks that the list and the files agree).
"""

import importlib

FAMILIES = (
    "activation",
    "affine",
    "applications",
    "attention",
    "augmentation",
    "bidirectional",
    "categorical",
    "conv",
    "conv_lstm",
    "conv_transpose",
    "core",
    "depthwise",
    "hub_albert",
    "hub_bart",
    "hub_bert",
    "hub_bloom",
    "hub_deberta_v3",
    "hub_deit",
    "hub_dinov2",
    "hub_densenet",
    "hub_distil_bert",
    "hub_efficientnet",
    "hub_electra",
    "hub_f_net",
    "hub_falcon",
    "hub_gemma",
    "hub_gemma3",
    "hub_gpt2",
    "hub_gpt_neox",
    "hub_layers",
    "hub_masked_lm",
    "hub_llama",
    "hub_llama3",
    "hub_mistral",
    "hub_mixtral",
    "hub_mobilenet",
    "hub_opt",
    "hub_phi3",
    "hub_qwen",
    "hub_qwen3",
    "hub_qwen_moe",
    "hub_resnet",
    "hub_roberta",
    "hub_rotary",
    "hub_t5",
    "hub_vit",
    "hub_xlm_roberta",
    "merge",
    "norm",
    "ops",
    "pool",
    "preprocessing",
    "recurrent",
    "regularization",
    "resampling",
    "reshaping",
    "reversible_embedding",
    "text",
    "vocabulary",
    "wrappers",
)

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
