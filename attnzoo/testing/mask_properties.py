"""The properties about what a variant reads: masks, padding, the batch, bad inputs, causality, windows,
the KV cache and the context (see :mod:`attnzoo.testing.properties` for the table of every promise).

Each is a function of a :class:`~attnzoo.testing.subject.Subject` that returns None when it holds and
raises :class:`~attnzoo.testing.subject.Failure` (or ``NotApplicable``) otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.conventions import Convention, Sample
from attnzoo.testing.subject import HALF, Failure, NotApplicable, Subject, float_tensors, same_outputs

__all__ = [
    "masked_values",
    "padding",
    "fully_masked",
    "batch_independence",
    "bad_inputs",
    "causal",
    "window",
    "incremental",
    "cross",
]


def _garbage(value: float) -> Callable:
    def fill(slot, tensor: Tensor) -> Tensor:
        if slot.kind == "tokens":
            vocab_hi = int(tensor.max().item()) if tensor.numel() else 1
            return torch.randint(1, max(vocab_hi, 2), tensor.shape, generator=torch.Generator().manual_seed(7))
        return torch.full_like(tensor, value)

    return fill


def _masked(s: Subject, *, in_band: bool = False) -> tuple[Convention, nn.Module]:
    """The convention and a materialised model, for a property about masks (NotApplicable without one);
    ``in_band``: padding in the inputs themselves (a Keras model's ``mask_zero`` ids) will do."""
    if not (s.convention.has_mask or (in_band and s.convention.in_band)):
        if s.convention.in_band:
            raise NotApplicable(
                f"the {s.convention.name} inputs pad in band (ids 0, zero vectors): garbage there is real input"
            )
        raise NotApplicable(f"the {s.convention.name} convention has no mask")
    return s.convention, s.materialised()[0]


def _real_gradients(s: Subject, model: nn.Module, sample: Sample, return_attention: bool):
    """Outputs' real parts, and the gradients of a fixed random weighting of them with respect to every
    parameter and to the real positions of the floating inputs."""
    conv = s.convention
    leaves = {k: t.detach().clone().requires_grad_() for k, t in sample.tensors.items() if t.is_floating_point()}
    feed = sample.with_tensors(**leaves)
    model.zero_grad(set_to_none=True)
    out, w = s.run(model, feed, return_attention=return_attention, grad=True)
    parts = conv.real_parts(feed, out, w)
    gen = torch.Generator().manual_seed(11)
    loss = sum(
        (p.double() * torch.randn(p.shape, generator=gen, dtype=torch.float64)).sum()
        for p in parts
        if p.is_floating_point() and p.requires_grad
    )
    grads = []
    if isinstance(loss, Tensor):
        loss.backward()
        keep = conv.keep(feed)
        for slot in conv.slots:
            if slot.name in leaves and leaves[slot.name].grad is not None:
                grad = leaves[slot.name].grad
                if "keys" in slot.axes:  # the gradient at padded positions is nobody's business
                    grad = torch.where(conv._broadcast_keep(slot, keep), grad, torch.zeros_like(grad))
                grads.append(grad)
        grads += [p.grad.clone() for _, p in sorted(model.named_parameters()) if p.grad is not None]
    return [p.detach() for p in parts], grads, w


def masked_values(s: Subject) -> None:
    conv, model = _masked(s)
    seq = s.seq
    sample = s.sample(batch=3, lengths=(seq, max(seq - 3, 1), 0), model=model)
    clean = conv.fill_masked(sample, _garbage(0.0))
    for ra in s.attention_modes():
        mode = "with" if ra else "without"
        ref, ref_grads, _ = _real_gradients(s, model, clean, ra)
        for value in (float("nan"), float("inf"), float("-inf"), 1e4, 3e38):
            dirty = conv.fill_masked(sample, _garbage(value))
            out, grads, w = _real_gradients(s, model, dirty, ra)
            same_outputs(out, ref, f"{value} in masked positions ({mode} return_attention)")
            same_outputs(
                grads,
                ref_grads,
                f"gradients with {value} in masked positions ({mode} return_attention)",
                atol=1e-5,
                rtol=1e-4,
            )
            for b, part in enumerate(conv.masked_weights(dirty, w)):
                if part.numel() and not (part == 0).all():
                    raise Failure(f"sample {b} gives weight {part.abs().max().item():.3g} to masked keys")


def padding(s: Subject) -> None:
    conv, model = _masked(s, in_band=True)
    seq = s.seq
    plain = s.sample(batch=2, lengths=(seq, seq), model=model)
    padded = conv.pad(plain, 4, generator=torch.Generator().manual_seed(3))
    for ra in s.attention_modes():
        a_out, a_w = s.run(model, plain, return_attention=ra)
        b_out, b_w = s.run(model, padded, return_attention=ra)
        same_outputs(
            conv.real_parts(padded, b_out, b_w),
            conv.real_parts(plain, a_out, a_w),
            f"4 masked positions of padding ({'with' if ra else 'without'} return_attention)",
        )


def fully_masked(s: Subject) -> None:
    conv, base = _masked(s, in_band=True)
    for dtype in (torch.float32, *HALF):
        model = copy.deepcopy(base).to(dtype)
        name = str(dtype).replace("torch.", "")
        for ra in s.attention_modes():
            sample = conv.cast(s.sample(batch=2, lengths=(s.seq, 0), model=model), dtype)
            leaves = {k: t.requires_grad_() for k, t in sample.tensors.items() if t.is_floating_point()}
            model.zero_grad(set_to_none=True)
            outputs, weights = s.run(model, sample, return_attention=ra, grad=True)
            where = f"{name}, {'with' if ra else 'without'} return_attention"
            for i, value in enumerate(float_tensors([*outputs, weights])):
                if not torch.isfinite(value).all():
                    raise Failure(f"{where}: output {i} is not finite for the fully masked sample")
            if weights is not None and conv.weights and conv.weights[-1] == "keys" and not (weights[1] == 0).all():
                raise Failure(f"{where}: the fully masked sample's attention weights are not all zero")
            total = sum(v.float().sum() for v in float_tensors([*outputs, weights]) if v.requires_grad)
            if isinstance(total, Tensor):
                total.backward()
            for label, tensor in [*leaves.items(), *model.named_parameters()]:
                if tensor.grad is not None and not torch.isfinite(tensor.grad).all():
                    raise Failure(f"{where}: the gradient of {label} is not finite")


def batch_independence(s: Subject) -> None:
    conv = s.convention
    model, _ = s.materialised()
    seq = s.seq
    lengths = (seq, max(seq - 2, 1), max(seq // 2, 1)) if conv.has_padding else None
    sample = s.sample(batch=3, lengths=lengths, seed=5, model=model)
    out, w = s.run(model, sample)
    together = conv.real_parts(sample, out, w)
    per_sample = len(together) // 3
    for b in range(3):
        alone = conv.select(sample, b)
        a_out, a_w = s.run(model, alone)
        same_outputs(
            conv.real_parts(alone, a_out, a_w),
            together[b * per_sample : (b + 1) * per_sample],
            f"sample {b} alone vs in a batch of 3",
        )


def bad_inputs(s: Subject) -> None:
    model, sample = s.materialised()
    good_out, good_w = s.run(model, sample)
    problems = []
    has_weights = any(True for _ in [*model.parameters(), *model.buffers()])
    for what, bad, policy in s.convention.bad_inputs(sample, has_weights=has_weights):
        try:
            out, w = s.run(model, bad)
        except ValueError as e:
            if not s.names_in(str(e)):
                problems.append(f"{what}: the ValueError does not name the variant ({str(e)[:120]})")
            continue
        except Failure:
            raise
        except Exception as e:  # noqa: BLE001 - a raw kernel error is what this property catches
            problems.append(f"{what}: raised {type(e).__name__} ({str(e).splitlines()[0][:100] if str(e) else ''})")
            continue
        if policy == "convert":
            try:
                same_outputs([o.double() for o in out], [o.double() for o in good_out], what, atol=1e-4, rtol=1e-3)
            except Failure as e:
                problems.append(f"{what}: accepted, but {e}")
        elif policy == "empty":
            values = float_tensors([*out, w])
            if any(not torch.isfinite(v).all() for v in values):
                problems.append(f"{what}: accepted with non-finite outputs")
        else:
            problems.append(f"{what}: accepted silently")
    if problems:
        raise Failure("; ".join(problems))


def _sequence_layer(s: Subject, flag: str) -> nn.Module:
    """A materialised self-attention layer whose ``flag`` attribute (causal, window, ...) is set, or
    NotApplicable: these properties read what the card declares through the built layer's options."""
    if s.convention.name != "sequence_to_sequence":
        raise NotApplicable(f"{flag} is checked on sequence_to_sequence layers")
    model, _ = s.materialised()
    value = getattr(model, flag, None)
    if value is None or value is False:
        raise NotApplicable(f"the layer is not built with {flag}")
    return model


def _outputs(model: nn.Module, x: Tensor, mask: Tensor | None = None, **kwargs: Any) -> Tensor:
    with torch.no_grad():
        out = model(x, mask, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _changes(reference: Tensor, other: Tensor) -> bool:
    return not torch.allclose(reference.double(), other.double(), atol=1e-6, rtol=1e-5)


def causal(s: Subject) -> None:
    model = _sequence_layer(s, "causal")
    seq = 9
    x = s.sample(batch=2, seq=seq, lengths=(seq, seq), seed=7, model=model).tensors["x"]
    out = _outputs(model, x)
    gen = torch.Generator().manual_seed(8)
    for i in (0, seq // 2, seq - 2):
        changed = x.clone()
        changed[:, i + 1 :] = torch.randn(changed[:, i + 1 :].shape, generator=gen, dtype=x.dtype)
        after = _outputs(model, changed)
        same_outputs(
            [after[:, : i + 1]], [out[:, : i + 1]], f"outputs up to position {i} when only later inputs change"
        )
        if not _changes(out[:, i + 1 :], after[:, i + 1 :]):
            raise Failure(f"outputs after position {i} ignore the inputs there (nothing depends on them)")


def window(s: Subject) -> None:
    model = _sequence_layer(s, "window")
    w = int(model.window)
    if w > 24:
        raise NotApplicable(f"window {w} is wider than the sequences the kit builds; give the example a small one")
    seq = 2 * w + 5
    i = seq // 2
    x = s.sample(batch=2, seq=seq, lengths=(seq, seq), seed=9, model=model).tensors["x"]
    out = _outputs(model, x)
    far = (torch.arange(seq) - i).abs() > w
    changed = x.clone()
    changed[:, far] = torch.randn(changed[:, far].shape, generator=torch.Generator().manual_seed(10), dtype=x.dtype)
    same_outputs(
        [_outputs(model, changed)[:, i]],
        [out[:, i]],
        f"the output at {i} when only inputs beyond the window {w} change",
    )
    near = x.clone()
    near[:, i - w] += 1.0
    if not _changes(out[:, i], _outputs(model, near)[:, i]):
        raise Failure(f"the output at {i} ignores the input at {i - w}, inside its window of {w}")


def incremental(s: Subject) -> None:
    model = _sequence_layer(s, "causal")
    if not callable(getattr(model, "new_cache", None)):
        raise NotApplicable("the layer has no new_cache")
    seq = 7
    sample = s.sample(batch=2, seq=seq, lengths=(seq, 4), seed=11, model=model)
    x, mask = sample.tensors["x"], sample.tensors["mask"]
    full = _outputs(model, x, mask)
    for prefix in (1, 3):  # one token per step, and a prompt of 3 first
        try:
            cache = model.new_cache(2)
        except NotImplementedError:
            raise NotApplicable("the layer keeps no cache") from None
        pieces = [_outputs(model, x[:, :prefix], mask[:, :prefix], cache=cache)]
        pieces += [_outputs(model, x[:, t : t + 1], mask[:, t : t + 1], cache=cache) for t in range(prefix, seq)]
        steps = torch.cat(pieces, dim=1)
        same_outputs([steps[0], steps[1, :4]], [full[0], full[1, :4]], f"cached steps after a prompt of {prefix}")
        limit = getattr(model, "window", None)
        if limit is not None and len(cache) > limit:
            raise Failure(f"the cache holds {len(cache)} entries, more than the window of {limit}")


def cross(s: Subject) -> None:
    if s.convention.name not in ("sequence_to_sequence", "cross_attention"):
        raise NotApplicable("cross-attention is checked on attention layers")
    model, _ = s.materialised()
    import inspect

    try:
        takes = "context" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes or getattr(model, "causal", False) or getattr(model, "window", None) is not None:
        raise NotApplicable("the layer takes no context (or is causal or windowed: self-attention only)")
    width = getattr(model, "embed_dim", None)
    context_width = getattr(model, "context_dim", None) or width
    if not isinstance(width, int) or not isinstance(context_width, int):
        raise NotApplicable("the layer does not say its widths (embed_dim, context_dim)")
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 5, width, generator=gen)
    context = torch.randn(2, 6, context_width, generator=gen)
    keep = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    out = _outputs(model, x, context=context, context_mask=keep)
    dirty = context.clone()
    dirty[1, 3:] = float("nan")
    same_outputs([_outputs(model, x, context=dirty, context_mask=keep)], [out], "NaN in masked context positions")
    alone = _outputs(model, x[1:], context=context[1:, :3])
    same_outputs([alone[0]], [out[1]], "a masked context against the context cut to its real positions")
    nudged = context.clone()
    nudged[1, 0] += 1.0
    if not _changes(out[1], _outputs(model, x, context=nudged, context_mask=keep)[1]):
        raise Failure("the output ignores the context")
