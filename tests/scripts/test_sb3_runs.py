"""scripts/sb3_runs.py on a tiny budget: SB3's SAC and TD3 with rlcli's Pendulum-v1 settings, written in rlcli's
results format, which ``load_results``, ``benchmark report`` and ``benchmark compare`` read beside an rlcli
run; a second call skips the finished seed, one with other settings is refused."""

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcli.benchmark.results import load_results
from rlcli.cli import app

pytest.importorskip("stable_baselines3")

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
TINY = ["--steps", "400", "--eval-every", "200", "--eval-episodes", "2", "-p", "learning_starts=100",
        "-p", "batch_size=32"]


def script():
    spec = importlib.util.spec_from_file_location("sb3_runs", REPO / "scripts/sb3_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sb3_runs_are_an_rlcli_benchmark_directory(tmp_path, capsys):
    sb3_runs, sb3 = script(), tmp_path / "sb3"
    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)]) == 0
    (row,) = load_results(sb3)
    assert (row.algo, row.env_id, row.seed, row.budget, row.status, row.steps) == ("sac", "Pendulum-v1", 0, 400,
                                                                                   "finished", 400)
    assert [step for step, _ in row.curve] == [200, 400] and row.final_return == row.curve[-1][1] < 0
    assert row.versions["stable_baselines3"] and row.backend.startswith("SB3")
    record = json.loads((sb3 / "sb3_runs" / "Pendulum-v1__sac__s0.json").read_text())
    assert not (sb3 / "sb3_runs" / "partial").exists()  # its saves went with the finished seed
    assert record["settings"]["sb3"]["learning_rate"] == 1e-3  # rlcli's Pendulum-v1 entry
    assert [len(e["returns"]) for e in record["evaluations"]] == [2, 2]

    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)]) == 0
    assert "seed 0: finished before, skipped" in capsys.readouterr().out
    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "-p", "gamma=0.9", "--out", str(sb3)]) == 2
    assert "ran with other settings" in capsys.readouterr().err
    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "-p", "policy_delay=2", "--out", str(sb3)]) == 2
    assert "policy_delay=2 cannot be run on SB3" in capsys.readouterr().err

    rlcli = tmp_path / "rlcli"
    result = runner.invoke(app, ["train", "Pendulum-v1", "--algo", "sac", "--seed", "0", "--threads", "1",
                                 "--run-dir", str(rlcli / "runs" / "Pendulum-v1__sac__s0"), *TINY[:6],
                                 "-p", "learning_starts=100", "-p", "batch_size=32", "-p", "log_every=100"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["benchmark", "compare", str(rlcli), str(sb3)])
    assert result.exit_code == 0, result.output
    assert "| Pendulum-v1 | 400 |" in result.output and "P(A > B) over 1 envs" in result.output
    assert runner.invoke(app, ["benchmark", "report", str(sb3)]).exit_code == 0
    assert (sb3 / "report.md").is_file()

    assert sb3_runs.main(["--side-by-side", str(rlcli), str(sb3), "--out", str(tmp_path / "both")]) == 0
    text = (tmp_path / "both" / "side_by_side.md").read_text()
    assert "## Curves" in text and "| 200 |" in text and "| 400 |" in text


def test_a_stopped_sb3_seed_resumes_from_its_last_evaluation_with_its_replay_buffer(tmp_path, capsys, monkeypatch):
    sb3_runs, sb3 = script(), tmp_path / "sb3"
    original = sb3_runs.save_partial

    def save_then_stop(path, model, *args):
        original(path, model, *args)
        raise KeyboardInterrupt  # a stop right after the first evaluation's save

    monkeypatch.setattr(sb3_runs, "save_partial", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)])
    partial = sb3 / "sb3_runs" / "partial" / "Pendulum-v1__sac__s0"
    saved = json.loads((partial / "progress.json").read_text())
    assert saved["steps"] == 200 and [e["step"] for e in saved["evaluations"]] == [200]
    monkeypatch.setattr(sb3_runs, "save_partial", original)

    from stable_baselines3 import SAC

    model = SAC.load(partial / "model.zip")
    model.load_replay_buffer(partial / "replay_buffer.pkl")
    assert model.replay_buffer.size() == 200  # every transition before the stop comes back

    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)]) == 0
    assert "seed 0: resuming at step 200 (new episodes)" in capsys.readouterr().out
    (row,) = load_results(sb3)
    assert row.steps == 400 and [step for step, _ in row.curve] == [200, 400]
    record = json.loads((sb3 / "sb3_runs" / "Pendulum-v1__sac__s0.json").read_text())
    assert record["resumes"] == [200] and not partial.parent.exists()
    assert row.wall_time_s > saved["seconds"] > 0  # the time before the stop, and the rest


