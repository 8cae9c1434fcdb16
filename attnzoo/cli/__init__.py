"""The ``attnzoo`` command (see :mod:`attnzoo.cli.app`); ``attnzoo.cli:main`` is the console script."""

from .app import main

__all__ = ["main"]
