""":func:`run_rnn` is Keras's masked ``LSTM`` / ``GRU`` call, and ``Bidirectional(merge_mode="concat")``
of two, over one ``nn.LSTM`` / ``nn.GRU`` (``batch_first=True``; ``bidirectional=True`` for the wrapper).
Keras's gate orders are mapped in the weights when the model is converted (LSTM i, f, c, o is torch's
i, f, g, o; GRU z, r, h becomes torch's r, z, n; Keras's ``reset_after=True`` GRU is torch's GRU), so
the cell is torch's; what this module adds is Keras's masking:

* at a masked step the states keep their values, and the output is the previous step's output (zeros
  before the first kept step), or zeros with ``zero_output_for_mask``;
* so the states over the kept steps are the cell run over the kept steps alone: right padding (a
  suffix mask, the common case) is ``pack_padded_sequence`` with the kept counts; a mask with holes
  first moves each sample's kept steps to the front (:func:`kept_first`), and the outputs go back to
  their positions (:func:`keras_outputs`);
* ``go_backwards`` reverses the input and the mask, and the outputs stay in that reversed order;
* a bidirectional layer is Keras's forward layer and its ``go_backwards`` copy: torch's reverse direction
  over the kept steps, its outputs in time order.

The attnzoo ``Recurrent`` and ``Bidirectional`` nodes (:mod:`attnzoo.keras.converters.recurrent`) use the
same functions: :func:`kept_first`, :func:`keras_outputs` and, when a graph is traced for export,
:func:`step_through` over :func:`cell_step` (torch's loop operator ``scan``, so the exported graph takes
any length: packing reads lengths on the host, which a traced graph cannot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = ["run_rnn", "one_bias", "kept_first", "keras_outputs", "cell_step", "step_through"]

Step = Callable[[Tensor, list[Tensor]], tuple[Tensor, list[Tensor]]]


def run_rnn(
    rnn: nn.LSTM | nn.GRU,
    x: Tensor,
    mask: Tensor | None = None,
    *,
    go_backwards: bool = False,
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
    initial_state: Sequence[Tensor] | None = None,
    return_state: bool = False,
) -> Any:
    """Keras's ``LSTM`` / ``GRU`` (or ``Bidirectional(merge_mode="concat")`` of two) over ``rnn``.

    ``x`` [B, T, F] and ``mask`` [B, T] (bool, True = keep; None: every step) -> [B, T, H] with
    ``return_sequences``, else [B, H] (the output of the last step processed); H = ``hidden_size``, or
    ``2 * hidden_size`` for a bidirectional ``rnn``: ``[forward, backward]`` concatenated, both in time
    order. Keras's rule at a masked step t (see the module docstring)::

        h_t, c_t = cell(x_t, h_{t-1}, c_{t-1})   if mask[:, t]   else   h_{t-1}, c_{t-1}
        y_t = h_t  if mask[:, t]  else  (0 if zero_output_for_mask else y_{t-1}),    y_{-1} = 0

    Keras's ``Bidirectional`` sets ``zero_output_for_mask`` to ``return_sequences`` on both its layers;
    a bidirectional ``rnn`` takes that combination only, and no ``go_backwards``.

    A one-directional ``rnn`` also takes Keras's ``initial_state`` (``[h0, c0]`` for an LSTM, ``[h0]`` for a
    GRU, [B, H] each; zeros by default) and, with ``return_state``, returns ``(output, h, c)`` (an LSTM) or
    ``(output, h)`` (a GRU): the states after the last step the mask keeps (the initial ones where it keeps
    none), as Keras's ``return_state=True``.
    """
    bidirectional = rnn.bidirectional
    if bidirectional and (go_backwards or zero_output_for_mask != return_sequences):
        raise ValueError(
            "run_rnn: a bidirectional rnn is Keras's Bidirectional, whose layers have zero_output_for_mask equal "
            f"to return_sequences and no go_backwards; got go_backwards={go_backwards}, return_sequences="
            f"{return_sequences}, zero_output_for_mask={zero_output_for_mask}"
        )
    if rnn.num_layers != 1 or not rnn.batch_first or getattr(rnn, "proj_size", 0):
        raise ValueError("run_rnn: takes one layer of nn.LSTM / nn.GRU with batch_first=True (Keras's layout)")
    if x.dim() != 3 or x.shape[1] == 0:
        raise ValueError(
            f"run_rnn: expects a sequence [batch, time, features] of at least one step, got {list(x.shape)}"
        )
    if initial_state is not None or return_state:
        return _with_states(
            rnn, x, mask, go_backwards, return_sequences, zero_output_for_mask, initial_state, return_state
        )
    if x.shape[0] == 0:  # an empty batch: nothing to run (packing refuses it), outputs of the right shape
        width = rnn.hidden_size * (2 if bidirectional else 1)
        return x.new_zeros(0, x.shape[1], width) if return_sequences else x.new_zeros(0, width)
    if go_backwards:
        x = x.flip(1)
        mask = None if mask is None else mask.flip(1)
    if mask is not None:
        mask = mask.bool()
    # a traced graph cannot read the lengths packing needs, nor can a meta tensor (shapes only): steps
    if torch.compiler.is_compiling() or x.device.type == "meta":
        return _stepped(rnn, x, mask, return_sequences=return_sequences, zero=zero_output_for_mask)
    if mask is None:
        out, _ = rnn(x)
        return out if return_sequences else _last(out, bidirectional)
    kept, lengths, right_padded = kept_first(x, mask)
    packed = pack_padded_sequence(kept, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    packed_out, hn = rnn(packed)
    out, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=x.shape[1])
    if not return_sequences and bidirectional:  # each direction's last output is its final h, 0 where none ran
        h = hn[0] if isinstance(hn, tuple) else hn
        return torch.where((lengths > 0)[:, None], torch.cat([h[0], h[1]], dim=-1), 0.0)
    # the reverse direction's outputs, in time order, are the go_backwards layer's (Bidirectional zeroes them)
    seq = keras_outputs(out, mask, right_padded, zero=zero_output_for_mask)
    return seq if return_sequences else seq[:, -1]


def one_bias(rnn: nn.LSTM | nn.GRU | nn.RNN) -> nn.LSTM | nn.GRU | nn.RNN:
    """``rnn`` with one bias per gate, as Keras's LSTM (and SimpleRNN, GRU ``reset_after=False``) has: torch's
    cell adds ``bias_ih + bias_hh``, so its recurrent bias (``bias_hh_l0``, and ``bias_hh_l0_reverse``)
    becomes a zero buffer. The state dict keeps its keys; fine-tuning trains exactly Keras's variables,
    where a trainable second bias would take each gradient step twice (both get the same gradient).
    Returns the same module, changed in place."""
    for name in [n for n in rnn._flat_weights_names if n.startswith("bias_hh")]:
        zeros = torch.zeros_like(getattr(rnn, name), requires_grad=False)
        delattr(rnn, name)
        rnn.register_buffer(name, zeros)
        setattr(rnn, name, zeros)  # through RNNBase.__setattr__, which updates the list its kernels read
    return rnn


def _last(out: Tensor, bidirectional: bool) -> Tensor:
    """The last output of an unmasked run: the forward direction's last step, the reverse one's first."""
    units = out.shape[-1] // 2
    return torch.cat([out[:, -1, :units], out[:, 0, units:]], dim=-1) if bidirectional else out[:, -1]


def _with_states(
    rnn: nn.LSTM | nn.GRU,
    x: Tensor,
    mask: Tensor | None,
    go_backwards: bool,
    return_sequences: bool,
    zero: bool,
    initial_state: Sequence[Tensor] | None,
    return_state: bool,
) -> Any:
    """:func:`run_rnn` with Keras's initial states and final states (one direction), once run_rnn has checked
    the layer and the sequence."""
    lstm = isinstance(rnn, nn.LSTM)
    count = 2 if lstm else 1
    if rnn.bidirectional:
        raise ValueError("run_rnn: initial_state and return_state take a one-directional rnn")
    if initial_state is None:
        states = [x.new_zeros(x.shape[0], rnn.hidden_size)] * count
    else:
        states = [initial_state] if isinstance(initial_state, Tensor) else list(initial_state)
        if len(states) != count or any(s.shape != (x.shape[0], rnn.hidden_size) for s in states):
            shapes = [list(s.shape) for s in states]
            raise ValueError(
                f"run_rnn: initial_state is {count} tensor(s) of [{x.shape[0]}, {rnn.hidden_size}] "
                f"({'h, c' if lstm else 'h'}), got {shapes}"
            )
        states = [s.to(x.dtype) for s in states]
    if x.shape[0] == 0:  # an empty batch: nothing to run, outputs of the right shape and the initial states
        output = x.new_zeros(0, x.shape[1], rnn.hidden_size) if return_sequences else x.new_zeros(0, rnn.hidden_size)
        return (output, *states) if return_state else output
    if go_backwards:
        x = x.flip(1)
        mask = None if mask is None else mask.flip(1)
    h0: Any = tuple(s.unsqueeze(0).contiguous() for s in states) if lstm else states[0].unsqueeze(0).contiguous()
    if torch.compiler.is_compiling() or x.device.type == "meta":  # as run_rnn: steps, not packing
        final: list[Tensor] = []
        keep = None if mask is None else mask.bool()
        out = _stepped(rnn, x, keep, return_sequences=True, zero=zero, initial=states, finals=final)
    elif mask is None:
        out, hn = rnn(x, h0)
        final = [s[0] for s in hn] if lstm else [hn[0]]
    else:
        mask = mask.bool()
        kept, lengths, right_padded = kept_first(x, mask)
        packed = pack_padded_sequence(kept, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        packed_out, hn = rnn(packed, h0)
        out, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=x.shape[1])
        out = keras_outputs(out, mask, right_padded, zero=zero)
        ran = (lengths > 0)[:, None]  # a row the mask keeps nothing of keeps its initial states
        final = [torch.where(ran, s[0], s0) for s, s0 in zip(hn if lstm else (hn,), states, strict=True)]
    output = out if return_sequences else out[:, -1]
    return (output, *final) if return_state else output


def _stepped(
    rnn: nn.LSTM | nn.GRU,
    x: Tensor,
    mask: Tensor | None,
    *,
    return_sequences: bool,
    zero: bool,
    initial: list[Tensor] | None = None,
    finals: list[Tensor] | None = None,
) -> Tensor:
    """:func:`run_rnn` as a traced graph runs it: each direction through :func:`step_through` (``scan`` when
    exporting, so the length stays open; a Python loop under torch.compile). One direction may start from
    ``initial`` states and leave its final ones in ``finals``."""
    kind = "lstm" if isinstance(rnn, nn.LSTM) else "gru"
    exporting = getattr(torch.compiler, "is_exporting", lambda: True)()
    outputs = []
    for suffix in ("", "_reverse") if rnn.bidirectional else ("",):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l0{suffix}"), getattr(rnn, f"weight_hh_l0{suffix}")
        b_ih, b_hh = getattr(rnn, f"bias_ih_l0{suffix}", None), getattr(rnn, f"bias_hh_l0{suffix}", None)
        reverse = suffix == "_reverse"

        def step(xp: Tensor, states: list[Tensor], w_hh: Tensor = w_hh, b_hh: Tensor | None = b_hh):
            new = cell_step(kind, xp, F.linear(states[0], w_hh, b_hh), states)
            return new[0], new

        h = x.flip(1) if reverse else x
        keep = None if mask is None else (mask.flip(1) if reverse else mask)
        zeros = x.new_zeros(x.shape[0], rnn.hidden_size)
        states = initial if initial is not None else ([zeros, zeros] if kind == "lstm" else [zeros])
        seq, last = step_through(step, states, F.linear(h, w_ih, b_ih), keep, zero=zero, scan=exporting)
        if finals is not None:
            finals.extend(last)
        if return_sequences:
            outputs.append(seq.flip(1) if reverse else seq)
        else:
            outputs.append(seq[:, -1])
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)


def cell_step(
    kind: str,
    xp: Tensor,
    hp: Tensor,
    states: list[Tensor],
    *,
    act: Callable[[Tensor], Tensor] = torch.tanh,
    recurrent_act: Callable[[Tensor], Tensor] = torch.sigmoid,
) -> list[Tensor]:
    """One step of torch's cells, in torch's gate order: ``xp = x W_ih^T + b_ih`` and ``hp = h W_hh^T +
    b_hh`` [B, G·H] (G = 4 for ``"lstm"``, 3 for ``"gru"``, 1 for ``"simple_rnn"``), ``states`` [h] or
    [h, c] ([B, H] each) -> the new states, h first. With σ = ``recurrent_act``, φ = ``act``::

        lstm: i, f, g, o = xp + hp;  c' = σ(f) c + σ(i) φ(g);  h' = σ(o) φ(c')
        gru:  r = σ(x_r + h_r);  z = σ(x_z + h_z);  n = φ(x_n + r h_n);  h' = z h + (1 - z) n   (reset after)
        simple_rnn:  h' = φ(xp + hp)
    """
    if kind == "lstm":
        i, f, g, o = (xp + hp).chunk(4, dim=-1)
        c = recurrent_act(f) * states[1] + recurrent_act(i) * act(g)
        return [recurrent_act(o) * act(c), c]
    if kind == "gru":
        (x_r, x_z, x_n), (h_r, h_z, h_n) = xp.chunk(3, dim=-1), hp.chunk(3, dim=-1)
        r = recurrent_act(x_r + h_r)
        z = recurrent_act(x_z + h_z)
        n = act(x_n + r * h_n)
        return [z * states[0] + (1 - z) * n]
    return [act(xp + hp)]


def step_through(
    step: Step, states: list[Tensor], projected: Tensor, keep: Tensor | None, *, zero: bool, scan: bool = False
) -> tuple[Tensor, list[Tensor]]:
    """Keras's masked loop, literally: ``step(xp [B, G·H], states) -> (out [B, H], new states)`` at each of
    the T steps of ``projected`` [B, T, G·H] (the input's projection), the states kept and the output the
    previous one (or zeros, ``zero``) where ``keep`` [B, T] is False. Returns the outputs [B, T, H] and the
    final states. ``scan``: as one ``scan`` over time (torch's loop operator, ONNX's ``Scan``), which an
    exported graph runs at any length; else a Python loop."""
    units = states[0].shape[-1]
    batch = projected.shape[0]
    if scan:
        from torch._higher_order_ops.scan import scan as scan_op

        mask = torch.ones(projected.shape[:2], dtype=torch.bool, device=projected.device) if keep is None else keep

        def body(carry: list[Tensor], xs: list[Tensor]) -> tuple[list[Tensor], Tensor]:
            (xp, k), old, previous = xs, carry[:-1], carry[-1]
            out, new = step(xp, old)
            out = torch.where(k, out, torch.zeros_like(out) if zero else previous)
            new = [torch.where(k, n, o) for n, o in zip(new, old, strict=True)]
            return [*new, out], out.clone()  # scan wants outputs that alias no carry

        initial = [s.clone() for s in states] + [projected.new_zeros(batch, units)]  # carries alias nothing
        carry, seq = scan_op(body, initial, [projected.transpose(0, 1), mask.transpose(0, 1).unsqueeze(-1)])
        return seq.transpose(0, 1), list(carry[:-1])
    outputs: list[Tensor] = []
    previous = projected.new_zeros(batch, units)
    for t in range(projected.shape[1]):
        out, new = step(projected[:, t], states)
        if keep is not None:
            k = keep[:, t : t + 1]
            out = torch.where(k, out, torch.zeros_like(out) if zero else previous)
            new = [torch.where(k, n, s) for n, s in zip(new, states, strict=True)]
        outputs.append(out)
        previous, states = out, new
    seq = torch.stack(outputs, dim=1) if outputs else projected.new_zeros(batch, 0, units)
    return seq, states


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
    if right_padded and zero and bool(mask[:, :1].all()):
        return out  # a packed output is zero past each length already (a sample of no step ran one: not here)
    counts = mask.cumsum(1)  # kept steps up to and including each position
    index = (counts - 1).clamp(min=0).unsqueeze(-1).expand(-1, -1, out.shape[-1])
    return torch.where((mask if zero else counts > 0).unsqueeze(-1), out.gather(1, index), 0.0)
