"""How the causal MPC's forecast of a replayed trace was chosen: persistence against analog
ensembles of several windows, sizes and planning intervals, on training episodes; and with
--rollout, how the rollout MPC (the switching rule as the base policy) was.

    python experiments/trace_forecast_sweep.py --json experiments/results/trace_forecast_sweep_v1.json  # task 4-v1
    python experiments/trace_forecast_sweep.py --rollout --json experiments/results/rollout_sweep_v1.json

Every point plays episodes 0..N-1 of fold_in(training_key(seed), switch_rule.SELECTION_STREAM)
(the switching rule's selection episodes: never an evaluation episode), 30 intervals ahead
(mpc.HORIZON), and its gain is paired with the best static configuration on the same episodes,
graded as the README's tables are. inferencegym_jax.control.trace_analogs gives the forecast,
inferencegym_jax.control.mpc the controller. The rollout points' base policy is the switching rule
selected on --rule-episodes of those episodes (switch_rule.select, as experiments/mpc_gap.py
--rule-episodes selects it), and their gains are paired with the rule's too.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.files import atomic_write_json

# (forecast, futures, analog window [intervals], plan every [intervals]); the chosen point first.
POINTS = (
    ("analogs", 64, 30, 10),
    ("persistence", 1, 30, 1),
    ("persistence", 1, 30, 10),
    ("analogs", 64, 10, 10),
    ("analogs", 64, 60, 10),
    ("analogs", 8, 30, 10),
    ("analogs", 16, 30, 10),
    ("analogs", 32, 30, 10),
    ("analogs", 128, 30, 10),
    ("analogs", 64, 30, 20),
    ("analogs", 64, 30, 30),
    ("analogs", 16, 30, 1),
)
# --rollout: (candidates, forecast, futures, plan every [intervals], horizon [intervals], margin
# [standard errors]), each rollout holding its candidate until the next plan, then the rule (mpc,
# "Rollout with a base policy"); candidates "rule": the rule's two configurations, "all":
# mpc.candidate_actions; a candidate replaces the rule only with a paired gain over it above
# `margin` standard errors (mpc, "A margin before leaving the base"). The analog window is
# trace_analogs.WINDOW. The chosen point first.
ROLLOUT_POINTS = (
    ("rule", "analogs", 16, 1, 30, 0.0),
    ("rule", "analogs", 64, 1, 30, 0.0),
    ("rule", "analogs", 16, 1, 60, 0.0),
    ("rule", "persistence", 1, 1, 30, 0.0),
    ("rule", "analogs", 64, 10, 30, 0.0),
    ("all", "analogs", 64, 10, 30, 0.0),
    ("all", "analogs", 16, 5, 30, 0.0),
    ("all", "analogs", 32, 10, 60, 0.0),
    ("all", "persistence", 1, 10, 30, 0.0),
    ("all", "analogs", 64, 10, 30, 1.0),
    ("all", "analogs", 64, 10, 30, 2.0),
    ("all", "analogs", 32, 5, 30, 2.0),
    ("rule", "analogs", 16, 1, 30, 1.0),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, default=4)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rollout", action="store_true", help="the rollout MPC's points (ROLLOUT_POINTS)")
    parser.add_argument("--rule-episodes", type=int, default=128,
                        help="with --rollout: the episodes the base rule is selected on")
    parser.add_argument("--points", type=int, default=None, help="the first N points of the sweep")
    parser.add_argument("--skip", type=int, default=0, help="leave out the sweep's first N points")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    task_id = f"InferenceGym-Task{args.task}-v{args.version}"
    env, params = ig.make(task_id)
    key = jax.random.fold_in(evaluate.training_key(args.seed), switch_rule.SELECTION_STREAM)
    static = evaluate.grade_trajectory(
        evaluate.run_episodes(env, params, baselines.best_static_policy(task_id), key, args.episodes),
        params, task_id).scores
    payload = {"task": task_id, "episodes": args.episodes, "seed": args.seed}
    if args.rollout:
        rule, _ = switch_rule.select(env, params, task_id, num_episodes=args.rule_episodes, seed=args.seed)
        by_rule = evaluate.grade_trajectory(switch_rule.run_rule_episodes(env, params, rule, key, args.episodes),
                                            params, task_id).scores
        rule_gain = by_rule - static
        payload.update(rule=rule.describe(), rule_episodes=args.rule_episodes, rule_gain=float(np.mean(rule_gain)),
                       rule_gain_ci95=evaluate.confidence_interval_95(rule_gain))
        rows = [rollout_row(env, params, task_id, key, args.episodes, static, rule, by_rule, *point)
                for point in ROLLOUT_POINTS[args.skip:args.points]]
    else:
        payload["horizon"] = mpc.HORIZON
        rows = [forecast_row(env, params, task_id, key, args.episodes, static, *point)
                for point in POINTS[args.skip:args.points]]
    print(f"\n{task_id}, {args.episodes} training episodes (switch_rule.SELECTION_STREAM, seed {args.seed}); "
          "gains paired with best_static\n")
    if args.rollout:
        print(f"base: the switching rule {payload['rule']}, selected on {args.rule_episodes} of them, gain "
              f"{payload['rule_gain']:+.3f} ± {payload['rule_gain_ci95']:.3f}\n")
        print("| candidates | forecast | futures | plan every | horizon | margin | gain (95% CI) | over the rule "
              "| stability | wall s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['candidates']} | {r['forecast']} | {r['futures']} | {r['replan_every']} | {r['horizon']} | "
                  f"{r['margin']:g} | {r['gain']:+.3f} ± {r['gain_ci95']:.3f} | "
                  f"{r['over_rule']:+.4f} ± {r['over_rule_ci95']:.4f} | "
                  f"{shown(r['stability'])} | {r['seconds']:.0f} |")
    else:
        print(f"horizon {mpc.HORIZON}\n\n| forecast | futures | window | plan every | gain (95% CI) | stability | "
              "wall s |\n|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            window = r["window"] if r["forecast"] == "analogs" else ""
            print(f"| {r['forecast']} | {r['futures']} | {window} | {r['replan_every']} | "
                  f"{r['gain']:+.3f} ± {r['gain_ci95']:.3f} | {shown(r['stability'])} | {r['seconds']:.0f} |")
    if args.json:
        atomic_write_json(args.json, {**payload, "rows": rows})


def shown(value: float | None) -> str:
    """A table cell: the value to 3 decimals, blank for None."""
    return "" if value is None else f"{value:.3f}"


def stability(graded: evaluate.EvalResult) -> float | None:
    """The grader's mean stability component, None where the task's grader has none (task 2)."""
    return float(np.mean(graded.breakdown["stability"])) if "stability" in graded.breakdown else None


def forecast_row(env, params, task_id: str, key: jax.Array, episodes: int, static: np.ndarray, forecast: str,
                 samples: int, window: int, every: int) -> dict:
    """One point of POINTS: the causal MPC's gain over `static` (per-episode scores)."""
    t0 = time.perf_counter()
    config = mpc.MPCConfig(samples=samples, replan_every=every, trace_forecast=forecast, analog_window=window)
    traj = mpc.run_mpc_episodes(mpc.controller(env, params, task_id, config), params, key, episodes)
    graded = evaluate.grade_trajectory(traj, params, task_id)
    gain = graded.scores - static
    row = {"forecast": forecast, "futures": samples, "window": window, "replan_every": every,
           "gain": float(np.mean(gain)), "gain_ci95": evaluate.confidence_interval_95(gain),
           "stability": stability(graded), "seconds": time.perf_counter() - t0}
    print(json.dumps(row), flush=True)
    return row


