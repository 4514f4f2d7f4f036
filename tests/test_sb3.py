"""Stable-Baselines3 on the gymnasium adapters: SB3's env checker, and a short PPO run through
the jitted vector env wrapped as an SB3 VecEnv (inferencegym_jax.interop.sb3_env.JaxBatchVecEnv)."""

from __future__ import annotations

import importlib
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig

pytest.importorskip("gymnasium")
pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")
ge = importlib.import_module("inferencegym_jax.interop.gymnasium_env")  # after the skips: it needs gymnasium
sb3_env_checker = importlib.import_module("stable_baselines3.common.env_checker")
sb3_vec_env = importlib.import_module("stable_baselines3.common.vec_env")

TASK = "InferenceGym-Task1-v0"
HORIZON = 16  # intervals: a 256-step run crosses episode boundaries
NUM_ENVS = 1  # GymnasiumEnv's batch width: one compiled program for the whole file
sb3_env = importlib.import_module("inferencegym_jax.interop.sb3_env")


@pytest.fixture(scope="module")
def params():
    return ig.make(TASK)[1].replace(max_steps_in_episode=jnp.int32(HORIZON))


def test_sb3_env_checker_passes_without_warnings(params):
    env = ge.GymnasiumEnv(TASK, params=params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_env_checker.check_env(env, warn=True)
    assert [str(w.message) for w in caught] == []


def test_ppo_learns_through_the_jitted_vector_env(params):
    import torch

    torch.set_num_threads(1)  # a tiny MLP: threads only contend with XLA's
    num_envs, n_steps = NUM_ENVS, 256
    batch = sb3_env.JaxBatchVecEnv(ge.GymnasiumVectorEnv(num_envs, TASK, params=params))
    venv = sb3_vec_env.VecMonitor(batch)
    model = sb3.PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=64, n_epochs=2, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [32, 32]})
    model.learn(total_timesteps=num_envs * n_steps)
    assert model.num_timesteps == num_envs * n_steps
    episodes = list(model.ep_info_buffer)  # VecMonitor: one record per finished episode
    assert len(episodes) == num_envs * (n_steps // HORIZON)
    assert {e["l"] for e in episodes} == {HORIZON}
    assert all(-HORIZON <= e["r"] <= HORIZON for e in episodes)
    obs = venv.reset()
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (num_envs, 5)
    assert batch.envs.single_action_space.contains(actions[0].astype(np.int64))


def test_the_sb3_vec_env_keeps_sb3s_conventions(params):
    """Final observations in terminal_observation, TimeLimit.truncated, seeds as DummyVecEnv's."""
    batch = sb3_env.JaxBatchVecEnv(ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params))
    dummy = sb3_vec_env.DummyVecEnv([lambda: ge.GymnasiumEnv(TASK, params=params) for _ in range(NUM_ENVS)])
    for venv in (batch, dummy):
        venv.seed(5)
    np.testing.assert_allclose(batch.reset(), dummy.reset(), rtol=1e-6, atol=1e-7)
    action = np.array([[6, 0, 5, 0, 0], [9, 0, 12, 0, 0], [0, 0, 0, 0, 0], [3, 0, 7, 0, 0]])[:NUM_ENVS]
    for _ in range(HORIZON):
        got, want = batch.step(action), dummy.step(action)
        for a, b in zip(got[:3], want[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert got[2].all()
    for mine, theirs in zip(got[3], want[3]):
        assert mine["TimeLimit.truncated"] is True and theirs["TimeLimit.truncated"] is True
        np.testing.assert_allclose(mine["terminal_observation"], theirs["terminal_observation"], rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="SB3 needs AutoresetMode.SAME_STEP"):
        sb3_env.JaxBatchVecEnv(ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params, autoreset_mode="NextStep"))
