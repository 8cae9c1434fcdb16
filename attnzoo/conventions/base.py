"""What a calling convention is: its input slots (name, kind, named axes, positional or keyword), the dims
of its outputs, how attention weights come back, and how it builds inputs (padded, masked, in a dtype and on
a device), runs a model and reads its outputs. The package's docstring lists the built-in ones."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

__all__ = ["Slot", "Sample", "Convention"]


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
