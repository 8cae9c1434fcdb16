"""Calling conventions: how each kind of variant is called, and one input builder for each.

A model card names its convention (``convention: sequence_to_labels``). The conformance kit
(``attnzoo.testing``), ``attnzoo create``, the tour, export and bench build their inputs here, from the
convention and the model's config, so no table of per-variant inputs is kept anywhere else.

A convention is declarative: its input *slots* (name, kind, named axes, positional or keyword), the
dims of its outputs, and how attention weights come back. Axis names:

    batch     the batch                                  keys      the masked axis (sequence, frames, words)
    queries   a second, unmasked sequence axis           other     a size read from the config (feature, vocab, ...)

Masks are boolean ``[batch, keys]`` with True = attend (real position); the builder pads the tail of
each sample (right padding) according to ``lengths``.

Built-in conventions (shared/DESIGN.md "Calling conventions"):

======================  =====================================================  ===============================
name                    forward                                                returns
======================  =====================================================  ===============================
sequence_to_labels      ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, L]`` (+ ``A [B, L, T]``)
sequence_to_vector      ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, ...]`` (+ ``A [B, ..., T]``)
sequence_to_sequence    ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, T, D]`` (+ ``A [B, ..., T, T]``)
query_key               ``(query [B, Tq, Fq], key [B, T, Fk], value=[B, T, Fv], mask=None)``
                                                                               ``(context [B, Tq, Fv], A [B, Tq, T])``
decoder_encoder         ``(decoder_out [B, Tq, Fd], encoder_out [B, T, Fe], mask=None)``
                                                                               ``(out [B, Tq, H], A [B, Tq, T])``
keras_query_value       ``(query [B, Tq, F], value [B, T, F], *, value_mask=None, return_attention=False)``
                                                                               ``[B, Tq, F]`` (+ ``A [B, Tq, T]``)
keras_mha               ``(query [B, Tq, Fq], value [B, T, Fv], *, value_mask=None, return_attention=False)``
                                                                               ``[B, Tq, D]`` (+ ``A [B, h, Tq, T]``)
tokens_to_labels        ``(tokens [B, T], mask=None, return_attention=False)`` ``[B, L]`` (+ ``A [B, ..., T]``)
tokens_to_tokens        ``(source [B, T], target_in [B, Tq], mask=None, return_attention=False)``
                                                                               ``[B, Tq, V]`` (+ ``A [B, Tq, T]``)
documents_to_labels     ``(tokens [B, S, W], mask=None, return_attention=False)``
                                                                               ``[B, L]`` (+ weights)
image_to_labels         ``(x [B, C, H, W], mask=None over W, return_attention=False)``
                                                                               ``[B, L]`` (+ weights)
image_to_image          ``(x [B, C, H, W])``                                   ``[B, C, H, W]``
keras_inputs            ``(*inputs)``, as a converted Keras model's graph      its outputs
                        declares them
======================  =====================================================  ===============================

A plugin adds its own convention with a :class:`Convention` subclass (or instance), registered through
the ``attnzoo_register_conventions(register)`` hook; :func:`get_convention` finds both kinds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from attnzoo.core import registry
from attnzoo.errors import UnknownConventionError

__all__ = [
    "Slot",
    "Sample",
    "Convention",
    "CONVENTIONS",
    "get_convention",
    "register_convention",
    "convention_names",
    "model_config",
    "sample_inputs",
]


@dataclass(frozen=True)
class Slot:
    """One input of a convention.

    ``kind``: ``"float"`` (a floating tensor), ``"tokens"`` (integer ids, 0 = padding, below the size
    named by ``vocab``) or ``"mask"`` (bool, True = attend). ``axes`` names each dimension (see the
    module doc). ``keyword``: passed by name rather than by position. ``masked``: the slot holds
    values at the ``keys`` positions that the mask hides (garbage there must never matter). ``dtype``:
    the ids' integer dtype (``"int32"``; default int64).
    """

    name: str
    kind: str
    axes: tuple[str, ...]
    keyword: bool = False
    vocab: str = ""
    dtype: str = ""

    @property
    def masked(self) -> bool:
        return self.kind != "mask" and "keys" in self.axes


@dataclass
class Sample:
    """Inputs for one call, with what the kit needs to reason about them.

    ``tensors`` maps slot name -> tensor; ``sizes`` holds every axis size used; ``lengths`` the number
    of real (unmasked) ``keys`` positions of each sample; ``mask`` is passed unless ``use_mask`` is False.
    """

    convention: Convention
    tensors: dict[str, Tensor]
    sizes: dict[str, int]
    lengths: tuple[int, ...]
    use_mask: bool = True

    @property
    def batch(self) -> int:
        return self.sizes["batch"]

    def call_arguments(self, *, return_attention: bool = False) -> tuple[tuple, dict]:
        """``(args, kwargs)`` for ``model(*args, **kwargs)``."""
        return self.convention.arguments(self, return_attention=return_attention)

    def with_tensors(self, **tensors: Tensor) -> Sample:
        return replace(self, tensors={**self.tensors, **tensors})


def _free(dim: str) -> bool:
    return dim in ("*", "...")


@dataclass
class Convention:
    """How a kind of variant is called; builds inputs and judges outputs.

    Subclass (or instantiate with other slots) to add a convention: ``slots`` say what goes in,
    ``outputs`` the dims of each returned tensor (``"*"`` any one dim, ``"..."`` any number, an axis
    name that size), ``weights`` the dims of the attention weights, ``attention`` how they come back
    (``"flag"``: ``return_attention=True`` appends them; ``"always"``: always the last output;
    ``"none"``). ``keyed_output``: the first output has a ``keys`` axis (only its real positions are
    compared). ``size_keys`` maps an axis to the config keys it may be read from, ``defaults`` gives
    its size when the config leaves it open. ``in_band``: the padding is in the inputs themselves (ids 0,
    all-zero feature vectors: a Keras model's ``mask_zero`` or ``Masking``), with no mask argument; the
    padding properties then run on padded inputs, and an output whose axis 1 has the inputs' length is
    compared at its real positions only.
    """

    name: str
    slots: tuple[Slot, ...]
    outputs: tuple[tuple[str, ...], ...]
    weights: tuple[str, ...] | None = None
    attention: str = "flag"
    keyed_output: bool = False
    size_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    defaults: Mapping[str, int] = field(default_factory=dict)
    free: tuple[str, ...] = ()
    seq: int = 7
    description: str = ""
    in_band: bool = False

    # -- what it holds ---------------------------------------------------------------------------------
    def for_config(self, config: Mapping[str, Any] | None) -> Convention:
        """The convention for one config: itself, unless its inputs depend on the config (``keras_inputs``:
        a converted Keras model takes the inputs its graph declares)."""
        return self

    @property
    def has_mask(self) -> bool:
        return any(s.kind == "mask" for s in self.slots)

    @property
    def has_padding(self) -> bool:
        """Its inputs can be padded: by a mask argument, or in band."""
        return self.has_mask or self.in_band

    @property
    def mask_slot(self) -> Slot | None:
        return next((s for s in self.slots if s.kind == "mask"), None)

    def sizes_for(self, config: Mapping[str, Any], *, batch: int, seq: int, queries: int = 3) -> dict[str, int]:
        """Every axis size: batch and sequence as asked, the rest from the config or the defaults."""
        sizes = {"batch": batch, "keys": seq, "queries": queries}
        for axis, default in self.defaults.items():
            value = None
            for key in self.size_keys.get(axis, ()):
                candidate = config.get(key)
                if isinstance(candidate, int) and not isinstance(candidate, bool) and candidate > 0:
                    value = candidate
                    break
            sizes[axis] = value or default
        return sizes

    # -- inputs ----------------------------------------------------------------------------------------
    def sample(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        batch: int = 2,
        seq: int = 7,
        queries: int = 3,
        lengths: Sequence[int] | None = None,
        dtype: torch.dtype | None = None,
        device: Any = None,
        generator: torch.Generator | None = None,
        sizes: Mapping[str, int] | None = None,
    ) -> Sample:
        """Random inputs. ``lengths`` gives each sample's real length (default: all full but the last,
        which is padded after ``seq // 2 + 1`` positions). ``sizes`` pins axis sizes (kept between calls
        once a lazy layer has fixed them)."""
        full = self.sizes_for(config or {}, batch=batch, seq=seq, queries=queries)
        full.update({k: v for k, v in (sizes or {}).items() if k not in ("batch", "keys", "queries")})
        if lengths is None:
            lengths = [seq] * batch
            if batch > 1 and self.has_padding:
                lengths[-1] = min(seq, seq // 2 + 1)
        lengths = tuple(int(n) for n in lengths)
        if len(lengths) != batch or any(n < 0 or n > seq for n in lengths):
            raise ValueError(f"lengths {lengths} must give 0..{seq} for each of {batch} samples")
        dtype = dtype or torch.get_default_dtype()
        gen_device = "cpu"
        tensors: dict[str, Tensor] = {}
        keep = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
        for slot in self.slots:
            shape = [full[a] for a in slot.axes]
            if slot.kind == "mask":
                tensor = self._mask_tensor(slot, keep, full)
            elif slot.kind == "tokens":
                vocab = full[slot.vocab]
                tensor = torch.randint(1, max(vocab, 2), shape, generator=generator, device=gen_device)
                tensor = self._zero_padding(slot, tensor, keep)
                if slot.dtype:
                    tensor = tensor.to(getattr(torch, slot.dtype))
            else:
                tensor = torch.randn(shape, generator=generator, device=gen_device, dtype=torch.float64).to(dtype)
                if self.in_band:  # a padded step is all zeros, which Keras's Masking(0.0) reads as padding
                    tensor = self._zero_padding(slot, tensor, keep)
            tensors[slot.name] = tensor.to(device) if device is not None else tensor
        return Sample(self, tensors, full, lengths)

    def _mask_tensor(self, slot: Slot, keep: Tensor, sizes: Mapping[str, int]) -> Tensor:
        """The [B, ..keys] mask from per-sample lengths; axes other than batch/keys are broadcast."""
        shape = [sizes[a] for a in slot.axes]
        view = [keep.shape[0] if a == "batch" else (keep.shape[1] if a == "keys" else 1) for a in slot.axes]
        return keep.reshape(view).expand(shape).clone()

    def _zero_padding(self, slot: Slot, tokens: Tensor, keep: Tensor) -> Tensor:
        if "keys" not in slot.axes:
            return tokens
        return tokens.masked_fill(~self._broadcast_keep(slot, keep), 0)

    @staticmethod
    def _broadcast_keep(slot: Slot, keep: Tensor) -> Tensor:
        """``keep`` [B, T] viewed so that it broadcasts against the slot's tensor."""
        view = [keep.shape[0] if a == "batch" else (keep.shape[1] if a == "keys" else 1) for a in slot.axes]
        return keep.reshape(view)

    def keep(self, sample: Sample) -> Tensor:
        """Bool [B, T]: True at real positions."""
        seq = sample.sizes["keys"]
        return torch.arange(seq)[None, :] < torch.tensor(sample.lengths)[:, None]

    def arguments(self, sample: Sample, *, return_attention: bool = False) -> tuple[tuple, dict]:
        args, kwargs = [], {}
        for slot in self.slots:
            if slot.kind == "mask" and not sample.use_mask:
                continue
            value = sample.tensors[slot.name]
            if slot.keyword:
                kwargs[slot.name] = value
            else:
                args.append(value)
        if return_attention and self.attention == "flag":
            kwargs["return_attention"] = True
        return tuple(args), kwargs

    # -- transformations the kit uses -------------------------------------------------------------------
    def fill_masked(self, sample: Sample, fill: Callable[[Slot, Tensor], Tensor]) -> Sample:
        """A copy whose masked positions hold ``fill(slot, tensor)``'s values (real positions kept)."""
        keep = self.keep(sample).to(next(iter(sample.tensors.values())).device)
        changed = {}
        for slot in self.slots:
            if not slot.masked:
                continue
            tensor = sample.tensors[slot.name]
            garbage = fill(slot, tensor)
            changed[slot.name] = torch.where(self._broadcast_keep(slot, keep), tensor, garbage)
        return sample.with_tensors(**changed)

    def truncate(self, sample: Sample, seq: int) -> Sample:
        """The first ``seq`` key positions of every input (lengths clipped)."""
        tensors = {}
        for slot in self.slots:
            tensor = sample.tensors[slot.name]
            if "keys" in slot.axes:
                tensor = tensor.narrow(slot.axes.index("keys"), 0, seq).contiguous()
            tensors[slot.name] = tensor
        sizes = {**sample.sizes, "keys": seq}
        return replace(sample, tensors=tensors, sizes=sizes, lengths=tuple(min(n, seq) for n in sample.lengths))

    def pad(self, sample: Sample, extra: int, generator: torch.Generator | None = None) -> Sample:
        """``extra`` more key positions at the end of every input, masked, holding random garbage."""
        padded = self.sample(
            sample.sizes,
            batch=sample.batch,
            seq=sample.sizes["keys"] + extra,
            queries=sample.sizes["queries"],
            lengths=sample.lengths,
            dtype=self._float_dtype(sample),
            generator=generator,
            sizes=sample.sizes,
        )
        tensors = {}
        seq = sample.sizes["keys"]
        for slot in self.slots:
            old, new = sample.tensors[slot.name], padded.tensors[slot.name].to(sample.tensors[slot.name].device)
            if "keys" in slot.axes:
                axis = slot.axes.index("keys")
                if slot.kind == "float":
                    new = new * 100
                new = torch.cat([old, new.narrow(axis, seq, extra)], dim=axis)
            else:
                new = old
            tensors[slot.name] = new
        return replace(sample, tensors=tensors, sizes={**sample.sizes, "keys": seq + extra})

    def select(self, sample: Sample, index: int, count: int = 1) -> Sample:
        """Samples ``index .. index + count - 1`` alone, as a smaller batch."""
        tensors = {}
        for slot in self.slots:
            tensor = sample.tensors[slot.name]
            if "batch" in slot.axes:
                tensor = tensor.narrow(slot.axes.index("batch"), index, count).contiguous()
            tensors[slot.name] = tensor
        return replace(
            sample,
            tensors=tensors,
            sizes={**sample.sizes, "batch": count},
            lengths=sample.lengths[index : index + count],
        )

    def cast(self, sample: Sample, dtype: torch.dtype | None = None, device: Any = None) -> Sample:
        tensors = {}
        for name, tensor in sample.tensors.items():
            target_dtype = dtype if (dtype is not None and tensor.is_floating_point()) else None
            tensors[name] = tensor.to(device=device, dtype=target_dtype)
        return replace(sample, tensors=tensors)

    @staticmethod
    def _float_dtype(sample: Sample) -> torch.dtype:
        return next((t.dtype for t in sample.tensors.values() if t.is_floating_point()), torch.get_default_dtype())

    # -- outputs ---------------------------------------------------------------------------------------
    def split(self, output: Any, *, return_attention: bool) -> tuple[list[Tensor], Tensor | None]:
        """The raw forward result as (outputs, attention weights or None)."""
        items = list(output) if isinstance(output, (tuple, list)) else [output]
        if self.attention == "always" or (self.attention == "flag" and return_attention):
            if len(items) < 2:
                raise ValueError(f"expected (outputs..., weights), got {len(items)} value(s)")
            return items[:-1], items[-1]
        return items, None

    def check(self, sample: Sample, outputs: Sequence[Any], weights: Any) -> str | None:
        """What is wrong with the outputs' types and shapes, or None."""
        if len(outputs) != len(self.outputs):
            return f"expected {len(self.outputs)} output(s), got {len(outputs)}"
        for i, (value, dims) in enumerate(zip(outputs, self.outputs, strict=True)):
            problem = self._check_dims(f"output {i}", value, dims, sample)
            if problem:
                return problem
        if weights is not None and self.weights is not None:
            return self._check_dims("attention weights", weights, self.weights, sample)
        if self.attention != "none" and weights is None and self.weights is not None and self.attention == "always":
            return "expected attention weights as the last output"
        return None

    def _expected_shape(self, dims: tuple[str, ...], sample: Sample) -> list[str]:
        return [d if _free(d) else str(sample.sizes.get(d, d)) for d in dims]

    def _check_dims(self, what: str, value: Any, dims: tuple[str, ...], sample: Sample) -> str | None:
        if not isinstance(value, Tensor):
            return f"{what} should be a tensor, got {type(value).__name__}"
        shape = list(value.shape)
        expected = self._expected_shape(dims, sample)
        shown = "[" + ", ".join(expected) + "]"
        if "..." in dims:
            head = dims[: dims.index("...")]
            tail = dims[dims.index("...") + 1 :]
            if len(shape) < len(head) + len(tail):
                return f"{what} has shape {shape}, expected {shown}"
            pairs = list(zip(head, shape[: len(head)], strict=True))
            pairs += list(zip(tail, shape[len(shape) - len(tail) :], strict=True))
        else:
            if len(shape) != len(dims):
                return f"{what} has shape {shape}, expected {shown}"
            pairs = list(zip(dims, shape, strict=True))
        for dim, size in pairs:
            if not _free(dim) and dim in sample.sizes and sample.sizes[dim] != size:
                return f"{what} has shape {shape}, expected {shown}"
        return None

    def real_parts(self, sample: Sample, outputs: Sequence[Tensor], weights: Tensor | None) -> list[Tensor]:
        """Per sample, the outputs that padding must never change: every output, but only the real
        positions of a keyed output, and the weights on real keys (from real queries, when keyed)."""
        parts = []
        for b, n in enumerate(sample.lengths):
            for i, value in enumerate(outputs):
                row = value[b]
                timed = self.in_band and value.dim() > 1 and value.shape[1] == sample.sizes["keys"]
                if (i == 0 and self.keyed_output) or timed:
                    row = row[:n]
                parts.append(row)
            if weights is not None and self._weights_have_keys():
                row = weights[b][..., :n]
                if self.keyed_output:
                    row = row[..., :n, :]
                parts.append(row)
        return parts

    def masked_weights(self, sample: Sample, weights: Tensor | None) -> list[Tensor]:
        """The weights on masked keys (they must be exactly zero)."""
        if weights is None or not self._weights_have_keys():
            return []
        return [weights[b][..., n:] for b, n in enumerate(sample.lengths)]

    def _weights_have_keys(self) -> bool:
        return self.weights is not None and self.weights[-1] == "keys"

    # -- bad inputs ------------------------------------------------------------------------------------
    def bad_inputs(self, sample: Sample, *, has_weights: bool = True) -> list[tuple[str, Sample, str]]:
        """Inputs a variant must refuse with a ValueError naming itself: ``(what, sample, policy)``, where
        policy ``"refuse"`` demands the error, ``"convert"`` also accepts the right answer (a dtype the
        variant may convert), and ``"empty"`` also accepts a finite empty result. ``has_weights``: the
        variant has parameters or buffers, so an input on another device is a mismatch."""
        cases: list[tuple[str, Sample, str]] = []
        for slot in self.slots:
            tensor = sample.tensors[slot.name]
            if slot.kind == "float":
                cases.append(
                    (f"{slot.name} without its batch axis", sample.with_tensors(**{slot.name: tensor[0]}), "refuse")
                )
                cases.append((f"{slot.name} as integers", sample.with_tensors(**{slot.name: tensor.long()}), "refuse"))
                other = torch.float64 if tensor.dtype != torch.float64 else torch.float32
                cases.append(
                    (
                        f"{slot.name} in {str(other).replace('torch.', '')}",
                        sample.with_tensors(**{slot.name: tensor.to(other)}),
                        "convert",
                    )
                )
                if slot.axes[-1] not in ("batch", "keys", "queries", *self.free):
                    bigger = torch.cat([tensor, tensor[..., :1]], dim=-1)
                    cases.append(
                        (
                            f"{slot.name} with one more feature ({tensor.shape[-1] + 1})",
                            sample.with_tensors(**{slot.name: bigger}),
                            "refuse",
                        )
                    )
            elif slot.kind == "tokens":
                vocab = sample.sizes[slot.vocab]
                cases.append((f"{slot.name} as floats", sample.with_tensors(**{slot.name: tensor.float()}), "refuse"))
                high = tensor.clone()
                high.view(-1)[0] = vocab
                cases.append((f"{slot.name} with an id >= {vocab}", sample.with_tensors(**{slot.name: high}), "refuse"))
                low = tensor.clone()
                low.view(-1)[0] = -1
                cases.append((f"{slot.name} with a negative id", sample.with_tensors(**{slot.name: low}), "refuse"))
            elif slot.kind == "mask":
                cases.append(("a float mask", sample.with_tensors(**{slot.name: tensor.float()}), "refuse"))
                cases.append(
                    (
                        "an additive float mask (0 / -inf)",
                        sample.with_tensors(
                            **{
                                slot.name: torch.zeros_like(tensor, dtype=torch.float32).masked_fill(
                                    ~tensor, float("-inf")
                                )
                            }
                        ),
                        "refuse",
                    )
                )
                cases.append(
                    ("a complex mask", sample.with_tensors(**{slot.name: tensor.to(torch.complex64)}), "refuse")
                )
                longer = torch.cat([tensor, tensor[..., :1]], dim=-1)
                cases.append(("a mask one position too long", sample.with_tensors(**{slot.name: longer}), "refuse"))
        batched = [s for s in self.slots if s.kind != "mask" and "batch" in s.axes]
        if len(batched) > 1:
            second = batched[1]
            tensor = sample.tensors[second.name]
            cases.append(
                (
                    f"{second.name} with a different batch size",
                    sample.with_tensors(**{second.name: tensor.narrow(second.axes.index("batch"), 0, 1)}),
                    "refuse",
                )
            )
        first = next((s for s in self.slots if s.kind != "mask"), None)
        if first is not None and (has_weights or len(batched) > 1):
            cases.append(
                (
                    f"{first.name} on the meta device",
                    sample.with_tensors(**{first.name: sample.tensors[first.name].to("meta")}),
                    "refuse",
                )
            )
        if sample.sizes["keys"] > 0 and any("keys" in s.axes for s in self.slots):
            cases.append(("an empty sequence", self.truncate(sample, 0), "empty"))
        empty_batch = self.select(sample, 0, 0)
        cases.append(("an empty batch", empty_batch, "empty"))
        return cases


