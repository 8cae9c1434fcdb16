"""Input sizes inferred on the first call, the way Keras builds a layer, on torch's own machinery.

Seed 000 built its weight by reassigning ``Ws.data`` inside ``forward``: ``load_state_dict`` into the
un-built layer then fails with a size mismatch, and ``.to(device)`` before the first call leaves the
weight behind. torch's ``LazyModuleMixin`` with ``UninitializedParameter`` handles both: an uninitialised
parameter follows ``.to()``, takes its shape from a loaded state dict, and is materialised by the first
forward. :class:`LazyLayer` adds the bookkeeping every attnzoo layer needs on top of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter, is_lazy

__all__ = ["LazyLayer", "ParameterGroup"]


class ParameterGroup(nn.Module):
    """A holder for parameters that belong together (``query.weight``, ``query.bias``), so that
    state-dict keys read like the ``nn.Linear`` layers people port from."""

    if TYPE_CHECKING:  # parameters are registered at run time: tell type checkers they are there

        def __getattr__(self, name: str) -> Any: ...

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # as LazyModuleMixin does for its own: an uninitialised parameter cannot be detached
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars or is_lazy(param) else param.detach()

    def extra_repr(self) -> str:
        parts = []
        for name, p in self.named_parameters(recurse=False):
            parts.append(f"{name}={'lazy' if is_lazy(p) else list(p.shape)}")
        return ", ".join(parts)


class LazyLayer(LazyModuleMixin, nn.Module):
    """Base for layers whose parameter shapes depend on input sizes that may be given or inferred.

    A subclass calls :meth:`_create_parameters` at the end of ``__init__`` with the sizes it knows
    (None for unknown), and implements:

    * ``_parameter_shapes(sizes) -> {name: shape}`` for every parameter that depends on the sizes;
      a dotted name (``"query.weight"``) puts the parameter in a :class:`ParameterGroup`;
    * ``_infer_sizes(*args, **kwargs) -> {size_name: int}`` from the first forward's arguments, after
      checking them (so a wrong input fails with the layer's own message, not torch's);
    * ``_sizes_from_parameters() -> {size_name: int}`` for a lazy layer that was given a state dict;
    * ``reset_parameters()``.
    """

    if TYPE_CHECKING:  # parameters and groups are registered at run time (see _create_parameters)

        def __getattr__(self, name: str) -> Any: ...

    def _create_parameters(self, sizes: dict[str, int | None], device=None, dtype=None) -> None:
        self._sizes = dict(sizes)
        known = all(v is not None for v in sizes.values())
        shapes = self._parameter_shapes({k: (v or 0) for k, v in sizes.items()})
        self._lazy_names = list(shapes)
        for name, shape in shapes.items():
            if known:
                param = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
            else:
                param = UninitializedParameter(device=device, dtype=dtype)
            owner, _, leaf = name.rpartition(".")
            module: nn.Module = self
            for part in owner.split(".") if owner else ():
                if part not in module._modules:
                    module.add_module(part, ParameterGroup())
                module = module._modules[part]
            module.register_parameter(leaf, param)
        if known:
            self.reset_parameters()

    def _parameter_shapes(self, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _infer_sizes(self, *args, **kwargs) -> dict[str, int]:
        raise NotImplementedError

    def _sizes_from_parameters(self) -> dict[str, int]:
        raise NotImplementedError

    def reset_parameters(self) -> None:
        raise NotImplementedError

    def size(self, name: str) -> int | None:
        """An input size: given, inferred by the first call or read off loaded weights; None while unknown."""
        if self._sizes.get(name) is None and not self.has_uninitialized_params():
            self._sizes.update(self._sizes_from_parameters())  # a lazy layer that was given a state dict
        return self._sizes.get(name)

    def tensor(self, name: str):
        """A parameter by dotted name, by attribute lookup (so ``torch.func.functional_call`` works,
        which swaps parameters for plain tensors that ``get_parameter`` would refuse)."""
        obj = self
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    def has_uninitialized_params(self) -> bool:
        return any(is_lazy(self.tensor(name)) for name in self._lazy_names)

    def initialize_parameters(self, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self._sizes.update(self._infer_sizes(*args, **kwargs))
        with torch.no_grad():
            for name, shape in self._parameter_shapes(self._sizes).items():
                param = self.tensor(name)
                if is_lazy(param):
                    param.materialize(shape)
            self.reset_parameters()

    def _lazy_load_hook(self, state_dict, prefix, *args) -> None:
        for name in self._lazy_names:
            param, key = self.tensor(name), prefix + name
            if is_lazy(param) and key in state_dict and not is_lazy(state_dict[key]):
                with torch.no_grad():
                    param.materialize(state_dict[key].shape)
