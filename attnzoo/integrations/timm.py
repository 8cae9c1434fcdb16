"""attnzoo layers inside timm models: vision blocks for CNN blocks, and the attention core for ViT.

    import timm
    from attnzoo.integrations.timm import cnn_attention, vit_attention

    timm.create_model("resnet18", block_args=dict(attn_layer=cnn_attention("coord_attn", reduction=8)))
    timm.create_model("vit_tiny_patch16_224", attn_layer=vit_attention(window=8))
    timm.create_model("vit_tiny_patch16_224", attn_layer=vit_attention("sparsemax"))

timm has no registry a library can join: it takes a class where it takes ``attn_layer``. The classes made
here are that door.

* ``cnn_attention(name, **config)``: a class called as timm calls CNN attention, ``Cls(channels, **kw)``
  (ResNet's blocks pass ``device=`` and ``dtype=``), for any variant with the ``image_to_image`` convention
  (``se``, ``eca``, ``cbam``, ``coord_attn``, ``non_local``, ``external_attn`` and plugins' vision
  blocks). It holds ``attnzoo.create(name, channels=channels, **config)`` as ``.attn``: x [B, C, H, W] ->
  [B, C, H, W]. ResNet takes it in ``block_args`` (a top-level ``attn_layer=`` is a TypeError there).
* ``vit_attention(name="attention", **config)``: a class with the signature of timm's ViT ``Attention``,
  ``Cls(dim, num_heads=8, qkv_bias=False, qk_norm=False, scale_norm=False, proj_bias=True, attn_drop=0.,
  proj_drop=0., norm_layer=None, device=None, dtype=None)`` and ``forward(x [B, N, dim], attn_mask=None,
  is_causal=False) -> [B, N, dim]``. It holds the variant's attention module (the core with the card's
  window, positions, normaliser, ...) built with ``embed_dim=dim``, ``num_heads``, ``bias=qkv_bias``,
  ``qk_norm`` and ``dropout=attn_drop`` as ``.attn``; ``config`` goes over the card.

State dicts: a timm ``Attention``'s ``qkv.weight``/``qkv.bias`` (q, k and v stacked) and
``proj.weight``/``proj.bias`` load into the core's ``q_proj``/``k_proj``/``v_proj``/``o_proj`` (``qkvo``
layout) or ``in_proj_*``/``out_proj`` (``packed``), so a pretrained ViT's attention weights carry over. They
do not carry over where the layouts differ: grouped key/value heads (``num_kv_heads`` < heads), timm's
LayerNorm ``q_norm``/``k_norm`` (the core's ``qk_norm`` is an RMS norm with a scale only), and the core's
own extra parameters (``relpos``'s ``rel_key``/``rel_value``). The core has one ``bias`` flag for all its
projections, so ``qkv_bias`` must equal ``proj_bias``, and ``scale_norm`` (a norm between attention and
projection) is refused with a ``ConfigError``.

What these classes build goes through ``attnzoo.create``, so the ``attnzoo_place_model`` hook places it
as it places any attnzoo model.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from attnzoo.core import create, list_models, model_info
from attnzoo.errors import ConfigError

try:
    import torch
    from torch import Tensor, nn
except ImportError as e:  # pragma: no cover - torch is a core dependency
    raise ImportError(f"attnzoo.integrations.timm needs torch ({e})") from e

__all__ = ["cnn_attention", "vit_attention", "CnnAttention", "VitAttention"]

IMAGE = "image_to_image"
SEQUENCE = "sequence_to_sequence"
# what timm decides for a ViT attention, so a config may not set it
_FROM_TIMM = ("embed_dim", "num_heads")


def _check_variant(name: str, convention: str, kind: str) -> None:
    spec = model_info(name)
    if spec.convention != convention:
        fitting = [n for n in list_models() if model_info(n).convention == convention]
        raise ConfigError(
            f"{kind}({name!r}): {name} follows the {spec.convention or 'no'} convention; {kind} takes a variant "
            f"with the {convention} convention: {', '.join(fitting)}"
        )


def _class_name(name: str, suffix: str) -> str:
    words = name.replace(":", "_").replace("-", "_").split("_")
    return "Attnzoo" + "".join(w.capitalize() for w in words) + suffix


class CnnAttention(nn.Module):
    """An attnzoo vision block where timm builds CNN attention: ``Cls(channels, **kw)``, x [B, C, H, W] ->
    [B, C, H, W]. Made by :func:`cnn_attention`, which sets the variant and its config."""

    variant: ClassVar[str] = ""
    config: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def __init__(self, channels: int, *, device=None, dtype=None, **kwargs: Any) -> None:
        super().__init__()
        if not self.variant:
            raise ConfigError("CnnAttention is made by attnzoo.integrations.timm.cnn_attention(name, **config)")
        config = {**self.config, **kwargs}
        self.attn = create(self.variant, channels=channels, device=device, dtype=dtype, **config)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x)


def cnn_attention(name: str, **config: Any) -> type[CnnAttention]:
    """A class that timm's CNN blocks build as ``Cls(channels, device=..., dtype=...)``: the vision variant
    ``name`` with ``config`` over its card (the channels come from the block). See the module doc."""
    _check_variant(name, IMAGE, "cnn_attention")
    if "channels" in config:
        raise ConfigError("cnn_attention: the channels come from timm's block; leave channels out of the config")
    create(name, channels=64, device="meta", **config)  # a wrong key fails here, not inside timm
    return type(
        _class_name(name, "Cnn"),
        (CnnAttention,),
        {"variant": name, "config": MappingProxyType(dict(config)), "__module__": __name__},
    )


def _mask(attn_mask: Tensor | None, is_causal: bool, x: Tensor) -> Tensor | None:
    """timm's ``attn_mask`` and ``is_causal`` as the core's bool mask [B, N or 1, N] (True = attend).

    timm's ``Attention`` hands ``attn_mask`` to ``F.scaled_dot_product_attention``, which broadcasts it
    against the scores [B, heads, N, N]: taken here the same way, bool (True = attend) or additive float
    (0 / -inf), in any shape that broadcasts to [B, 1, N, N] (one mask for all heads): [N, N], [B, N, N],
    [B, 1, N, N] (timm's ``create_attention_mask``), [B, 1, 1, N] (which keys are real). A [B, N] padding
    mask (B != N) is refused with what to pass instead: broadcasting reads a 2-D mask as [N, N]."""
    batch, length = x.shape[:2]
    allowed = None
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise ConfigError(f"attnzoo's ViT attention takes attn_mask as a tensor, got {type(attn_mask).__name__}")
        shape = list(attn_mask.shape)
        if shape == [batch, length] and batch != length:
            raise ConfigError(
                f"attnzoo's ViT attention, as timm's Attention, broadcasts attn_mask against the scores [B, heads, "
                f"N, N], so a 2-D mask is [N, N] (queries x keys); got {shape}, a [B, N] padding mask: pass "
                f"attn_mask[:, None, None, :] ([B, 1, 1, N], True = a real key) or timm's create_attention_mask"
            )
        mask = attn_mask.reshape([1] * (4 - attn_mask.dim()) + shape) if attn_mask.dim() <= 4 else attn_mask
        wanted = (batch, 1, length, length)
        if mask.dim() != 4 or any(m not in (1, w) for m, w in zip(mask.shape, wanted, strict=True)):
            raise ConfigError(
                f"attnzoo's ViT attention takes an attn_mask that broadcasts to [B, 1, N, N] = {list(wanted)} (one "
                f"mask for all heads): [N, N], [B, N, N], [B, 1, N, N] or [B, 1, 1, N]; got {shape}"
            )
        if mask.is_floating_point():
            floor = torch.finfo(mask.dtype).min / 2
            if not torch.compiler.is_compiling() and bool((mask.masked_fill(mask <= floor, 0) != 0).any()):
                raise ConfigError("attnzoo's ViT attention takes a bool attn_mask or an additive 0 / -inf one")
            mask = mask > floor
        allowed = mask.to(torch.bool)[:, 0].expand(batch, mask.shape[2], length)
    if is_causal:
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        allowed = causal.expand(batch, length, length) if allowed is None else allowed & causal
    return allowed


def _timm_keys(core: nn.Module) -> dict[str, tuple[str, ...]]:
    """timm's key -> the core's key(s) it splits into (q, k, v for the packed qkv), by the core's layout."""
    layout = getattr(core, "layout", None)
    if layout == "qkvo":
        return {
            "qkv.weight": ("q_proj.weight", "k_proj.weight", "v_proj.weight"),
            "qkv.bias": ("q_proj.bias", "k_proj.bias", "v_proj.bias"),
            "proj.weight": ("o_proj.weight",),
            "proj.bias": ("o_proj.bias",),
        }
    if layout == "packed":
        return {
            "qkv.weight": ("in_proj_weight",),
            "qkv.bias": ("in_proj_bias",),
            "proj.weight": ("out_proj.weight",),
            "proj.bias": ("out_proj.bias",),
        }
    return {}


class VitAttention(nn.Module):
    """attnzoo's attention core where timm's ViT builds its ``Attention``: same constructor, same
    ``forward(x [B, N, dim], attn_mask=None, is_causal=False) -> [B, N, dim]``; timm's ``qkv.*`` and ``proj.*``
    weights load. Made by :func:`vit_attention`, which sets the variant and its config."""

    variant: ClassVar[str] = ""
    config: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        scale_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: Any = None,
        device=None,
        dtype=None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if not self.variant:
            raise ConfigError("VitAttention is made by attnzoo.integrations.timm.vit_attention(name, **config)")
        _refuse(kwargs, scale_norm=scale_norm, qkv_bias=qkv_bias, proj_bias=proj_bias)
        asked: dict[str, Any] = {"embed_dim": dim, "num_heads": num_heads, "bias": bool(qkv_bias)}
        if qk_norm:
            asked["qk_norm"] = True
        if attn_drop:
            asked["dropout"] = attn_drop
        self.attn = create(self.variant, device=device, dtype=dtype, **{**asked, **self.config})
        self.proj_drop = nn.Dropout(proj_drop)
        self.register_load_state_dict_pre_hook(_load_timm_keys)

    @property
    def proj(self) -> nn.Module:
        """The output projection under timm's name (timm's ``fix_init`` rescales ``attn.proj.weight``)."""
        return self.attn.o_proj if getattr(self.attn, "layout", None) == "qkvo" else self.attn.out_proj

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        return self.proj_drop(self.attn(x, _mask(attn_mask, is_causal, x)))


def _refuse(kwargs: dict[str, Any], *, scale_norm: bool, qkv_bias: bool, proj_bias: bool) -> None:
    """The ViT options the core cannot give, each a ConfigError that says so."""
    defaults = {"attn_head_dim": None, "dim_out": None, "gated": False}
    odd = {k: v for k, v in kwargs.items() if k not in defaults or v != defaults[k]}
    if odd:
        raise ConfigError(
            f"attnzoo's ViT attention does not take {', '.join(f'{k}={v!r}' for k, v in odd.items())} "
            f"(head size = dim / num_heads, output width = dim, no gate)"
        )
    if scale_norm:
        raise ConfigError("attnzoo's ViT attention has no norm between attention and projection (scale_norm=True)")
    if bool(qkv_bias) != bool(proj_bias):
        raise ConfigError(
            f"attnzoo's attention core has one bias flag for all projections; timm asked for qkv_bias={qkv_bias} "
            f"and proj_bias={proj_bias}: build the model with both equal"
        )


def _load_timm_keys(module, state_dict, prefix, *args) -> None:
    """Rename (and split) a timm Attention's keys for the core, where the shapes fit; a key that does not
    fit stays as it is, so load_state_dict reports it."""
    core = module.attn
    own = core.state_dict()
    for timm_key, targets in _timm_keys(core).items():
        source = state_dict.get(prefix + timm_key)
        if source is None or any(t not in own for t in targets):
            continue
        parts = source.chunk(len(targets)) if len(targets) > 1 else (source,)
        if all(p.shape == own[t].shape for p, t in zip(parts, targets, strict=True)):
            del state_dict[prefix + timm_key]
            for part, target in zip(parts, targets, strict=True):
                state_dict[f"{prefix}attn.{target}"] = part


def vit_attention(name: str = "attention", **config: Any) -> type[VitAttention]:
    """A class that timm's ViT builds as its ``attn_layer``: the sequence variant ``name`` (the attention core
    or a card over it: ``window``, ``alibi``, ``sparsemax``, ``relpos_self``, ...) with ``config`` over its
    card. See the module doc."""
    _check_variant(name, SEQUENCE, "vit_attention")
    fixed = sorted(k for k in config if k in _FROM_TIMM)
    if fixed:
        raise ConfigError(f"vit_attention: {', '.join(fixed)} come from timm's model (dim, num_heads); leave them out")
    heads = {"num_heads": config["num_kv_heads"]} if config.get("num_kv_heads") else {}  # timm sets the real one
    create(name, device="meta", **heads, **config)  # a wrong key fails here, not inside timm
    return type(
        _class_name(name, "Vit"),
        (VitAttention,),
        {"variant": name, "config": MappingProxyType(dict(config)), "__module__": __name__},
    )
