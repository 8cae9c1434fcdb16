"""The built-in verbs of ``attnzoo``, one module each: ``HELP``, ``arguments(parser)``, ``run(args) -> int``
(and ``DESCRIPTION`` where the help needs more than a line)."""
