"""How much control pays on each task: the clairvoyant MPC (oracle bound), the causal MPC and the
causal switching rule against the exhaustive best static configuration, paired on the same
held-out episodes.

    python experiments/mpc_gap.py                        # 64 episodes of evaluation_key(0), tasks 1-4, v0
    python experiments/mpc_gap.py --episodes 256 --task 2 --horizon 20 --json experiments/results/mpc_gap.json
    python experiments/mpc_gap.py --version 1            # the v1 tasks
    python experiments/mpc_gap.py --objective reward --horizon 10   # the README's v0 table: the first controllers
    python experiments/mpc_gap.py --version 1 --true-traffic-state   # and the causal MPC told the burst phase
    python experiments/mpc_gap.py --version 1 --replan-every 10      # plans every 10th interval (move blocking)
    python experiments/mpc_gap.py --version 1 --task 4 --replan-every 10 --refine-block 10 --no-causal  # refined oracle
    python experiments/mpc_gap.py --version 1 --task 2 --horizon 10 \
        --json experiments/results/mpc_behaviour_task2_v1.json
    python experiments/mpc_gap.py --version 1 --task 4 --rule-episodes 128 --no-mpc   # the switching rule only
    python experiments/mpc_gap.py --version 1 --task 4 --replan-every 10 --samples 64 --trace-forecast analogs  # README
    python experiments/mpc_gap.py --version 1 --task 3 --task 4 --rule-episodes 128 --rollout --replan-every 1 \
        --samples 16 --trace-forecast analogs --no-mpc      # the causal MPC with the rule as its base policy
    # task 2-v1 planned on v0's reward:
    python experiments/mpc_gap.py --version 1 --task 2 --horizon 10 --objective reward \
        --task-set 'reward.kind="rates"' --task-set 'reward.weights=[0.4, 0.2, 0.3, 0.1, 0.0]'

Controllers: inferencegym_jax.control.mpc (candidates, horizon, objective in its docstring) and
inferencegym_jax.control.switch_rule (two configurations and a hysteresis threshold on the recent
prompt-token rate, selected on `--rule-episodes` training episodes; its row names the rule). A second
table says how each policy served: requests completed, SLO violations, timeouts and
out-of-memory restarts per episode, and how often each knob left the best static value. Every policy
plays episodes 0..N-1 of evaluate.evaluation_key(seed), so differences are paired; the 95 %
interval is the normal one of the per-episode differences (evaluate.confidence_interval_95).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import tomllib

import jax
import numpy as np
import refined_oracle  # beside this script (experiments/)

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.files import atomic_write_json


def task_overrides(settings: list[str]) -> dict:
    """`ig.make` overrides from KEY=VALUE strings (dotted keys into the task file's tables, TOML values)."""
    out: dict = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        *tables, name = key.strip().split(".")
        node = out
        for table in tables:
            node = node.setdefault(table, {})
        node[name] = tomllib.loads(f"v = {value}")["v"]
    return out


def behaviour(traj: evaluate.Trajectory, graded: evaluate.EvalResult, static_action: ServingAction) -> dict:
    """How a policy served, per episode (means over episodes): requests completed, SLO violations,
    queue timeouts and out-of-memory restarts [requests or events], configuration changes
    [intervals whose applied configuration differs from the previous one's], the grader's
    components (`component_<name>`, in [0, 1]), and for each knob the share of intervals whose
    applied value differs from the best static configuration's."""
    m = traj.metrics
    out = {name: float(np.mean(np.sum(np.asarray(getattr(m, field)), axis=1)))
           for name, field in (("completed", "completed"), ("violations", "slo_violations"),
                               ("timeouts", "timeouts"), ("oom_restarts", "oom"))}
    out["changes"] = float(np.mean(graded.metrics["knob_changes"]))
    out.update({f"component_{name}": float(np.mean(v)) for name, v in graded.breakdown.items()})
    for knob in KNOBS:
        applied = np.asarray(getattr(traj.action, knob))
        out[f"off_static_{knob}"] = float(np.mean(applied != float(getattr(static_action, knob))))
    return out


def task_rows(task_id: str, episodes: int, seed: int, horizon: int, samples: int, objective: str,
              overrides: dict, true_traffic_state: bool = False, replan_every: int = 1, refine_block: int = 0,
              refine_passes: int = 1, causal: bool = True, rule_episodes: int = 0, mpc_rows: bool = True,
              trace_forecast: str = "persistence", rollout: bool = False) -> list[dict]:
    env, params = ig.make(task_id, **overrides)
    key = evaluate.evaluation_key(seed)
    config = mpc.MPCConfig(horizon=horizon, samples=samples, objective=objective, replan_every=replan_every,
                           trace_forecast=trace_forecast)
    static_traj = evaluate.run_episodes(env, params, baselines.best_static_policy(task_id), key, episodes)
    static_graded = evaluate.grade_trajectory(static_traj, params, task_id)
    static = static_graded.scores
    static_action = jax.tree_util.tree_map(lambda x: x[0, 0], static_traj.action)  # the same every interval
    rows = [{"task": task_id, "policy": "best_static", "score": float(np.mean(static)),
             "ci95": evaluate.confidence_interval_95(static), "gain": 0.0, "gain_ci95": 0.0, "seconds": 0.0,
             **behaviour(static_traj, static_graded, static_action)}]
    causal = causal and mpc_rows
    is_trace = params.workload.schedule == "trace"
    causal_name = "mpc (causal, analog forecast)" if is_trace and trace_forecast == "analogs" else "mpc (causal)"
    controllers = ([("mpc_oracle (oracle bound)", True, "belief")] * mpc_rows
                   + [(causal_name, False, "belief")] * causal)
    # A replayed trace has no hidden traffic state: a causal plan replays stretches of the trace
    # either way (mpc_planning._planning_state), so the row would repeat the causal one.
    if causal and true_traffic_state and not is_trace:
        controllers.append(("mpc (causal, true traffic state)", False, "true"))

    def row(name: str, traj: evaluate.Trajectory, seconds: float,
            graded: evaluate.EvalResult | None = None) -> dict:
        graded = evaluate.grade_trajectory(traj, params, task_id) if graded is None else graded
        scores = graded.scores
        return {"task": task_id, "policy": name, "score": float(np.mean(scores)),
                "ci95": evaluate.confidence_interval_95(scores), "gain": float(np.mean(scores - static)),
                "gain_ci95": evaluate.confidence_interval_95(scores - static), "seconds": seconds,
                **behaviour(traj, graded, static_action)}

    if rule_episodes:
        t0 = time.perf_counter()
        rule, _ = switch_rule.select(env, params, task_id, num_episodes=rule_episodes)
        traj = switch_rule.run_rule_episodes(env, params, rule, key, episodes)
        seconds = time.perf_counter() - t0
        by_rule = evaluate.grade_trajectory(traj, params, task_id)
        rows.append({**row("switch_rule (causal)", traj, seconds, by_rule), "rule": rule.describe()})
        if rollout:  # the rule as the base policy of the causal MPC, choosing between its two configurations
            t0 = time.perf_counter()
            ctrl = mpc.controller(env, params, task_id, config, base=rule, candidates=np.stack([rule.low, rule.high]))
            traj = mpc.run_mpc_episodes(ctrl, params, key, episodes)
            seconds = time.perf_counter() - t0
            graded = evaluate.grade_trajectory(traj, params, task_id)
            over_rule = graded.scores - by_rule.scores
            rows.append({**row("mpc (causal, rollout on the switching rule)", traj, seconds, graded),
                         "over_rule": float(np.mean(over_rule)),
                         "over_rule_ci95": evaluate.confidence_interval_95(over_rule)})
    for name, clairvoyant, traffic_state in controllers:
        t0 = time.perf_counter()
        setting = dataclasses.replace(config, clairvoyant=clairvoyant, traffic_state=traffic_state)
        traj = mpc.run_mpc_episodes(mpc.controller(env, params, task_id, setting), params, key, episodes)
        rows.append(row(name, traj, time.perf_counter() - t0))
        if clairvoyant and refine_block:
            t0 = time.perf_counter()
            refined = refined_oracle.refined_episodes(env, params, task_id, key, traj,
                                                      mpc.candidate_actions(env, params, task_id),
                                                      block=refine_block, passes=refine_passes)
            rows.append(row("mpc_oracle, refined (oracle bound)", refined, time.perf_counter() - t0))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, action="append", help="task numbers (default 1-4)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--horizon", type=int, default=mpc.HORIZON, help="[intervals] each rollout looks ahead")
    parser.add_argument("--samples", type=int, default=mpc.SAMPLES, help="futures the causal MPC averages over")
    parser.add_argument("--version", type=int, default=0, help="task version: InferenceGym-Task<N>-v<version>")
    parser.add_argument("--objective", choices=sorted(mpc.OBJECTIVE_NAMES), default="grade",
                        help="what the controllers plan on (inferencegym_jax.control.mpc)")
    parser.add_argument("--task-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a task-file key, e.g. 'reward.kind=\"rates\"' (TOML value; repeatable)")
    parser.add_argument("--true-traffic-state", action="store_true",
                        help="also the causal MPC planning from the episode's true burst phase or state "
                             "(not on a replayed trace, which has none)")
    parser.add_argument("--replan-every", type=int, default=1,
                        help="[intervals] between the controllers' plans, the choice held in between (move blocking)")
    parser.add_argument("--refine-block", type=int, default=0,
                        help="[intervals] also the oracle's episodes refined in blocks of this many intervals "
                             "(experiments/refined_oracle.py); 0: not")
    parser.add_argument("--refine-passes", type=int, default=1, help="refinement passes over each episode")
    parser.add_argument("--trace-forecast", choices=mpc.TRACE_FORECASTS, default="persistence",
                        help="the causal MPC's futures on a replayed trace (inferencegym_jax.control.mpc): its recent "
                             "past, or --samples analogs (inferencegym_jax.control.trace_analogs)")
    parser.add_argument("--no-causal", action="store_true", help="the oracle rows only")
    parser.add_argument("--no-mpc", action="store_true", help="no MPC rows (with --rule-episodes: the rule alone)")
    parser.add_argument("--rule-episodes", type=int, default=0,
                        help="also the switching rule (inferencegym_jax.control.switch_rule), selected on this many "
                             "training episodes; 0: not")
    parser.add_argument("--rollout", action="store_true",
                        help="with --rule-episodes: also the causal MPC with the rule as its base policy, its "
                             "candidates the rule's two configurations (inferencegym_jax.control.mpc, "
                             "'Rollout with a base policy'), planning as --horizon, --samples, --replan-every, "
                             "--trace-forecast say")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.rollout and not args.rule_episodes:
        parser.error("--rollout needs --rule-episodes (the base policy is the rule selected on them)")
    overrides = task_overrides(args.task_set)
    rows = []
    for number in args.task or [1, 2, 3, 4]:
        task_id = f"InferenceGym-Task{number}-v{args.version}"
        new = task_rows(task_id, args.episodes, args.seed, args.horizon, args.samples, args.objective, overrides,
                        args.true_traffic_state, args.replan_every, args.refine_block, args.refine_passes,
                        not args.no_causal, args.rule_episodes, not args.no_mpc, args.trace_forecast, args.rollout)
        for row in new:
            print(json.dumps(row), flush=True)
        rows += new
    print(f"\n{args.episodes} episodes of evaluation_key({args.seed}); horizon {args.horizon}, "
          f"{args.samples} sampled futures for the causal MPC ("
          + ("as many analogs" if args.trace_forecast == "analogs" else "one, the recent past")
          + " on a replayed trace), "
          f"a plan every {args.replan_every} interval(s), "
          + (f"the switching rule selected on {args.rule_episodes} training episodes"
             + (" (and the base policy of the rollout MPC), " if args.rollout else ", ") if args.rule_episodes else "")
          + (f"the oracle refined in blocks of {args.refine_block} ({args.refine_passes} pass(es)), "
             if args.refine_block else "")
          + f"objective {args.objective}"
          + (f", task overrides {overrides}" if overrides else "") + "\n")
    print("| task | policy | score | gain over best_static (95% CI, paired) | wall s |\n|---|---|---:|---:|---:|")
    for r in rows:
        gain = "" if r["policy"] == "best_static" else f"{r['gain']:+.3f} ± {r['gain_ci95']:.3f}"
        print(f"| {r['task']} | {r['policy']} | {r['score']:.3f} ± {r['ci95']:.3f} | {gain} | {r['seconds']:.0f} |")
    print("\nHow each served (per episode, mean), and the share of intervals each knob was off the best static "
          "value:\n")
    print("| task | policy | completed | SLO violations | timeouts | OOM restarts | changes | "
          + " | ".join(f"{k} off" for k in KNOBS) + " |\n|---|---|" + "---:|" * (5 + len(KNOBS)))
    for r in rows:
        print(f"| {r['task']} | {r['policy']} | {r['completed']:.0f} | {r['violations']:.0f} | {r['timeouts']:.1f} | "
              f"{r['oom_restarts']:.2f} | {r['changes']:.1f} | "
              + " | ".join(f"{r[f'off_static_{k}']:.0%}" for k in KNOBS) + " |")
    if args.json:
        payload = {"episodes": args.episodes, "seed": args.seed, "horizon": args.horizon, "samples": args.samples,
                   "replan_every": args.replan_every, "refine_block": args.refine_block,
                   "refine_passes": args.refine_passes, "rule_episodes": args.rule_episodes,
                   "rollout": args.rollout,
                   "objective": args.objective, "trace_forecast": args.trace_forecast,
                   "causal_traffic_state": "belief (inferencegym_jax.control.traffic_belief)",
                   "task_overrides": overrides, "rows": rows}
        atomic_write_json(args.json, payload)


if __name__ == "__main__":
    main()
