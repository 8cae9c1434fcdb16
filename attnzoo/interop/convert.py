"""Reference checkpoints of the ICD-coding literature, converted into attnzoo safetensors files.

    attnzoo convert-checkpoint model_best.pth --from laat --model bilstm_laat -o laat.safetensors
    attnzoo.interop.convert.convert_checkpoint("model.pth", "caml", "conv_caml", output="caml.safetensors")

``--from`` names the reference (and how it saves); ``--model`` the attnzoo model it converts into:

* ``caml``: jamesmullenbach/caml-mimic ``ConvAttnPool`` (``embed``, ``conv``, ``U``, ``final``), saved as
  ``torch.save(model.state_dict())``; into ``conv_caml`` (whole) or ``caml`` (head).
* ``laat``: aehrc/LAAT ``RNN`` + ``AttentionLayer`` (``embedding.embeddings``, ``rnn``,
  ``attention.{first,second,third}_linears.<level>``, ``projection_linears``), saved by
  ``Trainer.save_checkpoint`` as ``{'epoch', 'state_dict', 'optimiser', ...}``; into ``bilstm_laat`` or
  ``laat``, and with two levels ``bilstm_joint_laat`` or ``joint_laat``.
* ``plm-icd``: MiuLab/PLM-ICD ``RobertaForMultilabelClassification`` (``roberta.*``, ``first_linear``,
  ``second_linear``, ``third_linear``), saved by ``save_pretrained`` (.bin or .safetensors); into ``laat``
  (the head: the RoBERTa encoder stays with transformers; ``split_size=`` for laat-split).
* ``medical-coding``: JoakimEdin/medical-coding-reproducibility ``LAAT``, ``CAML`` (``embed``, ``rnn`` /
  ``conv``, ``attention.*``), saved as ``{'model', 'optimizer', ...}``; into ``bilstm_laat``, ``laat``,
  ``conv_caml`` or ``caml``.

Files are read with ``torch.load(weights_only=True)``, the restricted unpickler that builds tensors and
plain containers only (never arbitrary objects), or with safetensors. Sizes are read off the tensors'
shapes; ``key=value`` pairs fix the rest (``split_size`` for PLM-ICD's laat-split). Keys the reference
creates but never uses in its forward pass are dropped and named in the result (LAAT's
``attention.linear``, ``linears`` and last ``projection_linears``; CAML's ``U.bias`` and its description
module). Anything else that does not fit is refused with a listing of the file's keys and shapes
against the model's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnzoo.core import create
from attnzoo.errors import ConfigError, WeightsError

__all__ = ["convert_checkpoint", "read_checkpoint", "Converted", "SOURCES", "TARGETS"]

SOURCES = {
    "caml": "jamesmullenbach/caml-mimic (learn/models.py ConvAttnPool)",
    "laat": "aehrc/LAAT (src/models/rnn.py, src/models/attentions/attention_layer.py)",
    "plm-icd": "MiuLab/PLM-ICD (src/modeling_roberta.py RobertaForMultilabelClassification)",
    "medical-coding": "JoakimEdin/medical-coding-reproducibility (src/models: LAAT, CAML, PLMICD)",
}

TARGETS = {
    "caml": ("conv_caml", "caml"),
    "laat": ("bilstm_laat", "laat", "bilstm_joint_laat", "joint_laat"),
    "plm-icd": ("laat",),
    "medical-coding": ("bilstm_laat", "laat", "conv_caml", "caml"),
}


@dataclass
class Converted:
    """A reference state dict in attnzoo's names, the config its shapes imply, and what was left out."""

    tensors: dict[str, Any]
    config: dict[str, Any]
    dropped: dict[str, str] = field(default_factory=dict)  # reference key -> why it is not needed


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The tensors of a reference checkpoint (a state dict, or one wrapped in a checkpoint dict)."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"checkpoint not found: looked for {path.resolve()}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return _checked_tensors(dict(load_file(str(path))), path)
        except (SafetensorError, OSError, ValueError) as e:  # truncated, or not safetensors at all
            raise WeightsError(
                f"{path.name}: not a readable safetensors file ({' '.join(str(e).split())[:200]})"
            ) from None
    import pickle

    import torch

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as e:
        reason = " ".join(str(e).split())[:300]
        raise WeightsError(
            f"{path.name}: cannot read it with torch.load(weights_only=True) ({reason}); attnzoo "
            f"never runs a full unpickler on a file. Re-save it as a plain state dict, or as "
            f"safetensors, in the environment that made it"
        ) from None
    return _unwrap(loaded, path)


