"""PPO config: shipped files load, round-trip, and bad input fails at load naming the key."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest

from training.config import HParams, PPOConfig, from_dict, load_config, shipped_configs, static_fields, traced_fields


def test_shipped_configs_load_and_cover_every_task():
    import inferencegym_jax as ig

    names = shipped_configs()
    for env_id in ig.registered_envs():
        number = env_id.split("Task")[1].split("-")[0]
        assert f"ppo_task{number}" in names, f"no training config for {env_id}"
    for name in names:
        config = load_config(name)
        assert config.task in ig.registered_envs()
        assert config.batch_size % config.num_minibatches == 0


def test_round_trip_through_toml(tmp_path):
    config = load_config("ppo_task1", lr=1e-3, actor_widths=[32, 16], normalize_obs=False)
    path = tmp_path / "c.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config
    assert config.actor_widths == (32, 16)


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
    assert from_dict({"task": 2}).task == "InferenceGym-Task2-v0"
    assert from_dict({"task": "InferenceGym-Task3-v0"}).task == "InferenceGym-Task3-v0"
