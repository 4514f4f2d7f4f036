"""The jitted programs behind the gymnasium adapters (`gymnasium_env`): an episode's start and
one interval of N envs, with their outputs packed into one float32 array per step.

Two programs per task and batch width: `start_batch` and `step_batch`. `GymnasiumEnv` runs them
on a batch of one, so that any number of single envs (SB3's DummyVecEnv, say) and a vector env of
one share them. The env is a static argument and params an argument: the adapters pass the task's
env with its default params (equal envs compare equal), so every adapter of a task shares the
compiled programs, and params of the same structure (another horizon, another rate, given as
params= or as overrides) compile nothing new. Keys: the module docstring of `gymnasium_env`.

The programs' state is an `AdapterState`: the env state and the episode's request TTFT tally
(`ttft_tally`, folded every interval as `evaluate.play_episode` folds it), so `evaluate_policy`
grades the request-level TTFT of host-stepped episodes too; the tally is not in the step info.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate, serving, ttft_tally
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv

__all__ = ["METRIC_NAMES", "AdapterState", "output_layout", "select_state", "start_batch", "step_batch"]

METRIC_NAMES = tuple(f.name for f in dataclasses.fields(serving.IntervalMetrics))
AdapterState = tuple[EnvState, ttft_tally.TtftTally]  # the env state, the episode's request TTFTs so far


def _start(env: InferenceGymEnv, params: EnvParams, root: jax.Array,
           episode: jax.Array) -> tuple[jax.Array, AdapterState]:
    """float32 (OBS_SIZE,) observation and state of the first interval of an episode."""
    obs, state = env.reset_env(evaluate.stream_episode_keys(root, episode)[0], params)
    return env.flatten_observation(obs, params), (state, ttft_tally.empty())


def _interval(
    env: InferenceGymEnv, params: EnvParams, carried: AdapterState, root: jax.Array, episode: jax.Array,
    action: jax.Array,
) -> tuple[jax.Array, AdapterState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
    """One interval of an episode: obs float32 (OBS_SIZE,), state, reward float32, terminated,
    truncated (bool), and the info arrays of the module docstring."""
    state, tally = carried
    key = jax.random.fold_in(evaluate.stream_episode_keys(root, episode)[1], state.time)
    obs, state, reward, terminated, truncated, info = env.step_env(key, state, action, params)
    tally = ttft_tally.fold(tally, info["first_token"])
    m = info["metrics"]
    out = {
        "reward_components": dict(info["reward_components"]),
        "metrics": {name: getattr(m, name) for name in METRIC_NAMES},
        "applied_action": {name: getattr(info["applied_action"], name) for name in KNOBS},
        "clipped": info["clipped"],
        "offered_tokens": jnp.sum(info["arrivals"].output_tokens),
        "timestep": state.time,
    }
    return env.flatten_observation(obs, params), (state, tally), reward, terminated, truncated, out


def _pack(tree: Any, batch_dims: int) -> jax.Array:
    """Every leaf of `tree` as float32, concatenated on the last axis (one device-to-host
    transfer instead of one per leaf). Lossless here: the leaves are float32, bools and int32
    interval counts below 2**24."""
    leaves = jax.tree_util.tree_leaves(tree)
    lead = leaves[0].shape[:batch_dims]
    return jnp.concatenate([x.astype(jnp.float32).reshape(lead + (-1,)) for x in leaves], axis=-1)


class _Layout:
    """Where `_pack` put each leaf of a tree, from the tree's unbatched `jax.eval_shape`."""

    def __init__(self, like: Any):
        leaves, self.treedef = jax.tree_util.tree_flatten(like)
        self.parts, start = [], 0
        for leaf in leaves:
            size = int(np.prod(leaf.shape))
            self.parts.append((start, start + size, tuple(leaf.shape), np.dtype(leaf.dtype)))
            start += size

    def unpack(self, packed: np.ndarray) -> Any:
        """The tree as NumPy arrays from `packed` float32 (..., size), batch axes first."""
        lead = packed.shape[:-1]
        return jax.tree_util.tree_unflatten(
            self.treedef, [packed[..., a:b].reshape(lead + shape).astype(dtype) for a, b, shape, dtype in self.parts])


def _outputs(env: InferenceGymEnv, params: EnvParams, state: AdapterState, root: jax.Array, episode: jax.Array,
             action: jax.Array) -> tuple[AdapterState, dict[str, Any]]:
    """(state, outputs) of one interval: outputs = {obs, reward, terminated, truncated, info}."""
    obs, state, reward, terminated, truncated, info = _interval(env, params, state, root, episode, action)
    return state, {"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}


def _layout(env: InferenceGymEnv) -> dict[str, Any]:
    """`jax.eval_shape` of `_outputs`'s outputs for one env (the same for every params)."""
    params = env.default_params
    _, state = jax.eval_shape(functools.partial(_start, env), params, jax.random.key(0), jnp.int32(0))
    action = jnp.zeros(len(KNOBS), jnp.int32)
    return jax.eval_shape(functools.partial(_outputs, env), params, state, jax.random.key(0), jnp.int32(0), action)[1]


@functools.cache
def output_layout(env: InferenceGymEnv) -> _Layout:
    """The layout of each row of `step_batch`'s packed outputs."""
    return _Layout(_layout(env))


@functools.partial(jax.jit, static_argnums=0)
def start_batch(env: InferenceGymEnv, params: EnvParams, roots: jax.Array, episodes: jax.Array) -> tuple:
    """`_start` of N envs: roots typed keys (N,), episodes int32 (N,)."""
    return jax.vmap(lambda r, e: _start(env, params, r, e))(roots, episodes)


@functools.partial(jax.jit, static_argnums=0)
def step_batch(env: InferenceGymEnv, params: EnvParams, state: AdapterState, roots: jax.Array, episodes: jax.Array,
                actions: jax.Array) -> tuple[AdapterState, jax.Array]:
    """One interval of N envs, without auto-reset (`GymnasiumVectorEnv` starts the next
    episodes with `start_batch`): (state, `_pack`ed outputs float32 (N, size)).

    Args: state (N,) leaves, roots typed keys (N,), episodes int32 (N,), actions int32 (N, 5).
    """
    state, outputs = jax.vmap(lambda s, r, e, a: _outputs(env, params, s, r, e, a))(state, roots, episodes, actions)
    return state, _pack(outputs, 1)


@jax.jit
def select_state(mask: jax.Array, fresh: AdapterState, stepped: AdapterState) -> AdapterState:
    """`fresh` where `mask` (bool (N,)), else `stepped`: leaves (N, ...)."""
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), fresh, stepped)

