"""``create()`` and ``load()``: name -> spec -> config -> module -> weights -> placement.

The factory is imported here, from the card's ``"module:attr"`` string, and nowhere earlier: listing
never imports torch. A model that will receive weights is built on the ``meta`` device and the weights
are assigned in place (``load_state_dict(assign=True)``), so pretrained creation costs about the read
of the file itself.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from attnzoo.core.config import card_config, user_config, validate_config
from attnzoo.core.hub import HUB_PREFIX, hub_folder
from attnzoo.core.memory import check_memory
from attnzoo.core.registry import REGISTRY, natural_key
from attnzoo.core.saved_names import current_config
from attnzoo.core.spec import ModelSpec, WeightsSpec, thaw
from attnzoo.errors import ConfigError, ReinitializedWarning, UnknownModelError, WeightsError
from attnzoo.io import folders as folders_io
from attnzoo.io import weights as weights_io

__all__ = [
    "create",
    "load",
    "resolve_factory",
    "parse_dtype",
    "resolve_device",
    "weights_path",
]

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float64": "float64",
    "fp64": "float64",
    "double": "float64",
}


def resolve_factory(spec: ModelSpec) -> Callable[..., Any]:
    """Import the callable behind a spec's ``"module:attr"`` factory string."""
    if callable(spec.factory):
        return spec.factory
    module_name, _, attr = spec.factory.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"{spec.name}: cannot import {module_name!r} for factory {spec.factory!r} ({e}); is the package "
            f"that provides it ({spec.provider}) installed?"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{spec.name}: factory {spec.factory!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{spec.name}: factory {spec.factory!r} is not callable")
    return target


def parse_dtype(dtype: Any) -> Any:
    """A ``torch.dtype`` from a dtype or one of ``"float32" | "bfloat16" | "float16" | "float64"``."""
    import torch

    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ConfigError(
                f"dtype must be a floating type (float32, bfloat16, float16, float64), got {dtype}; "
                f"attnzoo's layers compute in floating point"
            )
        return dtype
    if isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in _DTYPES:
        return getattr(torch, _DTYPES[dtype.lower().removeprefix("torch.")])
    shown = repr(dtype) if len(repr(dtype)) <= 40 else repr(dtype)[:37] + "..."
    raise ConfigError(f"dtype must be a torch.dtype or one of float32, bfloat16, float16, float64; got {shown}")


def resolve_device(device: Any) -> Any:
    """A ``torch.device``, or the original string when neither a plugin nor torch knows it.

    Plugins answer first (``attnzoo_resolve_device``); the built-in answer turns ``"auto"`` into cuda,
    else mps, else cpu. A string nobody resolves is passed on unchanged to the placement hook, where a
    plugin may still claim it.
    """
    import torch

    if device is None or isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise ConfigError(f"device must be a string or a torch.device, got {type(device).__name__}")
    resolved = REGISTRY.first_result("attnzoo_resolve_device", device=device)
    if resolved is not None:
        return resolved
    try:
        return torch.device(device)
    except (RuntimeError, ValueError):
        return device


def _available_devices() -> str:
    import torch

    found = ["cpu", "meta"]
    if torch.cuda.is_available():
        found.append(f"cuda:0..{torch.cuda.device_count() - 1}")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return ", ".join(found)


def _place(model: Any, device: Any, dtype: Any) -> Any:
    try:
        placed = REGISTRY.first_result("attnzoo_place_model", model=model, device=device, dtype=dtype)
    except (RuntimeError, AssertionError) as e:  # torch's own refusal: no such device on this machine
        raise ConfigError(
            f"cannot place the model on {str(device)!r}: {e}; this machine has "
            f"{_available_devices()} (or use device='auto')"
        ) from None
    if placed is None:
        raise ConfigError(
            f"no plugin places a model on device {device!r}; use cpu, cuda[:N], mps, meta or auto, or install "
            f"the plugin that provides {device!r} (`attnzoo plugins` lists what is loaded)"
        )
    return placed


def _select_weights(spec: ModelSpec, tag: str | None, pretrained: bool | str) -> WeightsSpec | None:
    if pretrained is False or pretrained is None:
        return None
    if isinstance(pretrained, str):
        if not pretrained.strip():
            raise ConfigError(
                f"{spec.name}: pretrained={pretrained!r} names no tag; pass pretrained=True (--pretrained) for the "
                f"default tag, or one of {', '.join(spec.weights) or 'no tags: it has no pretrained weights'}"
            )
        if tag is not None and tag != pretrained:
            raise ConfigError(f"{spec.name}: the name asks for tag {tag!r} but pretrained={pretrained!r}")
        tag = pretrained
    elif pretrained is not True:
        raise ConfigError(f"pretrained must be True, False or a tag name, got {pretrained!r}")
    if not spec.weights:
        raise UnknownModelError(
            f"{spec.name!r} has no pretrained weights; `attnzoo list --pretrained` shows the names that do",
            name=spec.name,
        )
    tag = tag or spec.default_tag
    if tag is None:
        raise ConfigError(f"{spec.name}: several pretrained tags and no default; pick one of {sorted(spec.weights)}")
    if tag not in spec.weights:
        raise UnknownModelError(
            f"{spec.name!r} has no pretrained tag {tag!r} (its tags: {', '.join(spec.weights)})", name=spec.name
        )
    return spec.weights[tag]


def weights_path(spec: ModelSpec, wspec: WeightsSpec) -> Path:
    """Where a pretrained tag's file is on this machine, without fetching anything: a bundled file as
    written (relative to the spec's weights folder), a remote one at its place in the cache."""
    from attnzoo.io.sources import cached_path

    if wspec.remote:
        return cached_path(wspec)
    path = Path(wspec.file)
    return path if path.is_absolute() else Path(spec.weights_dir or ".") / path


def _build(
    factory: Callable[..., Any], kwargs: Mapping[str, Any], *, on_meta: bool, name: str, dtype: Any = None
) -> Any:
    import torch

    try:
        with torch.device("meta"):  # sized first, on meta: no memory is spent on a model that cannot fit
            shape_only = factory(**kwargs)
        check_memory(shape_only, name, kwargs, dtype)
        if on_meta:
            return shape_only
        return factory(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError, RuntimeError) as e:  # raised by the config's values
        shown = " ".join(str(e).split())
        raise ConfigError(f"{name}: the factory refused the config: {shown[:400]}") from None


def _load_state(
    model: Any,
    tensors: Mapping[str, Any],
    *,
    source: Path,
    assign: bool,
    reset_head: bool,
    changed: Mapping[str, tuple[Any, Any]],
) -> list[str]:
    """Load ``tensors`` into ``model``; a missing, unexpected or misshapen key is a ``WeightsError``.

    ``changed`` holds the config keys the caller set to other values than the weights were trained
    with (key -> (asked, trained)); when shapes then differ, that is the caller's ``ConfigError``.
    With ``reset_head=True`` the tensors whose shape differs are skipped and keep their fresh
    initialisation; their keys are returned. Nothing is loaded when anything else does not fit.
    """
    from torch.nn.parameter import is_lazy

    tensors = _apply_layouts(model, tensors)  # what load_state_dict would accept, before keys are compared
    expected = model.state_dict(keep_vars=True)  # lazy parameters cannot be detached
    missing = sorted(set(expected) - set(tensors), key=natural_key)
    unexpected = sorted(set(tensors) - set(expected), key=natural_key)
    misshapen = [
        k
        for k in expected
        if k in tensors and not is_lazy(expected[k]) and tuple(expected[k].shape) != tuple(tensors[k].shape)
    ]
    problems = []
    kinds = [
        f"{k} is {str(tensors[k].dtype).removeprefix('torch.')} in the file, "
        f"{str(expected[k].dtype).removeprefix('torch.')} in the model"
        for k in expected
        if k in tensors and _dtype_kind(tensors[k]) != _dtype_kind(expected[k])
    ]
    if kinds:  # load_state_dict would copy a complex tensor's real part, or an int64 one, without a word
        problems.append(f"numbers of another kind: {', '.join(kinds[:8])}{' ...' if len(kinds) > 8 else ''}")
    if missing:
        problems.append(f"missing from the file: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        problems.append(f"not in the model: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}")
    shapes = [f"{k}: file {list(tensors[k].shape)} vs model {list(expected[k].shape)}" for k in misshapen[:8]]
    if misshapen and changed and not reset_head and not problems:
        asked = ", ".join(f"{k}={a!r} (the weights have {t!r})" for k, (a, t) in changed.items())
        raise ConfigError(
            f"{asked} conflicts with the weights in {source.name} ({'; '.join(shapes)}); drop the override, "
            f"or pass reset_head=True to load what fits and re-initialise the rest"
        )
    if not reset_head:
        problems += shapes
    if problems:
        raise WeightsError(f"{source} does not fit the model ({'; '.join(problems)}); nothing was loaded")
    if reset_head:
        model.load_state_dict({k: v for k, v in tensors.items() if k not in misshapen}, strict=False)
        return misshapen
    model.load_state_dict(tensors, strict=True, assign=assign)
    return []


def _dtype_kind(tensor: Any) -> str:
    """floating, complex, bool or integer: a weight converts within its kind (float16 -> float32), never
    across (a complex or an integer tensor is not a real parameter)."""
    if tensor.is_complex():
        return "complex"
    if tensor.is_floating_point():
        return "floating"
    return "bool" if str(tensor.dtype) == "torch.bool" else "integer"


def _apply_layouts(model: Any, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors with every module's ``convert_layout`` applied (a reference repository's key names
    turned into attnzoo's, as ``load_state_dict`` does through its pre-hooks)."""
    converted = dict(tensors)
    for prefix, module in model.named_modules():
        convert = getattr(module, "convert_layout", None)
        if callable(convert):
            convert(converted, f"{prefix}." if prefix else "")
    return converted


def _read_source(path: Path, sha256: str | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    """Tensors and decoded metadata of a weights file or saved folder, its digest verified, and the files a
    saved folder's model carries (none for a weights file)."""
    files: dict[str, bytes] = {}
    if path.is_dir():
        tensors, meta, files = folders_io.read_saved_folder(path, sha256)
    else:
        tensors, meta = weights_io.read_weights(path, sha256=sha256 or folders_io.recorded_digests(path) or None)
    return tensors, weights_io.decode_metadata(meta, where=path), files


def create(
    name: str,
    *,
    pretrained: bool | str = False,
    weights: str | Path | None = None,
    config: Any = None,
    device: Any = None,
    dtype: Any = None,
    reset_head: bool = False,
    **overrides: Any,
) -> Any:
    """Build a registered model.

    Args:
        name: ``arch``, ``arch.tag`` or ``provider:arch`` (see ``attnzoo list``), or
            ``hf-hub:org/repo[@revision]``: a folder written by ``attnzoo.save`` and pushed to the Hub.
        pretrained: True for the card's default tag, a tag name for another, False for fresh weights.
        weights: a ``.safetensors`` file or a folder written by ``attnzoo.save`` to load instead.
        config: a dict, ``DictConfig`` or YAML path; overrides the card and the tag's config.
        device: ``"cpu"``, ``"cuda:1"``, ``"auto"``, ``"meta"``, a ``torch.device`` or a plugin's string.
        dtype: a ``torch.dtype`` or ``"float32" | "bfloat16" | "float16"``.
        reset_head: load weights whose config differs from yours, re-initialising the tensors that
            no longer fit (a new number of labels, say) instead of raising ``ConfigError``.
        **overrides: constructor arguments, highest precedence (``num_labels=50``). A constructor
            argument that shares a name with a parameter of ``create`` (``name``, ``device``, ...)
            goes through ``config={...}``.

    Returns:
        The ``nn.Module``, with ``attnzoo_config`` (name, factory, config) for ``attnzoo.save`` and
        ``attnzoo_metadata`` (vocabulary, labels, ... of pretrained weights). A model that received
        weights (``pretrained``, ``weights=``, a Hub folder) comes back in eval mode, ready to predict,
        as Hugging Face's ``from_pretrained`` does; a fresh one in train mode, as timm's and torchvision's.
        The factory is called twice: first on the ``meta`` device, to check that the model fits in memory
        before anything is allocated, then for real (on ``meta`` only, when weights will be assigned).
    """
    if isinstance(name, str) and name.startswith(HUB_PREFIX):
        if pretrained or weights is not None:
            raise ConfigError(f"{name}: a Hub folder brings its own weights; drop pretrained= and weights=")
        return _load_folder(
            hub_folder(name[len(HUB_PREFIX) :]),
            device=device,
            dtype=dtype,
            sha256=None,
            config=config,
            overrides=overrides,
        )
    spec, tag = REGISTRY.resolve(name)
    wspec = _select_weights(spec, tag, pretrained)
    settings = _Settings(config, user_config(config) if config is not None else {}, overrides)
    loaded = None
    checked = None
    if weights is not None:
        path = folders_io.as_path(weights, "weights= (a .safetensors file or a folder written by attnzoo.save)")
        tensors, meta, _ = _read_source(path, None)  # the weights alone: the files a folder carries stay there
        loaded = (tensors, meta, path)
    elif wspec is not None:
        from attnzoo.io.sources import resolve_weights

        # the config is checked before the weights are fetched and hashed: a typo costs no sha256 of the file
        checked = _checked_kwargs(spec, thaw(wspec.config), settings)
        parse_dtype(dtype)
        path = resolve_weights(spec, wspec)
        tensors, meta = weights_io.read_weights(path, sha256=wspec.sha256, what=f"{spec.name}.{wspec.tag} weights")
        loaded = (tensors, weights_io.decode_metadata(meta, where=path), path)
    model = _assemble(
        spec, tag, wspec, loaded, settings, device=device, dtype=dtype, reset_head=reset_head, checked=checked
    )
    # weights that were trained come back ready to predict, as from_pretrained's do; a fresh model trains
    return model.eval() if loaded is not None and hasattr(model, "eval") else model


class _Settings(NamedTuple):
    """What the caller asked for: ``config=`` as given (for messages) and as read (once), and the overrides."""

    source: Any
    layer: dict[str, Any]
    overrides: dict[str, Any]


def _checked_kwargs(spec: ModelSpec, tag_config: dict, settings: _Settings) -> tuple[Any, dict, dict]:
    """The factory, the merged config (card < tag < ``config`` < overrides, under the card's rules) and the
    keyword arguments it gives the factory, checked against its signature; a ConfigError names a config
    file's key."""
    where = f"config file {settings.source}" if isinstance(settings.source, (str, Path)) else "config="
    merged = card_config(
        spec, ("the pretrained tag", tag_config), (where, settings.layer), ("a keyword argument", settings.overrides)
    )
    factory = resolve_factory(spec)
    try:
        return factory, merged, validate_config(factory, dict(merged), model=spec.name)
    except ConfigError as e:
        message = str(e)
        if isinstance(settings.source, (str, Path)) and any(repr(k) in message for k in settings.layer):
            message = f"{message} (in config file {settings.source})"
        raise ConfigError(message) from None


def _assemble(spec, tag, wspec, loaded, settings: _Settings, *, device, dtype, reset_head, checked=None) -> Any:
    import torch

    tag_config = thaw(spec.weights[tag].config) if tag else {}
    if wspec is not None:
        tag_config = thaw(wspec.config)
    tensors, file_meta, source = loaded if loaded is not None else (None, None, None)
    if file_meta is not None and file_meta["config"] is not None:
        from_file = {**tag_config, **file_meta["config"]}
        if from_file != tag_config:
            checked = None  # the file says more than the tag did: check what it says
        tag_config = from_file

    asked = {**settings.layer, **settings.overrides}
    changed = {k: (v, tag_config[k]) for k, v in asked.items() if k in tag_config and tag_config[k] != v}
    factory, merged, kwargs = checked or _checked_kwargs(spec, tag_config, settings)
    torch_dtype = parse_dtype(dtype)
    torch_device = resolve_device(device)

    on_meta = (tensors is not None and not reset_head) or (
        isinstance(torch_device, torch.device) and torch_device.type == "meta"
    )
    model = _build(factory, kwargs, on_meta=on_meta, name=spec.name, dtype=torch_dtype)
    if isinstance(getattr(type(model), "name", None), str) and type(model).name != spec.name:
        model.name = spec.name  # a card over a shared class (a preset of the attention core): errors name the card
    if tensors is not None:
        # weights may be stored in float16; the model is float32 unless asked, or unless it holds the dtype its
        # weights were saved in (a converted Keras model's is its file's: a bfloat16 port stays bfloat16)
        if torch_dtype is None and not getattr(model, "keeps_saved_dtype", False):
            default = torch.get_default_dtype()
            tensors = {k: v.to(default) if v.is_floating_point() else v for k, v in tensors.items()}
        assert source is not None  # tensors come with the file they were read from
        reset = _load_state(
            model, tensors, source=source, assign=not reset_head, reset_head=reset_head, changed=changed
        )
        if reset:
            warnings.warn(
                f"{spec.name}: re-initialised {', '.join(reset)} (their shapes differ from {source.name})",
                ReinitializedWarning,
                stacklevel=3,
            )

    metadata = dict(file_meta["extra"]) if file_meta else {}
    if wspec is not None:
        metadata.setdefault("tag", wspec.tag)
        metadata.setdefault(
            "provenance",
            {
                k: v
                for k, v in wspec.to_dict().items()
                if k in ("metrics", "dataset", "data", "license", "recipe") and v
            },
        )
    try:  # what save() needs to rebuild it; a factory may return an object that takes no attributes
        model.attnzoo_config = {"name": REGISTRY.display_name(spec), "factory": spec.factory_name, "config": merged}
        model.attnzoo_metadata = metadata
    except (AttributeError, TypeError):
        pass
    if torch_device is not None or torch_dtype is not None:
        model = _place(model, torch_device, torch_dtype)
    return model


def load(directory_or_file: str | Path, *, device: Any = None, dtype: Any = None, sha256: str | None = None) -> Any:
    """Rebuild a model saved by ``attnzoo.save`` (a folder) or a weights file with attnzoo metadata, in eval
    mode (call ``.train()`` to go on training it).

    The name in the file's metadata picks the registered spec. The file's sha256 is checked against its
    folder's ``config.yaml``, a ``FILE.sha256`` next to it, or ``sha256=``. The files a folder's model carries
    beside its weights (a converted keras-hub model's tokenizer) come back as its ``attnzoo_files``.
    """
    path = folders_io.as_path(directory_or_file, "load() (a folder written by attnzoo.save, or a weights file)")
    return _load_folder(path, device=device, dtype=dtype, sha256=sha256, config=None, overrides={})


def _load_folder(path: Path, *, device: Any, dtype: Any, sha256: str | None, config: Any, overrides: dict) -> Any:
    tensors, info, files = _read_source(path, sha256)
    if not info["name"] or info["config"] is None:
        raise WeightsError(f"{path}: no attnzoo metadata (name, config); load it with create(NAME, weights=...)")
    spec, tag = REGISTRY.resolve(info["name"])
    info = {**info, "config": current_config(spec.name, info["config"])}  # a 0.1.0 folder's names, today's
    settings = _Settings(config, user_config(config) if config is not None else {}, overrides)
    model = _assemble(spec, tag, None, (tensors, info, path), settings, device=device, dtype=dtype, reset_head=False)
    if files:  # what the model carried beside its weights (a port's tokenizer), given back for save() to keep
        model.attnzoo_files = files
    return model.eval() if hasattr(model, "eval") else model
