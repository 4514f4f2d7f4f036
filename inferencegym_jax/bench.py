"""`inferencegym bench`: environment steps per second, JAX against the NumPy reference.

    inferencegym bench                                    # the table of BENCHMARKS.md
    inferencegym bench --envs 1 1024 --impl jax --json out.json
    inferencegym bench --devices 2                        # JAX rows split over 2 host devices
    inferencegym bench --compare 0069be7 HEAD --envs 8192 # git revisions side by side
    python scripts/benchmark.py ...                       # the same

One run measures, for each task and number of parallel envs:

* **env only** (`impl` "jax", "numpy"): steps of the full env (auto-reset included) per second.
  JAX: one jitted `lax.scan` of `--steps` steps of `vmap(env.step)`, a fresh key per env per
  step (`jax.random.split`, as a trainer does), compiled ahead of time and timed apart
  (`compile_s`). NumPy: `reference.ReferenceEnv` with its own sampler. Both apply the same
  random actions (a table of 16 steps of (num_envs, 5) grid indices, cycled). The median of
  `--repeats` timed runs.
* **PPO end to end** (`impl` "ppo", with the trainer installed): env steps per second of a jitted
  chunk of PPO updates of the task's shipped config (rollout, GAE, epochs of minibatch Adam).
* **grading** (`impl` "grade", with the graders): graded episodes per second of a jitted
  `graders.grade` over a batch of 200-interval random-policy episodes.

Memory (`memory_mb`): JAX, the compiled program's arguments, outputs and temporaries
(`memory_analysis()`); NumPy, the peak of one step's allocations (tracemalloc). `rss_mb` is the
process's peak resident set so far (monotone over a run), `load_avg` the machine's 1-minute
load average after the row. Every row goes to `--json`.

`--compare REV ...` instead times the env-only JAX loop of several git revisions in alternating
subprocesses (each revision's package, configs and data from `git archive`), the before/after
rows of BENCHMARKS.md's optimisation log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any

DEFAULT_ENVS = (1, 64, 1024, 8192, 65536)
ACTION_TABLE = 16  # distinct steps of random actions, cycled


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _actions(env, params, num_envs: int, seed: int = 0):
    import numpy as np

    nvec = np.asarray(env.action_space(params).nvec)
    return np.random.default_rng(seed).integers(0, nvec, (ACTION_TABLE, num_envs, 5)).astype(np.int32)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def env_only_loop(env, params, steps: int, devices: int = 1):
    """`run(key, actions) -> (final states, float32 (num_envs,) summed rewards)`: reset, then
    `steps` steps of `vmap(env.step)` with a fresh key per env per step, actions int32
    (ACTION_TABLE, num_envs, 5) cycled. With `devices` > 1 it is the per-device block of
    `sharding.split_leading` (the key folded with the device index)."""
    import jax
    import jax.numpy as jnp

    from inferencegym_jax import sharding

    def run(key, actions):
        n = actions.shape[1]  # envs in this block (all of them on one device)
        if devices > 1:
            key = jax.random.fold_in(key, jax.lax.axis_index(sharding.AXIS))
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)

        def body(state, x):
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
    actions = jnp.asarray(_actions(env, params, num_envs))
    run = env_only_loop(env, params, steps, devices)
    key = jax.random.key(0)
    if devices > 1:
        mesh = sharding.batch_mesh(devices)
        if num_envs % devices:
            raise ValueError(f"--envs {num_envs} does not split over {devices} devices")
        block = sharding.split_leading(lambda k, a: run(k[0], a.swapaxes(0, 1)), mesh)
        fn = jax.jit(block)
        args = (sharding.shard_leading(jnp.stack([key] * devices), mesh),
                sharding.shard_leading(actions.swapaxes(0, 1), mesh))
    else:
        fn = jax.jit(run)
        args = (key, actions)
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    memory = None if mem is None else (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)
    jax.block_until_ready(compiled(*args))  # warm-up
    median = _median_time(lambda: jax.block_until_ready(compiled(*args)), repeats)
    return {
        "impl": "jax" if devices == 1 else f"jax x{devices} devices",
        "task": env_id,
        "num_envs": num_envs,
        "steps_per_sec": num_envs * steps / median,
        "compile_s": compile_s,
        "median_s": median,
        "steps": steps,
        "repeats": repeats,
        "devices": devices,
        "memory_mb": None if memory is None else memory / 2**20,
        "rss_mb": _rss_mb(),
    }


def bench_numpy(env_id: str, num_envs: int, steps: int, repeats: int) -> dict[str, Any]:
    """Env-only steps/s of the NumPy reference with its own sampler."""
    import tracemalloc

    import inferencegym_jax as ig
    from inferencegym_jax.testing import reference

    env, params = ig.make(env_id)
    actions = _actions(env, params, num_envs)
    ref = reference.ReferenceEnv(params, num_envs, seed=0)

    def run():
        ref.reset()
        for t in range(steps):
            ref.step(actions[t % ACTION_TABLE])

    ref.reset()
    tracemalloc.start()
    ref.step(actions[0])
    memory = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    median = _median_time(run, repeats)
    return {
        "impl": "numpy",
        "task": env_id,
        "num_envs": num_envs,
        "steps_per_sec": num_envs * steps / median,
        "compile_s": 0.0,
        "median_s": median,
        "steps": steps,
        "repeats": repeats,
        "devices": 1,
        "memory_mb": memory / 2**20,
        "rss_mb": _rss_mb(),
    }


def bench_ppo(env_id: str, updates: int, repeats: int, num_envs: int | None = None) -> dict[str, Any] | None:
    """End-to-end PPO env steps/s (updates included) of the task's shipped config; None
    without the trainer or a config for the task."""
    try:
        from training.config import load_config
        from training.ppo import make_train
    except ImportError:
        return None
    import jax

    number = env_id.split("Task")[1].split("-")[0]
    try:
        config = load_config(f"ppo_task{number}", **({"num_envs": num_envs} if num_envs else {}))
    except (FileNotFoundError, ValueError):
        return None
    trainer = make_train(config)
    runner = trainer.jit_init(trainer.root_key())
    hp = trainer.default_hparams()
    t0 = time.perf_counter()
    compiled = trainer.jit_run_updates.lower(runner, hp, updates).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(runner, hp))
    median = _median_time(lambda: jax.block_until_ready(compiled(runner, hp)), repeats)
    env_steps = config.num_envs * config.num_steps * updates
    return {
        "impl": "ppo",
        "task": env_id,
        "num_envs": config.num_envs,
        "steps_per_sec": env_steps / median,
        "compile_s": compile_s,
        "median_s": median,
        "steps": config.num_steps * updates,
        "repeats": repeats,
        "devices": 1,
        "memory_mb": None,
        "rss_mb": _rss_mb(),
        "note": f"{updates} updates x {config.num_steps} steps, {config.update_epochs} epochs x "
                f"{config.num_minibatches} minibatches",
    }


def bench_grading(env_id: str, episodes: int, repeats: int) -> dict[str, Any] | None:
    """Graded episodes per second of a jitted `graders.grade` (None without graders/constants)."""
    try:
        from inferencegym_jax import graders
    except ImportError:
        return None
    import jax

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    env, params = ig.make(env_id)
    traj = evaluate.run_episodes(env, params, baselines.random_policy(env), evaluate.evaluation_key(0), episodes)
    try:
        graders.load_constants(env_id)
    except (KeyError, ValueError):
        return None
    fn = jax.jit(lambda t, p: graders.grade(t, p, env_id).score)
    t0 = time.perf_counter()
    compiled = fn.lower(traj, params).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(traj, params))
    median = _median_time(lambda: jax.block_until_ready(compiled(traj, params)), repeats)
    return {
        "impl": "grade",
        "task": env_id,
        "num_envs": episodes,
        "steps_per_sec": episodes * traj.reward.shape[1] / median,
        "episodes_per_sec": episodes / median,
        "compile_s": compile_s,
        "median_s": median,
        "steps": int(traj.reward.shape[1]),
        "repeats": repeats,
        "devices": 1,
        "memory_mb": None,
        "rss_mb": _rss_mb(),
    }


# A self-contained env-only measurement for `compare`: it runs against old trees too, so it uses
# only the public API (make, reset, step) and prints one JSON line.
_COMPARE_SNIPPET = """
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
import inferencegym_jax as ig
env_id, n, steps, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
env, params = ig.make(env_id)
nvec = np.asarray(env.action_space(params).nvec)
actions = jnp.asarray(np.random.default_rng(0).integers(0, nvec, (16, n, 5)).astype(np.int32))
def run(key):
    k_reset, k_steps = jax.random.split(key)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)
    def body(state, x):
        t, k = x
        a = jax.lax.dynamic_index_in_dim(actions, t % 16, keepdims=False)
        _, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k, n), state, a, params)
        return state, reward
    return jax.lax.scan(body, state, (jnp.arange(steps), jax.random.split(k_steps, steps)))
