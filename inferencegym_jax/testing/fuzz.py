"""A rerunnable fuzz campaign: adversarial actions on randomised in-range params, every task.

Each case is a (task, GPU) pair; its envs each get their own params, drawn inside the task
files' ranges (`random_configs`), and act by one of the adversarial action FAMILIES, switched
per env inside one compiled program. Every step counts non-finite values (observation, reward,
state, metrics), rewards outside [-1, 1], flat observations outside [0, 1], and KV caches
holding more tokens than their capacity. `scripts/fuzz.py` prints the table.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import tasks
from inferencegym_jax.actions import GRID_SIZES, KNOB_RANGES, ServingAction, action_from_indices
from inferencegym_jax.profiles import GPUS
from inferencegym_jax.testing.random_configs import numpy_draw, random_overrides

FAMILIES = ("random", "extreme_index", "precision_flip", "max_batch_min_kv", "wild_values")
# Values a structured action may carry that the env must clip or mask (never propagate).
_WILD = (np.nan, np.inf, -np.inf, -1e9, 1e9, 0.0)


@dataclasses.dataclass
class CaseResult:
    """Counts of one (task, GPU, action family) over its steps."""

    task: str
    gpu: str
    family: str
    steps: int
    non_finite: int
    reward_out_of_range: int
    obs_out_of_range: int
    kv_over_capacity: int


def _action(key: jax.Array, family: jax.Array, t: jax.Array) -> ServingAction:
    """The action of `family` (an index into FAMILIES) at step t, every knob set, masked ones too.

    random: a uniform grid point; extreme_index: each knob at its first or last grid value;
    precision_flip: random, with the precision tier alternating FP16 / INT4 every step;
    max_batch_min_kv: random, with batch 512 and the smallest KV budget; wild_values: each knob
    NaN, +-inf, +-1e9, 0 or a uniform value in its range.
    """
    k_grid, k_extreme, k_wild, k_fine, k_pick = jax.random.split(key, 5)
    nvec = jnp.asarray(GRID_SIZES, jnp.int32)
    random = jax.random.randint(k_grid, (5,), 0, nvec)
    extreme = jnp.where(jax.random.bernoulli(k_extreme, 0.5, (5,)), nvec - 1, 0)
    flip = random.at[4].set(jnp.where(t % 2 == 0, 0, 2))
    stress = random.at[0].set(0).at[2].set(GRID_SIZES[2] - 1)
    index = jnp.stack([random, extreme, flip, stress])[jnp.minimum(family, 3)]
    grid = action_from_indices(index).as_vector()
    wild = jnp.asarray(_WILD, jnp.float32)[jax.random.randint(k_wild, (5,), 0, len(_WILD))]
    lows = jnp.asarray([r[0] for r in KNOB_RANGES], jnp.float32)
    highs = jnp.asarray([r[1] for r in KNOB_RANGES], jnp.float32)
    fine = jax.random.uniform(k_fine, (5,), minval=lows, maxval=highs)
    wild = jnp.where(jax.random.bernoulli(k_pick, 0.5, (5,)), wild, fine)
    values = jnp.where(family == 4, wild, grid)
    return ServingAction(*[values[i] for i in range(5)])


def violations(obs_flat: jax.Array, reward: jax.Array, context: jax.Array, metrics: Any, state: Any) -> jax.Array:
    """int32 [non-finite values, rewards outside [-1, 1], flat observations outside [0, 1], KV caches
    over capacity], counted over any leading axes (one step, or a stacked episode).

    Non-finite counts every float of the observation, reward, KV context, metrics and state;
    `context` [tokens] is the running KV context after the step, compared with the step's
    `metrics.kv_capacity_tokens` (1e-5 relative and one token of float32 slack).
    """
    floats = [x for x in jax.tree_util.tree_leaves((obs_flat, reward, context, metrics, state))
              if jnp.issubdtype(x.dtype, jnp.floating)]
    non_finite = sum(jnp.sum(~jnp.isfinite(x)) for x in floats)
    bad_reward = jnp.sum((reward < -1.0) | (reward > 1.0))
    bad_obs = jnp.sum((obs_flat < 0.0) | (obs_flat > 1.0))
    over = jnp.sum(context > metrics.kv_capacity_tokens * (1.0 + 1e-5) + 1.0)
    return jnp.stack([non_finite, bad_reward, bad_obs, over]).astype(jnp.int32)


def _rollout_program(env: Any, num_steps: int) -> Any:
    """jit(keys (N,), params (N, ...), families (N,)) -> int32 (N, 4) counts summed over steps.

    Episodes auto-reset at their horizon (`env.step`); the observation checked is the one the
    step produced (`info["final_observation"]`), before any reset.
    """

    def one_env(key: jax.Array, params: Any, family: jax.Array) -> jax.Array:
        k_reset, k_run = jax.random.split(key)
        _, state = env.reset_env(k_reset, params)

        def body(carry: tuple[Any, jax.Array], t: jax.Array) -> tuple[tuple[Any, jax.Array], None]:
            state, total = carry
            k_env, k_act = jax.random.split(jax.random.fold_in(k_run, t))
            _, state, reward, _, _, info = env.step(k_env, state, _action(k_act, family, t), params)
            obs = env.flatten_observation(info["final_observation"], params)
            counts = violations(obs, reward, state.server.running.context, info["metrics"], state)
            return (state, total + counts), None

        (_, total), _ = jax.lax.scan(body, (state, jnp.zeros(4, jnp.int32)), jnp.arange(num_steps))
        return total

    return jax.jit(jax.vmap(one_env))


def random_params(env_id: str, gpu: str, count: int, rng: np.random.Generator, randomize: bool = True,
                  engine: str | None = None) -> Any:
    """`count` params of a task on `gpu`, each drawn in range (or the defaults), stacked on axis 0;
    with `engine`, on that engine model (`serving.types.ENGINES`) instead of the task's."""
    draw = numpy_draw(rng)

    def overrides() -> dict[str, Any]:
        drawn = random_overrides(env_id, draw) if randomize else {}
        if engine is not None:
            drawn["server"] = {**drawn.get("server", {}), "engine": engine}
        return drawn

    made = [tasks.make(env_id, gpu=gpu, **overrides())[1] for _ in range(count)]
    return jax.tree_util.tree_map(lambda *x: np.stack(x), *made)


