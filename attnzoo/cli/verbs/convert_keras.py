"""``attnzoo convert-keras``: convert a whole Keras model, or one layer's weights, to attnzoo."""

from __future__ import annotations

import argparse
import json
from typing import Any

from attnzoo.cli.common import UsageError, config_overrides, positive_float, positive_int, say
from attnzoo.core import create
from attnzoo.errors import AttnzooError
from attnzoo.io.folders import save

HELP = "convert a whole Keras model, or one layer's weights, to attnzoo"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        nargs="?",
        help="a .keras, a legacy .h5, a config.json or a keras-hub save_to_preset folder (whole model); "
        "a .weights.h5 with --model",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list every Keras layer, keras.ops operation, keras-hub class and tf.keras 2 op that converts, with its "
        "route and notes (with --json: as JSON), and convert nothing",
    )
    p.add_argument(
        "--model", help="one attention layer's weights into this attnzoo layer (keras_dot, keras_mha, lwan, ...)"
    )
    p.add_argument("--layer", help="with --model: the Keras layer (group name or layer name) when the file has several")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="with --model: config of the attnzoo layer")
    p.add_argument("--weights", help="the weights file of a config.json (default: the .weights.h5 beside it)")
    p.add_argument("--check", action="store_true", help="run Keras beside the result on padded inputs first")
    p.add_argument(
        "--reference",
        metavar="FILE.npz",
        help="with --check: compare with these predictions instead of running Keras (in/0, ... and out/0, ...)",
    )
    p.add_argument(
        "--length",
        type=positive_int,
        metavar="N",
        help="with --check: the inputs' length on open axes (default: the shortest of 8, 16, 32, ... the model runs)",
    )
    p.add_argument(
        "--tolerance",
        type=positive_float,
        metavar="X",
        help="with --check: the largest difference allowed, relative to each output's scale: X * max(1, |y|max) "
        "(default 1e-5)",
    )
    p.add_argument(
        "--logits", action="store_true", help="drop each output's final sigmoid / softmax (train with *WithLogitsLoss)"
    )
    p.add_argument(
        "--compute-dtype",
        choices=["float32", "policy"],
        default="float32",
        help="policy: a mixed_float16 / mixed_bfloat16 file computes each layer in its compute dtype, as Keras does",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default=None,
        help="the dtype the model holds its weights in and computes in (default: the file's; a bfloat16 Keras model "
        "stays bfloat16)",
    )
    p.add_argument(
        "--emit-py",
        metavar="FILE.py",
        help="also write the model as a readable PyTorch module whose load_state_dict takes -o's model.safetensors",
    )
    _hub_arguments(p)
    p.add_argument("--json", action="store_true", help="the conversion report as JSON")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar (one is drawn on stderr only where it is a terminal)"
    )
    p.add_argument("-o", "--output", help="a folder (whole model) or a .safetensors file (--model); required")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")


def _hub_arguments(p: argparse.ArgumentParser) -> None:
    """The Hugging Face door's options and a keras-hub model's LoRA adapters'."""
    p.add_argument(
        "--to",
        choices=["attnzoo", "transformers"],
        default="attnzoo",
        help="the folder's format: attnzoo's (config.yaml + model.safetensors, attnzoo.load reads it) or a Hugging "
        "Face folder transformers' Auto classes load (a keras-hub model's)",
    )
    p.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        help="with --to transformers: bytes per safetensors file, such as 5GB (the default) or 500MB",
    )
    p.add_argument(
        "--lora",
        choices=["merge", "keep", "none"],
        default="merge",
        help="a keras-hub model's LoRA adapters (--lora-weights, or the *.lora.h5 in its preset folder): merged into "
        "the weights (default), kept as a PEFT adapter folder DIR/adapter (with --to transformers), or left out",
    )
    p.add_argument("--lora-weights", metavar="FILE.lora.h5", help="the adapters backbone.save_lora_weights wrote")


