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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencegym_jax.cli.common import (
    check_output_file,
    markdown_header,
    markdown_row,
    positive_int,
    ppo_config_name,
    task_id,
)
from inferencegym_jax.files import atomic_write_json

DEFAULT_ENVS = (1, 64, 1024, 8192, 65536)
ACTION_TABLE = 16  # distinct steps of random actions, cycled
USER_LOOP = "jax-user-loop"
IMPLS = ("jax", USER_LOOP, "numpy")
COLUMNS = ("impl", "task", "num_envs", "steps/s", "jax/numpy", "compile s", "memory MB")

# The child process of the user-loop row: a call, so that the loop itself is `user_loop` below.
_USER_LOOP_CHILD = "import sys; from inferencegym_jax.cli.bench import user_loop_child; user_loop_child(sys.argv[1:])"


def _rss_mb() -> float:
    """This process's peak resident set so far, MiB. Linux: VmHWM of /proc/self/status (KiB),
    which starts afresh in a child process, where `ru_maxrss` keeps the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024.0
    except (OSError, StopIteration, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _load_avg() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def action_table(env: Any, params: Any, num_envs: int, seed: int = 0) -> Any:
    """Random grid actions, int32 numpy (ACTION_TABLE, num_envs, 5), each entry below the
    action space's `nvec` (masked knobs 0)."""
    import numpy as np

    nvec = np.asarray(env.action_space(params).nvec)
    return np.random.default_rng(seed).integers(0, nvec, (ACTION_TABLE, num_envs, 5)).astype(np.int32)


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of `repeats` calls of `fn`."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _compile_and_time(jitted: Any, lower_args: tuple, call_args: tuple, repeats: int) -> tuple[float, float, Any]:
    """Compile `jitted` for `lower_args` (timed apart), run it once on `call_args` to warm up,
    then time it. Returns (compile seconds, median seconds of `repeats` runs, the compiled)."""
    import jax

    t0 = time.perf_counter()
    compiled = jitted.lower(*lower_args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*call_args))
    median = _median_time(lambda: jax.block_until_ready(compiled(*call_args)), repeats)
    return compile_s, median, compiled


def _memory_mb(compiled: Any) -> float | None:
    """Arguments, outputs and temporaries of a compiled program, MiB (None if XLA won't say)."""
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes) / 2**20


def _row(impl: str, env_id: str, num_envs: int, steps: int, median_s: float, compile_s: float, repeats: int,
         **extra: Any) -> dict[str, Any]:
    """A bench row: `num_envs * steps` steps in `median_s`; `extra` (devices, memory_mb, ...)
    after the common fields."""
    row = {"impl": impl, "task": env_id, "num_envs": num_envs, "steps_per_sec": num_envs * steps / median_s,
           "compile_s": compile_s, "median_s": median_s, "steps": steps, "repeats": repeats,
           "devices": 1, "memory_mb": None}
    row.update(extra)
    row.setdefault("rss_mb", _rss_mb())
    return row


def env_only_loop(env: Any, params: Any, steps: int, devices: int = 1) -> Callable:
    """`run(key, actions) -> (final states, float32 (num_envs,) summed rewards)`: reset, then
    `steps` steps of `vmap(env.step)` with a fresh key per env per step, actions int32
    (ACTION_TABLE, num_envs, 5) cycled. With `devices` > 1 it is the per-device block of
    `sharding.split_leading` (the key folded with the device index)."""
    import jax
    import jax.numpy as jnp

    from inferencegym_jax import sharding

    def run(key: jax.Array, actions: jax.Array) -> tuple[Any, jax.Array]:
        n = actions.shape[1]  # envs in this block (all of them on one device)
        if devices > 1:
            key = jax.random.fold_in(key, jax.lax.axis_index(sharding.AXIS))
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)

        def body(state: Any, x: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
            t, k = x
            a = jax.lax.dynamic_index_in_dim(actions, t % ACTION_TABLE, keepdims=False)
            _, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k, n), state, a, params)
            return state, reward

        state, rewards = jax.lax.scan(body, state, (jnp.arange(steps), jax.random.split(k_steps, steps)))
        return state, jnp.sum(rewards, axis=0)

    return run