def _unwrap(loaded: Any, path: Path) -> dict[str, Any]:
    import torch

    if isinstance(loaded, Mapping):
        for key in ("state_dict", "model", "model_state_dict"):  # LAAT, medical-coding, common trainers
            inner = loaded.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                loaded = inner
                break
    if not isinstance(loaded, Mapping) or not loaded or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        shown = sorted(loaded)[:10] if isinstance(loaded, Mapping) else type(loaded).__name__
        raise WeightsError(
            f"{path.name}: expected a state dict (name -> tensor), or a checkpoint holding one under "
            f"'state_dict' or 'model'; found {shown}"
        )
    bad_keys = [k for k in loaded if not isinstance(k, str)]
    if bad_keys:
        raise WeightsError(
            f"{path.name}: a state dict is keyed by parameter names; this one has keys {bad_keys[:4]!r}, which are not"
        )
    state = dict(loaded)
    if all(k.startswith("module.") for k in state):  # saved from DataParallel / DistributedDataParallel
        state = {k[len("module.") :]: v for k, v in state.items()}
    return _checked_tensors(state, path)


def _checked_tensors(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """Weights that are numbers: a checkpoint holding NaN or inf would convert into a model whose every
    output is non-finite, so it is refused, naming the tensors. Checked first: that every tensor fits in
    memory once its elements are its own (see :func:`_check_expansion`)."""
    import torch

    _check_expansion(state, path)
    broken = [k for k, v in state.items() if v.is_floating_point() and v.numel() and not bool(torch.isfinite(v).all())]
    if broken:
        raise WeightsError(
            f"{path.name}: {len(broken)} tensor(s) hold NaN or inf ({', '.join(broken[:5])}); a model made "
            f"from them predicts nothing; nothing was converted (a training run that diverged?)"
        )
    return state


def _check_expansion(state: dict[str, Any], path: Path) -> None:
    """A pickled tensor may be a view whose strides repeat its elements (stride 0): a 4-byte storage that
    claims 10^6 x 10^6 values. Converting it reads and copies every value, so the values that do not exist
    yet are counted against this machine's memory before anything is allocated."""
    from attnzoo.core.memory import available_bytes

    repeated = {}
    for key, tensor in state.items():
        span = tensor.numel() * tensor.element_size()
        if span > tensor.untyped_storage().nbytes():  # more values than its storage holds: some repeated
            repeated[key] = span
    if not repeated:
        return
    need, available = sum(repeated.values()), available_bytes()
    if available is None or need <= available // 2:
        return
    key = max(repeated, key=repeated.__getitem__)
    raise WeightsError(
        f"{path.name}: tensor {key!r} claims {list(state[key].shape)} values ({repeated[key] / 2**30:,.1f} GiB) "
        f"from a storage of {state[key].untyped_storage().nbytes():,} bytes (its strides repeat values); "
        f"converting it needs more memory than the {available / 2**30:,.1f} GiB available. A trained "
        f"checkpoint holds each weight's values; nothing was converted"
    )


# -- the reference layouts ---------------------------------------------------------------------------------------
def _take(state: dict, old: str, new: str, out: dict) -> None:
    if old in state:
        out[new] = state.pop(old)


def _lstm(state: dict, prefix: str, out: dict, target_prefix: str) -> dict[str, int]:
    """Move a bidirectional one-layer LSTM's tensors; its sizes."""
    weight = state.get(f"{prefix}weight_hh_l0")
    if weight is None:
        raise WeightsError(f"no recurrent layer found (expected {prefix}weight_hh_l0)")
    if weight.dim() != 2:
        raise WeightsError(f"{prefix}weight_hh_l0 has shape {list(weight.shape)}; an LSTM's is [4 * hidden, hidden]")
    hidden = weight.shape[1]
    if weight.shape[0] != 4 * hidden:
        raise WeightsError(
            f"{prefix}weight_hh_l0 has shape {list(weight.shape)}: a GRU, not an LSTM; attnzoo's "
            f"bilstm models hold an LSTM"
        )
    if f"{prefix}weight_hh_l1" in state:
        raise WeightsError(
            f"{prefix} has more than one layer; attnzoo's label-attention classifiers hold a one-layer "
            f"BiLSTM (convert the head alone with --model laat)"
        )
    if f"{prefix}weight_hh_l0_reverse" not in state:
        raise WeightsError(f"{prefix} is not bidirectional; attnzoo's bilstm models are")
    for key in [k for k in state if k.startswith(prefix)]:
        out[target_prefix + key[len(prefix) :]] = state.pop(key)
    return {"hidden": hidden}


def _embedding(state: dict, key: str, out: dict, target: str) -> dict[str, int]:
    weight = state.pop(key, None)
    if weight is None:
        raise WeightsError(f"no embedding found (expected {key})")
    if weight.dim() != 2:
        raise WeightsError(f"{key} has shape {list(weight.shape)}; an embedding table is [vocabulary, width]")
    out[target] = weight
    return {"vocab_size": weight.shape[0], "embed_dim": weight.shape[1]}


def _drop(state: dict, pattern: str, why: str, dropped: dict) -> None:
    for key in [k for k in state if re.fullmatch(pattern, k)]:
        state.pop(key)
        dropped[key] = why


def _caml(state: dict, whole: bool, keys: Mapping[str, str]) -> Converted:
    """CAML's layout; ``keys`` names the reference's embedding, conv, U weight, U bias and final layer."""
    out: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    config: dict[str, Any] = {}
    prefix = "head." if whole else ""
    _take(state, keys["U"], f"{prefix}U.weight", out)
    _take(state, keys["final"] + ".weight", f"{prefix}final.weight", out)
    _take(state, keys["final"] + ".bias", f"{prefix}final.bias", out)
    _drop(
        state, re.escape(keys["U_bias"]), "the formula never uses U's bias (softmax(U H) with U.weight only)", dropped
    )
    _drop(
        state,
        r"(desc_embedding|label_conv|label_fc1)\..*",
        "CAML's description regulariser, used in training only",
        dropped,
    )
    if f"{prefix}final.weight" not in out:
        raise WeightsError(f"no CAML output layer found (expected {keys['final']}.weight)")
    config["num_labels"] = out[f"{prefix}final.weight"].shape[0]
    if whole:
        config.update(_embedding(state, keys["embed"], out, "encoder.embedding.weight"))
        conv = state.pop("conv.weight", None)
        if conv is None:
            raise WeightsError("no convolution found (expected conv.weight)")
        out["encoder.conv.weight"] = conv
        _take(state, "conv.bias", "encoder.conv.bias", out)
        config.update(hidden=conv.shape[0], kernel_size=conv.shape[2])
    else:
        config["hidden_size"] = out["U.weight"].shape[1]
        _drop(state, r"(embed|conv)\..*", "the encoder: convert into conv_caml to keep it", dropped)
    return Converted(out, config, dropped)


def _laat_levels(state: dict, keys: Callable[[int], tuple[str, str, str]]) -> int:
    return sum(1 for level in range(8) if keys(level)[0] in state)


def _laat(
    state: dict,
    whole: bool,
    joint: bool,
    *,
    embed_key: str,
    rnn_prefix: str,
    level_keys: Callable[[int], tuple[str, str, str]],
    projection: Callable[[int], str] | None,
) -> Converted:
    out: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    config: dict[str, Any] = {}
    levels = _laat_levels(state, level_keys)
    if levels == 0:
        raise WeightsError(f"no label attention found (expected {level_keys(0)[0]})")
    if joint and levels != 2:
        raise WeightsError(f"JointLAAT has two label levels; this checkpoint has {levels}")
    if not joint and levels != 1:
        raise WeightsError(
            f"this checkpoint has {levels} label levels: convert it into bilstm_joint_laat or joint_laat"
        )
    prefix = "head." if whole else ""
    names = ("parent.", "child.") if joint else ("",)
    for level, name in enumerate(names):
        first, second, third = level_keys(level)
        _take(state, first, f"{prefix}{name}first_linear.weight", out)
        _take(state, second, f"{prefix}{name}second_linear.weight", out)
        _take(state, third + ".weight", f"{prefix}{name}third_linear.weight", out)
        _take(state, third + ".bias", f"{prefix}{name}third_linear.bias", out)
    first = out[f"{prefix}{names[0]}first_linear.weight"]
    config.update(attention_size=first.shape[0], num_labels=out[f"{prefix}{names[-1]}second_linear.weight"].shape[0])
    if joint:
        config["num_parent_labels"] = out[f"{prefix}parent.second_linear.weight"].shape[0]
    if projection is not None:
        if joint:
            _take(state, projection(0), f"{prefix}projection.weight", out)
            if f"{prefix}projection.weight" not in out:
                raise WeightsError(f"no level projection found (expected {projection(0)})")
            config["projection_size"] = out[f"{prefix}projection.weight"].shape[0]
        _drop(state, re.escape(projection(levels - 1)), "the last level's projection feeds no further level", dropped)
    _drop(state, r"attention\.linear\.weight", "created by the reference's AttentionLayer, never used", dropped)
    _drop(
        state,
        r"linears\.\d+\.(weight|bias)",
        "unused in label-attention mode (the attention's third linears give the logits)",
        dropped,
    )
    if whole:
        config.update(_embedding(state, embed_key, out, "encoder.embedding.weight"))
        config.update(_lstm(state, rnn_prefix, out, "encoder.lstm."))
    else:
        config["hidden_size"] = first.shape[1]
        _drop(
            state,
            rf"({re.escape(embed_key)}|{re.escape(rnn_prefix)}.*)",
            f"the encoder: convert into bilstm_{'joint_' if joint else ''}laat to keep it",
            dropped,
        )
    return Converted(out, config, dropped)


def _plm_icd_head(state: dict, keys: tuple[str, str, str], encoder: str) -> Converted:
    out: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    first, second, third = keys
    _take(state, first, "first_linear.weight", out)
    _take(state, second, "second_linear.weight", out)
    _take(state, third + ".weight", "third_linear.weight", out)
    _take(state, third + ".bias", "third_linear.bias", out)
    if "first_linear.weight" not in out:
        raise WeightsError(f"no PLM-ICD head found (expected {first})")
    _drop(
        state,
        rf"{re.escape(encoder)}\..*",
        "the RoBERTa encoder: it stays with transformers, whose hidden states the converted laat head takes",
        dropped,
    )
    config = {
        "num_labels": out["second_linear.weight"].shape[0],
        "hidden_size": out["first_linear.weight"].shape[1],
        "attention_size": out["first_linear.weight"].shape[0],
    }
    return Converted(out, config, dropped)


def _map(source: str, target: str, state: dict) -> Converted:
    whole = target in ("conv_caml", "bilstm_laat", "bilstm_joint_laat")
    joint = target in ("bilstm_joint_laat", "joint_laat")
    if source == "caml":
        return _caml(state, whole, {"embed": "embed.weight", "U": "U.weight", "U_bias": "U.bias", "final": "final"})
    if source == "laat":
        return _laat(
            state,
            whole,
            joint,
            embed_key="embedding.embeddings.weight",
            rnn_prefix="rnn.",
            level_keys=lambda i: (
                f"attention.first_linears.{i}.weight",
                f"attention.second_linears.{i}.weight",
                f"attention.third_linears.{i}",
            ),
            projection=lambda i: f"projection_linears.{i}.weight",
        )
    if source == "plm-icd":
        return _plm_icd_head(state, ("first_linear.weight", "second_linear.weight", "third_linear"), "roberta")
    # medical-coding: its models share attention.first_linear / second_linear / third_linear names
    if any(k.startswith("roberta.") for k in state):
        if target != "laat":
            raise WeightsError(
                "this is a PLM-ICD checkpoint of medical-coding-reproducibility: convert its head with --model laat"
            )
        return _plm_icd_head(
            state,
            ("attention.first_linear.weight", "attention.second_linear.weight", "attention.third_linear"),
            "roberta",
        )
    if "conv.weight" in state:
        if target not in ("conv_caml", "caml"):
            raise WeightsError(
                f"this is a CAML checkpoint of medical-coding-reproducibility: convert it with "
                f"--model conv_caml or caml, not {target}"
            )
        return _caml(
            state,
            whole,
            {
                "embed": "embed.weight",
                "U": "attention.first_linear.weight",
                "U_bias": "attention.first_linear.bias",
                "final": "attention.second_linear",
            },
        )
    if target not in ("bilstm_laat", "laat"):
        raise WeightsError(
            f"this is a LAAT checkpoint of medical-coding-reproducibility: convert it with --model "
            f"bilstm_laat or laat, not {target}"
        )
    return _laat(
        state,
        whole,
        False,
        embed_key="embed.weight",
        rnn_prefix="rnn.",
        level_keys=lambda i: (
            ("attention.first_linear.weight", "attention.second_linear.weight", "attention.third_linear")
            if i == 0
            else ("-", "-", "-")
        ),
        projection=None,
    )


def _listing(tensors: Mapping[str, Any], limit: int = 12) -> str:
    items = sorted(tensors.items())
    shown = ", ".join(f"{k} {list(v.shape)}" for k, v in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def convert_checkpoint(
    path: str | Path,
    source: str,
    model: str,
    *,
    config: Mapping[str, Any] | None = None,
    output: str | Path | None = None,
    overwrite: bool = False,
) -> tuple[Any, Converted]:
    """Convert a reference checkpoint into the attnzoo model ``model``; write it to ``output`` if given.

    Returns the loaded model (eval mode) and the :class:`Converted` record (its ``dropped`` keys say what
    the file held that the model does not need, and why). ``config`` adds or overrides what the shapes
    imply (``split_size`` for PLM-ICD's laat-split). The written file carries its config and its
    provenance (reference, file, digest) in its metadata, so ``attnzoo.load(output)`` rebuilds it.
    """
    from attnzoo.io.weights import encode_metadata, write_weights

    if source not in SOURCES:
        raise ConfigError(f"--from must be one of {', '.join(SOURCES)}, got {source!r}")
    if model not in TARGETS[source]:
        raise ConfigError(f"a {source} checkpoint converts into {', '.join(TARGETS[source])}, not {model!r}")
    state = read_checkpoint(path)
    original = dict(state)
    try:
        converted = _map(source, model, state)
    except (IndexError, TypeError, RuntimeError) as e:  # a tensor of a rank the layout never has
        odd = [f"{k} {list(v.shape)}" for k, v in original.items() if v.dim() < 1][:4]
        raise WeightsError(
            f"{Path(path).name}: a tensor does not have the shape the {source} layout gives it ({e})"
            + (f"; 0-d tensors: {', '.join(odd)}" if odd else "")
            + f"; file: {_listing(original)}"
        ) from None
    if state:
        raise WeightsError(
            f"{Path(path).name}: keys the {source} layout does not explain, so nothing was converted: "
            f"{_listing(state)}; file: {_listing(original)}"
        )
    merged = {**converted.config, **dict(config or {})}
    module = create(model, config=merged).eval()
    expected = module.state_dict()
    missing = sorted(set(expected) - set(converted.tensors))
    unexpected = sorted(set(converted.tensors) - set(expected))
    misshapen = [
        k for k in expected if k in converted.tensors and tuple(expected[k].shape) != tuple(converted.tensors[k].shape)
    ]
    if missing or unexpected or misshapen:
        raise WeightsError(
            f"{Path(path).name} does not fit {model} with {merged}: "
            + "; ".join(
                p
                for p in (
                    f"missing {missing[:6]}" if missing else "",
                    f"not in the model {unexpected[:6]}" if unexpected else "",
                    "shapes "
                    + ", ".join(
                        f"{k} file {list(converted.tensors[k].shape)} vs model {list(expected[k].shape)}"
                        for k in misshapen[:6]
                    )
                    if misshapen
                    else "",
                )
                if p
            )
            + f". The file (as converted): {_listing(converted.tensors)}; the model: {_listing(expected)}"
        )
    module.load_state_dict({k: v.to(expected[k].dtype) for k, v in converted.tensors.items()})
    converted.config = merged
    if output is not None:
        info = module.attnzoo_config
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        provenance = {
            "reference": SOURCES[source],
            "format": source,
            "file": Path(path).name,
            "sha256": digest,
            "dropped": sorted(converted.dropped),
        }
        metadata = encode_metadata(info["name"], info["factory"], info["config"], {"source": provenance})
        write_weights(module.state_dict(), output, metadata=metadata, overwrite=overwrite)
    return module, converted
