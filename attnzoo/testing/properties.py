"""The named promises every variant keeps, each a function of a :class:`Subject`.

A property returns None when it holds, raises :class:`Failure` with the reason when it breaks, and
:class:`NotApplicable` when the variant's convention gives it nothing to check (an image block has no
mask). Inputs come from the variant's calling convention (``attnzoo.conventions``), never from a table
of names. The properties about what a variant reads (masks, padding, the batch, causality, windows, the
cache, the context) live in :mod:`attnzoo.testing.mask_properties`; the subject and the verdicts in
:mod:`attnzoo.testing.subject`; this module holds the rest and the table.

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
state_dict             a fresh (lazy) instance loading the state dict holds identical tensors and gives the same outputs
save_load              ``attnzoo.save`` / ``attnzoo.load`` hold identical tensors and give the same outputs
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
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnzoo.core import load
from attnzoo.interop.export import export
from attnzoo.io.folders import save
from attnzoo.testing.mask_properties import (
    bad_inputs,
    batch_independence,
    causal,
    cross,
    fully_masked,
    incremental,
    masked_values,
    padding,
    window,
)
from attnzoo.testing.subject import HALF, Failure, NotApplicable, Subject, float_tensors, same_outputs

__all__ = ["Property", "PROPERTIES", "Subject", "Failure", "NotApplicable", "FAST", "SLOW"]


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
        return tuple(float_tensors([*outputs, weights]))

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
    got = [o.shape for o in float_tensors([*outputs, weights])]
    want = [o.shape for o in float_tensors([*expected[0], expected[1]])]
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
    same_tensors(fresh, model, "after load_state_dict")
    got = s.run(fresh, sample)
    same_to_rounding(got, expected, "after load_state_dict")


def save_load(s: Subject) -> None:
    if not s.registered:
        raise NotApplicable("save/load needs a registered name (attnzoo.register) to rebuild from")

    model, sample = s.materialised()
    expected = s.run(model, sample)
    with tempfile.TemporaryDirectory() as tmp:
        save(model, f"{tmp}/model")
        again = load(f"{tmp}/model").eval()
    same_tensors(again, model, "after save and load")
    got = s.run(again, sample)
    same_to_rounding(got, expected, "after save and load")


def same_tensors(got: nn.Module, want: nn.Module, what: str) -> None:
    """Every tensor of the state dict bit for bit: what a copy of the weights must hold."""
    mine, theirs = got.state_dict(), want.state_dict()
    if mine.keys() != theirs.keys():
        raise Failure(f"{what}: the state dict's keys differ: {sorted(mine.keys() ^ theirs.keys())[:5]}")
    for key, tensor in theirs.items():
        if tensor.dtype != mine[key].dtype or not torch.equal(mine[key], tensor):
            raise Failure(f"{what}: {key!r} is not the saved tensor")


def same_to_rounding(got: tuple, expected: tuple, what: str) -> None:
    """Outputs of identical tensors, within 8 units in the last place at the outputs' size: the same weights in
    other memory give other sums when a matrix multiply blocks them by its alignment (oneDNN, cuBLAS)."""
    a, b = float_tensors([*got[0], got[1]]), float_tensors([*expected[0], expected[1]])
    scale = max((x.abs().max().item() for x in b if x.numel()), default=1.0) or 1.0
    ulp = max((torch.finfo(x.dtype).eps for x in b), default=torch.finfo(torch.float32).eps)
    same_outputs(a, b, what, atol=8 * ulp * scale, rtol=0)


def dtypes(s: Subject) -> None:
    base, sample = s.materialised()
    expected = float_tensors([*s.run(base, sample)[0]])
    scale = max((e.abs().max().item() for e in expected if e.numel()), default=1.0) or 1.0
    for dtype in (torch.float64, *HALF):
        model = copy.deepcopy(base).to(dtype)
        outputs = float_tensors(s.run(model, s.convention.cast(sample, dtype))[0])
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
    floats = [o for o in float_tensors([*outputs, weights]) if o.requires_grad]
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
    try:
        got = s.run(torch.compile(model), sample)
    except Exception as first:
        # Inductor's on-disk caches are shared by every process of the user (two test workers, two
        # jobs); an error that goes away when the graph is compiled afresh is the cache's, not the
        # variant's. One that stays is reported with both attempts.
        torch._dynamo.reset()
        try:
            with torch.compiler.config.patch(force_disable_caches=True):
                got = s.run(torch.compile(model), sample)
        except Exception as second:
            raise Failure(
                f"torch.compile raised {type(first).__name__}: {first}; compiled again with torch's "
                f"caches off, it raised {type(second).__name__}: {second}"
            ) from second
    same_outputs(float_tensors([*got[0], got[1]]), float_tensors([*expected[0], expected[1]]), "under torch.compile")


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
        Property("state_dict", state_dict, "a fresh instance given the state dict holds its tensors, the same outputs"),
        Property("save_load", save_load, "attnzoo.save / attnzoo.load hold identical tensors, the same outputs"),
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