def bench_jax(env_id: str, num_envs: int, steps: int, repeats: int, devices: int = 1) -> dict[str, Any]:
    """Env-only steps/s of the jitted, vmapped env (split over `devices` when > 1)."""
    import jax
    import jax.numpy as jnp

    import inferencegym_jax as ig
    from inferencegym_jax import sharding

    env, params = ig.make(env_id)
    actions = jnp.asarray(action_table(env, params, num_envs))
    run = env_only_loop(env, params, steps, devices)
    key = jax.random.key(0)
    if devices > 1:
        if num_envs % devices:
            raise ValueError(f"--envs {num_envs} does not split over --devices {devices}")
        mesh = sharding.batch_mesh(devices)
        fn = jax.jit(sharding.split_leading(lambda k, a: run(k[0], a.swapaxes(0, 1)), mesh))
        args = (sharding.shard_leading(jnp.stack([key] * devices), mesh),
                sharding.shard_leading(actions.swapaxes(0, 1), mesh))
    else:
        fn = jax.jit(run)
        args = (key, actions)
    compile_s, median, compiled = _compile_and_time(fn, args, args, repeats)
    impl = "jax" if devices == 1 else f"jax x{devices} devices"
    return _row(impl, env_id, num_envs, steps, median, compile_s, repeats, devices=devices,
                memory_mb=_memory_mb(compiled))


def user_loop(env: Any, params: Any, num_envs: int, steps: int) -> Callable:
    """`run(key) -> float32 (num_envs,) summed rewards`: the rollout a user writes. Reset
    `num_envs` envs, then `steps` times: actions from `vmap(action_space.sample)` over per-env
    keys, `vmap(env.step)` over per-env keys; only the rewards leave the program."""
    import jax
    import jax.numpy as jnp

    sample = jax.vmap(env.action_space(params).sample)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def run(key: jax.Array) -> jax.Array:
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)

        def body(state: Any, k: jax.Array) -> tuple[Any, jax.Array]:
            k_action, k_step = jax.random.split(k)
            action = sample(jax.random.split(k_action, num_envs))
            _, state, reward, *_ = step(jax.random.split(k_step, num_envs), state, action, params)
            return state, reward

        _, rewards = jax.lax.scan(body, state, jax.random.split(k_steps, steps))
        return jnp.sum(rewards, axis=0)

    return run


def measure_user_loop(env_id: str, num_envs: int, steps: int, repeats: int) -> dict[str, Any]:
    """The user-loop row, measured in this process with whatever XLA flags it started with."""
    import jax

    import inferencegym_jax as ig

    env, params = ig.make(env_id)
    key = jax.random.key(0)
    compile_s, median, compiled = _compile_and_time(jax.jit(user_loop(env, params, num_envs, steps)), (key,), (key,),
                                                    repeats)
    return _row(USER_LOOP, env_id, num_envs, steps, median, compile_s, repeats, memory_mb=_memory_mb(compiled),
                xla_flags=os.environ.get("XLA_FLAGS"))


def user_loop_child(argv: list[str]) -> None:
    """Entry of the child process: `ENV_ID NUM_ENVS STEPS REPEATS`; prints the row as one JSON line."""
    env_id, num_envs, steps, repeats = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    print(json.dumps(measure_user_loop(env_id, num_envs, steps, repeats)), flush=True)


def bench_user_loop(env_id: str, num_envs: int, steps: int, repeats: int, xla_flags: str | None) -> dict[str, Any]:
    """The user-loop row from a child process with XLA_FLAGS = `xla_flags` (None: unset)."""
    import inferencegym_jax

    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    root = str(Path(inferencegym_jax.__file__).resolve().parents[1])  # this package, not another install
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", _USER_LOOP_CHILD, env_id, str(num_envs), str(steps), str(repeats)],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"the {USER_LOOP} child process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_numpy(env_id: str, num_envs: int, steps: int, repeats: int) -> dict[str, Any]:
    """Env-only steps/s of the NumPy reference with its own sampler."""
    import tracemalloc

    import inferencegym_jax as ig
    from inferencegym_jax.testing import reference

    env, params = ig.make(env_id)
    actions = action_table(env, params, num_envs)
    ref = reference.ReferenceEnv(params, num_envs, seed=0)

    def run() -> None:
        ref.reset()
        for t in range(steps):
            ref.step(actions[t % ACTION_TABLE])

    ref.reset()
    tracemalloc.start()
    ref.step(actions[0])
    memory = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    median = _median_time(run, repeats)
    return _row("numpy", env_id, num_envs, steps, median, 0.0, repeats, memory_mb=memory / 2**20)


