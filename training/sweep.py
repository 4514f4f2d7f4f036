"""Hyperparameter sweeps: every (traced hyperparameter setting x seed) trained in one compiled program.

    result = run_sweep(trainer, {"lr": [1e-4, 3e-4, 1e-3, 3e-3]}, num_seeds=4)  # trainer: make_train's
    result.runs       # one row per run: hyperparameters, seed, training reward, held-out score
    result.summary    # one row per setting: mean and 95% CI over seeds, best first

The grid's values must be traced fields (`training.config.HParams`): they change no shape, so
`jax.vmap(trainer.train)` over a batch of keys and HParams runs all runs as one program, and
each run's final policy is graded on the same held-out episodes (`evaluate.evaluation_key`)
in a second vmapped program.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.protocols import ServingEnvironment
from training.config import HParams, PPOConfig, traced_fields
from training.ppo import Trainer


@dataclasses.dataclass
class SweepResult:
    """Attributes:
      runs: pandas DataFrame, one row per run (hyperparameters, seed, train_reward (mean
        per-interval reward over the last 10% of updates), eval_reward, eval_score).
      summary: pandas DataFrame, one row per setting: means over seeds and the 95% CI
        half-width of eval_score; sorted best first.
      best: dict, the best setting's hyperparameters.
      seconds: wall time of the training program (compile included) [s].
    """

    runs: Any
    summary: Any
    best: dict[str, float]
    seconds: float


def parse_grid(items: Sequence[str]) -> dict[str, list[float]]:
    """`["lr=1e-4,3e-4", "ent_coef=0,0.01"]` -> {"lr": [...], "ent_coef": [...]}, validated."""
    grid: dict[str, list[float]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values:
            raise ValueError(f"--grid {item!r}: use NAME=V1,V2,...")
        try:
            grid[name] = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--grid {item!r}: values must be numbers") from None
    return grid


def grid_settings(config: PPOConfig, grid: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Every combination of the grid, each a full dict of traced fields (validated)."""
    allowed = traced_fields()
    for name, values in grid.items():
        if name not in allowed:
            raise ValueError(f"sweep key {name!r} is not a traced hyperparameter; allowed: {list(allowed)}")
        if not values:
            raise ValueError(f"sweep key {name!r} has no values")
    names = list(grid)
    settings = []
    for combo in itertools.product(*(grid[n] for n in names)):
        setting = config.replace(**dict(zip(names, combo)))  # range checks
        settings.append({f: getattr(setting, f) for f in allowed})
    return settings


def _stack_hparams(settings: list[dict[str, float]]) -> HParams:
    return HParams(**{f: jnp.asarray([s[f] for s in settings], jnp.float32) for f in traced_fields()})


def has_grader(task_id: str) -> bool:
    """Whether `graders.grade` can score this task (its normalising constants exist)."""
    from inferencegym_jax import graders

    try:
        graders.load_constants(task_id)
    except (ValueError, FileNotFoundError):  # no constants for the task, or none generated yet
        return False
    return True


