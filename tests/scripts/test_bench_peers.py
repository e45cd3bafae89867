"""scripts/bench_peers.py end to end in its smoke mode: every section runs both libraries in fresh
processes, and what the two sides ran is the same where a row claims identical settings. Its figures
(one rollout per side) are not checked, only that each is a real measurement."""

import getpass
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# the sections train on envpool's Hopper and Pong, through MuJoCo and ale-py, and on mpe2's particle worlds
for module in ("stable_baselines3", "envpool", "mujoco", "ale_py", "supersuit", "mpe2"):
    pytest.importorskip(module)

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ["cartpole", "hopper-ppo", "hopper-ppo-same", "hopper-sac", "cartpole-dqn", "dqn-prioritized", "pong-dqn",
            "hopper-td3", "pong", "pqn-pong", "masked", "recurrent", "multiagent", "go1"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The temporary folder the script and its workers are given (TMPDIR)."""
    return tmp_path_factory.mktemp("tmp")


@pytest.fixture(scope="module")
def report(tmp_path_factory, scratch):
    out = tmp_path_factory.mktemp("bench")
    # a session of its own, so that a timeout also ends the worker processes the script started
    proc = subprocess.Popen(
        [sys.executable, "scripts/bench_peers.py", "--quick", "--repeats", "1", "--cartpole-repeats", "1",
         "--json", str(out / "bench.json"), "--markdown", str(out / "bench.md")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(scratch)})
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail("bench_peers.py --quick ran past 600 s:\n" + stdout[-3000:] + stderr[-3000:])
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_nothing_is_left_in_the_temporary_folder(report, scratch):
    # but torch's compiler cache, which outlives a run by design; SB3's loggers made an SB3-<time> folder a worker
    cache = f"torchinductor_{getpass.getuser()}"
    assert sorted(p.name for p in scratch.iterdir() if p.name != cache) == []


def runs(section, measurement, side):
    return [r for r in section["runs"] if r["measurement"] == measurement and r["side"] == side]


def test_every_section_measures_both_sides(report):
    data, markdown = report
    sections = {s["name"]: s for s in data["sections"]}
    assert list(sections) == SECTIONS
    for name, section in sections.items():
        assert section["error"] is None, name
        goal_rows = [row for row in section["rows"] if row["goal"] is not None]
        assert len(goal_rows) == 1, name
        for side in ("rlcli", "sb3"):  # "sb3": the row's peer (rlcli itself for dqn-prioritized)
            values = goal_rows[0][side]
            assert len(values) == 1 and math.isfinite(values[0]) and values[0] > 0, (name, side, values)
        assert goal_rows[0]["measurement"] in markdown
    assert markdown.count("| no |") + markdown.count("| yes |") == len(SECTIONS)


def test_same_hyperparameter_sections_run_the_same_workload_on_both_sides(report):
    sections = {s["name"]: s for s in report[0]["sections"]}
    ppo = sections["hopper-ppo-same"]
    ours, theirs = runs(ppo, "train", "rlcli")[0]["result"], runs(ppo, "train", "SB3")[0]["result"]
    assert ours["n_envs"] == theirs["n_envs"] == 64 and ours["steps"] == theirs["steps"]
    assert (ours["backend"], theirs["backend"]) == ("envpool", "DummyVecEnv")

    pong = sections["pong"]
    ours, theirs = runs(pong, "train", "rlcli")[0]["result"], runs(pong, "train", "SB3")[0]["result"]
    assert ours["obs_shape"] == theirs["obs_shape"] == [4, 84, 84]
    assert ours["n_envs"] == theirs["n_envs"] == 8 and ours["steps"] == theirs["steps"]

    # PQN's time to 18 against PPO's: each with the values of its recorded run to 18, on the same env, in bf16
    pqn, ppo = (runs(sections["pqn-pong"], "train", side)[0]["result"] for side in ("rlcli", "PPO"))
    assert (pqn["precision"], ppo["precision"]) == ("bf16", "bf16") and pqn["backend"] == ppo["backend"] == "envpool"
    assert pqn["steps"] == ppo["steps"] and pqn["n_envs"] == ppo["n_envs"] == 16  # --quick cuts both to 16 envs

    masked = sections["masked"]
    ours, theirs = runs(masked, "train", "rlcli")[0]["result"], runs(masked, "train", "SB3")[0]["result"]
    assert ours["n_envs"] == theirs["n_envs"] == 16 and ours["steps"] == theirs["steps"]
    # SB3 on the adapter over the task's vector env, which rlcli's gymnasium backend makes too (test_masked_env.py)
    assert (ours["backend"], theirs["backend"]) == ("gymnasium", "SB3VectorEnv")

    recurrent = sections["recurrent"]
    ours, theirs = runs(recurrent, "train", "rlcli")[0]["result"], runs(recurrent, "train", "SB3")[0]["result"]
    assert ours["n_envs"] == theirs["n_envs"] == 8 and ours["steps"] == theirs["steps"]
    # the task's vector env on both sides, as for the masked task (test_partial_envs.py)
    assert (ours["backend"], theirs["backend"]) == ("gymnasium", "SB3VectorEnv")

    spread = sections["multiagent"]
    ours, theirs = runs(spread, "train", "rlcli")[0]["result"], runs(spread, "train", "SB3")[0]["result"]
    # 8 copies of a 3-agent world: rlcli's 8 envs of 3 agent rows each, SuperSuit's 24 agent rows; agent steps
    assert (ours["n_envs"], theirs["n_envs"]) == (8, 24) and ours["steps"] == theirs["steps"]
    assert (ours["backend"], theirs["backend"]) == ("pettingzoo", "ConcatVecEnv")

    # the PPO rows compare transitions/s: rlcli's steps less its reset rows (a masked episode lasts 16 steps at
    # most, so a 1,000-step run has some), every one of SB3's steps (its vector envs reset inside the ending step)
    for name in ("hopper-ppo", "hopper-ppo-same", "pong", "masked", "recurrent", "multiagent"):
        ours, theirs = (runs(sections[name], "train", side)[0]["result"] for side in ("rlcli", "SB3"))
        assert 0 < ours["transitions"] <= ours["steps"] and theirs["transitions"] == theirs["steps"], name
        assert ours["tps"] == pytest.approx(ours["transitions"] / ours["seconds"]), name
    ours = runs(masked, "train", "rlcli")[0]["result"]
    assert ours["transitions"] < ours["steps"]

    sac = sections["hopper-sac"]
    ours, theirs = runs(sac, "train", "rlcli")[0]["result"], runs(sac, "train", "SB3")[0]["result"]
    assert ours["window"] == theirs["window"]
    # one gradient step per stored transition on both sides (rlcli stores none for auto-reset steps)
    assert 0 < ours["updates"] <= theirs["updates"] <= ours["window"][1] - ours["window"][0]
    # the row compares transitions: rlcli's window less its reset rows, every one of SB3's env steps
    assert 0 < ours["updates"] <= ours["transitions"] <= ours["window"][1] - ours["window"][0] == theirs["transitions"]

    pong_dqn = sections["pong-dqn"]
    ours, theirs = runs(pong_dqn, "train", "rlcli")[0]["result"], runs(pong_dqn, "train", "SB3")[0]["result"]
    assert theirs["obs_shape"] == [4, 84, 84] and ours["backend"] == "envpool"
    for name, side, uniform, per_step in (("cartpole-dqn", "rlcli", "SB3", 0.5), ("pong-dqn", "rlcli", "SB3", 0.25),
                                          ("hopper-td3", "rlcli", "SB3", 1.0),
                                          ("dqn-prioritized", "rlcli", "uniform", 0.5),
                                          ("cartpole-dqn", "rlcli QR-DQN", "sb3-contrib QR-DQN", 0.5)):
        section = sections[name]
        ours, theirs = runs(section, "train", side)[0]["result"], runs(section, "train", uniform)[0]["result"]
        assert ours["window"] == theirs["window"], name
        # the same gradient steps per env step on both sides: rlcli's per stored transition (none for an auto-reset
        # step), SB3's per env step, so rlcli's count can only be lower
        steps = ours["window"][1] - ours["window"][0]
        assert 0 < ours["updates"] <= per_step * steps + 1 and 0 < theirs["updates"] <= per_step * steps + 1, name
        # the rows compare transitions per second: the steps each side learns from, none of them a reset row
        assert 0 < ours["updates"] <= per_step * ours["transitions"] + 1 and ours["transitions"] <= steps, name
        assert ours["tps"] == pytest.approx(ours["transitions"] / ours["seconds"]), name
        if uniform != "uniform":  # SB3's vector env resets inside the ending step: every env step is a transition
            assert theirs["transitions"] == steps, name
        if name == "pong-dqn":  # one gradient step every 4 env steps: the window's edges may fall between two
            assert abs(ours["updates"] - theirs["updates"]) <= 1, name
        elif uniform != "uniform":
            assert ours["updates"] <= theirs["updates"], name


def test_go1_trains_against_envpool_alone_on_the_same_envs_and_one_thread_each(report):
    go1 = {s["name"]: s for s in report[0]["sections"]}["go1"]
    ours, alone = runs(go1, "train", "rlcli")[0]["result"], runs(go1, "env", "envpool")[0]["result"]
    assert ours["n_envs"] == alone["n_envs"] == 64 and ours["backend"] == alone["backend"] == "envpool"
    assert ours["torch_threads"] == ours["torch_threads_update"] == 1
    assert ours["env_threads"] == alone["env_threads"] == 1


def test_cartpole_times_whole_processes_until_the_budget_or_the_score(report):
    cartpole = {s["name"]: s for s in report[0]["sections"]}["cartpole"]
    budget = report[0]["budgets"]["cartpole_steps"]
    for side in ("rlcli", "SB3"):
        (run,) = runs(cartpole, "time", side)
        result = run["result"]
        assert result["reached"] or result["steps"] >= budget, (side, result)
        assert run["value"] > 0


def test_the_rl_games_section_runs_both_libraries_on_the_same_budget(tmp_path):
    pytest.importorskip("rl_games")  # an optional peer: pip install rl-games==1.6.5
    proc = subprocess.run(
        [sys.executable, "scripts/bench_peers.py", "--only", "hopper-rlgames", "--quick", "--repeats", "1",
         "--json", str(tmp_path / "bench.json")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (section,) = json.loads((tmp_path / "bench.json").read_text())["sections"]
    assert section["name"] == "hopper-rlgames" and section["error"] is None
    for measurement, side in (("time same", "rlcli"), ("time", "rl_games"), ("time tuned", "rlcli")):
        (run,) = runs(section, measurement, side)
        assert run["value"] > 0 and run["result"]["steps"] >= 4096, run
        assert (run["result"]["backend"], run["result"]["n_envs"]) == ("envpool", 64), run
    assert not list(REPO.glob("runs/Hopper-v4_envpool*")), "rl_games wrote into the repository"