def run_task(env_id: str, num_envs: int, num_steps: int, seed: int = 0, *, distinct_params: int = 64,
             randomize: bool = True, engine: str | None = None) -> list[CaseResult]:
    """Every (GPU, family) case of one task: num_envs envs per case, num_steps steps each."""
    rng = np.random.default_rng(seed)
    env, _ = tasks.make(env_id)
    program = _rollout_program(env, num_steps)
    per_family = num_envs // len(FAMILIES)
    families = np.repeat(np.arange(len(FAMILIES), dtype=np.int32), per_family)
    results = []
    for g, gpu in enumerate(GPUS):
        base = random_params(env_id, gpu, distinct_params, rng, randomize, engine)
        pick = rng.integers(0, distinct_params, len(families))
        params = jax.tree_util.tree_map(lambda x, pick=pick: x[pick], base)
        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), g), len(families))
        counts = np.asarray(program(keys, params, jnp.asarray(families)))
        for f, family in enumerate(FAMILIES):
            c = counts[families == f].sum(axis=0)
            results.append(CaseResult(env_id, gpu, family, per_family * num_steps, *map(int, c)))
    return results


def run_campaign(total_steps: int, num_steps: int = 200, seed: int = 0, *, env_ids: list[str] | None = None,
                 randomize: bool = True, engine: str | None = None) -> tuple[list[CaseResult], float]:
    """About `total_steps` env steps over every task, GPU and family (on `engine` when given);
    (results, seconds)."""
    env_ids = env_ids or tasks.registered_envs()
    cases = len(env_ids) * len(GPUS)
    num_envs = max(len(FAMILIES), total_steps // (cases * num_steps))
    start = time.perf_counter()
    results = [r for env_id in env_ids
               for r in run_task(env_id, num_envs, num_steps, seed, randomize=randomize, engine=engine)]
    return results, time.perf_counter() - start


def table(results: list[CaseResult]) -> str:
    """A Markdown table of the results, one row per case, and a total row."""
    header = ("| task | gpu | actions | steps | non-finite | reward outside [-1, 1] | obs outside [0, 1] "
              "| KV over capacity |")
    lines = [header, "|" + "---|" * 8]
    for r in results:
        lines.append(f"| {r.task} | {r.gpu} | {r.family} | {r.steps:,} | {r.non_finite} | {r.reward_out_of_range} "
                     f"| {r.obs_out_of_range} | {r.kv_over_capacity} |")
    total = [sum(getattr(r, f) for r in results) for f in
             ("steps", "non_finite", "reward_out_of_range", "obs_out_of_range", "kv_over_capacity")]
    lines.append(f"| all | | | {total[0]:,} | {total[1]} | {total[2]} | {total[3]} | {total[4]} |")
    return "\n".join(lines)
