"""Hyperparameter files, merge order, overrides and the one-line errors for bad input."""

import pytest
import yaml
from pydantic import ValidationError

from rlcli.algos import build_algo_config, hyperparams_for, resolve, run_config
from rlcli.algos.ppo import PPOConfig
from rlcli.config import Schedule, deep_merge, hyperparams_dir, parse_overrides
from rlcli.envs import env_group
from rlcli.errors import UsageError

REQUIRED = ["CartPole-v1", "Acrobot-v1", "Pendulum-v1", "Hopper-v5", "HalfCheetah-v5", "Walker2d-v5",
            "Ant-v5", "Humanoid-v5", "Pong-v5", "Breakout-v5"]


@pytest.mark.parametrize("env_id", REQUIRED)
def test_every_shipped_entry_validates(env_id):
    table = yaml.safe_load((hyperparams_dir() / "ppo.yml").read_text())
    assert env_id in table, f"hyperparams/ppo.yml lacks a tuned entry for {env_id}"
    cfg = build_algo_config("ppo", hyperparams_for("ppo", env_id, env_group(env_id)))
    assert cfg.batch_size >= cfg.minibatch_size


@pytest.mark.parametrize("algo", ["ppo", "sac", "td3", "dqn", "pqn"])
def test_every_group_and_entry_of_every_algorithm_validates(algo):
    # each key over the default alone, and each env entry over its group too: a setting the checks refuse (a
    # learning_starts past the replay's size, a minibatch past the rollout) cannot ship
    table = yaml.safe_load((hyperparams_dir() / f"{algo}.yml").read_text())
    for key, values in table.items():
        build_algo_config(algo, deep_merge(table["default"], values or {}))
        build_algo_config(algo, hyperparams_for(algo, key, env_group(key)))


def test_groups():
    assert env_group("Pong-v5") == env_group("ALE/Breakout-v5") == "atari"
    assert env_group("Hopper-v5") == "mujoco"
    assert env_group("CartPole-v1") == "classic"


def test_atari_group_uses_the_nature_cnn():
    cfg = build_algo_config("ppo", hyperparams_for("ppo", "Pong-v5", "atari"))
    assert cfg.network.trunk == "cnn" and cfg.network.shared


def test_merge_order_default_group_entry_file_overrides(tmp_path):
    extra = tmp_path / "mine.yml"
    extra.write_text("n_epochs: 3\nnetwork:\n  hidden: [32]\n")
    cfg = resolve("ppo", "Hopper-v5", config_file=extra,
                          overrides=parse_overrides(["n_epochs=7", "gamma=0.97"]))
    assert cfg.algo.n_epochs == 7 and cfg.algo.gamma == 0.97
    assert cfg.algo.network.hidden == (32,)
    entry = hyperparams_for("ppo", "Hopper-v5", "mujoco")
    assert cfg.algo.normalize_obs == entry.get("normalize_obs", PPOConfig().normalize_obs)


def test_overrides_parse_yaml_scalars_and_nested_keys():
    assert parse_overrides(["learning_rate=3e-4", "network.hidden=[64, 64]", "lr_schedule=adaptive_kl"]) == {
        "learning_rate": 3e-4, "network": {"hidden": [64, 64]}, "lr_schedule": "adaptive_kl"}
    assert build_algo_config("ppo", {"lr_schedule": "adaptive_kl"}).lr_schedule is Schedule.adaptive_kl


def test_typo_names_the_key_and_close_matches():
    with pytest.raises(UsageError) as e:
        build_algo_config("ppo", {"learning_rte": 1e-3})
    message = str(e.value)
    assert "learning_rte" in message and "learning_rate" in message and "\n" not in message


def test_nested_typo_and_bad_values():
    with pytest.raises(UsageError, match="network.hiden.*hidden"):
        build_algo_config("ppo", {"network": {"hiden": [4]}})
    with pytest.raises(UsageError, match="gamma"):
        build_algo_config("ppo", {"gamma": 1.5})
    with pytest.raises(UsageError, match="lr_schedule"):
        build_algo_config("ppo", {"lr_schedule": "cosine"})
    with pytest.raises(UsageError, match="minibatch_size"):
        build_algo_config("ppo", {"n_envs": 2, "n_steps": 8, "minibatch_size": 64})
    with pytest.raises(UsageError, match="key=value"):
        parse_overrides(["gamma"])


