"""The `inferencegym` command line."""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# XLA:CPU (jaxlib 0.10) hands reductions to YNNPACK, which is slower than XLA's own fused loops on
# the env's small (envs, 3, 16) reductions: with this flag the env steps 1.13x faster at 8,192
# envs (scripts/xla_cpu_options.py, BENCHMARKS.md). Only for the jaxlib minor version where it
# was measured: XLA aborts on an unknown flag.
XLA_CPU_FLAGS = "--xla_cpu_experimental_ynn_fusion_type="
_XLA_CPU_FLAGS_FOR = "0.10."


def use_xla_cpu_flags() -> bool:
    """Add XLA_CPU_FLAGS to XLA_FLAGS, unless the user set that flag or another jaxlib is
    installed; returns whether it did. Must run before JAX's first computation."""
    import jaxlib

    flags = os.environ.get("XLA_FLAGS", "")
    if not jaxlib.__version__.startswith(_XLA_CPU_FLAGS_FOR) or "ynn_fusion_type" in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAGS}".strip()
    return True


def _all_tasks() -> list[str]:
    from inferencegym_jax import registered_envs

    return registered_envs()


def _task_id(value: str) -> str:
    """A task number (N -> InferenceGym-TaskN-v0) or a registered id."""
    ids = _all_tasks()
    if value.isdigit() and f"InferenceGym-Task{value}-v0" in ids:
        return f"InferenceGym-Task{value}-v0"
    if value in ids:
        return value
    raise argparse.ArgumentTypeError(f"--task {value!r}: use a task number or one of {ids}")


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive integer")
    return int(value)


def cmd_rollout(args: argparse.Namespace) -> None:
    import jax

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    tasks = args.task or _all_tasks()
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


# Grids up to this many static configurations also get the hindsight oracle bound.
HINDSIGHT_MAX_CONFIGS = 200


def baseline_table(env_id: str, episodes: int, seed: int, hindsight: bool = True):
    """Graded evaluation of every baseline on held-out keys: a DataFrame, one row per policy."""
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


def write_json_atomic(path: str, payload: object) -> None:
    """Write JSON to `path` via a temporary file and a rename: never a half-written file."""
    import json
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, default=float)
    os.replace(tmp, path)


def cmd_baselines(args: argparse.Namespace) -> None:
    import pandas as pd

    tasks = args.task or _all_tasks()
    payload = {"episodes": args.episodes, "seed": args.seed, "tasks": {}}
    for env_id in tasks:
        t0 = time.perf_counter()
        frame = baseline_table(env_id, args.episodes, args.seed, hindsight=not args.no_hindsight)
        print(f"\n{env_id}: {args.episodes} held-out episodes, seed {args.seed} ({time.perf_counter() - t0:.0f} s)")
        with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
            print(frame)
        payload["tasks"][env_id] = frame.reset_index().to_dict(orient="records")
    if args.json:
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}")


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

    p = sub.add_parser("baselines", help="grade every baseline on held-out episodes")
    p.add_argument("--task", type=_task_id, action="append", help="task number or id (repeatable; default all)")
    p.add_argument("--episodes", type=_positive_int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the table as JSON to this path")
    p.add_argument("--no-hindsight", action="store_true", help="skip the hindsight oracle bound")
    p.set_defaults(func=cmd_baselines)
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
    use_xla_cpu_flags()
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