def test_a_stop_between_the_saves_two_renames_resumes_from_the_whole_save(tmp_path, monkeypatch):
    sb3_runs, sb3 = script(), tmp_path / "sb3"
    original = sb3_runs.save_partial

    def stop_before_the_new_save_moves_in(self, target):
        if self.name.endswith(".saving"):
            raise KeyboardInterrupt
        return Path.replace(self, target)

    def save_twice_then_stop_mid_swap(path, model, *args):
        original(path, model, *args)  # a whole save at this step
        monkeypatch.setattr(Path, "rename", stop_before_the_new_save_moves_in)
        original(path, model, *args)  # the next: the old save moved aside, the new one not yet in place

    monkeypatch.setattr(sb3_runs, "save_partial", save_twice_then_stop_mid_swap)
    with pytest.raises(KeyboardInterrupt):
        sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)])
    monkeypatch.undo()
    partial = sb3 / "sb3_runs" / "partial" / "Pendulum-v1__sac__s0"
    assert not partial.exists() and sb3_runs.saved_partial(partial).name.endswith(".saving")
    assert sb3_runs.main(["Pendulum-v1", "--seeds", "0", *TINY, "--out", str(sb3)]) == 0
    (row,) = load_results(sb3)
    assert row.steps == 400 and not partial.parent.exists()


def test_the_side_by_side_curves_are_those_of_the_finished_runs(tmp_path):
    from rlcli.benchmark.results import RunResult, write_results

    def row(seed: int, status: str, returns: tuple[float, float]) -> RunResult:
        return RunResult(algo="sac", env_id="Hopper-v5", seed=seed, budget=200, status=status, steps=200,
                         final_return=returns[-1], curve=((100, returns[0]), (200, returns[1])))

    write_results(tmp_path / "a", [row(0, "finished", (10.0, 30.0)), row(1, "running", (1000.0, 3000.0))])
    write_results(tmp_path / "b", [row(0, "finished", (20.0, 40.0))])
    text = script().side_by_side(tmp_path / "a", tmp_path / "b", tmp_path / "both").read_text()
    assert "| 100 | 10.0 ± 0.0 | 20.0 ± 0.0 |" in text and "| 200 | 30.0 ± 0.0 | 40.0 ± 0.0 |" in text


