"""The gymnasium adapters: API checks, registered ids, keys equal to plain JAX's, both autoreset
modes at the episode boundary, equality with SyncVectorEnv over single envs, one compile."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate
from inferencegym_jax.observation import OBS_SIZE

gymnasium = pytest.importorskip("gymnasium")
ge = importlib.import_module("inferencegym_jax.interop.gymnasium_env")  # after the skip: it needs gymnasium
AutoresetMode = gymnasium.vector.AutoresetMode
check_env = importlib.import_module("gymnasium.utils.env_checker").check_env

TASK = "InferenceGym-Task1-v0"
GYM_ID = "InferenceGym/Task1-v0"
HORIZON = 4  # intervals: short episodes, so that tests cross the boundary
NUM_ENVS = 3
ACTION = np.array([6, 0, 5, 0, 0])  # kv_budget 0.7, batch 32 (task 1 masks the other knobs)


@pytest.fixture(scope="module")
def short():
    """Task 1's env and its params with a horizon of HORIZON intervals (same env: same programs)."""
    env, params = ig.make(TASK)
    return env, params.replace(max_steps_in_episode=jnp.int32(HORIZON))


@functools.partial(jax.jit, static_argnums=0)
def plain_reset(env, key, params):
    obs, state = env.reset_env(key, params)
    return env.flatten_observation(obs, params), state


@functools.partial(jax.jit, static_argnums=0)
def plain_step(env, key, state, action, params):
    obs, state, reward, terminated, truncated, info = env.step_env(key, state, action, params)
    return env.flatten_observation(obs, params), state, reward, terminated, truncated, info


def plain_jax_episode(env, params, root, episode, actions):
    """The module docstring's key derivation in plain JAX: obs (T+1, 21), rewards (T,),
    truncated (T,) and the env's info of every interval."""
    k_reset, k_env, _ = jax.random.split(jax.random.fold_in(root, episode), 3)
    obs, state = plain_reset(env, k_reset, params)
    observations, rewards, truncations, infos = [obs], [], [], []
    for t, action in enumerate(actions):
        obs, state, reward, terminated, truncated, info = plain_step(
            env, jax.random.fold_in(k_env, t), state, jnp.asarray(action, jnp.int32), params)
        assert not bool(terminated)
        observations.append(obs)
        rewards.append(float(reward))
        truncations.append(bool(truncated))
        infos.append(info)
    assert plain_step._cache_size() == 1
    return np.asarray(observations), np.asarray(rewards), np.asarray(truncations), infos


def plain_trajectory(episodes):
    """evaluate.Trajectory of plain_jax_episode results, as evaluate.run_episodes records one."""
    def stack(*x):
        return np.stack([np.asarray(v) for v in x])

    info = jax.tree_util.tree_map(stack, *[jax.tree_util.tree_map(stack, *e[3]) for e in episodes])
    rewards = np.stack([e[1] for e in episodes])
    return evaluate.Trajectory(
        reward=rewards, reward_components=info["reward_components"], metrics=info["metrics"],
        action=info["applied_action"], clipped=info["clipped"],
        offered_tokens=info["arrivals"].output_tokens.reshape(rewards.shape + (-1,)).sum(-1),
        valid=np.ones(rewards.shape, bool))


def adapter_episode(env, actions, **reset_kwargs):
    """obs (T+1, 21), rewards (T,), truncated (T,) and the infos of an episode of a GymnasiumEnv."""
    obs, info = env.reset(**reset_kwargs)
    assert info == {}
    observations, rewards, truncations, infos = [obs], [], [], []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert terminated is False
        observations.append(obs)
        rewards.append(reward)
        truncations.append(truncated)
        infos.append(info)
    return np.asarray(observations), np.asarray(rewards), np.asarray(truncations), infos


def assert_episodes_close(got, want):
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_check_env_passes_without_warnings():
    env = gymnasium.make(GYM_ID)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    env.close()


