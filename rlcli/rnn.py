"""LSTM and GRU layers over sequences with resets inside them, for ``M`` independent members at once (an
actor's memory and a critic's).

On a CPU, torch runs a float32 LSTM over a whole sequence as one oneDNN kernel, near the machine's
arithmetic rate, but that kernel cannot set a state to zero inside the sequence. ``fused_lstm_sequence``
gives it the resets as steps of their own: before each step where an episode starts, a row gets an extra
step whose input is an indicator feature that drives the input, forget and output gates to exactly 0, so
that step leaves h = c = 0 and passes no gradient back.

Elsewhere (float64, CUDA, builds without oneDNN, and the GRU, which torch runs step by step on a CPU) the
layers here are written out: the input projection of every step is one batched product, each step's
recurrence one batched product and a handful of element-wise ops for all members together, and the
backward one hand-written loop whose weight gradient is one product over all steps. On a CPU such small ops
cost their call more than their arithmetic, so the members share every call. Gate layouts and maths are
torch's (``nn.LSTM``: i, f, g, o; ``nn.GRU``: r, z, n, the reset gate applied after the hidden product),
and the tests check both against torch's layers and autograd.

Shapes: inputs [M, T, B, F], states [M, B, S], weights [M, gates, F or H]. The written-out layers return
their outputs time first, [T, M, B, H], and take ``keep`` [T, 1, B, 1], 0 where an episode starts (the
state entering that step is set to zero there); ``fused_lstm_sequence`` returns [M, T, B, H] and takes
``starts`` [T, B], true there.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import numpy as np
import torch


def lstm_cell(gates_x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh_t: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One LSTM step from the input's share of the gates [M, B, 4H]: (h, c, sigmoid of the gates, tanh
    of the cell input g, tanh of the new cell state)."""
    size = h.shape[-1]
    gates = torch.baddbmm(gates_x, h, w_hh_t)
    act = torch.sigmoid(gates)
    g = torch.tanh(gates[..., 2 * size:3 * size])
    c_new = torch.addcmul(act[..., size:2 * size] * c, act[..., :size], g)
    tc = torch.tanh(c_new)
    return act[..., 3 * size:] * tc, c_new, act, g, tc


