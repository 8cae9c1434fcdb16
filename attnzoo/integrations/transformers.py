"""attnzoo attention as Hugging Face transformers attention backends (``attn_implementation="attnzoo_..."``).

    import attnzoo.integrations.transformers as azt      # importing it registers every backend once
    azt.register()      # ['attnzoo_alibi', 'attnzoo_entmax15', 'attnzoo_softmax', 'attnzoo_sparsemax', ...]
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attnzoo_sparsemax")
    model.set_attn_implementation("attnzoo_entmax15")   # or switch a built model

transformers (5.x) computes the projections, RoPE and the cache itself and hands the attention step to
the function registered under the model's ``attn_implementation``::

    fn(module, query [B, h, Lq, d], key [B, g, Lk, d], value [B, g, Lk, d], attention_mask, *, scaling,
       dropout, **kwargs) -> (out [B, Lq, h, d], weights [B, h, Lq, Lk] or None)

Each name registered here runs the variant's own attention step, ``Attention.attend_heads`` of the module
its card builds (``attnzoo.create(variant, num_heads=h, num_kv_heads=g, ...)``, one per shape, kept)::

    A = normalizer(scaling · q kᵀ + b  where allowed ∧ pattern)      out = A v

with ``allowed`` the model's mask and ``pattern`` the variant's (window, causal), ``b`` its bias (ALiBi).

=====================  ================================================================================
what                   how
=====================  ================================================================================
masks                  each name is registered in ``AttentionInterface`` and ``AttentionMaskInterface``
                       (class-wide): the mask function is transformers' boolean ``sdpa_mask`` with sdpa's
                       shortcuts, so padding and causality arrive as bool [B, 1, Lq, Lk], or as no mask
                       for an unpadded batch; a 2-D padding mask works too. With no 4-D mask a causal
                       module (``module.is_causal`` or an ``is_causal`` kwarg) gets the causal pattern
                       here, which a softmax variant hands to SDPA as ``is_causal=True``.
GQA                    key/value heads read from the tensors (BERT has no ``num_key_value_groups``);
                       softmax variants share them inside SDPA without repeating them
windows                the model's ``sliding_window`` (a kwarg, else the module's attribute; w tokens,
                       i - j < w, as transformers counts) becomes the exact pattern |i - j| <= w - 1,
                       applied even with no mask; a layer without one takes the card's ``window``. With
                       no mask, a padding mask only, or transformers' 4-D mask of a padded causal batch
                       (checked to be exactly causal, within the model's window, and a key padding) a
                       long sequence runs in the core's blocks, O(T·w)
causal chunks          the sparse normalisers compute in chunks of queries; on a causal batch (padded
                       or not, as above) each chunk multiplies only the keys at or before its last query
positions              ALiBi and windows read absolute positions: keys 0..Lk-1; queries as many as the keys
                       are the keys; fewer (a cached decode) start where their own keys are under the
                       causal mask (after k cached tokens: k; a static cache: the cache position, not
                       the end of its buffer)
empty rows             a query with nothing allowed (left padding) gets zeros, never NaN
dropout                the model's ``dropout`` while ``module.training``; none in eval
weights                returned when the call asks for ``output_attentions`` (else None: the fused path)
dtype                  the model's: float16 and bfloat16 run as the core runs them (sparse normalisers
                       in float32 inside)
=====================  ================================================================================

Masks that carry additive biases (floats other than 0 and -inf) are refused with a ``ConfigError``: an
attnzoo normaliser takes a boolean mask.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from attnzoo.core import create, model_info
from attnzoo.errors import ConfigError, extra_import_message
from attnzoo.integrations import backend_name, backend_variants
from attnzoo.layers.attend import AttendHeads

try:
    import torch
    import transformers
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
except Exception as e:  # the extra is missing, too old, or there but failing to import (said apart)
    raise ImportError(
        extra_import_message(
            "attnzoo.integrations.transformers needs transformers>=5", "transformers", e, "transformers", "torch"
        )
    ) from e

if int(transformers.__version__.split(".")[0]) < 5:  # pragma: no cover - an old transformers
    raise ImportError(
        f"attnzoo.integrations.transformers needs transformers>=5, found {transformers.__version__}: "
        f"pip install 'attnzoo[transformers]'"
    )

__all__ = ["register", "registered", "attention_function", "mask_function"]

BACKEND = "transformers"
# set by the model, never by the caller: they come from the module and the call
_FROM_THE_MODEL = ("num_heads", "num_kv_heads", "causal", "embed_dim")
_TAKEN = ("eager", "sdpa", "flex_attention", "paged|eager", "flash_attention_2", "flash_attention_3")

_cores: dict[tuple[Any, ...], Any] = {}
_cores_lock = threading.Lock()
_registered: dict[str, tuple[str, dict[str, Any]]] = {}


def mask_function(*args: Any, **kwargs: Any) -> Any:
    """transformers' boolean mask (``sdpa_mask``: [B, 1, Lq, Lk], True = attend), with its shortcuts as sdpa
    has them: an unpadded causal batch (or one query, or an unpadded encoder batch) gets no mask at all,
    and the backend applies the causal pattern itself (SDPA's ``is_causal`` on the softmax path)."""
    return sdpa_mask(*args, **kwargs)


def _core(variant: str, config: tuple[tuple[str, Any], ...], heads: int, kv_heads: int, causal: bool, window, device):
    """The variant's attention module for one shape of call, built once through ``attnzoo.create`` (so the
    ``attnzoo_place_model`` hook places it) and kept: it holds no parameters (sizes are left lazy)."""
    key = (variant, config, heads, kv_heads, causal, window, str(device))
    core = _cores.get(key)
    if core is None:
        with _cores_lock:
            core = _cores.get(key)
            if core is None:
                overrides = dict(config, num_heads=heads, num_kv_heads=kv_heads, causal=causal)
                if window is not None:
                    overrides["window"] = window
                core = create(variant, device=device, **overrides)
                if not callable(getattr(core, "attend_heads", None)):
                    raise ConfigError(
                        f"{variant}: its card lists backends: [transformers], but {type(core).__name__} has no "
                        f"attend_heads(q, k, v, allowed, ...) method; build it on attnzoo's Attention"
                    )
                _cores[key] = core.eval()
    return core


def _allowed(mask: Any, name: str) -> Any:
    """The model's mask as bool [B, 1 or h, Lq or 1, Lk] (True = attend), or None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise ConfigError(
            f"{name} takes a tensor mask, got {type(mask).__name__}: the model built its mask for another "
            f"attn_implementation; set it with attn_implementation={name!r} when building the model"
        )
    if mask.dim() == 2:  # [B, Lk] padding, 1 = real token
        mask = mask[:, None, None, :]
    if mask.dim() != 4:
        raise ConfigError(f"{name} expects the attention mask as [batch, 1, q_len, kv_len], got {list(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        return mask != 0
    allowed = mask > torch.finfo(mask.dtype).min / 2
    if not torch.compiler.is_compiling() and bool((mask.masked_fill(~allowed, 0) != 0).any()):
        raise ConfigError(
            f"{name} got an additive float mask that carries biases (values other than 0 and -inf); an attnzoo "
            f"normaliser takes a boolean mask: use eager or sdpa for this model"
        )
    return allowed


def _positions(allowed: Any, q_len: int, k_len: int, causal: bool, device: Any) -> tuple[Any, Any]:
    """Absolute positions of the queries [Lq] and keys [Lk]; keys are 0..Lk-1.

    As many queries as keys: they are the keys (a forward, a prefill). Fewer, under a causal mask: each
    real query attends to its own key and to none after it, so the queries' offset is the largest
    ``last allowed key - row`` over the rows (a decode after k cached tokens: k; a static cache: the
    cache position, not the end of its buffer; padded rows see less and never raise it). Fewer with no
    mask: one query is the last key (transformers skips the mask of an unpadded decode step); several
    are the first Lq keys, as sdpa's ``is_causal`` reads them (transformers skips the mask of a static
    cache's first fill, whose buffer holds nothing after the prompt). Otherwise the queries are the last
    Lq keys."""
    keys = torch.arange(k_len, device=device)
    rows = torch.arange(q_len, device=device)
    if q_len == k_len:
        return rows, keys
    if causal and allowed is None and q_len > 1:
        return rows, keys
    offset = torch.tensor(k_len - q_len, device=device)
    if causal and allowed is not None and allowed.shape[-2] == q_len and allowed.shape[-1] == k_len:
        last = torch.where(allowed, keys, -1).amax(-1)  # [B, 1 or h, Lq]: -1 where a row sees nothing
        seen = torch.where(last >= 0, last - rows, -1).amax()
        offset = torch.where(seen >= 0, seen, offset)
    return offset + rows, keys


def _gains_from_the_pattern(core: Any) -> bool:
    """Whether a core given its pattern apart from the padding computes less: a window (its blocks, O(T·w))
    or a materialised normaliser (it leaves out the keys no query of a chunk can see). A softmax core
    without a window hands the whole mask to SDPA either way."""
    return getattr(core, "window", None) is not None or getattr(core, "normalizer", "softmax") != "softmax"


# the last mask checked by _key_padding (a weak reference, its version, the window) and the answer:
# every layer of a forward gets the same mask tensor, so it is checked once
_last_check: tuple[Any, int, int | None, Any] | None = None


def _words(t: Any) -> Any:
    """A contiguous bool tensor whose last axis is a multiple of 8, read 8 entries at a time (int64)."""
    return t.view(torch.uint8).view(torch.int64)


def _key_padding(core: Any, allowed: Any, window: int | None) -> Any:
    """The key padding real [B, Lk] (True = a real token) if ``allowed`` [B, 1, L, L] is exactly causal
    (within the model's ``window``, a distance, where it has one) and that padding: transformers' mask of
    a padded causal batch. The causal core then applies the same pattern itself (with the card's window
    where the model has none, as it would on the full mask). None otherwise, for a core with a pattern of
    its own, and under a graph (whose mask a compiled program takes as it comes).

    One comparison with the expected mask, 8 entries at a time where the length allows (at B = 8,
    L = 1024 on one thread, 9 ms against 48 ms entry by entry), once per mask tensor."""
    global _last_check
    if allowed.shape[1] != 1 or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return None
    if type(core)._pattern is not AttendHeads._pattern:
        return None
    last = _last_check
    if last is not None and last[0]() is allowed and last[1] == allowed._version and last[2] == window:
        return last[3]
    length = allowed.shape[-1]
    pattern = torch.ones(length, length, dtype=torch.bool, device=allowed.device).tril()  # j <= i
    if window is not None:
        pattern = pattern.triu(-window)  # j >= i - window
    real = allowed[:, 0].diagonal(dim1=-2, dim2=-1).contiguous()  # query j may see key j: is j real
    if length % 8 == 0 and allowed.is_contiguous():
        same = torch.equal(_words(allowed[:, 0]), _words(pattern)[None] & _words(real)[:, None, :])
    else:
        same = torch.equal(allowed, pattern & real[:, None, None, :])
    answer = real if same else None
    _last_check = (weakref.ref(allowed), allowed._version, window, answer)
    return answer


def _reads_positions(core: Any) -> bool:
    """Whether the core's pattern or bias depends on positions (a plugin's core that does not say: yes)."""
    return (
        getattr(core, "causal", True)
        or getattr(core, "window", 1) is not None
        or getattr(core, "positions", "alibi") not in ("none", "rope")  # RoPE was applied by the model
    )


def _model_window(module: Any, kwargs: dict[str, Any]) -> int | None:
    """The layer's sliding window as a distance: transformers' ``sliding_window`` w counts tokens (i - j < w,
    flash attention's inclusive window), so |i - j| <= w - 1."""
    sliding = kwargs["sliding_window"] if "sliding_window" in kwargs else getattr(module, "sliding_window", None)
    if sliding is None or isinstance(sliding, bool) or not isinstance(sliding, int) or sliding < 1:
        return None
    return sliding - 1


def _wants_weights(module: Any, kwargs: dict[str, Any]) -> bool:
    asked = kwargs.get("output_attentions")
    if asked is None:
        asked = getattr(getattr(module, "config", None), "output_attentions", False)
    return bool(asked)


def attention_function(variant: str, config: dict[str, Any] | None = None, *, name: str | None = None):
    """The function transformers calls for ``variant`` (with ``config`` over its card): see the module doc."""
    frozen = tuple(sorted((config or {}).items()))
    label = name or backend_name(variant)

    def attnzoo_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        allowed = _allowed(attention_mask, label)
        is_causal = kwargs.get("is_causal")
        if is_causal is None:
            is_causal = bool(getattr(module, "is_causal", False))
        # a 4-D mask from transformers carries causality already; without one the pattern goes on here
        causal = bool(is_causal) and (attention_mask is None or attention_mask.dim() == 2)
        window = _model_window(module, kwargs)
        heads, kv_heads = query.shape[1], key.shape[1]
        core = None
        if is_causal and not causal and allowed is not None and allowed.shape[-2] == allowed.shape[-1] > 1:
            # transformers' 4-D mask of a padded causal batch: if it is exactly the pattern and a key padding,
            # the key padding alone goes on, to the core that applies the pattern itself (its blocks, or
            # its materialised form without the keys a query cannot see)
            patterned = _core(variant, frozen, heads, kv_heads, True, window, query.device)
            real = _key_padding(patterned, allowed, window) if _gains_from_the_pattern(patterned) else None
            if real is not None:
                core, allowed = patterned, real[:, None, None, :]
        if core is None:
            core = _core(variant, frozen, heads, kv_heads, causal, window, query.device)
        q_pos = k_pos = None  # the default positions (uncached) serve a core that reads none
        if _reads_positions(core):
            q_pos, k_pos = _positions(allowed, query.shape[-2], key.shape[-2], bool(is_causal), query.device)
        out, weights = core.attend_heads(
            query,
            key,
            value,
            allowed,
            q_positions=q_pos,
            k_positions=k_pos,
            scale=scaling,
            dropout=dropout if module.training else 0.0,
            return_attention=_wants_weights(module, kwargs),
        )
        return out.transpose(1, 2).contiguous(), weights

    attnzoo_attention.__name__ = attnzoo_attention.__qualname__ = label
    attnzoo_attention.__doc__ = f"attnzoo's {variant!r} attention as a transformers backend ({label})."
    return attnzoo_attention


def _register_one(variant: str, name: str, config: dict[str, Any]) -> str:
    with _cores_lock:  # the variant may have been registered anew (override=True): build its modules again
        for key in [k for k in _cores if k[0] == variant]:
            del _cores[key]
    AttentionInterface.register(name, attention_function(variant, config, name=name))
    AttentionMaskInterface.register(name, mask_function)  # class-wide: an instance's item is never read
    _registered[name] = (variant, dict(config))
    return name


def _check_one(variant: str, name: str, config: dict[str, Any]) -> None:
    spec = model_info(variant)
    if BACKEND not in spec.backends:
        raise ConfigError(
            f"{variant} does not declare itself a transformers backend (its card has no backends: [transformers]); "
            f"the ones that do: {', '.join(backend_variants(BACKEND))}"
        )
    if not isinstance(name, str) or not name or name in _TAKEN:
        raise ConfigError(f"register(name={name!r}): choose a new name, not one of transformers' own ({_TAKEN})")
    fixed = sorted(k for k in config if k in _FROM_THE_MODEL)
    if fixed:
        raise ConfigError(f"register({variant!r}): {', '.join(fixed)} come from the model, not from register()")
    create(variant, num_heads=1, num_kv_heads=1, **config)  # a wrong key fails here, not in the model


def register(variant: str | None = None, *, name: str | None = None, **config: Any) -> list[str]:
    """Register attnzoo backends with transformers and return their names.

    ``register()`` registers every variant whose card lists ``backends: [transformers]`` (built-in and
    installed plugins') as ``attnzoo_<variant>``. ``register("window", name="attnzoo_window64", window=64)``
    registers one variant with config over its card (not ``num_heads``, ``num_kv_heads`` or ``causal``,
    which come from the model). Each name goes into both ``AttentionInterface`` and
    ``AttentionMaskInterface``; registering again replaces. Importing this module runs ``register()``.
    """
    if variant is None:
        if name is not None or config:
            raise ConfigError("register(): name= and config apply to one variant, e.g. register('window', window=64)")
        return [_register_one(v, backend_name(v), {}) for v in backend_variants(BACKEND)]
    chosen = name or backend_name(variant)
    _check_one(variant, chosen, config)
    return [_register_one(variant, chosen, config)]


def registered() -> dict[str, str]:
    """Backend name -> the variant it runs, for every name registered in this process."""
    return {name: variant for name, (variant, _) in _registered.items()}


register()
