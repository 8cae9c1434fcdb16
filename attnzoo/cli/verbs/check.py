"""``attnzoo check``: run the conformance kit on registered variants."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from attnzoo.cli.common import FAILURE, UsageError, Variants, emit_json, parse_variants, positive_int, terminal_width
from attnzoo.core import list_models, model_info
from attnzoo.io.text import printable

HELP = "run the conformance kit on registered variants or saved model folders"


# the average wall time of one variant's fast properties in a child process on a 2-core machine: every
# built-in variant took about 25 minutes (measured from outside, issue 40), 49 variants
SECONDS_PER_VARIANT = 30.0


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN|DIR|key=value|NAME:key=value|FILE.yaml",
        help="fnmatch patterns (default: every variant), or a folder written by attnzoo.save (checked with its "
        "own weights); key=value changes the card's example for every variant, NAME:key=value for that one; a "
        "YAML file maps variants to their settings",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="keep multi-line reasons on their own lines")
    p.add_argument(
        "--in-process", action="store_true", help="check in this process (faster; a variant can then end the run)"
    )
    p.add_argument("--jobs", "-j", type=positive_int, default=1, help="check N variants at once, each in its process")
    p.add_argument("--property", action="append", metavar="P", help="only this property (repeatable)")
    p.add_argument("--slow", action="store_true", help="include the slow tier (torch.compile)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.testing import format_table

    variants = parse_variants(args.patterns, everything=True)
    if args.in_process and args.jobs > 1:
        raise UsageError("--jobs runs variants in processes of their own; it cannot go with --in-process")
    _check_properties(args.property or [])
    checks = _resolve(variants)
    if not variants.names:
        minutes = max(1, round(len(checks) * SECONDS_PER_VARIANT / args.jobs / 60))
        print(
            f"checking all {len(checks)} variants (about {minutes} minute{'s' if minutes > 1 else ''} with --jobs "
            f"{args.jobs} on 2 cores); name patterns to check fewer (attnzoo check 'label*'), --jobs N to run N "
            f"at once",
            file=sys.stderr,
            flush=True,
        )
    width = max(map(len, checks))
    reports = []
    for report in _reports(checks, args):
        reports.append(report)
        if not args.json and not args.quiet:
            table = format_table([report], width=terminal_width(), variant_width=width, whole=args.verbose)
            lines = table.split("\n")
            print("\n".join(lines[: len(lines) - 1] if not reports[:-1] else lines[1:-1]), flush=True)
    if args.json:
        emit_json([r.to_dict() for r in reports])
    else:
        failed = [r.variant for r in reports if not r.ok]
        summary = format_table(reports).rsplit("\n", 1)[1]
        failing = printable(f"; failing: {', '.join(failed)}") if failed else ""  # folder names: shown, not sent
        print(f"{len(reports)} variant(s): {summary}{failing}")
    code = FAILURE if any(not r.ok for r in reports) else 0
    _end_if_threads_were_left(code)
    return code


def _check_properties(properties: list[str]) -> None:
    """Unknown ``--property`` names refused before any variant is checked (in a child, or in this process)."""
    from attnzoo.testing.kit import PROPERTIES

    unknown = [p for p in properties if p not in PROPERTIES]
    if unknown:
        raise UsageError(f"unknown property {unknown[0]!r}; the properties are: {', '.join(PROPERTIES)}")


def _end_if_threads_were_left(code: int) -> None:
    """A variant checked in this process (--in-process) may have left a thread running that is no daemon;
    the interpreter would wait for it forever at exit. The report names it; the command ends now."""
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _resolve(variants: Variants) -> dict[str, dict[str, Any] | None]:
    """Every variant to check -> the config to check it with (None: the card's example; settings go on
    top of the example)."""
    from fnmatch import fnmatchcase

    from attnzoo.core.spec import thaw
    from attnzoo.testing.kit import saved_folder

    checks: dict[str, dict[str, Any] | None] = {}
    for pattern in variants.names or ["*"]:
        if saved_folder(pattern) is not None:  # a saved model (a converted Keras model, a run): its own weights
            checks[pattern] = None
            continue
        if any(c in pattern for c in "*?["):
            provider, _, glob = pattern.rpartition(":")  # 'my_plugin:*' = every model of that provider
            found = [f"{provider}:{n}" if provider else n for n in list_models(glob, provider=provider or None)]
        else:
            model_info(pattern)  # an exact name, provider-qualified or not; unknown: a clear error
            found = [pattern]
        if not found:
            raise UsageError(f"no model matches {pattern!r}; `attnzoo list` shows every name")
        for name in found:
            settings = variants.config(name, given_as=pattern)
            if name not in checks:
                checks[name] = {**thaw(model_info(name).example), **settings} if settings else None
    unused = [key for key in variants.own if not any(fnmatchcase(name, key) for name in checks)]
    if unused and not variants.names:  # named variants were checked by parse_variants
        raise UsageError(f"{unused[0]}:... sets a key for {unused[0]!r}, which is no registered variant")
    return checks


def _reports(checks: dict[str, dict[str, Any] | None], args: argparse.Namespace) -> Iterator[Any]:
    """Each variant's report, in order; with ``--jobs N``, N child processes run at once."""
    if args.in_process:
        import warnings

        from attnzoo.testing import check_model

        for name, config in checks.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose; results say what matters
                yield check_model(name, config, only=args.property or None, slow=args.slow)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(_check_in_child, name, args.property, args.slow, config) for name, config in checks.items()
        ]
        for future in futures:
            yield future.result()


