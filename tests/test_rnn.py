"""rlcli.rnn's LSTM and GRU against torch's layers: outputs, states and gradients, with resets inside
the sequence, and the hand-written backward against autograd's numerical check."""

import pytest
import torch
from torch import nn

from rlcli.recurrent import Memory

STEPS, ENVS, FEATURES, SIZE = 7, 5, 3, 4


def _pair(kind: str) -> tuple[Memory, nn.Module]:
    """Our memory and torch's layer with the same weights (torch's two LSTM biases as ours, summed)."""
    torch.manual_seed(0)
    ours = Memory(kind, FEATURES, SIZE).double()
    ref = (nn.LSTM if kind == "lstm" else nn.GRU)(FEATURES, SIZE).double()
    with torch.no_grad():
        ref.weight_ih_l0.copy_(ours.w_ih)
        ref.weight_hh_l0.copy_(ours.w_hh)
        ref.bias_ih_l0.normal_()
        ours.b_ih.copy_(ref.bias_ih_l0)
        if kind == "lstm":
            ref.bias_hh_l0.zero_()
        else:
            ref.bias_hh_l0.normal_()
            ours.b_hh.copy_(ref.bias_hh_l0)
    return ours, ref


def _torch_steps(ref: nn.Module, kind: str, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """torch's layer one step at a time, the state zeroed where an episode starts."""
    outs = []
    for t in range(x.shape[0]):
        state = state * (~starts[t]).double().unsqueeze(-1)
        if kind == "lstm":
            h, c = state[:, :SIZE].unsqueeze(0).contiguous(), state[:, SIZE:].unsqueeze(0).contiguous()
            out, (h, c) = ref(x[t:t + 1], (h, c))
            state = torch.cat([h[0], c[0]], -1)
        else:
            out, h = ref(x[t:t + 1], state.unsqueeze(0).contiguous())
            state = h[0]
        outs.append(out[0])
    return torch.stack(outs)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_steps_and_replay_equal_torchs_layer_and_its_gradients(kind):
    ours, ref = _pair(kind)
    x = torch.randn(STEPS, ENVS, FEATURES, dtype=torch.double)
    state = torch.randn(ENVS, ours.state_size, dtype=torch.double)
    starts = torch.rand(STEPS, ENVS, generator=torch.Generator().manual_seed(1)) < 0.25
    starts[3, 0] = True  # at least one reset inside a sequence
    expected = _torch_steps(ref, kind, x, state, starts)

    carried, stepped = state.clone(), []
    with torch.no_grad():
        for t in range(STEPS):
            out, carried = ours.step(x[t], carried * (~starts[t]).double().unsqueeze(-1))
            stepped.append(out)
    torch.testing.assert_close(torch.stack(stepped), expected, rtol=0, atol=1e-12)

    weights = torch.randn(STEPS, ENVS, SIZE, dtype=torch.double)
    replayed = ours.replay(x, state, starts)
    torch.testing.assert_close(replayed, expected, rtol=0, atol=1e-12)
    (replayed * weights).sum().backward()
    (expected * weights).sum().backward()
    pairs = [(ours.w_ih, ref.weight_ih_l0), (ours.w_hh, ref.weight_hh_l0), (ours.b_ih, ref.bias_ih_l0)]
    if kind == "gru":
        pairs.append((ours.b_hh, ref.bias_hh_l0))
    for mine, theirs in pairs:
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_backward_passes_a_numerical_gradient_check(kind):
    ours, _ = _pair(kind)
    x = torch.randn(STEPS, ENVS, FEATURES, dtype=torch.double, requires_grad=True)
    state = torch.randn(ENVS, ours.state_size, dtype=torch.double, requires_grad=True)
    starts = torch.zeros(STEPS, ENVS, dtype=torch.bool)
    starts[2, 1] = starts[5, 3] = True
    assert torch.autograd.gradcheck(lambda a, b: ours.replay(a, b, starts), (x, state))


def test_a_reset_cuts_the_gradient_to_what_came_before():
    """Where an episode starts, nothing of the previous episode reaches the outputs that follow."""
    ours, _ = _pair("lstm")
    x = torch.randn(STEPS, 1, FEATURES, dtype=torch.double, requires_grad=True)
    starts = torch.zeros(STEPS, 1, dtype=torch.bool)
    starts[4] = True
    ours.replay(x, torch.zeros(1, ours.state_size, dtype=torch.double), starts)[4:].sum().backward()
    assert x.grad[:4].abs().max() == 0 and x.grad[4:].abs().min() > 0