class LSTMSequence(torch.autograd.Function):
    """Each step writes its results into storage for all steps (no per-step lists to stack, no fresh
    tensors); the inputs of each step and the factors the backward multiplies by are computed for all
    steps at once after the loop, so the backward is a few multiplications and one product a step.

    Where an episode starts, ``gates_x`` holds -inf as the forget gate's input (``lstm_sequence`` puts it
    there): the gate is then 0, which drops the cell state entering the step in the op that computes the
    gate, and stops its gradient in the one that carries it back, so only the hidden state is masked."""

    @staticmethod
    def forward(ctx: Any, gates_x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, keep: torch.Tensor,
                resets: list[bool], w_hh: torch.Tensor, space: _Workspace) -> torch.Tensor:
        w_hh_t = w_hh.transpose(1, 2).contiguous()  # a product with a transposed view costs 8 against 4.7 µs
        size = h0.shape[-1]
        steps = gates_x.shape[0]
        acts, tanh_g, cells, tanh_c, gates = space.acts, space.tanh_g, space.cells, space.tanh_c, space.gates
        outs = torch.empty_like(tanh_g)
        storage = zip(gates_x.unbind(0), space.steps, outs.unbind(0), strict=True)
        i_s, f_s, o_s = space.i_s, space.f_s, space.o_s
        h, c = h0, c0
        for t, (gates_t, (act_t, g_t, c_t, tc_t), h_t) in enumerate(storage):
            if resets[t]:
                h = torch.mul(h, keep[t], out=space.kept)
            torch.baddbmm(gates_t, h, w_hh_t, out=gates)
            torch.sigmoid(gates, out=act_t)
            torch.tanh(space.gate_g, out=g_t)
            c = torch.addcmul(torch.mul(f_s[t], c, out=c_t), i_s[t], g_t, out=c_t)
            h = torch.mul(o_s[t], torch.tanh(c, out=tc_t), out=h_t)
        # the hidden state that entered each step: the previous step's output, zero where an episode starts
        h_in = torch.cat([h0.unsqueeze(0), outs[:-1]]).mul_(keep)
        # d gates = [dc * g i', dc * c_in f', dc * i (1 - g^2), dh * tanh(c) o'] and dc += dh * o (1 - tanh(c)^2);
        # f' is 0 where the cell state entering is dropped, so c_in needs no mask
        slopes = (1.0 - acts).mul_(acts)  # sigmoid'
        factors, by_gate, act = space.factors, space.by_gate, space.gate
        slope = slopes.view(steps, *h0.shape[:2], 4, size).unbind(3)
        torch.mul(tanh_g, slope[0], out=by_gate[0])
        torch.mul(c0, slope[1][0], out=by_gate[1][0])
        torch.mul(cells[:-1], slope[1][1:], out=by_gate[1][1:])
        # CUDA's addcmul takes no CPU scalar as its first argument
        one = _ONE if acts.device.type == "cpu" else acts.new_ones(())
        torch.mul(torch.addcmul(one, tanh_g, tanh_g, value=-1.0), act[0], out=by_gate[2])
        torch.mul(tanh_c, slope[3], out=by_gate[3])
        ctx.resets, ctx.space = resets, space
        space.owner = weakref.ref(ctx)  # alive while a graph holds this sequence for its backward
        ctx.save_for_backward(keep, w_hh, h_in, factors,
                              torch.addcmul(one, tanh_c, tanh_c, value=-1.0, out=space.cell_slope).mul_(act[3]),
                              space.forget.copy_(act[1]))
        return outs

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # the cell slopes and forget gates are saved for autograd's check that nothing overwrote them; their
        # step views are the workspace's
        keep, w_hh, hs, factors, _, _ = ctx.saved_tensors
        steps, members, batch, size = hs.shape
        space = ctx.space
        space.owner = None
        # per step: the three gates that dc drives, then o, which dh drives
        by_dc, by_dh, slopes, forgets = space.by_dc, space.by_dh, space.slopes, space.forgets
        grad_gates = torch.empty_like(factors)
        into_dc = grad_gates.view(steps, members, batch, 4, size)[:, :, :, :3].unbind(0)
        into_dh = grad_gates[..., 3 * size:].unbind(0)
        grads, keeps, rows = grad_out.unbind(0), keep.unbind(0), grad_gates.unbind(0)
        dh, dh_next = grads[-1], torch.empty_like(hs[0])
        dc = torch.zeros_like(hs[0])
        for t in range(steps - 1, -1, -1):
            dc.addcmul_(dh, slopes[t])
            torch.mul(dc.unsqueeze(2), by_dc[t], out=into_dc[t])
            torch.mul(dh, by_dh[t], out=into_dh[t])
            dc.mul_(forgets[t])  # 0 where the step dropped the cell state
            # what reaches the previous step's output: its own gradient and this step's, masked where it started
            if ctx.resets[t]:
                carried = torch.bmm(rows[t], w_hh).mul_(keeps[t])
                dh = carried if t == 0 else torch.add(grads[t - 1], carried, out=dh_next)
            else:
                dh = torch.bmm(rows[t], w_hh) if t == 0 else torch.baddbmm(grads[t - 1], rows[t], w_hh, out=dh_next)
        grad_w = _weight_grad(grad_gates, hs) if ctx.needs_input_grad[5] else None
        return grad_gates, dh, dc, None, None, grad_w, None


_ONE = torch.ones(())  # 1 - x * x in one op, as addcmul(1, x, x, value=-1)


