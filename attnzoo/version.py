"""The version of attnzoo (the one pyproject.toml gives), below every floor so that any module may read it."""

__version__ = "0.1.0"
