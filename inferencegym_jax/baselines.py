"""Baseline policies, all with the evaluation signature `policy(key, obs, params) -> action`.

  random         uniform over the task's action grid;
  vllm_default   the fixed vLLM-default configuration (kv_budget 1.0, no speculation, batch 32,
                 no disaggregation, FP16);
  heuristic      a reactive controller that moves the knobs on queue, latency, KV occupancy
                 and memory feedback: the smart baseline a trained agent has to beat;
  best_static    the best fixed configuration per task, found by `search_static`, an
                 exhaustive vmapped search over the task's discrete action grid on training
                 keys (scripts/grader_constants.py stores it with the normalising constants);
  hindsight      (an oracle, labelled as such) for each evaluation episode the best static
                 configuration chosen after seeing that episode: `hindsight_static_scores`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import graders, perf_model, serving
from inferencegym_jax.actions import BATCH_SIZES, ServingAction, indices_from_action
from inferencegym_jax.env import EnvParams, InferenceGymEnv, Observation
from inferencegym_jax.evaluate import Policy, episode_keys, run_episode
from inferencegym_jax.traffic import workload

# The policies are pytrees with a `__call__` (`evaluate.as_policy_pytree`): what they hold is an
# argument of the compiled evaluation program, so every fixed configuration of a task, say,
# shares one compilation.


@struct.dataclass
class RandomPolicy:
    """Uniform over the action grid of `env` (masked knobs have a single choice)."""

    env: InferenceGymEnv = struct.field(pytree_node=False)

    def __call__(self, key: jax.Array, obs: Observation, params: EnvParams) -> jax.Array:
        return self.env.action_space(params).sample(key)


@struct.dataclass
class FixedPolicy:
    """Always `action`: a ServingAction or an int32 (5,) grid-index vector."""

    action: Any

    def __call__(self, key: jax.Array, obs: Observation, params: EnvParams) -> Any:
        return self.action


def random_policy(env: InferenceGymEnv) -> Policy:
    """Uniform over the task's action grid (masked knobs have a single choice)."""
    return RandomPolicy(env)


# The fixed vLLM-default configuration of the issue: the whole KV budget, no speculation,
# 32 concurrent sequences (max_num_seqs), no disaggregation, FP16. NumPy scalars, so importing
# this module starts no JAX backend (jax.distributed.initialize must come before the first):
# leaves of another array type than the fields' jax.Array annotation, which JAX takes as arrays.
VLLM_DEFAULT = ServingAction(
    kv_budget=np.float32(1.0),  # type: ignore[arg-type]
    spec_length=np.float32(0.0),  # type: ignore[arg-type]
    batch_size=np.float32(32.0),  # type: ignore[arg-type]
    prefill_disagg=np.float32(0.0),  # type: ignore[arg-type]
    quant_tier=np.float32(0.0),  # type: ignore[arg-type]
)


def fixed_policy(action: ServingAction | jax.Array) -> Policy:
    """Always the same action (a ServingAction or a grid-index vector)."""
    return FixedPolicy(action)


def fixed_default_policy() -> Policy:
    """The fixed vLLM-default configuration."""
    return fixed_policy(VLLM_DEFAULT)


# ----------------------------------------------------------------------------- heuristic

# Thresholds of the heuristic, as fractions of the SLO or of capacity (operator rules of thumb).
TPOT_HIGH = 0.9      # TPOT above this fraction of its SLO: shrink the batch
TPOT_ROOM = 0.7      # below this fraction there is room to grow the batch
TTFT_HIGH = 0.5      # TTFT p99 above this fraction of the (mix-weighted) SLO: grow the batch
KV_HIGH, KV_LOW = 0.9, 0.4          # KV occupancy band: grow / shrink the cache by one step
MEMORY_HIGH = 0.9    # memory in use above this fraction of the limit: shrink the cache
# Disaggregate when prefill of the mean load would take more than this share of one GPU.
DISAGG_PREFILL_SHARE = 0.3
# Speculation by running sequences: EAGLE pays off at small batch only (docs/DESIGN.md anchors).
SPEC_BY_BATCH = ((16.0, 4.0), (48.0, 2.0), (96.0, 1.0))


def heuristic_policy(env: InferenceGymEnv) -> Policy:
    """A reactive controller an operator could write: feedback on the observation alone.

    Starting from the configuration in force (`obs.config`, the task default at reset), each
    interval it moves each knob by at most one grid step:
      * batch_size up when requests queue or TTFT p99 passes TTFT_HIGH of the SLO while TPOT has
        room, down when TPOT passes TPOT_HIGH of its SLO;
      * kv_budget up when the cache is nearly full, down when mostly empty or when memory nears
        the task's limit;
      * spec_length from the running batch size (SPEC_BY_BATCH);
      * quant_tier INT8 where the task allows it (half the weight bytes for 0.5 % quality),
        chosen from the first interval, when configuring the engine is free;
      * prefill_disagg decided once, by capacity planning: on when prefill of the workload's
        mean load (mean rate x mean prompt, known from the task) would take more than
        DISAGG_PREFILL_SHARE of a GPU. It never toggles: a toggle reloads weights and stalls
        the engine for seconds, longer than the bursts a reactive rule would chase.
    Beyond that plan it knows the SLOs and the memory limit, not the load: it has to find it.
    """
    return HeuristicPolicy(env.default_params.active_knobs)


