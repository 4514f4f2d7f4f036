"""`inferencegym train | eval | sweep`: registered into the `inferencegym` CLI by `register`.

    inferencegym train --task 1 --out runs/task1              # configs/train/ppo_task1.toml
    inferencegym train --task 1 --config my.toml --out DIR --set lr=1e-3 --set num_updates=50
    inferencegym train --out DIR --resume                     # continue from DIR/checkpoint.msgpack
    inferencegym eval --checkpoint DIR --episodes 256 --json DIR/eval.json
    inferencegym sweep --task 1 --grid lr=1e-4,3e-4,1e-3,3e-3 --seeds 4 --out DIR

`train` writes DIR/config.toml (the resolved config), DIR/metrics.csv (one row per update),
DIR/checkpoint.msgpack (every `checkpoint_every` updates), DIR/reward_curve.png and, after a
graded held-out evaluation against every baseline, DIR/eval.json. Heavy modules are imported
inside the commands, so `inferencegym --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path
from typing import Any


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive integer")
    return int(value)


def _task(value: str) -> Any:
    return int(value) if value.isdigit() else value


def _overrides(items: list[str]) -> dict[str, Any]:
    """`--set key=value` pairs, values parsed as TOML (so 1e-3, true, [64, 64] work)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: use KEY=VALUE")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value
    return out


def _default_config(task: Any) -> str:
    from training.config import shipped_configs

    number = task if isinstance(task, int) else "".join(c for c in str(task).split("-")[1] if c.isdigit())
    name = f"ppo_task{number}"
    return name if name in shipped_configs() else "ppo_task1"


def _resolve_config(args: argparse.Namespace):
    from training.checkpoint import checkpoint_path, read_config
    from training.config import load_config

    overrides = _overrides(args.set)
    if args.task is not None:
        overrides["task"] = args.task
    if args.updates is not None:
        overrides["num_updates"] = args.updates
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.config is None and getattr(args, "resume", False) and checkpoint_path(args.out).exists():
        return read_config(args.out).replace(**overrides)
    source = args.config or _default_config(args.task if args.task is not None else 1)
    return load_config(source, **overrides)


def _print_table(table: Any) -> None:
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200, "display.float_format", "{:.4g}".format):
        print(table.to_string())


def _graded_evaluation(trainer, runner, args: argparse.Namespace, episodes: int, out_json: Path | None, extra: dict):
    from training.evaluation import eval_record, evaluate_against_baselines, write_json

    eval_seed = args.eval_seed
    names = args.baselines.split(",") if args.baselines else None
    t0 = time.perf_counter()
    table, results, rewards = evaluate_against_baselines(trainer, runner, episodes, eval_seed, names)
    seconds = time.perf_counter() - t0
    print(f"\ngraded evaluation: {episodes} held-out episodes (evaluation_key({eval_seed})), "
          f"{trainer.config.task}, {int(runner.update)} updates, {seconds:.1f} s")
    _print_table(table)
    record = eval_record(trainer, runner, table, results, episodes, eval_seed)
    record.update(extra, eval_seconds=seconds)
    if out_json is not None:
        write_json(out_json, record)
        print(f"wrote {out_json}")
    return table, {name: float(r.mean()) for name, r in rewards.items()}, record


