"""A PPO run from a uniform start (scripts/ppo_results.py --uniform-start, the uniform-start
results table): the overrides of a shipped training config that remove every prior on a
configuration, and the budgets such a start was measured with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferencegym_jax.training_setup.run_config import TrainConfig

# PPO with no prior on any configuration, issue 12's "from a uniform start": no
# best-static prior, no imitation of the causal mpc, no burst forecast, and the settings such a
# start needs, each measured on the v1 tasks 2-4 (README "Results on the v1 tasks"):
#   * hold actions (keep each knob's value in force, or set any grid index) with a prior of
#     logit 5 on keeping: a change picks every grid value alike, and what it sets stays, on
#     average, (e^5 + n) / (n - 1) intervals on a knob of n values (13 on the batch knob, 150 on
#     prefill disaggregation). Logit 3 (2.8 and 22 intervals), the first value tried, reached
#     the best static configuration on tasks 2-3-v1, but on task 4-v1 two seeds of three never
#     turned the prefill GPU on; 5 was the second and last value tried (README).
#     Exploration that is persistent in time: on task 2-v1 a batch cap above 96 in even a share
#     of a burst's intervals admits enough sequences to break TPOT for the burst (the best static
#     configuration with batch 128 in a random 10 % / 20 % / 50 % of the burst intervals loses
#     37 % / 67 % / 110 % of what 128 in all of them loses, experiments/burst_phases.py), so a
#     policy drawing each interval's cap afresh saw no gain from 96 until it already played it
#     nearly always, and stayed at batch 512 (0.684 against the best static configuration's
#     0.791, every seed tried but one). Knobs start where every episode's do, at the task's default
#     configuration, which the prior does not favour over any other;
#   * lr 3e-3 (at the shipped 3e-4 an update hardly moves the policy, clip fraction at most 3e-5);
#   * 5x the shipped config's updates (UNIFORM_BUDGET; 200 ended in a local optimum), fixed
#     for the v1 tasks at 5x their budgets of then (UNIFORM_UPDATES);
#   * no entropy bonus (with 0.01 the spread policy's mode flips between near-tied choices from
#     interval to interval, and every flip pays a reconfiguration: the grade's stability
#     component 0.24 on task 3-v1, 0.96 with 0.001).
UNIFORM_START = {"action_mode": "hold", "initial_action": "default", "default_logit": 5.0, "imitation_episodes": 0,
                 "forecast_intervals": 0, "lr": 3e-3, "ent_coef": 0.0}
UNIFORM_BUDGET = 5
# [updates] The v1 tasks' uniform-start budgets: 5x their shipped configs' num_updates when the
# README's uniform-start table was measured (200, 200, 400). Task 4-v1's shipped config has had
# 1,600 updates since (chosen for the imitation start, configs/train/ppo_task4_v1.toml); these
# keep the table's command rerunning what it ran. Other tasks: UNIFORM_BUDGET x their config's.
UNIFORM_UPDATES = {"InferenceGym-Task2-v1": 1000, "InferenceGym-Task3-v1": 1000, "InferenceGym-Task4-v1": 2000}


def run_overrides(shipped: TrainConfig, uniform_start: bool, overrides: Mapping[str, Any] | None = None) -> dict:
    """The overrides of a run of the task's shipped config `shipped`: with `uniform_start`
    UNIFORM_START and UNIFORM_UPDATES (else UNIFORM_BUDGET x the shipped num_updates), then
    `overrides` (the command line's `--set` pairs) on top; without it `overrides` alone."""
    overrides = dict(overrides or {})
    if not uniform_start:
        return overrides
    updates = UNIFORM_UPDATES.get(shipped.task) or UNIFORM_BUDGET * shipped.num_updates
    return {**UNIFORM_START, "num_updates": updates, **overrides}