def test_every_task_is_registered_with_a_vector_entry_point():
    for env_id in ig.registered_envs():
        spec = gymnasium.spec(ge.gymnasium_id(env_id))
        assert spec.namespace == "InferenceGym" and spec.version == int(env_id.rsplit("-v", 1)[1])
        assert spec.kwargs == {"task_id": env_id}
        assert spec.vector_entry_point == ge.VECTOR_ENTRY_POINT
        assert ge.task_id_of(ge.gymnasium_id(env_id)) == env_id
    assert ge.register_envs() == [ge.gymnasium_id(i) for i in ig.registered_envs()]  # idempotent


def test_make_with_the_module_prefix_and_make_vec(short):
    env = gymnasium.make("inferencegym_jax.interop.gymnasium_env:" + GYM_ID, render_mode="ansi")
    assert isinstance(env.unwrapped, ge.GymnasiumEnv) and env.unwrapped.task_id == TASK
    obs, _ = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,) and obs.dtype == np.float32
    env.step(ACTION)
    assert env.render().startswith(f"t=1/{int(short[0].default_params.max_steps_in_episode)} reward")
    envs = gymnasium.make_vec(GYM_ID, num_envs=NUM_ENVS, vectorization_mode="vector_entry_point",
                              params=short[1])
    assert isinstance(envs, ge.GymnasiumVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert envs.observation_space.shape == (NUM_ENVS, OBS_SIZE)
    assert envs.single_action_space == gymnasium.spaces.MultiDiscrete([10, 1, 13, 1, 1])
    # gymnasium batches a MultiDiscrete into a Box of indices, as SyncVectorEnv does
    assert envs.action_space == gymnasium.vector.utils.batch_space(envs.single_action_space, NUM_ENVS)
    obs, info = envs.reset(seed=0)
    assert obs.shape == (NUM_ENVS, OBS_SIZE) and info == {}
    nxt = gymnasium.make_vec(GYM_ID, num_envs=2, autoreset_mode="NextStep")
    assert nxt.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    sync = gymnasium.make_vec(GYM_ID, num_envs=2, vectorization_mode="sync")
    assert isinstance(sync.envs[0].unwrapped, ge.GymnasiumEnv)


def test_seeded_episodes_equal_plain_jax_and_grade_alike(short):
    env, params = short
    adapter = ge.GymnasiumEnv(TASK, params=params)
    actions = [ACTION, np.array([9, 0, 12, 0, 0]), np.array([0, 0, 0, 0, 0]), ACTION]
    got, want = [], []
    for episode, reset_kwargs in enumerate([{"seed": 7}, {}]):  # reset() is the stream's next episode
        got.append(adapter_episode(adapter, actions, **reset_kwargs))
        want.append(plain_jax_episode(env, params, jax.random.key(7), episode, actions))
        assert_episodes_close(got[-1], want[-1])
        assert list(got[-1][2]) == [False] * (HORIZON - 1) + [True]  # truncated on the horizon's last interval
    # trajectory_from_infos + the evaluator's grading: the grade of the same episodes in plain JAX
    infos = ge.stack_infos([ge.stack_infos(g[3]) for g in got])  # (episodes, time)
    graded = evaluate.grade_trajectory(ge.trajectory_from_infos(infos, [g[1] for g in got]), params, TASK)
    expected = evaluate.grade_trajectory(plain_trajectory(want), params, TASK)
    np.testing.assert_allclose(graded.scores, expected.scores, rtol=1e-6, atol=1e-7)
    for name, values in expected.metrics.items():
        np.testing.assert_allclose(graded.metrics[name], values, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(adapter_episode(adapter, actions, seed=7)[0], got[0][0])
    assert not np.array_equal(adapter_episode(adapter, actions, seed=8)[1], got[0][1])
    held_out = adapter_episode(adapter, actions, options={"key": evaluate.evaluation_key(0), "episode": 3})
    assert_episodes_close(held_out, plain_jax_episode(env, params, evaluate.evaluation_key(0), 3, actions))


def test_evaluate_policy_grades_the_evaluators_episodes(short):
    """A host-side policy graded on episodes 0..4 of evaluation_key(0), 3 at a time: the grade
    of the same episodes run in plain JAX."""
    env, params = short
    key = evaluate.evaluation_key(0)
    seen = []

    def policy(obs):
        seen.append(obs.shape)
        return np.tile(ACTION, (len(obs), 1))

    got = ge.evaluate_policy(policy, TASK, key, 5, params=params, num_envs=NUM_ENVS)
    want = evaluate.grade_trajectory(
        plain_trajectory([plain_jax_episode(env, params, key, i, [ACTION] * HORIZON) for i in range(5)]), params, TASK)
    assert seen == [(NUM_ENVS, OBS_SIZE)] * 2 * HORIZON and got.scores.shape == (5,)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.metrics["tokens_per_s"], want.metrics["tokens_per_s"], rtol=1e-5)
    # the request-level TTFT: the adapters tally each episode as evaluate's episode loop does
    graded = evaluate.evaluate(env, params, baselines.fixed_policy(ACTION), key, 5, TASK)
    for name in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s"):
        assert np.all(np.isfinite(got.metrics[name])), name
        np.testing.assert_allclose(got.metrics[name], graded.metrics[name], rtol=1e-5, err_msg=name)


def test_step_and_reset_compile_once(short):
    env, params = short
    one = ge.GymnasiumEnv(TASK)
    one.reset(seed=0)
    one.step(ACTION)
    vec = ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params)
    vec.reset(seed=0)
    vec.step(np.tile(ACTION, (NUM_ENVS, 1)))
    gym_programs = importlib.import_module("inferencegym_jax.interop.gym_programs")
    programs = [gym_programs.start_batch, gym_programs.step_batch]  # a GymnasiumEnv runs them on a batch of one
    sizes = [p._cache_size() for p in programs]
    others = (ge.GymnasiumEnv(TASK, params=params), ge.GymnasiumEnv(GYM_ID, max_steps=HORIZON),
              ge.GymnasiumEnv(TASK, workload={"base_rate": 3.0}))  # params or overrides: the same programs
    for env_ in (one, *others):
        for seed in (1, None, 2**32 - 1):
            env_.reset(seed=seed)
            for _ in range(HORIZON + 1):
                env_.step(env_.action_space.sample())
    for seed in (5, [1, None, 3], None):
        vec.reset(seed=seed)
        for _ in range(2 * HORIZON + 1):
            vec.step(vec.action_space.sample())
    assert [p._cache_size() for p in programs] == sizes


