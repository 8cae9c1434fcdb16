"""A custom Keras layer of this package, converted for ``attnzoo.keras.convert_keras_model``.

``attnzoo_example>LabelWiseAttention`` is seed 004's label-wise attention as a Keras layer (registered
in Keras with ``@keras.saving.register_keras_serializable(package="attnzoo_example")``): weights
``Wa`` [L, h], ``Wo`` [L, h], ``bo`` [L]; a masked softmax over time; per-label sigmoid probabilities.
That is attnzoo's ``lwan`` with ``output="probs"``, so the converter builds one with ``attnzoo.create``
(the saved folder can rebuild it) and loads the Keras arrays into it. The graph passes the layer the
Keras mask, because its forward takes ``mask``.
"""

import attnzoo
from attnzoo.keras import load_keras_arrays


def convert_label_wise(config, weights):
    """config: the layer's Keras config; weights: its variables, numpy arrays in Keras's order."""
    labels, hidden = weights[0].shape
    layer = attnzoo.create("lwan", num_labels=labels, hidden_size=hidden, output="probs")
    return load_keras_arrays(layer, weights)  # Keras layouts -> torch, every shape checked
