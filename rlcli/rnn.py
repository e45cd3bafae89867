"""LSTM and GRU layers over sequences with resets inside them, forward and backward written out.

torch's CPU LSTM is a composite of small ops that autograd records step by step: one step of a 64-unit
LSTM for 8 envs costs about 350 µs through ``nn.LSTM``, and the backward of a 32-step sequence 8 ms.
Here the input projection of every step is one matrix product, each step's recurrence is one product and
a handful of in-place element-wise ops, and the backward is one hand-written loop whose weight gradient
is one product over all steps. Gate layouts and maths are torch's (``nn.LSTM``: i, f, g, o; ``nn.GRU``:
r, z, n with the reset gate applied after the hidden product), and the tests check both against torch's
layers and autograd.

``keep`` [T, B, 1] is 0 where an episode starts: the state entering that step is set to zero there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F


def lstm_cell(gates_x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh_t: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One LSTM step from the input's share of the gates [B, 4H]: (h, c, sigmoid of the gates, tanh of
    the cell input g, tanh of the new cell state)."""
    size = h.shape[-1]
    gates = torch.addmm(gates_x, h, w_hh_t)
    act = torch.sigmoid(gates)
    g = torch.tanh(gates[:, 2 * size:3 * size])
    c_new = torch.addcmul(act[:, size:2 * size] * c, act[:, :size], g)
    tc = torch.tanh(c_new)
    return act[:, 3 * size:] * tc, c_new, act, g, tc


