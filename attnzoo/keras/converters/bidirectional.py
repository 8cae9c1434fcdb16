"""Keras's ``Bidirectional`` wrapper of an LSTM, GRU or SimpleRNN, both directions in one packed kernel call
where torch computes the cell (see :mod:`attnzoo.keras.converters.recurrent` for the masking rule)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from attnzoo.keras.arguments import input_agrees
from attnzoo.keras.converters.recurrent import CELLS, Recurrent, recurrent_spec, torch_cell, write_torch_rnn
from attnzoo.keras.emit import Writer
from attnzoo.keras.masks import passed_on, reads_mask
from attnzoo.keras.nodes import Node, as_node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.torch_layers import kept_first, keras_outputs
from attnzoo.layers.core import tracing

__all__ = ["Bidirectional"]


class Bidirectional(Node):
    """``Bidirectional(layer, merge_mode)``: the forward layer and a ``go_backwards`` copy over the same
    input (and mask); with ``return_sequences`` the backward outputs are flipped back into time order;
    ``merge_mode`` concat, sum, mul, ave or None (two outputs). States: the forward layer's, then the
    backward layer's; ``initial_state`` is split the same way."""

    op = "bidirectional"
    supports_masking = True
    layer_arguments = ("forward_layer", "backward_layer")

    def __init__(
        self,
        *,
        forward_layer: dict[str, Any] | Node,
        backward_layer: dict[str, Any] | Node,
        merge_mode: str | None,
    ) -> None:
        super().__init__()
        self.forward_layer = as_node(forward_layer)
        self.backward_layer = as_node(backward_layer)
        self.merge_mode = merge_mode

    @classmethod
    def torch_key(cls, key: str) -> str:
        """``forward_layer.rnn.weight_ih_l0`` -> ``weight_ih_l0``, ``backward_layer.rnn.weight_ih_l0`` ->
        ``weight_ih_l0_reverse``: the keys of the one bidirectional ``nn.LSTM`` / ``nn.GRU`` the emitted module
        declares (see :meth:`Node.torch_key <attnzoo.keras.nodes.Node.torch_key>`)."""
        direction, _, inner = key.partition(".")
        if direction not in ("forward_layer", "backward_layer"):
            raise KeyError(f"{key!r} is not a key of a Bidirectional (forward_layer.*, backward_layer.*)")
        name = Recurrent.torch_key(inner)
        return name if direction == "forward_layer" else f"{name}_reverse"

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
            and not (self.training and (f.dropout or f.recurrent_dropout or b.dropout or b.recurrent_dropout))
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
        s_f = f.initial_states(x, None if initial is None else list(initial[:half]))
        s_b = b.initial_states(x, None if initial is None else list(initial[half:]))
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
            given = None if not reads_mask(kwargs) or mask is None else mask.bool()
            y, y_rev, states = self._fused(args[0], given, None if initial is None else list(initial))
        else:
            f_kwargs = passed_on(kwargs)
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


@keras_layer("Bidirectional", call_arguments={"initial_state"}, child_order=("forward_layer", "backward_layer"))
def convert_bidirectional(record, arrays, ctx):
    c = record.config
    inner = c.get("layer")
    if not isinstance(inner, dict) or inner.get("class_name") not in CELLS:
        name = inner.get("class_name") if isinstance(inner, dict) else inner
        raise Refused(f"wraps {name!r}; LSTM, GRU and SimpleRNN are supported")
    back = c.get("backward_layer") if isinstance(c.get("backward_layer"), dict) else inner
    if back.get("class_name") not in CELLS:
        raise Refused(f"backward_layer {back.get('class_name')!r} is not LSTM, GRU or SimpleRNN")
    merge = c.get("merge_mode", "concat")
    if merge not in ("concat", "sum", "mul", "ave", None):
        raise Refused(f"merge_mode {merge!r}")
    f_config, b_config = inner.get("config", {}), back.get("config", {})
    f_count = 3 if f_config.get("use_bias", True) else 2
    sequences = bool(f_config.get("return_sequences", False))
    forward, f_state, notes = recurrent_spec(
        f_config, arrays[:f_count], CELLS[inner["class_name"]], ctx, go_backwards=False, zero_output_for_mask=sequences
    )
    backward, b_state, _ = recurrent_spec(
        b_config, arrays[f_count:], CELLS[back["class_name"]], ctx, go_backwards=True, zero_output_for_mask=sequences
    )
    for array in (arrays[0], arrays[f_count]):  # each direction's kernel [in, gates * units]
        input_agrees(record, array.shape[0])
    state = {f"forward_layer.{k}": v for k, v in f_state.items()}
    state.update({f"backward_layer.{k}": v for k, v in b_state.items()})
    spec = {"op": "bidirectional", "forward_layer": forward, "backward_layer": backward, "merge_mode": merge}
    return Converted(spec, state, notes)


# -- the torch form -------------------------------------------------------------------------------------
@writes(Bidirectional)
def write_bidirectional(w: Writer, spec: dict[str, Any]) -> bool:
    """A concat of a forward layer and its ``go_backwards`` twin of the same kind and size that torch's cell
    computes, each zeroing masked outputs exactly when it returns sequences (as Keras's wrapper sets them):
    one bidirectional ``nn.LSTM`` / ``nn.GRU`` (:func:`~attnzoo.keras.converters.recurrent.write_torch_rnn`)."""
    f, b = spec.get("forward_layer"), spec.get("backward_layer")
    if spec.get("merge_mode") != "concat" or not (torch_cell(f) and torch_cell(b)):
        return False
    same = ("cell", "units", "input_size", "use_bias", "return_sequences")
    sequences = f.get("return_sequences", False)
    if not (
        all(f.get(k) == b.get(k) for k in same)
        and not f.get("go_backwards", False)
        and b.get("go_backwards", False)
        and f.get("zero_output_for_mask", False) == sequences == b.get("zero_output_for_mask", False)
    ):
        return False
    return write_torch_rnn(w, f, bidirectional=True)
