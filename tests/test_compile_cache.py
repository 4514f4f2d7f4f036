"""Compiled programs are cached by what changes them, not by object identity: a long-lived
loop that makes the same task again and evaluates it (a server, a sweep driver) compiles once."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate

TASK = "InferenceGym-Task1-v0"


def test_equal_envs_compare_equal_and_different_params_do_not():
    env_a, _ = ig.make(TASK)
    env_b, _ = ig.make(TASK)
    env_c, _ = ig.make(TASK, workload={"base_rate": 3.5})
    assert env_a == env_b and hash(env_a) == hash(env_b)
    assert env_a != env_c


def test_making_and_evaluating_a_task_again_compiles_nothing():
    key = evaluate.evaluation_key(0)

    def evaluate_fixed(action, **overrides):
        env, params = ig.make(TASK, **overrides)
        policy = baselines.fixed_policy(jnp.asarray(action, jnp.int32))
        return evaluate.run_episodes(env, params, policy, key, 2, num_steps=3)

    first = evaluate_fixed([9, 0, 5, 0, 0])
    compiled = evaluate._run_batch._cache_size()
    again = evaluate_fixed([9, 0, 5, 0, 0])
    for action in ([0, 0, 0, 0, 0], [5, 0, 12, 0, 0], [9, 0, 1, 0, 0]):
        evaluate_fixed(action)
    assert evaluate._run_batch._cache_size() == compiled
    chex.assert_trees_all_equal(first, again)
    # other traffic (same shapes) is a different env: one more program, not one per call
    evaluate_fixed([9, 0, 5, 0, 0], workload={"base_rate": 3.5})
    evaluate_fixed([9, 0, 4, 0, 0], workload={"base_rate": 3.5})
    assert evaluate._run_batch._cache_size() == compiled + 1


def _types(tree):
    return jax.tree_util.tree_map(lambda x: (x.shape, x.dtype, x.weak_type), tree)


def test_step_returns_the_state_types_reset_makes(task):
    """No leaf of the state comes out of a step weakly typed (or of another dtype) where reset
    made it otherwise: a user's `jit(step_env)` loop would compile twice (tracing only here)."""
    env, params = task
    key = jax.random.key(0)
    action = jnp.zeros(5, jnp.int32)
    _, state = jax.eval_shape(env.reset_env, key, params)
    for step in (env.step_env, env.step):
        _, stepped, *_ = jax.eval_shape(step, key, state, action, params)
        assert _types(stepped) == _types(state), step.__name__