def test_sb3_td3_runs_with_rlcli_td3_settings_and_resumes_with_its_noise(tmp_path, capsys, monkeypatch):
    sb3_runs, sb3 = script(), tmp_path / "sb3"
    cfg = sb3_runs.run_config("td3", "Pendulum-v1", 0, 400, 200, 2, "auto", ["target_noise=0.3"], 1)
    kwargs = sb3_runs.sb3_kwargs(cfg.algo)
    env = sb3_runs.evaluation_env(cfg)
    from stable_baselines3.common.env_util import make_vec_env

    model = sb3_runs.make_model(cfg, kwargs, make_vec_env("Pendulum-v1", n_envs=1, seed=0), None)
    env.close()
    # rlcli's Pendulum-v1 TD3 entry, as SB3 reads it
    assert (model.learning_rate, model.gamma, model.buffer_size, model.learning_starts) == (1e-3, 0.98, 200_000, 1000)
    assert (model.policy_delay, model.target_policy_noise, model.target_noise_clip, model.tau) == (2, 0.3, 0.5, 0.005)
    assert model.action_noise._sigma.tolist() == [0.1] and model.policy.critic.n_critics == 2
    assert [m.out_features for m in model.actor.mu if hasattr(m, "out_features")] == [256, 256, 1]

    original = sb3_runs.save_partial

    def save_then_stop(path, model, *args):
        original(path, model, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(sb3_runs, "save_partial", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        sb3_runs.main(["Pendulum-v1", "--algo", "td3", "--seeds", "0", *TINY, "--out", str(sb3)])
    monkeypatch.setattr(sb3_runs, "save_partial", original)
    assert sb3_runs.main(["Pendulum-v1", "--algo", "td3", "--seeds", "0", *TINY, "--out", str(sb3)]) == 0
    assert "seed 0: resuming at step 200 (new episodes)" in capsys.readouterr().out
    (row,) = load_results(sb3)
    assert (row.algo, row.steps, [step for step, _ in row.curve]) == ("td3", 400, [200, 400])
    record = json.loads((sb3 / "sb3_runs" / "Pendulum-v1__td3__s0.json").read_text())
    assert record["settings"]["sb3"]["action_noise_std"] == 0.1 and record["resumes"] == [200]

    assert sb3_runs.main(["Pendulum-v1", "--algo", "td3", "--seeds", "0", *TINY, "-p", "actor_lr=3e-4",
                          "--out", str(tmp_path / "other")]) == 2
    assert "SB3's TD3 has one learning rate; this entry has actor_lr=0.0003, critic_lr=0.001" in capsys.readouterr().err
    assert sb3_runs.main(["Pendulum-v1", "--algo", "td3", "--seeds", "0", *TINY, "-p", "n_step=3",
                          "--out", str(tmp_path / "other")]) == 2
    assert "n_step=3 cannot be run on SB3" in capsys.readouterr().err


@pytest.mark.parametrize(("quantiles", "model_class"), [(1, "DQN"), (10, "QRDQN")])
def test_sb3_dqn_and_qr_dqn_run_with_rlcli_dqn_settings(tmp_path, capsys, quantiles, model_class):
    sb3_runs, sb3 = script(), tmp_path / "sb3"
    params = [f"quantiles={quantiles}", "double_q=false"]
    cfg = sb3_runs.run_config("dqn", "CartPole-v1", 0, 400, 200, 2, "auto", params, 1)
    from stable_baselines3.common.env_util import make_vec_env

    model = sb3_runs.make_model(cfg, sb3_runs.sb3_kwargs(cfg.algo), make_vec_env("CartPole-v1", n_envs=1, seed=0),
                                None)
    # rlcli's CartPole-v1 DQN entry, as SB3 reads it: a gradient step every 2 env steps, the target copied every
    # 128 of them (256 env steps)
    assert type(model).__name__ == model_class
    assert (model.learning_rate, model.batch_size, model.learning_starts, model.exploration_final_eps) == (
        2.3e-3, 64, 1000, 0.04)
    assert (model.train_freq.frequency, model.gradient_steps, model.target_update_interval) == (2, 1, 256)
    assert model.policy.optimizer.defaults["eps"] == 1e-8 and model.max_grad_norm == 10.0
    if quantiles > 1:
        assert model.policy.n_quantiles == quantiles
    assert sb3_runs.main(["CartPole-v1", "--algo", "dqn", "--seeds", "0", *TINY, "--out", str(sb3),
                          *(arg for param in params for arg in ("-p", param))]) == 0
    (row,) = load_results(sb3)
    assert (row.algo, row.steps, [step for step, _ in row.curve]) == ("dqn", 400, [200, 400])
    assert row.final_return > 0

    assert sb3_runs.main(["CartPole-v1", "--algo", "dqn", "--seeds", "0", *TINY, "--out", str(tmp_path / "other"),
                          "-p", f"quantiles={quantiles}"]) == 2
    assert "double_q=True cannot be run on SB3" in capsys.readouterr().err


def test_a_cnn_dqn_maps_to_sb3s_nature_cnn_and_this_script_refuses_frames(tmp_path, capsys):
    sb3_runs = script()
    cfg = sb3_runs.run_config("dqn", "Pong-v5", 0, 400, 200, 2, "gymnasium", ["double_q=false"], 1)
    assert (cfg.algo.trunk, cfg.algo.hidden) == ("cnn", (512,))  # the atari entry
    # SB3's CnnPolicy: the Nature CNN, whose one dense layer is the trunk's, then the Q head alone
    policy = sb3_runs.sb3_kwargs(cfg.algo)["policy_kwargs"]
    assert policy["net_arch"] == [] and policy["features_extractor_kwargs"] == {"features_dim": 512}
    assert sb3_runs.main(["Pong-v5", "--algo", "dqn", "--seeds", "0", *TINY, "--out", str(tmp_path / "sb3"),
                          "-p", "double_q=false"]) == 2
    assert "trunk=cnn cannot be run by this script" in capsys.readouterr().err
    assert not (tmp_path / "sb3").exists()
