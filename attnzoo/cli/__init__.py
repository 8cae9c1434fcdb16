"""The ``attnzoo`` command (see :mod:`attnzoo.cli.app`); ``attnzoo.cli:main`` is the console script."""

from attnzoo.cli.app import main

__all__ = ["main"]
