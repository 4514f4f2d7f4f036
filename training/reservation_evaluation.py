"""Graded evaluation of a policy trained on a day-ahead reservation task (`fleet.reservation`).

The trained policy and the reservation baselines (`fleet.reservation_baselines.reservation_baselines`:
the causal ones and the clairvoyant oracle) play the task's held-out services
(`reservation_heldout_params`: the other half of the trace's clients on the later days,
`fleet.reservation_tasks`),
episode i from fold_in(`evaluate.evaluation_key(eval_seed)`, i) for every policy, so the comparison
is paired; `reservation_table` grades them between week_peak (0) and the oracle (1), with the
episode's J, cost [$], GPU-hours and SLO attainment, and each policy's paired difference in J and
cost to week_peak and rolling_quantile with 95 % CIs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np

from inferencegym_jax.fleet.reservation import ReservationEnv, ReservationParams
from training.evaluation import PPO_NAME, _plain, _run_record, select_baselines
from training.ppo import RunnerState, Trainer

# The baselines a reservation score is graded between (0 and 1; reservation_baselines.reservation_table).
RESERVATION_REFERENCES = ("week_peak", "oracle")


def is_reservation(trainer: Trainer) -> bool:
    """Whether the trainer trains a reservation task (`fleet.reservation.ReservationEnv`)."""
    return isinstance(trainer.env, ReservationEnv)


def reservation_heldout_params(env_id: str, train_params: ReservationParams) -> ReservationParams:
    """The trained task's params with its held-out client pool and days (`make_reservation(env_id,
    split="heldout")`); every other field is the trainer's, so what it was built with carries
    over. ValueError for an unregistered id."""
    from inferencegym_jax.fleet.reservation_tasks import make_reservation

    _, heldout = make_reservation(env_id, split="heldout")
    return dataclasses.replace(train_params, client_pool=heldout.client_pool, first_day=heldout.first_day,
                               decision_days=heldout.decision_days)


def reservation_baseline_policies(trainer: Trainer, params: ReservationParams,
                                  baseline_names: list[str] | None = None) -> dict[str, Any]:
    """The reservation baselines by name, those asked for (default: every one); ValueError
    naming the unknown ones and the available, or the graded references missing."""
    from inferencegym_jax.fleet.reservation_baselines import reservation_baselines

    available = reservation_baselines(cast(ReservationEnv, trainer.env), params)
    return select_baselines(available, baseline_names, RESERVATION_REFERENCES, "the reservation")


def evaluate_reservation(trainer: Trainer, runner: RunnerState, num_episodes: int, eval_seed: int = 0,
                         baseline_names: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Grade the trained policy and the reservation baselines (default: every one) on
    `num_episodes` held-out services of `evaluate.evaluation_key(eval_seed)`, the same for all.

    Returns `reservation_table`'s (DataFrame, one row per policy, PPO first; each policy's
    `ReservationEpisodes` by name).
    """
    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.reservation_baselines import reservation_table

    params = reservation_heldout_params(trainer.env_id, trainer.env_params)
    ppo = trainer.policy(runner.params, runner.obs_stats, trainer.config.deterministic_eval)
    policies = {PPO_NAME: evaluate.as_controller(ppo), **reservation_baseline_policies(trainer, params,
                                                                                       baseline_names)}
    return reservation_table(cast(ReservationEnv, trainer.env), params, policies, evaluate.evaluation_key(eval_seed),
                             num_episodes)


def reservation_levels(episodes: dict[str, Any], num_steps: int) -> dict[str, float]:
    """Each policy's mean held-out reward per commitment, -J / num_steps, by name (the reward
    curve's levels)."""
    return {name: -float(np.mean(e.J)) / num_steps for name, e in episodes.items()}


def reservation_eval_record(trainer: Trainer, runner: RunnerState, table: Any, episodes: dict[str, Any],
                            num_episodes: int, eval_seed: int) -> dict[str, Any]:
    """What `DIR/eval.json` holds for a reservation task: the run, the table's rows, and each
    policy's per-episode values (every `ReservationEpisodes` field, (num_episodes,))."""
    per_episode = {name: {f.name: _plain(np.asarray(getattr(e, f.name))) for f in dataclasses.fields(e)}
                   for name, e in episodes.items()}
    return {
        **_run_record(trainer, runner, num_episodes, eval_seed),
        "split": "heldout",
        "table": _plain(table.reset_index().to_dict(orient="records")),
        "per_episode": per_episode,
    }
