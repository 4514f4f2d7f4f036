"""The day-ahead reservation tasks through gymnasium (inferencegym_jax.interop.reservation_gym):
the registered ids, gymnasium's and SB3's env checkers, episodes equal to plain JAX's bit for bit,
refused commitments that change nothing, termination after the last commitment, JSON-safe
infos, one compile, and ValueErrors naming the bad argument."""

from __future__ import annotations

import importlib
import json
import warnings

import jax
import numpy as np
import pytest
from helpers import plain_jax_stream_episode

from inferencegym_jax.fleet.reservation import OBS_RATE_CLIP, obs_size
from inferencegym_jax.fleet.reservation_tasks import make_reservation, reservation_envs

gymnasium = pytest.importorskip("gymnasium")
ge = importlib.import_module("inferencegym_jax.interop.gymnasium_env")  # after the skip: it needs gymnasium
rg = importlib.import_module("inferencegym_jax.interop.reservation_gym")
check_env = importlib.import_module("gymnasium.utils.env_checker").check_env

TASK = "InferenceGym-Reserve1-v1"
GYM_ID = "InferenceGym/Reserve1-v1"
DAYS = 4  # Reserve1's training episodes: days 7-10 (configs/reservation/reserve1_v1.toml, train_days)
# One commitment per day: flat, a daily shape (more by day than by night), nothing, the most.
ACTIONS = [np.full(24, 6), np.array([2] * 8 + [9] * 12 + [4] * 4), np.zeros(24, np.int64), np.full(24, 32)]


def plain_jax_episode(env, params, root, episode, actions):
    """The module docstring's key derivation in plain JAX: obs (T+1, obs_size), rewards (T,),
    terminated (T,) and the DayTotals of every day as {field: float}."""
    ep = plain_jax_stream_episode(env, params, root, episode, actions, "day", rg.DAY_NAMES)
    assert not ep["truncated"].any()
    return ep["obs"], ep["rewards"], ep["terminated"], ep["infos"]


def adapter_episode(env, actions, **reset_kwargs):
    """The same record of an episode of a ReservationGymnasiumEnv."""
    obs, info = env.reset(**reset_kwargs)
    assert info == {}
    observations, rewards, terminations, days = [obs], [], [], []
    for action in actions:
        obs, reward, terminated, truncated, step_info = env.step(action)
        assert truncated is False and isinstance(reward, float)
        observations.append(obs)
        rewards.append(reward)
        terminations.append(terminated)
        days.append(step_info["day"])
    return np.asarray(observations), np.asarray(rewards), np.asarray(terminations), days


def assert_same_episode(got, want):
    """Bit for bit: observations and rewards exactly equal, the same flags and day totals."""
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert got[3] == want[3]


def test_reservation_ids_are_registered_by_the_front_door():
    ids = rg.register_reservation_envs()
    assert ids == [ge.gymnasium_id(i) for i in reservation_envs()] and GYM_ID in ids
    ge.register_envs()  # the front door registers them too, idempotently
    for env_id, gym_id in zip(reservation_envs(), ids):
        spec = gymnasium.spec(gym_id)
        assert spec.namespace == "InferenceGym" and spec.version == int(env_id.rsplit("-v", 1)[1])
        assert spec.entry_point == rg.RESERVATION_ENTRY_POINT and spec.kwargs == {"task_id": env_id}
        assert rg.reservation_task_id(gym_id) == env_id == rg.reservation_task_id(env_id)
    for wrong in ("InferenceGym-Fleet1-v1", "InferenceGym/Task1-v0", 3):
        with pytest.raises(ValueError, match=rf"task_id={wrong!r}: must be one of \['{TASK}', '{GYM_ID}'\]"):
            rg.ReservationGymnasiumEnv(wrong)


def test_spaces_are_the_env_s():
    env = gymnasium.make(GYM_ID)
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, rg.ReservationGymnasiumEnv) and unwrapped.task_id == TASK
    size = obs_size(unwrapped.params)
    assert env.observation_space == gymnasium.spaces.Box(0.0, OBS_RATE_CLIP, (size,), np.float32) and size == 178
    assert env.action_space == gymnasium.spaces.MultiDiscrete([33] * 24)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    small = rg.ReservationGymnasiumEnv(TASK, reservation={"max_reserved": 8})
    assert small.action_space == gymnasium.spaces.MultiDiscrete([9] * 24)