f = jax.jit(run).lower(jax.random.key(0)).compile()
jax.block_until_ready(f(jax.random.key(0)))
wall, cpu = [], []
for i in range(repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(f(jax.random.key(i)))
    wall.append(time.perf_counter() - t0); cpu.append(time.process_time() - c0)
print(json.dumps({"steps_per_sec": n * steps / float(np.median(wall)), "cpu_ns": float(np.median(cpu)) / n / steps * 1e9}))
"""


def _checkout(rev: str, root: str, into: str) -> str:
    """`rev`'s package, configs and data, laid out as an importable package under `into`."""
    import pathlib
    import subprocess
    import tarfile

    archive = subprocess.run(["git", "-C", root, "archive", rev, "inferencegym_jax", "configs", "data"],
                             check=True, capture_output=True).stdout
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    pkg = pathlib.Path(into, "inferencegym_jax")
    for src, dst in (("configs", "_configs"), ("data", "_data")):  # what pyproject's package-dir maps
        pathlib.Path(into, src).rename(pkg / dst)
        (pkg / dst / "__init__.py").touch()
    return into


def compare(revs: list[str], env_id: str, num_envs: int, steps: int, repeats: int, rounds: int) -> list[dict[str, Any]]:
    """Env-only steps/s of several git revisions, in alternating subprocesses (`rounds` each),
    so that a change of machine load falls on all of them alike. Medians over rounds of the
    per-run medians; `cpu_ns_per_step` is CPU time (all threads) per env step."""
    import subprocess
    import tempfile

    import inferencegym_jax

    root = subprocess.run(["git", "-C", os.path.dirname(inferencegym_jax.__file__), "rev-parse", "--show-toplevel"],
                          check=True, capture_output=True, text=True).stdout.strip()
    results: dict[str, list[dict[str, float]]] = {rev: [] for rev in revs}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: _checkout(rev, root, os.path.join(tmp, f"r{i}")) for i, rev in enumerate(revs)}
        for _ in range(rounds):
            for rev in revs:
                env = dict(os.environ, PYTHONPATH=trees[rev])
                out = subprocess.run([sys.executable, "-c", _COMPARE_SNIPPET, env_id, str(num_envs), str(steps),
                                      str(repeats)], env=env, cwd=tmp, capture_output=True, text=True)
                if out.returncode:
                    raise RuntimeError(f"{rev}: {out.stderr[-2000:]}")
                results[rev].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    for rev in revs:
        rows.append({
            "impl": f"jax @ {rev}",
            "task": env_id,
            "num_envs": num_envs,
            "steps_per_sec": statistics.median(r["steps_per_sec"] for r in results[rev]),
            "cpu_ns_per_step": statistics.median(r["cpu_ns"] for r in results[rev]),
            "compile_s": None,
            "memory_mb": None,
            "rounds": rounds,
        })
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