def sync_envs(params, mode):
    return gymnasium.vector.SyncVectorEnv([lambda: ge.GymnasiumEnv(TASK, params=params) for _ in range(NUM_ENVS)],
                         autoreset_mode=mode)


def assert_infos_equal(got, want, where=""):
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        if isinstance(value, dict):
            assert_infos_equal(got[key], value, f"{where}.{key}")
        elif value.dtype == object:  # final_obs: an observation per env that ended, None elsewhere
            for a, b in zip(got[key], value):
                assert (a is None) == (b is None), where
                if b is not None:
                    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, f"{where}.{key}"
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=f"{where}.{key}")


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_vector_env_equals_sync_vector_env_of_single_envs(short, mode):
    """Same seeds, same actions: the same observations, rewards, flags and batched infos."""
    params = short[1]
    vec, sync = ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params, autoreset_mode=mode), sync_envs(params, mode)
    rng = np.random.default_rng(0)
    mixed = 0
    for seed in (11, None, [3, None, 4]):
        got, want = vec.reset(seed=seed), sync.reset(seed=seed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
        for t in range(2 * HORIZON + 2):
            if seed == 11 and t == 1:
                # Env 0 starts its next episode early, so that episodes end at different steps
                # (no public call does: every env resets together and shares the horizon).
                vec._next_episodes(np.array([True, False, False]))
                sync.envs[0].reset()
            actions = rng.integers(0, vec.single_action_space.nvec, size=(NUM_ENVS, 5))
            got, want = vec.step(actions), sync.step(actions)
            for a, b in zip(got[:4], want[:4]):
                assert a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed} step {t}")
            assert_infos_equal(got[4], want[4], f"seed {seed} step {t}")
            mixed += got[3].any() and not got[3].all()
    assert mixed >= 2  # the mixed case was reached (masks with True and False)


