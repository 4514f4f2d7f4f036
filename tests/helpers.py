"""Helpers shared by tests (importable because conftest puts tests/ on sys.path)."""

from __future__ import annotations

import jax


def rollout(env, params, key, actions_fn, num_steps: int):
    """Scan `num_steps` steps of one env; actions_fn(t) gives the action. Returns per-step outputs."""

    def body(state, inputs):
        t, k = inputs
        obs, state, reward, terminated, truncated, info = env.step(k, state, actions_fn(t), params)
        return state, (obs, reward, terminated, truncated, info, state.time)

    k_reset, k_steps = jax.random.split(key)
    _, state = env.reset(k_reset, params)
    ts = jax.numpy.arange(num_steps)
    return jax.lax.scan(body, state, (ts, jax.random.split(k_steps, num_steps)))
