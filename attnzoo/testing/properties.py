"""The named promises every variant keeps, each a function of a :class:`Subject`.

A property returns None when it holds, raises :class:`Failure` with the reason when it breaks, and
:class:`NotApplicable` when the variant's convention gives it nothing to check (an image block has no
mask). Inputs come from the variant's calling convention (``attnzoo.conventions``), never from a table
of names.

=====================  ============================================================================
property               promise
=====================  ============================================================================
builds                 the card's example config builds a ``torch.nn.Module`` that runs on its inputs
repr                   ``repr()`` works before and after the first call (lazy sizes included)
shapes                 outputs have the convention's shapes; attention rows are distributions
masked_values          whatever masked positions hold (0, NaN, ±inf, 1e4, 3e38) never changes the real
                       outputs nor any gradient, and masked keys get exactly zero weight
padding                extra masked positions at the end never change the real outputs
fully_masked           a sample with every position masked attends to nothing: zero weights, finite
                       outputs and gradients, in float32, bfloat16 and float16
batch_independence     each sample's outputs are what it gets alone
bad_inputs             wrong rank, size, dtype, device, masks that are not boolean, out-of-range ids:
                       a ``ValueError`` naming the variant; empty batch or sequence: that or a finite
                       empty result; never a kernel error
causal                 (layers built causal) the output at i does not change when inputs after i change,
                       and does when inputs at i change
window                 (layers built with a window w) the output at i does not change when inputs beyond
                       i ± w change, and does when the input at i - w changes
incremental            (causal layers with ``new_cache``) one token per step through the cache, or a
                       prompt then steps, equals the causal forward over all the tokens
cross                  (layers that take ``context``) NaN in masked context positions changes nothing,
                       a masked context equals the context cut to its real part, and the context matters
gradcheck              float64 gradients over inputs and parameters match finite differences
meta                   builds, prints and runs on the ``meta`` device with the CPU's output shapes
state_dict             a fresh (lazy) instance loading the state dict gives identical outputs
save_load              ``attnzoo.save`` / ``attnzoo.load`` give identical outputs
dtypes                 float64, bfloat16 and float16 copies give finite outputs close to float32
train_step             in train mode, one backward gives finite gradients and an SGD step changes
                       the parameters
compile (slow)         ``torch.compile`` gives the eager outputs
export (slow)          ``attnzoo.export`` to .pt2 with dynamic batch and sequence axes; the file run on
                       another batch size and length matches eager within 1e-4
onnx (slow)            the same through the dynamo ONNX exporter and onnxruntime
=====================  ============================================================================
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.conventions import Convention, Sample
from attnzoo.core import load
from attnzoo.interop.export import export
from attnzoo.io.folders import save

__all__ = ["Property", "PROPERTIES", "Subject", "Failure", "NotApplicable", "FAST", "SLOW"]

HALF = (torch.bfloat16, torch.float16)


class Failure(AssertionError):
    """A property that does not hold; the message says how."""


class NotApplicable(Exception):
    """The property has nothing to check for this variant (shown as skipped, with the reason)."""


@dataclass
class Subject:
    """A variant under test: how to build it, how to call it, and the inputs that fit it.

    ``build(dtype=None, device=None)`` returns a fresh module in eval mode with fixed random weights.
    ``sample`` is the reference input (float32, CPU), sized by the first built instance.
    """

    name: str
    names: tuple[str, ...]  # every name an error message may use for this variant
    convention: Convention
    build: Callable[..., nn.Module]
    kind: str = "layer"
    registered: bool = True
    seq: int = 7

    def __post_init__(self) -> None:
        self._sizes: dict[str, int] | None = None

    # -- inputs ------------------------------------------------------------------------------------
    def sample(
        self,
        *,
        batch: int = 2,
        seq: int | None = None,
        lengths: Sequence[int] | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        model: nn.Module | None = None,
    ) -> Sample:
        generator = torch.Generator().manual_seed(seed)
        config = _config_of(model) if model is not None else {}
        return self.convention.sample(
            config,
            batch=batch,
            seq=self.seq if seq is None else seq,
            lengths=lengths,
            dtype=dtype,
            generator=generator,
            sizes=self._sizes,
        )

    def materialised(self, dtype: torch.dtype | None = None) -> tuple[nn.Module, Sample]:
        """A built instance that has seen one batch (lazy sizes fixed), and that batch."""
        model = self.build()
        sample = self.sample(model=model)
        self._sizes = dict(sample.sizes)
        self.run(model, sample)
        if dtype is not None:
            model = model.to(dtype)
            sample = self.convention.cast(sample, dtype)
        return model, sample

    # -- calls -------------------------------------------------------------------------------------
    def run(
        self, model: nn.Module, sample: Sample, *, return_attention: bool = False, grad: bool = False
    ) -> tuple[list[Tensor], Tensor | None]:
        args, kwargs = sample.call_arguments(return_attention=return_attention)
        with torch.set_grad_enabled(grad):
            out = model(*args, **kwargs)
        try:
            return self.convention.split(out, return_attention=return_attention)
        except ValueError as e:
            raise Failure(f"{'with' if return_attention else 'without'} return_attention: {e}") from None

    def attention_modes(self) -> tuple[bool, ...]:
        return (False, True) if self.convention.attention == "flag" else (False,)

    def names_in(self, message: str) -> bool:
        return any(n and n in message for n in self.names)


def _config_of(model: nn.Module) -> dict[str, Any]:
    info = getattr(model, "attnzoo_config", None)
    return dict(info.get("config") or {}) if isinstance(info, dict) else {}


def _float_tensors(values: Sequence[Any]) -> list[Tensor]:
    return [v for v in values if isinstance(v, Tensor) and v.is_floating_point()]


def _same(a: Sequence[Tensor], b: Sequence[Tensor], what: str, *, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    if len(a) != len(b):
        raise Failure(f"{what}: {len(a)} outputs vs {len(b)}")
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            raise Failure(f"{what}: output part {i} has shape {list(x.shape)} vs {list(y.shape)}")
        if x.is_floating_point() and not torch.isfinite(x).all():
            raise Failure(f"{what}: output part {i} holds NaN or inf")
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol):
            diff = (x.double() - y.double()).abs().max().item()
            raise Failure(f"{what}: output part {i} differs by up to {diff:.3g}")


# -- the properties ---------------------------------------------------------------------------------------
def builds(s: Subject) -> None:
    model = s.build()
    if not isinstance(model, nn.Module):
        raise Failure(f"the factory returned {type(model).__name__}, not a torch.nn.Module")
    s.run(model, s.sample(model=model))


def repr_(s: Subject) -> None:
    model = s.build()
    for when in ("before the first call", "after the first call"):
        try:
            text = repr(model)
        except Exception as e:  # noqa: BLE001 - the point is to report it
            raise Failure(f"repr() {when} raised {type(e).__name__}: {e}") from None
        if not text:
            raise Failure(f"repr() {when} is empty")
        s.run(model, s.sample(model=model))


def shapes(s: Subject) -> None:
    model, sample = s.materialised()
    conv = s.convention
    for ra in s.attention_modes():
        outputs, weights = s.run(model, sample, return_attention=ra)
        problem = conv.check(sample, outputs, weights)
        if problem:
            raise Failure(f"{'with' if ra else 'without'} return_attention: {problem}")
        if weights is not None and conv.weights and conv.weights[-1] == "keys":
            for b, n in enumerate(sample.lengths):
                row = weights[b].double()
                if conv.keyed_output:  # rows of padded queries are free (a local window may see nothing)
                    row = row[..., :n, :]
                if (row < 0).any():
                    raise Failure(f"attention weights of sample {b} are negative somewhere")
                sums = row.sum(-1)
                if n > 0 and not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
                    raise Failure(f"attention rows of sample {b} sum to {sums.flatten()[:3].tolist()}, not 1")


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
            _same(out, ref, f"{value} in masked positions ({mode} return_attention)")
            _same(
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
        _same(
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
            for i, value in enumerate(_float_tensors([*outputs, weights])):
                if not torch.isfinite(value).all():
                    raise Failure(f"{where}: output {i} is not finite for the fully masked sample")
            if weights is not None and conv.weights and conv.weights[-1] == "keys" and not (weights[1] == 0).all():
                raise Failure(f"{where}: the fully masked sample's attention weights are not all zero")
            total = sum(v.float().sum() for v in _float_tensors([*outputs, weights]) if v.requires_grad)
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
        _same(
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
                _same([o.double() for o in out], [o.double() for o in good_out], what, atol=1e-4, rtol=1e-3)
            except Failure as e:
                problems.append(f"{what}: accepted, but {e}")
        elif policy == "empty":
            values = _float_tensors([*out, w])
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
        _same([after[:, : i + 1]], [out[:, : i + 1]], f"outputs up to position {i} when only later inputs change")
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
    _same(
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
        _same([steps[0], steps[1, :4]], [full[0], full[1, :4]], f"cached steps after a prompt of {prefix}")
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
    _same([_outputs(model, x, context=dirty, context_mask=keep)], [out], "NaN in masked context positions")
    alone = _outputs(model, x[1:], context=context[1:, :3])
    _same([alone[0]], [out[1]], "a masked context against the context cut to its real positions")
    nudged = context.clone()
    nudged[1, 0] += 1.0
    if not _changes(out[1], _outputs(model, x, context=nudged, context_mask=keep)[1]):
        raise Failure("the output ignores the context")


def gradcheck(s: Subject) -> None:
    model, _ = s.materialised()
    model = model.double()
    seq = min(s.seq, 4)
    sample = s.sample(
        batch=2, seq=seq, lengths=(seq, 2) if s.convention.has_padding else None, dtype=torch.float64, model=model
    )
    # at the weights plus a little noise: a zero-initialised parameter (timm's last BatchNorm of a block)
    # can put a ReLU exactly on its kink, where finite differences are meaningless
    gen = torch.Generator().manual_seed(2)
    params = {
        k: (v.detach() + 1e-2 * torch.randn(v.shape, generator=gen, dtype=v.dtype)).requires_grad_()
        for k, v in model.named_parameters()
    }
    inputs = {k: t.detach().clone().requires_grad_() for k, t in sample.tensors.items() if t.is_floating_point()}
    if not params and not inputs:
        raise NotApplicable("no parameters and no floating inputs")
    param_names, input_names = list(params), list(inputs)

    def f(*flat: Tensor):
        state = dict(zip(param_names, flat[: len(param_names)], strict=True))
        feed = sample.with_tensors(**dict(zip(input_names, flat[len(param_names) :], strict=True)))
        args, kwargs = feed.call_arguments(return_attention=s.convention.attention == "flag")
        out = torch.func.functional_call(model, state, args, kwargs)
        outputs, weights = s.convention.split(out, return_attention=s.convention.attention == "flag")
        return tuple(_float_tensors([*outputs, weights]))

    try:
        ok = torch.autograd.gradcheck(
            f,
            (*params.values(), *inputs.values()),
            eps=1e-6,
            atol=1e-5,
            rtol=1e-3,
            fast_mode=s.kind == "model",
            raise_exception=True,
        )
    except RuntimeError as e:
        raise Failure(f"float64 gradients disagree with finite differences: {str(e).splitlines()[0][:200]}") from None
    if not ok:
        raise Failure("float64 gradients disagree with finite differences")


def meta(s: Subject) -> None:
    cpu_model, _ = s.materialised()
    cpu_sample = s.sample(model=cpu_model)
    expected = s.run(cpu_model, cpu_sample)
    try:
        model = s.build(device="meta")
        text = repr(model)
    except Exception as e:  # noqa: BLE001
        raise Failure(f"building or printing on meta raised {type(e).__name__}: {e}") from None
    if not text:
        raise Failure("repr() on meta is empty")
    sample = s.convention.cast(cpu_sample, device="meta")
    try:
        outputs, weights = s.run(model, sample)
        repr(model)
    except Failure:
        raise
    except Exception as e:  # noqa: BLE001
        raise Failure(f"a forward on meta raised {type(e).__name__}: {str(e)[:200]}") from None
    got = [o.shape for o in _float_tensors([*outputs, weights])]
    want = [o.shape for o in _float_tensors([*expected[0], expected[1]])]
    if got != want:
        raise Failure(f"shapes on meta {got} differ from the CPU's {want}")
    if any(p.device.type != "meta" for p in model.parameters()):
        raise Failure("some parameters are not on meta")


def state_dict(s: Subject) -> None:
    model, sample = s.materialised()
    expected = s.run(model, sample)
    fresh = s.build()
    try:
        fresh.load_state_dict(model.state_dict())
    except Exception as e:  # noqa: BLE001
        raise Failure(f"a fresh instance refused the state dict: {type(e).__name__}: {str(e)[:200]}") from None
    got = s.run(fresh, sample)
    _same(
        _float_tensors([*got[0], got[1]]),
        _float_tensors([*expected[0], expected[1]]),
        "after load_state_dict",
        atol=0,
        rtol=0,
    )


def save_load(s: Subject) -> None:
    if not s.registered:
        raise NotApplicable("save/load needs a registered name (attnzoo.register) to rebuild from")

    model, sample = s.materialised()
    expected = s.run(model, sample)
    with tempfile.TemporaryDirectory() as tmp:
        save(model, f"{tmp}/model")
        again = load(f"{tmp}/model").eval()
    got = s.run(again, sample)
    _same(
        _float_tensors([*got[0], got[1]]),
        _float_tensors([*expected[0], expected[1]]),
        "after save and load",
        atol=0,
        rtol=0,
    )


def dtypes(s: Subject) -> None:
    base, sample = s.materialised()
    expected = _float_tensors([*s.run(base, sample)[0]])
    scale = max((e.abs().max().item() for e in expected if e.numel()), default=1.0) or 1.0
    for dtype in (torch.float64, *HALF):
        model = copy.deepcopy(base).to(dtype)
        outputs = _float_tensors(s.run(model, s.convention.cast(sample, dtype))[0])
        name = str(dtype).replace("torch.", "")
        for o, e in zip(outputs, expected, strict=True):
            if o.dtype != dtype:
                raise Failure(f"a {name} copy returns {o.dtype}")
            if not torch.isfinite(o).all():
                raise Failure(f"a {name} copy gives non-finite outputs")
            tol = 1e-4 if dtype == torch.float64 else 0.1
            diff = (o.double() - e.double()).abs().max().item() if o.numel() else 0.0
            if diff > tol * max(scale, 1.0):
                raise Failure(f"a {name} copy differs from float32 by {diff:.3g} (outputs up to {scale:.3g})")


def train_step(s: Subject) -> None:
    model, sample = s.materialised()
    if not any(True for _ in model.parameters()):
        raise NotApplicable("no parameters")
    model.train()
    outputs, weights = s.run(model, sample, grad=True)
    floats = [o for o in _float_tensors([*outputs, weights]) if o.requires_grad]
    if not floats:
        raise Failure("no output depends on the parameters")
    gen = torch.Generator().manual_seed(1)
    loss = sum((o.float() * torch.randn(o.shape, generator=gen)).sum() for o in floats)
    loss.backward()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    for k, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            raise Failure(f"the gradient of {k} is not finite")
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    if not any(not torch.equal(p, before[k]) for k, p in model.named_parameters()):
        raise Failure("one SGD step changed no parameter (no gradient reached them)")


def compile_(s: Subject) -> None:
    torch._dynamo.reset()
    model, sample = s.materialised()
    expected = s.run(model, sample)
    compiled = torch.compile(model)
    got = s.run(compiled, sample)
    _same(_float_tensors([*got[0], got[1]]), _float_tensors([*expected[0], expected[1]]), "under torch.compile")


def _exported(s: Subject, suffix: str) -> None:
    """``attnzoo.export`` writes a file that reproduces eager at several shapes per open axis (export
    checks that itself and refuses otherwise), with the batch and the convention's sequence axes open. A
    converted Keras model keeps open what Keras declared open; one whose input takes strings (a
    TextVectorization inside) cannot be a graph of tensors, which is said naming that input."""
    from attnzoo.errors import ExportError

    if not s.registered:
        raise NotApplicable("export builds its inputs from a registered card's convention")
    model, _ = s.materialised()
    strings = [spec["name"] for spec in getattr(model, "inputs_spec", []) if spec.get("dtype") == "string"]
    if strings:
        raise NotApplicable(f"input {strings[0]!r} takes strings (a text layer inside); a graph takes tensors")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = export(model, f"{tmp}/model{suffix}")
        except ExportError as e:
            raise Failure(str(e)) from None
    fixed = [a for a in result.static_axes if a in ("batch", "seq", "queries")]
    if fixed:
        raise Failure(
            f"exported with {', '.join(fixed)} fixed at the traced size; the batch and sequence axes should be "
            f"open ({'; '.join(result.notes)})"
        )


def export_(s: Subject) -> None:
    _exported(s, ".pt2")


def onnx_(s: Subject) -> None:
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxscript", "onnxruntime")):
        raise NotApplicable("onnx, onnxscript and onnxruntime are not installed (pip install 'attnzoo[export]')")
    _exported(s, ".onnx")


@dataclass(frozen=True)
class Property:
    name: str
    check: Callable[[Subject], None]
    promise: str
    slow: bool = False


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in [
        Property("builds", builds, "the example config builds a module that runs"),
        Property("repr", repr_, "repr() works before and after the first call"),
        Property("shapes", shapes, "outputs have the convention's shapes; attention rows sum to one"),
        Property("masked_values", masked_values, "masked positions never change real outputs, whatever they hold"),
        Property("padding", padding, "extra masked positions never change real outputs"),
        Property("fully_masked", fully_masked, "a fully masked sample: zero weights, finite outputs and gradients"),
        Property("batch_independence", batch_independence, "each sample's outputs are what it gets alone"),
        Property("bad_inputs", bad_inputs, "bad inputs raise a ValueError naming the variant"),
        Property("causal", causal, "the output at i does not change when inputs after i change"),
        Property("window", window, "nor when inputs beyond the window change"),
        Property("incremental", incremental, "steps through new_cache() equal the causal forward"),
        Property("cross", cross, "context_mask is honoured: masked context changes nothing"),
        Property("gradcheck", gradcheck, "float64 gradients over inputs and parameters"),
        Property("meta", meta, "builds, prints and runs on the meta device"),
        Property("state_dict", state_dict, "state_dict into a fresh instance gives identical outputs"),
        Property("save_load", save_load, "attnzoo.save / attnzoo.load give identical outputs"),
        Property("dtypes", dtypes, "float64, bfloat16 and float16 copies stay finite and close"),
        Property("train_step", train_step, "a train-mode step has finite gradients that change the parameters"),
        Property("compile", compile_, "torch.compile gives the eager outputs", slow=True),
        Property(
            "export", export_, "torch.export with dynamic batch and length reproduces eager on new shapes", slow=True
        ),
        Property("onnx", onnx_, "ONNX (dynamo exporter) run by onnxruntime reproduces eager on new shapes", slow=True),
    ]
}

FAST = tuple(n for n, p in PROPERTIES.items() if not p.slow)
SLOW = tuple(n for n, p in PROPERTIES.items() if p.slow)
