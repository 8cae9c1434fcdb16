"""The Hugging Face door: a converted keras-hub model written as a folder transformers' Auto classes load,
with neither Keras nor attnzoo (:func:`to_transformers`).

The folder holds what ``save_pretrained`` writes: ``config.json`` (``architectures``, ``model_type``,
``dtype`` and its older name ``torch_dtype``, the family's sizes and special token ids),
``generation_config.json`` for a causal LM, and the weights, ``model.safetensors`` or, over
``max_shard_size``, ``model-0000i-of-0000N.safetensors`` shards with ``model.safetensors.index.json``
(:mod:`attnzoo.io.shards`). What each family writes is its own file's :class:`TransformersForm`
(:mod:`attnzoo.keras.transformers_form`), registered with ``@keras_hub_model(..., transformers=...)``; a
class with no exact transformers equivalent is refused before anything is written. The tokenizer goes
through one seam, :func:`attnzoo.keras.transformers_tokenizer.write_tokenizer`: the one the converted model
carries (or ``preset=``'s), as ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``,
its special token ids in config.json.

The folder is written beside its target and renamed into place when complete (:func:`attnzoo.io.atomic.new_folder`):
a failure leaves no half-written folder, and a folder holding files is replaced only with ``overwrite=True``,
never one holding the files the model was read from or any Keras file (``.keras``, ``.h5``).
Each weight is computed from the converted model when its shard is filled, so at most one shard's tensors
exist beside the model.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooWarning, ConfigError, ExportError
from attnzoo.io.atomic import new_folder
from attnzoo.io.shards import parse_size, write_shards
from attnzoo.keras.hub_families import hub_models
from attnzoo.keras.transformers_form import HubSource, TransformersForm
from attnzoo.keras.transformers_tokenizer import TokenizerWritten, rebuilt_warning, write_tokenizer

__all__ = ["to_transformers", "hub_source", "checked_folder", "DEFAULT_SHARD_SIZE", "DTYPES"]

DEFAULT_SHARD_SIZE = "5GB"  # transformers 4's default, the shards the Hub's models are cut in
DTYPES = ("float32", "bfloat16", "float16")


def _dtype(value: Any) -> Any:
    """``None`` or a torch dtype of :data:`DTYPES` (given as itself or by name)."""
    import torch

    if value is None:
        return None
    name = str(value).removeprefix("torch.") if isinstance(value, (str, torch.dtype)) else None
    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)} (or None: the model's own), got {value!r}")
    return getattr(torch, name)


def _model_dtype(state: Any) -> Any:
    """The dtype most of the model's floating weights are in (by elements)."""
    counts: dict[Any, int] = {}
    for tensor in state.values():
        if tensor.is_floating_point():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.numel()
    if not counts:
        raise ExportError("the model has no floating weights to write")
    return max(counts, key=lambda dtype: counts[dtype])


def _converted(source: Any, preset: Any, lora: str) -> tuple[Any, Path | None]:
    """The converted model, and the preset folder whose tokenizer goes with it (if any)."""
    if lora not in ("merge", "keep"):
        raise ConfigError(f"lora must be 'merge' or 'keep' (the adapters as a PEFT folder beside it), got {lora!r}")
    if hasattr(source, "graph") and hasattr(source, "state_dict"):
        kept = getattr(source, "keras_lora", None) is not None
        if kept != (lora == "keep"):
            raise ExportError(
                "lora='keep' writes the LoRA adapters a model converted with lora='keep' holds apart, and this one "
                "holds none: convert it so (convert_keras_model(path, lora='keep')), or pass the path"
                if lora == "keep"
                else "the model was converted with lora='keep': its weights are the base model's and its adapters "
                "are apart; write it with lora='keep', or convert it with lora='merge' to write the merged model"
            )
        return source, _preset(preset)
    if not isinstance(source, (str, Path)):
        raise ConfigError(
            f"to_transformers takes a model convert_keras_model returned, or a path it takes, got "
            f"{type(source).__name__}"
        )
    from attnzoo.keras.convert import convert_keras_model

    path = Path(source)
    folder = path if path.is_dir() else None
    return convert_keras_model(path, lora=lora), (_preset(preset) if preset is not None else folder)


def _preset(preset: Any) -> Path | None:
    """``preset=``: a folder (a path that is none would leave the tokenizer out unsaid)."""
    if preset is None:
        return None
    if not isinstance(preset, (str, Path)) or not Path(preset).is_dir():
        shown = str(preset) if isinstance(preset, Path) else repr(preset)
        raise ConfigError(
            f"preset= names the keras-hub preset folder whose tokenizer goes with the model; {shown} is not one"
        )
    return Path(preset)


