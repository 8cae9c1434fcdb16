"""Plugins as users meet them: real distributions, pip-installed, exercised in fresh interpreters.

Every plugin here is a real project (pyproject with an ``attnzoo`` entry point) installed with pip into
a target folder that the subprocesses put on PYTHONPATH, so importlib.metadata finds its
distribution and entry points exactly as it would in site-packages. The example plugin of
examples/attnzoo-plugin-example is installed the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import ROOT

EXAMPLE = ROOT / "examples" / "attnzoo-plugin-example"

# name -> (entry point name, plugin module source)
BROKEN_PLUGINS = {
    "broken-import": (
        "broken",
        """
        raise ImportError("this plugin needs a library that is not installed")
    """,
    ),
    "hook-raises": (
        "hookraises",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            register("half_done", factory="collections:OrderedDict")
            raise RuntimeError("the second registration crashed")
    """,
    ),
    "takes-builtin": (
        "takesbuiltin",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            register("labelwise", factory="collections:OrderedDict", summary="an impostor")
            register("own_model", factory="collections:OrderedDict", summary="fine")
    """,
    ),
    "bad-card": (
        "badcard",
        """
        from pathlib import Path
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            card = Path(__file__).with_name("broken_card.yaml")
            card.write_text("name: broken_card\\nconfig: {a: 1}\\n")  # no factory
            register("broken_card", config=str(card))
            register("good_after_bad", factory="collections:OrderedDict")
    """,
    ),
    "twin-a": (
        "twina",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            register("twin", factory="collections:OrderedDict", summary="from a")
    """,
    ),
    "twin-b": (
        "twinb",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            register("twin", factory="collections:OrderedDict", summary="from b")
    """,
    ),
    "place-raises": (
        "placeraises",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_place_model(model, device, dtype):
            raise RuntimeError("placement exploded")
    """,
    ),
}


def _project(root: Path, dist: str, entry: str, source: str) -> Path:
    module = dist.replace("-", "_") + "_plugin"
    project = root / dist
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(textwrap.dedent(source))
    (project / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{dist}"
        version = "1.2.3"

        [project.entry-points.attnzoo]
        {entry} = "{module}"

        [tool.hatch.build.targets.wheel]
        packages = ["{module}"]
    """)
    )
    return project


def _pip_install(projects: list[Path], target: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
        *map(str, projects),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def sites(tmp_path_factory):
    """Two installs: the example plugin alone, and the example with every broken plugin."""
    root = tmp_path_factory.mktemp("plugins")
    healthy, crowded = root / "healthy", root / "crowded"
    _pip_install([EXAMPLE], healthy)
    projects = [_project(root / "src", dist, entry, src) for dist, (entry, src) in BROKEN_PLUGINS.items()]
    _pip_install([EXAMPLE, *projects], crowded)
    return {"healthy": healthy, "crowded": crowded}


def run(site: Path | None, code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    full["PYTHONPATH"] = os.pathsep.join([str(site)] if site else [])
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, cwd=ROOT, timeout=600
    )


def cli(site: Path | None, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run(site, f"import sys; from attnzoo.cli import main; sys.exit(main({list(args)!r}))", **env)


def plugins_json(site, **env) -> dict:
    proc = cli(site, "plugins", "--json", **env)
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)}


# -- the example plugin, as a user installs it -------------------------------------------------------------
def test_example_plugin_lists_with_its_provider(sites):
    proc = cli(sites["healthy"], "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["gated_pool"]["provider"] == "example"
    assert rows["labelwise"]["provider"] == "attnzoo"
    info = plugins_json(sites["healthy"])["example"]
    assert info["distribution"] == "attnzoo-plugin-example" and info["status"] == "loaded"
    assert info["models"] == ["example:gated_pool"] and info["version"] == "0.1.0"


@pytest.mark.slow
def test_example_plugin_creates_and_its_device_reaches_its_hook(sites):
    proc = run(
        sites["healthy"],
        """
        import torch, attnzoo
        m = attnzoo.create("gated_pool", hidden_size=6, device="example:0", dtype="float64")
        x = torch.randn(2, 5, 6, dtype=torch.float64)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5]).bool()
        pooled, a = m(x, mask, return_attention=True)
        ref = (torch.softmax(m.w(torch.tanh(m.V(x)) * torch.sigmoid(m.U(x))).squeeze(-1)
               .masked_fill(~mask, float("-inf")), -1).unsqueeze(1) @ x).squeeze(1)
        print(m.placed_on, pooled.dtype, torch.allclose(pooled, ref), bool((a[0, 3:] == 0).all()))
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["example:0", "torch.float64", "True", "True"]
    proc = cli(sites["healthy"], "create", "gated_pool", "hidden_size=4", "--device", "example:1")
    assert proc.returncode == 0 and "dummy forward" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_an_unknown_device_that_nobody_places_is_a_config_error(sites):
    proc = run(
        sites["healthy"],
        """
        import attnzoo
        try:
            attnzoo.create("attn_pool", hidden_size=4, device="npu:0")
        except attnzoo.ConfigError as e:
            print("ConfigError", e)
    """,
    )
    assert proc.stdout.startswith("ConfigError") and "npu:0" in proc.stdout, proc.stderr