@struct.dataclass
class HeuristicPolicy:
    """The controller of `heuristic_policy` for a task whose active knobs are `active`."""

    active: tuple[bool, ...] = struct.field(pytree_node=False)

    def __call__(self, key: jax.Array, obs: Observation, params: EnvParams) -> ServingAction:
        active = self.active
        s, wl, default = params.server, params.workload, params.default_action
        kv_now, batch_now = obs.config[0], obs.config[2]
        slo_ref = jnp.sum(wl.class_mix * s.ttft_slo_s)

        batches = jnp.asarray(BATCH_SIZES, jnp.float32)
        b = jnp.argmin(jnp.abs(batches - batch_now))
        backlog = (obs.queue_depth > 1.0) | (obs.ttft_p99_s > TTFT_HIGH * slo_ref)
        tpot_slo = jnp.min(s.tpot_slo_s)  # the tightest class's
        grow = backlog & (obs.tpot_p50_s < TPOT_ROOM * tpot_slo)
        shrink = obs.tpot_p50_s > TPOT_HIGH * tpot_slo
        b = jnp.clip(b + jnp.where(shrink, -1, jnp.where(grow, 1, 0)), 0, len(BATCH_SIZES) - 1)
        batch = jnp.where(active[2], batches[b], default.batch_size)

        tier = jnp.where(active[4], 1.0, default.quant_tier)
        profile = serving.select_profile(s.profiles, tier)
        room = (s.memory_limit_bytes - profile.weight_bytes - profile.reserve_bytes) / (
            profile.hbm_bytes - profile.weight_bytes - profile.reserve_bytes
        )
        kv_step = jnp.where(obs.kv_occupancy > KV_HIGH, 0.1, jnp.where(obs.kv_occupancy < KV_LOW, -0.1, 0.0))
        kv_step = jnp.where(obs.gpu_memory_gb * 1e9 > MEMORY_HIGH * s.memory_limit_bytes, -0.1, kv_step)
        kv = jnp.clip(kv_now + kv_step, 0.1, jnp.clip(jnp.floor(10.0 * room) / 10.0, 0.1, 1.0))
        kv = jnp.where(active[0], kv, default.kv_budget)

        spec = jnp.float32(0.0)
        for limit, k in reversed(SPEC_BY_BATCH):
            spec = jnp.where(obs.running_seqs < limit, k, spec)
        spec = jnp.where(active[1], spec, default.spec_length)

        mean_prompt, _ = workload.mean_lengths(wl)
        prefill_rate = perf_model.prefill_throughput(profile)
        planned = workload.mean_rate(wl) * mean_prompt / prefill_rate > DISAGG_PREFILL_SHARE
        disagg = jnp.where(active[3], planned.astype(jnp.float32), default.prefill_disagg)
        return ServingAction(kv_budget=kv, spec_length=spec, batch_size=batch, prefill_disagg=disagg, quant_tier=tier)


# ----------------------------------------------------------------------------- static search


def static_grid(env: InferenceGymEnv, params: EnvParams) -> np.ndarray:
    """Every index action of the task's grid (masked knobs fixed at index 0), int32 (C, 5)."""
    nvec = env.action_space(params).nvec
    return np.asarray(list(itertools.product(*[range(n) for n in nvec])), np.int32)


@functools.partial(jax.jit, static_argnames=("env", "num_steps"))
def _static_stats(env: InferenceGymEnv, params: EnvParams, actions: jax.Array, keys: jax.Array,
                  num_steps: int) -> dict[str, jax.Array]:
    """Episode statistics (graders.episode_statistics) of each action on each key: (C, E)."""

    def one(action: jax.Array, key: jax.Array) -> dict[str, jax.Array]:
        traj = run_episode(env, params, lambda k, o, p: action, key, num_steps)
        return graders.episode_statistics(traj, params)

    return jax.vmap(lambda a: jax.vmap(lambda k: one(a, k))(keys))(actions)


