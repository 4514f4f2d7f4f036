"""The NumPy reference and the JAX env agree, and the env's samplers draw what they claim.

Parity: for every registered task, both implementations get the same state, actions and random
draws (`env.step_draws`) and must return the same observation, reward, flags and next state
within float32 tolerance, step by step (teacher-forced) and over a free-running episode with
two auto-resets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import inferencegym_jax as ig
from inferencegym_jax import workload
from inferencegym_jax.testing import reference

NUM_ENVS, NUM_STEPS, HORIZON = 16, 24, 10


def assert_close(name: str, got, want, rtol: float = 1e-3) -> None:
    """float32 parity: |got - want| <= rtol |want| + 1e-4 max|want| + 1e-6 (exact for bools and ints).

    The absolute part is relative to the field's scale over the batch, since fields range from
    dollars per interval (1e-3) to squared tokens (1e9).
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = np.max(np.abs(want)) if want.size else 0.0
    tol = rtol * np.abs(want) + 1e-4 * scale + 1e-6
    err = np.abs(got - want)
    assert np.all(err <= tol), f"{name}: max error {err.max():.3g} at {np.unravel_index(np.argmax(err - tol), err.shape)}"


def assert_trees_close(prefix: str, got, want) -> None:
    for (path, g), (_, w) in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree_util.tree_leaves_with_path(want)):
        assert_close(prefix + jax.tree_util.keystr(path), g, w)


@pytest.mark.parametrize("env_id", ig.registered_envs())
def test_reference_matches_the_jax_env(env_id):
    env, params = ig.make(env_id, max_steps=HORIZON)
    full_grid = jnp.asarray([10, 5, 13, 2, 3])  # masked knobs too: both must clip them

    @jax.jit
    def rollout(key):
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, NUM_ENVS), params)

        def body(state, key):
            keys = jax.random.split(key, NUM_ENVS)
            actions = jax.random.randint(jax.random.fold_in(key, 1), (NUM_ENVS, 5), 0, full_grid)
            draws, u_reset = jax.vmap(env.step_draws, in_axes=(0, 0, None))(keys, state, params)
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, params)
            obs, next_state, reward, terminated, truncated, _ = out
            return next_state, (state, actions, draws, u_reset, obs, next_state, reward, terminated, truncated)

        return jax.lax.scan(body, state, jax.random.split(k_steps, NUM_STEPS))[1]

    states, actions, draws, u_reset, obs, next_states, rewards, terminated, truncated = reference.to_numpy(
        rollout(jax.random.key(0))
    )
    p = reference.to_numpy(params)
    moments = {"prompt": reference.length_moments(params.workload.prompt),
               "output": reference.length_moments(params.workload.output)}
    at = lambda tree, t: jax.tree_util.tree_map(lambda x: x[t], tree)  # noqa: E731
    free = at(states, 0)
    for t in range(NUM_STEPS):
        # teacher-forced: the JAX state in, one step out
        r_obs, r_state, r_reward, r_term, r_trunc, _ = reference.step(
            at(states, t), actions[t], at(draws, t), u_reset[t], p, moments
        )
        assert_trees_close(f"t={t} obs", r_obs, at(obs, t))
        assert_trees_close(f"t={t} state", r_state, at(next_states, t))
        assert_close(f"t={t} reward", r_reward, rewards[t])
        np.testing.assert_array_equal(r_term, terminated[t])
        np.testing.assert_array_equal(r_trunc, truncated[t])
        # free-running: the reference's own state, the same draws
        f_obs, free, f_reward, *_ = reference.step(free, actions[t], at(draws, t), u_reset[t], p, moments)
        assert_trees_close(f"free t={t} obs", f_obs, at(obs, t))
        assert_close(f"free t={t} reward", f_reward, rewards[t])
    assert truncated.sum() == 2 * NUM_ENVS, "the episode crossed two auto-resets"
    flat = reference.flatten_observation(at(obs, NUM_STEPS - 1), p)
    want = jax.vmap(env.flatten_observation, in_axes=(0, None))(at(obs, NUM_STEPS - 1), params)
    assert_close("flat observation", flat, want)


def test_reference_env_runs_with_its_own_sampler():
    env, params = ig.make("InferenceGym-Task3-v0")
    ref = reference.ReferenceEnv(params, num_envs=32, seed=0)
    obs = ref.reset()
    assert obs.queue_depth.shape == (32,)
    actions = np.random.default_rng(1).integers(0, env.action_space(params).nvec, (20, 32, 5))
    rewards, tokens = [], []
    for a in actions:
        obs, reward, terminated, truncated, info = ref.step(a)
        rewards.append(reward)
        tokens.append(info["metrics"].tokens_per_s)
    rewards = np.stack(rewards)
    assert rewards.dtype == np.float32 and np.all(np.isfinite(rewards))
    assert rewards.min() >= -1.0 and rewards.max() <= 1.0
    assert obs.queue_depth.max() > 0 and np.mean(tokens) > 0


@pytest.mark.parametrize("lam", [0.0, 0.3, 2.5, 15.0, workload.POISSON_EXACT_MAX])
def test_poisson_quantile_is_the_exact_inverse_cdf(lam):
    """Below POISSON_EXACT_MAX a count is exactly the Poisson quantile of its uniform; it may
    differ only where u is within float32 rounding of a CDF step."""
    u = (np.arange(8192) + 0.5) / 8192
    got = np.asarray(workload.poisson_from_uniform(jnp.asarray(u, jnp.float32), lam))
    want = stats.poisson.ppf(u, lam)
    near_step = np.abs(u - stats.poisson.cdf(np.minimum(got, want), lam)) < 1e-5
    assert np.all((got == want) | near_step), f"lam={lam}: {np.sum(got != want)} counts differ"


@pytest.mark.parametrize("lam", [40.0, 300.0])
def test_poisson_quantile_above_the_switch_is_close(lam):
    """Above it (Cornish-Fisher): the quantile differs for < 1 % of u, mean and variance agree."""
    u = (np.arange(65536) + 0.5) / 65536
    got = np.asarray(workload.poisson_from_uniform(jnp.asarray(u, jnp.float32), lam), np.float64)
    want = stats.poisson.ppf(u, lam)
    assert np.mean(got != want) < 0.01
    assert abs(got.mean() - lam) < 1e-3 * lam and abs(got.var() / lam - 1.0) < 5e-3


def test_uniforms_are_jax_random_uniform_bit_for_bit():
    with jax.threefry_partitionable(False):
        for seed in range(3):
            key = jax.random.fold_in(jax.random.key(seed), 7)
            for n in (1, 2, 3, workload.STEP_DRAWS + workload.RESET_DRAWS):
                np.testing.assert_array_equal(workload.uniforms(key, n), jax.random.uniform(key, (n,)))
    u = workload.uniforms(jax.random.key(3), 4096 * 2)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0 and abs(float(u.mean()) - 0.5) < 0.01
