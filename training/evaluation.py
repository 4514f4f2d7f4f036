"""Graded evaluation of a trained policy against every baseline, on held-out episodes.

Episodes come from `evaluate.evaluation_key(eval_seed)` (episode i from fold_in(key, i)), a
stream disjoint from every training key, and every policy sees the same episodes, so the
comparison is paired. The trained policy acts with its observation normaliser frozen, in the env
it was trained in (`trainer.env`: the serving env wrapped by its action_mode); the baselines act
on the serving env itself. A wrapper changes only the actions, so both see the same traffic.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from inferencegym_jax.files import atomic_write_json
from training.ppo import RunnerState, Trainer

PPO_NAME = "ppo"


def evaluate_against_baselines(
    trainer: Trainer, runner: RunnerState, num_episodes: int, eval_seed: int = 0,
    baseline_names: list[str] | None = None,
) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    """Grade the trained policy and the baselines (default: every one) on held-out episodes.

    Returns (the `evaluate.summarize` DataFrame with a mean-reward column, one row per policy,
    PPO first; the `EvalResult` of each policy by name; each policy's mean reward per interval,
    float (num_episodes,)).
    """
    from inferencegym_jax import baselines, evaluate

    params, task_id = trainer.env_params, trainer.config.task
    base_env = getattr(trainer.env, "unwrapped", trainer.env)  # the serving env under the action wrapper
    policies = {PPO_NAME: (trainer.env, trainer.policy(runner.params, runner.obs_stats,
                                                       trainer.config.deterministic_eval))}
    available = baselines.baseline_policies(base_env, params, task_id)
    names = list(available) if baseline_names is None else baseline_names
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; available: {list(available)}")
    policies.update({n: (base_env, available[n]) for n in names})
    key = evaluate.evaluation_key(eval_seed)
    results, rewards = {}, {}
    for name, (env, policy) in policies.items():
        traj = evaluate.run_episodes(env, params, policy, key, num_episodes)
        results[name] = evaluate.grade_trajectory(traj, params, task_id)
        rewards[name] = np.asarray(traj.reward).mean(axis=1)
    table = evaluate.summarize(results)
    table.insert(2, "reward", [float(rewards[name].mean()) for name in table.index])
    return table, results, rewards


def _plain(value: Any) -> Any:
    """JSON-ready: numpy arrays and scalars to lists and floats, NaN to None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def eval_record(trainer: Trainer, runner: RunnerState, table: Any, results: dict[str, Any],
                num_episodes: int, eval_seed: int) -> dict[str, Any]:
    """What `DIR/eval.json` holds: the run, the table's rows, per-episode scores per policy."""
    return {
        "task": trainer.config.task,
        "updates": int(runner.update),
        "env_steps": int(runner.update) * trainer.config.batch_size,
        "episodes": num_episodes,
        "eval_seed": eval_seed,
        "deterministic_eval": trainer.config.deterministic_eval,
        "table": _plain(table.reset_index().to_dict(orient="records")),
        "scores": {name: _plain(np.asarray(r.scores)) for name, r in results.items()},
    }


def write_json(path: str | Path, record: dict[str, Any]) -> None:
    """Write `record` as JSON (indent 1) to `path` atomically, creating its folder."""
    atomic_write_json(path, record, indent=1)
