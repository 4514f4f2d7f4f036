"""Action wrappers: each layout maps its choices to the right grid indices from the knobs in force."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders, wrappers
from inferencegym_jax.actions import action_from_indices, indices_from_action

TASK = "InferenceGym-Task2-v0"  # kv_budget, spec_length, batch_size active; prefill_disagg, quant_tier masked


@pytest.fixture(scope="module")
def base():
    return ig.make(TASK)


def _in_force(env, params, indices):
    """A state whose knobs in force are `indices` (one interval played with them)."""
    _, state = env.reset_env(jax.random.key(0), params)
    _, state, *_ = env.step_env(jax.random.key(1), state, jnp.asarray(indices, jnp.int32), params)
    np.testing.assert_array_equal(indices_from_action(env.knobs_in_force(state, params)), indices)
    return state


def test_action_spaces(base):
    env, params = base
    assert env.action_space(params).nvec == (10, 5, 13, 1, 1)
    assert wrappers.HoldActions(env).action_space(params).nvec == (11, 6, 14, 1, 1)
    assert wrappers.RelativeActions(env).action_space(params).nvec == (3, 3, 3, 1, 1)
    assert wrappers.HoldActions(env).action_space(params).names == env.action_space(params).names
    assert wrappers.wrap(env, "absolute") is env
    modes = wrappers.ACTION_MODES
    assert [wrappers.action_mode_of(wrappers.wrap(env, m)) for m in modes] == list(modes)
    with pytest.raises(ValueError, match="'action_mode' = 'sideways'"):
        wrappers.wrap(env, "sideways")


def test_hold_keeps_the_knob_in_force_or_sets_any_grid_index(base):
    env, params = base
    hold = wrappers.HoldActions(env)
    for current in ([0, 4, 12, 0, 0], [5, 2, 6, 0, 0]):
        in_force = hold.knobs_in_force(_in_force(env, params, current), params)
        keep, _ = hold.base_action(jnp.zeros(5, jnp.int32), in_force, params)
        np.testing.assert_array_equal(keep, current)
        jump, clipped = hold.base_action(jnp.asarray([10, 1, 13, 0, 0], jnp.int32), in_force, params)
        np.testing.assert_array_equal(jump, [9, 0, 12, 0, 0])  # kv_budget 1.0, spec_length 0, batch_size 512
        assert not np.any(clipped)
    mixed, _ = hold.base_action(jnp.asarray([0, 3, 0, 0, 0], jnp.int32), in_force, params)
    np.testing.assert_array_equal(mixed, [5, 2, 6, 0, 0])  # kv and batch kept, spec set to index 2


def test_relative_moves_one_grid_step_clipped_to_the_grid(base):
    env, params = base
    rel = wrappers.RelativeActions(env)
    edge = rel.knobs_in_force(_in_force(env, params, [0, 4, 12, 0, 0]), params)
    inner = rel.knobs_in_force(_in_force(env, params, [5, 2, 6, 0, 0]), params)
    down, up, keep = (jnp.asarray([c, c, c, 0, 0], jnp.int32) for c in (0, 2, 1))
    np.testing.assert_array_equal(rel.base_action(down, edge, params)[0], [0, 3, 11, 0, 0])
    np.testing.assert_array_equal(rel.base_action(up, edge, params)[0], [1, 4, 12, 0, 0])
    np.testing.assert_array_equal(rel.base_action(down, inner, params)[0], [4, 1, 5, 0, 0])
    np.testing.assert_array_equal(rel.base_action(up, inner, params)[0], [6, 3, 7, 0, 0])
    np.testing.assert_array_equal(rel.base_action(keep, inner, params)[0], [5, 2, 6, 0, 0])


@pytest.mark.parametrize("mode", ["hold", "relative"])
def test_step_applies_the_translated_action_and_masked_knobs_stay_default(base, mode):
    env, params = base
    wrapped = wrappers.wrap(env, mode)
    state = _in_force(env, params, [5, 2, 6, 0, 0])
    choice = jnp.asarray([1, 0, 2, 0, 0] if mode == "hold" else [2, 0, 1, 0, 0], jnp.int32)
    expected = [0, 2, 1, 0, 0] if mode == "hold" else [6, 1, 6, 0, 0]
    got = wrapped.step_env(jax.random.key(2), state, choice, params)
    want = env.step_env(jax.random.key(2), state, jnp.asarray(expected, jnp.int32), params)
    chex.assert_trees_all_equal(got, want)  # same key, same translated action: the same interval
    applied = got[5]["applied_action"].as_vector()
    np.testing.assert_allclose(applied, action_from_indices(jnp.asarray(expected)).as_vector()[:3].tolist()
                               + params.default_action.as_vector()[3:].tolist())
    assert not np.any(got[5]["clipped"])
    # step (auto-reset) translates the same way
    chex.assert_trees_all_equal(wrapped.step(jax.random.key(3), state, choice, params),
                                env.step(jax.random.key(3), state, jnp.asarray(expected, jnp.int32), params))


def test_bad_actions_fail_outside_jit_and_are_clipped_inside(base):
    env, params = base
    hold = wrappers.HoldActions(env)
    _, state = hold.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"hold action\[2\] \(batch_size\) = 14 is outside its range \[0, 13\]"):
        hold.step(jax.random.key(1), state, jnp.asarray([0, 0, 14, 0, 0], jnp.int32), params)
    with pytest.raises(ValueError, match=r"hold action\[3\] \(prefill_disagg\) = 1 is outside its range \[0, 0\]"):
        hold.step(jax.random.key(1), state, jnp.asarray([0, 0, 0, 1, 0], jnp.int32), params)
    with pytest.raises(ValueError, match="shape"):
        hold.step(jax.random.key(1), state, jnp.zeros(3, jnp.int32), params)
    with pytest.raises(ValueError, match="integer dtype"):
        hold.step(jax.random.key(1), state, jnp.zeros(5, jnp.float32), params)
    step = jax.jit(hold.step_env)
    info = step(jax.random.key(1), state, jnp.asarray([0, 0, 20, 1, 0], jnp.int32), params)[5]
    np.testing.assert_array_equal(info["clipped"], [False, False, True, True, False])
    assert float(info["applied_action"].batch_size) == 512.0  # choice 20 clipped to 13: index 12
    assert float(info["applied_action"].prefill_disagg) == float(params.default_action.prefill_disagg)


def test_wrapper_passes_the_rest_through(base):
    env, params = base
    hold = wrappers.HoldActions(env)
    assert hold.env is env and hold.unwrapped is env and wrappers.HoldActions(hold).unwrapped is env
    assert hold.default_params is env.default_params and hold.env_id == env.env_id == TASK
    assert hold.observation_space(params).spaces.keys() == env.observation_space(params).spaces.keys()
    obs, state = hold.reset(jax.random.key(4), params)
    chex.assert_trees_all_equal((obs, state), env.reset(jax.random.key(4), params))
    chex.assert_trees_all_equal(hold.reset_env(jax.random.key(4), params), env.reset_env(jax.random.key(4), params))
    chex.assert_trees_all_equal(hold.get_obs(state, params), obs)
    np.testing.assert_array_equal(hold.flatten_observation(obs, params), env.flatten_observation(obs, params))


def test_jitted_vmapped_wrapped_step_traces_once(base):
    env, params = base
    rel = wrappers.RelativeActions(env)
    space = rel.action_space(params)
    step = jax.jit(jax.vmap(chex.assert_max_traces(rel.step, n=1), in_axes=(0, 0, 0, None)))
    keys = jax.random.split(jax.random.key(5), 4)
    _, state = jax.vmap(rel.reset, in_axes=(0, None))(keys, params)
    for i in range(3):
        actions = jax.vmap(space.sample)(jax.random.split(jax.random.key(10 + i), 4))
        obs, state, reward, *_ = step(jax.random.split(jax.random.key(20 + i), 4), state, actions, params)
        chex.assert_shape(reward, (4,))
        chex.assert_tree_all_finite(reward)
        config = np.asarray(indices_from_action(rel.knobs_in_force(state, params)))
        assert np.all(config[:, 3:] == 0)  # masked knobs: the task default (index 0 of their grids)


def test_initial_actions(base):
    env, params = base
    hold, rel = wrappers.HoldActions(env), wrappers.RelativeActions(env)
    default = np.asarray(indices_from_action(params.default_action))
    best = np.asarray(graders.load_constants(TASK)["best_static_action"])
    active = np.asarray(env.action_space(params).nvec) > 1
    np.testing.assert_array_equal(wrappers.initial_action(env, params, "default"), np.where(active, default, 0))
    np.testing.assert_array_equal(wrappers.initial_action(hold, params, "default"), [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(wrappers.initial_action(rel, params, "default"), [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(wrappers.initial_action(env, params, "best_static"), best)
    np.testing.assert_array_equal(wrappers.initial_action(hold, params, "best_static"), np.where(active, best + 1, 0))
    for env_ in (env, hold, rel):
        assert env_.action_space(params).contains(wrappers.initial_action(env_, params, "default"))
    with pytest.raises(ValueError, match="'initial_action' = 'best_static' needs action_mode = 'absolute' or 'hold'"):
        wrappers.initial_action(rel, params, "best_static")
    with pytest.raises(ValueError, match="'initial_action' = 'best' out of range"):
        wrappers.initial_action(env, params, "best")
    custom = ig.InferenceGymEnv(params)  # an env id without grader constants
    with pytest.raises(ValueError, match="'initial_action' = 'best_static': no best static configuration"):
        wrappers.initial_action(wrappers.HoldActions(custom), params, "best_static")


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_wrapped_episodes_see_the_base_envs_traffic(base):
    """Episodes through a wrapper (evaluate.run_episodes: reset_env / step_env) are the base env's
    for the same keys: holding the default configuration is the fixed default-index policy, and
    base_action_policy runs a wrapped policy on the base env with the same applied actions."""
    env, params = base
    hold = wrappers.HoldActions(env)
    default = jnp.asarray(wrappers.initial_action(env, params, "default"))
    key = evaluate.evaluation_key(3)
    kept = evaluate.run_episodes(hold, params, baselines.fixed_policy(jnp.zeros(5, jnp.int32)), key, 2, num_steps=6)
    fixed = evaluate.run_episodes(env, params, baselines.fixed_policy(default), key, 2, num_steps=6)
    chex.assert_trees_all_equal(kept, fixed)
    sample = baselines.random_policy(hold)  # uniform over the hold layout
    wrapped = evaluate.run_episodes(hold, params, sample, key, 2, num_steps=6)
    unwrapped = evaluate.run_episodes(env, params, wrappers.base_action_policy(hold, sample), key, 2, num_steps=6)
    chex.assert_trees_all_equal(wrapped, unwrapped)
    assert wrappers.base_action_policy(env, sample) is sample
