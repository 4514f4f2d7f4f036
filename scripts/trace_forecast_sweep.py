"""How the causal MPC's forecast of a replayed trace was chosen: persistence against analog
ensembles of several windows, sizes and planning intervals, on training episodes.

    python scripts/trace_forecast_sweep.py --json results/trace_forecast_sweep_v1.json   # task 4-v1, 64 episodes

Every point plays episodes 0..N-1 of fold_in(training_key(seed), switch_rule.SELECTION_STREAM)
(the switching rule's selection episodes: never an evaluation episode), 30 intervals ahead
(mpc.HORIZON), and its gain is paired with the best static configuration on the same episodes,
graded as the README's tables are. inferencegym_jax.trace_analogs gives the forecast,
inferencegym_jax.mpc the controller.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, mpc, switch_rule
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, default=4)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--points", type=int, default=len(POINTS), help="the first N points of the sweep")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    task_id = f"InferenceGym-Task{args.task}-v{args.version}"
    env, params = ig.make(task_id)
    key = jax.random.fold_in(evaluate.training_key(args.seed), switch_rule.SELECTION_STREAM)
    static = evaluate.grade_trajectory(
        evaluate.run_episodes(env, params, baselines.best_static_policy(task_id), key, args.episodes),
        params, task_id).scores
    rows = []
    for forecast, samples, window, every in POINTS[:args.points]:
        t0 = time.perf_counter()
        traj = mpc.run_mpc_episodes(env, params, task_id, key, args.episodes, clairvoyant=False, samples=samples,
                                    replan_every=every, trace_forecast=forecast, analog_window=window)
        graded = evaluate.grade_trajectory(traj, params, task_id)
        gain = graded.scores - static
        row = {"forecast": forecast, "futures": samples, "window": window, "replan_every": every,
               "gain": float(np.mean(gain)), "gain_ci95": evaluate.confidence_interval_95(gain),
               "stability": float(np.mean(graded.breakdown["stability"])), "seconds": time.perf_counter() - t0}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{task_id}, {args.episodes} training episodes (switch_rule.SELECTION_STREAM, seed {args.seed}), "
          f"horizon {mpc.HORIZON}; gains paired with best_static\n")
    print("| forecast | futures | window | plan every | gain (95% CI) | stability | wall s |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        window = r["window"] if r["forecast"] == "analogs" else ""
        print(f"| {r['forecast']} | {r['futures']} | {window} | {r['replan_every']} | "
              f"{r['gain']:+.3f} ± {r['gain_ci95']:.3f} | {r['stability']:.3f} | {r['seconds']:.0f} |")
    if args.json:
        atomic_write_json(args.json, {"task": task_id, "episodes": args.episodes, "seed": args.seed,
                                      "horizon": mpc.HORIZON, "rows": rows})


if __name__ == "__main__":
    main()