def _check_in_child(name: str, properties: list[str] | None, slow: bool, config: dict[str, Any] | None = None) -> Any:
    """One variant checked in a process of its own (``attnzoo.testing.child``): a variant that ends the
    process or hangs fails the property it was in, and cannot end ``attnzoo check`` as a success."""
    import subprocess

    from attnzoo.core.children import run_python
    from attnzoo.testing.kit import property_time_limit, saved_folder
    from attnzoo.testing.report import FAILED, Report, Result

    folder = saved_folder(name)  # the child runs in a folder of its own: it gets the folder's absolute path
    command = ["-m", "attnzoo.testing.child", str(folder.resolve()) if folder else name, *(["--slow"] if slow else [])]
    for prop in properties or []:
        command += ["--property", prop]
    if config is not None:
        command += ["--config", json.dumps(config)]
    # every property has its own alarm in the child; this bounds a child that blocks the alarm too
    limit = property_time_limit() * 20 + 120
    try:
        proc = run_python(command, timeout=limit)
        lines, code = proc.stdout.splitlines(), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines, code = out.splitlines(), None
    for line in reversed(lines):
        if line.startswith("report "):
            data = json.loads(line[len("report ") :])
            shown = name if folder else data["variant"]  # as the caller wrote it, not the absolute path
            return Report(shown, data["convention"], [Result(**{**r, "variant": shown}) for r in data["results"]])
    running = next((line.split(" ", 1)[1] for line in reversed(lines) if line.startswith("start ")), "builds")
    # the child's own clear error (attnzoo.testing.child writes it), else the last line it wrote to stderr
    said = next((_said(line[len("error ") :]) for line in reversed(lines) if line.startswith("error ")), "")
    if not said and code is not None:
        said = next((line.strip() for line in reversed(proc.stderr.splitlines()) if line.strip()), "")[:300]
    how = f"ended its check process (exit status {code})" if code is not None else f"hung past {limit:g} s"
    reason = f"the variant {how} during {running}; no report" + (f"; it said: {said}" if said else "")
    return Report(name, "", [Result(name, running, FAILED, reason)])


def _said(text: str) -> str:
    """The message of the child's ``error`` line (a JSON string), or the line as it is where the variant
    printed a line of its own that starts the same way."""
    try:
        message = json.loads(text)
    except ValueError:
        return text[:300]
    return message if isinstance(message, str) else text[:300]