def graded_episodes(trainer: Trainer, params: Any, obs_stats: Any, key: jax.Array, num_episodes: int,
                    task_id: str | None) -> dict[str, jax.Array]:
    """Held-out episodes of one trained policy: mean reward and (if the task has a grader) score.

    The policy acts in the env it was trained in, `trainer.env` (the serving env wrapped by its
    action_mode), so the episodes' traffic is the baselines' on the plain env for the same keys.
    Jittable and vmappable over (params, obs_stats). Returns float32 (num_episodes,) arrays.
    """
    policy = trainer.policy(params, obs_stats, trainer.config.deterministic_eval)
    env, env_params = trainer.env, trainer.env_params
    num_steps = int(env_params.max_steps_in_episode)
    keys = evaluate.episode_keys(key, 0, num_episodes)
    if task_id is None:
        # Any env with the call shape (probes): one horizon from a reset, mean reward.
        def episode(k):
            k_reset, k_run = jax.random.split(k)
            obs, state = env.reset(k_reset, env_params)

            def body(carry, kt):
                obs, state = carry
                k_act, k_env = jax.random.split(kt)
                obs, state, reward, *_ = env.step(k_env, state, policy(k_act, obs, env_params), env_params)
                return (obs, state), reward

            return jnp.mean(jax.lax.scan(body, (obs, state), jax.random.split(k_run, num_steps))[1])

        return {"reward": jax.vmap(episode)(keys)}
    from inferencegym_jax import graders

    serving_env = env
    if not isinstance(serving_env, ServingEnvironment):
        raise ValueError(f"task {task_id!r}: graded episodes need a serving env, not a {type(env).__name__}")
    traj = jax.vmap(lambda k: evaluate.run_episode(serving_env, env_params, policy, k, num_steps))(keys)
    return {"reward": jnp.mean(traj.reward, axis=1), "score": graders.grade(traj, env_params, task_id).score}


def run_sweep(
    trainer: Trainer,
    grid: Mapping[str, Sequence[float]],
    num_seeds: int = 4,
    eval_episodes: int = 64,
    eval_seed: int = 0,
) -> SweepResult:
    """Train every grid setting of `trainer` (`make_train`'s) with seeds config.seed .. config.seed +
    num_seeds - 1, in one program."""
    import pandas as pd

    config = trainer.config

    if num_seeds < 1:
        raise ValueError(f"num_seeds={num_seeds} must be >= 1")
    if eval_episodes < 1:
        raise ValueError(f"eval_episodes={eval_episodes} must be >= 1")
    settings = grid_settings(config, grid)
    seeds = [config.seed + i for i in range(num_seeds)]
    runs = [(s, seed) for s in settings for seed in seeds]
    keys = jnp.stack([evaluate.training_key(seed) for _, seed in runs])
    hps = _stack_hparams([s for s, _ in runs])

    t0 = time.perf_counter()
    runners, metrics = jax.jit(jax.vmap(trainer.train))(keys, hps)
    jax.block_until_ready(runners)
    seconds = time.perf_counter() - t0

    task_id = getattr(trainer.env, "env_id", None)
    if task_id is not None and not has_grader(task_id):
        print(f"note: {task_id} has no grader constants yet; ranking by held-out reward")
        task_id = None
    eval_fn = jax.jit(jax.vmap(
        lambda p, s: graded_episodes(trainer, p, s, evaluate.evaluation_key(eval_seed), eval_episodes, task_id)))
    evals = jax.tree_util.tree_map(np.asarray, eval_fn(runners.params, runners.obs_stats))

    tail = max(1, config.num_updates // 10)
    train_reward = np.asarray(metrics["reward"])[:, -tail:].mean(axis=1)
    rows = []
    for i, (setting, seed) in enumerate(runs):
        row = {name: setting[name] for name in grid}
        row.update(seed=seed, train_reward=float(train_reward[i]), eval_reward=float(evals["reward"][i].mean()))
        if "score" in evals:
            row["eval_score"] = float(evals["score"][i].mean())
        rows.append(row)
    frame = pd.DataFrame(rows)
    target = "eval_score" if "eval_score" in frame else "eval_reward"
    names = list(grid)
    grouped = frame.groupby(names, sort=False)
    summary = grouped[["train_reward", "eval_reward", *(["eval_score"] if target == "eval_score" else [])]].mean()
    # 95% CI of the mean over seeds (normal approximation; 0 with one seed).
    summary[f"{target}_ci95"] = grouped[target].std(ddof=1).fillna(0.0) * 1.96 / np.sqrt(num_seeds)
    # Ties on the held-out target (e.g. a deterministic policy that found the same action) go
    # to the better training reward.
    summary = summary.sort_values([target, "train_reward"], ascending=False).reset_index()
    best = {n: float(summary.iloc[0][n]) for n in names}
    return SweepResult(runs=frame, summary=summary, best=best, seconds=seconds)