def test_same_step_returns_the_final_observation_at_the_boundary(short):
    params = short[1]
    vec = ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params, autoreset_mode=AutoresetMode.SAME_STEP)
    single = ge.GymnasiumEnv(TASK, params=params)
    vec.reset(seed=20)
    single.reset(seed=21)  # env 1 of the vector env
    actions = np.tile(ACTION, (NUM_ENVS, 1))
    for t in range(1, HORIZON + 1):
        obs, reward, terminated, truncated, info = vec.step(actions)
        last = single.step(ACTION)
        assert not terminated.any() and truncated.all() == (t == HORIZON)
    assert sorted(info) == ["_final_info", "_final_obs", "final_info", "final_obs"]  # every env ended
    assert info["_final_obs"].all() and info["_final_info"].all()
    np.testing.assert_allclose(info["final_obs"][1], last[0], rtol=1e-6, atol=1e-7)
    assert info["final_info"]["timestep"][1] == HORIZON and info["final_info"]["_timestep"].all()
    np.testing.assert_allclose(reward[1], last[1], rtol=1e-6)
    np.testing.assert_allclose(obs[1], single.reset()[0], rtol=1e-6, atol=1e-7)  # the next episode's start
    obs, reward, terminated, truncated, info = vec.step(actions)
    assert (info["timestep"] == 1).all() and "final_obs" not in info and not truncated.any()


def test_next_step_resets_on_the_step_after_the_end(short):
    params = short[1]
    vec = ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=params, autoreset_mode=AutoresetMode.NEXT_STEP)
    single = ge.GymnasiumEnv(TASK, params=params)
    vec.reset(seed=30)
    single.reset(seed=30)
    actions = np.tile(ACTION, (NUM_ENVS, 1))
    for _ in range(HORIZON):
        obs, reward, terminated, truncated, info = vec.step(actions)
        last = single.step(ACTION)
    assert truncated.all() and "final_obs" not in info
    np.testing.assert_allclose(obs[0], last[0], rtol=1e-6, atol=1e-7)  # the last observation itself
    obs, reward, terminated, truncated, info = vec.step(actions)  # the reset step: actions ignored
    assert info == {} and (reward == 0).all() and not terminated.any() and not truncated.any()
    np.testing.assert_allclose(obs[0], single.reset()[0], rtol=1e-6, atol=1e-7)
    obs, reward, terminated, truncated, info = vec.step(actions)
    assert (info["timestep"] == 1).all() and info["_timestep"].all()


def test_normalize_observation_runs_on_the_next_step_vector_env(short):
    vec = ge.GymnasiumVectorEnv(NUM_ENVS, TASK, params=short[1], autoreset_mode="NextStep")
    normalized = gymnasium.wrappers.vector.NormalizeObservation(vec)
    obs, _ = normalized.reset(seed=0)
    for _ in range(HORIZON + 2):
        obs, reward, terminated, truncated, info = normalized.step(normalized.action_space.sample())
        assert obs.shape == (NUM_ENVS, OBS_SIZE) and np.isfinite(obs).all()
    assert normalized.obs_rms.count > HORIZON * NUM_ENVS
    assert not np.allclose(obs, vec.step(vec.action_space.sample())[0])  # normalised, not passed through


