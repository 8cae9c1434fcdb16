"""An example attnzoo plugin. Importing this package must stay cheap: no torch here."""

__version__ = "0.1.0"