class _Workspace:
    """Storage that ``LSTMSequence`` writes for one sequence (gate activations, the tanh of g, cell states
    and their tanh; the backward's factors, cell slopes and forget gates) with each step's views of it: an
    update replays sequences of one shape epoch after epoch, and a sequence's step views cost a call per
    step and buffer (12 µs for 32 steps), so they are taken once per shape. The outputs and the hidden
    states saved for the backward are new tensors every call. ``owner``: the sequence whose backward has
    yet to read it, while a graph holds that sequence; another sequence then gets storage of its own."""

    owner: weakref.ref[Any] | None = None

    def __init__(self, gates_x: torch.Tensor, h0: torch.Tensor) -> None:
        steps, size = gates_x.shape[0], h0.shape[-1]
        by_gate = (steps, *h0.shape[:2], 4, size)
        self.acts, self.tanh_g = torch.empty_like(gates_x), gates_x.new_empty(steps, *h0.shape)
        self.cells, self.tanh_c = torch.empty_like(self.tanh_g), torch.empty_like(self.tanh_g)
        self.gates, self.kept = torch.empty_like(gates_x[0]), torch.empty_like(h0)  # one step's, reused
        self.gate_g = self.gates[..., 2 * size:3 * size]
        self.gate = self.acts.view(by_gate).unbind(3)
        self.i_s, self.f_s, self.o_s = self.gate[0].unbind(0), self.gate[1].unbind(0), self.gate[3].unbind(0)
        self.steps = list(zip(self.acts.unbind(0), self.tanh_g.unbind(0), self.cells.unbind(0),
                              self.tanh_c.unbind(0), strict=True))
        self.factors = torch.empty_like(gates_x)
        factors = self.factors.view(by_gate)
        self.by_gate, self.by_dc = factors.unbind(3), factors[:, :, :, :3].unbind(0)
        self.by_dh = self.factors[..., 3 * size:].unbind(0)
        self.cell_slope, self.forget = torch.empty_like(self.tanh_g), torch.empty_like(self.tanh_g)
        self.slopes, self.forgets = self.cell_slope.unbind(0), self.forget.unbind(0)


_WORKSPACES: dict[tuple[Any, ...], _Workspace] = {}
MAX_WORKSPACES = 4  # an update's shapes: its minibatches', and a shorter last one


def _workspace(gates_x: torch.Tensor, h0: torch.Tensor) -> _Workspace:
    """This thread's workspace for sequences of this shape, type and device (the first made dropped beyond
    ``MAX_WORKSPACES``), or new storage where that one awaits a backward (a second forward before it, as
    in a numerical gradient check)."""
    key = (threading.get_ident(), tuple(gates_x.shape), tuple(h0.shape), gates_x.dtype, gates_x.device)
    space = _WORKSPACES.get(key)
    if space is None:
        if len(_WORKSPACES) >= MAX_WORKSPACES:
            del _WORKSPACES[next(iter(_WORKSPACES))]
        space = _WORKSPACES[key] = _Workspace(gates_x, h0)
    elif space.owner is not None and space.owner() is not None:
        space = _Workspace(gates_x, h0)
    return space


