"""Baseline policies, all with the evaluation signature `policy(key, obs, params) -> action`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from inferencegym_jax.actions import ServingAction
from inferencegym_jax.env import EnvParams, InferenceGymEnv, Observation


def random_policy(env: InferenceGymEnv):
    """Uniform over the task's action grid (masked knobs have a single choice)."""

    def policy(key: jax.Array, obs: Observation, params: EnvParams) -> jax.Array:
        return env.action_space(params).sample(key)

    return policy


# The fixed vLLM-default configuration of the issue: the whole KV budget, no speculation,
# 32 concurrent sequences, no disaggregation, FP16.
VLLM_DEFAULT = ServingAction(
    kv_budget=jnp.float32(1.0),
    spec_length=jnp.float32(0.0),
    batch_size=jnp.float32(32.0),
    prefill_disagg=jnp.float32(0.0),
    quant_tier=jnp.float32(0.0),
)


def fixed_policy(action: ServingAction | jax.Array):
    """Always the same action (a ServingAction or a grid-index vector)."""

    def policy(key: jax.Array, obs: Observation, params: EnvParams):
        return action

    return policy


def fixed_default_policy():
    """The fixed vLLM-default configuration."""
    return fixed_policy(VLLM_DEFAULT)
