"""``KerasModel.to_source()``: a converted Keras model as one readable, self-contained PyTorch module.

The module holds a class named after the Keras model, built with no arguments, whose ``layers`` are the
converted model's, under the same names, so ``load_state_dict`` takes the converted folder's
``model.safetensors`` as it is. Its ``forward`` is straight-line code, one block per Keras call, with
each tensor's Keras mask written out as a variable beside it (``embedding_mask = ids != 0``).

Each layer family owns its torch form: its file in ``keras/converters/`` holds the node, the converter and
the ``write`` registered for the node class (:func:`attnzoo.keras.nodes.writes`), which prints the layer as
torch through :class:`~attnzoo.keras.emit.writer.Writer`. Written so today: ``nn.Embedding``, ``nn.Linear``
and its activation, ``nn.Conv1d/2d/3d`` with Keras's padding, ``nn.ConvTranspose1d/2d/3d`` where torch's
padding gives Keras's window, ``nn.LayerNorm`` over the last axis, reshapes, ``Masking``, ``Dropout``,
Keras 3's recorded operations, ``Concatenate``, global pooling (its masked average too), ZeroPadding and
Cropping, UpSampling, Max- and AveragePooling, the ReLU/LeakyReLU/ELU layers, an unmasked Softmax,
BatchNormalization (:class:`~attnzoo.keras.torch_layers.KerasBatchNorm`), SeparableConv1D/2D (a depthwise and
a pointwise ``nn.Conv1d/2d``), the merges of inputs of one rank (``a + b``), SpatialDropout1D, and
Keras's LSTM and GRU that torch's cell computes as ``nn.LSTM`` / ``nn.GRU`` (a Bidirectional of two, one
bidirectional layer) run by :func:`~attnzoo.keras.torch_layers.run_rnn`, Rescaling, Normalization, Resizing,
CenterCrop and the random augmentations (the modules and functions of :mod:`attnzoo.keras.torch_layers`),
and Keras's Attention and AdditiveAttention as the attnzoo layers their nodes run, with typed arguments.
A layer with no torch form, or a call its ``write`` declines, is attnzoo's own node class, imported by name
and called with typed tensors and keywords (``y = layers.x(x, mask=x_mask)``, or
``y, y_mask = layers.x.keras_call(a, input_mask=a_mask, padding_mask=p)`` for a node of its own mask rules:
:mod:`attnzoo.keras.emit.node_call`); its source is one click away.

The emitted module imports only torch and attnzoo, and passes ``ruff check --isolated`` (import sorting
too) and ``ruff format --check``: each statement is laid out by :mod:`attnzoo.keras.code_lines`. A layer
whose Keras name is a plain name is an attribute, ``layers.dense(x)``; any other is a string key.
Nothing from the file is spliced into it as code: the names it makes up come from
:func:`~attnzoo.keras.codegen.identifier`, each value is a :func:`~attnzoo.keras.codegen.literal`, the Keras
names and version are kept as data (``KERAS_NAMES``, ``KERAS_VERSION``), comments are Keras class names
only, and :func:`~attnzoo.keras.codegen.check_source` parses and walks the result before it is returned.

This module is what a converted model runs: :class:`~attnzoo.keras.model.KerasModel` calls :func:`emit` on
its graph, compiles the text (:mod:`attnzoo.keras.compiled`) and holds the layers its ``__init__`` declares;
``forward`` lets go of each variable after the block (one call's lines) that last reads it (``del``,
:mod:`attnzoo.keras.emit.freeing`). :func:`emit` also says which variables hold each call's outputs and
which call each line belongs to, so ``KerasModel.trace`` and the model's errors name Keras's layers.
"""

from attnzoo.keras.emit.emitter import Emitted, emit, to_source
from attnzoo.keras.emit.writer import Writer

__all__ = ["to_source", "emit", "Emitted", "Writer"]
