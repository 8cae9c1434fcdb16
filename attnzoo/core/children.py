"""attnzoo's Python child processes (``attnzoo check``'s checks, ``attnzoo bench``'s memory probe), started
so that they import nothing from the folder the caller runs in.

``python -m M`` and ``python -c CODE`` put the current folder first on ``sys.path``: a ``torch.py`` planted
in the folder a user runs ``attnzoo check`` from would be imported, and run, by the child. Every child goes
through :func:`run_python`, which keeps the caller's environment (``PYTHONPATH`` included; no ``-I``/``-E``)
and takes the current folder out of the child's reach twice over:

- ``PYTHONSAFEPATH=1`` (Python 3.11 and later): no folder is put before ``sys.path`` at all;
- the child runs in a fresh empty folder (Python 3.10 ignores the variable: the folder it puts first is this
  one, and holds nothing), deleted when the child ends.

So that the environment means in the child what it meant here, relative ``PYTHONPATH`` entries and attnzoo's
folder variables (:data:`FOLDER_VARIABLES`) are made absolute against the caller's folder; an empty
``PYTHONPATH`` entry (a stray ``:``) would be the caller's folder again and is dropped. When this attnzoo
was itself imported from the caller's folder (``python -m attnzoo`` in a source checkout), that folder
goes first on the child's ``PYTHONPATH``: the child runs the same attnzoo, from code the caller already
runs. Arguments that are paths are the caller's to make absolute (``attnzoo check DIR`` passes the folder's
absolute path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from attnzoo.core.plugins import child_environment

__all__ = ["run_python", "python_environment", "FOLDER_VARIABLES"]

# attnzoo's environment variables that name a folder (relative ones are read against the current folder)
FOLDER_VARIABLES = ("ATTNZOO_HOME", "ATTNZOO_REGISTRY_DIR", "ATTNZOO_WEIGHTS_DIR", "ATTNZOO_WORDNET_DIR")
# the folder this attnzoo package was imported from
_SOURCE = str(Path(__file__).resolve().parents[2])


def python_environment() -> dict[str, str]:
    """The environment of a child: this process's (with the plugin switches it runs under), the current
    folder's imports off, relative folders made absolute."""
    env = dict(child_environment() or os.environ)
    env["PYTHONSAFEPATH"] = "1"
    entries = [os.path.abspath(e) for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    if _run_in_place():
        entries.insert(0, _SOURCE)
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        env.pop("PYTHONPATH", None)
    for name in FOLDER_VARIABLES:
        if env.get(name):
            env[name] = os.path.abspath(os.path.expanduser(env[name]))
    return env


def _run_in_place() -> bool:
    """Whether this attnzoo was imported from the current folder (a source checkout run in place)."""
    try:
        return os.path.samefile(_SOURCE, os.getcwd())
    except OSError:  # the current folder was deleted: nothing can be imported from it
        return False


def run_python(arguments: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python ARGUMENTS`` (this interpreter) in a fresh empty folder with :func:`python_environment`;
    stdout and stderr captured as text. ``subprocess.TimeoutExpired`` past ``timeout`` seconds, as
    ``subprocess.run`` raises it."""
    env = python_environment()
    with tempfile.TemporaryDirectory(prefix="attnzoo-child-", ignore_cleanup_errors=True) as folder:
        return subprocess.run(
            [sys.executable, *arguments], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
        )
