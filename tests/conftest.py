"""Shared fixtures: every test starts from a fresh registry with third-party plugins off.

Plugin tests switch plugins back on explicitly (tests/test_plugins.py). Tests that need a bundled data
set skip when it is not installed, unless ATTNZOO_REQUIRE_DATA=1 (set by .ci/run), where a missing data
set fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# torchrun with two processes on this machine; --standalone: the ranks meet on a free port of their own (a fixed
# one may still be held by the run before)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", "-m", "attnzoo"]

WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    # one thread a worker (and for what it starts): workers fill the cores, and threads on top of them
    # would only fight over the same cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    # and one inductor cache a worker, kept between runs: two workers compiling into one cache at once
    # is the suspect in the one compile failure CI has shown (han's KeyError 'buf1', gone on every rerun)
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"attnzoo-inductor-{os.getuid()}-{WORKER}")
    )


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    from attnzoo.core.registry import REGISTRY

    for name in (
        "ATTNZOO_PLUGINS",
        "ATTNZOO_BLOCK_PLUGINS",
        "ATTNZOO_STRICT_PLUGINS",
        "ATTNZOO_REGISTRY_DIR",
        "ATTNZOO_WEIGHTS_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ATTNZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    REGISTRY.reset()
    yield
    REGISTRY.reset()


@pytest.fixture
def without_keras_hub(monkeypatch):
    """As where keras-hub is not installed: a keras-hub class attnzoo does not rebuild is refused, not built
    by keras-hub (the refusals' tests run the same with keras-hub installed)."""
    from attnzoo.keras import hub_keras

    monkeypatch.setattr(hub_keras, "keras_hub_installed", lambda: False)


def run_python(code: str, *, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (the way a user would), returning the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=cwd or ROOT, timeout=600
    )


# the prelude of a child that must do without keras, keras_hub and attnzoo (as a served folder's user does)
WITHOUT_KERAS = """import sys
for _name in ("keras", "keras_hub", "attnzoo"):
    sys.modules[_name] = None  # `import keras` raises ImportError from here on
"""


def run_without_keras(code: str, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``code`` (with ``args``) in a fresh interpreter where keras, keras_hub and attnzoo cannot be imported
    and PYTHONPATH is unset: what transformers loads there, it loads with none of them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_KERAS + code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def run_cli(*args: str, env: dict | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run ``attnzoo ARGS`` and return what it printed and its exit status, as a completed process.

    By default the command runs in this interpreter (``attnzoo.cli.main`` with its own stdout, stderr,
    environment and registry), which is what ``python -m attnzoo`` runs after its imports: a test of a
    verb's output and status does not pay for a fresh interpreter's torch import. ``fresh=True`` starts
    one, for what only a new process shows (what is imported, the console script, process-wide state);
    so does an ``env`` that sets ``PYTHONPATH``, which only a new interpreter reads.
    """
    if fresh or "PYTHONPATH" in (env or {}):
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "attnzoo", *args],
            capture_output=True,
            text=True,
            env=full_env,
            cwd=ROOT,
            timeout=600,
        )
    return _run_cli_here(list(args), env or {})


def _run_cli_here(args: list[str], env: dict) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import traceback
    import warnings

    from attnzoo.cli import main
    from attnzoo.core.registry import REGISTRY

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    REGISTRY.reset()  # the plugin switches are read from the environment as the command sees it
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # the command's warnings as a fresh process shows them (Python's default filters), not as
            # pytest's capture would take them
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                code = main(args)
            except SystemExit as exit_:  # argparse's --help and --version
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except Exception:  # noqa: BLE001 - what `--debug` lets out: Python prints it and exits 1
                traceback.print_exc(file=err)
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        REGISTRY.reset()
    return subprocess.CompletedProcess([sys.executable, "-m", "attnzoo", *args], code, out.getvalue(), err.getvalue())


def require_data(available: bool, what: str) -> None:
    """Skip when a data set is missing, or fail under ATTNZOO_REQUIRE_DATA=1 (CI)."""
    if available:
        return
    if os.environ.get("ATTNZOO_REQUIRE_DATA") == "1":
        pytest.fail(f"{what} is not installed but ATTNZOO_REQUIRE_DATA=1; see .ci/run")
    pytest.skip(f"{what} is not installed")


# Files whose cases are independent of each other and share no costly module fixture: their cases are
# spread over the workers one by one. Every other file stays whole on one worker (its module fixtures,
# a Keras training run among them, are built once), as ``--dist loadfile`` keeps them; the conformance
# kit's thousand cases on one worker were the suite's longest single queue. (A scheduler of our own:
# ``--dist loadgroup`` reads groups from node ids that pytest 9 no longer lets xdist rewrite.)
SPREAD_FILES = {"test_conformance.py", "test_fuzz.py", "test_attention_core.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from pathlib import PurePosixPath

    from xdist.scheduler import LoadScopeScheduling

    class FileOrCaseScheduling(LoadScopeScheduling):
        """A file is one unit of work, but for SPREAD_FILES, whose every case is one."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if PurePosixPath(path).name in SPREAD_FILES else path

    return FileOrCaseScheduling(config, log)
