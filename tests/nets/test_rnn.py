"""rlcli.nets.rnn's LSTM and GRU against torch's layers: outputs, states and gradients of each member, with
resets inside the sequence, and autograd's numerical check (in float64, where the LSTM is the plain cell
loop); the float32 replay through torch's one-kernel LSTM against that loop."""

import copy
from unittest.mock import patch

import pytest
import torch
from torch import nn

from rlcli.nets.recurrent import Memory
from rlcli.nets.rnn import _inserted_steps, fused_lstm_available

STEPS, ENVS, FEATURES, SIZE, MEMBERS = 7, 5, 3, 4, 2


def _pair(kind: str) -> tuple[Memory, list[nn.Module]]:
    """Our memory and, per member, torch's layer with the same weights (torch's two LSTM biases as ours)."""
    torch.manual_seed(0)
    ours = Memory(kind, FEATURES, SIZE, members=MEMBERS).double()
    refs = []
    for m in range(MEMBERS):
        ref = (nn.LSTM if kind == "lstm" else nn.GRU)(FEATURES, SIZE).double()
        with torch.no_grad():
            ref.weight_ih_l0.copy_(ours.w_ih[m])
            ref.weight_hh_l0.copy_(ours.w_hh[m])
            ref.bias_ih_l0.normal_()
            ours.b_ih[m].copy_(ref.bias_ih_l0)
            if kind == "lstm":
                ref.bias_hh_l0.zero_()
            else:
                ref.bias_hh_l0.normal_()
                ours.b_hh[m].copy_(ref.bias_hh_l0)
        refs.append(ref)
    return ours, refs


