"""The port you read is torch: at least 80 % of the layers a converted model's module declares are torch.nn
classes (or torch.nn subclasses from attnzoo.keras.torch_layers, such as ``KerasBatchNorm``), not attnzoo
node classes, on the kinds of model the port tests convert (issue 56). A layer written as an expression
(``torch.softmax(x, dim=-1)``, ``a + b``) declares nothing.

Here: keras-io's text CNN, an image CNN (Rescaling, augmentations, Normalization, transposed and separable
convolutions, CenterCrop, Resizing) and lstm_seq2seq as tf.keras 2 saved them (tests/data/keras2); the masked-text
and conv-classes models of the training oracle are checked in tests/test_keras_port.py (slow: Keras
builds them)."""

from __future__ import annotations

import inspect
import re

import pytest
from torch import nn

from attnzoo.keras import convert_keras_model, torch_layers
from attnzoo.keras.nodes import Node

from .conftest import ROOT

KERAS2 = ROOT / "tests" / "data" / "keras2"
# what a declaration calls: ``self.layers["key"] = X(...)`` or, for a long line, ``layer = X(...)``
DECLARED = re.compile(r"^\s*(?:self\.layers\[[^\]]+\]|layer) = ([A-Za-z_][\w.]*)\(", re.MULTILINE)


def declared(code: str) -> list[str]:
    """The constructors the module's ``__init__`` calls, one per declared layer."""
    return DECLARED.findall(code.split("def forward", 1)[0])


def is_torch(name: str) -> bool:
    """``nn.X``, or a name from attnzoo.keras.torch_layers that makes a torch.nn module (a subclass of one, or
    ``one_bias``, which returns the nn.LSTM it is given)."""
    if name.startswith("nn."):
        return isinstance(getattr(nn, name[3:], None), type)
    found = getattr(torch_layers, name, None)
    if inspect.isclass(found):
        return issubclass(found, nn.Module) and not issubclass(found, Node)
    return name == "one_bias"


def share(code: str) -> float:
    names = declared(code)
    assert names, "the module declares no layer"
    return sum(map(is_torch, names)) / len(names)


def test_the_count_reads_declarations_as_the_emitter_writes_them():
    code = """class M(nn.Module):
    def __init__(self) -> None:
        self.layers["a"] = nn.Linear(3, 4)
        layer = KerasBatchNorm(4, eps=0.001, momentum=0.01)
        self.layers["b"] = one_bias(nn.LSTM(4, 5, batch_first=True))
        self.layers["c"] = TimeDistributed(layer=Dense(units=2))

    def forward(self, x):
        self.layers["d"] = Ignored()
"""
    assert declared(code) == ["nn.Linear", "KerasBatchNorm", "one_bias", "TimeDistributed"]
    assert share(code) == 0.75


@pytest.mark.parametrize(
    ("file", "least"), [("keras_io_sequences.h5", 0.8), ("keras_io_vision.h5", 0.8), ("lstm_seq2seq.h5", 1.0)]
)
def test_a_port_declares_torch_nn_layers(file, least):
    model = convert_keras_model(KERAS2 / file)
    assert share(model.code) >= least, declared(model.code)