def cmd_train(args: argparse.Namespace) -> None:
    import jax

    from training.loop import read_metrics, run_training
    from training.plots import plot_reward_curve
    from training.ppo import make_train

    config = _resolve_config(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"resolved config ({config.total_env_steps:,} env steps, jax {jax.__version__}, "
          f"{jax.device_count()} {jax.default_backend()} device(s)):\n{config.describe()}", flush=True)
    (out / "config.toml").write_text(config.to_toml())
    trainer = make_train(config)
    t0 = time.perf_counter()
    runner, rows = run_training(trainer, out, resume=args.resume, progress=not args.no_progress)
    train_seconds = time.perf_counter() - t0
    steps = sum(1 for _ in rows) * config.batch_size
    print(f"trained {len(rows)} updates ({steps:,} env steps) in {train_seconds:.1f} s "
          f"(compile included): {steps / max(train_seconds, 1e-9):,.0f} env steps/s", flush=True)
    episodes = args.eval_episodes or config.eval_episodes
    table, levels, _ = _graded_evaluation(
        trainer, runner, args, episodes, out / "eval.json",
        {"train_seconds": train_seconds, "config": config.to_toml()})
    plot_reward_curve(read_metrics(out), levels, out / "reward_curve.png", title=config.task)
    print(f"wrote {out / 'metrics.csv'}, {out / 'reward_curve.png'}, {out / 'checkpoint.msgpack'}")


def cmd_eval(args: argparse.Namespace) -> None:
    from training.checkpoint import load_checkpoint, read_config
    from training.ppo import make_train

    config = read_config(args.checkpoint)
    trainer = make_train(config)
    runner = load_checkpoint(args.checkpoint, trainer)
    _graded_evaluation(trainer, runner, args, args.episodes, Path(args.json) if args.json else None,
                       {"checkpoint": str(args.checkpoint)})


def cmd_sweep(args: argparse.Namespace) -> None:
    from training.sweep import parse_grid, run_sweep

    config = _resolve_config(args)
    grid = parse_grid(args.grid)
    print(f"sweep over {grid} x {args.seeds} seeds, one program; base config:\n{config.describe()}", flush=True)
    result = run_sweep(config, grid, num_seeds=args.seeds, eval_episodes=args.episodes, eval_seed=args.eval_seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.runs.to_csv(out / "sweep.csv", index=False)
    result.summary.to_csv(out / "sweep_summary.csv", index=False)
    (out / "best.toml").write_text(config.replace(**result.best).to_toml())
    runs = len(result.runs)
    print(f"\n{runs} runs x {config.total_env_steps:,} env steps in {result.seconds:.1f} s "
          f"(compile included): {runs * config.total_env_steps / result.seconds:,.0f} env steps/s")
    _print_table(result.summary)
    print(f"best: {result.best}; wrote {out / 'sweep.csv'}, {out / 'sweep_summary.csv'}, {out / 'best.toml'}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", type=_task, default=None, help="task number or env id (default: the config's)")
    p.add_argument("--config", default=None, help="TOML file or shipped name (default: ppo_task<N>)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (repeatable)")
    p.add_argument("--updates", type=_positive_int, default=None, help="override num_updates")
    p.add_argument("--seed", type=int, default=None, help="override the training seed")
    p.add_argument("--eval-seed", type=int, default=0, help="seed of the held-out evaluation episodes")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train`, `eval` and `sweep` to the `inferencegym` subcommands."""
    p = sub.add_parser("train", help="train PPO on a task, then grade it against every baseline")
    _common(p)
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.msgpack")
    p.add_argument("--eval-episodes", type=_positive_int, default=None, help="held-out episodes (default: config)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--baselines", default=None, help="comma-separated baselines to compare (default: all)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="grade a saved policy against every baseline")
    p.add_argument("--checkpoint", required=True, help="run directory with checkpoint.msgpack")
    p.add_argument("--episodes", type=_positive_int, default=256)
    p.add_argument("--eval-seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--baselines", default=None, help="comma-separated baselines to compare (default: all)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("sweep", help="vmapped sweep over traced hyperparameters and seeds")
    _common(p)
    p.add_argument("--grid", action="append", required=True, metavar="NAME=V1,V2,...", help="repeatable")
    p.add_argument("--seeds", type=_positive_int, default=4)
    p.add_argument("--episodes", type=_positive_int, default=64, help="held-out episodes per run")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_sweep)


if __name__ == "__main__":  # pragma: no cover
    from inferencegym_jax.cli import main

    main(sys.argv[1:])
