"""Finding a NaN or an infinity an env returned in what a learner stored, and naming its step and column."""

import math

import torch

from rlcli.envs.faults import first_non_finite, observation_part, rollout_fault, transitions_fault
from rlcli.envs.layout import ObsLayout


def test_first_non_finite_is_the_earliest_in_row_major_order():
    values = torch.zeros(5, 3, 4)
    assert first_non_finite(values) is None
    values[3, 0, 1] = math.inf
    values[2, 2, 3] = math.nan
    values[4, 0, 0] = -math.inf
    assert first_non_finite(values) == (2, 2, 3)
    assert first_non_finite(torch.zeros(4, 2, dtype=torch.uint8)) is None  # frames cannot be NaN


def test_a_column_is_named_with_its_dict_key():
    layout = ObsLayout((("pos", 3), ("vel", 2), ("action_mask", 4)), mask_key="action_mask")
    assert observation_part(layout, (4,)) == "observation column 4 (key 'vel', its column 1)"
    assert observation_part(layout, (0,)) == "observation column 0 (key 'pos', its column 0)"
    assert observation_part(None, (4,)) == "observation column 4"
    assert observation_part(None, (1, 2)) == "observation element (1, 2)"
    assert observation_part(None, ()) == "observation"


def test_a_rollouts_fault_is_named_with_the_step_that_returned_it():
    obs, rewards = torch.zeros(8, 4, 3), torch.zeros(8, 4)
    assert rollout_fault(obs, rewards, None, 1000, 4) is None
    obs[5, 2, 1] = math.nan  # returned by the step before row 5: the run's step 1000 + 5 * 4
    fault = rollout_fault(obs, rewards, None, 1000, 4)
    assert fault is not None and (fault.what, fault.step) == ("observation column 1", 1020)
    rewards[4, 0] = math.inf  # row 4's own step ends at 1000 + 5 * 4 too: the observation is named first
    assert rollout_fault(obs, rewards, None, 1000, 4).what == "observation column 1"
    rewards[3, 3] = math.nan  # row 3 ends at step 1016, before the observation
    fault = rollout_fault(obs, rewards, None, 1000, 4)
    assert (fault.what, fault.step) == ("reward", 1016)


def test_stored_transitions_fault_names_the_transitions_step():
    obs, next_obs, rewards = torch.zeros(6, 2), torch.zeros(6, 2), torch.zeros(6)
    steps = torch.tensor([11, 11, 12, 13, 13, 14])
    assert transitions_fault(obs, rewards, next_obs, None, steps) is None
    next_obs[3, 1] = math.inf
    obs[5, 0] = math.nan
    fault = transitions_fault(obs, rewards, next_obs, None, steps)
    assert (fault.what, fault.step) == ("observation column 1", 13)
    rewards[2] = math.nan
    fault = transitions_fault(obs, rewards, next_obs, None, steps)
    assert (fault.what, fault.step) == ("reward", 12)