def test_listing_with_plugins_does_not_import_torch(sites):
    proc = run(
        sites["crowded"],
        """
        import sys, warnings
        warnings.simplefilter("ignore")
        import attnzoo
        attnzoo.list_models(); attnzoo.list_plugins(); attnzoo.model_info("gated_pool")
        print("torch" in sys.modules)
    """,
    )
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.slow
def test_the_example_plugin_adds_a_verb_through_the_commands_hook(sites):
    proc = cli(sites["healthy"], "example-devices", "--count", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"example:0": "example:0", "example:1": "example:1"}
    listed = cli(sites["healthy"], "--help").stdout
    assert "example-devices" in listed and "place gated_pool on example:N devices" in listed
    assert listed.index("convert-keras") < listed.index("example-devices")  # built-in verbs first
    # --no-plugins drops the plugin's verb too, and leaves the environment as it found it
    proc = cli(sites["healthy"], "--no-plugins", "example-devices")
    assert proc.returncode == 2 and "invalid choice: 'example-devices'" in proc.stderr
    proc = run(
        sites["healthy"],
        """
        import os
        from attnzoo.cli import main
        code = main(["list", "--no-plugins", "--json"])
        print(code, os.environ.get("ATTNZOO_DISABLE_PLUGIN_AUTOLOAD"))
        import attnzoo
        print("gated_pool" in attnzoo.list_models(provider="example"))
    """,
    )
    assert proc.stdout.split()[-3:] == ["0", "None", "True"], proc.stderr