def run(args: argparse.Namespace) -> int:
    from attnzoo.io.progress import silenced

    with silenced(args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    if args.file is None or args.output is None:
        raise UsageError("convert-keras FILE -o OUTPUT: give the Keras file and -o, or --list to see what converts")
    if args.model is None:
        return _convert_keras_model(args)
    from pathlib import Path

    from attnzoo.io.weights import encode_metadata, write_weights
    from attnzoo.keras import load_keras_weights

    policy = args.compute_dtype != "float32" or args.dtype is not None
    hub = args.to != "attnzoo" or args.max_shard_size or args.lora != "merge" or args.lora_weights
    checking = args.check or args.length or args.reference or args.tolerance is not None
    if checking or args.weights or args.logits or args.emit_py or policy or hub:
        raise UsageError(
            "--check, --length, --reference, --tolerance, --weights, --logits, --compute-dtype, --dtype, --emit-py, "
            "--to, --max-shard-size, --lora and --lora-weights belong to a whole-model conversion (without --model)"
        )
    overrides = config_overrides(args.overrides)
    model = create(args.model, **overrides)
    load_keras_weights(model, args.file, layer=args.layer)
    info = model.attnzoo_config  # sizes left lazy in the config are set again by the weights on load
    metadata = encode_metadata(
        info["name"],
        info["factory"],
        info["config"],
        {"source": f"Keras weights {Path(args.file).name}" + (f", layer {args.layer}" if args.layer else "")},
    )
    digest = write_weights(model.state_dict(), args.output, metadata=metadata, overwrite=args.overwrite)
    say(f"wrote {args.output} ({info['name']}, sha256 {digest}); attnzoo.load({str(args.output)!r}) rebuilds it")
    return 0


def _list(args: argparse.Namespace) -> int:
    """``convert-keras --list [--json]``: what converts, from the converter's own registries."""
    from attnzoo.keras.listing import as_records, conversions, listing_text

    if args.file is not None or args.output is not None or args.model is not None:
        raise UsageError("--list converts nothing: give it no FILE, -o or --model")
    entries = conversions()
    if args.json:
        print(json.dumps(as_records(entries), indent=2))
    else:
        print(listing_text(entries))
    return 0


def _check_whole_model_arguments(args: argparse.Namespace) -> None:
    """The usage errors of a whole-model conversion, found before anything is converted."""
    from pathlib import Path

    if args.layer or args.overrides:
        raise UsageError(
            "--layer and key=value go with --model NAME (one layer's weights); a whole model needs neither"
        )
    output = Path(args.output)
    if output.suffix == ".safetensors":
        raise UsageError(
            f"-o {output}: a whole Keras model is saved as a folder (config.yaml + model.safetensors); "
            f"give a folder, or --model NAME to convert one layer's weights into a .safetensors file"
        )
    if output.exists() and not output.is_dir():
        raise UsageError(f"-o {output}: exists and is not a folder; a converted model is saved as a folder")
    if args.length is not None and not args.check:
        raise UsageError("--length N sets the length of --check's inputs; add --check")
    if args.reference is not None and not args.check:
        raise UsageError("--reference FILE.npz is what --check compares with; add --check")
    if args.tolerance is not None and not args.check:
        raise UsageError("--tolerance X is --check's; add --check")
    if args.compute_dtype == "policy" and (args.check or args.emit_py):
        raise UsageError(
            "--compute-dtype policy goes without --check and --emit-py (the check's tolerance and the written "
            "module are float32's): check the float32 conversion, then convert again with --compute-dtype policy"
        )
    if args.to == "transformers" and (args.emit_py or args.compute_dtype == "policy"):
        raise UsageError(
            "--emit-py and --compute-dtype policy belong to --to attnzoo; a Hugging Face folder computes in its "
            "--dtype with transformers' own modules"
        )
    if args.lora == "keep" and args.to != "transformers":
        raise UsageError(
            "--lora keep writes the adapters as a PEFT folder beside a Hugging Face folder: add --to transformers "
            "(an attnzoo folder holds the adapters merged, the default, or the base model, --lora none)"
        )
    if args.to != "transformers" and args.max_shard_size:
        raise UsageError("--max-shard-size shapes the Hugging Face folder: add --to transformers")
    if args.to == "transformers":
        _check_hugging_face_output(args)
    if args.compute_dtype == "policy" and args.dtype is not None:
        raise UsageError(
            "--dtype and --compute-dtype policy both set the dtype the layers are held in; pass one (--compute-dtype "
            "policy holds each layer in its mixed policy's compute dtype)"
        )


def _check_hugging_face_output(args: argparse.Namespace) -> None:
    """``--to transformers``: -o and --max-shard-size checked before anything is converted; -o never a folder
    that holds the files the model is read from (FILE, --weights, --lora-weights), which --overwrite replaces."""
    from attnzoo.errors import ConfigError
    from attnzoo.io.shards import parse_size
    from attnzoo.keras.transformers_folder import checked_folder

    if args.max_shard_size is not None:
        try:
            parse_size(args.max_shard_size, "--max-shard-size")
        except ConfigError as e:
            raise UsageError(str(e)) from None
    checked_folder(args.output, args.overwrite, (args.file, args.weights, args.lora_weights))


def _convert_keras_model(args: argparse.Namespace) -> int:
    """``attnzoo convert-keras model.keras -o runs/model``: the whole model, saved as a loadable folder (or,
    with ``--to transformers``, as a Hugging Face folder)."""
    from pathlib import Path

    from attnzoo.keras import convert_keras_model

    _check_whole_model_arguments(args)
    output = Path(args.output)
    source = _source_path(args)
    # converted once: with --check, as Keras computes it (checked), then --logits drops the final squashing
    model = convert_keras_model(
        args.file,
        weights=args.weights,
        logits=args.logits and not args.check,
        compute_dtype=args.compute_dtype,
        dtype=args.dtype,
        lora=args.lora,
        lora_weights=args.lora_weights,
    )
    check = None
    if args.check:
        from attnzoo.keras.check import check_against_keras

        tolerance = 1e-5 if args.tolerance is None else args.tolerance
        check = check_against_keras(args.file, model, length=args.length, reference=args.reference, tolerance=tolerance)
        if not check.ok:
            raise AttnzooError(f"{args.file}: {_check_failure(check)}; nothing was written")
    if args.logits and args.check:  # checked against Keras as Keras computes it; saved without the squashing
        from attnzoo.keras.convert import logits_model

        model = logits_model(model)
    # the source first: a model whose names or values it refuses to write leaves no folder behind
    emitted = model.to_source() if source is not None else None
    if args.to == "transformers":
        _write_transformers(args, model, output)
    else:
        save(model, output, overwrite=args.overwrite)
    if source is not None and emitted is not None:
        source.write_text(emitted, encoding="utf-8")  # names may hold any letter; Python reads source as UTF-8
    report = model.keras_report
    if args.json:
        payload: dict[str, Any] = {"output": str(output), **report.to_dict()}
        if check is not None:
            payload["check"] = check.to_dict()
        print(json.dumps(payload, indent=2))
        return 0
    print(report.to_text())
    if check is not None and not check.ran:
        print(f"not checked: {check.reason}")
    elif check is not None:
        against = f"the predictions of {args.reference}" if check.against == "reference" else "Keras"
        inputs = "its inputs" if check.against == "reference" else _checked_inputs(model, check.length)
        print(f"checked against {against} on {inputs}: {_check_summary(check)}")
    if args.to == "transformers":
        print(f"wrote {output}; transformers' Auto classes load it: {_how_to_load(model, output)}")
        if args.lora == "keep":
            adapter = output / "adapter"
            print(f"wrote {adapter}: PeftModel.from_pretrained(model, {str(adapter)!r}) adds its LoRA adapters")
    else:
        print(f"wrote {output}; attnzoo.load({str(output)!r}) rebuilds it without Keras")
    if emitted is not None:
        name = emitted.split("\nclass ", 1)[1].split("(", 1)[0]
        print(f"wrote {source}: class {name}, which loads {output / 'model.safetensors'} as it is")
    return 0


def _write_transformers(args: argparse.Namespace, model: Any, output: Any) -> None:
    """``--to transformers``: the converted model as a Hugging Face folder (the preset's tokenizer with it)."""
    from pathlib import Path

    from attnzoo.keras.transformers_folder import DEFAULT_SHARD_SIZE, to_transformers

    preset = Path(args.file) if Path(args.file).is_dir() else None
    size = args.max_shard_size or DEFAULT_SHARD_SIZE
    lora = "keep" if args.lora == "keep" else "merge"  # "none": the model holds the base weights
    to_transformers(
        model, output, dtype=args.dtype, max_shard_size=size, overwrite=args.overwrite, preset=preset, lora=lora
    )


def _how_to_load(model: Any, output: Any) -> str:
    """The line of Python that loads the written folder: its Auto class, and the keywords it needs."""
    from attnzoo.keras.transformers_folder import hub_source

    form, hub = hub_source(model)
    autos = {
        "causal_lm": "AutoModelForCausalLM",
        "seq2seq_lm": "AutoModelForSeq2SeqLM",
        "task": "AutoModelForSequenceClassification",
    }
    auto = autos.get(hub.kind, "AutoModel")
    keywords = "".join(f", {key}={value!r}" for key, value in form.load_with.get(hub.kind, {}).items())
    return f"{auto}.from_pretrained({str(output)!r}{keywords})"


def _source_path(args: argparse.Namespace) -> Any:
    """Where ``--emit-py`` writes, checked before anything is converted: a .py file, never replaced unasked."""
    from pathlib import Path

    if not args.emit_py:
        return None
    path = Path(args.emit_py)
    if path.suffix != ".py":
        raise UsageError(f"--emit-py {path}: the module is written as a .py file")
    if path.is_dir() or (path.exists() and not args.overwrite):
        raise UsageError(f"--emit-py {path}: exists; pass --overwrite to replace it")
    if not path.parent.is_dir():
        raise UsageError(f"--emit-py {path}: the folder {path.parent} does not exist")
    return path


def _checked_inputs(model: Any, length: int) -> str:
    """What ``--check`` fed both models, in the words of the inputs: images (an input of rank 4 or more of
    floats) by their shape, sequences by their length (keras/check.py's ``padded_inputs`` makes them)."""
    from attnzoo.keras.check import input_shape

    images = [
        spec
        for spec in model.inputs_spec
        if len(spec["shape"]) >= 4 and str(spec["dtype"]) not in ("string", "bool") and "int" not in str(spec["dtype"])
    ]
    if not images:
        return f"padded inputs of length {length}"
    shapes = ", ".join(str(input_shape(spec, length=length)) for spec in images)
    padded = any(spec["shape"][1] is None for spec in images)
    return f"images of shape {shapes}" + (" (rows of zeros as padding in some of them)" if padded else "")


def _check_summary(check: Any) -> str:
    """What ``--check`` found, per output: the difference and the scale it is judged at, where it compared,
    whether float64 was needed, and how Keras ran."""
    shown = ", ".join(f"{d.value:.2g} (|y| up to {d.scale:.3g})" for d in check.differences)
    text = f"max difference per output {shown}, tolerance {check.tolerance:g} x max(1, |y|)"
    if check.kept:
        text += "; compared at the kept positions (the padding's outputs are not Keras's to define)"
    if check.float64:
        far = max(d.float64 or 0.0 for d in check.differences)
        text += f"; past it by float32 rounding only: the port in float64 is {far:.2g} from Keras"
    return text + (f"; {check.note}" if check.note else "")


def _check_failure(check: Any) -> str:
    """Why ``--check`` refuses: the output, its difference against what is allowed, the float64 port's
    distance where it ran, and the first layer that differs."""
    against = "the predictions of --reference" if check.against == "reference" else "Keras"
    index, worst = next((k, d) for k, d in enumerate(check.differences) if not d.within(check.tolerance))
    text = (
        f"the converted model differs from {against} by {worst.value:.3g} at output {index} "
        f"(allowed {worst.allowed(check.tolerance):.3g}: tolerance {check.tolerance:g} x max(1, |y| up to "
        f"{worst.scale:.3g}))"
    )
    if worst.float64 is not None:
        text += f", and the port in float64 by {worst.float64:.3g} (not float32 rounding)"
    if check.first_divergence:
        layer, difference = check.first_divergence
        text += f"; first layer that differs: {layer} (max difference {difference:.3g})"
    if check.note:
        text += f"; {check.note}"
    return text
