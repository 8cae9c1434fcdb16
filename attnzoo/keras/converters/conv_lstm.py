"""Keras's convolutional LSTMs: ConvLSTM1D, ConvLSTM2D and ConvLSTM3D, with Keras's mask semantics.

A ConvLSTM is an LSTM whose input and recurrent transformations are convolutions. Keras's cell, at each
step ``t`` with input ``x_t`` [B, *spatial, C] and states ``h``, ``c`` [B, *spatial', filters]::

    z = conv(x_t, kernel, strides, padding, dilation) + bias + conv(h, recurrent_kernel, 1, "same")
    i, f, g, o = split(z, 4)                        # Keras's gate order i, f, c, o
    c = σ(f) · c + σ(i) · act(g)                    # σ: recurrent_activation (sigmoid by default)
    h = σ(o) · act(c)                               # act: activation (tanh by default)

``kernel`` [*k, C, 4·filters] and ``recurrent_kernel`` [*k, filters, 4·filters] are held in torch's
layout ([4·filters, C, *k] and [4·filters, filters, *k]); the input convolution runs once over every
step (time folded into the batch), the recurrent one step by step. ``same`` is TensorFlow's padding
(extra on the right), as in :mod:`attnzoo.keras.converters.conv`.

Masks follow Keras's RNN loop: at a masked step the states keep their values and the output is the
previous step's output (zeros before the first kept step), or zeros with ``zero_output_for_mask``;
``go_backwards`` reverses the input and the mask and returns the outputs in that reversed order. An
activation that is not elementwise (softmax) applies over the last axis of Keras's layout, the channels
with ``channels_last``. ``stateful=True`` is refused by name; dropout acts in training only, which
attnzoo does not convert for this layer (``model.train()`` makes it an error).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, agrees, as_tensor, channels_first, expect_variables, ints, rank_of
from attnzoo.keras.converters.conv import CONV, conv_options, conv_padding
from attnzoo.keras.converters.recurrent import dropout_rates
from attnzoo.keras.masks import layer_mask
from attnzoo.keras.nodes import Node, glorot_uniform
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["ConvLSTM"]

_ALONG_AXIS = ("softmax", "log_softmax")  # activations over an axis, not elementwise


class ConvLSTM(Node):
    """``ConvLSTM{rank}D``: ``(x [B, T, *spatial, C], initial_state=None, mask [B, T])`` -> ``out``
    ([B, T, *spatial', filters] with ``return_sequences``, else [B, *spatial', filters]), then ``h``, ``c``
    with ``return_state`` (channels first with ``channels_first``: [B, T, C, *spatial])."""

    op = "conv_lstm"

    def __init__(
        self,
        *,
        rank: int,
        filters: int,
        in_channels: int,
        kernel_size: list[int],
        strides: list[int],
        dilation_rate: list[int],
        padding: str = "valid",
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        zero_output_for_mask: bool = False,
        channels_first: bool = False,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.rank, self.filters, self.padding = rank, filters, padding
        self.kernel_size, self.strides, self.dilation = list(kernel_size), list(strides), list(dilation_rate)
        self.return_sequences, self.return_state, self.go_backwards = return_sequences, return_state, go_backwards
        self.zero_output_for_mask, self.channels_first = zero_output_for_mask, channels_first
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        receptive = math.prod(kernel_size)
        self.weight_ih = nn.Parameter(torch.empty(4 * filters, in_channels, *kernel_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * filters, filters, *kernel_size))
        self.bias = nn.Parameter(torch.zeros(4 * filters)) if use_bias else None
        glorot_uniform(self.weight_ih, in_channels * receptive, 4 * filters * receptive)
        nn.init.orthogonal_(self.weight_hh)
        self.act = self._keras_layout(activation_fn(activation), activation)
        self.recurrent_act = self._keras_layout(activation_fn(recurrent_activation), recurrent_activation)

    def _keras_layout(self, fn, name: str):
        """``fn`` applied in Keras's layout: an activation along an axis sees the channels last unless the
        layer is channels_first (the node computes with channels at axis 1)."""
        if name not in _ALONG_AXIS or self.channels_first:
            return fn
        return lambda z: fn(z.movedim(1, -1)).movedim(-1, 1)

    def _recurrent(self, h: Tensor) -> Tensor:
        ones = [1] * self.rank
        pads = conv_padding(h, "same", self.kernel_size, ones, ones)
        return CONV[self.rank](F.pad(h, pads) if any(pads) else h, self.weight_hh)

    def run(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        """Outputs per step in processing order [B, T, filters, *spatial'] and the final h, c (channels at
        axis 1), from ``x`` [B, T, C, *spatial]."""
        if self.go_backwards:
            x = x.flip(1)
            mask = None if mask is None else mask.flip(1)
        batch, steps = x.shape[:2]
        frames = x.reshape(batch * steps, *x.shape[2:])
        pads = conv_padding(frames, self.padding, self.kernel_size, self.strides, self.dilation)
        frames = F.pad(frames, pads) if any(pads) else frames
        projected = CONV[self.rank](frames, self.weight_ih, self.bias, stride=self.strides, dilation=self.dilation)
        projected = projected.reshape(batch, steps, *projected.shape[1:])
        shape = (batch, self.filters, *projected.shape[3:])
        if initial is not None:
            h, c = initial
        else:
            h, c = x.new_zeros(shape), x.new_zeros(shape)
        outputs, previous = [], x.new_zeros(shape)
        for t in range(steps):
            i, f, g, o = (projected[:, t] + self._recurrent(h)).chunk(4, dim=1)
            new_c = self.recurrent_act(f) * c + self.recurrent_act(i) * self.act(g)
            new_h = self.recurrent_act(o) * self.act(new_c)
            out = new_h
            if mask is not None:
                keep = mask[:, t].reshape(batch, *[1] * (new_h.dim() - 1))
                out = torch.where(keep, new_h, torch.zeros_like(new_h) if self.zero_output_for_mask else previous)
                new_h, new_c = torch.where(keep, new_h, h), torch.where(keep, new_c, c)
            outputs.append(out)
            previous, h, c = out, new_h, new_c
        return torch.stack(outputs, dim=1), [h, c]

    def forward(self, args, kwargs, masks):
        x, mask = args[0], masks[0]
        mask, carried = layer_mask(kwargs, mask)
        out_mask = carried if self.return_sequences else None
        if self.training and (self.dropout or self.recurrent_dropout):
            raise ValueError(
                "conv_lstm: dropout and recurrent_dropout act in training, which attnzoo converts for inference "
                "only (model.eval())"
            )
        if x.dim() != self.rank + 3:
            raise ValueError(
                f"expects frames of shape [batch, time, {'channels, ' if self.channels_first else ''}"
                f"{self.rank} spatial axes{'' if self.channels_first else ', channels'}], got {list(x.shape)}"
            )
        if x.shape[1] == 0:
            raise ValueError("got a sequence of length 0; a Keras RNN needs at least one step")
        layout = x if self.channels_first else x.movedim(-1, 2)
        initial = kwargs.get("initial_state")
        if initial is not None:
            if isinstance(initial, Tensor) or len(initial) != 2:
                raise ValueError("takes 2 initial states (h, c)")
            initial = [s if self.channels_first else s.movedim(-1, 1) for s in initial]
        seq, states = self.run(layout, None if mask is None else mask.bool(), initial)
        out = seq if self.return_sequences else seq[:, -1]
        if not self.channels_first:
            out = out.movedim(2 if self.return_sequences else 1, -1)
            states = [s.movedim(1, -1) for s in states]
        if self.return_state:
            return [out, *states], [out_mask, None, None]
        return [out], [out_mask]


@keras_layer("ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D", call_arguments={"initial_state"})
def convert_conv_lstm(record, arrays, ctx):
    """ConvLSTM1D/2D/3D, the rank from the class's name."""
    c = record.config
    rank = rank_of(record.class_name)
    if c.get("stateful"):
        raise Refused(
            "stateful=True: a stateful ConvLSTM keeps its state between calls, which attnzoo does not convert; "
            "save the model with stateful=False"
        )
    use_bias = bool(c.get("use_bias", True))
    expect_variables(arrays, 3 if use_bias else 2, record.class_name)
    kernel, recurrent = arrays[0], arrays[1]
    if kernel.ndim != rank + 2 or recurrent.ndim != rank + 2:
        raise Refused(f"kernel {list(kernel.shape)} and recurrent_kernel {list(recurrent.shape)} are not {rank + 2}-D")
    filters = recurrent.shape[-2]
    agrees(c, "filters", filters, "the recurrent kernel")
    if (
        kernel.shape[-1] != 4 * filters
        or recurrent.shape[-1] != 4 * filters
        or kernel.shape[:rank] != recurrent.shape[:rank]
    ):
        raise Refused(
            f"kernel {list(kernel.shape)} and recurrent_kernel {list(recurrent.shape)} do not fit 4 gates of "
            f"{filters} filters"
        )
    stated = c.get("kernel_size")
    if stated is not None and ints(stated, rank, "kernel_size") != list(kernel.shape[:rank]):
        raise Refused(f"its config says kernel_size={stated} but the kernel is {list(kernel.shape)}")
    padding, strides, dilation = conv_options(c, rank, causal=False)
    spec = {
        "op": "conv_lstm",
        "rank": rank,
        "filters": int(filters),
        "in_channels": int(kernel.shape[-2]),
        "kernel_size": list(kernel.shape[:rank]),
        "strides": strides,
        "dilation_rate": dilation,
        "padding": padding,
        "activation": activation_of(c, "activation", ctx, "tanh"),
        "recurrent_activation": activation_of(c, "recurrent_activation", ctx, "sigmoid"),
        "use_bias": use_bias,
        "return_sequences": bool(c.get("return_sequences", False)),
        "return_state": bool(c.get("return_state", False)),
        "go_backwards": bool(c.get("go_backwards", False)),
        "zero_output_for_mask": bool(c.get("zero_output_for_mask", False)),
        "channels_first": channels_first(c),
        **dropout_rates(c),
    }
    # keras [*k, in, 4·filters] -> torch [4·filters, in, *k]
    order = (rank + 1, rank, *range(rank))
    state = {
        "weight_ih": as_tensor(np.transpose(kernel, order)),
        "weight_hh": as_tensor(np.transpose(recurrent, order)),
    }
    if use_bias:
        if arrays[2].shape != (4 * filters,):
            raise Refused(f"bias {list(arrays[2].shape)} is not [{4 * filters}]")
        state["bias"] = as_tensor(arrays[2])
    return Converted(spec, state, ["a step loop of torch convolutions (the input's over every step at once)"])