# -- the built-in conventions ----------------------------------------------------------------------------
_FEATURE = ("hidden_size", "embed_dim", "input_size", "dim", "in_features", "d_model")
_SEQ = (Slot("x", "float", ("batch", "keys", "feature")), Slot("mask", "mask", ("batch", "keys"), keyword=True))
_TOKENS = (
    Slot("tokens", "tokens", ("batch", "keys"), vocab="vocab"),
    Slot("mask", "mask", ("batch", "keys"), keyword=True),
)

_BUILTIN = [
    Convention(
        "sequence_to_labels",
        _SEQ,
        outputs=(("batch", "*"),),
        weights=("batch", "*", "keys"),
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> logits [B, L] (+ A [B, L, T])",
    ),
    Convention(
        "sequence_to_vector",
        _SEQ,
        outputs=(("batch", "..."),),
        weights=("batch", "...", "keys"),
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> pooled [B, ...] (+ A [B, ..., T])",
    ),
    Convention(
        "sequence_to_sequence",
        _SEQ,
        outputs=(("batch", "keys", "*"),),
        weights=("batch", "...", "keys", "keys"),
        keyed_output=True,
        size_keys={"feature": _FEATURE},
        defaults={"feature": 16},
        description="x [B, T, F], mask [B, T] -> [B, T, D] (+ A [B, ..., T, T])",
    ),
    Convention(
        "query_key",
        (
            Slot("query", "float", ("batch", "queries", "query_feature")),
            Slot("key", "float", ("batch", "keys", "key_feature")),
            Slot("value", "float", ("batch", "keys", "value_feature"), keyword=True),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "value_feature"),),
        weights=("batch", "queries", "keys"),
        attention="always",
        size_keys={"query_feature": ("query_size",), "key_feature": ("key_size",), "value_feature": ("value_size",)},
        defaults={"query_feature": 16, "key_feature": 16, "value_feature": 10},
        free=("value_feature",),
        description="query [B, Tq, Fq], key [B, T, Fk], value [B, T, Fv], mask [B, T] -> (context, A [B, Tq, T])",
    ),
    Convention(
        "decoder_encoder",
        (
            Slot("decoder_out", "float", ("batch", "queries", "decoder_feature")),
            Slot("encoder_out", "float", ("batch", "keys", "encoder_feature")),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "queries", "keys"),
        attention="always",
        size_keys={"decoder_feature": ("decoder_size",), "encoder_feature": ("encoder_size",)},
        defaults={"decoder_feature": 16, "encoder_feature": 12},
        description="decoder_out [B, Tq, Fd], encoder_out [B, T, Fe], mask [B, T] -> (out [B, Tq, H], A [B, Tq, T])",
    ),
    Convention(
        "cross_attention",
        (
            Slot("x", "float", ("batch", "queries", "feature")),
            Slot("context", "float", ("batch", "keys", "context_feature"), keyword=True),
            Slot("context_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "...", "queries", "keys"),
        size_keys={"feature": _FEATURE, "context_feature": ("context_dim",)},
        defaults={"feature": 16, "context_feature": 12},
        description="x [B, Tq, F], context [B, T, C], context_mask [B, T] -> [B, Tq, D] (+ A [B, ..., Tq, T])",
    ),
    Convention(
        "keras_query_value",
        (
            Slot("query", "float", ("batch", "queries", "feature")),
            Slot("value", "float", ("batch", "keys", "feature")),
            Slot("value_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "feature"),),
        weights=("batch", "queries", "keys"),
        size_keys={"feature": ("dim",)},
        defaults={"feature": 16},
        description="query [B, Tq, F], value [B, T, F], value_mask [B, T] -> [B, Tq, F] (+ A [B, Tq, T])",
    ),
    Convention(
        "keras_mha",
        (
            Slot("query", "float", ("batch", "queries", "query_feature")),
            Slot("value", "float", ("batch", "keys", "value_feature")),
            Slot("value_mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "*"),),
        weights=("batch", "*", "queries", "keys"),
        size_keys={"query_feature": ("query_size",), "value_feature": ("value_size", "key_size")},
        defaults={"query_feature": 16, "value_feature": 12},
        description="query [B, Tq, Fq], value [B, T, Fv], value_mask [B, T] -> [B, Tq, D] (+ A [B, h, Tq, T])",
    ),
    Convention(
        "tokens_to_labels",
        _TOKENS,
        outputs=(("batch", "*"),),
        weights=("batch", "...", "keys"),
        size_keys={"vocab": ("vocab_size", "num_tokens")},
        defaults={"vocab": 50},
        description="tokens [B, T] (0 = padding), mask [B, T] -> logits [B, L] (+ A [B, ..., T])",
    ),
    Convention(
        "tokens_to_tokens",
        (
            Slot("source", "tokens", ("batch", "keys"), vocab="source_vocab"),
            Slot("target_in", "tokens", ("batch", "queries"), vocab="target_vocab"),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "queries", "target_vocab"),),
        weights=("batch", "queries", "keys"),
        size_keys={
            "source_vocab": ("num_letters", "source_vocab_size", "vocab_size"),
            "target_vocab": ("num_phonemes", "target_vocab_size", "vocab_size"),
        },
        defaults={"source_vocab": 20, "target_vocab": 12},
        description="source [B, T], target_in [B, Tq], mask [B, T] -> logits [B, Tq, V] (+ A [B, Tq, T])",
    ),
    Convention(
        "image_to_labels",
        (
            Slot("x", "float", ("batch", "channels", "height", "keys")),
            Slot("mask", "mask", ("batch", "keys"), keyword=True),
        ),
        outputs=(("batch", "*"),),
        weights=("batch", "..."),
        size_keys={"channels": ("in_chans", "in_channels", "channels")},
        defaults={"channels": 3, "height": 32},
        seq=64,
        description="x [B, C, H, W], mask [B, W] over frames -> logits [B, L] (+ weights)",
    ),
    Convention(
        "image_to_image",
        (Slot("x", "float", ("batch", "channels", "height", "keys")),),
        outputs=(("batch", "channels", "height", "keys"),),
        attention="none",
        size_keys={"channels": ("channels", "in_channels", "in_chans")},
        defaults={"channels": 8, "height": 6},
        description="x [B, C, H, W] -> [B, C, H, W]",
    ),
]


# documents: ``keys`` is the sentence axis. A padded document has whole padded sentences at its end (the
# padded sentence is all padded words), which exercises both levels of a hierarchical model's masks.
_BUILTIN.append(
    Convention(
        "documents_to_labels",
        (
            Slot("tokens", "tokens", ("batch", "keys", "words"), vocab="vocab"),
            Slot("mask", "mask", ("batch", "keys", "words"), keyword=True),
        ),
        outputs=(("batch", "*"),),
        weights=("batch", "..."),
        size_keys={"vocab": ("vocab_size",)},
        defaults={"vocab": 50, "words": 5},
        description="tokens [B, S, W], mask [B, S, W] -> logits [B, L] (+ weights)",
    )
)


# Keras's integer dtypes as torch's; the unsigned ones torch computes little with go as int64
_TORCH_INTEGERS = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8"}


@dataclass
class KerasInputs(Convention):
    """A converted Keras model (``keras_model``): its inputs are the ones its graph declares, in order,
    positionally: integer ids of the Keras input's dtype (below the vocabulary of the Embedding that reads
    them), bool masks (a ``dtype="bool"`` input: True = keep) or floats, with Keras's shapes. A length
    Keras left open is the ``keys`` axis; fixed sizes are kept. There is no mask argument beyond the
    model's own bool inputs: when every input is read by an ``Embedding(mask_zero=True)`` or a
    ``Masking(0.0)``, the padding is in band (ids 0, zero vectors) and the padding properties run on it;
    the Keras semantics of masks are tested against Keras itself."""

    def for_config(self, config: Mapping[str, Any] | None) -> Convention:
        from attnzoo.keras.nodes import INTEGER_DTYPES  # the graph's own table of Keras's integer dtypes

        graph = (config or {}).get("graph") if isinstance(config, Mapping) else None
        inputs = graph.get("inputs") if isinstance(graph, Mapping) else None
        if not isinstance(inputs, (list, tuple)) or not inputs:  # a card's example is frozen into tuples
            return self
        slots, defaults = [], {}
        for i, spec in enumerate(inputs):
            shape = list(spec.get("shape") or [None])
            axes = ["batch"]
            for j, size in enumerate(shape[1:], start=1):
                if size is None and j == 1:
                    axes.append("keys")
                else:
                    axis = f"in{i}_axis{j}"
                    axes.append(axis)
                    defaults[axis] = size if isinstance(size, int) else 4
            dtype = str(spec.get("dtype"))
            vocab = f"in{i}_vocab"
            if dtype in INTEGER_DTYPES:
                defaults[vocab] = int(spec.get("vocab") or 10)
            name = str(spec.get("name") or f"input_{i}")
            kind = "tokens" if dtype in INTEGER_DTYPES else ("mask" if dtype == "bool" else "float")
            integer = _TORCH_INTEGERS.get(dtype, "int64") if kind == "tokens" else ""
            slots.append(Slot(name, kind, tuple(axes), vocab=vocab if kind == "tokens" else "", dtype=integer))
        outputs = tuple(("batch", "...") for _ in graph.get("outputs") or [None])
        return Convention(
            self.name,
            tuple(slots),
            outputs=outputs,
            attention="none",
            defaults=defaults,
            free=tuple(a for a in defaults if a.endswith("_vocab")),
            seq=self.seq,
            description=self.description,
            in_band=all("keys" in slot.axes for slot in slots) and _masked_in_band(graph),
        )


def _masked_in_band(graph: Mapping[str, Any]) -> bool:
    """Every input of the graph is read by an ``Embedding(mask_zero=True)`` or a ``Masking(0.0)`` (keras 3
    also records the mask's own ``not_equal`` on it)."""
    layers, calls = graph.get("layers") or {}, graph.get("calls") or []
    for spec in graph.get("inputs") or []:
        readers = [layers.get(c.get("layer") or "") for c in calls if c.get("args") and _reads(c, spec.get("id"))]
        if not any(
            isinstance(layer, Mapping)
            and (
                (layer.get("op") == "masking" and layer.get("mask_value", 0.0) == 0.0)
                or (layer.get("op") == "embedding" and layer.get("mask_zero"))
            )
            for layer in readers
        ):
            return False
    return True


def _reads(call: Mapping[str, Any], call_id: Any) -> bool:
    first = call["args"][0]
    return isinstance(first, Mapping) and list(first.get("ref") or []) == [call_id, 0]


_BUILTIN.append(
    KerasInputs(
        "keras_inputs",
        (),
        outputs=(("batch", "..."),),
        attention="none",
        seq=5,
        description="the inputs a converted Keras model's graph declares, positionally -> its outputs",
    )
)

CONVENTIONS: dict[str, Convention] = {c.name: c for c in _BUILTIN}
HOOK = "attnzoo_register_conventions"


def _check_name(name: str, convention: Any) -> None:
    if name in CONVENTIONS:
        raise ValueError(f"convention {name!r} is built in; choose another name")


def register_convention(name: str, convention: Convention | str) -> None:
    """Add a convention (a :class:`Convention` or ``"module:attr"`` naming one) in this process; plugins
    add theirs through the ``attnzoo_register_conventions(register)`` hook. Built-in names are reserved."""
    _check_name(name, convention)
    registry.REGISTRY.add_item(HOOK, name, convention)


def _plugin_conventions() -> dict[str, Any]:
    """The conventions plugins registered, held by the registry's snapshot (asked for on first use)."""
    return registry.REGISTRY.collected(HOOK, check=_check_name)


def _resolve(value: Convention | str | type) -> Convention:
    if isinstance(value, str):
        module, _, attr = value.partition(":")
        value = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    if isinstance(value, type):
        value = value()
    if not isinstance(value, Convention):
        raise TypeError(f"a convention must be an attnzoo.testing.Convention, got {type(value).__name__}")
    return value


def convention_names() -> list[str]:
    return sorted({*CONVENTIONS, *_plugin_conventions()})


def get_convention(name: str) -> Convention:
    """The convention called ``name``: built in, or added by a plugin."""
    if name in CONVENTIONS:
        return CONVENTIONS[name]
    plugin = _plugin_conventions()
    if name in plugin:
        return _resolve(plugin[name])
    known = ", ".join(convention_names())
    raise UnknownConventionError(f"unknown calling convention {name!r}; known: {known}")


def model_config(model: Any) -> dict[str, Any]:
    """The config a model was built with (``attnzoo.create`` records it), or {}."""
    info = getattr(model, "attnzoo_config", None)
    return dict(info.get("config") or {}) if isinstance(info, Mapping) else {}


def _model_dtype_device(model: Any) -> tuple[torch.dtype | None, Any]:
    for tensor in [*getattr(model, "parameters", lambda: [])(), *getattr(model, "buffers", lambda: [])()]:
        if tensor.is_floating_point():
            return tensor.dtype, tensor.device
    return None, None


def sample_inputs(
    model: Any, convention: str | Convention, *, config: Mapping[str, Any] | None = None, **kwargs: Any
) -> Sample:
    """Inputs for ``model`` under its convention, in its dtype and on its device (see :meth:`Convention.sample`)."""
    conv = get_convention(convention) if isinstance(convention, str) else convention
    dtype, device = _model_dtype_device(model)
    kwargs.setdefault("dtype", dtype)
    kwargs.setdefault("device", device)
    config = dict(model_config(model) if config is None else config)
    sizer = getattr(model, "size", None)  # a lazy layer that has seen a batch knows its sizes now
    if callable(sizer):
        for key, value in list(config.items()):
            if value is None:
                try:
                    known = sizer(key)
                except Exception:  # noqa: BLE001 - a model's own size() may not know every key
                    known = None
                if isinstance(known, int) and not isinstance(known, bool):
                    config[key] = known
    return conv.for_config(config).sample(config, **kwargs)
