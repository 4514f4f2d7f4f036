"""The `inferencegym` command line."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

TASK_IDS = {1: "InferenceGym-Task1-v0", 2: "InferenceGym-Task2-v0", 3: "InferenceGym-Task3-v0"}


def _task_id(value: str) -> str:
    from inferencegym_jax import registered_envs

    if value.isdigit() and int(value) in TASK_IDS:
        return TASK_IDS[int(value)]
    if value in registered_envs():
        return value
    raise argparse.ArgumentTypeError(f"--task {value!r}: use 1..{len(TASK_IDS)} or one of {registered_envs()}")


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive integer")
    return int(value)


def cmd_rollout(args: argparse.Namespace) -> None:
    import jax

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    tasks = args.task or list(TASK_IDS.values())
    rows = []
    for env_id in tasks:
        env, params = ig.make(env_id)
        policy = baselines.random_policy(env) if args.policy == "random" else baselines.fixed_default_policy()
        t0 = time.perf_counter()
        traj = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(args.seed), args.episodes)
        jax.block_until_ready(traj)
        seconds = time.perf_counter() - t0
        m = jax.tree_util.tree_map(np.asarray, traj.metrics)
        rows.append({
            "task": env_id,
            "reward": float(np.mean(traj.reward)),
            "tokens/s": float(np.mean(m.tokens_per_s)),
            "TTFT p50 s": float(np.mean(m.ttft_p50_s)),
            "TTFT p99 s": float(np.mean(m.ttft_p99_s)),
            "TPOT ms": 1e3 * float(np.mean(m.tpot_s)),
            "SLO viol": float(np.sum(m.slo_violations) / max(np.sum(m.admitted + m.timeouts + m.failed), 1e-9)),
            "$/1k tok": float(np.sum(m.cost_usd) / max(np.sum(m.output_tokens), 1e-9) * 1e3),
            "evict/s": float(np.mean(m.evictions)),
            "OOM": float(np.mean(m.oom)),
            "wall s": seconds,
        })
    print(f"policy={args.policy} episodes={args.episodes} seed={args.seed} (means over episodes and intervals)")
    _print_table(rows)


def _print_table(rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    widths = [max(len(c), *(len(fmt(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(fmt(r[c]).ljust(w) for c, w in zip(cols, widths)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferencegym", description="LLM inference-serving RL environment")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("rollout", help="run a fixed policy on the tasks and print serving metrics")
    p.add_argument("--task", type=_task_id, action="append", help="task number or id (repeatable; default all)")
    p.add_argument("--episodes", type=_positive_int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", choices=["default", "random"], default="default")
    p.set_defaults(func=cmd_rollout)
    _register_optional(sub)
    return parser


def _register_optional(sub: argparse._SubParsersAction) -> None:
    """Subcommands of other layers (training: train, eval, sweep; benchmarks), when installed.

    Each provides `register(subparsers)` and imports its heavy dependencies lazily.
    """
    import importlib

    for module in ("training.cli", "inferencegym_jax.bench"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name not in (module, module.rsplit(".", 1)[0]):
                raise
            continue
        mod.register(sub)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
