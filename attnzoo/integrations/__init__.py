"""Other libraries' doors: attnzoo attention inside the models people already use.

    import attnzoo.integrations.transformers as azt     # pip install 'attnzoo[transformers]'
    azt.register()          # ['attnzoo_alibi', 'attnzoo_entmax15', 'attnzoo_softmax', ...]
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attnzoo_sparsemax")

    from attnzoo.integrations.timm import cnn_attention, vit_attention
    timm.create_model("resnet18", block_args=dict(attn_layer=cnn_attention("coord_attn")))
    timm.create_model("vit_tiny_patch16_224", attn_layer=vit_attention(window=8))

A variant serves as a backend of a library when its card says so (``backends: [transformers]``), so a
plugin's variant joins by being installed. This package reads cards only: importing it imports neither
torch nor transformers nor timm; each submodule imports its own library.
"""

from __future__ import annotations

from attnzoo.core import list_models, model_info

__all__ = ["BACKEND_PREFIX", "backend_name", "backend_variants"]

BACKEND_PREFIX = "attnzoo_"


def backend_name(variant: str) -> str:
    """The name a variant takes in another library's registry: ``attnzoo_<variant>`` (``attnzoo_sparsemax``);
    a provider-qualified name (``my-plugin:gated``) becomes ``attnzoo_my_plugin_gated``."""
    return BACKEND_PREFIX + variant.replace(":", "_").replace("-", "_")


def backend_variants(backend: str) -> list[str]:
    """The registered variants whose card lists ``backend`` (``"transformers"``) under ``backends``, built-in
    and plugins' alike, in the registry's order."""
    return [name for name in list_models() if backend in model_info(name).backends]