def test_bad_input_names_what_was_typed(short):
    params = short[1]
    with pytest.raises(ValueError, match=r"task_id='InferenceGym/Task9-v0': must be .*InferenceGym/Task1-v0"):
        ge.GymnasiumEnv("InferenceGym/Task9-v0")
    with pytest.raises(ValueError, match="unknown config key 'gpus'"):
        ge.GymnasiumEnv(TASK, gpus="h100-sxm")
    with pytest.raises(ValueError, match=r"pass params= or task overrides \(max_steps\), not both"):
        ge.GymnasiumEnv(TASK, params=params, max_steps=3)
    with pytest.raises(ValueError, match="max_steps_in_episode"):
        ge.GymnasiumEnv(TASK, params=params.replace(max_steps_in_episode=jnp.int32(0)))
    env = ge.GymnasiumEnv(TASK, params=params)
    with pytest.raises(ValueError, match="call reset"):
        env.step(ACTION)
    env.reset(seed=0)
    cases = {
        r"action must be an int array of shape \(5,\).*got shape \(4,\)": [1, 2, 3, 4],
        "integer dtype": np.array([1.0, 0, 5, 0, 0]),
        r"action\[2\] \(batch_size\) = 13 is outside its range \[0, 12\]": [0, 0, 13, 0, 0],
        r"action\[1\] \(spec_length\) = 1 is outside its range \[0, 0\] \(the task masks": [0, 1, 5, 0, 0],
        r"action\[0\] \(kv_budget\) = -1 is outside its range \[0, 9\]": [-1, 0, 5, 0, 0],
    }
    for message, action in cases.items():
        with pytest.raises(ValueError, match=message):
            env.step(action)
    for seed in (-1, 2**32, 1.5, True):
        with pytest.raises(ValueError, match=r"seed=.*must be an integer in \[0, 4294967295\]"):
            env.reset(seed=seed)
    with pytest.raises(ValueError, match=r"reset options \['keys'\]: allowed keys are \['key', 'episode'\]"):
        env.reset(options={"keys": 1})
    with pytest.raises(ValueError, match="key must be a jax.random.key"):
        env.reset(options={"key": 3})
    with pytest.raises(ValueError, match=r"render_mode='human': must be None or one of \['ansi'\]"):
        ge.GymnasiumEnv(TASK, render_mode="human")
    vec = ge.GymnasiumVectorEnv(2, TASK, params=params)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions\[1, 2\] \(batch_size\) = 20 is outside its range \[0, 12\]"):
        vec.step(np.array([[0, 0, 0, 0, 0], [0, 0, 20, 0, 0]]))
    with pytest.raises(ValueError, match=r"actions must be an int array of shape \(2, 5\)"):
        vec.step(np.zeros(5, int))
    with pytest.raises(ValueError, match=r"seed=\[1\]: must be None, an int or a list of 2"):
        vec.reset(seed=[1])
    with pytest.raises(ValueError, match=r"seed\[1\]=-3"):
        vec.reset(seed=[1, -3])
    with pytest.raises(ValueError, match="num_envs=0"):
        ge.GymnasiumVectorEnv(0, TASK)
    with pytest.raises(ValueError, match=r"autoreset_mode=.*must be one of \['SameStep', 'NextStep'\]"):
        ge.GymnasiumVectorEnv(2, TASK, autoreset_mode=AutoresetMode.DISABLED)


GYMNASIUM_MODULES = ("gymnasium_env", "gym_single", "gym_vector", "gym_grading", "fleet_gym",
                     "reservation_gym")  # those that import it


@pytest.mark.parametrize("name", GYMNASIUM_MODULES)
def test_without_gymnasium_the_import_says_how_to_install(monkeypatch, name):
    for missing in ("gymnasium", "gymnasium.vector", "gymnasium.vector.utils"):
        monkeypatch.setitem(sys.modules, missing, None)  # what `import gymnasium` sees when it is missing
    for module in GYMNASIUM_MODULES:
        monkeypatch.delitem(sys.modules, f"inferencegym_jax.interop.{module}")
    message = rf'interop\.{name} needs gymnasium: pip install "inferencegym_jax\[gymnasium\]"'
    with pytest.raises(ImportError, match=message):
        importlib.import_module(f"inferencegym_jax.interop.{name}")


def test_only_the_adapters_import_gymnasium():
    """The core package stays light: gymnasium is imported by its adapters and the SB3 one only."""
    root = Path(importlib.util.find_spec("inferencegym_jax").submodule_search_locations[0])
    importers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "gymnasium" or n.startswith("gymnasium.") for n in names):
                importers.append(path.name)
    assert sorted(set(importers)) == sorted(f"{m}.py" for m in (*GYMNASIUM_MODULES, "sb3_env"))