def bench_ppo(env_id: str, updates: int, repeats: int, num_envs: int | None = None) -> dict[str, Any] | None:
    """End-to-end PPO env steps/s (updates included) of the task's shipped config; None for a
    task without one."""
    from training.config import load_config, shipped_configs
    from training.ppo import make_train

    name = ppo_config_name(env_id)
    if name not in shipped_configs():
        return None
    config = load_config(name, **({"num_envs": num_envs} if num_envs else {}))
    trainer = make_train(config)
    runner = trainer.jit_init(trainer.root_key())
    hp = trainer.default_hparams()
    compile_s, median, _ = _compile_and_time(trainer.jit_run_updates, (runner, hp, updates), (runner, hp), repeats)
    note = (f"{updates} updates x {config.num_steps} steps, {config.update_epochs} epochs x "
            f"{config.num_minibatches} minibatches")
    return _row("ppo", env_id, config.num_envs, config.num_steps * updates, median, compile_s, repeats, note=note)


def bench_grading(env_id: str, episodes: int, repeats: int) -> dict[str, Any] | None:
    """Graded episodes per second of a jitted `graders.grade`; None without grader constants."""
    import jax

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate, graders

    try:
        graders.load_constants(env_id)
    except (KeyError, ValueError):
        return None
    env, params = ig.make(env_id)
    traj = evaluate.run_episodes(env, params, baselines.random_policy(env), evaluate.evaluation_key(0), episodes)

    def score(t: Any, p: Any) -> Any:
        return graders.grade(t, p, env_id).score

    compile_s, median, _ = _compile_and_time(jax.jit(score), (traj, params), (traj, params), repeats)
    return _row("grade", env_id, episodes, int(traj.reward.shape[1]), median, compile_s, repeats,
                episodes_per_sec=episodes / median)


def _short(env_id: str) -> str:
    """"InferenceGym-Task3-v0" -> "Task3"."""
    return env_id.replace("InferenceGym-", "").replace("-v0", "")


def table_line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """One markdown row; jax/numpy is the ratio to the NumPy row of the same task and size."""
    base = next((r["steps_per_sec"] for r in rows
                 if r["impl"] == "numpy" and (r["task"], r["num_envs"]) == (row["task"], row["num_envs"])), None)
    ratio = f"{row['steps_per_sec'] / base:.1f}x" if base and row["impl"].startswith("jax") else "-"
    return markdown_row((row["impl"], _short(row["task"]), row["num_envs"], row["steps_per_sec"], ratio,
                         row["compile_s"], row["memory_mb"]))


def print_table(rows: list[dict[str, Any]], file: Any = None) -> None:
    """The markdown table of BENCHMARKS.md (to stdout by default)."""
    print(markdown_header(COLUMNS, text_columns=2), file=file or sys.stdout)
    for r in rows:
        print(table_line(r, rows), file=file or sys.stdout)


def plot(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Steps/s against num_envs, log-log, one line per (impl, task) of the env-only rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        if r["impl"].startswith(("jax", "numpy")):
            series.setdefault((r["impl"], r["task"]), []).append((r["num_envs"], r["steps_per_sec"]))
    for (impl, task), points in sorted(series.items()):
        points.sort()
        style = "-o" if impl.startswith("jax") else "--s"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=f"{impl}, {_short(task)}")
    ax.axhline(2e6, ls=":", color="grey", label="target: 2 M steps/s at 8,192 envs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parallel envs")
    ax.set_ylabel("env steps per second")
    ax.set_title("inferencegym_jax: env-only throughput (auto-reset included)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> dict[str, Any]:
    """The machine and software the rows were measured on (starts JAX's backend)."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "jax": jax.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": jax.devices()[0].platform,
        "devices": jax.device_count(),
        "load_avg": _load_avg(),
        "command": " ".join(sys.argv),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


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
                print(f"| {impl} | {_short(env_id)} | {n:,} | skipped: not enough memory | | | |", flush=True)
                continue
            for row in _env_rows(args, env_id, n, impl):
                emit(row)
    if args.ppo:
        row = bench_ppo(env_id, args.ppo_updates, max(1, min(args.repeats, 3)))
        if row:
            emit(row)
    if args.grade:
        row = bench_grading(env_id, args.grade_episodes, args.repeats)
        if row:
            emit(row)


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
        row["load_avg"] = _load_avg()
        rows.append(row)
        print(table_line(row, rows), flush=True)

    print_table([])  # the header; rows print as they come
    for env_id in args.tasks:
        _task_rows(args, env_id, emit)
    if out_json is not None:
        atomic_write_json(out_json, {"machine": meta, "rows": rows})
    if out_plot is not None:
        plot(rows, out_plot)
    return rows


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `bench` subcommand."""
    p = sub.add_parser("bench", help="env steps/s against num_envs, JAX and the NumPy reference",
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
