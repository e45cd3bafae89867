"""LSTM and GRU layers over sequences with resets inside them, for ``M`` independent members at once (an
actor's memory and a critic's).

``cell_sequence`` is the plain form: every step's input projection as one batched product, then one cell
step a time for all members together, the state set to zero where an episode starts; autograd takes the
gradient, and ``torch.compile`` sees every op. Gate layouts and maths are torch's (``nn.LSTM``: i, f, g,
o; ``nn.GRU``: r, z, n, the reset gate applied after the hidden product), which the tests check.

On a CPU, torch runs a float32 LSTM over a whole sequence as one oneDNN kernel, but that kernel cannot set
a state to zero inside the sequence. ``fused_lstm_sequence`` gives it the resets as steps of their own:
before each step where an episode starts, a row gets an extra step whose input is an indicator feature
that drives the input, forget and output gates to exactly 0, so that step leaves h = c = 0 and passes no
gradient back. ``Memory`` takes it where it is available and the run is not compiled.

Shapes: inputs [M, T, B, F], states [M, B, S], weights [M, gates, F or H], outputs [M, T, B, H].
"""

from __future__ import annotations

import numpy as np
import torch


def lstm_cell(gates_x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh_t: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step from the input's share of the gates [M, B, 4H]: (h, c)."""
    i, f, g, o = torch.baddbmm(gates_x, h, w_hh_t).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def gru_cell(gates_x: torch.Tensor, h: torch.Tensor, w_hh_t: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """One GRU step from the input's share of the gates [M, B, 3H]: the next h."""
    x_r, x_z, x_n = gates_x.chunk(3, -1)
    h_r, h_z, h_n = torch.baddbmm(b_hh, h, w_hh_t).chunk(3, -1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    return n + z * (h - n)


def cell_sequence(x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, w_ih: torch.Tensor,
                  w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor | None) -> torch.Tensor:
    """Outputs [M, T, B, H] of an LSTM (``b_hh`` None; state h then c) or a GRU over x [M, T, B, F] from
    ``state`` [M, B, S], the state set to zero at every step where ``starts`` [T, B] is true."""
    members, steps, batch, features = x.shape
    size = w_hh.shape[-1]
    gates_x = torch.baddbmm(b_ih.unsqueeze(1), x.reshape(members, steps * batch, features), w_ih.transpose(1, 2))
    gates_x = gates_x.view(members, steps, batch, -1)
    keep = (~starts).to(x.dtype).unsqueeze(-1)  # [T, B, 1]
    w_hh_t = w_hh.transpose(1, 2)
    outs = []
    if b_hh is None:
        h, c = state[..., :size], state[..., size:]
        for t in range(steps):
            h, c = lstm_cell(gates_x[:, t], h * keep[t], c * keep[t], w_hh_t)
            outs.append(h)
    else:
        h, bias = state, b_hh.unsqueeze(1)
        for t in range(steps):
            h = gru_cell(gates_x[:, t], h * keep[t], w_hh_t, bias)
            outs.append(h)
    return torch.stack(outs, 1)


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
