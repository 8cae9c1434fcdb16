"""The text -> ids step of a trained text model, on its own: what ``predict`` does before the model.

    tok = attnzoo.tokenizer("bilstm_labelwise")        # a pretrained name, a run folder or a weights file
    ids, mask = tok(["a small dog", "an oak"])         # int64 [B, T], bool [B, T] (True = a real token)
    tok.settings()                                     # plain JSON: what an exported file carries

Texts are lower-cased and split into runs of letters and digits and single other characters
(``[a-z0-9]+|[^\\sa-z0-9]``), cut to the run's ``max_len`` tokens, looked up in the run's vocabulary
(unknown words -> ``<unk>``), and right-padded with 0 (``<pad>``): to the one length the model's
exported graph takes where it takes only one (a recurrent model's: its run's ``max_len``, so that the ids
go to the exported file as they are), else to the longest text of the batch.
``Tokenizer.from_settings(settings)`` rebuilds it from the JSON an exported ``.onnx`` or ``.pt2`` holds
(``attnzoo.export`` writes it under ``tokenizer``), so a deployed file needs no attnzoo internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError
from attnzoo.io.text import Tokenizer

__all__ = ["Tokenizer", "tokenizer", "tokenizer_settings"]


def tokenizer_settings(metadata: RunRecord | Mapping[str, Any]) -> dict[str, Any] | None:
    """A word-level text model's tokenizer settings from its record, or None (no vocabulary, or a G2P
    model, which reads letters)."""
    record = metadata if isinstance(metadata, RunRecord) else RunRecord.from_metadata(metadata)
    tokenizer = record.tokenizer()
    return None if tokenizer is None else tokenizer.settings()


def tokenizer(name_or_folder: Any) -> Tokenizer:
    """The tokenizer ``attnzoo.predict`` uses for a text model: a pretrained name (``bilstm_labelwise``,
    ``bilstm_labelwise.wordnet``), a run folder or weights file written by ``attnzoo train``, or the
    module itself."""
    from attnzoo.interop.export_plan import fixed_length
    from attnzoo.train.predict import trained_model

    if isinstance(name_or_folder, Path):
        name_or_folder = str(name_or_folder)
    model, record = trained_model(name_or_folder)
    found = record.tokenizer(fixed_length(model))  # a recurrent model's export takes one length only
    if found is None:
        raise ConfigError(
            f"{record.task or 'this model'}: a G2P model reads letters, not words; it has no word tokenizer"
        )
    return found