_KINDS = ("Backbone", "CausalLM", "Seq2SeqLM", "TextClassifier", "ImageClassifier", "MaskedLM")


def _check_tokenizer_fits(tokenizer: TokenizerWritten, keras_class: str, vocabulary: Any) -> None:
    """A tokenizer of the model's own keras-hub family whose ids are rows of its embedding: another's (a
    ``preset=`` of another model) would give ids that mean other tokens, or no row at all."""
    if not tokenizer.files:
        return
    family = next((keras_class.removesuffix(kind) for kind in _KINDS if keras_class.endswith(kind)), keras_class)
    if tokenizer.keras_class.removesuffix("Tokenizer") != family:
        raise ExportError(
            f"the tokenizer is keras-hub's {tokenizer.keras_class} and the model a {keras_class}: give preset= the "
            f"preset folder of the model's own tokenizer ({family}Tokenizer)"
        )
    if isinstance(vocabulary, int) and tokenizer.size > vocabulary:
        raise ExportError(
            f"the tokenizer gives ids up to {tokenizer.size - 1} and the model embeds {vocabulary} tokens: give "
            f"preset= the preset folder of the model's own tokenizer"
        )


def hub_source(model: Any) -> tuple[TransformersForm, HubSource]:
    """The family's Hugging Face form and the converted model as it reads it; refusals name the class."""
    graph = getattr(model, "graph", None)
    name = graph.get("keras_hub_class") if isinstance(graph, dict) else None
    table = hub_models()
    formed = sorted(n for n in table if table[n].transformers is not None)
    if not isinstance(name, str) or name not in table:
        raise ExportError(
            f"the model is not a keras-hub model class attnzoo rebuilt ({name or 'no keras-hub class'}): the "
            f"Hugging Face door writes {', '.join(formed)}"
        )
    entry = table[name]
    if entry.transformers is None:
        why = f" ({entry.refusal})" if entry.refusal else ""
        raise ExportError(
            f"keras-hub's {name} has no Hugging Face form in attnzoo{why}; those with one: {', '.join(formed)}"
        )
    form = entry.transformers
    if not isinstance(form, TransformersForm):
        raise ConfigError(f"the Hugging Face form of {name} is a {type(form).__name__}, not a TransformersForm")
    arguments = dict(graph.get("keras_hub_config") or {})
    prefix = "" if entry.kind == "backbone" else f"{arguments.get('name')}/"
    layers = graph.get("layers") or {}
    if prefix and not any(str(key).startswith(prefix) for key in layers):
        raise ExportError(f"keras-hub's {name}: its backbone's layers are not under {prefix!r} as its file names them")
    # a classifier fine-tuned by attnzoo train carries its labels in the order its outputs learnt them
    learnt = (getattr(model, "attnzoo_metadata", None) or {}).get("labels")
    names = tuple(str(n) for n in learnt) if isinstance(learnt, (list, tuple)) else ()
    source = HubSource(name, entry.kind, arguments, layers, model.state_dict(), prefix, class_names=names)
    return form, source


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _generation_config(config: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json: the special token ids config.json knows (greedy is transformers' default; the
    sampler keras-hub's ``compile`` chose is no part of the file)."""
    keys = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
    return {key: config[key] for key in keys if config.get(key) is not None}


def _keras_file(folder: Path) -> Path | None:
    """The first Keras model file (``.keras``, ``.h5``) under ``folder``, if any: what a converted model may
    have been read from, which replacing the folder would delete."""
    for root, _, names in os.walk(folder):
        for name in names:
            if name.endswith((".keras", ".h5")):
                return Path(root) / name
    return None


def checked_folder(directory: Any, overwrite: bool, sources: tuple[Any, ...]) -> Path:
    """The folder to write: not a file, empty unless ``overwrite``, and never one that holds the model's own
    files (``sources``, the paths it was converted from) or any Keras file, which replacing it would delete."""
    if not isinstance(directory, (str, Path)) or not str(directory):
        raise ConfigError(f"to_transformers writes a folder; give its path, got {directory!r}")
    path = Path(directory)
    for source in sources:
        if isinstance(source, (str, Path)) and path.resolve() in (
            Path(source).resolve(),
            *Path(source).resolve().parents,
        ):
            raise ExportError(f"{path} holds the model's own {source}; write the Hugging Face folder elsewhere")
    if path.exists() and not path.is_dir():
        raise ExportError(f"{path} exists and is not a folder; the Hugging Face door writes a folder")
    above = next((p for p in Path(os.path.abspath(path)).parents if p.exists() and not p.is_dir()), None)
    if above is not None:
        raise ExportError(
            f"{path}: {above} is a file, not a folder, so no folder can be made in it; choose another path"
        )
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ExportError(f"{path} is not empty; pass overwrite=True (--overwrite) to replace the folder as a whole")
    keras = _keras_file(path) if path.is_dir() else None
    if keras is not None:  # a converted model does not know its file: it may be this one
        raise ExportError(
            f"{path} holds the Keras file {keras}, which replacing the folder would delete; move it, or write the "
            f"Hugging Face folder elsewhere"
        )
    return path


def to_transformers(
    source: Any,
    directory: str | Path,
    *,
    dtype: Any = None,
    max_shard_size: int | str = DEFAULT_SHARD_SIZE,
    overwrite: bool = False,
    preset: str | Path | None = None,
    lora: str = "merge",
) -> Path:
    """Write a keras-hub model as a Hugging Face folder; returns the folder.

    ``source``: a model :func:`~attnzoo.keras.convert_keras_model` returned for a keras-hub class, or a path
    it takes (a ``.keras`` file, a ``save_to_preset`` folder). ``dtype``: the weights' dtype (``"float32"``,
    ``"bfloat16"``, ``"float16"``); ``None`` keeps the model's own. ``max_shard_size``: bytes per
    safetensors file (``"5GB"``, ``"500MB"``, an int); more weights than that are sharded with an index.
    ``overwrite``: replace a folder that holds files (as a whole; never one that holds a Keras file).
    ``preset``: the preset folder whose tokenizer goes with a converted ``source`` (a model converted from a
    preset folder carries its own; a preset path as ``source`` is its own); a path that is no folder, and a
    tokenizer of another keras-hub family or whose ids pass the model's embedding, are refused. ``lora``: a
    keras-hub model's LoRA adapters (:mod:`attnzoo.keras.lora`) merged into the weights (``"merge"``, the
    default), or ``"keep"``: the base model's folder, and the adapters as a PEFT LoRA adapter folder in its
    ``adapter/`` (:mod:`attnzoo.keras.lora_peft`); a converted ``source`` must then be one
    :func:`~attnzoo.keras.convert_keras_model` converted with ``lora="keep"``.

    Refused with an :class:`~attnzoo.errors.ExportError` naming the class: a model of a keras-hub class
    with no exact transformers equivalent (a ViT without a class token, a classifier whose logits pass
    through a softmax, ...), a model that is not a keras-hub class's. Neither transformers nor Keras is
    imported.
    """
    target = _dtype(dtype)
    limit = parse_size(max_shard_size)
    if not isinstance(overwrite, bool):
        raise ConfigError(f"overwrite must be True or False, got {overwrite!r}")
    path = checked_folder(directory, overwrite, (source, preset))
    model, folder = _converted(source, preset, lora)
    form, hub = hub_source(model)
    architecture = form.architecture(hub)
    written = target or _model_dtype(hub.state)
    carried = getattr(model, "tokenizer", None)  # the model's own (converted from its preset) unless told
    with new_folder(path, overwrite=overwrite) as tmp:
        tokenizer = write_tokenizer(carried if carried is not None and preset is None else folder, tmp)
        hub = replace(hub, special=dict(tokenizer.special))
        config = {"architectures": [architecture], "model_type": form.model_type, **form.config(hub)}
        _check_tokenizer_fits(tokenizer, hub.keras_class, config.get("vocab_size"))
        config["dtype"] = config["torch_dtype"] = str(written).removeprefix("torch.")
        _write_json(tmp / "config.json", config)
        if hub.kind in ("causal_lm", "seq2seq_lm"):
            _write_json(tmp / "generation_config.json", _generation_config(config))
        write_shards(form.tensors(hub), tmp, max_shard_size=limit, dtype=written)
        if lora == "keep":
            from attnzoo.keras.lora_peft import ADAPTER_FOLDER, write_peft_adapter

            kept = model.keras_lora
            write_peft_adapter(kept, form.tensors(hub), tmp / ADAPTER_FOLDER, dtype=written, base=path, kind=hub.kind)
    for said in (tokenizer.missing, rebuilt_warning(form.model_type) if tokenizer.files else ""):
        if said:
            warnings.warn(said, AttnzooWarning, stacklevel=2)
    return path
