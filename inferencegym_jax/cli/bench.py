"""`inferencegym bench`: environment steps per second, JAX against the NumPy reference.

    inferencegym bench                                    # the table of BENCHMARKS.md
    inferencegym bench --envs 1 1024 --impl jax --json out.json
    inferencegym bench --devices 2                        # JAX rows split over 2 host devices
    python scripts/benchmark.py ...                       # the same
    python scripts/compare_revisions.py 0069be7 HEAD --envs 8192   # git revisions side by side

One run measures, for each task and number of parallel envs:

* **env only** (`impl` "jax", "numpy"): steps of the full env (auto-reset included) per second.
  JAX: one jitted `lax.scan` of `--steps` steps of `vmap(env.step)`, a fresh key per env per
  step (`jax.random.split`, as a trainer does), compiled ahead of time and timed apart
  (`compile_s`), with the XLA flags of the `inferencegym` command (`common.use_xla_cpu_flags`).
  NumPy: `inferencegym_jax.testing.reference.ReferenceEnv` with its own sampler. Both apply the
  same random actions (a table of 16 steps of (num_envs, 5) grid indices, cycled). The median
  of `--repeats` timed runs.
* **user loop** (`impl` "jax-user-loop"): the rollout a user writes, with XLA's default flags:
  per step, actions from `jax.vmap(env.action_space(params).sample)` over per-env keys, then
  `jax.vmap(env.step)`, inside `jax.lax.scan`, returning only the summed rewards. Timed like
  the env-only row. XLA_FLAGS is process-wide and read once, when JAX's CPU backend starts, and
  the command adds its flag at start-up, so this row runs in a child Python process whose
  XLA_FLAGS is the value the command started with (`args.xla_flags_at_start`, recorded by
  `inferencegym_jax.cli.main` before it adds anything; unset if it was unset); the row's
  `xla_flags` says what the child had. A child rather than per-executable compiler options,
  because those would have to restate XLA's default of every flag the command sets, which JAX
  does not expose; a child also leaves out `--devices`' host-device flag.
* **PPO end to end** (`impl` "ppo"): env steps per second of a jitted chunk of PPO updates of
  the task's shipped config (rollout, GAE, epochs of minibatch Adam); no row for a task
  without one.
* **grading** (`impl` "grade"): graded episodes per second of a jitted `graders.grade` over a
  batch of 200-interval random-policy episodes; no row for a task without grader constants.

Memory (`memory_mb`): JAX, the compiled program's arguments, outputs and temporaries
(`memory_analysis()`); NumPy, the peak of one step's allocations (tracemalloc). `rss_mb` is the
peak resident set so far of the process that ran the row (monotone over a run), `load_avg` the
machine's 1-minute load average after the row. Every row goes to `--json`.

The rows are measured in `bench_rows` and reported (table, figure, machine, JSON) by
`bench_report`; this module holds the subcommand's options and the run over tasks and sizes.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from inferencegym_jax.cli.bench_report import (
    COLUMNS,
    load_avg,
    machine,
    plot,
    print_table,
    short_task,
    table_line,
    write_json,
)
from inferencegym_jax.cli.bench_rows import (
    ACTION_TABLE,
    USER_LOOP,
    action_table,
    bench_grading,
    bench_jax,
    bench_numpy,
    bench_ppo,
    bench_user_loop,
    env_only_loop,
    measure_user_loop,
    user_loop,
    user_loop_child,
)
from inferencegym_jax.cli.common import add_command, check_output_file, positive_int, task_id

DEFAULT_ENVS = (1, 64, 1024, 8192, 65536)
IMPLS = ("jax", USER_LOOP, "numpy")

__all__ = [
    "ACTION_TABLE",
    "COLUMNS",
    "DEFAULT_ENVS",
    "IMPLS",
    "USER_LOOP",
    "action_table",
    "add_parsers",
    "bench_grading",
    "bench_jax",
    "bench_numpy",
    "bench_ppo",
    "bench_user_loop",
    "cmd_bench",
    "env_only_loop",
    "machine",
    "measure_user_loop",
    "plot",
    "print_table",
    "table_line",
    "user_loop",
    "user_loop_child",
]


def _fits(num_envs: int, impl: str) -> bool:
    """Skip sizes that would not fit in memory: ~8 KB per env for JAX (state, scan carry,
    temporaries), ~20 KB for NumPy (a step's temporaries), with half the memory spare."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return True
    return num_envs * (8e3 if impl.startswith("jax") else 20e3) < 0.5 * available


def _use_devices(devices: int) -> None:
    """Ask XLA:CPU for `devices` host devices (read when the backend starts: before JAX runs
    anything); ValueError when there are fewer."""
    flags = os.environ.get("XLA_FLAGS", "")
    if devices > 1 and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    import jax

    if devices > jax.device_count():
        raise ValueError(f"--devices {devices}: only {jax.device_count()} device(s); on CPU start with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={devices}")


def _env_rows(args: argparse.Namespace, env_id: str, num_envs: int, impl: str) -> list[dict[str, Any]]:
    """The env-only rows of one impl at one size (two for "jax" with --devices > 1)."""
    if impl == "numpy":
        return [bench_numpy(env_id, num_envs, max(2, min(args.steps, args.numpy_steps)), max(1, min(args.repeats, 3)))]
    if impl == USER_LOOP:
        return [bench_user_loop(env_id, num_envs, args.steps, args.repeats, args.xla_flags_at_start)]
    rows = [bench_jax(env_id, num_envs, args.steps, args.repeats)]
    if args.devices > 1 and num_envs % args.devices == 0:
        rows.append(bench_jax(env_id, num_envs, args.steps, args.repeats, devices=args.devices))
    return rows


def _task_rows(args: argparse.Namespace, env_id: str, emit: Callable[[dict[str, Any]], None]) -> None:
    """Every row of one task, each passed to `emit` as soon as it is measured."""
    impls = sorted(dict.fromkeys(args.impl), key=lambda i: i != "numpy")  # NumPy first: the ratio's base
    for n in args.envs:
        for impl in impls:
            if not _fits(n, impl):
                print(f"| {impl} | {short_task(env_id)} | {n:,} | skipped: not enough memory | | | |", flush=True)
                continue
            for row in _env_rows(args, env_id, n, impl):
                emit(row)
    if args.ppo:
        ppo_row = bench_ppo(env_id, args.ppo_updates, max(1, min(args.repeats, 3)))
        if ppo_row:
            emit(ppo_row)
    if args.grade:
        grade_row = bench_grading(env_id, args.grade_episodes, args.repeats)
        if grade_row:
            emit(grade_row)


def cmd_bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure, print the table as rows come, write --json and --plot; returns the rows.

    `args.xla_flags_at_start` is XLA_FLAGS as the command found it (`inferencegym_jax.cli.main`
    records it), for the user-loop row."""
    out_json = check_output_file(args.json, "--json") if args.json else None
    out_plot = check_output_file(args.plot, "--plot") if args.plot else None
    _use_devices(args.devices)
    meta = machine()
    print(f"jax {meta['jax']} on {meta['platform']} ({meta['cpu']}, {meta['cores']} cores), "
          f"{meta['devices']} device(s), load average {meta['load_avg']}, XLA_FLAGS={meta['xla_flags']!r}",
          flush=True)
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        row["load_avg"] = load_avg()
        rows.append(row)
        print(table_line(row, rows), flush=True)

    print_table([])  # the header; rows print as they come
    for env_id in args.tasks:
        _task_rows(args, env_id, emit)
    if out_json is not None:
        write_json(out_json, meta, rows)
    if out_plot is not None:
        plot(rows, out_plot)
    return rows


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `bench` subcommand."""
    p = add_command(sub, "bench", help="env steps/s against num_envs, JAX and the NumPy reference",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", type=positive_int, nargs="+", default=list(DEFAULT_ENVS), help="numbers of parallel envs")
    p.add_argument("--tasks", nargs="+", type=task_id, default=["InferenceGym-Task3-v0"], help="task numbers or ids")
    p.add_argument("--impl", nargs="+", default=list(IMPLS), choices=IMPLS, help="env-only rows to measure")
    p.add_argument("--steps", type=positive_int, default=100, help="env steps per timed run (JAX)")
    p.add_argument("--numpy-steps", type=positive_int, default=20, help="env steps per timed run (NumPy)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed runs; the median is reported")
    p.add_argument("--devices", type=positive_int, default=1,
                   help="also time the JAX env split over this many devices (CPU: host devices)")
    p.add_argument("--ppo", action=argparse.BooleanOptionalAction, default=True, help="end-to-end PPO row")
    p.add_argument("--ppo-updates", type=positive_int, default=5)
    p.add_argument("--grade", action=argparse.BooleanOptionalAction, default=True, help="grading row")
    p.add_argument("--grade-episodes", type=positive_int, default=1024)
    p.add_argument("--json", default=None, help="write the rows and the machine here")
    p.add_argument("--plot", default=None, help="write the scaling figure (PNG) here")
    p.set_defaults(func=cmd_bench)