def _torch_steps(ref: nn.Module, kind: str, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """torch's layer one step at a time over x [T, B, F], the state zeroed where an episode starts."""
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


def _inputs(state_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(MEMBERS, STEPS, ENVS, FEATURES, dtype=torch.double)
    state = torch.randn(MEMBERS, ENVS, state_size, dtype=torch.double)
    starts = torch.rand(STEPS, ENVS, generator=torch.Generator().manual_seed(1)) < 0.25
    starts[3, 0] = True  # at least one reset inside a sequence
    return x, state, starts


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_steps_and_replay_equal_torchs_layer_and_its_gradients(kind):
    ours, refs = _pair(kind)
    x, state, starts = _inputs(ours.state_size)
    expected = torch.stack([_torch_steps(ref, kind, x[m], state[m], starts) for m, ref in enumerate(refs)])

    carried, stepped = state.clone(), []
    with torch.no_grad():
        for t in range(STEPS):
            out, carried = ours.step(x[:, t], carried * (~starts[t]).double()[None, :, None])
            stepped.append(out)
    torch.testing.assert_close(torch.stack(stepped, 1), expected, rtol=0, atol=1e-12)

    weights = torch.randn(MEMBERS, STEPS, ENVS, SIZE, dtype=torch.double)
    replayed = ours.replay(x, state, starts)
    torch.testing.assert_close(replayed, expected, rtol=0, atol=1e-12)
    (replayed * weights).sum().backward()
    (expected * weights).sum().backward()
    for m, ref in enumerate(refs):
        pairs = [(ours.w_ih, ref.weight_ih_l0), (ours.w_hh, ref.weight_hh_l0), (ours.b_ih, ref.bias_ih_l0)]
        if kind == "gru":
            pairs.append((ours.b_hh, ref.bias_hh_l0))
        for mine, theirs in pairs:
            torch.testing.assert_close(mine.grad[m], theirs.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_backward_passes_a_numerical_gradient_check(kind):
    ours, _ = _pair(kind)
    x, state, starts = _inputs(ours.state_size)
    x.requires_grad_()
    state.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ours.replay(a, b, starts), (x, state))


def test_a_reset_cuts_the_gradient_to_what_came_before():
    """Where an episode starts, nothing of the previous episode reaches the outputs that follow."""
    ours, _ = _pair("lstm")
    x = torch.randn(MEMBERS, STEPS, 1, FEATURES, dtype=torch.double, requires_grad=True)
    starts = torch.zeros(STEPS, 1, dtype=torch.bool)
    starts[4] = True
    ours.replay(x, torch.zeros(MEMBERS, 1, ours.state_size, dtype=torch.double), starts)[:, 4:].sum().backward()
    assert x.grad[:, :4].abs().max() == 0 and x.grad[:, 4:].abs().min() > 0


def test_sequences_replayed_before_a_backward_leave_its_gradients_alone():
    """The LSTM's storage is kept between sequences of a shape; a second sequence, or one without
    gradients, computed before the first one's backward must not change that backward's result."""
    ours, _ = _pair("lstm")
    x, state, starts = _inputs(ours.state_size)
    ours.replay(x, state, starts).sum().backward()
    alone = ours.w_hh.grad.clone()
    ours.zero_grad()
    first = ours.replay(x, state, starts)
    ours.replay(x.flip(1), state, starts).sum().backward()
    with torch.no_grad():
        ours.replay(-x, state, starts)
    ours.zero_grad()
    first.sum().backward()
    assert torch.equal(ours.w_hh.grad, alone)
    ours.zero_grad()
    ours.replay(x, state, starts).sum().backward()  # the kept storage, once nothing awaits it
    assert torch.equal(ours.w_hh.grad, alone)


fused = pytest.mark.skipif(not fused_lstm_available(torch.zeros(1)), reason="this torch has no oneDNN LSTM")


def _float_memory(members: int = MEMBERS) -> Memory:
    torch.manual_seed(0)
    ours = Memory("lstm", 16, 8, members=members)
    with torch.no_grad():
        ours.b_ih.normal_()
    return ours


@fused
@pytest.mark.parametrize(("layout", "members", "steps", "envs"), [
    ("none inside", MEMBERS, 20, 6), ("scattered", MEMBERS, 20, 6), ("consecutive", MEMBERS, 20, 6),
    ("every step", MEMBERS, 20, 6), ("scattered", 1, 20, 6), ("every step", 1, 9, 1), ("every step", 1, 1, 3)])
def test_the_one_kernel_lstm_replay_equals_the_cell_loop(layout, members, steps, envs):
    """float32 on a CPU replays through torch's oneDNN LSTM, each reset a step of its own; its outputs and
    gradients are the cell loop's (which the tests above hold to torch's) within float32 rounding."""
    ours = _float_memory(members)
    x = torch.randn(members, steps, envs, 16, requires_grad=True)
    state = torch.randn(members, envs, ours.state_size, requires_grad=True)
    starts = torch.zeros(steps, envs, dtype=torch.bool)
    if layout == "scattered":
        starts = torch.rand(steps, envs, generator=torch.Generator().manual_seed(1)) < 0.2
        starts[0, 1] = starts[steps - 1, 2] = True
    elif layout == "consecutive":
        starts[3:6, 0] = starts[0:2, 4] = starts[9, :] = True
    elif layout == "every step":
        starts[:] = True
        starts[0, 0] = False  # the stored state reaches the first step of one row
    weights = torch.randn(members, steps, envs, ours.size)

    results = []
    for one_kernel in (True, False):  # the cell loop in float64: the exact values float32 rounds
        memory = ours if one_kernel else copy.deepcopy(ours).double()
        inputs = [t.detach().to(memory.w_ih.dtype).requires_grad_() for t in (x, state)]
        with patch("rlcli.nets.recurrent.fused_lstm_available", return_value=one_kernel):
            out = memory.replay(inputs[0], inputs[1], starts)
            (out * weights.to(out.dtype)).sum().backward()
            results.append([out, inputs[0].grad, inputs[1].grad, memory.w_ih.grad, memory.w_hh.grad, memory.b_ih.grad])
    for fused_value, exact in zip(*results, strict=True):
        torch.testing.assert_close(fused_value, exact.float(), rtol=1e-5, atol=1e-6)


@fused
def test_an_inserted_reset_step_cuts_the_gradient_exactly():
    """Nothing before an episode's start reaches its outputs through the inserted step: not a rounding
    residue, an exact zero."""
    ours = _float_memory()
    x = torch.randn(MEMBERS, 12, 2, 16, requires_grad=True)
    state = torch.randn(MEMBERS, 2, ours.state_size, requires_grad=True)
    starts = torch.zeros(12, 2, dtype=torch.bool)
    starts[5, 0] = starts[8, 1] = True
    out = ours.replay(x, state, starts)
    (out[:, 5:, 0].sum() + out[:, 8:, 1].sum()).backward()
    assert x.grad[:, :5, 0].abs().max() == 0 and x.grad[:, :8, 1].abs().max() == 0
    assert state.grad.abs().max() == 0
    assert x.grad[:, 5:, 0].abs().min() > 0 and x.grad[:, 8:, 1].abs().min() > 0


def test_the_inserted_steps_layout():
    """Two envs, four steps; episodes start at env 0's steps 2 and 3 and env 1's step 1: env 0 gets two
    inserted steps, env 1 one, so the padded sequence is six steps long."""
    starts = torch.tensor([[True, False], [False, True], [True, False], [True, False]])
    reads, places, padded = _inserted_steps(starts)
    assert padded == 6
    # [T, B] step -> padded position (time * 2 + env)
    assert places.view(4, 2).tolist() == [[0, 1], [2, 5], [6, 7], [10, 9]]
    zero, indicator = 8, 9  # the rows after x's eight
    assert reads.view(6, 2).tolist() == [[0, 1], [2, indicator], [indicator, 3], [4, 5], [indicator, 7],
                                         [6, zero]]
    assert _inserted_steps(torch.tensor([[True, True], [False, False]])) is None
