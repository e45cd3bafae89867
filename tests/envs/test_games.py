"""Turn-based games as the learner's turns: seats, reward crediting, resets and masks, pinned on PettingZoo's
tic-tac-toe and connect four; the scripted players; Elo in closed form; the snapshot pool."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rlcli.config import MultiAgentConfig, SelfPlayConfig
from rlcli.envs import make_vec_env
from rlcli.envs.games import ConnectFour, TicTacToe, connect_four_wins
from rlcli.envs.seats import FixedOpponents, RandomOpponent
from rlcli.errors import UsageError
from rlcli.training.selfplay.elo import expected_score, game_score, updated
from rlcli.training.selfplay.pool import OpponentPool

pytest.importorskip("pettingzoo.classic")

TTT = "pettingzoo.classic.tictactoe_v3"


class Scripted:
    """An opponent that plays a fixed list of squares, one per move, in every env."""

    name = "script"

    def __init__(self, moves: list[int]) -> None:
        self.moves, self.played = moves, 0

    def act(self, obs: np.ndarray) -> np.ndarray:
        move = self.moves[self.played]
        self.played += 1
        return np.full(len(obs), move)


def game(seat: int, opponent_moves: list[int]):
    env = make_vec_env(TTT, 1, 0)
    env.seat = seat
    env.opponents = FixedOpponents(Scripted(opponent_moves))
    return env


def test_the_opponents_winning_reply_is_a_loss_credited_to_the_learners_last_move():
    # the learner (X, first) plays 0, 1, 8; the opponent 3, 4, 5: its third move, inside the learner's
    # third step, completes a row
    env = game(0, [3, 4, 5])
    obs = env.reset()
    assert obs[0, :18].sum() == 0  # an empty board: the learner moves first
    rewards, ends = [], []
    for square in (0, 1, 8):
        result = env.step(np.array([square]))
        rewards.append(float(result.reward[0]))
        ends.append(bool(result.terminated[0]))
    assert rewards == [0.0, 0.0, -1.0]
    assert ends == [False, False, True]
    assert result.game_over[0] and result.raw_reward[0] == -1.0
    board = TicTacToe().board(result.obs[0, :18])  # the final board, from the learner's side
    assert list(board) == [1, 1, 0, -1, -1, -1, 0, 0, 1]


def test_the_learners_own_winning_move_is_rewarded_at_once():
    env = game(0, [3, 4])
    env.reset()
    rewards = [float(env.step(np.array([square])).reward[0]) for square in (0, 1, 2)]
    assert rewards == [0.0, 0.0, 1.0]


def test_as_second_player_the_opponent_has_moved_when_the_learner_first_observes():
    env = game(1, [4, 0, 8])
    obs = env.reset()
    board = TicTacToe().board(obs[0, :18])
    assert board[4] == -1 and (board != 0).sum() == 1  # the opponent's centre, seen as the opponent's
    assert obs[0, 18 + 4] == 0 and obs[0, 18:].sum() == 8  # the mask: every square but the taken one
    assert env.learner_seat() == 1


def test_the_step_after_a_game_ends_ignores_its_action_and_starts_the_next_game_in_the_other_seat():
    env = make_vec_env(TTT, 1, 0)
    env.opponents = FixedOpponents(Scripted([3, 4, 5, 0, 1]))
    env.reset()
    assert env.learner_seat() == 0
    for square in (0, 1, 8):
        result = env.step(np.array([square]))
    assert result.terminated[0]
    assert result.obs[0, 18:].all()  # a final board's mask allows everything: its action is never played
    reset_row = env.step(np.array([7]))  # ignored
    assert reset_row.reward[0] == 0.0 and not reset_row.terminated[0] and not reset_row.game_over[0]
    assert env.learner_seat() == 1  # seats alternate game by game
    board = TicTacToe().board(reset_row.obs[0, :18])
    assert board[0] == -1 and (board != 0).sum() == 1  # the opponent opened the new game


def test_games_in_many_envs_alternate_seats_and_only_legal_moves_reach_the_game():
    env = make_vec_env(TTT, 6, 3)
    obs = env.reset()
    assert [env.learner_seat(i) for i in range(6)] == [0, 1, 0, 1, 0, 1]
    mover = RandomOpponent(env.obs_layout, 0)
    finished = 0
    for _ in range(200):
        result = env.step(mover.act(obs))
        obs = result.obs
        finished += int(result.game_over.sum())
        assert set(np.unique(result.reward)) <= {-1.0, 0.0, 1.0}
    assert finished > 50


def test_a_mask_that_allows_nothing_mid_game_is_an_error_naming_the_step():
    env = game(0, [4])
    env.reset()
    original = env.games[0].observe

    def empty_mask(agent):  # the learner's (player_1's) mask goes empty while the game goes on
        obs = dict(original(agent))
        if agent == "player_1":
            obs["action_mask"] = np.zeros_like(obs["action_mask"])
        return obs

    env.games[0].observe = empty_mask
    with pytest.raises(UsageError, match="allows no action at step 1"):
        env.step(np.array([0]))


def test_scripted_tictactoe_is_minimax_it_wins_when_it_can_and_blocks_otherwise():
    game_ = TicTacToe()
    rng = np.random.default_rng(0)
    legal = np.ones(9, dtype=bool)
    own_two = np.array([1, 1, 0, -1, -1, 0, 0, 0, 0])  # own 0, 1; opponent 3, 4
    legal[[0, 1, 3, 4]] = False
    assert game_.scripted(own_two, legal, rng) == 2  # the win, not the block at 5
    block = np.array([1, 0, 0, -1, -1, 0, 1, 0, 0])
    legal = block == 0
    assert game_.scripted(block, legal, rng) == 5
    # from the empty board every move draws with perfect play, so minimax may open anywhere
    opening = {game_.scripted(np.zeros(9, dtype=np.int8), np.ones(9, dtype=bool), rng) for _ in range(200)}
    assert len(opening) == 9


def test_scripted_connect_four_wins_then_blocks_then_plays_at_random():
    game_ = ConnectFour()
    rng = np.random.default_rng(0)
    board = np.zeros((6, 7), dtype=np.int8)
    board[5, 0:3] = 1  # own three on the bottom row: column 3 wins
    board[5, 4:6] = -1
    board[4, 4:7] = -1  # the opponent's three on the next row, finished by column 3 once it is filled...
    assert connect_four_wins(board, 3, 1)
    assert game_.scripted(board, np.ones(7, dtype=bool), rng) == 3
    board = np.zeros((6, 7), dtype=np.int8)
    board[5, 1:4] = -1  # the opponent threatens 0 and 4
    move = game_.scripted(board, np.ones(7, dtype=bool), rng)
    assert move in (0, 4)
    vertical = np.zeros((6, 7), dtype=np.int8)
    vertical[3:6, 6] = -1
    assert game_.scripted(vertical, np.ones(7, dtype=bool), rng) == 6
    assert not connect_four_wins(np.zeros((6, 7), dtype=np.int8), 2, 1)


def test_connect_four_boards_read_from_observations_as_pettingzoo_draws_them():
    env = make_vec_env("pettingzoo.classic.connect_four_v3", 1, 0)
    env.seat = 0
    env.opponents = FixedOpponents(Scripted([3, 3]))
    env.reset()
    result = env.step(np.array([3]))  # the learner drops into column 3, the opponent on top of it
    board = ConnectFour().board(result.obs[0, :84])
    assert board[5, 3] == 1 and board[4, 3] == -1 and np.abs(board).sum() == 2


def test_elo_in_closed_form():
    assert expected_score(1200, 1200) == 0.5
    assert expected_score(1600, 1200) == pytest.approx(1 / (1 + 10 ** -1))
    assert updated(1200, 1200, 1.0, 16) == (1208.0, 1192.0)
    assert updated(1200, 1200, 0.5, 16) == (1200.0, 1200.0)
    winner, loser = updated(1600, 1200, 0.0, 32)  # the favourite loses: it drops 32 * 10/11
    assert winner == pytest.approx(1600 - 32 * 10 / 11) and loser == pytest.approx(1200 + 32 * 10 / 11)
    assert [game_score(r) for r in (1.0, 0.0, -1.0)] == [1.0, 0.5, 0.0]


class Weights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((len(obs),), int(self.w[0].item()))


def test_the_pool_samples_the_newest_with_its_probability_and_keeps_its_size():
    net = Weights()
    pool = OpponentPool(SelfPlayConfig(latest=0.25, pool_size=3), net, seed=0)
    for step in range(5):
        with torch.no_grad():
            net.w.fill_(step)
        pool.add(step * 100)
    assert [m.id for m in pool.members] == [2, 3, 4]
    picks = [pool.pick(0) for _ in range(4000)]
    counts = {k: picks.count(k) for k in (2, 3, 4)}
    assert counts[4] / 4000 == pytest.approx(0.25, abs=0.03)  # the newest: its probability, and only that
    assert counts[2] / 4000 == pytest.approx(0.75 / 2, abs=0.03)  # the older ones share the rest
    assert counts[3] / 4000 == pytest.approx(0.75 / 2, abs=0.03)
    # a snapshot plays with the weights it was taken with, not the learner's current ones
    assert int(pool.opponent(2).act(np.zeros((1, 1)))[0]) == 2
    # the one the last snapshot dropped still finishes its games
    assert list(pool.retired) == [1] and int(pool.opponent(1).act(np.zeros((1, 1)))[0]) == 1


def test_ratings_move_with_results_and_the_pool_round_trips_through_its_state():
    net = Weights()
    pool = OpponentPool(SelfPlayConfig(latest=1.0, elo_k=16), net, seed=0)
    pool.add(0)
    pool.result(0, 1.0)
    assert pool.learner_elo == 1208.0 and pool.members[0].elo == 1192.0 and pool.members[0].games == 1
    newer = pool.add(100)
    assert newer.elo == 1208.0  # a new snapshot starts at the learner's rating
    tensors, meta = pool.state()
    copy = OpponentPool(SelfPlayConfig(latest=1.0, elo_k=16), Weights(), seed=5)
    copy.load(tensors, meta)
    assert [(m.id, m.elo, m.games) for m in copy.members] == [(m.id, m.elo, m.games) for m in pool.members]
    assert copy.learner_elo == pool.learner_elo and copy.next_id == 2
    assert [copy.pick(0) for _ in range(20)] == [pool.pick(0) for _ in range(20)]  # the same draws follow
    assert torch.equal(copy.weights[0]["w"], pool.weights[0]["w"])


def test_parallel_envs_are_rows_of_agents_with_state_ids_and_next_step_resets():
    pytest.importorskip("mpe2")
    env = make_vec_env("mpe2.simple_spread_v3", 2, 0, multiagent=MultiAgentConfig(agent_id=True))
    assert env.num_envs == 6 and env.agents_per_env == 3
    layout = env.obs_layout
    assert layout.keys == ("observation", "state", "agent_id")
    obs = env.reset()
    state = obs[:, layout.span("state")]
    assert np.array_equal(state[0], state[2]) and not np.array_equal(state[0], state[3])  # one state per env
    assert np.array_equal(obs[:3, layout.span("agent_id")], np.eye(3))
    assert np.array_equal(state[0].reshape(3, 18)[1], obs[1, layout.span("observation")])  # MPE's state
    for _ in range(25):
        result = env.step(np.zeros(6, dtype=np.int64))
    assert result.truncated.all() and result.game_over.all() and not result.terminated.any()
    reset = env.step(np.zeros(6, dtype=np.int64))
    assert not reset.game_over.any() and (reset.reward == 0).all()


class Leaving:
    """A two-agent parallel env: agent b leaves after step 2, agent a after step 4; rewards 1 a step each."""

    metadata = {"name": "leaving_v0"}
    possible_agents = ["a", "b"]

    def __init__(self) -> None:
        self.agents: list[str] = []

    def observation_space(self, agent):
        import gymnasium as gym

        return gym.spaces.Box(-1, 10, (1,), np.float32)

    def action_space(self, agent):
        import gymnasium as gym

        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = ["a", "b"], 0
        return {a: np.array([0.0], np.float32) for a in self.agents}, {}

    def step(self, actions):
        assert set(actions) == set(self.agents)
        self.t += 1
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        rewards = dict.fromkeys(self.agents, 1.0)
        terms = {a: (a == "b" and self.t == 2) or (a == "a" and self.t == 4) for a in self.agents}
        truncs = dict.fromkeys(self.agents, False)
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rewards, terms, truncs, {}

    def close(self) -> None:
        pass


def test_agents_that_leave_read_as_ended_until_the_env_resets_and_the_team_return_sums_them():
    import types

    from rlcli.algos.learners import EpisodeTracker
    from rlcli.envs.parallel import ParallelVecEnv

    module = types.SimpleNamespace(parallel_env=Leaving)
    env = ParallelVecEnv("leaving_v0", module, 1, 0, {}, MultiAgentConfig())
    tracker = EpisodeTracker(env.num_envs, env.agents_per_env)
    env.reset()
    prev_done = np.zeros(2, dtype=bool)
    rows = []
    for _ in range(5):
        result = env.step(np.zeros(2, dtype=np.int64))
        tracker.add(result.raw_reward, ~prev_done, result.game_over)
        prev_done = result.terminated | result.truncated
        rows.append((result.obs[:, 0].tolist(), result.reward.tolist(), result.terminated.tolist(),
                     result.game_over.tolist()))
    assert rows == [
        ([1.0, 1.0], [1.0, 1.0], [False, False], [False, False]),
        ([2.0, 2.0], [1.0, 1.0], [False, True], [False, False]),  # b's last step
        ([3.0, 0.0], [1.0, 0.0], [False, True], [False, False]),  # b gone: ended, zero, every step
        ([4.0, 0.0], [1.0, 0.0], [True, True], [True, True]),  # a's last: the env's episode ends
        ([0.0, 0.0], [0.0, 0.0], [False, False], [False, False]),  # the reset row
    ]
    assert tracker.finished_returns == [6.0] and tracker.finished_lengths == [4]
    assert tracker.drain_agents().tolist() == [4.0, 2.0]


@pytest.mark.parametrize("name", ["mpe2.simple_spread_v3", "mpe2.simple_reference_v3"])
def test_particle_worlds_stepped_directly_equal_pettingzoos_parallel_api(name):
    pytest.importorskip("mpe2")
    from rlcli.envs.parallel import ParallelVecEnv
    from rlcli.envs.pettingzoo_ids import pettingzoo_module

    module = pettingzoo_module(name)
    direct = ParallelVecEnv(name, module, 3, 5, {}, MultiAgentConfig(agent_id=True))
    wrapped = ParallelVecEnv(name, module, 3, 5, {}, MultiAgentConfig(agent_id=True))
    assert direct._worlds is not None
    direct._batch = None  # each world stepped directly (simple_spread's arrays: the test below)
    wrapped._worlds = wrapped._batch = None  # PettingZoo's own parallel step
    assert np.array_equal(direct.reset(), wrapped.reset())
    rng = np.random.default_rng(0)
    for _ in range(80):  # three episodes of 25 steps and their resets
        actions = rng.integers(0, direct.single_action_space.n, direct.num_envs)
        for ours, theirs in zip(direct.step(actions), wrapped.step(actions), strict=True):
            assert np.array_equal(ours, theirs)


@pytest.mark.parametrize(("kwargs", "state"), [({}, True), ({"N": 4, "local_ratio": 0.25, "max_cycles": 30}, False)])
def test_simple_spread_stepped_as_arrays_equals_mpe2_to_the_bit(kwargs, state):
    pytest.importorskip("mpe2")
    from rlcli.envs.parallel import ParallelVecEnv
    from rlcli.envs.pettingzoo_ids import pettingzoo_module

    name = "mpe2.simple_spread_v3"
    module = pettingzoo_module(name)
    batched = ParallelVecEnv(name, module, 5, 3, kwargs, MultiAgentConfig(state=state))
    wrapped = ParallelVecEnv(name, module, 5, 3, kwargs, MultiAgentConfig(state=state))
    assert batched._batch is not None
    wrapped._worlds = wrapped._batch = None  # PettingZoo's own parallel step
    assert np.array_equal(batched.reset(), wrapped.reset())
    rng = np.random.default_rng(1)
    rewards = 0.0
    for _ in range(100):  # several episodes and their resets; agents pushing each other apart now and then
        actions = rng.integers(0, 5, batched.num_envs)
        ours, theirs = batched.step(actions), wrapped.step(actions)
        for field, mine, mpe2 in zip(ours._fields, ours, theirs, strict=True):
            assert mine.dtype == mpe2.dtype and np.array_equal(mine, mpe2), field
        rewards += ours.reward.sum()
    assert rewards < 0  # a real reward: minus distances and collisions


def test_simple_spread_keeps_mpe2s_step_where_it_is_configured_otherwise():
    pytest.importorskip("mpe2")
    from rlcli.envs.parallel import ParallelVecEnv
    from rlcli.envs.pettingzoo_ids import pettingzoo_module

    module = pettingzoo_module("mpe2.simple_spread_v3")
    for kwargs in ({"continuous_actions": True}, {"terminate_on_success": True}, {"num_agent_neighbors": 1}):
        env = ParallelVecEnv("mpe2.simple_spread_v3", module, 2, 0, kwargs, MultiAgentConfig())
        assert env._worlds is not None and env._batch is None, kwargs


def test_a_move_the_mask_forbids_is_an_error_naming_it_not_a_lost_game():
    env = game(0, [0])  # the opponent answers the learner's square 0 with square 0
    env.reset()
    with pytest.raises(UsageError, match="move 0 is illegal for player_2 at step 1"):
        env.step(np.array([0]))


def test_prioritized_sampling_draws_older_snapshots_by_how_often_they_still_beat_the_learner():
    from rlcli.training.selfplay.pool import prioritized_weight

    assert prioritized_weight(0.5) == pytest.approx(0.25, abs=1e-5)
    assert prioritized_weight(1.0) == pytest.approx(0, abs=1e-5)
    pool = OpponentPool(SelfPlayConfig(latest=0.0, sampling="prioritized"), Weights(), seed=0)
    for step in range(3):
        pool.add(step)
    pool.learner_elo = 1200.0
    pool.members[0].elo = 1200.0 - 400 * np.log10(9)  # the learner expects 0.9 against it: weight 0.01
    pool.members[1].elo = 1200.0  # 0.5: weight 0.25
    picks = [pool.pick(0) for _ in range(5000)]
    assert 2 not in picks  # with latest 0 the newest never plays once there are older ones
    assert picks.count(0) / 5000 == pytest.approx(0.01 / 0.26, abs=0.01)


def test_shares_of_games_go_to_the_fixed_players_and_the_rest_to_the_pool():
    from pydantic import ValidationError

    class Named:
        def __init__(self, name):
            self.name = name

    pool = OpponentPool(SelfPlayConfig(random=0.3, scripted=0.2), Weights(), seed=0,
                        fixed={"random": Named("random"), "scripted": Named("scripted")})
    pool.add(0)
    picks = [pool.pick(0) for _ in range(5000)]
    assert picks.count("random") / 5000 == pytest.approx(0.3, abs=0.02)
    assert picks.count("scripted") / 5000 == pytest.approx(0.2, abs=0.02)
    assert picks.count(0) / 5000 == pytest.approx(0.5, abs=0.02)
    assert pool.opponent("scripted").name == "scripted"
    pool.result("scripted", 1.0)
    pool.result("random", -1.0)
    assert pool.learner_elo == 1200.0  # fixed players leave the ratings alone; their scores are kept apart
    assert pool.metrics()["selfplay/scripted_score"] == 1.0 and pool.metrics()["selfplay/random_score"] == 0.0
    with pytest.raises(ValidationError, match="random \\+ scripted = 1.2"):
        SelfPlayConfig(random=0.6, scripted=0.6)