VERB_PLUGINS = {
    "verbs-ok": (
        "verbsok",
        """
        from attnzoo import hookimpl

        def hello(args):
            print("hello", args.who)
            return 0

        @hookimpl
        def attnzoo_register_commands(register):
            register("list", hello, help="an impostor")  # a built-in verb: skipped, with a warning
            register("hello", hello, help="greet", arguments=lambda p: p.add_argument("who"))
    """,
    ),
    "verbs-raise": (
        "verbsraise",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_commands(register):
            register("half", lambda args: 0, help="registered before the crash")
            raise RuntimeError("the verb hook crashed")
    """,
    ),
}


@pytest.fixture(scope="session")
def verb_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("verbs")
    projects = [_project(root / "src", dist, entry, src) for dist, (entry, src) in VERB_PLUGINS.items()]
    _pip_install(projects, root / "site")
    return root / "site"


@pytest.mark.slow
def test_a_plugin_verb_cannot_take_a_built_in_one_and_a_raising_hook_is_recorded(verb_site):
    proc = cli(verb_site, "hello", "world")
    assert proc.returncode == 0 and proc.stdout.strip() == "hello world", proc.stderr
    assert "registers the command 'list', which 'attnzoo' provides; the first is kept" in proc.stderr
    assert "attnzoo_register_commands raised RuntimeError: the verb hook crashed" in proc.stderr
    proc = cli(verb_site, "list", "dot", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["name"] == "dot"
    # what the raising hook registered before it raised is still there; the plugin is marked
    assert cli(verb_site, "half").returncode == 0
    info = plugins_json(verb_site)["verbsraise"]
    assert any("the verb hook crashed" in problem for problem in info["problems"])


# -- broken plugins never break attnzoo ---------------------------------------------------------------------
def test_broken_plugins_are_reported_and_everything_else_works(sites):
    site = sites["crowded"]
    proc = cli(site, "list", "--json")
    assert proc.returncode == 0, proc.stderr
    names = {r["name"]: r["provider"] for r in json.loads(proc.stdout)}
    assert names["labelwise"] == "attnzoo"  # built-in names are reserved
    assert names["takesbuiltin:labelwise"] == "takesbuiltin"  # the loser stays reachable
    assert names["own_model"] == "takesbuiltin"  # a plugin loses only the colliding entry
    assert names["twin"] == "twina" and names["twinb:twin"] == "twinb"
    assert names["good_after_bad"] == "badcard" and "broken_card" not in names
    assert names["gated_pool"] == "example"
    assert "half_done" not in names  # a hook that raised loses what it registered

    infos = plugins_json(site)
    assert infos["broken"]["status"] == "failed" and "ImportError" in infos["broken"]["error"]
    assert infos["broken"]["distribution"] == "broken-import" and infos["broken"]["version"] == "1.2.3"
    assert infos["hookraises"]["status"] == "failed" and "second registration crashed" in infos["hookraises"]["error"]
    assert "built-in name" in infos["takesbuiltin"]["error"] and infos["takesbuiltin"]["status"] == "loaded"
    assert "broken_card.yaml" in infos["badcard"]["error"] and "factory" in infos["badcard"]["error"]
    assert "twina" in infos["twinb"]["error"] and not infos["twina"]["problems"]
    assert infos["example"]["status"] == "loaded" and not infos["example"]["problems"]


@pytest.mark.slow
def test_each_problem_is_reported_once_naming_its_plugin(sites):
    proc = run(
        sites["crowded"],
        """
        import attnzoo
        attnzoo.list_models(); attnzoo.list_models("t*"); attnzoo.model_info("labelwise")
        attnzoo.create("gated_pool", hidden_size=4, device="cpu")
        attnzoo.create("gated_pool", hidden_size=4, device="cpu")
        print("OK")
    """,
    )
    assert proc.stdout.strip() == "OK", proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "attnzoo: plugin" in line]
    for plugin in ("broken", "hookraises", "takesbuiltin", "badcard", "twinb", "placeraises"):
        assert sum(f"plugin '{plugin}'" in line for line in lines) == 1, (plugin, lines)


@pytest.mark.slow
def test_builtins_and_healthy_plugins_still_create(sites):
    proc = run(
        sites["crowded"],
        """
        import warnings; warnings.simplefilter("ignore")
        import attnzoo
        print(type(attnzoo.create("labelwise", num_labels=3)).__name__)
        print(type(attnzoo.create("gated_pool", hidden_size=4, device="cpu")).__name__)
        print(attnzoo.create("twin", a=1))
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["LabelwiseAttention", "GatedAttentionPooling"]


def test_unknown_name_of_a_failed_plugin_says_which_plugin_and_why(sites):
    proc = run(
        sites["crowded"],
        """
        import warnings; warnings.simplefilter("ignore")
        import attnzoo
        for name in ("half_done", "broken:anything", "nothing_at_all"):
            try:
                attnzoo.model_info(name)
            except attnzoo.UnknownModelError as e:
                print(e)
    """,
    )
    lines = proc.stdout.strip().splitlines()
    assert "plugin 'hookraises'" in lines[0] and "second registration crashed" in lines[0], lines
    assert "plugin 'broken'" in lines[1] and "ImportError" in lines[1], lines
    assert "broken" in lines[2] and "may provide it" in lines[2], lines


def test_strict_mode_raises_at_the_first_problem(sites):
    proc = run(
        sites["crowded"],
        """
        import attnzoo
        try:
            attnzoo.list_models()
        except attnzoo.PluginError as e:
            print("PluginError", e)
    """,
        ATTNZOO_STRICT_PLUGINS="1",
    )
    assert proc.stdout.startswith("PluginError plugin 'broken'"), proc.stdout + proc.stderr
    proc = cli(sites["crowded"], "list", ATTNZOO_STRICT_PLUGINS="1")
    assert proc.returncode == 1 and "plugin 'broken'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_strict_mode_covers_hook_calls_after_loading(sites):
    proc = run(
        sites["crowded"],
        """
        import attnzoo
        try:
            attnzoo.create("attn_pool", hidden_size=4, device="cpu")
        except attnzoo.PluginError as e:
            print("PluginError", e)
    """,
        ATTNZOO_STRICT_PLUGINS="1",
        ATTNZOO_PLUGINS="placeraises",
    )
    assert proc.stdout.startswith("PluginError plugin 'placeraises'"), proc.stdout + proc.stderr


# -- switches ------------------------------------------------------------------------------------------------
def test_allow_list_by_entry_point_or_distribution(sites):
    for allowed in ("example", "attnzoo-plugin-example"):
        infos = plugins_json(sites["crowded"], ATTNZOO_PLUGINS=allowed)
        assert infos["example"]["status"] == "loaded"
        assert {i["status"] for n, i in infos.items() if n not in ("example", "attnzoo")} == {"blocked"}


def test_block_list_and_autoload_switches(sites):
    infos = plugins_json(sites["healthy"], ATTNZOO_BLOCK_PLUGINS="example")
    assert infos["example"]["status"] == "blocked"
    proc = cli(sites["healthy"], "list", "gated*", "--json", ATTNZOO_BLOCK_PLUGINS="example")
    assert json.loads(proc.stdout) == []
    for env in ({"ATTNZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}, {}):
        args = ("plugins", "--json") if env else ("plugins", "--json", "--no-plugins")
        proc = cli(sites["healthy"], *args, **env)
        assert [p["name"] for p in json.loads(proc.stdout)] == ["attnzoo"]


def test_switches_are_read_at_call_time(sites):
    proc = run(
        sites["healthy"],
        """
        import os, attnzoo
        before = "gated_pool" in attnzoo.list_models()
        os.environ["ATTNZOO_BLOCK_PLUGINS"] = "example"
        after = "gated_pool" in attnzoo.list_models()
        print(before, after)
    """,
    )
    assert proc.stdout.split() == ["True", "False"], proc.stderr


@pytest.mark.slow
def test_a_plugin_may_override_on_purpose(tmp_path):
    project = _project(
        tmp_path / "src",
        "overrider",
        "overrider",
        """
        from attnzoo import hookimpl

        @hookimpl
        def attnzoo_register_models(register):
            register("labelwise", factory="collections:OrderedDict", summary="mine", override=True)
    """,
    )
    _pip_install([project], tmp_path / "site")
    proc = run(
        tmp_path / "site",
        """
        import attnzoo
        print(attnzoo.model_info("labelwise").provider, attnzoo.model_info("attnzoo:labelwise").provider)
        print(attnzoo.list_plugins()[1].problems)
    """,
    )
    assert proc.stdout.split("\n")[:2] == ["overrider attnzoo", "[]"], proc.stderr


# -- the conformance kit on third-party variants -----------------------------------------------------------
@pytest.mark.slow
def test_the_example_plugin_passes_the_kit_from_the_cli_and_from_its_own_pytest(sites):
    proc = cli(sites["healthy"], "check", "example:gated_pool", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (report,) = json.loads(proc.stdout)
    assert report["variant"] == "example:gated_pool" and report["convention"] == "sequence_to_vector"
    # the pattern properties (causal, window, incremental, cross) have nothing to check on a pooling layer
    skipped = {r["property"] for r in report["results"] if r["status"] == "skipped"}
    assert skipped == {"causal", "window", "incremental", "cross"}
    assert {r["status"] for r in report["results"] if r["property"] not in skipped} == {"passed"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    env["PYTHONPATH"] = str(sites["healthy"])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=EXAMPLE,
        timeout=600,
    )
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-2000:]


BROKEN_LAYERS = '''
import torch
from torch import nn
from attnzoo.layers.core import check_input, check_mask, masked_softmax, neutralise


class Pool(nn.Module):
    name = "pool"

    def __init__(self, hidden_size: int = 8):
        super().__init__()
        self.hidden_size = hidden_size
        self.w = nn.Linear(hidden_size, 1)

    def weights(self, x, mask):
        return masked_softmax(self.w(x).squeeze(-1)[:, None, :], mask)

    def forward(self, x, mask=None, return_attention=False):
        check_input(self.name, "x", x, ("batch", "seq", self.hidden_size), like=self.w.weight)
        mask = check_mask(self.name, mask, x.shape[0], 1, x.shape[1], like=x)
        x = neutralise(x, None if mask is None else mask[:, 0])
        a = self.weights(x, mask)
        out = torch.bmm(a, x).squeeze(1)
        return (out, a.squeeze(1)) if return_attention else out


class IgnoresMask(Pool):
    name = "ignores_mask"

    def forward(self, x, mask=None, return_attention=False):
        return super().forward(x, None, return_attention)


class NaNRow(Pool):
    name = "nan_row"

    def weights(self, x, mask):  # -inf fill: a fully masked row is 0/0
        scores = self.w(x).squeeze(-1)[:, None, :]
        return torch.softmax(scores if mask is None else scores.masked_fill(~mask, float("-inf")), -1)


class BadRepr(Pool):
    name = "bad_repr"

    def extra_repr(self):
        return f"scale={self.w.weight.abs().max().item():.3f}"


class MixesBatch(Pool):
    name = "mixes_batch"

    def forward(self, x, mask=None, return_attention=False):
        out = super().forward(x, mask, return_attention)
        if return_attention:
            return out[0] - out[0].mean(0, keepdim=True), out[1]
        return out - out.mean(0, keepdim=True)


class Exits(Pool):
    name = "exits"

    def forward(self, x, mask=None, return_attention=False):
        import os

        os._exit(0)  # ends the process as a success, with nothing checked after it


class SysExits(Pool):
    name = "sys_exits"

    def forward(self, x, mask=None, return_attention=False):
        raise SystemExit(0)


class Sleeps(Pool):
    name = "sleeps"

    def forward(self, x, mask=None, return_attention=False):
        import time

        time.sleep(3600)


class LeaksState(Pool):
    name = "leaks_state"

    def forward(self, x, mask=None, return_attention=False):
        torch.set_default_dtype(torch.float64)  # global state a variant must not leave changed
        torch.set_num_threads(1)
        torch.manual_seed(123)
        return super().forward(x, mask, return_attention)


class Square(nn.Module):
    """A layer with a convention of its own: x [B, T] -> x ** 2."""

    def forward(self, x):
        check_input("square", "x", x, ("batch", "seq"))
        return x * x
'''

BROKEN_PLUGIN = """
from attnzoo import hookimpl

BROKEN = {"ignores_mask": "IgnoresMask", "nan_row": "NaNRow", "bad_repr": "BadRepr", "mixes_batch": "MixesBatch",
          "exits": "Exits", "sys_exits": "SysExits", "sleeps": "Sleeps", "leaks_state": "LeaksState"}


@hookimpl
def attnzoo_register_models(register):
    for name, cls in BROKEN.items():
        register(name, factory=f"brokenvariants_layers:{cls}", convention="sequence_to_vector",
                 config={"hidden_size": 8})
    register("square", factory="brokenvariants_layers:Square", convention="flat_square")


@hookimpl
def attnzoo_register_conventions(register):
    register("flat_square", "brokenvariants_layers_conv:FLAT")
"""

FLAT_CONVENTION = """
from attnzoo.testing import Convention, Slot

FLAT = Convention("flat_square", (Slot("x", "float", ("batch", "keys")),), outputs=(("batch", "keys"),),
                  attention="none")
"""


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    project = _project(root / "src", "brokenvariants", "brokenvariants", BROKEN_PLUGIN)
    module = project / "brokenvariants_plugin"
    (module.parent / "brokenvariants_layers.py").write_text(BROKEN_LAYERS)
    (module.parent / "brokenvariants_layers_conv.py").write_text(FLAT_CONVENTION)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'packages = ["brokenvariants_plugin"]',
            'packages = ["brokenvariants_plugin"]\nonly-include = ["brokenvariants_plugin", '
            '"brokenvariants_layers.py", "brokenvariants_layers_conv.py"]\nsources = ["."]',
        )
    )
    _pip_install([project], root / "site")
    return root / "site"


@pytest.mark.parametrize(
    "name, prop",
    [
        ("ignores_mask", "masked_values"),
        ("nan_row", "fully_masked"),
        ("bad_repr", "meta"),
        ("mixes_batch", "batch_independence"),
    ],
)
@pytest.mark.slow
def test_a_broken_third_party_variant_fails_the_kit_naming_the_property(broken_site, name, prop):
    proc = cli(broken_site, "check", name, "--json")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (report,) = json.loads(proc.stdout)
    failed = {r["property"]: r["reason"] for r in report["results"] if r["status"] == "failed"}
    assert prop in failed, failed
    passed = {r["property"] for r in report["results"] if r["status"] == "passed"}
    assert {"builds", "shapes", "state_dict"} <= passed  # the kit blames the broken promise, not everything


@pytest.mark.slow
def test_a_plugin_brings_its_own_convention_for_the_kit(broken_site):
    proc = cli(broken_site, "check", "square", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (report,) = json.loads(proc.stdout)
    statuses = {r["property"]: r["status"] for r in report["results"]}
    assert report["convention"] == "flat_square"
    assert statuses["shapes"] == statuses["batch_independence"] == statuses["gradcheck"] == "passed"
    assert statuses["masked_values"] == "skipped"  # the convention has no mask


@pytest.mark.slow
def test_the_skeleton_on_docs_plugins_md_installs_and_passes_the_kit(tmp_path):
    """The four files of docs/plugins.md's skeleton, taken from the page itself, as a plugin author would."""
    import re

    page = (ROOT / "docs" / "plugins.md").read_text()
    files = {}
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", page, flags=re.S):
        first = block.splitlines()[0]
        if first.startswith("# my_plugin/") or first.startswith("# tests/"):
            files[first[2:].strip()] = block
    assert set(files) == {
        "my_plugin/layers.py",
        "my_plugin/query_pool.yaml",
        "my_plugin/__init__.py",
        "tests/test_query_pool.py",
    }
    project = tmp_path / "my-plugin"
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
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
    """)
    )
    _pip_install([project], tmp_path / "site")
    proc = cli(tmp_path / "site", "check", "my_plugin:*", ATTNZOO_STRICT_PLUGINS="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "my_plugin:query_pool" in proc.stdout and "0 failed" in proc.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    env["PYTHONPATH"] = str(tmp_path / "site")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=600,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.slow
def test_a_variant_that_exits_or_hangs_fails_the_check_and_the_others_are_still_checked(broken_site):
    """os._exit(0), SystemExit(0) and a forward that sleeps: each fails the property it was in, attnzoo check
    exits 1, and a healthy variant checked after them still passes."""
    proc = cli(broken_site, "check", "exits", "sys_exits", "sleeps", "square", "--json", ATTNZOO_CHECK_TIMEOUT="3")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    reports = {r["variant"]: r for r in json.loads(proc.stdout)}
    failed = {
        name: {x["property"]: x["reason"] for x in r["results"] if x["status"] == "failed"}
        for name, r in reports.items()
    }
    assert any("ended its check process (exit status 0)" in why for why in failed["exits"].values()), failed["exits"]
    assert any("called sys.exit(0)" in why for why in failed["sys_exits"].values()), failed["sys_exits"]
    assert any("time limit of 3 s" in why for why in failed["sleeps"].values()), failed["sleeps"]
    assert reports["square"]["ok"], failed["square"]


@pytest.mark.slow
def test_a_variant_that_changes_global_state_leaves_the_next_one_unharmed(broken_site):
    code = """
        import torch
        from attnzoo.testing import check_model
        dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
        before = torch.random.get_rng_state()
        check_model("leaks_state")
        assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads
        assert torch.equal(torch.random.get_rng_state(), before)  # even a correct variant's draws are undone
        report = check_model("square")
        print("square ok", report.ok)
    """
    proc = run(broken_site, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "square ok True" in proc.stdout


def test_the_pyproject_in_docs_plugins_is_the_example_plugins_whole_file():
    """docs/plugins.md shows a complete pyproject.toml (the one the tests above pip-install), not a fragment
    that fails to build when the project's name differs from its package's."""
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    page = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    block = re.search(r"```toml\n(.*?)```", page, flags=re.S).group(1)
    shown = tomllib.loads(block)
    assert shown == tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert shown["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/attnzoo_plugin_example"]


@pytest.mark.parametrize("with_packages", [False, True])
def test_a_project_named_unlike_its_package_builds_only_with_the_packages_line(tmp_path, with_packages):
    """What docs/plugins.md says of `[tool.hatch.build.targets.wheel] packages`."""
    (tmp_path / "src" / "gated_attention").mkdir(parents=True)
    (tmp_path / "src" / "gated_attention" / "__init__.py").write_text("")
    pyproject = (EXAMPLE / "pyproject.toml").read_text().replace("attnzoo-plugin-example", "my-attention-plugin")
    pyproject = pyproject.replace("src/attnzoo_plugin_example", "src/gated_attention")
    if not with_packages:
        pyproject = pyproject.split("[tool.hatch.build.targets.wheel]")[0]
    (tmp_path / "pyproject.toml").write_text(pyproject)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "out"), "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if with_packages:
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:
        assert proc.returncode != 0
        assert "Unable to determine which files to ship inside the wheel" in proc.stdout + proc.stderr