def test_gymnasium_check_env_passes_without_warnings():
    env = gymnasium.make(GYM_ID)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    env.close()


def test_sb3_check_env_passes_without_warnings():
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    sb3_env_checker = importlib.import_module("stable_baselines3.common.env_checker")
    env = rg.ReservationGymnasiumEnv(TASK)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_env_checker.check_env(env, warn=True)
    assert [str(w.message) for w in caught] == []


def test_episodes_equal_plain_jax_bit_for_bit():
    env, params = make_reservation(TASK)
    adapter = rg.ReservationGymnasiumEnv(GYM_ID)
    root = jax.random.key(7)
    want = plain_jax_episode(env, params, root, 0, ACTIONS)
    assert want[2].tolist() == [False] * (DAYS - 1) + [True]
    assert_same_episode(adapter_episode(adapter, ACTIONS, seed=7), want)
    # reset() without a seed: the stream's next episode; options: episode e of any root
    following = plain_jax_episode(env, params, root, 1, ACTIONS[:2])
    assert not np.array_equal(following[0][0], want[0][0])  # another service
    for kwargs in ({}, {"options": {"key": root, "episode": 1}}):
        assert_same_episode(adapter_episode(adapter, ACTIONS[:2], **kwargs), following)


def test_heldout_split_equals_plain_jax_and_differs_from_train():
    env, params = make_reservation(TASK, split="heldout")
    adapter = gymnasium.make(GYM_ID, split="heldout").unwrapped
    np.testing.assert_array_equal(adapter.params.client_pool, params.client_pool)
    root = jax.random.key(2)
    got = adapter_episode(adapter, ACTIONS[:2], seed=2)
    assert_same_episode(got, plain_jax_episode(env, params, root, 0, ACTIONS[:2]))
    train = adapter_episode(rg.ReservationGymnasiumEnv(TASK), ACTIONS[:2], seed=2)
    assert not np.array_equal(got[0], train[0])  # other clients, another service


def test_a_refused_commitment_changes_nothing():
    env, clean = rg.ReservationGymnasiumEnv(TASK), rg.ReservationGymnasiumEnv(TASK)
    env.reset(seed=5)
    clean.reset(seed=5)
    env.step(ACTIONS[0])
    clean.step(ACTIONS[0])
    bad = {
        r"action\[3\] \(hour_03\) = 33 is outside its range \[0, 32\]": np.array([1, 2, 3, 33] + [0] * 20),
        r"action\[0\] \(hour_00\) = -1 is outside its range \[0, 32\]": np.array([-1] + [4] * 23),
        r"must be an int array of shape \(24,\)": np.full(23, 4),
        "must have an integer dtype": np.full(24, 4.0),
    }
    for message, action in bad.items():
        with pytest.raises(ValueError, match=message):
            env.step(action)
    # the next valid steps return what they return in an env that never saw the bad commitments
    for action in ACTIONS[1:]:
        got, want = env.step(action), clean.step(action)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:] == want[1:]  # reward, flags and info (episode totals: nothing counted)
    assert got[2] is True and got[4]["day_index"] == DAYS


def test_terminated_after_the_last_commitment_never_truncated():
    env = gymnasium.wrappers.RecordEpisodeStatistics(gymnasium.make(GYM_ID))
    env.reset(seed=0)
    flags, rewards, cost_j = [], [], 0.0
    for t, action in enumerate(ACTIONS):
        _, reward, terminated, truncated, info = env.step(action)
        assert truncated is False and info["day_index"] == t + 1
        flags.append(terminated)
        rewards.append(reward)
        cost_j += info["day"]["cost_j"]
    assert flags == [False] * (DAYS - 1) + [True]
    # the wrapper's (and SB3 Monitor's) "episode" key is free: its record of the episode
    assert info["episode"]["l"] == DAYS and info["episode"]["r"] == pytest.approx(sum(rewards), rel=1e-6)
    assert info["episode_totals"]["cost_j"] == pytest.approx(cost_j, rel=1e-6) == -sum(rewards)
    with pytest.raises(ValueError, match="the episode ended after its 4 commitments: call reset"):
        env.step(ACTIONS[0])
    env.reset()
    assert env.step(ACTIONS[0])[2] is False  # a new episode
    short = rg.ReservationGymnasiumEnv(TASK, reservation={"train_days": [7, 8]})
    short.reset(seed=0)
    assert [short.step(a)[2] for a in ACTIONS[:2]] == [False, True]