COLUMNS = ("impl", "task", "num_envs", "steps/s", "jax/numpy", "compile s", "memory MB")


def table_line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """One markdown row; jax/numpy is the ratio to the NumPy row of the same task and size."""
    base = next((r["steps_per_sec"] for r in rows
                 if r["impl"] == "numpy" and (r["task"], r["num_envs"]) == (row["task"], row["num_envs"])), None)
    ratio = f"{row['steps_per_sec'] / base:.1f}x" if base and row["impl"].startswith("jax") else "-"
    cells = (row["impl"], row["task"].replace("InferenceGym-", "").replace("-v0", ""), _fmt(row["num_envs"]),
             _fmt(row["steps_per_sec"]), ratio, _fmt(row["compile_s"]), _fmt(row["memory_mb"]))
    return "| " + " | ".join(cells) + " |"


def print_table(rows: list[dict[str, Any]], file=sys.stdout) -> None:
    """The markdown table of BENCHMARKS.md."""
    print("| " + " | ".join(COLUMNS) + " |", file=file)
    print("|" + "|".join("---" if c in ("impl", "task") else "---:" for c in COLUMNS) + "|", file=file)
    for r in rows:
        print(table_line(r, rows), file=file)


def plot(rows: list[dict[str, Any]], path: str) -> None:
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
        label = f"{impl}, {task.replace('InferenceGym-', '').replace('-v0', '')}"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
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
        "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
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
    return num_envs * (8e3 if impl == "jax" else 20e3) < 0.5 * available


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.compare:
        rows = compare(args.compare, args.tasks[0], args.envs[0], args.steps, args.repeats, args.rounds)
        print("| revision | task | num_envs | steps/s | CPU ns per env step |\n|---|---|---:|---:|---:|")
        for r in rows:
            print(f"| {r['impl'][6:]} | {r['task']} | {r['num_envs']:,} | {r['steps_per_sec']:,.0f} | "
                  f"{r['cpu_ns_per_step']:,.0f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": machine(), "rows": rows}, f, indent=2)
        return rows
    if args.devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        # Read when the CPU backend starts; too late once JAX has run anything.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}").strip()
    import jax

    if args.devices > jax.device_count():
        raise SystemExit(f"--devices {args.devices}: only {jax.device_count()} device(s); on CPU start with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={args.devices}")
    meta = machine()
    print(f"jax {meta['jax']} on {meta['platform']} ({meta['cpu']}, {meta['cores']} cores), "
          f"{meta['devices']} device(s), load average {meta['load_avg']}, XLA_FLAGS={meta['xla_flags']!r}",
          flush=True)
    rows: list[dict[str, Any]] = []
    print_table([])  # the header; rows print as they come
    for env_id in args.tasks:
        for n in args.envs:
            for impl in sorted(args.impl, key=lambda i: i != "numpy"):  # NumPy first: the ratio's base
                if not _fits(n, impl):
                    print(f"| {impl} | {env_id} | {n:,} | skipped: not enough memory | | | |", flush=True)
                    continue
                if impl == "jax":
                    row = bench_jax(env_id, n, args.steps, args.repeats)
                    if args.devices > 1 and n % args.devices == 0:
                        rows.append(row)
                        print(table_line(row, rows), flush=True)
                        row = bench_jax(env_id, n, args.steps, args.repeats, devices=args.devices)
                else:
                    steps = max(2, min(args.steps, args.numpy_steps))
                    row = bench_numpy(env_id, n, steps, max(1, min(args.repeats, 3)))
                row["load_avg"] = os.getloadavg()[0]
                rows.append(row)
                print(table_line(row, rows), flush=True)
        if args.ppo:
            row = bench_ppo(env_id, args.ppo_updates, max(1, min(args.repeats, 3)))
            if row:
                rows.append(row)
                print(table_line(row, rows), flush=True)
        if args.grade:
            row = bench_grading(env_id, args.grade_episodes, args.repeats)
            if row:
                rows.append(row)
                print(table_line(row, rows), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": meta, "rows": rows}, f, indent=2)
    if args.plot:
        plot(rows, args.plot)
    return rows


def _task_id(value: str) -> str:
    from inferencegym_jax.cli import _task_id as parse

    return parse(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", type=int, nargs="+", default=list(DEFAULT_ENVS), help="numbers of parallel envs")
    parser.add_argument("--tasks", nargs="+", type=_task_id, default=["InferenceGym-Task3-v0"],
                        help="task numbers or ids")
    parser.add_argument("--impl", nargs="+", default=["jax", "numpy"], choices=["jax", "numpy"])
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed run (JAX)")
    parser.add_argument("--numpy-steps", type=int, default=20, help="env steps per timed run (NumPy)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the median is reported")
    parser.add_argument("--devices", type=int, default=1,
                        help="also time the JAX env split over this many devices (CPU: host devices)")
    parser.add_argument("--ppo", action=argparse.BooleanOptionalAction, default=True, help="end-to-end PPO row")
    parser.add_argument("--ppo-updates", type=int, default=5)
    parser.add_argument("--grade", action=argparse.BooleanOptionalAction, default=True, help="grading row")
    parser.add_argument("--grade-episodes", type=int, default=1024)
    parser.add_argument("--compare", nargs="+", metavar="REV", default=None,
                        help="instead: env-only steps/s of these git revisions (first --tasks, first --envs), "
                             "alternating subprocesses")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of --compare")
    parser.add_argument("--json", default=None, help="write the rows and the machine here")
    parser.add_argument("--plot", default=None, help="write the scaling figure (PNG) here")


def register(subparsers: argparse._SubParsersAction) -> None:
    """The `inferencegym bench` subcommand."""
    p = subparsers.add_parser("bench", help="env steps/s against num_envs, JAX and the NumPy reference",
                              description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> None:
    from inferencegym_jax.cli import use_xla_cpu_flags

    parser = argparse.ArgumentParser(prog="benchmark", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    use_xla_cpu_flags()  # as `inferencegym bench` does
    run(args)


if __name__ == "__main__":
    main()
