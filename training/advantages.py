"""Generalised advantage estimation with truncation bootstrapping, shared by PPO and imitation."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: jax.Array,
    lam: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates over a rollout; all inputs float32/bool (T, N).

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t), with s'_t the observation the
    step ended on (the final observation, before any auto-reset); the recursion
    A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1} stops at every episode boundary
    (terminated or truncated), and A_T = 0 past the rollout (V(s'_{T-1}) bootstraps it).

    Returns (advantages, value targets = advantages + values), float32 (T, N).
    """
    not_term = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_term - values

    def body(next_adv, x):
        delta, nd = x
        adv = delta + gamma * lam * nd * next_adv
        return adv, adv

    _, advantages = jax.lax.scan(body, jnp.zeros_like(values[0]), (deltas, not_done), reverse=True)
    return advantages, advantages + values