def static_statistics(
    env: InferenceGymEnv,
    params: EnvParams,
    actions: np.ndarray,
    key: jax.Array,
    num_episodes: int,
    *,
    envs_per_call: int = 2048,
    num_steps: int | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of fixed index actions (C, 5) over episodes fold_in(key, i): arrays (C, E)."""
    num_steps = int(num_steps or int(params.max_steps_in_episode))
    keys = episode_keys(key, 0, num_episodes)
    chunk = max(1, envs_per_call // num_episodes)
    pad = (-len(actions)) % chunk  # equal chunks: one compilation
    padded = np.concatenate([actions, np.repeat(actions[-1:], pad, axis=0)]) if pad else actions
    parts = []
    for i in range(0, len(padded), chunk):
        stats = _static_stats(env, params, jnp.asarray(padded[i:i + chunk]), keys, num_steps)
        parts.append(jax.tree_util.tree_map(np.asarray, stats))
    return {k: np.concatenate([p[k] for p in parts])[: len(actions)] for k in parts[0]}


def search_static(
    env: InferenceGymEnv, params: EnvParams, grader: str, key: jax.Array, num_episodes: int, x_random: float,
    *, num_steps: int | None = None, raw_throughput: bool = False,
) -> dict:
    """Exhaustive search of the best static configuration for a grader.

    The optimum of the served fraction (x_optimum) is the best mean over the grid; the best
    static configuration maximises the grader's mean score normalised with it (ties go to the
    configuration fewest grid steps from the vLLM default). With `raw_throughput` (the
    "oracle" score scale of `graders`) the throughput component is the served fraction itself
    and `best_score` is the grader's value before the oracle normalisation.

    Returns a dict with `x_optimum`, `best_action` (index list), `best_score`, `actions`
    (C, 5), `scores` (C,), `episode_scores` (C, E) and `served` (C,).
    """
    actions = static_grid(env, params)
    stats = static_statistics(env, params, actions, key, num_episodes, num_steps=num_steps)
    served = stats["served_fraction"].mean(axis=1)
    x_optimum = float(served.max())
    scale = (0.0, 1.0) if raw_throughput else (x_random, x_optimum)
    comps = graders.components({k: jnp.asarray(v) for k, v in stats.items()}, grader, *scale)
    episode_scores = np.asarray(graders.combine(comps, grader))
    scores = episode_scores.mean(axis=1)
    # Ties (several configurations serve everything, say) go to the one closest to the vLLM
    # default in grid steps: the smallest change that reaches the optimum.
    default = np.asarray(indices_from_action(VLLM_DEFAULT))
    default = np.where(np.asarray(params.active_knobs), default, 0)
    tied = np.flatnonzero(scores >= scores.max() - 1e-9)
    best = int(tied[np.argmin(np.abs(actions[tied] - default).sum(axis=1))])
    return {
        "x_optimum": x_optimum,
        "best_action": actions[best].tolist(),
        "best_score": float(scores[best]),
        "actions": actions,
        "scores": scores,
        "episode_scores": episode_scores,
        "served": served,
    }


def hindsight_static_scores(
    env: InferenceGymEnv, params: EnvParams, task_id: str, key: jax.Array, num_episodes: int
) -> np.ndarray:
    """Oracle bound: per evaluation episode, the best static configuration's score in hindsight.

    Exhaustive over the grid on the evaluation keys themselves, so it costs (grid size) times
    an evaluation; use it where the grid is small. float (E,).
    """
    x_random, x_optimum, floor, ceiling = graders.scale_constants(task_id)
    grader = graders.grader_name(task_id)
    stats = static_statistics(env, params, static_grid(env, params), key, num_episodes)
    comps = graders.components({k: jnp.asarray(v) for k, v in stats.items()}, grader, x_random, x_optimum)
    return np.asarray(graders.normalise(graders.combine(comps, grader), floor, ceiling)).max(axis=0)


def best_static_policy(task_id: str) -> Policy:
    """The stored best static configuration of a task (grid indices)."""
    action = jnp.asarray(graders.load_constants(task_id)["best_static_action"], jnp.int32)
    return fixed_policy(action)


def candidate_actions(env: InferenceGymEnv, params: EnvParams, task_id: str,
                      best_static: Sequence[int] | None = None) -> np.ndarray:
    """The configurations the model-predictive controllers (`mpc`, whose docstring describes
    them) and the switching rule (`switch_rule`) choose among, int32 (C, 5) grid indices: best
    static first, its one-knob neighbourhood, the vLLM default; no duplicates. `best_static`
    (5 indices) defaults to the task's stored one (data/grader_constants.json)."""
    nvec = env.action_space(params).nvec
    if best_static is None:
        best_static = graders.load_constants(task_id)["best_static_action"]
    best = np.asarray(best_static, np.int32)
    rows = [best]
    for knob, size in enumerate(nvec):
        for value in range(int(size)):
            row = best.copy()
            row[knob] = value
            rows.append(row)
    default = np.where(np.asarray(params.active_knobs), np.asarray(indices_from_action(VLLM_DEFAULT)), 0)
    rows.append(default.astype(np.int32))
    _, first = np.unique(np.stack(rows), axis=0, return_index=True)
    return np.stack(rows)[np.sort(first)].astype(np.int32)


def baseline_policies(env: InferenceGymEnv, params: EnvParams, task_id: str) -> dict[str, Callable]:
    """Every baseline of the module docstring (except the hindsight oracle), by name."""
    return {
        "random": random_policy(env),
        "vllm_default": fixed_default_policy(),
        "heuristic": heuristic_policy(env),
        "best_static": best_static_policy(task_id),
    }


__all__ = [
    "VLLM_DEFAULT",
    "FixedPolicy",
    "HeuristicPolicy",
    "RandomPolicy",
    "baseline_policies",
    "best_static_policy",
    "fixed_default_policy",
    "fixed_policy",
    "heuristic_policy",
    "hindsight_static_scores",
    "random_policy",
    "search_static",
    "static_grid",
    "static_statistics",
]
