"""The tokenizer's seam in the Hugging Face door: what a converted preset folder's tokenizer becomes.

A folder keras-hub's ``save_to_preset`` wrote for a model with its tokenizer holds ``tokenizer.json``
(keras-hub's own config of its tokenizer class, not the ``tokenizers`` library's file of that name) and the
vocabulary under ``assets/tokenizer/``. The Hugging Face folder should hold transformers' ``tokenizer.json``
(and its special token ids in config.json). :func:`write_tokenizer` is the one function the door calls for
it; no keras-hub tokenizer converts yet, so today it writes nothing and says why (:class:`TokenizerWritten`),
and the door warns when a preset held a tokenizer that was left behind. The converter, when it comes, fills
this function in: nothing else of the door changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TokenizerWritten", "tokenizer_assets", "write_tokenizer", "KERAS_HUB_TOKENIZER"]

KERAS_HUB_TOKENIZER = ("tokenizer.json", "assets/tokenizer")  # what save_to_preset writes for a tokenizer


@dataclass(frozen=True)
class TokenizerWritten:
    """What :func:`write_tokenizer` did: ``files`` written into the folder, the ``special`` token ids it
    knows (``bos_token_id``, ``eos_token_id``, ``pad_token_id``) for config.json, and ``missing``, why no
    tokenizer was written where the preset held one (empty when nothing was left behind)."""

    files: tuple[str, ...] = ()
    special: dict[str, int] = field(default_factory=dict)
    missing: str = ""


def tokenizer_assets(preset: Path | None) -> list[str]:
    """The tokenizer files of a keras-hub preset folder (none for a ``.keras`` file or ``None``)."""
    if preset is None or not preset.is_dir():
        return []
    return [name for name in KERAS_HUB_TOKENIZER if (preset / name).exists()]


def write_tokenizer(preset_folder: Path | None, directory: Path) -> TokenizerWritten:
    """Write the preset's tokenizer into the Hugging Face folder ``directory`` as transformers' files.

    Today no keras-hub tokenizer converts: nothing is written, and where the preset holds a tokenizer the
    result says so in ``missing``."""
    found = tokenizer_assets(preset_folder)
    if not found:
        return TokenizerWritten()
    return TokenizerWritten(
        missing=f"{preset_folder} holds a keras-hub tokenizer ({', '.join(found)}), but attnzoo does not convert "
        f"keras-hub tokenizers yet: tokenizer.json is not written; save the tokenizer transformers' way beside "
        f"the model (the special token ids in config.json are left unset)"
    )
