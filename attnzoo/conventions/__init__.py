"""Calling conventions: how each kind of variant is called, and one input builder for each.

A model card names its convention (``convention: sequence_to_labels``). The conformance kit
(``attnzoo.testing``), ``attnzoo create``, the tour, export and bench build their inputs here, from the
convention and the model's config, so no table of per-variant inputs is kept anywhere else.

A convention is declarative: its input *slots* (name, kind, named axes, positional or keyword), the
dims of its outputs, and how attention weights come back. Axis names:

    batch     the batch                                  keys      the masked axis (sequence, frames, words)
    queries   a second, unmasked sequence axis           other     a size read from the config (feature, vocab, ...)

Masks are boolean ``[batch, keys]`` with True = attend (real position); the builder pads the tail of
each sample (right padding) according to ``lengths``.

Built-in conventions (shared/DESIGN.md "Calling conventions"):

======================  =====================================================  ===============================
name                    forward                                                returns
======================  =====================================================  ===============================
sequence_to_labels      ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, L]`` (+ ``A [B, L, T]``)
sequence_to_vector      ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, ...]`` (+ ``A [B, ..., T]``)
sequence_to_sequence    ``(x [B, T, F], mask=None, return_attention=False)``   ``[B, T, D]`` (+ ``A [B, ..., T, T]``)
query_key               ``(query [B, Tq, Fq], key [B, T, Fk], value=[B, T, Fv], mask=None)``
                                                                               ``(context [B, Tq, Fv], A [B, Tq, T])``
decoder_encoder         ``(decoder_out [B, Tq, Fd], encoder_out [B, T, Fe], mask=None)``
                                                                               ``(out [B, Tq, H], A [B, Tq, T])``
keras_query_value       ``(query [B, Tq, F], value [B, T, F], *, value_mask=None, return_attention=False)``
                                                                               ``[B, Tq, F]`` (+ ``A [B, Tq, T]``)
keras_mha               ``(query [B, Tq, Fq], value [B, T, Fv], *, value_mask=None, return_attention=False)``
                                                                               ``[B, Tq, D]`` (+ ``A [B, h, Tq, T]``)
tokens_to_labels        ``(tokens [B, T], mask=None, return_attention=False)`` ``[B, L]`` (+ ``A [B, ..., T]``)
tokens_to_tokens        ``(source [B, T], target_in [B, Tq], mask=None, return_attention=False)``
                                                                               ``[B, Tq, V]`` (+ ``A [B, Tq, T]``)
documents_to_labels     ``(tokens [B, S, W], mask=None, return_attention=False)``
                                                                               ``[B, L]`` (+ weights)
image_to_labels         ``(x [B, C, H, W], mask=None over W, return_attention=False)``
                                                                               ``[B, L]`` (+ weights)
image_to_image          ``(x [B, C, H, W])``                                   ``[B, C, H, W]``
keras_inputs            ``(*inputs)``, as a converted Keras model's graph      its outputs
                        declares them
======================  =====================================================  ===============================

A plugin adds its own convention with a :class:`Convention` subclass (or instance), registered through
the ``attnzoo_register_conventions(register)`` hook; :func:`get_convention` finds both kinds.
"""

from attnzoo.conventions.base import Convention, Sample, Slot
from attnzoo.conventions.table import (
    CONVENTIONS,
    convention_names,
    get_convention,
    model_config,
    register_convention,
    sample_inputs,
)

__all__ = [
    "Slot",
    "Sample",
    "Convention",
    "CONVENTIONS",
    "get_convention",
    "register_convention",
    "convention_names",
    "model_config",
    "sample_inputs",
]
