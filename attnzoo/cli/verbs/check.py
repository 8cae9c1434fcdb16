"""``attnzoo check``: run the conformance kit on registered variants."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from attnzoo.cli.common import FAILURE, UsageError, emit_json, terminal_width

HELP = "run the conformance kit on registered variants"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patterns", nargs="*", metavar="PATTERN", help="fnmatch patterns (default: every variant)")
    p.add_argument("--verbose", "-v", action="store_true", help="every reason in full (the table cuts long ones)")
    p.add_argument(
        "--in-process", action="store_true", help="check in this process (faster; a variant can then end the run)"
    )
    p.add_argument("--property", action="append", metavar="P", help="only this property (repeatable)")
    p.add_argument("--slow", action="store_true", help="include the slow tier (torch.compile)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import warnings

    from attnzoo.core.registry import list_models, model_info
    from attnzoo.testing import check_model, format_table

    names: list[str] = []
    for pattern in args.patterns or ["*"]:
        if any(c in pattern for c in "*?["):
            provider, _, glob = pattern.rpartition(":")  # 'my_plugin:*' = every model of that provider
            found = [f"{provider}:{n}" if provider else n for n in list_models(glob, provider=provider or None)]
        else:
            model_info(pattern)  # an exact name, provider-qualified or not; unknown: a clear error
            found = [pattern]
        if not found:
            raise UsageError(f"no model matches {pattern!r}; `attnzoo list` shows every name")
        names += [n for n in found if n not in names]
    reports = []
    for name in names:
        if args.in_process:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose; results say what matters
                report = check_model(name, only=args.property or None, slow=args.slow)
        else:
            report = _check_in_child(name, args.property, args.slow)
        reports.append(report)
        if not args.json and not args.quiet:
            table = format_table(
                [report], width=terminal_width(), variant_width=max(map(len, names)), whole=args.verbose
            )
            lines = table.split("\n")
            print("\n".join(lines[: len(lines) - 1] if not reports[:-1] else lines[1:-1]), flush=True)
    if args.json:
        emit_json([r.to_dict() for r in reports])
    else:
        failed = [r.variant for r in reports if not r.ok]
        summary = format_table(reports).rsplit("\n", 1)[1]
        print(f"{len(reports)} variant(s): {summary}" + (f"; failing: {', '.join(failed)}" if failed else ""))
    code = FAILURE if any(not r.ok for r in reports) else 0
    _end_if_threads_were_left(code)
    return code


def _end_if_threads_were_left(code: int) -> None:
    """A variant checked in this process (--in-process) may have left a thread running that is no daemon;
    the interpreter would wait for it forever at exit. The report names it; the command ends now."""
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _check_in_child(name: str, properties: list[str] | None, slow: bool) -> Any:
    """One variant checked in a process of its own (``attnzoo.testing.child``): a variant that ends the
    process or hangs fails the property it was in, and cannot end ``attnzoo check`` as a success."""
    import subprocess

    from attnzoo.core.plugins import child_environment
    from attnzoo.testing.kit import property_time_limit
    from attnzoo.testing.report import FAILED, Report, Result

    command = [sys.executable, "-m", "attnzoo.testing.child", name, *(["--slow"] if slow else [])]
    for prop in properties or []:
        command += ["--property", prop]
    # every property has its own alarm in the child; this bounds a child that blocks the alarm too
    limit = property_time_limit() * 20 + 120
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=limit, env=child_environment())
        lines, code = proc.stdout.splitlines(), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines, code = out.splitlines(), None
    for line in reversed(lines):
        if line.startswith("report "):
            data = json.loads(line[len("report ") :])
            return Report(data["variant"], data["convention"], [Result(**r) for r in data["results"]])
    running = next((line.split(" ", 1)[1] for line in reversed(lines) if line.startswith("start ")), "builds")
    how = f"ended its check process (exit status {code})" if code is not None else f"hung past {limit:g} s"
    return Report(name, "", [Result(name, running, FAILED, f"the variant {how} during {running}; no report")])
