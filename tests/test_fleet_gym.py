"""The fleet tasks through gymnasium (inferencegym_jax.interop.fleet_gym): the registered ids,
gymnasium's and SB3's env checkers, keys and rewards equal to plain JAX's, reproducible resets,
truncation at the horizon, action checks, JSON-safe infos, one compile."""

from __future__ import annotations

import importlib
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import plain_jax_stream_episode

from inferencegym_jax.fleet.env import OBS_SIZE
from inferencegym_jax.fleet.tasks import fleet_envs, make_fleet

gymnasium = pytest.importorskip("gymnasium")
ge = importlib.import_module("inferencegym_jax.interop.gymnasium_env")  # after the skip: it needs gymnasium
fg = importlib.import_module("inferencegym_jax.interop.fleet_gym")
check_env = importlib.import_module("gymnasium.utils.env_checker").check_env

TASK = "InferenceGym-Fleet1-v1"
GYM_ID = "InferenceGym/Fleet1-v1"
HORIZON = 4  # control intervals (4 min of the day): short episodes; every test runs this shape
ACTIONS = [np.array([16, 0]), np.array([6, 1]), np.array([0, 0]), np.array([10, 0]), np.array([3, 1])]


@pytest.fixture(scope="module")
def short():
    """Fleet1's training env and its params with a horizon of HORIZON intervals."""
    return make_fleet(TASK, max_steps=HORIZON)


def plain_jax_episode(env, params, root, episode, actions):
    """The module docstring's key derivation in plain JAX: obs (T+1, 12), rewards (T,),
    truncated (T,), the totals of every interval and the start minute."""
    ep = plain_jax_stream_episode(env, params, root, episode, actions, "totals", fg.TOTAL_NAMES)
    assert not ep["terminated"].any()
    return ep["obs"], ep["rewards"], ep["truncated"], ep["infos"], int(ep["first_state"].start_minute)


def adapter_episode(env, actions, **reset_kwargs):
    """The same record of an episode of a FleetGymnasiumEnv (and its step infos)."""
    obs, info = env.reset(**reset_kwargs)
    observations, rewards, truncations, infos = [obs], [], [], []
    for action in actions:
        obs, reward, terminated, truncated, step_info = env.step(action)
        assert terminated is False and isinstance(reward, float)
        observations.append(obs)
        rewards.append(reward)
        truncations.append(truncated)
        infos.append(step_info)
    return np.asarray(observations), np.asarray(rewards), np.asarray(truncations), infos, info["start_minute"]


def test_fleet_ids_are_registered_by_the_front_door():
    ids = fg.register_fleet_envs()
    assert ids == [ge.gymnasium_id(i) for i in fleet_envs()] and GYM_ID in ids
    for env_id, gym_id in zip(fleet_envs(), ids):
        spec = gymnasium.spec(gym_id)
        assert spec.namespace == "InferenceGym" and spec.version == int(env_id.rsplit("-v", 1)[1])
        assert spec.entry_point == fg.FLEET_ENTRY_POINT and spec.kwargs == {"task_id": env_id}
        assert fg.fleet_task_id(gym_id) == env_id == fg.fleet_task_id(env_id)
    assert ge.register_envs() == [ge.gymnasium_id(i) for i in ge.tasks.registered_envs()]  # serving ids unchanged
    with pytest.raises(ValueError, match="task_id='InferenceGym-Task1-v0'"):
        fg.fleet_task_id("InferenceGym-Task1-v0")


