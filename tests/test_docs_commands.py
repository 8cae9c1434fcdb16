"""The docs' commands run as written: every fenced block that README.md or a page of docs/ marks as
runnable is run, and must succeed.

The marker is an HTML comment on the line just above the block's opening fence (invisible on the rendered
page):

- ``<!-- runnable -->``: the block runs as it is, a shell block as one bash script (``set -e``) with
  ``attnzoo`` meaning this checkout's ``python -m attnzoo``, a ``python`` block with this interpreter;
- ``<!-- runnable: ARGS -->``: ARGS are appended to each ``attnzoo`` command of the block. It exists to
  shrink a measurement's sizes and repetitions (``--seq 32 --rounds 1``): the command's names, keys and
  flags are still the ones printed, only the sizes change;
- ``<!-- runnable slow -->`` (or ``<!-- runnable slow: ARGS -->``): a block that takes more than a few
  seconds; it runs only in the slow tier (``-m slow``), where every marked block runs.

A page's blocks run in order, in one scratch folder and one Python session, so a block may use the files
an earlier one wrote (deploy.md exports a file, then runs it) and the names an earlier Python block
defined (decoding.md defines its model, then trains it); a quick block must not need a slow one. What cannot run here
(a training run on your own files) stays unmarked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

MARKER = re.compile(r"^<!-- runnable(?P<slow> slow)?(?::\s*(?P<args>.*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks(page: Path) -> list[tuple[int, str, str, str, bool]]:
    """(line, language, code, appended arguments, slow) of every block of ``page`` marked runnable."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i])
        opening = FENCE.match(lines[i + 1]) if marker and i + 1 < len(lines) else None
        if marker and opening is None:
            raise AssertionError(f"{page.name}:{i + 1}: the runnable marker must sit just above a ``` fence")
        if marker and opening:
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            code = "\n".join(lines[i + 2 : end]) + "\n"
            blocks.append((i + 3, opening["lang"], code, marker["args"] or "", bool(marker["slow"])))
            i = end
        i += 1
    return blocks


MARKED = [page for page in PAGES if runnable_blocks(page)]


def _with_arguments(script: str, args: str) -> str:
    if not args:
        return script
    return "\n".join(line + " " + args if re.match(r"^attnzoo\s", line) else line for line in script.splitlines())


def _shell_environment(scratch: Path) -> dict[str, str]:
    """PATH leads to an ``attnzoo`` and a ``python`` that run this checkout with this interpreter."""
    bin_dir = scratch.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "attnzoo").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m attnzoo "$@"\n')
    (bin_dir / "attnzoo").chmod(0o755)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "MPLBACKEND": "Agg",
    }


# Runs a page's blocks in order in one interpreter: Python blocks share one namespace (a later block uses
# what an earlier one defined, as a reader running them in one session would), shell blocks run in bash.
_DRIVER = """
import json, subprocess, sys, traceback
namespace = {"__name__": "__main__"}
for line, lang, code in json.load(open(sys.argv[1])):
    if lang == "python":
        try:
            exec(compile(code, f"block at line {line}", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {line}", file=sys.stderr)
            sys.exit(1)
    elif subprocess.run(["bash", "-e", "-c", code]).returncode != 0:
        print(f"FAILED {line}", file=sys.stderr)
        sys.exit(1)
"""


def _run_blocks(page: Path, tmp_path: Path, *, slow: bool) -> None:
    import json

    scratch = tmp_path / "work"
    scratch.mkdir()
    blocks = [
        (line, lang, code if lang == "python" else _with_arguments(code, args))
        for line, lang, code, args, is_slow in runnable_blocks(page)
        if slow or not is_slow
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "driver.py").write_text(_DRIVER)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "blocks.json")],
        cwd=scratch,
        env=_shell_environment(scratch),
        capture_output=True,
        text=True,
        timeout=900,
    )
    failed = re.search(r"FAILED (\d+)", proc.stderr)
    where = f"{page.name}:{failed.group(1)}" if failed else page.name
    assert proc.returncode == 0, f"{where} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("page", MARKED, ids=lambda p: p.name)
def test_every_quick_runnable_block_of_the_page_succeeds(page, tmp_path):
    _run_blocks(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in MARKED if any(b[4] for b in runnable_blocks(p))], ids=lambda p: p.name)
def test_every_runnable_block_of_the_page_succeeds(page, tmp_path):
    _run_blocks(page, tmp_path, slow=True)


def test_the_marker_is_found_and_arguments_go_to_attnzoo_commands_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- runnable: --seq 8 -->\n```\ncat > a.yaml <<'END'\nx: 1\nEND\nattnzoo bench a.yaml\n```\n"
        "```python\nprint('not marked')\n```\n<!-- runnable slow -->\n```python\nprint(1)\n```\n"
    )
    blocks = runnable_blocks(page)
    assert [(b[0], b[1], b[3], b[4]) for b in blocks] == [(4, "", "--seq 8", False), (14, "python", "", True)]
    assert _with_arguments(blocks[0][2], blocks[0][3]).splitlines() == [
        "cat > a.yaml <<'END'",
        "x: 1",
        "END",
        "attnzoo bench a.yaml --seq 8",
    ]
    page.write_text("<!-- runnable -->\n\n```\nattnzoo list\n```\n")
    with pytest.raises(AssertionError, match="just above"):
        runnable_blocks(page)


def test_python_blocks_share_a_session_and_a_failing_block_is_named_by_its_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- runnable -->\n```python\nanswer = 42\n```\n<!-- runnable -->\n```python\nassert answer == 42\n"
        "open('seen', 'w').write(str(answer))\n```\n<!-- runnable -->\n```\ntest \"$(cat seen)\" = 42\nfalse\n```\n"
    )
    with pytest.raises(AssertionError, match=r"page.md:12 failed"):
        _run_blocks(page, tmp_path, slow=False)
    assert (tmp_path / "work" / "seen").read_text() == "42"
