"""Helpers shared by tests (importable because conftest puts tests/ on sys.path)."""

from __future__ import annotations

import jax

import inferencegym_jax as ig

# The tasks the per-task physics tests run on: every v0 task, and of the v1 tasks those with
# code paths of their own (task 3: burst regimes, per-class TPOT SLOs; task 4: a replay over
# 600 intervals; both judge requests at completion). Task1-v1 and Task2-v1 differ from v0
# only in numbers on those paths. Tests about the registry itself use every registered id.
PHYSICS_TASK_IDS = [i for i in ig.registered_envs()
                    if i.endswith("-v0") or i in ("InferenceGym-Task3-v1", "InferenceGym-Task4-v1")]


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