def test_infos_are_json_safe_and_consistent():
    env = rg.ReservationGymnasiumEnv(TASK, render_mode="ansi")
    assert env.render() == f"day 0/{DAYS}: episode start, nothing committed yet"
    env.reset(seed=1)
    gpu_h = 0.0
    for action in ACTIONS[:3]:
        _, reward, _, _, info = env.step(action)
        assert json.loads(json.dumps(info)) == info
        assert set(info) == {"day", "episode_totals", "reward_components", "day_index"}
        assert set(info["day"]) == set(rg.DAY_NAMES) == set(info["episode_totals"])
        parts = info["reward_components"]
        assert set(parts) == {"gpu", "slo"} and parts["gpu"] > 0 and parts["slo"] >= 0
        assert reward == pytest.approx(-(parts["gpu"] + parts["slo"]), rel=1e-6)
        assert info["day"]["cost_j"] == pytest.approx(-reward, rel=1e-6)
        assert info["day"]["reserved_gpu_h"] == float(np.sum(action))  # one GPU per replica, 1 h each
        gpu_h += info["day"]["reserved_gpu_h"]
        assert info["episode_totals"]["reserved_gpu_h"] == pytest.approx(gpu_h, rel=1e-6)
    assert env.render().startswith(f"day 3/{DAYS} reward") and "GPU-h" in env.render()


def test_bad_arguments_raise_value_errors_naming_them():
    env = rg.ReservationGymnasiumEnv(TASK)
    with pytest.raises(ValueError, match="reset"):
        env.step(ACTIONS[0])
    bad = {
        "split='test' is not one of": dict(split="test"),
        r"reservation\.max_reserved=0: must be an integer in \[1, 256\]": dict(reservation={"max_reserved": 0}),
        "unknown config key 'reservation.decision_dayz'": dict(reservation={"decision_dayz": 3}),
        r"reservation\.train_days=\[5, 8\]: allowed .* first >= history_days=7":
            dict(reservation={"train_days": [5, 8]}),
        r"pass params= or split and task overrides \(split\), not both": dict(params=env.params, split="train"),
        "params must be a fleet.reservation.ReservationParams": dict(params={"max_reserved": 3}),
        r"render_mode='human': must be None or one of \['ansi'\]": dict(render_mode="human"),
    }
    for message, kwargs in bad.items():
        with pytest.raises(ValueError, match=message):
            rg.ReservationGymnasiumEnv(TASK, **kwargs)
    with pytest.raises(ValueError, match=r"seed=-1: must be an integer in \[0, 4294967295\]"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match=r"reset options \['keys'\]"):
        env.reset(options={"keys": 1})


def test_step_and_reset_compile_once():
    for program in (rg._start, rg._step):  # other tests of this process compiled other params' programs
        program.clear_cache()
    env = rg.ReservationGymnasiumEnv(TASK)
    env.reset(seed=0)
    env.step(ACTIONS[0])
    programs = (rg._start, rg._step)
    sizes = [p._cache_size() for p in programs]
    others = (env, rg.ReservationGymnasiumEnv(GYM_ID, split="train"),
              rg.ReservationGymnasiumEnv(TASK, params=make_reservation(TASK, reservation={"slo_target": 0.95})[1]))
    for env_ in others:  # params of the same shapes and static fields: the same programs
        for seed in (1, None, 2**32 - 1):
            env_.reset(seed=seed)
            for _ in range(3):
                env_.step(env_.action_space.sample())
    assert [p._cache_size() for p in programs] == sizes
    # Static fields trace again: the held-out split's days (first_day, decision_days), max_reserved.
    for extra, other_static in enumerate((rg.ReservationGymnasiumEnv(GYM_ID, split="heldout"),
                                          rg.ReservationGymnasiumEnv(TASK, reservation={"max_reserved": 31})), 1):
        other_static.reset(seed=0)
        other_static.step(ACTIONS[1])
        assert [p._cache_size() for p in programs] == [n + extra for n in sizes]
