"""`inferencegym rollout | baselines`: the environment and its non-learning baselines.

    inferencegym rollout --task 1 --policy random --episodes 64
    inferencegym baselines --episodes 256 --seed 0 --json results/baselines.json

JAX and pandas are imported inside the commands.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from inferencegym_jax.cli.common import (
    add_command,
    check_output_file,
    positive_int,
    print_frame,
    registered_tasks,
    seed_int,
    task_id,
)
from inferencegym_jax.files import atomic_write_json

# Grids up to this many static configurations also get the hindsight oracle bound (each
# configuration is one more batch of episodes; task 3's grid is larger and skips it).
HINDSIGHT_MAX_CONFIGS = 200


def rollout_row(env_id: str, policy_name: str, episodes: int, seed: int) -> dict[str, Any]:
    """Serving metrics of a fixed policy ("default" or "random") on `episodes` held-out
    episodes: TTFT percentiles over every episode's requests, TPOT per output token, the rest
    means over episodes and intervals; and the wall time (compile included)."""
    import jax
    import numpy as np

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate, graders, ttft_tally

    env, params = ig.make(env_id)
    policy = baselines.random_policy(env) if policy_name == "random" else baselines.fixed_default_policy()
    t0 = time.perf_counter()
    traj, ttft = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(seed), episodes, with_ttft=True)
    jax.block_until_ready((traj, ttft))
    seconds = time.perf_counter() - t0
    m = jax.tree_util.tree_map(np.asarray, traj.metrics)
    decided = max(np.sum(getattr(m, graders.judged_field(params)) + m.timeouts + m.failed), 1e-9)
    pooled = jax.tree_util.tree_map(lambda x: x.sum(axis=0), ttft)  # every episode's requests
    p50, p99 = np.asarray(ttft_tally.quantiles(pooled, (0.5, 0.99)))
    return {
        "task": env_id,
        "reward": float(np.mean(traj.reward)),
        "tokens/s": float(np.mean(m.tokens_per_s)),
        "TTFT p50 s": float(p50),
        "TTFT p99 s": float(p99),
        "TPOT ms": 1e3 * float(np.sum(m.tpot_s * m.output_tokens) / max(np.sum(m.output_tokens), 1e-9)),
        "SLO viol": float(np.sum(m.slo_violations) / decided),
        "$/1k tok": float(np.sum(m.cost_usd) / max(np.sum(m.output_tokens), 1e-9) * 1e3),
        "evict/s": float(np.mean(m.evictions)),
        "OOM": float(np.mean(m.oom)),
        "wall s": seconds,
    }


def cmd_rollout(args: argparse.Namespace) -> None:
    """Print one row of serving metrics per task for a fixed policy."""
    import pandas as pd

    rows = [rollout_row(env_id, args.policy, args.episodes, args.seed) for env_id in args.task or registered_tasks()]
    print(f"policy={args.policy} episodes={args.episodes} seed={args.seed} (TTFT over all requests, TPOT per "
          "output token, the rest means over episodes and intervals)")
    print_frame(pd.DataFrame(rows), index=False)


def baseline_table(env_id: str, episodes: int, seed: int, hindsight: bool = True) -> Any:
    """Graded evaluation of every baseline on held-out keys: a DataFrame, one row per policy
    (`evaluate.summarize`), plus the hindsight oracle bound when the static grid is small."""
    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    env, params = ig.make(env_id)
    key = evaluate.evaluation_key(seed)
    results = {
        name: evaluate.evaluate(env, params, policy, key, episodes, env_id)
        for name, policy in baselines.baseline_policies(env, params, env_id).items()
    }
    frame = evaluate.summarize(results)
    if hindsight and len(baselines.static_grid(env, params)) <= HINDSIGHT_MAX_CONFIGS:
        oracle = baselines.hindsight_static_scores(env, params, env_id, key, episodes)
        frame.loc["hindsight_static (oracle bound)", ["episodes", "score", "ci95"]] = [
            len(oracle), float(oracle.mean()), evaluate.confidence_interval_95(oracle)
        ]
    return frame


def cmd_baselines(args: argparse.Namespace) -> None:
    """Print each task's baseline table; with --json also write them (atomically)."""
    out = check_output_file(args.json, "--json") if args.json else None
    payload: dict[str, Any] = {"episodes": args.episodes, "seed": args.seed, "tasks": {}}
    for env_id in args.task or registered_tasks():
        t0 = time.perf_counter()
        frame = baseline_table(env_id, args.episodes, args.seed, hindsight=not args.no_hindsight)
        print(f"\n{env_id}: {args.episodes} held-out episodes, seed {args.seed} ({time.perf_counter() - t0:.0f} s)")
        print_frame(frame)
        payload["tasks"][env_id] = frame.reset_index().to_dict(orient="records")
    if out is not None:
        atomic_write_json(out, payload, default=float)
        print(f"wrote {out}")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `rollout` and `baselines` subcommands."""
    p = add_command(sub, "rollout", help="run a fixed policy on the tasks and print serving metrics")
    p.add_argument("--task", type=task_id, action="append", help="task number or id (repeatable; default all)")
    p.add_argument("--episodes", type=positive_int, default=64)
    p.add_argument("--seed", type=seed_int, default=0, help="evaluation seed, in [0, 2**32 - 1]")
    p.add_argument("--policy", choices=["default", "random"], default="default")
    p.set_defaults(func=cmd_rollout)

    p = add_command(sub, "baselines", help="grade every baseline on held-out episodes")
    p.add_argument("--task", type=task_id, action="append", help="task number or id (repeatable; default all)")
    p.add_argument("--episodes", type=positive_int, default=256)
    p.add_argument("--seed", type=seed_int, default=0, help="evaluation seed, in [0, 2**32 - 1]")
    p.add_argument("--json", default=None, help="write the table as JSON to this path")
    p.add_argument("--no-hindsight", action="store_true", help="skip the hindsight oracle bound")
    p.set_defaults(func=cmd_baselines)
