"""``dir(attnzoo)`` lists every public name the docs call (``attnzoo.predict(``, ``attnzoo.tokenizer(`` ...),
including those reached on first use, without importing torch; each of them is really there."""

from __future__ import annotations

import re

from .conftest import ROOT, run_python

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def documented_calls() -> set[str]:
    """Every ``NAME`` of an ``attnzoo.NAME(`` call in the README and the docs."""
    found: set[str] = set()
    for page in PAGES:
        found |= set(re.findall(r"\battnzoo\.([A-Za-z_]\w*)\(", page.read_text(encoding="utf-8")))
    return found


def test_the_docs_call_the_names_this_test_is_about():
    assert {"create", "load", "save", "predict", "tokenizer", "export", "register"} <= documented_calls()


def test_dir_lists_every_documented_name_without_importing_torch():
    names = sorted(documented_calls())
    proc = run_python(
        "import sys, attnzoo\n"
        "listed = dir(attnzoo)\n"
        "print('torch' in sys.modules)\n"
        f"print(sorted(set({names!r}) - set(listed)))\n"
        "print(sorted(set(attnzoo.__all__) - set(listed)))\n"
        f"print(all(callable(getattr(attnzoo, n)) for n in {names!r}))\n"
    )
    assert proc.returncode == 0, proc.stderr
    torch_imported, missing, unlisted, callable_ = proc.stdout.split("\n")[:4]
    assert torch_imported == "False", "dir(attnzoo) imported torch"
    assert missing == "[]", f"the docs call attnzoo.{missing} but dir(attnzoo) omits them: add them to __all__"
    assert unlisted == "[]"
    assert callable_ == "True"  # and each is there: getattr reaches it (predict and tokenizer import on use)
