"""Multi-agent runs through the commands: a self-play game trained, resumed with its pool and ratings,
evaluated against opponents, played by a person and recorded; a particle world's team and agent returns."""

import json

import imageio.v2 as imageio
import pytest
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.runs.checkpoint import load_tensors

pytest.importorskip("pettingzoo.classic")
runner = CliRunner()
TINY = ["--n-envs", "4", "-p", "n_steps=32", "-p", "minibatch_size=64", "-p", "n_epochs=1", "--eval-episodes", "2",
        "-p", "multiagent.selfplay.snapshot_every=1", "-p", "multiagent.selfplay.pool_size=3"]


@pytest.fixture(scope="module")
def game_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "ttt"
    result = runner.invoke(app, ["train", "tictactoe_v3", "--steps", "256", "--run-dir", str(path), *TINY])
    assert result.exit_code == 0, result.output
    assert "tictactoe_v3 resolves to pettingzoo.classic.tictactoe_v3" in result.output
    return path


def test_a_self_play_run_keeps_its_pool_ratings_and_evaluation_rates(game_run):
    meta = json.loads((game_run / "meta.json").read_text())
    members = meta["selfplay"]["members"]
    assert [m["id"] for m in members] == [0, 1, 2]  # a snapshot at the start and after each update
    assert meta["selfplay"]["learner_elo"] != 1200.0  # games were played and rated
    pool = load_tensors(game_run / "pool.safetensors")
    assert {key.split("/")[0] for key in pool} == {"0", "1", "2"}
    latest = json.loads((game_run / "eval.json").read_text())["latest"]
    assert {"scripted/win", "scripted/first_loss", "random/second_draw"} <= latest["rates"].keys()
    header = (game_run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"selfplay/elo", "selfplay/pool_size", "eval/scripted/win", "eval/random/loss"} <= set(header)


def test_resume_continues_the_pool_and_its_ratings(game_run, tmp_path):
    import shutil

    copy = tmp_path / "ttt"
    shutil.copytree(game_run, copy)
    before = json.loads((copy / "meta.json").read_text())["selfplay"]
    result = runner.invoke(app, ["train", "--resume", str(copy), "--steps", "512"])
    assert result.exit_code == 0, result.output
    after = json.loads((copy / "meta.json").read_text())["selfplay"]
    assert [m["id"] for m in after["members"]] == [2, 3, 4]  # two more updates: ids go on, the oldest left
    assert after["next_id"] == before["next_id"] + 2 and after["members"][0] == {
        **before["members"][2], "elo": after["members"][0]["elo"], "games": after["members"][0]["games"]}
    assert sum(m["games"] for m in after["members"]) > 0


