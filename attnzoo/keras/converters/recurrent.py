"""Keras's recurrent layers (LSTM, GRU, SimpleRNN) with Keras's mask and training semantics, fast.

Keras runs a masked RNN step by step: at a masked step the states keep their values and the output is
the previous step's output (zeros before the first kept step), or zeros when ``zero_output_for_mask``
(which Bidirectional sets whenever it returns sequences). The last output is the output of the last
step processed. ``go_backwards`` reverses the input and the mask and returns the outputs in that
reversed order.

Because a masked step changes nothing, the states over the kept steps are the RNN run over the kept
steps alone, in order. So, wherever the padding sits (right, left, in the middle), the kept steps are
moved to the front of each sample (a stable sort of the mask), run through torch's packed
``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` kernel, and every output position takes the output of the last
kept step at or before it (one gather). That is Keras's result exactly, at the cost of one call of
torch's packed kernel (cuDNN on a GPU). Right-padded input needs no sort.

A converted model's emitted module writes an LSTM or GRU that torch's cell computes as ``nn.LSTM`` /
``nn.GRU`` run by :func:`attnzoo.keras.torch_layers.run_rnn`, which keeps the same rule; this node runs
the others (and its pieces, :func:`~attnzoo.keras.torch_layers.kept_first`,
:func:`~attnzoo.keras.torch_layers.keras_outputs`, the step loop and ``scan``, live there, shared).

Cells torch's kernels do not compute (Keras 2's ``hard_sigmoid``, a GRU with ``reset_after=False``,
other activations) take the exact step loop, which applies Keras's masking rule literally. A graph being
traced (torch.export, ONNX, torch.compile) runs the same step through ``scan`` (torch's loop operator,
ONNX's ``Scan``), so the exported file takes any length: an unrolled loop would fix it at the traced one.

Weights are held in torch's layout (``rnn.weight_ih_l0`` [G·units, in], ``rnn.weight_hh_l0``
[G·units, units], ``rnn.bias_ih_l0``, ``rnn.bias_hh_l0``), gates in torch's order: LSTM i, f, g, o (the
same as Keras's i, f, c, o), GRU r, z, n (Keras stores z, r, h). Keras's LSTM and SimpleRNN have one
bias, which is ``bias_ih``; ``bias_hh`` is zero. A GRU with ``reset_after`` has Keras's input bias in
``bias_ih`` and its recurrent bias in ``bias_hh``.

In training (``model.train()``), ``dropout`` and ``recurrent_dropout`` act as Keras's cells apply them:
one input mask per sequence, the same at every step (so the packed kernel still runs); with
``recurrent_dropout``, one input mask and one recurrent mask per gate (Keras's ``implementation=1``),
which takes the step loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, agrees, as_tensor, expect_variables, input_agrees
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.emit.draft import is_ref
from attnzoo.keras.masks import layer_mask
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Context, Converted, Refused, keras_layer
from attnzoo.keras.torch_layers import cell_step, kept_first, keras_outputs, one_bias, step_through
from attnzoo.layers.core import tracing

__all__ = ["Recurrent", "GATES", "RNN_TENSORS", "CELLS", "recurrent_spec", "dropout_rates"]
__all__ += ["torch_cell", "write_torch_rnn"]

GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1}
RNN_TENSORS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")  # a one-layer torch RNN's state
_TORCH = {"lstm": nn.LSTM, "gru": nn.GRU, "simple_rnn": nn.RNN}


class Recurrent(Node):
    """``LSTM`` / ``GRU`` / ``SimpleRNN`` (``cell``) with Keras's call: ``(x [B, T, F], initial_state=
    None, mask [B, T])`` -> ``out`` ([B, T, units] with ``return_sequences``, else [B, units]), then the
    final states with ``return_state`` (LSTM: h, c; the others: h)."""

    op = "recurrent"
    traces_any_length = True  # a traced graph runs the steps through scan (export keeps the length open)

    def __init__(
        self,
        *,
        cell: str,
        units: int,
        input_size: int,
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        reset_after: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        zero_output_for_mask: bool = False,
        time_major: bool = False,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if cell not in GATES:
            raise ValueError(f"unknown recurrent cell {cell!r}; one of {', '.join(GATES)}")
        self.cell, self.units = cell, units
        self.return_sequences, self.return_state = return_sequences, return_state
        self.go_backwards, self.zero_output_for_mask, self.time_major = go_backwards, zero_output_for_mask, time_major
        self.reset_after = reset_after
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        extra = (
            {"nonlinearity": activation if activation in ("tanh", "relu") else "tanh"} if cell == "simple_rnn" else {}
        )
        self.rnn = _TORCH[cell](input_size, units, bias=use_bias, batch_first=True, **extra)
        if use_bias and (cell != "gru" or not reset_after):
            one_bias(self.rnn)
        self.act = activation_fn(activation)
        self.recurrent_act = activation_fn(recurrent_activation)
        if cell == "simple_rnn":
            self.fast = activation in ("tanh", "relu")
        elif cell == "lstm":
            self.fast = activation == "tanh" and recurrent_activation == "sigmoid"
        else:
            self.fast = activation == "tanh" and recurrent_activation == "sigmoid" and reset_after

    @classmethod
    def torch_key(cls, key: str) -> str:
        """``rnn.weight_ih_l0`` -> ``weight_ih_l0``: the node's keys in the ``nn.LSTM`` / ``nn.GRU`` the emitted
        module declares (see :meth:`Node.torch_key <attnzoo.keras.nodes.Node.torch_key>`)."""
        name = key.removeprefix("rnn.")
        if name == key or name not in RNN_TENSORS:
            raise KeyError(f"{key!r} is not a key of a recurrent layer (rnn.{', rnn.'.join(RNN_TENSORS)})")
        return name

    @property
    def num_states(self) -> int:
        return 2 if self.cell == "lstm" else 1

    # -- the two ways of running it ---------------------------------------------------------------------
    def run(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        """Outputs per step in processing order (Keras's masked outputs) and the final states."""
        if self.go_backwards:
            x = x.flip(1)
            mask = None if mask is None else mask.flip(1)
        if mask is not None:
            mask = mask.bool()
        input_masks, recurrent_masks = self.dropout_masks(x)
        if input_masks is not None and len(input_masks) == 1:  # one mask for every gate and step
            x, input_masks = x * input_masks[0].unsqueeze(1), None
        exact = input_masks is not None or recurrent_masks is not None
        # exported graphs keep the length open through scan; torch.compile unrolls the loop instead (scan
        # under compile needs the whole body captured, which a Keras cell's Python is not)
        exporting = getattr(torch.compiler, "is_exporting", lambda: True)()
        if tracing() and exporting and not exact:
            return self._scanned(x, mask, initial)
        if self.fast and not exact and not tracing() and x.device.type != "meta":  # packing reads lengths on the host
            return self._packed(x, mask, initial)
        return self._loop(x, mask, initial, input_masks, recurrent_masks)

    def dropout_masks(self, x: Tensor) -> tuple[list[Tensor] | None, list[Tensor] | None]:
        """Keras's dropout masks of one call in training (None otherwise): input masks [B, F] and recurrent
        masks [B, units], each 0 or 1 / (1 - rate) and the same at every step. With ``recurrent_dropout``
        Keras uses one mask per gate for both (its ``implementation=1``); without, one input mask."""
        if not self.training or not (self.dropout or self.recurrent_dropout):
            return None, None
        gates = GATES[self.cell]

        def draw(count: int, width: int, rate: float) -> list[Tensor]:
            keep = torch.rand(count, x.shape[0], width, device=x.device) >= rate
            return list(keep.to(x.dtype) / (1.0 - rate))

        inputs = draw(gates if self.recurrent_dropout else 1, x.shape[-1], self.dropout) if self.dropout else None
        recurrent = draw(gates, self.units, self.recurrent_dropout) if self.recurrent_dropout else None
        return inputs, recurrent

    def initial_states(self, x: Tensor, initial: list[Tensor] | None) -> list[Tensor]:
        if initial is not None:
            return [s.to(x.dtype) for s in initial]
        zeros = x.new_zeros(x.shape[0], self.units)
        return [zeros] * self.num_states

    def _packed(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        states0 = self.initial_states(x, initial)
        h0: Any = tuple(s.unsqueeze(0).contiguous() for s in states0)
        h0 = h0 if self.cell == "lstm" else h0[0]
        if mask is None:
            out, hn = self.rnn(x, h0)
            return out, _states(hn)
        kept, lengths, right_padded = kept_first(x, mask)
        packed = pack_padded_sequence(kept, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, hn = self.rnn(packed, h0)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        seq = keras_outputs(out, mask, right_padded, zero=self.zero_output_for_mask)
        empty = lengths == 0  # a sample with no kept step keeps its initial states
        states = [torch.where(empty[:, None], s0, s) for s, s0 in zip(_states(hn), states0, strict=True)]
        return seq, states

    def _recurrent(self, h: Tensor, masks: list[Tensor] | None) -> Tensor:
        """``h W_hh + b_hh`` [B, G·units], each gate's part from its own dropped-out copy of h when given."""
        w_hh, b_hh = self.rnn.weight_hh_l0, getattr(self.rnn, "bias_hh_l0", None)
        if masks is None:
            return F.linear(h, w_hh, b_hh)
        gates = len(masks)
        biases = [None] * gates if b_hh is None else b_hh.chunk(gates)
        parts = zip(masks, w_hh.chunk(gates), biases, strict=True)
        return torch.cat([F.linear(h * m, w, b) for m, w, b in parts], dim=-1)

    def _step(self, xp: Tensor, states: list[Tensor], masks: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        """One step of the cell; ``xp`` is the input's projection (x W_ih + b_ih) at this step, ``masks``
        the recurrent dropout masks per gate (training only)."""
        if self.cell == "gru" and not self.reset_after:
            w_r, w_z, w_n = self.rnn.weight_hh_l0.chunk(3, dim=0)
            h = states[0]
            h_r, h_z, h_n = [h] * 3 if masks is None else [h * m for m in masks]
            x_r, x_z, x_n = xp.chunk(3, dim=-1)
            r = self.recurrent_act(x_r + F.linear(h_r, w_r))
            z = self.recurrent_act(x_z + F.linear(h_z, w_z))
            n = self.act(x_n + F.linear(r * h_n, w_n))
            h = z * h + (1 - z) * n
            return h, [h]
        new = cell_step(
            self.cell, xp, self._recurrent(states[0], masks), states, act=self.act, recurrent_act=self.recurrent_act
        )
        return new[0], new

    def _loop(
        self,
        x: Tensor,
        mask: Tensor | None,
        initial: list[Tensor] | None,
        input_masks: list[Tensor] | None = None,
        recurrent_masks: list[Tensor] | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        states = self.initial_states(x, initial)
        w_ih, b_ih = self.rnn.weight_ih_l0, getattr(self.rnn, "bias_ih_l0", None)
        if input_masks is None:
            projected = F.linear(x, w_ih, b_ih)
        else:  # each gate reads its own dropped-out copy of the input
            gates = len(input_masks)
            biases = [None] * gates if b_ih is None else b_ih.chunk(gates)
            parts = zip(input_masks, w_ih.chunk(gates), biases, strict=True)
            projected = torch.cat([F.linear(x * m.unsqueeze(1), w, b) for m, w, b in parts], dim=-1)

        def step(xp: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
            return self._step(xp, states, recurrent_masks)

        return step_through(step, states, projected, mask, zero=self.zero_output_for_mask)

    def _scanned(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        """:meth:`_loop` (no dropout) as one ``scan`` over time (:func:`~attnzoo.keras.torch_layers.step_through`)."""
        w_ih, b_ih = self.rnn.weight_ih_l0, getattr(self.rnn, "bias_ih_l0", None)

        def step(xp: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
            return self._step(xp, states, None)

        states = self.initial_states(x, initial)
        return step_through(step, states, F.linear(x, w_ih, b_ih), mask, zero=self.zero_output_for_mask, scan=True)

    # -- the Keras call -----------------------------------------------------------------------------
    def forward(self, args, kwargs, masks):
        x, mask = args[0], masks[0]
        if self.time_major:
            x = x.transpose(0, 1)
        mask, carried = layer_mask(kwargs, mask)
        out_mask = carried if self.return_sequences else None
        initial = kwargs.get("initial_state")
        if isinstance(initial, Tensor):
            initial = [initial]
        if initial is not None and len(initial) != self.num_states:
            raise ValueError(
                f"takes {self.num_states} initial state(s) ({'h, c' if self.cell == 'lstm' else 'h'}), "
                f"got {len(initial)}"
            )
        if x.dim() != 3:
            raise ValueError(f"expects a sequence of shape [batch, time, features], got {list(x.shape)}")
        if x.shape[1] == 0:
            raise ValueError("got a sequence of length 0; a Keras RNN needs at least one step")
        if x.shape[0] == 0:  # an empty batch: nothing to run, outputs of the right shapes
            seq = x.new_zeros(0, x.shape[1], self.units)
            states = [x.new_zeros(0, self.units)] * self.num_states
        else:
            seq, states = self.run(x, mask, list(initial) if initial is not None else None)
        out = seq if self.return_sequences else seq[:, -1]
        if self.time_major and self.return_sequences:
            out = out.transpose(0, 1)
        if self.return_state:
            return [out, *states], [out_mask, *[None] * len(states)]
        return [out], [out_mask]


def _states(hn: Any) -> list[Tensor]:
    if isinstance(hn, tuple):
        return [s[0] for s in hn]
    return [hn[0]]


CELLS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}


def _gates(array: np.ndarray, cell: str, axis: int) -> np.ndarray:
    """Keras's GRU gate order (z, r, h) as torch's (r, z, n); LSTM and SimpleRNN are already in order."""
    if cell != "gru":
        return array
    z, r, h = np.split(array, 3, axis=axis)
    return np.concatenate([r, z, h], axis=axis)


def dropout_rates(config: Mapping[str, Any]) -> dict[str, float]:
    """``dropout`` and ``recurrent_dropout`` as Keras applies them: clipped to [0, 1], active only below 1."""
    rates = {}
    for key in ("dropout", "recurrent_dropout"):
        value = config.get(key, 0.0) or 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Refused(f"{key} {value!r} is not a number")
        value = min(1.0, max(0.0, float(value)))
        rates[key] = value if value < 1.0 else 0.0  # Keras's cells drop only when 0 < rate < 1
    return rates


def recurrent_spec(config: Mapping[str, Any], arrays: list[np.ndarray], cell: str, ctx: Context, **force: Any):
    """The node spec and torch-layout state of an LSTM / GRU / SimpleRNN config and its variables."""
    if config.get("stateful"):
        raise Refused("stateful=True: a stateful RNN keeps state between calls, which attnzoo does not convert")
    use_bias = bool(config.get("use_bias", True))
    expect_variables(arrays, 3 if use_bias else 2, "the cell")
    kernel, recurrent = arrays[0], arrays[1]
    gates = {"lstm": 4, "gru": 3, "simple_rnn": 1}[cell]
    units = recurrent.shape[0]
    agrees(config, "units", units, "the recurrent kernel")
    if kernel.ndim != 2 or recurrent.shape != (units, gates * units) or kernel.shape[1] != gates * units:
        raise Refused(
            f"kernel {list(kernel.shape)} and recurrent_kernel {list(recurrent.shape)} do not fit {gates} gates"
        )
    reset_after = bool(config.get("reset_after", ctx.major >= 2)) if cell == "gru" else True
    spec = {
        "op": "recurrent",
        "cell": cell,
        "units": units,
        "input_size": kernel.shape[0],
        "activation": activation_of(config, "activation", ctx, "tanh"),
        "recurrent_activation": activation_of(config, "recurrent_activation", ctx, "sigmoid")
        if cell != "simple_rnn"
        else "sigmoid",
        "use_bias": use_bias,
        "reset_after": reset_after,
        "return_sequences": bool(config.get("return_sequences", False)),
        "return_state": bool(config.get("return_state", False)),
        "go_backwards": bool(config.get("go_backwards", False)),
        "zero_output_for_mask": bool(config.get("zero_output_for_mask", False)),
        "time_major": bool(config.get("time_major", False)),
        **dropout_rates(config),
    }
    spec.update(force)
    state = {
        "rnn.weight_ih_l0": as_tensor(_gates(kernel, cell, 1).T),
        "rnn.weight_hh_l0": as_tensor(_gates(recurrent, cell, 1).T),
    }
    notes = []
    if use_bias:
        bias = arrays[2]
        if cell == "gru" and reset_after:
            if bias.shape != (2, 3 * units):
                raise Refused(f"bias {list(bias.shape)} is not [2, {3 * units}] (reset_after=True)")
            state["rnn.bias_ih_l0"] = as_tensor(_gates(bias[0], cell, 0))
            state["rnn.bias_hh_l0"] = as_tensor(_gates(bias[1], cell, 0))
        else:
            if bias.shape != (gates * units,):
                raise Refused(f"bias {list(bias.shape)} is not [{gates * units}]")
            state["rnn.bias_ih_l0"] = as_tensor(_gates(bias, cell, 0))
            state["rnn.bias_hh_l0"] = torch.zeros(gates * units)
    fast = spec["activation"] == "tanh" and spec["recurrent_activation"] == "sigmoid" and reset_after
    if cell == "simple_rnn":
        fast = spec["activation"] in ("tanh", "relu")
    notes.append(
        "packed torch kernel (kept steps moved to the front)" if fast else "exact step loop (torch has no such kernel)"
    )
    if "hard_sigmoid_keras2" in (spec["activation"], spec["recurrent_activation"]):
        notes.append("Keras 2 hard_sigmoid: clip(0.2 x + 0.5, 0, 1)")
    if cell == "gru" and not reset_after:
        notes.append("GRU reset_after=False: the reset gate applies before the recurrent kernel")
    return spec, state, notes


@keras_layer("LSTM", "GRU", "SimpleRNN", call_arguments={"initial_state"})
def convert_rnn(record, arrays, ctx):
    cell = CELLS[record.class_name]
    spec, state, notes = recurrent_spec(record.config, arrays, cell, ctx)
    input_agrees(record, arrays[0].shape[0])
    return Converted(spec, state, notes)


# -- the torch form: nn.LSTM / nn.GRU, Keras's masking by run_rnn (keras/torch_layers.py) ------------------
# A layer outside what torch's cell computes (SimpleRNN, GRU reset_after=False, other activations, dropout,
# return_state, initial_state, time_major) stays its node call: declined per call.
_TORCH_CLASSES = {"lstm": "nn.LSTM", "gru": "nn.GRU"}


def torch_cell(spec: Any) -> bool:
    """Whether a ``recurrent`` spec is torch's own cell: LSTM, or GRU with ``reset_after``; tanh and sigmoid;
    no dropout (Keras's acts in training), batch first; values of the types the node reads."""
    if not isinstance(spec, dict) or spec.get("op") != "recurrent" or spec.get("cell") not in _TORCH_CLASSES:
        return False
    if "units" not in spec or "input_size" not in spec:  # (the node needs them too: its error, not ours)
        return False
    flags = ("use_bias", "reset_after", "return_sequences", "return_state", "go_backwards", "time_major")
    if not plain(spec, int, "units", "input_size") or not all(isinstance(spec.get(k, False), bool) for k in flags):
        return False
    if not isinstance(spec.get("zero_output_for_mask", False), bool) or not plain(spec, float, "dropout"):
        return False
    return (
        spec.get("activation", "tanh") == "tanh"
        and spec.get("recurrent_activation", "sigmoid") == "sigmoid"
        and spec.get("reset_after", True)
        and not spec.get("time_major", False)
        and spec.get("dropout", 0.0) == 0
        and spec.get("recurrent_dropout", 0.0) == 0
    )


@writes(Recurrent, keywords=("initial_state",), outputs=True)
def write_recurrent(w: Writer, spec: dict[str, Any]) -> bool:
    """A Keras ``LSTM`` / ``GRU`` that torch's cell computes: ``nn.LSTM(input_size, units, batch_first=True)``
    run by :func:`~attnzoo.keras.torch_layers.run_rnn` (see :func:`write_torch_rnn`), from the call's
    ``initial_state`` where it has one, returning its final states where ``return_state`` and they are read."""
    return torch_cell(spec) and write_torch_rnn(w, spec, bidirectional=False)


def write_torch_rnn(w: Writer, layer: dict[str, Any], *, bidirectional: bool) -> bool:
    """``layer`` (one direction's spec) as ``nn.LSTM`` / ``nn.GRU`` (``bidirectional=True``: both directions
    in one), run by :func:`~attnzoo.keras.torch_layers.run_rnn` with the mask it reads; the output carries
    that mask where it returns sequences. False where keras 3 hands the layer no mask, or the call's mask is
    not one tensor."""
    x, mask = w.tensor(), w.mask
    if not w.implicit or x is None or not (w.explicit is None or is_ref(w.explicit)):
        return False
    initial, states = w.keyword("initial_state"), 2 if layer["cell"] == "lstm" else 1
    initial = [initial] if is_ref(initial) else initial
    if initial is not None and not (isinstance(initial, list) and len(initial) == states and all(map(is_ref, initial))):
        return False  # states of another count, or not tensors: the node's error says which
    returned = 1 + states if layer.get("return_state", False) and len(w.outs) > 1 else 1
    if bidirectional and (initial is not None or returned > 1):
        return False
    options = "" if layer.get("use_bias", True) else ", bias=False"
    options += ", bidirectional=True" if bidirectional else ""
    declared = (
        f"{_TORCH_CLASSES[layer['cell']]}({literal(layer['input_size'])}, {literal(layer['units'])}, "
        f"batch_first=True{options})"
    )
    if layer["cell"] == "lstm" and layer.get("use_bias", True):  # Keras's LSTM has one bias, torch's two
        declared = f"{w.imports('attnzoo.keras.torch_layers', 'one_bias')}({declared})"
    rnn = w.declare(declared)
    keywords = [
        f"{k}=True" for k in ("go_backwards", "return_sequences", "zero_output_for_mask") if layer.get(k, False)
    ]
    if initial is not None:
        given = [w.value(s) for s in initial]
        keywords.append(f"initial_state=({given[0]},)" if len(given) == 1 else f"initial_state=({', '.join(given)})")
    if returned > 1:
        keywords.append("return_state=True")
    arguments = ", ".join([rnn, x, *([mask] if mask is not None else []), *keywords])
    call = f"{w.imports('attnzoo.keras.torch_layers', 'run_rnn')}({arguments})"
    if returned > 1:
        w.assign_all(call, returned)
    else:
        w.assign(call)
    w.mask_is(mask if layer.get("return_sequences", False) else None)
    return True


@keras_layer("CuDNNLSTM", "CuDNNGRU")
def convert_cudnn_rnn(record, arrays, ctx):
    """tf.keras 2's GPU-only ``CuDNNLSTM`` / ``CuDNNGRU``: cuDNN's formulas, which Keras's LSTM and GRU
    state with fixed activations (tanh, a true sigmoid). CuDNNLSTM adds an input and a recurrent bias
    (``bias`` [8u] = the two [4u] halves): torch's LSTM has the same two, taken as they are. CuDNNGRU is
    GRU(reset_after=True): ``bias`` [6u] is the [2, 3u] of Keras's GRU, input half first. Neither masks."""
    cell = "lstm" if record.class_name == "CuDNNLSTM" else "gru"
    gates = 4 if cell == "lstm" else 3
    expect_variables(arrays, 3, record.class_name)
    units = arrays[1].shape[0]
    bias = arrays[2]
    if bias.shape != (2 * gates * units,):
        raise Refused(f"bias {list(bias.shape)} is not [{2 * gates * units}] (an input and a recurrent bias)")
    halves = bias.reshape(2, gates * units)
    config = {**record.config, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True}
    config["reset_after"] = True
    kept = [arrays[0], arrays[1], halves.sum(axis=0) if cell == "lstm" else halves]
    spec, state, notes = recurrent_spec(config, kept, cell, ctx)
    if cell == "lstm":  # the two biases as cuDNN adds them, each where torch's LSTM adds it
        state["rnn.bias_ih_l0"], state["rnn.bias_hh_l0"] = as_tensor(halves[0]), as_tensor(halves[1])
    input_agrees(record, arrays[0].shape[0])
    return Converted(spec, state, [f"{record.class_name}: cuDNN's {cell.upper()} (tanh, sigmoid)", *notes])
