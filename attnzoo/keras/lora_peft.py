"""keras-hub LoRA adapters kept apart (:class:`~attnzoo.keras.lora.KerasLora`) written as a PEFT LoRA adapter folder
(``adapter_config.json`` + ``adapter_model.safetensors``) for the Hugging Face folder of the base model:
``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(DIR), DIR / "adapter")`` computes what Keras
computes with the adapters.

Each adapter finds its transformers module by value: the ``nn.Linear`` weight [out, in] that holds its kernel
W [..., n] with some of W's leading axes as the input (in their order) and the others, then W's last axis, as
the output (in their order): a Gemma query kernel [heads, D, d] is ``q_proj`` [heads·d, D], a Llama one
[D, heads, d] too, an output kernel [heads, d, D] is ``o_proj`` [D, heads·d], a Dense [I, D] its Linear's
transpose. A kernel no module holds so (transformers' Phi-3 fuses the query, key and value into one
``qkv_proj``) is refused by name: merge it instead (``lora="merge"``).

Keras's factors A [*W.shape[:-1], r] and B [r, n] give every index p of the output's leading axes (a head) its
own A[..., p, :] and share B; in the flat Linear that is a LoRA of rank P·r (P the product of those axes: the
heads): ``lora_A`` [P·r, in] stacks each head's A, ``lora_B`` [P·n, P·r] is B's transpose P times down the
diagonal. A kernel whose output is its last axis alone (an output projection, a Dense) keeps rank r. A module's
rank goes in ``rank_pattern`` where it differs from ``r``, and its ``lora_alpha`` is its rank times keras's
factor (alpha / rank, 1 for keras-hub), so peft's ``lora_alpha / r`` scales it as Keras does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from attnzoo.errors import ExportError
from attnzoo.keras.lora import Adapter, KerasLora

__all__ = ["write_peft_adapter", "ADAPTER_FOLDER"]

ADAPTER_FOLDER = "adapter"  # inside the Hugging Face folder
TASK_TYPES = {"causal_lm": "CAUSAL_LM", "backbone": "FEATURE_EXTRACTION"}


def _splits(shape: tuple[int, ...]) -> Iterable[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each way W's leading axes divide into the output's (``out``) and the input's (``ins``, not empty)."""
    lead = range(len(shape) - 1)
    for size in range(1, len(shape)):
        for ins in combinations(lead, size):
            yield tuple(axis for axis in lead if axis not in ins), ins


def _flat(positions: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """The row-major index of ``positions`` over ``axes`` (the flattened axes of a Linear's weight)."""
    if not axes:
        return np.zeros(len(positions), dtype=np.int64)
    return np.ravel_multi_index(tuple(positions[:, axis] for axis in axes), tuple(shape[axis] for axis in axes))


def _holds(adapter: Adapter, weight: Any, out: tuple[int, ...], ins: tuple[int, ...]) -> bool:
    import torch

    shape = adapter.shape
    rows = _flat(adapter.at, shape, (*out, len(shape) - 1))
    columns = _flat(adapter.at, shape, ins)
    want = torch.from_numpy(adapter.values).to(weight.dtype)
    return bool(torch.equal(weight[torch.from_numpy(rows), torch.from_numpy(columns)], want))


def _find(adapters: tuple[Adapter, ...], tensors: Iterable[tuple[str, Any]]) -> list[tuple[str, tuple, tuple]]:
    """Each adapter's module: (its name, the out axes, the in axes), from transformers' weights by value."""
    found: list[list[tuple[str, tuple, tuple]]] = [[] for _ in adapters]
    for name, weight in tensors:
        if weight.dim() != 2 or not name.endswith(".weight"):
            continue
        for i, adapter in enumerate(adapters):
            for out, ins in _splits(adapter.shape):
                rows = int(np.prod([adapter.shape[a] for a in out], dtype=np.int64)) * adapter.shape[-1]
                columns = int(np.prod([adapter.shape[a] for a in ins], dtype=np.int64))
                if tuple(weight.shape) == (rows, columns) and _holds(adapter, weight, out, ins):
                    found[i].append((name.removesuffix(".weight"), out, ins))
    for adapter, where in zip(adapters, found, strict=True):
        if len(where) != 1:
            why = "no" if not where else f"{len(where)} ({', '.join(w[0] for w in where[:3])})"
            raise ExportError(
                f"the LoRA adapter on {adapter.layer!r} (kernel {list(adapter.shape)}) has {why} transformers "
                f"module holding its kernel as its weight, so it cannot be kept as a PEFT adapter; merge the "
                f"adapters into the weights instead (lora='merge', --lora merge)"
            )
    return [where[0] for where in found]


def _factors(adapter: Adapter, out: tuple[int, ...], ins: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """peft's ``lora_A`` [P·r, in] and ``lora_B`` [P·n, P·r] of one adapter (the module docstring's layout)."""
    shape, r = adapter.shape, adapter.a.shape[-1]
    heads = int(np.prod([shape[a] for a in out], dtype=np.int64))
    inputs = int(np.prod([shape[a] for a in ins], dtype=np.int64))
    a = np.transpose(adapter.a, (*out, *ins, len(shape) - 1)).reshape(heads, inputs, r)
    lora_a = np.transpose(a, (0, 2, 1)).reshape(heads * r, inputs)
    lora_b = np.kron(np.eye(heads, dtype=np.float32), adapter.b.T)
    return lora_a, lora_b


def write_peft_adapter(
    kept: KerasLora, tensors: Iterable[tuple[str, Any]], folder: Path, *, dtype: Any, base: Path, kind: str
) -> Path:
    """Write ``kept`` as a PEFT LoRA folder ``folder`` for the model whose transformers weights ``tensors``
    are (the Hugging Face folder ``base`` holds them in ``dtype``); returns the folder."""
    import torch
    from safetensors.torch import save_file

    modules = _find(kept.adapters, tensors)
    if len({name for name, _, _ in modules}) != len(modules):
        raise ExportError("two LoRA adapters hold one transformers module; merge them instead (lora='merge')")
    state, ranks, alphas = {}, {}, {}
    for adapter, (name, out, ins) in zip(kept.adapters, modules, strict=True):
        lora_a, lora_b = _factors(adapter, out, ins)
        state[f"base_model.model.{name}.lora_A.weight"] = torch.from_numpy(lora_a).to(dtype).contiguous()
        state[f"base_model.model.{name}.lora_B.weight"] = torch.from_numpy(lora_b).to(dtype).contiguous()
        ranks[name], alphas[name] = lora_a.shape[0], lora_a.shape[0] * adapter.scale
    r = max(set(ranks.values()), key=list(ranks.values()).count)
    alpha = r * kept.adapters[0].scale
    config = {
        "peft_type": "LORA",
        "task_type": TASK_TYPES.get(kind),
        "base_model_name_or_path": str(base.resolve()),
        "r": r,
        "lora_alpha": alpha,
        "target_modules": sorted(ranks),
        "rank_pattern": {re.escape(name): rank for name, rank in ranks.items() if rank != r},
        "alpha_pattern": {re.escape(name): value for name, value in alphas.items() if value != alpha},
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "inference_mode": True,
    }
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    return folder