def gru_cell(gates_x: torch.Tensor, h: torch.Tensor, w_hh_t: torch.Tensor, b_hh: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One GRU step from the input's share of the gates [M, B, 3H]: (h, sigmoid of r and z, n, the hidden
    product's n part)."""
    size = h.shape[-1]
    gates_h = torch.baddbmm(b_hh, h, w_hh_t)
    rz = torch.sigmoid(gates_x[..., :2 * size] + gates_h[..., :2 * size])
    hn = gates_h[..., 2 * size:]
    n = torch.tanh(torch.addcmul(gates_x[..., 2 * size:], rz[..., :size], hn))
    return torch.addcmul(n, rz[..., size:], h - n), rz, n, hn


class GRUSequence(torch.autograd.Function):
    """As ``LSTMSequence``: the backward's factors computed for all steps after the forward's loop."""

    @staticmethod
    def forward(ctx: Any, gates_x: torch.Tensor, h0: torch.Tensor, keep: torch.Tensor, resets: list[bool],
                w_hh: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
        w_hh_t = w_hh.transpose(1, 2).contiguous()  # a product with a transposed view costs 8 against 4.7 µs
        bias = b_hh.unsqueeze(1)
        h = h0
        outs, hs, rzs, ns, hns = [], [], [], [], []
        for t, gates_t in enumerate(gates_x.unbind(0)):
            if resets[t]:
                h = h * keep[t]
            hs.append(h)
            h, rz, n, hn = gru_cell(gates_t, h, w_hh_t, bias)
            outs.append(h)
            rzs.append(rz)
            ns.append(n)
            hns.append(hn)
        size = h0.shape[-1]
        h_in, rz, n, hn = torch.stack(hs), torch.stack(rzs), torch.stack(ns), torch.stack(hns)
        r, z = rz[..., :size], rz[..., size:]
        slopes = rz * (1.0 - rz)
        # with dn = dh (1 - z)(1 - n^2): d x-gates = [dn hn r', dh (h - n) z', dn], d h-gates = [.., .., dn r]
        factors = torch.cat([hn * slopes[..., :size], (h_in - n) * slopes[..., size:], (1.0 - z) * (1.0 - n * n)], -1)
        ctx.resets = resets
        ctx.save_for_backward(keep, w_hh, h_in, factors, r, z)
        return torch.stack(outs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        keep, w_hh, hs, factors, reset_gate, update_gate = ctx.saved_tensors
        steps, size = hs.shape[0], hs.shape[-1]
        grad_x = torch.empty_like(factors)
        grad_h = torch.empty_like(factors)
        dh = torch.zeros_like(hs[0])
        for t in range(steps - 1, -1, -1):
            dh = dh + grad_out[t]
            dx, dgh = grad_x[t], grad_h[t]
            dn = torch.mul(dh, factors[t, ..., 2 * size:], out=dx[..., 2 * size:])
            torch.mul(dn, factors[t, ..., :size], out=dx[..., :size])
            torch.mul(dh, factors[t, ..., size:2 * size], out=dx[..., size:2 * size])
            dgh[..., :2 * size] = dx[..., :2 * size]
            torch.mul(dn, reset_gate[t], out=dgh[..., 2 * size:])
            dh = torch.addcmul(torch.bmm(dgh, w_hh), dh, update_gate[t])
            if ctx.resets[t]:
                dh = dh * keep[t]
        grad_w = _weight_grad(grad_h, hs) if ctx.needs_input_grad[4] else None
        grad_b = grad_h.sum((0, 2)) if ctx.needs_input_grad[5] else None
        return grad_x, dh, None, None, grad_w, grad_b


def _weight_grad(grad_gates: torch.Tensor, hs: torch.Tensor) -> torch.Tensor:
    """sum over steps and rows of grad_gates^T h, per member: [M, gates, H] from [T, M, B, ...]."""
    members = hs.shape[1]
    grads = grad_gates.transpose(0, 1).reshape(members, -1, grad_gates.shape[-1])
    return torch.bmm(grads.transpose(1, 2), hs.transpose(0, 1).reshape(members, -1, hs.shape[-1]))


def input_gates(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor) -> torch.Tensor:
    """Every step's input share of the gates, time first [T, M, B, gates], from x [M, T, B, F]: one product."""
    members, steps, batch, features = x.shape
    gates = torch.baddbmm(b_ih.unsqueeze(1), x.reshape(members, steps * batch, features), w_ih.transpose(1, 2))
    return gates.view(members, steps, batch, -1).transpose(0, 1).contiguous()


def lstm_sequence(x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, w_ih: torch.Tensor,
                  w_hh: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Outputs [T, M, B, H] of an LSTM over x [M, T, B, F] from state [M, B, 2H] (h then c)."""
    size = w_hh.shape[-1]
    gates_x = input_gates(x, w_ih, bias)
    resets = _resets(keep)
    if any(resets):  # the forget gate drops the cell state where an episode starts (see LSTMSequence)
        with torch.no_grad():  # nothing saved gates_x, and LSTMSequence's gradient there is already 0
            gates_x[..., size:2 * size].masked_fill_(keep == 0, -math.inf)
    h0, c0 = state[..., :size].contiguous(), state[..., size:].contiguous()
    return LSTMSequence.apply(gates_x, h0, c0, keep, resets, w_hh, _workspace(gates_x, h0))


def gru_sequence(x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, w_ih: torch.Tensor,
                 w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """Outputs [T, M, B, H] of a GRU over x [M, T, B, F] from state [M, B, H]."""
    gates_x = input_gates(x, w_ih, b_ih)
    return GRUSequence.apply(gates_x, state.contiguous(), keep, _resets(keep), w_hh, b_hh)


def _resets(keep: torch.Tensor) -> list[bool]:
    """Per step, whether any row's state is reset there: the others skip the masking (one read of
    [T] flags against two element-wise ops a step)."""
    return (keep == 0).flatten(1).any(1).tolist()


def fused_lstm_available(x: torch.Tensor) -> bool:
    """Whether torch runs an LSTM over x's whole sequence as one kernel: oneDNN's, float32 on a CPU."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and bool(torch.backends.mkldnn.enabled))


# an inserted step's gate input: float32's sigmoid is exactly 0 below about -104, and the step adds only
# the recurrent product and the bias to it; finite, so that 0 * it is 0, and small enough that the
# gradient the kernel computes for the (discarded) indicator column stays finite
_CLOSED = -1e10


def fused_lstm_sequence(x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, w_ih: torch.Tensor,
                        w_hh: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Outputs [M, T, B, H] of an LSTM over x [M, T, B, F] from state [M, B, 2H] (h then c), the state set
    to zero where ``starts`` [T, B] is true, through torch's one-kernel LSTM (see the module's note)."""
    members, steps, batch, features = x.shape
    size = w_hh.shape[-1]
    entering = (~starts[0]).to(x.dtype).unsqueeze(-1)
    h0, c0 = state[..., :size] * entering, state[..., size:] * entering
    inputs, weights, layout = x, w_ih, _inserted_steps(starts)
    if layout is not None:
        reads, places, padded = layout  # places: each step's position in the longer sequence
        rows = x.new_zeros(members, steps * batch + 2, features + 1)  # x's rows, a zero row, the indicator
        rows[:, :-2, :features] = x.reshape(members, steps * batch, features)
        rows[:, -1, features] = 1.0
        inputs = rows.index_select(1, reads).view(members, padded, batch, features + 1)
        closing = w_ih.new_full((members, 4, size), _CLOSED)
        closing[:, 2] = 0.0  # g's weight: its gate is multiplied by the closed input gate
        weights = torch.cat([w_ih, closing.view(members, 4 * size, 1)], 2)
    no_hh_bias, train = bias.new_zeros(bias.shape[-1]), torch.is_grad_enabled()
    # unbind, not indexing: its backward stacks the members' gradients in one op, where each index's
    # backward fills a zero tensor of all members and the members' gradients are then added up
    per_member = zip(inputs.unbind(0), h0.unsqueeze(1).unbind(0), c0.unsqueeze(1).unbind(0), weights.unbind(0),
                     w_hh.unbind(0), bias.unbind(0), strict=True)
    outs = torch.stack([torch.lstm(x_m, (h_m, c_m), [w_m, hh_m, b_m, no_hh_bias], True, 1, 0.0, train, False, False)[0]
                        for x_m, h_m, c_m, w_m, hh_m, b_m in per_member])
    if layout is None:
        return outs
    return outs.view(members, -1, size).index_select(1, places).view(members, steps, batch, size)


def _inserted_steps(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """None where no episode starts after the first step; otherwise the layout with a step inserted before
    each such start: (for each position of the padded [T', B] sequence, flattened, the row it reads of x's
    rows, a zero row and the indicator row; for each of the [T, B] steps, its position there; T')."""
    inner = starts[1:].numpy()
    if not inner.any():
        return None
    steps, batch = starts.shape
    inserted = np.zeros((steps, batch), np.int64)
    np.cumsum(inner, 0, out=inserted[1:])
    places = (np.arange(steps)[:, None] + inserted) * batch + np.arange(batch)
    padded = steps + int(inserted[-1].max())
    reads = np.full(padded * batch, steps * batch)  # beyond a row's last step: the zero row, outputs unread
    reads[places.ravel()] = np.arange(steps * batch)
    reads[places[1:][inner] - batch] = steps * batch + 1
    return torch.from_numpy(reads), torch.from_numpy(places.ravel()), padded
