"""Keras's recurrent layers (LSTM, GRU, SimpleRNN, Bidirectional) with Keras's mask semantics, fast.

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

Cells torch's kernels do not compute (Keras 2's ``hard_sigmoid``, a GRU with ``reset_after=False``,
other activations) and graphs being traced by torch.export or torch.compile take the exact step loop,
which applies Keras's masking rule literally.

Weights are held in torch's layout (``rnn.weight_ih_l0`` [G·units, in], ``rnn.weight_hh_l0``
[G·units, units], ``rnn.bias_ih_l0``, ``rnn.bias_hh_l0``), gates in torch's order: LSTM i, f, g, o (the
same as Keras's i, f, c, o), GRU r, z, n (Keras stores z, r, h). Keras's LSTM and SimpleRNN have one
bias, which is ``bias_ih``; ``bias_hh`` is zero. A GRU with ``reset_after`` has Keras's input bias in
``bias_ih`` and its recurrent bias in ``bias_hh``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.nodes import NODES, Node, build_node
from attnzoo.layers.core import tracing

__all__ = ["Recurrent", "Bidirectional", "GATES", "kept_first", "keras_outputs"]

GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1}
_TORCH = {"lstm": nn.LSTM, "gru": nn.GRU, "simple_rnn": nn.RNN}


class Recurrent(Node):
    """``LSTM`` / ``GRU`` / ``SimpleRNN`` (``cell``) with Keras's call: ``(x [B, T, F], initial_state=
    None, mask [B, T])`` -> ``out`` ([B, T, units] with ``return_sequences``, else [B, units]), then the
    final states with ``return_state`` (LSTM: h, c; the others: h)."""

    op = "recurrent"

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
    ) -> None:
        super().__init__(
            cell=cell,
            units=units,
            input_size=input_size,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            reset_after=reset_after,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            zero_output_for_mask=zero_output_for_mask,
            time_major=time_major,
        )
        if cell not in GATES:
            raise ValueError(f"unknown recurrent cell {cell!r}; one of {', '.join(GATES)}")
        self.cell, self.units = cell, units
        self.return_sequences, self.return_state = return_sequences, return_state
        self.go_backwards, self.zero_output_for_mask, self.time_major = go_backwards, zero_output_for_mask, time_major
        self.reset_after = reset_after
        extra = (
            {"nonlinearity": activation if activation in ("tanh", "relu") else "tanh"} if cell == "simple_rnn" else {}
        )
        self.rnn = _TORCH[cell](input_size, units, bias=use_bias, batch_first=True, **extra)
        self.act = activation_fn(activation)
        self.recurrent_act = activation_fn(recurrent_activation)
        if cell == "simple_rnn":
            self.fast = activation in ("tanh", "relu")
        elif cell == "lstm":
            self.fast = activation == "tanh" and recurrent_activation == "sigmoid"
        else:
            self.fast = activation == "tanh" and recurrent_activation == "sigmoid" and reset_after

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
        if self.fast and not tracing() and x.device.type != "meta":  # packing reads lengths on the host
            return self._packed(x, mask, initial)
        return self._loop(x, mask, initial)

    def _initial(self, x: Tensor, initial: list[Tensor] | None) -> list[Tensor]:
        if initial is not None:
            return [s.to(x.dtype) for s in initial]
        zeros = x.new_zeros(x.shape[0], self.units)
        return [zeros] * self.num_states

    def _packed(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        states0 = self._initial(x, initial)
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

    def _step(self, xp: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the cell; ``xp`` is the input's projection (x W_ih + b_ih) at this step."""
        h = states[0]
        w_hh, b_hh = self.rnn.weight_hh_l0, getattr(self.rnn, "bias_hh_l0", None)
        if self.cell == "lstm":
            z = xp + F.linear(h, w_hh, b_hh)
            i, f, g, o = z.chunk(4, dim=-1)
            c = self.recurrent_act(f) * states[1] + self.recurrent_act(i) * self.act(g)
            h = self.recurrent_act(o) * self.act(c)
            return h, [h, c]
        if self.cell == "gru":
            x_r, x_z, x_n = xp.chunk(3, dim=-1)
            if self.reset_after:
                h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
                r = self.recurrent_act(x_r + h_r)
                z = self.recurrent_act(x_z + h_z)
                n = self.act(x_n + r * h_n)
            else:
                w_r, w_z, w_n = w_hh.chunk(3, dim=0)
                r = self.recurrent_act(x_r + F.linear(h, w_r))
                z = self.recurrent_act(x_z + F.linear(h, w_z))
                n = self.act(x_n + F.linear(r * h, w_n))
            h = z * h + (1 - z) * n
            return h, [h]
        h = self.act(xp + F.linear(h, w_hh, b_hh))
        return h, [h]

    def _loop(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        states = self._initial(x, initial)
        projected = F.linear(x, self.rnn.weight_ih_l0, getattr(self.rnn, "bias_ih_l0", None))
        outputs: list[Tensor] = []
        previous = x.new_zeros(x.shape[0], self.units)
        for t in range(x.shape[1]):
            out, new = self._step(projected[:, t], states)
            if mask is not None:
                keep = mask[:, t : t + 1]
                out = torch.where(keep, out, torch.zeros_like(out) if self.zero_output_for_mask else previous)
                new = [torch.where(keep, n, s) for n, s in zip(new, states, strict=True)]
            outputs.append(out)
            previous, states = out, new
        seq = torch.stack(outputs, dim=1) if outputs else x.new_zeros(x.shape[0], 0, self.units)
        return seq, states

    # -- the Keras call -----------------------------------------------------------------------------
    def forward(self, args, kwargs, masks):
        x, mask = args[0], masks[0]
        if self.time_major:
            x = x.transpose(0, 1)
        explicit = kwargs.get("mask")
        if isinstance(explicit, Tensor):
            mask = explicit
        out_mask = mask if self.return_sequences else None
        if kwargs.get("implicit_mask") is False:  # keras 3 passed this call no mask
            mask = None
        initial = kwargs.get("initial_state")
        if isinstance(initial, Tensor):
            initial = [initial]
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


def kept_first(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, bool]:
    """``x`` [B, T, F] with each sample's kept steps moved to the front, in order (a stable sort of the
    mask; nothing moves when every sample is right-padded), the kept counts [B], and whether it was."""
    lengths = mask.sum(1)
    positions = torch.arange(mask.shape[1], device=mask.device)
    right_padded = bool((mask == (positions < lengths[:, None])).all())
    if right_padded:
        return x, lengths, True
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
    return x.gather(1, order.unsqueeze(-1).expand_as(x)), lengths, False


def keras_outputs(out: Tensor, mask: Tensor, right_padded: bool, *, zero: bool) -> Tensor:
    """Keras's per-step outputs in time order from the outputs over the kept steps (``out`` [B, T, H],
    kept steps first): each position takes the output of the last kept step at or before it (zeros
    before the first), or zeros at masked positions when ``zero`` (``zero_output_for_mask``)."""
    if right_padded and zero:
        return out  # a packed output is zero past each length already
    counts = mask.cumsum(1)  # kept steps up to and including each position
    index = (counts - 1).clamp(min=0).unsqueeze(-1).expand(-1, -1, out.shape[-1])
    return torch.where((mask if zero else counts > 0).unsqueeze(-1), out.gather(1, index), 0.0)


def _states(hn: Any) -> list[Tensor]:
    if isinstance(hn, tuple):
        return [s[0] for s in hn]
    return [hn[0]]


class Bidirectional(Node):
    """``Bidirectional(layer, merge_mode)``: the forward layer and a ``go_backwards`` copy over the same
    input (and mask); with ``return_sequences`` the backward outputs are flipped back into time order;
    ``merge_mode`` concat, sum, mul, ave or None (two outputs). States: the forward layer's, then the
    backward layer's; ``initial_state`` is split the same way."""

    op = "bidirectional"
    supports_masking = True

    def __init__(
        self, *, forward_layer: dict[str, Any], backward_layer: dict[str, Any], merge_mode: str | None
    ) -> None:
        super().__init__(forward_layer=forward_layer, backward_layer=backward_layer, merge_mode=merge_mode)
        self.forward_layer = build_node(forward_layer)
        self.backward_layer = build_node(backward_layer)
        self.merge_mode = merge_mode

    def _fusable(self, x: Any) -> bool:
        """Both directions in one bidirectional torch call: the same kind of cell that torch computes,
        of the same size, outside tracing and off the meta device."""
        f, b = self.forward_layer, self.backward_layer
        same = all(getattr(f, k) == getattr(b, k) for k in ("cell", "units", "return_sequences", "return_state"))
        same = (
            same
            and f.rnn.bias == b.rnn.bias
            and getattr(f.rnn, "nonlinearity", "") == getattr(b.rnn, "nonlinearity", "")
        )
        return (
            same
            and f.fast
            and b.fast
            and not f.time_major
            and not b.time_major
            and isinstance(x, Tensor)
            and x.dim() == 3
            and x.shape[0] > 0
            and x.shape[1] > 0
            and x.device.type != "meta"
            and not tracing()
        )

    def _fused(self, x: Tensor, mask: Tensor | None, initial: list[Tensor] | None):
        """Keras's two directions from one packed bidirectional kernel: the kept steps first, torch's reverse
        direction runs over them from the last, which is Keras's go_backwards layer over the kept steps.
        Returns the forward and backward outputs in time order (or the last outputs) and the states."""
        f, b = self.forward_layer, self.backward_layer
        half = None if initial is None else len(initial) // 2
        s_f = f._initial(x, None if initial is None else list(initial[:half]))
        s_b = b._initial(x, None if initial is None else list(initial[half:]))
        hx = [torch.stack([sf, sb]) for sf, sb in zip(s_f, s_b, strict=True)]
        kernel = _KERNELS[f.cell if f.cell != "simple_rnn" else f"simple_rnn_{f.rnn.nonlinearity}"]
        weights = [*f.rnn._flat_weights, *b.rnn._flat_weights]
        hidden: Any = tuple(hx) if f.cell == "lstm" else hx[0]
        units = f.units
        if mask is None:
            out, *hn = kernel(x, hidden, weights, f.rnn.bias, 1, 0.0, False, True, True)
            seq_f, seq_b = out[..., :units], out[..., units:]
            lengths, empty = None, None
        else:
            kept, lengths, right_padded = kept_first(x, mask)
            packed = pack_padded_sequence(kept, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
            order = packed.sorted_indices
            sorted_hidden = tuple(h[:, order] for h in hx) if f.cell == "lstm" else hx[0][:, order]
            data, *hn = kernel(packed.data, packed.batch_sizes, sorted_hidden, weights, f.rnn.bias, 1, 0.0, False, True)
            hn = [h[:, packed.unsorted_indices] for h in hn]
            out, _ = pad_packed_sequence(
                PackedSequence(data, packed.batch_sizes, order, packed.unsorted_indices),
                batch_first=True,
                total_length=x.shape[1],
            )
            seq_f = keras_outputs(out[..., :units], mask, right_padded, zero=f.zero_output_for_mask)
            # the backward layer's outputs, already in time order; Bidirectional zeroes its masked steps
            seq_b = keras_outputs(out[..., units:], mask, right_padded, zero=True)
            empty = lengths == 0
        states = [[h[0] for h in hn], [h[1] for h in hn]]
        if empty is not None:  # a sample with no kept step keeps its initial states and outputs nothing
            states = [
                [torch.where(empty[:, None], s0, s) for s, s0 in zip(got, given, strict=True)]
                for got, given in zip(states, (s_f, s_b), strict=True)
            ]
        if f.return_sequences:
            y, y_rev = seq_f, seq_b
        else:  # each direction's last output: its final state, zero where nothing was kept
            y, y_rev = states[0][0], states[1][0]
            if empty is not None:
                y, y_rev = (torch.where(empty[:, None], torch.zeros_like(t), t) for t in (y, y_rev))
        outputs = [*states[0], *states[1]] if f.return_state else []
        return y, y_rev, outputs

    def forward(self, args, kwargs, masks):
        fwd, bwd = self.forward_layer, self.backward_layer
        initial = kwargs.get("initial_state")
        if self._fusable(args[0]):
            mask = kwargs.get("mask") if isinstance(kwargs.get("mask"), Tensor) else masks[0]
            given = None if kwargs.get("implicit_mask") is False or mask is None else mask.bool()
            y, y_rev, states = self._fused(args[0], given, None if initial is None else list(initial))
        else:
            f_kwargs = {"mask": kwargs.get("mask"), "implicit_mask": kwargs.get("implicit_mask")}
            b_kwargs = dict(f_kwargs)
            if initial is not None:
                half = len(initial) // 2
                f_kwargs["initial_state"], b_kwargs["initial_state"] = list(initial[:half]), list(initial[half:])
            y, _ = fwd(args, f_kwargs, masks)
            y_rev, _ = bwd(args, b_kwargs, masks)
            states = [*y[1:], *y_rev[1:]]
            y, y_rev = y[0], y_rev[0]
            if fwd.return_sequences:
                y_rev = y_rev.flip(1)
        mode = self.merge_mode
        if mode == "concat":
            out = [torch.cat([y, y_rev], dim=-1)]
        elif mode == "sum":
            out = [y + y_rev]
        elif mode == "ave":
            out = [(y + y_rev) / 2]
        elif mode == "mul":
            out = [y * y_rev]
        else:
            out = [y, y_rev]
        mask = kwargs.get("mask") if isinstance(kwargs.get("mask"), Tensor) else masks[0]
        out_mask = mask if fwd.return_sequences else None
        return [*out, *states], [out_mask] * len(out) + [None] * len(states)


# torch's recurrent kernels (what nn.LSTM / nn.GRU / nn.RNN call), for both directions in one call
_KERNELS = {
    "lstm": torch.lstm,
    "gru": torch.gru,
    "simple_rnn_tanh": torch.rnn_tanh,
    "simple_rnn_relu": torch.rnn_relu,
}

NODES[Recurrent.op] = Recurrent
NODES[Bidirectional.op] = Bidirectional
