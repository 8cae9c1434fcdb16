"""Keras's semantics over torch's own layers, where the two differ: small typed torch modules and functions a
converted model's emitted module calls (``from attnzoo.keras.torch_layers import run_rnn``), with keyword
arguments named as Keras names them and Keras's defaults. Each is plain torch: an ``nn.Module`` subclass
or a function of tensors, no attnzoo node protocol.

* :mod:`~attnzoo.keras.torch_layers.recurrent`: :func:`run_rnn`, Keras's masked ``LSTM`` / ``GRU`` and
  ``Bidirectional`` over one ``nn.LSTM`` / ``nn.GRU``;
* :mod:`~attnzoo.keras.torch_layers.batch_norm`: :class:`KerasBatchNorm`, ``nn.BatchNorm*d`` with Keras's
  training statistics;
* :mod:`~attnzoo.keras.torch_layers.preprocessing`: :class:`KerasNormalization`, :func:`keras_resize`,
  :func:`keras_center_crop`;
* :mod:`~attnzoo.keras.torch_layers.augmentation` and :mod:`~attnzoo.keras.torch_layers.geometric`: the
  random augmentation layers (``KerasRandomFlip``, ``KerasRandomRotation``, ...), the identity at inference.

The attnzoo nodes of the same layers (:mod:`attnzoo.keras.converters`) compute through these, so a layer's
node and its torch form are one computation.
"""

from attnzoo.keras.torch_layers.augmentation import (
    KerasAugmentation,
    KerasRandomBrightness,
    KerasRandomContrast,
    KerasRandomCrop,
    KerasRandomFlip,
    KerasRandomResize,
)
from attnzoo.keras.torch_layers.batch_norm import KerasBatchNorm
from attnzoo.keras.torch_layers.geometric import KerasRandomRotation, KerasRandomTranslation, KerasRandomZoom
from attnzoo.keras.torch_layers.preprocessing import (
    KerasNormalization,
    keras_center_crop,
    keras_normalize,
    keras_resize,
)
from attnzoo.keras.torch_layers.recurrent import (
    cell_step,
    kept_first,
    keras_outputs,
    one_bias,
    run_rnn,
    step_through,
)

__all__ = [
    "KerasBatchNorm",
    "run_rnn",
    "one_bias",
    "kept_first",
    "keras_outputs",
    "cell_step",
    "step_through",
    "KerasNormalization",
    "keras_normalize",
    "keras_resize",
    "keras_center_crop",
    "KerasAugmentation",
    "KerasRandomBrightness",
    "KerasRandomContrast",
    "KerasRandomCrop",
    "KerasRandomFlip",
    "KerasRandomResize",
    "KerasRandomRotation",
    "KerasRandomTranslation",
    "KerasRandomZoom",
]
