"""The caller's module state, kept across a helper that must change it.

    with kept_modes(model):
        model.eval()
        ...            # predict, export, bench, the conformance kit
    # every submodule is back in the mode it was in, every parameter's requires_grad as it was, and
    # torch's grad mode as it was

A helper that runs a caller's model in eval mode (dropout off) must not leave it there: called in the
middle of training, a silent switch turns dropout off for every later step. ``Module.train(mode)``
recurses, so it cannot restore a model whose submodules were in different modes (a frozen, eval-mode
encoder under a training head); each submodule's own flag is saved and put back instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch

__all__ = ["kept_modes", "kept_state"]


@contextmanager
def kept_modes(*models: object) -> Iterator[None]:
    """Save each module's ``training`` flag (every submodule's), each parameter's ``requires_grad`` and
    torch's grad mode; restore them all on the way out, whatever happened inside. Arguments that are not
    modules are ignored (a helper may be handed a plain callable)."""
    modules = [m for model in models if isinstance(model, torch.nn.Module) for m in model.modules()]
    training = [(m, m.training) for m in modules]
    requires = [(p, p.requires_grad) for p in _parameters(modules)]
    grad = torch.is_grad_enabled()
    try:
        yield
    finally:
        for module, mode in training:
            module.training = mode
        for parameter, flag in requires:
            if parameter.requires_grad != flag:
                parameter.requires_grad_(flag)
        torch.set_grad_enabled(grad)


def _parameters(modules: Iterable[torch.nn.Module]) -> list[torch.nn.Parameter]:
    seen: dict[int, torch.nn.Parameter] = {}
    for module in modules:
        for parameter in module.parameters(recurse=False):
            seen.setdefault(id(parameter), parameter)
    return list(seen.values())


@contextmanager
def kept_state(*models: object) -> Iterator[None]:
    """:func:`kept_modes`, and every parameter's and buffer's values, dtype and device, and every
    parameter's gradient, as they were: what a conformance check needs, which casts a module to
    bfloat16 and float16 and takes an optimiser step, when a caller hands it their own module. A
    parameter still lazy (no size yet) keeps the size the check gave it."""
    from torch.nn.parameter import is_lazy

    modules = [m for model in models if isinstance(model, torch.nn.Module) for m in model.modules()]
    parameters = [
        (m, name, p, p.data.clone(), None if p.grad is None else p.grad.clone())
        for m in modules
        for name, p in m.named_parameters(recurse=False)
        if not is_lazy(p)
    ]
    buffers = [(m, name, b.clone()) for m in modules for name, b in m.named_buffers(recurse=False) if not is_lazy(b)]
    with kept_modes(*models):
        try:
            yield
        finally:
            for module, name, parameter, data, grad in parameters:
                if getattr(module, name, None) is not parameter:
                    setattr(module, name, parameter)
                parameter.data = data
                parameter.grad = grad
            for module, name, data in buffers:
                setattr(module, name, data)
