"""The environment contract: traced once, vmappable, finite, bounded, auto-reset, reproducible."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rollout

import inferencegym_jax as ig
from inferencegym_jax.env import OBS_SIZE


def test_registry_lists_three_versioned_tasks():
    ids = ig.registered_envs()
    assert {"InferenceGym-Task1-v0", "InferenceGym-Task2-v0", "InferenceGym-Task3-v0"} <= set(ids)
    assert all(i.startswith("InferenceGym-") and "-v" in i for i in ids)


def test_reset_and_step_trace_once(task):
    env, params = task
    chex.clear_trace_counter()
    reset = jax.jit(chex.assert_max_traces(env.reset, n=1))
    step = jax.jit(chex.assert_max_traces(env.step, n=1))
    key = jax.random.key(0)
    obs, state = reset(key, params)
    space = env.action_space(params)
    for i in range(4):  # new keys, states and actions: no retrace
        k_a, k_s = jax.random.split(jax.random.fold_in(key, i))
        obs, state, reward, terminated, truncated, info = step(k_s, state, space.sample(k_a), params)
    obs, state = reset(jax.random.key(1), params)


def test_vmapped_episode_1024_envs(task):
    """200+ steps over 1,024 envs: finite, rewards in [-1, 1], auto-reset at the horizon."""
    env, params = task
    n, horizon = 1024, int(params.max_steps_in_episode)
    space = env.action_space(params)

    @jax.jit
    def run(key):
        k_reset, k_scan = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)

        def body(state, k):
            k_a, k_s = jax.random.split(k)
            actions = jax.vmap(space.sample)(jax.random.split(k_a, n))
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_s, n), state, actions, params)
            obs, state, reward, terminated, truncated, info = out
            return state, (obs, reward, terminated, truncated, state.time, info["metrics"])

        return jax.lax.scan(body, state, jax.random.split(k_scan, horizon + 5))

    state, (obs, reward, terminated, truncated, time, metrics) = run(jax.random.key(42))
    chex.assert_tree_all_finite((obs, reward, metrics, state))
    assert reward.shape == (horizon + 5, n)
    assert float(reward.min()) >= -1.0 and float(reward.max()) <= 1.0
    assert not bool(terminated.any())
    truncated, time = np.asarray(truncated), np.asarray(time)
    assert truncated[horizon - 1].all() and not truncated[: horizon - 1].any() and not truncated[horizon:].any()
    assert (time[horizon - 1] == 0).all(), "auto-reset puts time back to 0"
    assert (time[horizon + 4] == 5).all()
    flat = jax.vmap(env.flatten_observation, in_axes=(0, None))(jax.tree_util.tree_map(lambda x: x[-1], obs), params)
    assert flat.shape == (n, OBS_SIZE) and flat.dtype == jnp.float32
    assert float(flat.min()) >= 0.0 and float(flat.max()) <= 1.0
    # the policies used here overload the server somewhere: the dynamics are not idle
    assert float(metrics.tokens_per_s.mean()) > 0 and float(metrics.queue_depth.max()) > 0


def test_final_observation_is_the_pre_reset_observation():
    env, params = ig.make("InferenceGym-Task1-v0", max_steps=3)
    action = jnp.asarray([9, 0, 8, 0, 0], jnp.int32)
    _, (obs, _, _, truncated, info, time) = rollout(env, params, jax.random.key(0), lambda t: action, 3)
    assert bool(truncated[-1]) and int(time[-1]) == 0
    final = info["final_observation"]
    assert float(final.timestep[-1]) == 3.0 and float(obs.timestep[-1]) == 0.0
    assert float(final.cost_so_far[-1]) > 0.0 and float(obs.cost_so_far[-1]) == 0.0


def test_same_key_same_trajectory(task):
    env, params = task
    space = env.action_space(params)
    def actions(t):
        return space.sample(jax.random.fold_in(jax.random.key(7), t))

    run = jax.jit(lambda k: rollout(env, params, k, actions, 50))
    a = run(jax.random.key(3))
    b = run(jax.random.key(3))
    c = run(jax.random.key(4))
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(np.asarray(a[1][1]), np.asarray(c[1][1]))


@pytest.mark.parametrize("env_id", ["InferenceGym-Task3-v1", "InferenceGym-Task4-v1"])  # every feature between them
def test_vmapped_env_i_equals_single_env_with_key_i(env_id):
    """Same trajectory up to float32 rounding: XLA vectorises the small reductions of a single
    env across its elements but a batch across envs, so sums can round differently (~1e-6)."""
    env, params = ig.make(env_id)
    n, steps = 8, 40
    keys = jax.random.split(jax.random.key(11), n)
    action = jnp.asarray([6, 2, 9, 1, 1], jnp.int32)
    single = jax.jit(lambda k: rollout(env, params, k, lambda t: action, steps))
    batched = jax.jit(jax.vmap(lambda k: rollout(env, params, k, lambda t: action, steps)))(keys)
    for i in (0, 5):
        one = single(keys[i])
        chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x, i=i: x[i], batched), one, rtol=1e-4, atol=1e-4)


def test_action_space_sample_is_accepted_and_masks_inactive_knobs():
    env, params = ig.make("InferenceGym-Task1-v0")
    space = env.action_space(params)
    assert space.nvec == (10, 1, 13, 1, 1)
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    step = jax.jit(env.step)
    for i in range(20):
        action = space.sample(jax.random.fold_in(key, i))
        assert space.contains(np.asarray(action))
        _, state, _, _, _, info = step(key, state, action, params)
        assert not bool(info["clipped"].any())
        applied = info["applied_action"]
        assert float(applied.spec_length) == 0 and float(applied.quant_tier) == 0
        assert float(applied.prefill_disagg) == 0
    # a full-grid action on a masked knob is applied as the default and reported as clipped
    _, _, _, _, _, info = step(key, state, jnp.asarray([9, 3, 5, 1, 2], jnp.int32), params)
    assert info["clipped"].tolist() == [False, True, False, True, True]
    assert float(info["applied_action"].spec_length) == 0.0


def test_info_carries_step_metrics_and_reward_components(task):
    env, params = task
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    _, _, reward, _, _, info = jax.jit(env.step)(key, state, env.action_space(params).sample(key), params)
    assert set(info) == {"metrics", "arrivals", "applied_action", "clipped", "reward_components", "discount",
                         "first_token", "final_observation"}, "info holds each quantity once"
    chex.assert_tree_all_finite((info["metrics"], info["arrivals"]))
    first = info["first_token"]  # components of no request carry arbitrary parameters
    for ends, weight in ((first[:2], first.requests), (first[3:5], first.exp_requests)):
        assert all(bool(np.isfinite(np.asarray(e))[np.asarray(weight) > 0].all()) for e in ends)
    assert float(np.sum(first.requests) + np.sum(first.exp_requests)) == pytest.approx(
        float(info["metrics"].admitted), rel=1e-5, abs=1e-4)  # a first token for every admitted request
    assert info["arrivals"].count.shape == (3,)
    comps = info["reward_components"]
    assert set(comps) == {"throughput", "latency", "violations", "cost", "stability"}
    w = np.asarray(params.reward.weights)
    expected = (w[0] * comps["throughput"] - w[1] * comps["latency"] - w[2] * comps["violations"]
                - w[3] * comps["cost"] - w[4] * comps["stability"])
    if params.reward.kind == "increments":  # the grade's increments, in units of a peak interval
        expected = expected / float(params.reward.peak_ratio)
    np.testing.assert_allclose(float(reward), np.clip(float(expected), -1, 1), rtol=1e-5, atol=1e-6)


def test_step_env_is_step_without_the_reset(task):
    """One key-splitting convention: `step` and `step_env` make the same transition."""
    env, params = task
    key = jax.random.key(3)
    _, state = env.reset(key, params)
    action = env.action_space(params).sample(key)
    both = jax.jit(lambda *args: (env.step(*args), env.step_env(*args)))  # one compilation
    stepped, plain = both(key, state, action, params)
    chex.assert_trees_all_close(stepped[:5], plain[:5], rtol=1e-6)
    chex.assert_trees_all_close(stepped[5]["metrics"], plain[5]["metrics"], rtol=1e-6)


def test_structured_action_is_accepted():
    env, params = ig.make("InferenceGym-Task3-v0")
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    action = ig.ServingAction(kv_budget=0.55, spec_length=3.0, batch_size=100.0, prefill_disagg=1.0, quant_tier=2.0)
    _, _, _, _, _, info = env.step(key, state, action, params)
    applied = info["applied_action"]
    assert abs(float(applied.kv_budget) - 0.55) < 1e-6  # continuous
    assert float(applied.spec_length) in (2.0, 4.0) and float(applied.batch_size) == 96.0
    assert info["clipped"].tolist() == [False, True, True, False, False]


@pytest.mark.parametrize("env_id", ["InferenceGym-Task2-v0"])
def test_observation_fields_have_documented_shapes(env_id):
    env, params = ig.make(env_id)
    obs, _ = env.reset(jax.random.key(0), params)
    space = env.observation_space(params)
    for name, sub in space.spaces.items():
        value = getattr(obs, name)
        assert value.shape == sub.shape, name
        assert sub.contains(np.asarray(value)), name