@pytest.mark.slow  # the fast tier's budget: compiles the adapter's fleet programs
def test_gymnasium_check_env_passes_without_warnings():
    env = gymnasium.make(GYM_ID, max_steps=HORIZON)
    assert isinstance(env.unwrapped, fg.FleetGymnasiumEnv) and env.unwrapped.task_id == TASK
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    env.close()


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_sb3_check_env_passes_without_warnings():
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    sb3_env_checker = importlib.import_module("stable_baselines3.common.env_checker")
    env = fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_env_checker.check_env(env, warn=True)
    assert [str(w.message) for w in caught] == []


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_episodes_equal_plain_jax_with_the_stream_keys(short):
    env, params = short
    adapter = fg.FleetGymnasiumEnv(GYM_ID, max_steps=HORIZON)
    root = jax.random.key(7)
    got = adapter_episode(adapter, ACTIONS, seed=7)
    want = plain_jax_episode(env, params, root, 0, ACTIONS)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(got[2], want[2])
    for info, totals in zip(got[3], want[3]):
        assert info["totals"] == pytest.approx(totals, rel=1e-6, abs=1e-6)
    assert got[4] == want[4]
    # reset() without a seed: the stream's next episode; options: episode e of any root
    following = plain_jax_episode(env, params, root, 1, ACTIONS[:2])
    for kwargs in ({}, {"options": {"key": root, "episode": 1}}):
        again = adapter_episode(adapter, ACTIONS[:2], **kwargs)
        np.testing.assert_allclose(again[1], following[1], rtol=1e-6, atol=1e-9)
        assert again[4] == following[4]


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_same_seed_same_episode_and_another_seed_another():
    one, two = (fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON) for _ in range(2))
    first = adapter_episode(one, ACTIONS[:3], seed=3)
    second = adapter_episode(two, ACTIONS[:3], seed=3)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[3] == second[3] and first[4] == second[4]
    other = adapter_episode(two, ACTIONS[:3], seed=4)
    assert not np.array_equal(first[1], other[1])  # Poisson arrivals (and likely the window) differ


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_truncated_at_max_steps_never_terminated():
    env = gymnasium.wrappers.RecordEpisodeStatistics(gymnasium.make(GYM_ID, max_steps=HORIZON))
    env.reset(seed=0)
    flags, rewards = [], []
    for t in range(HORIZON):
        _, reward, terminated, truncated, info = env.step(np.array([8, 0]))
        assert terminated is False and info["timestep"] == t + 1
        flags.append(truncated)
        rewards.append(reward)
    assert flags == [False] * (HORIZON - 1) + [True]
    assert env.unwrapped.params.max_steps_in_episode == HORIZON
    # the wrapper's (and SB3 Monitor's) "episode" key is free: its record of the episode
    assert info["episode"]["l"] == HORIZON and info["episode"]["r"] == pytest.approx(sum(rewards), rel=1e-6)


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_infos_are_json_safe_and_consistent():
    env = fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON, render_mode="ansi")
    assert env.render() == f"t=0/{HORIZON}: episode start, no interval served yet"
    _, reset_info = env.reset(seed=1)
    assert json.loads(json.dumps(reset_info)) == reset_info
    gpu = 0.0
    for action in ACTIONS[:3]:
        _, reward, _, _, info = env.step(action)
        assert json.loads(json.dumps(info)) == info
        assert set(info["totals"]) == set(fg.TOTAL_NAMES) == set(info["episode_totals"])
        assert info["applied_action"] == {"replicas": int(action[0]), "routing": int(action[1])}
        assert reward == pytest.approx(-(info["reward_components"]["gpu"] + info["reward_components"]["slo"]),
                                       rel=1e-6)
        gpu += info["totals"]["gpu_seconds"]
        assert info["episode_totals"]["gpu_seconds"] == pytest.approx(gpu, rel=1e-6)
    assert env.render().startswith(f"t=3/{HORIZON} reward") and "routing least_loaded" in env.render()


def test_bad_actions_and_arguments_raise_value_errors():
    env = fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON)
    with pytest.raises(ValueError, match="reset"):
        env.step(np.array([1, 0]))
    env.reset(seed=0)
    bad = {(17, 0): r"action\[0\] \(replicas\) = 17 is outside its range \[0, 16\]",
           (-1, 0): r"action\[0\] \(replicas\) = -1 is outside its range \[0, 16\]",
           (4, 2): r"action\[1\] \(routing\) = 2 is outside its range \[0, 1\]"}
    for action, message in bad.items():
        with pytest.raises(ValueError, match=message):
            env.step(np.array(action))
        assert not env.action_space.contains(np.array(action, np.int64))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.array([1, 0, 0]))
    with pytest.raises(ValueError, match="integer dtype"):
        env.step(np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="split='test'"):
        fg.FleetGymnasiumEnv(TASK, split="test")
    with pytest.raises(ValueError, match="not both"):
        fg.FleetGymnasiumEnv(TASK, params=env.params, max_steps=3)
    with pytest.raises(ValueError, match="render_mode='human'"):
        fg.FleetGymnasiumEnv(TASK, render_mode="human")


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_heldout_split_and_overrides_through_make():
    env = gymnasium.make(GYM_ID, split="heldout", max_steps=60)
    want = make_fleet(TASK, split="heldout", max_steps=60)[1]
    params = env.unwrapped.params
    np.testing.assert_array_equal(params.curve.starts, want.curve.starts)
    assert int(params.max_steps_in_episode) == 60
    obs, info = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert info["start_minute"] in set(np.asarray(want.curve.starts).tolist())
    assert env.action_space == gymnasium.spaces.MultiDiscrete([17, 2])


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_step_and_reset_compile_once(short):
    _, params = short
    env = fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON)
    env.reset(seed=0)
    env.step(ACTIONS[0])
    sizes = [p._cache_size() for p in (fg._start, fg._step)]
    others = (env, fg.FleetGymnasiumEnv(GYM_ID, params=params.replace(max_steps_in_episode=jnp.int32(2))),
              fg.FleetGymnasiumEnv(TASK, max_steps=HORIZON + 1))  # same shapes: the same programs
    for env_ in others:
        for seed in (1, None, 2**32 - 1):
            env_.reset(seed=seed)
            for _ in range(HORIZON + 1):
                env_.step(env_.action_space.sample())
    assert [p._cache_size() for p in (fg._start, fg._step)] == sizes


@pytest.mark.slow  # the fast tier's budget: each compiles the adapter's fleet programs
def test_make_vec_steps_sync_copies():
    envs = gymnasium.make_vec(GYM_ID, num_envs=2, max_steps=HORIZON)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, OBS_SIZE)
    _, reward, terminated, truncated, info = envs.step(np.array([[8, 0], [4, 1]]))
    assert reward.shape == (2,) and not terminated.any() and not truncated.any()
    assert info["applied_action"]["replicas"].tolist() == [8, 4]
    envs.close()
