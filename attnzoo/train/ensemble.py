"""Join G2P models trained apart into one ``g2p_ensemble`` weights file:
``python -m attnzoo.train.ensemble MEMBER MEMBER ... -o OUT.safetensors``.

A member is a run folder or weights file written by ``attnzoo train``, or a pretrained name
(``g2p_seq2seq.cmudict``). The members must share the model configuration, the task settings (data,
split, decoding) and the vocabularies; the first one that differs is named in a ``ConfigError``. The
joined model is scored exactly as the trainer scores one: the task's test split with its beam search
and greedy, and the fixed subset the tests re-evaluate. The file holds the members' float16 weights
unchanged under ``members.N.``, and metadata naming each member (its seed and sha256) beside the
metrics, so that ``attnzoo.load``, ``attnzoo predict`` and ``attnzoo evaluate`` take it like any trained
model. An existing file is never replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import AttnzooError, ConfigError
from ..registry import resolve
from ..weights import encode_metadata, sha256_file, write_weights
from .tasks import build_task
from .trainer import card_metrics, float16_state

__all__ = ["join_weights"]

# what every member must agree on (keys of the weights' attnzoo metadata)
_SHARED = ("task", "task_config", "output", "vocab", "phonemes", "data", "dataset", "license", "check_subset")


def _member(source: str | Path):
    """Load one member; returns (model, its provenance: source as recorded, seed and sha256).

    A path is recorded by its last part only (the joining machine's layout is not provenance) with its
    file's sha256; a pretrained name as given, with the sha256 of the card tag that ``create`` loads."""
    import attnzoo

    path = Path(source)
    if path.exists():
        model = attnzoo.load(path)
        shown, digest = path.name, sha256_file(path / "model.safetensors" if path.is_dir() else path)
    else:
        model = attnzoo.create(str(source), pretrained=True)
        spec, tag = resolve(str(source))  # as create() resolved it, which has checked that the tag exists
        shown, digest = str(source), spec.weights[tag or str(spec.default_tag)].sha256
    if getattr(model, "name", None) != "g2p_seq2seq":
        raise ConfigError(f"{source}: an ensemble joins g2p_seq2seq models, this is {getattr(model, 'name', model)!r}")
    return model, {"source": shown, "seed": model.attnzoo_metadata.get("seed"), "sha256": digest}


def join_weights(sources: list[str | Path], output: str | Path, *, verbose: bool = True) -> dict[str, Any]:
    """Build the ensemble of ``sources`` (two or more), score it, write it to ``output``; returns a
    report with the metrics and the card entry (as ``attnzoo train`` does)."""
    import attnzoo

    if len(sources) < 2:
        raise ConfigError(f"an ensemble needs two or more members, got {len(sources)}")
    output = Path(output)
    if output.exists():
        raise ConfigError(f"{output} exists; name a new file (an ensemble never replaces one)")
    started = time.perf_counter()
    members, provenance = zip(*(_member(s) for s in sources), strict=True)
    metas = [m.attnzoo_metadata for m in members]
    configs = [dict(m.attnzoo_config["config"]) for m in members]
    for source, meta, config in zip(sources[1:], metas[1:], configs[1:], strict=True):
        if config != configs[0]:
            raise ConfigError(f"{source}: model configuration {config} differs from {sources[0]}'s {configs[0]}")
        for key in _SHARED:
            if meta.get(key) != metas[0].get(key):
                raise ConfigError(f"{source}: its {key} differs from {sources[0]}'s; members must share data and task")
    config = {**configs[0], "members": len(members)}
    ensemble = attnzoo.create("g2p_ensemble", **config).eval()
    for slot, member in zip(ensemble.members, members, strict=True):
        slot.load_state_dict(member.state_dict())
    task = build_task(metas[0]["task_config"], metadata=metas[0])
    subset_size = int(metas[0]["check_subset"])
    test, subset, metrics = card_metrics(task, ensemble, subset_size)
    shared = {key: metas[0][key] for key in _SHARED if key in metas[0]}
    described = [
        {**where, "test_word_accuracy": meta.get("metrics", {}).get("word_accuracy")}
        for where, meta in zip(provenance, metas, strict=True)
    ]
    extra = {**shared, "metrics": metrics, "members": described, "torch_version": torch.__version__}
    spec = attnzoo.model_info("g2p_ensemble")
    digest = write_weights(
        float16_state(ensemble), output, metadata=encode_metadata("g2p_ensemble", spec.factory_name, config, extra)
    )
    report = {
        "weights": str(output),
        "sha256": digest,
        "members": described,
        "test": test,
        "subset": {"size": subset_size, **subset},
        "time_s": time.perf_counter() - started,
        "card_entry": {
            "file": output.name,
            "sha256": digest,
            "num_params": sum(p.numel() for p in ensemble.parameters()),
            "file_size": output.stat().st_size,
            "torch_version": torch.__version__,
            "config": config,
            "metrics": metrics,
        },
    }
    if verbose:
        print(f"test: {test}\nsubset[{subset_size}]: {subset}\nweights: {output} sha256 {digest}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnzoo.train.ensemble", description=__doc__.split("\n\n")[0])
    parser.add_argument("members", nargs="+", help="run folders, weights files or pretrained names (two or more)")
    parser.add_argument("-o", "--output", required=True, help="the new weights file (never replaced)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        report = join_weights(args.members, args.output, verbose=not args.json)
    except AttnzooError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