class LSTMSequence(torch.autograd.Function):
    """The forward keeps, per step, the factors its backward multiplies by, computed for all steps at
    once after the loop; the backward is then a few multiplications and one product a step."""

    @staticmethod
    def forward(ctx: Any, gates_x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, keep: torch.Tensor,
                resets: list[bool], w_hh: torch.Tensor) -> torch.Tensor:
        w_hh_t = w_hh.t()
        h, c = h0, c0
        outs, hs, cs, acts, gs, tcs = [], [], [], [], [], []
        for t in range(gates_x.shape[0]):
            if resets[t]:
                h, c = h * keep[t], c * keep[t]
            hs.append(h)
            cs.append(c)
            h, c, act, g, tc = lstm_cell(gates_x[t], h, c, w_hh_t)
            outs.append(h)
            acts.append(act)
            gs.append(g)
            tcs.append(tc)
        size = h0.shape[-1]
        act, g, tc, c_in = torch.stack(acts), torch.stack(gs), torch.stack(tcs), torch.stack(cs)
        i, f, o = act[..., :size], act[..., size:2 * size], act[..., 3 * size:]
        slopes = act * (1.0 - act)  # sigmoid'
        # d gates = [dc * g i', dc * c f', dc * i (1 - g^2), dh * tanh(c) o'] and dc += dh * o (1 - tanh(c)^2)
        factors = torch.cat([g * slopes[..., :size], c_in * slopes[..., size:2 * size], i * (1.0 - g * g),
                             tc * slopes[..., 3 * size:]], -1)
        ctx.resets = resets
        ctx.save_for_backward(keep, w_hh, torch.stack(hs), factors, o * (1.0 - tc * tc), f)
        return torch.stack(outs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        keep, w_hh, hs, factors, cell_slope, forget = ctx.saved_tensors
        steps, batch, size = hs.shape
        grad_gates = torch.empty_like(factors)
        dh = torch.zeros_like(hs[0])
        dc = torch.zeros_like(hs[0])
        for t in range(steps - 1, -1, -1):
            dh = dh + grad_out[t]
            dc = torch.addcmul(dc, dh, cell_slope[t])
            d = grad_gates[t]
            cell = d.view(batch, 4, size)
            torch.mul(dc.unsqueeze(1), factors[t].view(batch, 4, size)[:, :3], out=cell[:, :3])
            torch.mul(dh, factors[t, :, 3 * size:], out=cell[:, 3])
            dh = d.mm(w_hh)
            dc = dc * forget[t]
            if ctx.resets[t]:
                dh, dc = dh * keep[t], dc * keep[t]
        grad_w = grad_gates.flatten(0, 1).t().mm(hs.flatten(0, 1)) if ctx.needs_input_grad[5] else None
        return grad_gates, dh, dc, None, None, grad_w


def gru_cell(gates_x: torch.Tensor, h: torch.Tensor, w_hh_t: torch.Tensor, b_hh: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One GRU step from the input's share of the gates [B, 3H]: (h, sigmoid of r and z, n, the hidden
    product's n part)."""
    size = h.shape[-1]
    gates_h = torch.addmm(b_hh, h, w_hh_t)
    rz = torch.sigmoid(gates_x[:, :2 * size] + gates_h[:, :2 * size])
    hn = gates_h[:, 2 * size:]
    n = torch.tanh(torch.addcmul(gates_x[:, 2 * size:], rz[:, :size], hn))
    return torch.addcmul(n, rz[:, size:], h - n), rz, n, hn


class GRUSequence(torch.autograd.Function):
    """As ``LSTMSequence``: the backward's factors computed for all steps after the forward's loop."""

    @staticmethod
    def forward(ctx: Any, gates_x: torch.Tensor, h0: torch.Tensor, keep: torch.Tensor, resets: list[bool],
                w_hh: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
        w_hh_t = w_hh.t()
        h = h0
        outs, hs, rzs, ns, hns = [], [], [], [], []
        for t in range(gates_x.shape[0]):
            if resets[t]:
                h = h * keep[t]
            hs.append(h)
            h, rz, n, hn = gru_cell(gates_x[t], h, w_hh_t, b_hh)
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
        steps, batch, size = hs.shape
        grad_x = torch.empty_like(factors)
        grad_h = torch.empty_like(factors)
        dh = torch.zeros_like(hs[0])
        for t in range(steps - 1, -1, -1):
            dh = dh + grad_out[t]
            dx, dgh = grad_x[t], grad_h[t]
            dn = torch.mul(dh, factors[t, :, 2 * size:], out=dx[:, 2 * size:])
            torch.mul(dn, factors[t, :, :size], out=dx[:, :size])
            torch.mul(dh, factors[t, :, size:2 * size], out=dx[:, size:2 * size])
            dgh[:, :2 * size] = dx[:, :2 * size]
            torch.mul(dn, reset_gate[t], out=dgh[:, 2 * size:])
            dh = torch.addcmul(dgh.mm(w_hh), dh, update_gate[t])
            if ctx.resets[t]:
                dh = dh * keep[t]
        flat = grad_h.flatten(0, 1)
        grad_w = flat.t().mm(hs.flatten(0, 1)) if ctx.needs_input_grad[4] else None
        grad_b = flat.sum(0) if ctx.needs_input_grad[5] else None
        return grad_x, dh, None, None, grad_w, grad_b


def lstm_sequence(x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, w_ih: torch.Tensor,
                  w_hh: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Outputs [T, B, H] of an LSTM over x [T, B, F] from state [B, 2H] (h then c)."""
    size = w_hh.shape[1]
    gates_x = F.linear(x, w_ih, bias)
    return LSTMSequence.apply(gates_x, state[:, :size], state[:, size:], keep, _resets(keep), w_hh)


def gru_sequence(x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, w_ih: torch.Tensor,
                 w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """Outputs [T, B, H] of a GRU over x [T, B, F] from state [B, H]."""
    return GRUSequence.apply(F.linear(x, w_ih, b_ih), state, keep, _resets(keep), w_hh, b_hh)


def _resets(keep: torch.Tensor) -> list[bool]:
    """Per step, whether any row's state is reset there: the others skip the masking (one read of
    [T] flags against two element-wise ops a step)."""
    return (keep == 0).flatten(1).any(1).tolist()
