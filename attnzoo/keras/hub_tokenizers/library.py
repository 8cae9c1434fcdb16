"""The ``tokenizers`` library (Hugging Face's), imported where a tokenizer is built or run, never earlier:
converting or loading a model needs it only when its tokenizer is asked for."""

from __future__ import annotations

from typing import Any

from attnzoo.errors import ConfigError, extra_import_message

__all__ = ["tokenizers_library"]


def tokenizers_library(what: str) -> Any:
    """The ``tokenizers`` module; a ``ConfigError`` saying which extra installs it, where it is missing."""
    try:
        import tokenizers
    except Exception as e:  # missing, or there but failing to import (the message tells them apart)
        raise ConfigError(extra_import_message(what, "tokenizers", e, "tokenizers")) from None
    return tokenizers