def test_configs_are_frozen():
    cfg = PPOConfig()
    with pytest.raises(ValidationError):
        cfg.gamma = 0.5  # type: ignore[misc]


SAC_REQUIRED = ["Pendulum-v1", "Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"]


@pytest.mark.parametrize("env_id", SAC_REQUIRED)
def test_every_shipped_sac_entry_validates(env_id):
    table = yaml.safe_load((hyperparams_dir() / "sac.yml").read_text())
    assert env_id in table, f"hyperparams/sac.yml lacks a tuned entry for {env_id}"
    cfg = build_algo_config("sac", hyperparams_for("sac", env_id, env_group(env_id)))
    assert cfg.algo == "sac" and cfg.batch_size <= cfg.buffer_size


def test_run_config_round_trips_either_algorithm_through_yaml():
    from rlcli.config import dump_config

    for algo in ("ppo", "sac", "td3"):
        cfg = resolve(algo, "Pendulum-v1")
        assert run_config(yaml.safe_load(dump_config(cfg))) == cfg


@pytest.mark.parametrize(("entry", "chosen", "expected"), [
    # Hopper's mujoco group: 64 x 64 in 2 minibatches of 2,048; 8 envs keep 2 minibatches of 256
    ({"n_envs": 64, "n_steps": 64, "minibatch_size": 2048}, {"n_envs": 8}, 256),
    ({"n_envs": 64, "n_steps": 64, "minibatch_size": 2048}, {"n_steps": 16}, 512),
    # a minibatch size the user sets is theirs, and nothing follows a rollout left as it was
    ({"n_envs": 64, "n_steps": 64, "minibatch_size": 2048}, {"n_envs": 8, "minibatch_size": 64}, 64),
    ({"n_envs": 64, "n_steps": 64, "minibatch_size": 2048}, {"gamma": 0.9}, 2048),
    # the built-in defaults (8 x 128 in 4 minibatches of 256) where the entry names none
    ({}, {"n_envs": 2}, 64),
    # a recurrent policy's minibatches stay whole env sequences: 16 envs in 4 -> 6 envs in 4 of 1 env each
    ({"n_envs": 16, "n_steps": 32, "minibatch_size": 128, "network": {"recurrent": "lstm"}}, {"n_envs": 6}, 32),
])
def test_a_changed_rollout_keeps_the_entrys_minibatch_count(entry, chosen, expected):
    from rlcli.algos.ppo import fit_minibatches

    values = fit_minibatches(entry, chosen, deep_merge(entry, chosen))
    assert values["minibatch_size"] == expected


def test_n_envs_fits_any_entry_and_the_refusal_names_the_fix():
    cfg = resolve("ppo", "Ant-v5", overrides={"n_envs": 8})
    assert (cfg.algo.n_envs, cfg.algo.n_steps, cfg.algo.minibatch_size) == (8, 64, 256)
    with pytest.raises(UsageError) as refused:
        resolve("ppo", "Ant-v5", overrides={"n_envs": 8, "minibatch_size": 1024})
    assert str(refused.value) == ("inconsistent settings: minibatch_size=1024 exceeds the rollout size "
                                  "n_envs*n_steps=512 (8*64); lower minibatch_size to at most 512 or raise n_envs "
                                  "or n_steps")


def test_explain_names_where_each_hyperparameter_came_from(tmp_path):
    from rlcli.algos import explain

    (tmp_path / "mine.yml").write_text("gamma: 0.98\n")
    cfg, settings = explain("ppo", "Hopper-v5", config_file=tmp_path / "mine.yml",
                            overrides={"n_envs": 8, "network": {"hidden": [32]}})
    by_key = {s.key: s for s in settings}
    assert by_key["n_envs"].source == "-p"
    assert (by_key["gamma"].value, by_key["gamma"].source) == (0.98, f"--config {tmp_path / 'mine.yml'}")
    assert (by_key["network.hidden"].value, by_key["network.hidden"].source) == ([32], "-p")
    assert (by_key["minibatch_size"].value, by_key["minibatch_size"].source) == (256, "fitted")
    assert by_key["n_epochs"].source == "group mujoco" and by_key["adam_eps"].source == "default"
    assert by_key["network.recurrent"].source == "built-in"
    assert set(by_key) >= {f"network.{k}" for k in ("trunk", "hidden", "activation")}
    assert all(s.description for s in settings), [s.key for s in settings if not s.description]
    assert cfg.algo.minibatch_size == 256
