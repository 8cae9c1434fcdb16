"""Shared fixtures: every test starts from a fresh registry with third-party plugins off.

Plugin tests switch plugins back on explicitly (tests/test_plugins.py). Tests that need a bundled data
set skip when it is not installed, unless ATTNZOO_REQUIRE_DATA=1 (set by .ci/run), where a missing data
set fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread a worker (and for what it starts): workers fill the cores, and threads on top of them
    # would only fight over the same cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


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


def run_python(code: str, *, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (the way a user would), returning the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=cwd or ROOT, timeout=600
    )


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "attnzoo", *args], capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=600
    )


def require_data(available: bool, what: str) -> None:
    """Skip when a data set is missing, or fail under ATTNZOO_REQUIRE_DATA=1 (CI)."""
    if available:
        return
    if os.environ.get("ATTNZOO_REQUIRE_DATA") == "1":
        pytest.fail(f"{what} is not installed but ATTNZOO_REQUIRE_DATA=1; see .ci/run")
    pytest.skip(f"{what} is not installed")
