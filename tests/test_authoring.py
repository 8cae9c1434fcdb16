"""What docs/plugins.md and the README tell an author: ``pip install -e ./my-plugin`` installs the page's
skeleton editable, so an edit to its card shows at the next command with no reinstall; the README's
``attnzoo.register(name, config="card.yaml")`` registers a card of one's own at run time."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import attnzoo

from .conftest import ROOT

PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "my-plugin"
version = "0.1.0"

[project.entry-points.attnzoo]
my_plugin = "my_plugin"

[tool.hatch.build.targets.wheel]
packages = ["my_plugin"]
"""


def _skeleton(project):
    """docs/plugins.md's skeleton files, taken from the page."""
    page = (ROOT / "docs" / "plugins.md").read_text()
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", page, flags=re.S):
        first = block.splitlines()[0]
        if first.startswith("# my_plugin/"):
            path = project / first[2:].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block)
    (project / "pyproject.toml").write_text(PYPROJECT)


def _attnzoo(site, *args):
    """The attnzoo command in a fresh interpreter that sees ``site`` as a site directory (its .pth files
    processed, as an editable install needs)."""
    code = (
        f"import site, sys; site.addsitedir({str(site)!r}); "
        f"from attnzoo.cli import main; sys.exit(main({list(args)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    env["ATTNZOO_STRICT_PLUGINS"] = "1"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_the_plugin_guides_editable_install_picks_up_an_edit_without_reinstalling(tmp_path):
    pytest.importorskip("editables", reason="hatchling's editable installs need the editables package")
    project = tmp_path / "my-plugin"
    _skeleton(project)
    page = (ROOT / "docs" / "plugins.md").read_text()
    assert "pip install -e ./my-plugin" in page
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--target", str(tmp_path / "site"), "-e", str(project)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    before = _attnzoo(tmp_path / "site", "info", "my_plugin:query_pool", "--json")
    assert before.returncode == 0, before.stderr
    card = project / "my_plugin" / "query_pool.yaml"
    card.write_text(re.sub(r"(?m)^summary:.*$", "summary: edited in place", card.read_text()))
    after = _attnzoo(tmp_path / "site", "info", "my_plugin:query_pool", "--json")
    assert after.returncode == 0, after.stderr
    assert '"summary": "edited in place"' in after.stdout and "edited in place" not in before.stdout


def test_the_readmes_run_time_card_registration(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("attnzoo.register("))
    call = line.split("  #")[0]
    assert call == 'attnzoo.register("my_layer", config="my_layer.yaml")'
    card = (ROOT / "registry" / "dot.yaml").read_text().replace("name: dot", "name: my_layer")
    (tmp_path / "my_layer.yaml").write_text(card)
    monkeypatch.chdir(tmp_path)
    exec(call, {"attnzoo": attnzoo})
    assert attnzoo.model_info("my_layer").provider == "local"
    layer = attnzoo.create("my_layer")
    assert type(layer) is type(attnzoo.create("dot"))
    from attnzoo.testing import check_model

    assert check_model("my_layer", only=["shapes"]).ok


def test_the_readme_starts_with_its_two_commands_then_the_cpu_only_torch():
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```\n(.*?)```\n\n(.*?)\n\n", readme, flags=re.S)
    assert first is not None
    assert first.group(1).splitlines() == [
        "python -m pip install -e . && python examples/tour.py",
        'python -m pip install -e ".[test]" && python -m pytest',
    ]
    after = " ".join(first.group(2).split())
    # torch and torchvision together: timm pulls torchvision, whose default wheel would bring a CUDA torch back
    assert "python -m pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in after
    # each command's time on a 2-core machine, as a duration a reader can plan around
    assert "On a 2-core machine" in after
    assert re.search(r"the first command took \d+ s and the second \d+ min \d+ s", after), after
