"""The agents committed in zoo/: listed with their scores, and playable by name with no training."""

import json

import pytest
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.share.names import resolve_run, zoo_dir

runner = CliRunner()


def test_zoo_lists_the_committed_agents_with_their_scores(monkeypatch):
    monkeypatch.delenv("RLCLI_ZOO_DIR", raising=False)
    result = runner.invoke(app, ["zoo", "--json"])
    assert result.exit_code == 0, result.output
    agents = {a["name"]: a for a in json.loads(result.output)}
    assert {"CartPole-v1", "Acrobot-v1", "Pendulum-v1"} <= set(agents)
    assert agents["CartPole-v1"]["algo"] == "ppo" and agents["Pendulum-v1"]["algo"] == "sac"
    assert agents["CartPole-v1"]["mean_return"] >= 475  # the env's own "solved" threshold
    assert agents["Acrobot-v1"]["mean_return"] >= -100
    assert agents["Pendulum-v1"]["mean_return"] >= -250
    assert agents["Hopper-v5"]["mean_return"] >= 3000


def test_a_zoo_agent_is_evaluated_by_name_as_it_scored(monkeypatch):
    monkeypatch.delenv("RLCLI_ZOO_DIR", raising=False)
    assert resolve_run("zoo:CartPole-v1") == resolve_run("CartPole-v1") == zoo_dir() / "CartPole-v1"
    result = runner.invoke(app, ["eval", "zoo:CartPole-v1", "--episodes", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["env_id"] == "CartPole-v1" and data["episodes"] == 3 and data["mean_return"] >= 475


@pytest.mark.parametrize("name, env_id, algo, floor", [
    ("HalfCheetah-v5-sac", "HalfCheetah-v5", "sac", 6500),  # 7,042 over 10 episodes (the lowest 6,911)
    ("Hopper-v5-sac", "Hopper-v5", "sac", 3000),  # 3,201 over 10 episodes, each the full 1,000 steps
    ("CartpoleSwingup-v1", "CartpoleSwingup-v1", "ppo", 800),  # DMC's 0-1000 scale; 852 over 10 episodes
    ("BallInCupCatch-v1", "BallInCupCatch-v1", "ppo", 800),  # 918 over 10 episodes
    ("Pong-v5", "Pong-v5", "ppo", 19),  # 20.5 over 10 episodes, every game won 21-0 to 21-2
    ("Ant-v5", "Ant-v5", "ppo", 3000),  # 4,089 over 10 episodes, each the full 1,000 steps (the lowest 3,563)
    ("Humanoid-v5", "Humanoid-v5", "ppo", 7000),  # 8,324 over 10 episodes, each the full 1,000 steps
    ("CartPole-v1-dqn", "CartPole-v1", "dqn", 475),  # 500 over 10 episodes
    ("Pong-v5-pqn", "Pong-v5", "pqn", 19),  # 21.0 over 10 episodes, every game won 21-0
    ("Pendulum-v1-td3", "Pendulum-v1", "td3", -250),  # -129 over 10 episodes
    ("HalfCheetah-v5-td3", "HalfCheetah-v5", "td3", 6500),  # 7,267 over 10 episodes (the lowest 7,157)
])
def test_the_zoo_agents_of_the_learning_results_evaluate_as_listed(monkeypatch, name, env_id, algo, floor):
    pytest.importorskip("envpool")
    monkeypatch.delenv("RLCLI_ZOO_DIR", raising=False)
    listed = {a["name"]: a for a in json.loads(runner.invoke(app, ["zoo", "--json"]).output)}[name]
    assert (listed["env_id"], listed["algo"]) == (env_id, algo) and listed["mean_return"] >= floor
    result = runner.invoke(app, ["eval", f"zoo:{name}", "--episodes", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["env_id"] == env_id and data["episodes"] == 2 and data["mean_return"] >= floor


def test_the_zoo_games_list_their_rates_and_play_by_name(monkeypatch):
    pytest.importorskip("pettingzoo.classic")
    monkeypatch.delenv("RLCLI_ZOO_DIR", raising=False)
    agents = {a["name"]: a for a in json.loads(runner.invoke(app, ["zoo", "--json"]).output)}
    tictactoe, connect_four = agents["tictactoe_v3"]["rates"], agents["connect_four_v3"]["rates"]
    assert tictactoe["scripted/draw"] >= 0.95 and tictactoe["scripted/loss"] == tictactoe["random/loss"] == 0
    assert connect_four["random/win"] >= 0.95 and connect_four["scripted/win"] >= 0.70
    assert agents["Ant-v5"]["mean_return"] >= 3000
    listed = runner.invoke(app, ["zoo"]).output
    assert "vs scripted win 0% draw 100% loss 0%" in listed.splitlines()[-1]  # tictactoe_v3, listed last
    result = runner.invoke(app, ["eval", "tictactoe_v3", "--opponent", "scripted", "-n", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["draw"] == 1.0  # every game against minimax from both seats drawn
