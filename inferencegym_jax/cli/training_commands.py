"""`inferencegym train | eval | sweep`: PPO on a task, graded against every baseline.

    inferencegym train --out runs/main                        # the main job: configs/train/ppo_task3_v2_main.toml
    inferencegym train --task 3 --out runs/task3              # task 3's newest version: ppo_task3_v2.toml
    inferencegym train --task InferenceGym-Task3-v0 --out DIR # a frozen older version: ppo_task3.toml
    inferencegym train --task 1 --config my.toml --out DIR --set lr=1e-3 --set num_updates=50
    inferencegym train --out DIR --resume                     # continue from DIR/checkpoint.msgpack
    inferencegym train --task 1 --out DIR --no-eval           # train only: no graded evaluation
    inferencegym eval --checkpoint DIR --episodes 256 --json DIR/eval.json
    inferencegym sweep --task 1 --grid lr=1e-4,3e-4,1e-3,3e-3 --seeds 4 --out DIR
    inferencegym train --task InferenceGym-Fleet1-v1 --out DIR   # a fleet: configs/train/ppo_fleet1_v1.toml
    inferencegym train --task InferenceGym-Reserve1-v1 --out DIR # day-ahead reservation: ppo_reserve1_v1.toml

`train` writes DIR/config.toml (the resolved config), DIR/metrics.csv (one row per update),
DIR/checkpoint.msgpack (every `checkpoint_every` updates), DIR/reward_curve.png and, after a
graded held-out evaluation against every baseline, DIR/eval.json and DIR/episode.png (the
trained policy's first held-out episode over time, as `inferencegym plot` draws it; `--no-eval`
skips both: train only). The table gives each policy's score and, paired on the same episodes,
its difference to `best_static` with a 95% CI (`training.evaluation.paired_difference`).
Without `--config`, a task trains with its shipped config (`ppo_task<N>` for v0,
`ppo_task<N>_v<k>` for a later version); a task without one is an error (pass `--config`). A bare
task number is the task's newest version (`tasks.resolve_id`). With neither `--task` nor
`--config`, `train` runs the main job, DEFAULT_CONFIG.
A fleet (`InferenceGym-Fleet<N>-v<k>`, by its full id; shipped config `ppo_fleet<N>_v<k>`) trains
the same way and is graded on its held-out days against the fleet baselines
(`training.evaluation.evaluate_fleet`: a score between static-for-peak, 0, and the oracle, 1,
with GPU-hours and SLO attainment); DIR/episode.png is its first held-out window (`fleet.plot`).
A reservation task (`InferenceGym-Reserve<N>-v<k>`, shipped config `ppo_reserve<N>_v<k>`) trains the
same way and is graded on its held-out services against the reservation baselines
(`training.reservation_evaluation`: a score between week_peak, 0, and the clairvoyant oracle, 1,
with cost and SLO attainment); DIR/episode.png is its first held-out service (`fleet.reservation_plot`).
The trainer, JAX and pandas are imported inside the commands.

Every check comes before the first file is written: output paths (a folder where a file goes,
a file where a folder goes, a folder that cannot be written), the config, the baselines and,
with `--resume`, the checkpoint (present, intact, written for the task and config asked for and
for the folder's config.toml). A failed command leaves the run folder as it was.
"""

from __future__ import annotations

import argparse
import re
import time
import tomllib
from pathlib import Path
from typing import Any

from inferencegym_jax.cli.common import (
    MAX_SEED,
    add_command,
    check_output_file,
    check_output_files,
    check_output_folder,
    positive_int,
    ppo_config_name,
    print_frame,
    seed_int,
    task_id,
)
from inferencegym_jax.files import atomic_write_text, remove_stale_temp_files

# The main job (scripts/run_main.sh): what `train` and `sweep` run when neither --task nor --config
# names a task. PPO from a uniform start on the newest task 3, where switching configurations pays
# (configs/train/ppo_task3_v2_main.toml documents the budget and what it scores).
DEFAULT_TASK = "InferenceGym-Task3-v2"
DEFAULT_CONFIG = "ppo_task3_v2_main"

