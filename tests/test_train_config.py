"""Training configs: PPOConfig (the algorithm) and the serving setup a configs/train file also holds.

Shipped files load through the setup's loader (each key to the part that has it), round-trip,
and bad input fails at load naming the key; PPOConfig alone refuses a serving key saying where
it moved."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest

from inferencegym_jax.training_setup import ServingSetup, TrainConfig, from_dict, load_config
from training import config as ppo_config
from training.config import HParams, PPOConfig, shipped_configs, static_fields, traced_fields

# The serving setup's keys: those that left PPOConfig for it (issue 40), what a configs/train file
# names about the env and its teacher, and imitation_teacher_choice, born there. imitation_epochs,
# imitation_rounds and imitation_lr (the fit to a teacher, env-agnostic) stayed in PPOConfig.
MOVED = {"task", "action_mode", "history_windows", "history_window_intervals", "forecast_intervals",
         "imitation_episodes", "imitation_teacher", "imitation_teacher_choice", "imitation_horizon",
         "imitation_samples", "default_logit", "initial_action"}


def test_shipped_configs_load_and_cover_every_task():
    import inferencegym_jax as ig

    names = shipped_configs()
    for env_id in ig.registered_envs():
        number = env_id.split("Task")[1].split("-")[0]
        assert f"ppo_task{number}" in names, f"no training config for {env_id}"
    for name in names:
        config = load_config(name)
        assert isinstance(config.ppo, PPOConfig) and isinstance(config.setup, ServingSetup)
        assert config.task == config.setup.task in ig.all_envs()
        assert config.batch_size % config.num_minibatches == 0


def test_the_parts_split_the_keys():
    ppo_keys = {f.name for f in dataclasses.fields(PPOConfig)}
    setup_keys = {f.name for f in dataclasses.fields(ServingSetup)}
    assert setup_keys == MOVED and not ppo_keys & setup_keys
    assert {"imitation_epochs", "imitation_rounds", "imitation_lr"} <= ppo_keys
    config = load_config("ppo_task2_v1", num_envs=8, imitation_rounds=1, history_windows=3)
    assert (config.ppo.num_envs, config.ppo.imitation_rounds, config.setup.history_windows) == (8, 1, 3)
    assert config.replace(lr=1e-3, forecast_intervals=2) == TrainConfig(config.ppo.replace(lr=1e-3),
                                                                        dataclasses.replace(config.setup,
                                                                                            forecast_intervals=2))
    with pytest.raises(AttributeError, match="neither PPOConfig nor ServingSetup"):
        _ = config.no_such_field


def test_round_trip_through_toml(tmp_path):
    config = load_config("ppo_task1", lr=1e-3, actor_widths=[32, 16], normalize_obs=False, history_windows=2)
    path = tmp_path / "c.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config
    assert config.actor_widths == (32, 16)
    ppo_only = tmp_path / "ppo.toml"
    ppo_only.write_text(config.ppo.to_toml())
    assert ppo_config.load_config(ppo_only) == config.ppo


def test_ppo_config_refuses_a_serving_key_saying_where_it_moved():
    """The shipped files keep their keys: PPOConfig's own loader says what moved and where."""
    with pytest.raises(ValueError) as err:
        ppo_config.load_config("ppo_task1")
    message = str(err.value)
    assert "unknown config key 'task'" in message and "moved to the serving setup" in message
    assert "inferencegym_jax.training_setup.load_config" in message
    for key in MOVED:
        with pytest.raises(ValueError, match=f"unknown config key '{key}'.*moved to the serving setup"):
            PPOConfig().replace(**{key: getattr(ServingSetup(), key)})


def test_traced_and_static_fields_partition_the_config():
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    assert set(traced_fields()) | set(static_fields()) == names
    assert not set(traced_fields()) & set(static_fields())
    hp = PPOConfig(lr=2e-4).hparams()
    assert isinstance(hp, HParams)
    assert hp.lr.dtype == jnp.float32 and float(hp.lr) == pytest.approx(2e-4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"learning_rate": 1e-3}, "unknown config key 'learning_rate'"),
        ({"num_envs": 2.5}, "'num_envs' must be an integer"),
        ({"num_envs": True}, "'num_envs' must be an integer"),
        ({"lr": "fast"}, "'lr' must be a number"),
        ({"anneal_lr": 1}, "'anneal_lr' must be a bool"),
        ({"actor_widths": [64, "x"]}, "'actor_widths' must be a list of integers"),
        ({"actor_widths": []}, "'actor_widths'"),
        ({"num_steps": 0}, "'num_steps' = 0 out of range"),
        ({"lr": 0.0}, "'lr' = 0.0 out of range (0.0, 1.0]"),
        ({"gamma": 1.5}, "'gamma' = 1.5 out of range [0.0, 1.0]"),
        ({"task": 99}, "'task' = 99"),
        ({"history_windows": -1}, "'history_windows' = -1 out of range"),
        ({"num_envs": 6, "num_steps": 1, "num_minibatches": 4}, "'num_minibatches' = 4 must divide"),
        ({"initial_action": "best"}, "'initial_action' = 'best' out of range: must be 'default' or 'best_static'"),
        ({"initial_action": "best_static"}, "'initial_action' = 'best_static' needs default_logit > 0"),
        ({"initial_action": "best_static", "action_mode": "relative", "default_logit": 1.0},
         "'initial_action' = 'best_static' needs action_mode = 'absolute' or 'hold'"),
    ],
)
def test_bad_config_fails_naming_the_key(overrides, message):
    with pytest.raises(ValueError) as err:
        from_dict(overrides)
    assert message in str(err.value)


def test_an_unknown_key_names_both_key_lists():
    with pytest.raises(ValueError) as err:
        from_dict({"num_env": 8})
    assert "unknown config key 'num_env'" in str(err.value)
    assert "PPOConfig's keys" in str(err.value) and "'num_envs'" in str(err.value)
    assert "serving setup's keys" in str(err.value) and "'action_mode'" in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="unknown config 'no_such_config'"):
        load_config("no_such_config")
    bad = tmp_path / "bad.toml"
    bad.write_text("lr = = 3\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text("num_env = 8\n")
    with pytest.raises(ValueError, match="unknown config key 'num_env'"):
        load_config(typo)


def test_task_number_resolves_to_env_id():
    from inferencegym_jax.tasks import resolve_id

    assert from_dict({"task": 2}).task == resolve_id(2) and "Task2" in resolve_id(2)
    assert from_dict({"task": "InferenceGym-Task3-v0"}).task == "InferenceGym-Task3-v0"