def test_eval_against_each_opponent_gives_rates_from_each_seat(game_run):
    result = runner.invoke(app, ["eval", str(game_run), "--opponent", "scripted", "-n", "6", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["opponent"] == "scripted" and data["games_per_seat"] == 6
    assert len(data["returns"]["first"]) == 6 and len(data["returns"]["second"]) == 6
    for seat in ("first_", "second_", ""):
        assert data[seat + "win"] + data[seat + "draw"] + data[seat + "loss"] == pytest.approx(1.0)
    text = runner.invoke(app, ["eval", str(game_run), "--opponent", str(game_run), "-n", "4"])
    assert text.exit_code == 0 and "as first player" in text.output and "overall" in text.output


@pytest.mark.parametrize(("args", "expected"), [
    (["--opponent", "minimax"], "no run directory or zoo agent named 'minimax'"),
])
def test_bad_opponents_are_one_line(game_run, args, expected):
    result = runner.invoke(app, ["eval", str(game_run), *args])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output


def test_a_person_plays_in_the_terminal_and_a_bad_move_is_asked_again(game_run):
    # seat 1: the person moves first; "0" and "x" are no moves, "1" is; later moves try every square in turn
    moves = "0\nx\n1\n" + "".join(f"{square}\n" for square in range(2, 10) for _ in range(3))
    result = runner.invoke(app, ["play", str(game_run), "--human"], input=moves)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Game 1: you play player_1 (seat 1)")
    assert " 1 | 2 | 3\n---+---+---\n 4 | 5 | 6" in result.output  # the empty board, squares numbered
    assert "'0' is not a legal move; choose one of: 1, 2, 3, 4, 5, 6, 7, 8, 9" in result.output
    assert "'x' is not a legal move" in result.output
    assert "The agent plays" in result.output
    assert result.output.rstrip().endswith(("You win.", "The agent wins.", "A draw."))


def test_play_records_a_game_against_an_opponent(game_run, tmp_path):
    video = tmp_path / "game.mp4"
    result = runner.invoke(app, ["play", str(game_run), "--video", str(video), "--opponent", "scripted"])
    assert result.exit_code == 0, result.output
    assert "episode 1: return" in result.output
    with imageio.get_reader(str(video)) as reader:  # imageio-ffmpeg, which rlcli's video writing installs
        count, first = reader.count_frames(), reader.get_data(0)
    assert count >= 3 and first.ndim == 3 and first.std() > 0  # a game of several moves, a picture


def test_stop_at_a_win_rate_needs_a_game(tmp_path):
    result = runner.invoke(app, ["train", "CartPole-v1", "--stop-at", "scripted:0.9", "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "only turn-based games have" in result.output


def test_a_particle_world_trains_and_reports_team_and_agent_returns(tmp_path):
    pytest.importorskip("mpe2")
    path = tmp_path / "spread"
    result = runner.invoke(app, ["train", "simple_spread_v3", "--steps", "400", "--run-dir", str(path),
                                 "--n-envs", "4", "-p", "n_steps=25", "-p", "minibatch_size=100",
                                 "-p", "n_epochs=1", "--eval-episodes", "2", "--config", "ippo"])
    assert result.exit_code == 0, result.output
    assert "at 400 steps" in result.output  # env steps: 4 envs x 25 steps x 4 rollouts, each of 3 agents
    header = (path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"charts/episode_return/agent_0", "charts/episode_return/agent_2"} <= set(header)
    config = (path / "config.yaml").read_text()
    assert "state: false" in config
    from rlcli.runs.rundir import RunDir
    from rlcli.training.agents import make_env

    env = make_env(RunDir.open(path).cfg, 1, 0)
    assert env.obs_layout is None and env.single_observation_space.shape == (18,)  # IPPO: no state columns
    out = runner.invoke(app, ["eval", str(path), "-n", "3", "--json"])
    data = json.loads(out.output)
    assert set(data["agent_mean_returns"]) == {"agent_0", "agent_1", "agent_2"}
    assert data["mean_return"] == pytest.approx(sum(data["agent_mean_returns"].values()))


def test_a_published_game_card_shows_rates_per_opponent_and_seat_and_the_rating(game_run, tmp_path):
    from rlcli.share.hub import build_folder

    built = build_folder(game_run, "someone/ttt", tmp_path / "folder", episodes=4, video=False)
    results = built.results
    assert results["opponent"] == "scripted" and set(results["opponents"]) == {"scripted", "random"}
    assert results["episodes"] == 4 and results["elo"] == json.loads((game_run / "meta.json").read_text())[
        "selfplay"]["learner_elo"]
    card = (tmp_path / "folder" / "README.md").read_text()
    assert "against the scripted player, seats alternating" in card
    assert "| opponent | seat | win | draw | loss |" in card and "| random | second |" in card
    assert "Self-play Elo rating at the end of training" in card
    hyperparams = (tmp_path / "folder" / "hyperparams.yml").read_text()
    assert "multiagent:" in hyperparams and "snapshot_every: 1" in hyperparams  # retraining keeps the pool's settings


def test_stop_at_a_win_rate_stops_at_the_first_evaluation_that_reaches_it(tmp_path):
    path = tmp_path / "stop"
    result = runner.invoke(app, ["train", "tictactoe_v3", "--steps", "1024", "--eval-every", "128", "--run-dir",
                                 str(path), "--stop-at", "random:0.0", *TINY])
    assert result.exit_code == 0, result.output
    meta = json.loads((path / "meta.json").read_text())
    assert meta["steps"] == 128  # the first evaluation: any win rate reaches 0
    config = (path / "config.yaml").read_text()
    assert "stop_at: 0.0" in config and "stop_opponent: random" in config
