"""Graded evaluation of a trained policy against every baseline, on held-out episodes.

Episodes come from `evaluate.evaluation_key(eval_seed)` (episode i from fold_in(key, i)), a
stream disjoint from every training key, and every policy sees the same episodes, so the
comparison is paired. The trained policy acts with its observation normaliser frozen, in the env
it was trained in (`trainer.env`: the serving env wrapped by its action_mode); the baselines act
on the serving env itself. A wrapper changes only the actions, so both see the same traffic.

A fleet (`inferencegym_jax.fleet`) is graded by `evaluate_fleet`: the trained policy and the
fleet baselines (`fleet.baselines.fleet_baselines`) on the task's held-out days
(`fleet_heldout_params`), in `fleet.evaluate.graded_table` (its score normalised between
static-for-peak, 0, and the oracle, 1, with GPU-hours and SLO attainment beside it).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np

from inferencegym_jax.evaluate import confidence_interval_95
from inferencegym_jax.files import atomic_write_json
from inferencegym_jax.fleet.env import FleetEnv, FleetParams
from training.ppo import RunnerState, Trainer

PPO_NAME = "ppo"
# The reference of the paired comparison: the best fixed configuration (graders' constants).
REFERENCE_NAME = "best_static"
# The fleet baselines a fleet's score is graded between (0 and 1; fleet.evaluate.grade).
FLEET_REFERENCES = ("static_for_peak", "oracle")


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


def is_fleet(trainer: Trainer) -> bool:
    """Whether the trainer trains a fleet (`fleet.env.FleetEnv`), graded by `evaluate_fleet`."""
    return isinstance(trainer.env, FleetEnv)


def fleet_heldout_params(env_id: str, train_params: FleetParams) -> FleetParams:
    """The trained fleet's params with its task's held-out episode windows (`fleet.tasks`, split
    "heldout": the days no policy trains on); every other field is the trainer's, so what it was
    built with (a shorter max_steps, in tests) carries over. ValueError for an unregistered id."""
    from inferencegym_jax.fleet.tasks import make_fleet

    _, heldout = make_fleet(env_id, split="heldout")
    return dataclasses.replace(train_params, curve=heldout.curve)


def fleet_baseline_controllers(trainer: Trainer, params: FleetParams,
                               baseline_names: list[str] | None = None) -> dict[str, Any]:
    """The fleet baselines (`fleet.baselines.fleet_baselines`) by name, those asked for (default:
    every one); ValueError naming the unknown ones and the available."""
    from inferencegym_jax.fleet.baselines import fleet_baselines

    available = fleet_baselines(cast(FleetEnv, trainer.env), params)
    return select_baselines(available, baseline_names, FLEET_REFERENCES, "the fleet's")


def select_baselines(available: dict[str, Any], baseline_names: list[str] | None, references: tuple[str, str],
                     whose: str) -> dict[str, Any]:
    """The baselines of `available` asked for (default: every one); ValueError naming the unknown
    ones and the available, or the graded references (0, 1) missing from them."""
    names = list(available) if baseline_names is None else baseline_names
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; available: {list(available)}")
    missing = [n for n in references if n not in names]
    if missing:
        raise ValueError(f"baselines {names} lack {missing}: {whose} score is graded between "
                         f"{references[0]} (0) and {references[1]} (1)")
    return {n: available[n] for n in names}


def evaluate_fleet(trainer: Trainer, runner: RunnerState, num_episodes: int, eval_seed: int = 0,
                   baseline_names: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Grade the trained fleet policy and the fleet baselines (default: every one) on
    `num_episodes` held-out episodes of `evaluate.evaluation_key(eval_seed)`, the same for all.

    Returns `fleet.evaluate.graded_table`'s (DataFrame, one row per policy, PPO first; each
    policy's `FleetEpisodes` by name).
    """
    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.evaluate import graded_table

    params = fleet_heldout_params(trainer.env_id, trainer.env_params)
    ppo = trainer.policy(runner.params, runner.obs_stats, trainer.config.deterministic_eval)
    controllers = {PPO_NAME: evaluate.as_controller(ppo), **fleet_baseline_controllers(trainer, params,
                                                                                        baseline_names)}
    key = evaluate.evaluation_key(eval_seed)
    return graded_table(cast(FleetEnv, trainer.env), params, controllers, key, num_episodes)


def fleet_levels(episodes: dict[str, Any], num_steps: int) -> dict[str, float]:
    """Each policy's mean held-out reward per interval, -J / num_steps (J: `FleetEpisodes.episode_cost`,
    minus the episode's return), by name: the reward curve's levels."""
    return {name: -float(np.mean(e.episode_cost)) / num_steps for name, e in episodes.items()}


def _per_episode(episodes: Any, num_episodes: int) -> dict[str, Any]:
    """The fields of a `fleet.evaluate.FleetEpisodes` that hold one value per episode,
    (num_episodes,), JSON-ready; per-interval arrays are left out."""
    fields = {f.name: getattr(episodes, f.name) for f in dataclasses.fields(episodes)}
    return {name: _plain(np.asarray(v)) for name, v in fields.items() if np.shape(v) == (num_episodes,)}


def fleet_eval_record(trainer: Trainer, runner: RunnerState, table: Any, episodes: dict[str, Any],
                      num_episodes: int, eval_seed: int) -> dict[str, Any]:
    """What `DIR/eval.json` holds for a fleet: the run, the table's rows, and each policy's
    per-episode values (`_per_episode`)."""
    return {
        **_run_record(trainer, runner, num_episodes, eval_seed),
        "split": "heldout",
        "table": _plain(table.reset_index().to_dict(orient="records")),
        "per_episode": {name: _per_episode(e, num_episodes) for name, e in episodes.items()},
    }


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
        **_run_record(trainer, runner, num_episodes, eval_seed),
        "table": _plain(table.reset_index().to_dict(orient="records")),
        "scores": {name: _plain(np.asarray(r.scores)) for name, r in results.items()},
    }


def _run_record(trainer: Trainer, runner: RunnerState, num_episodes: int, eval_seed: int) -> dict[str, Any]:
    """The run an evaluation record is of: task, updates, env steps, episodes, seed, mode."""
    return {
        "task": trainer.env_id,
        "updates": int(runner.update),
        "env_steps": int(runner.update) * trainer.config.batch_size,
        "episodes": num_episodes,
        "eval_seed": eval_seed,
        "deterministic_eval": trainer.config.deterministic_eval,
    }


def write_json(path: str | Path, record: dict[str, Any]) -> None:
    """Write `record` as JSON (indent 1) to `path` atomically, creating its folder."""
    atomic_write_json(path, record, indent=1)
