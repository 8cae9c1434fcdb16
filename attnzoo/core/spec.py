"""What the registry knows about a model: ``ModelSpec`` and ``WeightsSpec``, plus the name grammar.

Both are frozen dataclasses of plain data (strings, numbers, read-only mappings). Nothing here imports
torch or a factory: a spec is what a model card says, nothing more.

Names follow ``[provider:]arch[.tag]`` where each part is lower-case ``[a-z][a-z0-9_]*`` (a provider,
being an entry-point name, may also contain ``-``). ``labelwise`` is an architecture,
``bilstm_labelwise.wordnet`` an architecture with a pretrained tag, ``example:gated_pool`` an
architecture asked for from one provider.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, NamedTuple

__all__ = [
    "ModelSpec",
    "WeightsSpec",
    "CARD_FIELDS",
    "WEIGHTS_FIELDS",
    "ParsedName",
    "parse_name",
    "is_valid_arch",
    "MISSING",
    "BUILTIN_PROVIDER",
    "LOCAL_PROVIDER",
]

MISSING = "???"  # omegaconf's marker for a required value
BUILTIN_PROVIDER = "attnzoo"
LOCAL_PROVIDER = "local"  # in-process attnzoo.register() calls

_ARCH = r"[a-z][a-z0-9_]*"
_PROVIDER = r"[a-z][a-z0-9_\-]*"
_NAME_RE = re.compile(rf"(?:(?P<provider>{_PROVIDER}):)?(?P<arch>{_ARCH})(?:\.(?P<tag>{_ARCH}))?")
_ARCH_RE = re.compile(_ARCH)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")  # each whole value: fullmatch ("$" takes a trailing "\n")


class ParsedName(NamedTuple):
    provider: str | None
    arch: str
    tag: str | None


def parse_name(name: str) -> ParsedName | None:
    """Split ``[provider:]arch[.tag]`` into its parts, or return None when ``name`` breaks the grammar."""
    if not isinstance(name, str):
        return None
    match = _NAME_RE.fullmatch(name)
    if match is None:
        return None
    return ParsedName(match["provider"], match["arch"], match["tag"])


def is_valid_arch(name: str) -> bool:
    return isinstance(name, str) and _ARCH_RE.fullmatch(name) is not None


def freeze(value: Any) -> Any:
    """A read-only deep copy: dicts become ``MappingProxyType``, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of :func:`freeze`: plain dicts and lists, fit for JSON, YAML and omegaconf."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class WeightsSpec:
    """One pretrained tag of a model: where its bytes come from, their digest, and their provenance.

    Exactly one source: ``file`` (bundled: relative to the weights folder of the card), ``url`` (http,
    https or file URL, fetched into the cache on first use) or ``hf_hub`` (``org/repo[@revision]`` with
    ``filename``, default ``model.safetensors``). ``sha256`` is required for every source: it is checked
    on every load and keys the cache.
    """

    tag: str
    file: str = ""
    sha256: str = ""
    url: str = ""
    hf_hub: str = ""
    filename: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    dataset: str = ""
    license: str = ""
    recipe: str = ""
    seed: int | list[int] | None = None  # a list: an ensemble's members, one recipe run per seed
    data: str = ""  # the data source and its version (package, version, sha256 of the file read)
    train_time: str = ""  # wall time of the recipe on the machine that produced the file
    splits: Mapping[str, int] = field(default_factory=dict)  # examples in train / val / test
    baseline: Mapping[str, Any] = field(default_factory=dict)  # a simple model on the same split
    notes: str = ""
    num_params: int | None = None  # parameters of the model the file loads into (checked by the tests)
    file_size: int | None = None  # bytes of the file (checked by the tests)
    torch_version: str = ""  # the torch that wrote the file

    def __post_init__(self) -> None:
        if not is_valid_arch(self.tag):
            raise ValueError(f"invalid pretrained tag {self.tag!r}: expected [a-z][a-z0-9_]*")
        if not isinstance(self.sha256, str) or not _SHA256_RE.fullmatch(self.sha256):
            raise ValueError(f"sha256 of tag {self.tag!r} must be 64 lower-case hex digits, got {self.sha256!r}")
        sources = [k for k in ("file", "url", "hf_hub") if getattr(self, k)]
        if len(sources) != 1:
            raise ValueError(
                f"tag {self.tag!r} needs exactly one source of its bytes (file, url or hf_hub), "
                f"got {', '.join(sources) or 'none'}"
            )
        if self.url and not re.match(r"(https?|file)://", self.url):
            raise ValueError(f"url of tag {self.tag!r} must be an http, https or file URL, got {self.url!r}")
        if self.hf_hub and not re.fullmatch(r"[\w.\-]+/[\w.\-]+(@[\w.\-/]+)?", self.hf_hub):
            raise ValueError(f"hf_hub of tag {self.tag!r} must be org/repo or org/repo@revision, got {self.hf_hub!r}")
        if self.filename and not self.hf_hub:
            raise ValueError(f"tag {self.tag!r}: filename goes with hf_hub (a url names its own file)")
        if self.url and (re.search(r"%0[0-9a-fA-F]|%1[0-9a-fA-F]|%7[fF]|[\x00-\x20\x7f]", self.url)):
            raise ValueError(f"url of tag {self.tag!r} holds a control character or a space; got {self.url!r}")
        if self.filename:
            parts = self.filename.replace("\\", "/").split("/")
            if self.filename.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in self.filename:
                raise ValueError(
                    f"filename of tag {self.tag!r} must be a file's path inside the repository (no '.', '..', "
                    f"leading '/' or empty part), got {self.filename!r}"
                )
        for name in ("num_params", "file_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} of tag {self.tag!r} must be a whole number >= 0, got {value!r}")
        for name in ("config", "metrics", "splits", "baseline"):
            object.__setattr__(self, name, freeze(getattr(self, name) or {}))

    @property
    def source(self) -> str:
        """Where the bytes come from, as people read it: the file, the URL, or hf://org/repo@rev/filename."""
        if self.url:
            return self.url
        if self.hf_hub:
            return f"hf://{self.hf_hub}/{self.filename or 'model.safetensors'}"
        return self.file

    @property
    def remote(self) -> bool:
        return bool(self.url or self.hf_hub)

    def to_dict(self) -> dict[str, Any]:
        """Every card field of the tag (:data:`WEIGHTS_FIELDS`), as plain data."""
        return {name: thaw(getattr(self, name)) for name in WEIGHTS_FIELDS}


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: how to build it (factory + config defaults) and its pretrained weights.

    ``factory`` is a ``"module:attr"`` string (imported only by ``create()``) or a callable.
    ``config`` holds the card's defaults: ``"???"`` for a required value, ``None`` for one inferred lazily.
    ``provider`` is ``"attnzoo"`` for built-ins, the plugin's entry-point name for plugins, ``"local"``
    for an in-process ``attnzoo.register``. ``source`` says where the spec came from (a card's path or
    the registering call) and ``weights_dir`` where its weight files are looked up.
    """

    name: str
    factory: str | Callable[..., Any]
    kind: str = "layer"
    summary: str = ""
    reference: str = ""
    # what it computes, in LaTeX (the weights and the output; what sets it apart from its neighbours); the
    # docs site draws it as MathML
    formula: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    weights: Mapping[str, WeightsSpec] = field(default_factory=dict)
    default_tag: str | None = None
    provider: str = LOCAL_PROVIDER
    source: str = ""
    weights_dir: str = ""
    convention: str = ""  # how it is called (shared/DESIGN.md "Calling conventions"); the kit builds inputs from it
    example: Mapping[str, Any] = field(default_factory=dict)  # the smallest config that builds and runs fast
    exempt: Mapping[str, str] = field(default_factory=dict)  # conformance property -> why it cannot hold
    # a preset: factory arguments its card sets for good (a caller who changes one gets a ConfigError, and
    # a card with fixed values takes only the keys of its config)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    # other libraries it can serve as an attention backend for (``transformers``: attnzoo.integrations)
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not is_valid_arch(self.name):
            raise ValueError(f"invalid model name {self.name!r}: expected lower-case [a-z][a-z0-9_]*")
        if self.kind not in ("layer", "model"):
            raise ValueError(f"kind must be 'layer' or 'model', got {self.kind!r}")
        if isinstance(self.factory, str):
            if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", self.factory):
                raise ValueError(f"factory must be 'package.module:attr', got {self.factory!r}")
        elif not callable(self.factory):
            raise ValueError(f"factory must be a 'module:attr' string or a callable, got {self.factory!r}")
        if self.default_tag is not None and self.default_tag not in self.weights:
            raise ValueError(f"default_tag {self.default_tag!r} is not one of the weights tags {sorted(self.weights)}")
        if self.convention and not is_valid_arch(self.convention):
            raise ValueError(
                f"convention must be a lower-case name such as 'sequence_to_labels', got {self.convention!r}"
            )
        if not isinstance(self.example or {}, Mapping):
            raise ValueError(f"example must be a mapping of config values, got {type(self.example).__name__}")
        if not isinstance(self.exempt or {}, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in (self.exempt or {}).items()
        ):
            raise ValueError("exempt must map a property name to the reason it cannot hold (a non-empty string)")
        backends = self.backends or ()
        if isinstance(backends, str) or not all(is_valid_arch(b) for b in backends):
            raise ValueError(f"backends must be a list of lower-case names such as [transformers], got {backends!r}")
        object.__setattr__(self, "backends", tuple(backends))
        object.__setattr__(self, "config", freeze(self.config or {}))
        object.__setattr__(self, "example", freeze(self.example or {}))
        object.__setattr__(self, "exempt", freeze(self.exempt or {}))
        if not isinstance(self.fixed or {}, Mapping):
            raise ValueError("fixed must map config keys to values")
        if set(self.fixed or {}) & set(self.config):
            raise ValueError(f"{sorted(set(self.fixed) & set(self.config))} are both in config and fixed; keep one")
        object.__setattr__(self, "fixed", freeze(self.fixed or {}))
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights or {})))
        if self.default_tag is None and len(self.weights) == 1:
            object.__setattr__(self, "default_tag", next(iter(self.weights)))

    @property
    def qualified_name(self) -> str:
        return f"{self.provider}:{self.name}"

    @property
    def factory_name(self) -> str:
        if isinstance(self.factory, str):
            return self.factory
        return f"{getattr(self.factory, '__module__', '?')}:{getattr(self.factory, '__qualname__', repr(self.factory))}"

    @property
    def required_keys(self) -> list[str]:
        return [k for k, v in self.config.items() if v == MISSING]

    def to_dict(self) -> dict[str, Any]:
        """Every card field (:data:`CARD_FIELDS`) as plain data, with the provider, the source, the
        qualified name and the required keys."""
        out: dict[str, Any] = {"name": self.name, "qualified_name": self.qualified_name}
        for name in (*CARD_FIELDS, "provider", "source"):
            value = getattr(self, name)
            if name == "factory":
                value = self.factory_name
            elif name == "weights":
                value = {tag: w.to_dict() for tag, w in self.weights.items()}
            out[name] = thaw(value)
        out["required"] = self.required_keys
        return out


# the fields a model card (and ``attnzoo.register``) may give; the registry sets provider, source and
# weights_dir itself
CARD_FIELDS = tuple(f.name for f in fields(ModelSpec) if f.name not in ("provider", "source", "weights_dir"))
# the fields of one ``weights:`` entry of a card (its tag is the entry's key)
WEIGHTS_FIELDS = tuple(f.name for f in fields(WeightsSpec) if f.name != "tag")