def rollout_row(env, params, task_id: str, key: jax.Array, episodes: int, static: np.ndarray,
                rule: switch_rule.SwitchRule, by_rule: np.ndarray, candidates: str, forecast: str, samples: int,
                every: int, horizon: int, margin: float) -> dict:
    """One point of ROLLOUT_POINTS: the rollout MPC's gain over `static` and over the rule (`by_rule`)."""
    t0 = time.perf_counter()
    actions = np.stack([rule.low, rule.high]) if candidates == "rule" else mpc.candidate_actions(env, params, task_id)
    config = mpc.MPCConfig(horizon=horizon, samples=samples, replan_every=every, trace_forecast=forecast,
                           margin=margin)
    ctrl = mpc.controller(env, params, task_id, config, candidates=actions, base=rule)
    traj = mpc.run_mpc_episodes(ctrl, params, key, episodes)
    graded = evaluate.grade_trajectory(traj, params, task_id)
    gain, over_rule = graded.scores - static, graded.scores - by_rule
    row = {"candidates": candidates, "forecast": forecast, "futures": samples, "replan_every": every,
           "horizon": horizon, "margin": margin, "gain": float(np.mean(gain)),
           "gain_ci95": evaluate.confidence_interval_95(gain),
           "over_rule": float(np.mean(over_rule)), "over_rule_ci95": evaluate.confidence_interval_95(over_rule),
           "stability": stability(graded), "seconds": time.perf_counter() - t0}
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