# What `train` and `sweep` write in their --out folder.
RUN_FILES = ("config.toml", "metrics.csv", "checkpoint.msgpack", "reward_curve.png", "episode.png", "eval.json")
SWEEP_FILES = ("sweep.csv", "sweep_summary.csv", "best.toml")
# `eval`'s held-out episodes of a serving task without --episodes.
EVAL_EPISODES = 256
# A fleet id; its shipped config is ppo_fleet<N>_v<k>.
_FLEET_ID = re.compile(r"InferenceGym-Fleet(\d+)-v(\d+)")
# A reservation id; its shipped config is ppo_reserve<N>_v<k>.
_RESERVE_ID = re.compile(r"InferenceGym-Reserve(\d+)-v(\d+)")


def train_task_id(value: str) -> str:
    """argparse type of `--task`: a registered fleet or reservation id as it is, else
    `common.task_id` (a task number or a registered single-server id)."""
    from inferencegym_jax.fleet.reservation_tasks import is_reservation_id
    from inferencegym_jax.fleet.tasks import is_fleet_id

    return value if is_fleet_id(value) or is_reservation_id(value) else task_id(value)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` pairs, values parsed as TOML (so 1e-3, true, [64, 64] work; anything
    else stays a string, for the config to accept or reject). ValueError without a "="."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: use KEY=VALUE")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value
    return out


def shipped_config_for(env_id: str) -> str:
    """The shipped PPO config of a task (`ppo_task<N>`); ValueError when it has none."""
    from training.config import shipped_configs

    fleet, reserve = _FLEET_ID.fullmatch(env_id), _RESERVE_ID.fullmatch(env_id)
    name = (f"ppo_fleet{fleet.group(1)}_v{fleet.group(2)}" if fleet else
            f"ppo_reserve{reserve.group(1)}_v{reserve.group(2)}" if reserve else ppo_config_name(env_id))
    shipped = shipped_configs()
    if name not in shipped:
        raise ValueError(f"--task {env_id}: no shipped training config for this task (shipped: {shipped}); "
                         "pass --config FILE")
    return name


def resolve_config(args: argparse.Namespace) -> Any:
    """The PPOConfig of `train` or `sweep`: --config (default: the --task's shipped config, the
    checkpoint's config when resuming, else DEFAULT_CONFIG), then --set, --task, --updates and
    --seed over it."""
    from inferencegym_jax.training_setup import load_config, read_config
    from training.checkpoint import checkpoint_path

    overrides = parse_overrides(args.set)
    if args.task is not None:
        overrides["task"] = args.task
    if args.updates is not None:
        overrides["num_updates"] = args.updates
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.config is None and getattr(args, "resume", False) and checkpoint_path(args.out).exists():
        return read_config(args.out).replace(**overrides)
    source = args.config or (DEFAULT_CONFIG if args.task is None else shipped_config_for(args.task))
    return load_config(source, **overrides)


def _baseline_names(value: str | None) -> list[str] | None:
    """--baselines "a,b" -> ["a", "b"]; None (every baseline) when not given."""
    return [name.strip() for name in value.split(",")] if value else None


def check_baselines(trainer: Any, names: list[str] | None) -> None:
    """ValueError for --baselines names the task does not have, before any training."""
    from inferencegym_jax import baselines
    from training.evaluation import fleet_baseline_controllers, fleet_heldout_params, is_fleet
    from training.reservation_evaluation import (
        is_reservation,
        reservation_baseline_policies,
        reservation_heldout_params,
    )

    if is_reservation(trainer):
        reservation_baseline_policies(trainer, reservation_heldout_params(trainer.env_id, trainer.env_params), names)
        return
    if is_fleet(trainer):
        fleet_baseline_controllers(trainer, fleet_heldout_params(trainer.env_id, trainer.env_params), names)
        return
    serving_env = getattr(trainer.env, "unwrapped", trainer.env)  # baselines act on the env, not PPO's wrapper
    available = baselines.baseline_policies(serving_env, trainer.env_params, trainer.env_id)
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise ValueError(f"--baselines: unknown baselines {unknown}; available: {list(available)}")


def graded_evaluation(trainer: Any, runner: Any, args: argparse.Namespace, episodes: int,
                      out_json: Path | None, extra: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """Grade the policy and the baselines on held-out episodes, print the table, write the
    record (`training.evaluation.eval_record` plus `extra`) to `out_json` when given.

    Returns (the table, each policy's mean held-out reward per interval by name)."""
    from training.evaluation import PPO_NAME, eval_record, evaluate_against_baselines, is_fleet, write_json
    from training.reservation_evaluation import is_reservation

    if is_reservation(trainer):
        return reservation_graded_evaluation(trainer, runner, args, episodes, out_json, extra)
    if is_fleet(trainer):
        return fleet_graded_evaluation(trainer, runner, args, episodes, out_json, extra)
    t0 = time.perf_counter()
    table, results, rewards = evaluate_against_baselines(trainer, runner, episodes, args.eval_seed,
                                                         _baseline_names(args.baselines))
    seconds = time.perf_counter() - t0
    print(f"\ngraded evaluation: {episodes} held-out episodes (evaluation_key({args.eval_seed})), "
          f"{trainer.env_id}, {int(runner.update)} updates, {seconds:.1f} s")
    print_frame(table)
    if "minus_best_static" in table.columns:
        diff, ci = table.loc[PPO_NAME, "minus_best_static"], table.loc[PPO_NAME, "paired_ci95"]
        print(f"PPO - best_static, paired on the same {episodes} episodes: {diff:+.4f} ± {ci:.4f} (95% CI)")
    record = eval_record(trainer, runner, table, results, episodes, args.eval_seed)
    record.update(extra, eval_seconds=seconds)
    if out_json is not None:
        write_json(out_json, record)
        print(f"wrote {out_json}")
    return table, {name: float(r.mean()) for name, r in rewards.items()}


def fleet_graded_evaluation(trainer: Any, runner: Any, args: argparse.Namespace, episodes: int,
                            out_json: Path | None, extra: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """`graded_evaluation` of a fleet: the policy and the fleet baselines on its held-out days
    (`training.evaluation.evaluate_fleet`), the table printed, the record written to `out_json`.

    Returns (the table, each policy's mean held-out reward per interval by name)."""
    from training.evaluation import evaluate_fleet, fleet_eval_record, fleet_levels, write_json

    t0 = time.perf_counter()
    table, per_policy = evaluate_fleet(trainer, runner, episodes, args.eval_seed, _baseline_names(args.baselines))
    seconds = time.perf_counter() - t0
    print(f"\ngraded evaluation: {episodes} held-out episodes (evaluation_key({args.eval_seed}), the held-out "
          f"days), {trainer.env_id}, {int(runner.update)} updates, {seconds:.1f} s")
    print_frame(table)
    record = fleet_eval_record(trainer, runner, table, per_policy, episodes, args.eval_seed)
    record.update(extra, eval_seconds=seconds)
    if out_json is not None:
        write_json(out_json, record)
        print(f"wrote {out_json}")
    return table, fleet_levels(per_policy, int(trainer.env_params.max_steps_in_episode))


def reservation_graded_evaluation(trainer: Any, runner: Any, args: argparse.Namespace, episodes: int,
                                  out_json: Path | None, extra: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """`graded_evaluation` of a reservation task: the policy and the reservation baselines on its
    held-out services (`training.reservation_evaluation.evaluate_reservation`), the table printed,
    the record written to `out_json`.

    Returns (the table, each policy's mean held-out reward per commitment by name)."""
    from training.evaluation import PPO_NAME, write_json
    from training.reservation_evaluation import evaluate_reservation, reservation_eval_record, reservation_levels

    t0 = time.perf_counter()
    table, per_policy = evaluate_reservation(trainer, runner, episodes, args.eval_seed, _baseline_names(args.baselines))
    seconds = time.perf_counter() - t0
    print(f"\ngraded evaluation: {episodes} held-out services (evaluation_key({args.eval_seed}), the held-out "
          f"clients on the held-out days), {trainer.env_id}, {int(runner.update)} updates, {seconds:.1f} s")
    print_frame(table)
    for ref in ("week_peak", "rolling_quantile"):
        if f"d_J_vs_{ref}" in table.columns:
            diff, ci = table.loc[PPO_NAME, f"d_J_vs_{ref}"], table.loc[PPO_NAME, f"d_J_vs_{ref}_ci95"]
            print(f"PPO - {ref} in J (lower is better), paired on the same {episodes} services: "
                  f"{diff:+.4f} ± {ci:.4f} (95% CI)")
    record = reservation_eval_record(trainer, runner, table, per_policy, episodes, args.eval_seed)
    record.update(extra, eval_seconds=seconds)
    if out_json is not None:
        write_json(out_json, record)
        print(f"wrote {out_json}")
    return table, reservation_levels(per_policy, int(trainer.env_params.max_steps_in_episode))


def _requested_by(args: argparse.Namespace) -> str:
    """How the task of a resumed run was asked for, for messages."""
    if args.task is not None:
        return f"--task {args.task}"
    return f"--config {args.config}" if args.config is not None else "the checkpoint's config"


def check_resume(out: Path, config: Any, args: argparse.Namespace) -> None:
    """ValueError unless OUT's checkpoint is intact and written for the task and config asked
    for and for those of OUT/config.toml (when there is one): a folder holds one run. Cheap (no
    env is built); `load_checkpoint` then checks the env params and the state's shapes."""
    from inferencegym_jax.training_setup import load_config, read_config
    from training.checkpoint import config_differences

    saved = read_config(out)  # verifies the checksum: a corrupt checkpoint fails here
    if saved.task != config.task:
        raise ValueError(f"--resume: the checkpoint in {out} was written for {saved.task}, not for "
                         f"{config.task} ({_requested_by(args)})")
    if saved != config:
        raise ValueError(f"--resume: the checkpoint in {out} was written by a different config: "
                         f"{config_differences(saved, config, 'checkpoint', 'requested')}")
    recorded_path = out / "config.toml"
    if not recorded_path.exists():
        return
    try:
        recorded = load_config(recorded_path)
    except ValueError as err:
        raise ValueError(f"--resume: {err}; the folder's config.toml records the run's config: fix it, or remove "
                         "it to resume from the checkpoint's") from None
    if recorded.task != saved.task:
        raise ValueError(f"--resume: the checkpoint in {out} was written for {saved.task}, but the folder's "
                         f"config.toml is for {recorded.task}: the folder mixes two runs")
    if recorded != saved:
        raise ValueError(f"--resume: {recorded_path} and the checkpoint in {out} disagree: "
                         f"{config_differences(recorded, saved, 'config.toml', 'checkpoint')}")


def prepare_run(args: argparse.Namespace) -> tuple[Path, Any, Any, Any]:
    """Every check of `train`, before anything is written: (out folder, config, trainer, the
    state to start from: the verified checkpoint with --resume, else None)."""
    from inferencegym_jax.training_setup import make_train
    from training.checkpoint import checkpoint_path, load_checkpoint

    out = check_output_folder(args.out, "--out")
    check_output_files(out, RUN_FILES, "--out")
    if args.resume and not checkpoint_path(out).is_file():
        raise ValueError(f"--resume: no checkpoint in {out} (train without --resume first)")
    config = resolve_config(args)
    if args.resume:
        check_resume(out, config, args)
    trainer = make_train(config)
    check_baselines(trainer, _baseline_names(args.baselines))
    start = load_checkpoint(out, trainer) if args.resume else None
    return out, config, trainer, start


def write_episode(trainer: Any, runner: Any, seed: int, path: Path) -> None:
    """Draw the trained policy's first held-out episode to `path` (PNG): a serving task's as
    `plot_command.write_trained_episode` draws it; a fleet's (`fleet.plot`) on the first held-out
    window, from fold_in(evaluation_key(seed), 0); a reservation task's (`fleet.reservation_plot`)
    on its first held-out service, as its graded evaluation plays it."""
    from training.evaluation import fleet_heldout_params, is_fleet
    from training.reservation_evaluation import is_reservation, reservation_heldout_params

    if is_reservation(trainer):
        _write_reservation_episode(trainer, runner, reservation_heldout_params(trainer.env_id, trainer.env_params),
                                   seed, path)
        return
    if not is_fleet(trainer):
        from inferencegym_jax.cli.plot_command import write_trained_episode

        write_trained_episode(trainer, runner, seed, path)
        return
    import jax

    from inferencegym_jax.evaluate import evaluation_key
    from inferencegym_jax.fleet.evaluate import window_params
    from inferencegym_jax.fleet.plot import fleet_episode_series, plot_fleet_episode

    ppo = trainer.policy(runner.params, runner.obs_stats, trainer.config.deterministic_eval)
    params = window_params(fleet_heldout_params(trainer.env_id, trainer.env_params), jax.numpy.int32(0))
    series = fleet_episode_series(trainer.env, params, lambda key, obs, p: ppo(key, obs, p),  # hashable: jit-static
                                  jax.random.fold_in(evaluation_key(seed), 0))
    plot_fleet_episode(series, path, title=f"ppo ({int(runner.update)} updates), {trainer.env_id}, held-out window 0")


def _write_reservation_episode(trainer: Any, runner: Any, params: Any, seed: int, path: Path) -> None:
    """`write_episode` of a reservation task: its first held-out service (`fleet.reservation_plot`)."""
    from inferencegym_jax.evaluate import evaluation_key
    from inferencegym_jax.fleet.reservation_plot import plot_reservation_episode, reservation_episode_series

    ppo = trainer.policy(runner.params, runner.obs_stats, trainer.config.deterministic_eval)
    series = reservation_episode_series(trainer.env, params, ppo, evaluation_key(seed))
    plot_reservation_episode(series, path, title=f"ppo ({int(runner.update)} updates), {trainer.env_id}, "
                                                 "held-out service 0")


def cmd_train(args: argparse.Namespace) -> None:
    """Train (or resume), checkpointing; then grade against the baselines and plot."""
    import jax

    from training.loop import read_metrics, run_training
    from training.plots import plot_reward_curve

    out, config, trainer, start = prepare_run(args)
    print(f"resolved config ({config.total_env_steps:,} env steps, jax {jax.__version__}, "
          f"{jax.device_count()} {jax.default_backend()} device(s)):\n{config.describe()}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:  # what a killed earlier run left half-written
        remove_stale_temp_files(out / name)
    if not args.resume:  # a fresh run replaces the folder's run: its evaluation was of another policy
        (out / "eval.json").unlink(missing_ok=True)
    atomic_write_text(out / "config.toml", config.to_toml())
    t0 = time.perf_counter()
    if config.imitation_episodes and not args.resume and start is None:
        teacher = {"mpc": "the causal mpc", "switch_rule": "the switching rule",
                   "forecast": "the seasonal forecast baseline", "hpa": "the HPA baseline",
                   "hpa_pooled": "the pooled HPA baseline", "week_peak": "the week-peak reservation",
                   "flat_fraction": "the flat-fraction reservation",
                   "rolling_quantile": "the rolling-quantile reservation"}[config.imitation_teacher]
        print(f"imitating {teacher} first: {config.imitation_episodes} of its episodes and "
              f"{config.imitation_rounds} DAgger round(s) of as many (training/imitation.py; minutes on a CPU)",
              flush=True)
    runner, rows = run_training(trainer, out, resume=args.resume, progress=not args.no_progress, initial=start)
    train_seconds = time.perf_counter() - t0
    steps = len(rows) * config.batch_size
    print(f"trained {len(rows)} updates ({steps:,} env steps) in {train_seconds:.1f} s "
          f"(compile included): {steps / max(train_seconds, 1e-9):,.0f} env steps/s", flush=True)
    levels: dict[str, float] = {}
    written = [out / "metrics.csv", out / "reward_curve.png", out / "checkpoint.msgpack"]
    if not args.no_eval:
        episodes = args.eval_episodes or config.eval_episodes
        _, levels = graded_evaluation(trainer, runner, args, episodes, out / "eval.json",
                                      {"train_seconds": train_seconds, "config": config.to_toml()})
        write_episode(trainer, runner, args.eval_seed, out / "episode.png")
        written.append(out / "episode.png")
    plot_reward_curve(read_metrics(out), levels, out / "reward_curve.png", title=config.task)
    print(f"wrote {', '.join(map(str, written))}")


def cmd_eval(args: argparse.Namespace) -> None:
    """Grade a saved policy against the baselines on held-out episodes."""
    from inferencegym_jax.training_setup import make_train, read_config
    from training.checkpoint import load_checkpoint
    from training.evaluation import is_fleet
    from training.reservation_evaluation import is_reservation

    out_json = check_output_file(args.json, "--json") if args.json else None
    config = read_config(args.checkpoint)
    trainer = make_train(config)
    runner = load_checkpoint(args.checkpoint, trainer)
    as_config = is_fleet(trainer) or is_reservation(trainer)
    episodes = args.episodes or (config.eval_episodes if as_config else EVAL_EPISODES)
    graded_evaluation(trainer, runner, args, episodes, out_json, {"checkpoint": str(args.checkpoint)})


def cmd_sweep(args: argparse.Namespace) -> None:
    """Train a grid of traced hyperparameters x seeds as one program; write the runs, the
    summary and the best setting's config (all atomically)."""
    from inferencegym_jax.training_setup import make_train
    from training.sweep import parse_grid, run_sweep

    out = check_output_folder(args.out, "--out")
    check_output_files(out, SWEEP_FILES, "--out")
    config = resolve_config(args)
    if config.seed + args.seeds - 1 > MAX_SEED:
        raise ValueError(f"--seeds {args.seeds}: the seeds {config.seed} .. {config.seed + args.seeds - 1} go past "
                         f"the largest seed, 2**32 - 1 = {MAX_SEED}")
    grid = parse_grid(args.grid)
    print(f"sweep over {grid} x {args.seeds} seeds, one program; base config:\n{config.describe()}", flush=True)
    result = run_sweep(make_train(config), grid, num_seeds=args.seeds, eval_episodes=args.episodes,
                       eval_seed=args.eval_seed)
    atomic_write_text(out / "sweep.csv", result.runs.to_csv(index=False))
    atomic_write_text(out / "sweep_summary.csv", result.summary.to_csv(index=False))
    atomic_write_text(out / "best.toml", config.replace(**result.best).to_toml())
    runs = len(result.runs)
    print(f"\n{runs} runs x {config.total_env_steps:,} env steps in {result.seconds:.1f} s "
          f"(compile included): {runs * config.total_env_steps / result.seconds:,.0f} env steps/s")
    print_frame(result.summary)
    print(f"best: {result.best}; wrote {out / 'sweep.csv'}, {out / 'sweep_summary.csv'}, {out / 'best.toml'}")


def _config_options(p: argparse.ArgumentParser) -> None:
    """Options that pick and override a training config (train, sweep)."""
    p.add_argument("--task", type=train_task_id, default=None,
                   help="task number (its newest version), env id, fleet id or reservation id (default: the "
                        f"config's; without --config, the main job's {DEFAULT_TASK})")
    p.add_argument("--config", default=None, help="TOML file or shipped name (default: the task's ppo_task<N>[_v<k>]; "
                                                  f"without --task, the main job's {DEFAULT_CONFIG})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (repeatable)")
    p.add_argument("--updates", type=positive_int, default=None, help="override num_updates")
    p.add_argument("--seed", type=seed_int, default=None, help="override the training seed (in [0, 2**32 - 1])")
    p.add_argument("--eval-seed", type=seed_int, default=0, help="seed of the held-out evaluation episodes")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `train`, `eval` and `sweep` subcommands."""
    p = add_command(sub, "train", help="train PPO on a task, then grade it against every baseline")
    _config_options(p)
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.msgpack")
    p.add_argument("--eval-episodes", type=positive_int, default=None, help="held-out episodes (default: config)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-eval", action="store_true",
                   help="skip the graded evaluation at the end (no eval.json; the curve has no baseline levels)")
    p.add_argument("--baselines", default=None, help="comma-separated baselines to compare (default: all)")
    p.set_defaults(func=cmd_train)

    p = add_command(sub, "eval", help="grade a saved policy against every baseline")
    p.add_argument("--checkpoint", required=True, help="run directory with checkpoint.msgpack")
    p.add_argument("--episodes", type=positive_int, default=None,
                   help=f"held-out episodes (default: {EVAL_EPISODES}; a fleet's or a reservation task's: its "
                        "config's eval_episodes)")
    p.add_argument("--eval-seed", type=seed_int, default=0, help="seed of the held-out evaluation episodes")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--baselines", default=None, help="comma-separated baselines to compare (default: all)")
    p.set_defaults(func=cmd_eval)

    p = add_command(sub, "sweep", help="vmapped sweep over traced hyperparameters and seeds")
    _config_options(p)
    p.add_argument("--grid", action="append", required=True, metavar="NAME=V1,V2,...", help="repeatable")
    p.add_argument("--seeds", type=positive_int, default=4)
    p.add_argument("--episodes", type=positive_int, default=64, help="held-out episodes per run")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_sweep)
