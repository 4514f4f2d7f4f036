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
from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.evaluate import confidence_interval_95
from inferencegym_jax.files import atomic_write_json
from training.ppo import RunnerState, Trainer

PPO_NAME = "ppo"
# The reference of the paired comparison: the best fixed configuration (graders' constants).
REFERENCE_NAME = "best_static"


class PairedDifference(NamedTuple):
    """`scores - reference` on the same held-out episodes (`paired_difference`)."""

    mean: float  # mean over every seed and episode [score units]
    ci95: float  # half-width of the 95% CI over episodes of the per-episode difference (seeds averaged first)
    per_seed: list[float] | None  # each seed's mean difference; None for scores of one policy (episodes,)


def paired_difference(scores: Any, reference: Any) -> PairedDifference:
    """The paired difference of a policy's scores and a reference's on the same held-out episodes.

    The traffic of episode i does not depend on the policy, so the per-episode difference removes
    the traffic's variance from the comparison (a CI much narrower than either score's).

    Args:
      scores: float (episodes,) of one policy, or (seeds, episodes) of a policy trained per seed.
      reference: float (episodes,), the reference's scores on the same episodes.
    """
    reference = np.asarray(reference)
    diff = np.asarray(scores) - (reference if np.ndim(scores) == 1 else reference[None, :])
    if diff.ndim == 1:
        return PairedDifference(float(diff.mean()), confidence_interval_95(diff), None)
    return PairedDifference(float(diff.mean()), confidence_interval_95(diff.mean(axis=0)),
                            diff.mean(axis=1).tolist())


def add_paired_columns(table: Any, results: dict[str, Any], reference: str = REFERENCE_NAME) -> None:
    """Add to the `evaluate.summarize` table, in place, each policy's paired difference to
    `reference` on the same episodes: columns "minus_<reference>" (mean) and "paired_ci95" (its
    95% CI half-width). Nothing when `reference` was not evaluated."""
    if reference not in results:
        return
    diffs = {name: paired_difference(r.scores, results[reference].scores) for name, r in results.items()}
    at = list(table.columns).index("ci95") + 1
    table.insert(at, f"minus_{reference}", [diffs[name].mean for name in table.index])
    table.insert(at + 1, "paired_ci95", [diffs[name].ci95 for name in table.index])


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
    from inferencegym_jax.env import InferenceGymEnv
    from inferencegym_jax.protocols import ServingEnvironment

    params, task_id = trainer.env_params, trainer.env_id
    env = trainer.env
    base_env = getattr(env, "unwrapped", env)  # the serving env under the action wrapper
    if not (isinstance(env, ServingEnvironment) and isinstance(base_env, InferenceGymEnv)):
        raise ValueError(f"evaluate_against_baselines grades serving tasks; {task_id} is not one")
    ppo = trainer.policy(runner.params, runner.obs_stats, trainer.config.deterministic_eval)
    policies: dict[str, tuple[ServingEnvironment, Any]] = {PPO_NAME: (env, ppo)}
    available = baselines.baseline_policies(base_env, params, task_id)
    names = list(available) if baseline_names is None else baseline_names
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; available: {list(available)}")
    policies.update({n: (base_env, available[n]) for n in names})
    key = evaluate.evaluation_key(eval_seed)
    results, rewards = {}, {}
    for name, (env, policy) in policies.items():
        traj, ttft = evaluate.run_episodes(env, params, policy, key, num_episodes, with_ttft=True)
        results[name] = evaluate.grade_trajectory(traj, params, task_id, ttft)
        rewards[name] = np.asarray(traj.reward).mean(axis=1)
    table = evaluate.summarize(results)
    table.insert(2, "reward", [float(rewards[name].mean()) for name in table.index])
    add_paired_columns(table, results)
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
        "task": trainer.env_id,
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
