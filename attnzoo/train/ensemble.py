"""Join G2P models trained apart into one ``g2p_ensemble`` weights file:
``python -m attnzoo.train.ensemble MEMBER MEMBER ... -o OUT.safetensors``.

A member is a run folder or weights file written by ``attnzoo train``, or a pretrained name
(``g2p_seq2seq.cmudict``); an ensemble (``g2p_ensemble.cmudict`` or a joined file) brings all its
members, so an ensemble grows by joining it with new runs. A member may be in only once: a second file
with the same sha256, or with the same weights in float16 (a run folder and the card file beside it), is
refused. The members must share the model configuration, the task settings (data, split, decoding) and
the vocabularies; the first one that differs is named in a ``ConfigError``. The joined model is scored
exactly as the trainer scores one: the task's test split with its beam search and greedy, and the fixed subset the
tests re-evaluate. The file holds the members' float16 weights unchanged under ``members.N.``, and
metadata naming each member (its source, seed and sha256) beside the metrics, so that ``attnzoo.load``,
``attnzoo predict`` and ``attnzoo evaluate`` take it like any trained model. An existing file is never
replaced. ``--choose-on-val`` keeps the best of the ensembles of the first 2, 3, ... members on the
validation split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnzoo.core import create, load, model_info
from attnzoo.core.record import RunRecord
from attnzoo.core.registry import resolve
from attnzoo.errors import AttnzooError, ConfigError
from attnzoo.io.weights import WEIGHTS_FILE, encode_metadata, sha256_file, write_weights
from attnzoo.train.publish import card_metrics, float16_state
from attnzoo.train.tasks import task_of

__all__ = ["best_prefix", "join_weights"]

# what every member must agree on (fields of the weights' RunRecord)
_SHARED = ("task", "task_config", "output", "vocab", "phonemes", "data", "dataset", "license", "check_subset")


def _members(source: str | Path) -> list[tuple[Any, RunRecord, dict[str, Any], dict[str, Any]]]:
    """Load the member or members behind one source; returns (model, its metadata, its model configuration,
    its provenance) for each, where provenance is what the joined file records: source, seed, sha256 and
    test word accuracy.

    A path is recorded by its last part only (the joining machine's layout is not provenance) with its
    file's sha256; a pretrained name as given, with the sha256 of the card tag that ``create`` loads. An
    ensemble (a file or name) contributes its members with the provenance it recorded for them, so that
    an ensemble grows by joining it with new runs: its float16 weights pass through unchanged."""

    path = Path(source)
    if path.exists():
        model = load(path)
        shown, digest = path.name, sha256_file(path / WEIGHTS_FILE if path.is_dir() else path)
    else:
        model = create(str(source), pretrained=True)
        spec, tag = resolve(str(source))  # as create() resolved it, which has checked that the tag exists
        shown, digest = str(source), spec.weights[tag or str(spec.default_tag)].sha256
    meta = RunRecord.of(model, source)
    config = {k: v for k, v in model.attnzoo_config["config"].items() if k != "members"}
    if not meta.trained or meta.task_config.get("name") is None or meta.check_subset is None:
        raise ConfigError(
            f"{source}: its weights carry no record of the task they were trained on; an ensemble joins runs of "
            f"attnzoo train (run folders, their weights files, pretrained names)"
        )
    if model.attnzoo_config["name"] == "g2p_ensemble":
        recorded = meta.members or []
        if len(recorded) != len(model.members):
            raise ConfigError(f"{source}: an ensemble without a record of its {len(model.members)} members")
        for record in recorded:
            if not isinstance(record.get("source"), str) or not isinstance(record.get("sha256"), str):
                raise ConfigError(f"{source}: a recorded member has no source or sha256 ({dict(record)!r:.80})")
        return [(member, meta, config, dict(record)) for member, record in zip(model.members, recorded, strict=True)]
    if model.attnzoo_config["name"] != "g2p_seq2seq":
        raise ConfigError(f"{source}: an ensemble joins g2p_seq2seq models, this is {model.attnzoo_config['name']!r}")
    accuracy = meta.metrics.get("word_accuracy")
    return [
        (
            model,
            meta,
            config,
            {"source": shown, "seed": meta.seed, "sha256": digest, "test_word_accuracy": accuracy},
        )
    ]


def _same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state dicts hold the same tensors under the same names."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # equal: same shape and values


def _ensemble(config: dict[str, Any], members: list[Any]):
    """A g2p_ensemble of ``config`` holding ``members``' weights, in eval mode."""

    model = create("g2p_ensemble", **{**config, "members": len(members)}).eval()
    for slot, member in zip(model.members, members, strict=True):
        slot.load_state_dict(member.state_dict())
    return model


def _prefix_scores(
    task, config: dict[str, Any], members: list[Any], smallest: int, verbose: bool
) -> list[dict[str, Any]]:
    """The validation scores of the ensembles of the first k members, k = smallest .. N, decoded as the
    test split is (the task's beam search): one row ``{"members": k, metric: value, ...}`` per k."""
    rows = []
    for k in range(smallest, len(members) + 1):
        scores = task.evaluate(_ensemble(config, members[:k]), task.splits["val"])
        rows.append({"members": k, **{key: round(value, 4) for key, value in scores.items()}})
        if verbose:
            print(f"validation, first {k} members: {rows[-1]}")
    return rows


def best_prefix(rows: list[dict[str, Any]], metric: str) -> int:
    """The member count of the row with the highest ``metric`` (higher is better); on a tie the fewest."""
    return max(rows, key=lambda row: (row[metric], -row["members"]))["members"]


def join_weights(
    sources: list[str | Path],
    output: str | Path,
    *,
    choose_on_val: bool = False,
    choose_from: int = 2,
    verbose: bool = True,
) -> dict[str, Any]:
    """Build the ensemble of the members behind ``sources`` (two or more in all), score it, write it to
    ``output``; returns a report with the metrics and the card entry (as ``attnzoo train`` does).

    ``choose_on_val``: score the ensembles of the first 2, 3, ... N members (in the order given) on the
    validation split and keep the best of them (on a tie, the fewest members); the table is in the
    report and the file's metadata under ``validation``. The test split is scored once, for the choice.
    ``choose_from``: the smallest ensemble scored (say, the size of an ensemble already chosen that way and
    now grown, whose smaller prefixes were scored before)."""
    output = Path(output)
    _check_output(output)  # before any member is loaded or scored: the file is written only at the end
    started = time.perf_counter()
    loaded = [(str(source), *member) for source in sources for member in _members(source)]
    sources_, members, metas, configs, described = (list(column) for column in zip(*loaded, strict=True))
    if len(members) < 2:
        raise ConfigError(f"an ensemble needs two or more members, got {len(members)}")
    if choose_on_val and not 2 <= choose_from <= len(members):
        raise ConfigError(
            f"the smallest ensemble to choose from has {choose_from} members; it must have 2 to {len(members)}, "
            f"the number of members the sources bring"
        )
    _check_members(sources_, members, metas, configs, described)
    task = task_of(metas[0], source=sources_[0])
    validation = None
    if choose_on_val:
        validation = _prefix_scores(task, configs[0], members, choose_from, verbose)
        keep = best_prefix(validation, task.main_metric)
        members, described = members[:keep], described[:keep]
    report = _write_ensemble(task, members, metas[0], configs[0], described, validation, output)
    report["time_s"] = time.perf_counter() - started
    if verbose:
        subset_size = report["subset"]["size"]
        subset = {k: v for k, v in report["subset"].items() if k != "size"}
        print(f"test: {report['test']}\nsubset[{subset_size}]: {subset}\nweights: {output} sha256 {report['sha256']}")
    return report


def _check_output(output: Path) -> None:
    if output.exists():
        raise ConfigError(f"{output} exists; name a new file (an ensemble never replaces one)")
    if output.suffix != ".safetensors":
        raise ConfigError(f"{output.name}: an ensemble is written as a .safetensors file; name it NAME.safetensors")
    if not output.parent.is_dir():
        raise ConfigError(f"cannot write {output}: the folder {output.parent} does not exist")


def _check_members(sources: list[str], members: list, metas: list, configs: list, described: list) -> None:
    """Every member finite, each in once (by provenance, or by weights compared in float16 as the file
    stores them: a run folder's float32 weights and the card file beside it are one member), all of one
    configuration, data and task."""
    for source, member, where in zip(sources, members, described, strict=True):
        broken = next((name for name, t in member.state_dict().items() if not torch.isfinite(t).all()), None)
        if broken is not None:
            raise ConfigError(
                f"{source}: member {where['source']} has NaN or infinite weights ({broken}); leave it out"
            )
    stored = [float16_state(member) for member in members]
    for n, (source, meta, config, where) in enumerate(zip(sources, metas, configs, described, strict=True)):
        if any(where["sha256"] == earlier["sha256"] for earlier in described[:n]):
            raise ConfigError(f"{source}: member {where['source']} (sha256 {where['sha256'][:12]}...) is in twice")
        for earlier, earlier_state in zip(described[:n], stored[:n], strict=True):
            if _same_state(stored[n], earlier_state):
                raise ConfigError(
                    f"{source}: member {where['source']} holds the same weights as {earlier['source']} "
                    "(equal in float16, as the file stores them), so it is in twice; give each member once"
                )
        if config != configs[0]:
            raise ConfigError(f"{source}: model configuration {config} differs from {sources[0]}'s {configs[0]}")
        for key in _SHARED:
            if getattr(meta, key) != getattr(metas[0], key):
                raise ConfigError(f"{source}: its {key} differs from {sources[0]}'s; members must share data and task")


def _write_ensemble(
    task: Any, members: list, meta: Any, member_config: dict, described: list, validation: Any, output: Path
) -> dict[str, Any]:
    """Score the ensemble of ``members`` on the test split and its checked subset, write it (float16) with
    its provenance, and return the report with its card entry."""

    config = {**member_config, "members": len(members)}
    ensemble = _ensemble(config, members)
    subset_size = int(meta.check_subset)
    test, subset, metrics = card_metrics(task, ensemble, subset_size)
    scored = len(task.subset(subset_size))  # the size really scored: the test split may be smaller
    shared = {key: getattr(meta, key) for key in _SHARED if getattr(meta, key) is not None}
    extra = {**shared, "metrics": metrics, "members": described, "torch_version": torch.__version__}
    if validation is not None:
        extra["validation"] = validation
    spec = model_info("g2p_ensemble")
    digest = write_weights(
        float16_state(ensemble), output, metadata=encode_metadata("g2p_ensemble", spec.factory_name, config, extra)
    )
    return {
        "weights": str(output),
        "sha256": digest,
        "members": described,
        "validation": validation,
        "test": test,
        "subset": {"size": scored, **subset},
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnzoo.train.ensemble", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "members",
        nargs="+",
        help="run folders, weights files, pretrained names or ensembles (two or more members in all)",
    )
    parser.add_argument("-o", "--output", required=True, help="the new weights file (never replaced)")
    parser.add_argument(
        "--choose-on-val",
        action="store_true",
        help="keep the best ensemble of the first 2, 3, ... members on the validation split (ties: fewer)",
    )
    parser.add_argument(
        "--choose-from",
        type=int,
        default=2,
        metavar="K",
        help="with --choose-on-val: the smallest ensemble scored, the first K members (default 2)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.choose_from != 2 and not args.choose_on_val:
        parser.error("--choose-from only applies with --choose-on-val")
    try:
        report = join_weights(
            args.members,
            args.output,
            choose_on_val=args.choose_on_val,
            choose_from=args.choose_from,
            verbose=not args.json,
        )
    except AttnzooError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
