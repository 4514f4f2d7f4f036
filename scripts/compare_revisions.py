"""Env-only steps/s of several git revisions side by side, in alternating child processes.

    python scripts/compare_revisions.py 0069be7 HEAD --envs 8192
    python scripts/compare_revisions.py 17094d2 36a5037 7c8307a --envs 8192 --steps 50 --rounds 3

Each revision's package, configs and data come out of `git archive` into a temporary tree,
laid out as an installed package (configs and data as `inferencegym_jax._configs` / `_data`).
The measurement runs this same script as a child process (`--child`) with PYTHONPATH = that
tree, so it imports that revision's `inferencegym_jax`, and uses only `inferencegym_jax.make`,
`env.reset`, `env.step` and `env.action_space`, public since the first revision: a jitted
`lax.scan` of `--steps` steps of `vmap(env.step)` over `--envs` envs, a fresh key per env per
step, random grid actions (a table of 16 steps, cycled), returning the final states and the
rewards; compiled apart, warmed up, then the median of `--repeats` timed runs. The revisions
alternate, `--rounds` times, so that a change of machine load falls on all of them alike; a
revision's steps/s is the median over rounds, and CPU ns per env step counts every thread.

With `--loop bench` (the default) the children inherit the XLA flags of the `inferencegym`
command (`inferencegym_jax.cli.common.use_xla_cpu_flags`, added here before they start), so every
revision is compiled as the command compiles; `--loop user` times the rollout a user writes
(actions from `env.action_space(params).sample` inside the loop, only the summed rewards
returned) under the caller's XLA flags, XLA's defaults unless set. Prints a markdown table; `--json` writes the
rows and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ACTION_TABLE = 16  # distinct steps of random actions, cycled
SCRIPT = Path(__file__).resolve()


def measure(env_id: str, num_envs: int, steps: int, repeats: int, loop: str = "bench") -> dict[str, float]:
    """Env-only steps/s and CPU ns per env step of the `inferencegym_jax` on sys.path (the
    child's part: only the public API that every revision has).

    `loop` "bench": the bench's program (a table of random grid actions, final states and
    rewards returned); "user": the rollout a user writes (actions from
    `env.action_space(params).sample`, only the summed rewards returned).
    """
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import inferencegym_jax as ig

    env, params = ig.make(env_id)
    nvec = np.asarray(env.action_space(params).nvec)
    table = np.random.default_rng(0).integers(0, nvec, (ACTION_TABLE, num_envs, 5)).astype(np.int32)
    actions = jnp.asarray(table)

    def run(key: jax.Array) -> Any:
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)

        def body(state: Any, x: Any) -> Any:
            t, k = x
            a = jax.lax.dynamic_index_in_dim(actions, t % ACTION_TABLE, keepdims=False)
            keys = jax.random.split(k, num_envs)
            _, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, a, params)
            return state, reward

        return jax.lax.scan(body, state, (jnp.arange(steps), jax.random.split(k_steps, steps)))

    space = env.action_space(params)

    def user_run(key: jax.Array) -> jax.Array:
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)

        def body(state: Any, k: jax.Array) -> Any:
            k_act, k_env = jax.random.split(k)
            a = jax.vmap(space.sample)(jax.random.split(k_act, num_envs))
            _, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_env, num_envs), state, a, params)
            return state, reward

        return jnp.sum(jax.lax.scan(body, state, jax.random.split(k_steps, steps))[1], axis=0)

    program = jax.jit(run if loop == "bench" else user_run).lower(jax.random.key(0)).compile()
    jax.block_until_ready(program(jax.random.key(0)))  # warm-up
    wall, cpu = [], []
    for i in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(program(jax.random.key(i)))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"steps_per_sec": num_envs * steps / statistics.median(wall),
            "cpu_ns": statistics.median(cpu) / num_envs / steps * 1e9}


def checkout(rev: str, root: Path, into: Path) -> Path:
    """`rev`'s package, configs and data, laid out as an importable package under `into`."""
    import io
    import tarfile

    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "inferencegym_jax", "configs", "data"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    package = into / "inferencegym_jax"
    for src, dst in (("configs", "_configs"), ("data", "_data")):  # what pyproject's package-dir maps
        (into / src).rename(package / dst)
        (package / dst / "__init__.py").touch()
    return into


def _child(tree: Path, args: argparse.Namespace, cwd: str) -> dict[str, float]:
    """One measurement of the revision in `tree`, in a child process."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, str(SCRIPT), "--child", "--task", args.task, "--envs", str(args.envs),
               "--steps", str(args.steps), "--repeats", str(args.repeats), "--loop", args.loop]
    out = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{tree}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace) -> list[dict[str, Any]]:
    """A row per revision: medians over `args.rounds` alternating child runs."""
    root = Path(subprocess.run(["git", "-C", str(SCRIPT.parent), "rev-parse", "--show-toplevel"],
                               check=True, capture_output=True, text=True).stdout.strip())
    results: dict[str, list[dict[str, float]]] = {rev: [] for rev in args.revs}
    labels = {rev: subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], check=True,
                                  capture_output=True, text=True).stdout.strip() for rev in args.revs}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: checkout(rev, root, Path(tmp, f"r{i}")) for i, rev in enumerate(args.revs)}
        for _ in range(args.rounds):
            for rev in args.revs:
                results[rev].append(_child(trees[rev], args, tmp))
    return [{
        "impl": f"jax @ {labels[rev]}" if args.loop == "bench" else f"jax user loop @ {labels[rev]}",
        "task": args.task,
        "num_envs": args.envs,
        "steps_per_sec": statistics.median(r["steps_per_sec"] for r in results[rev]),
        "cpu_ns_per_step": statistics.median(r["cpu_ns"] for r in results[rev]),
        "compile_s": None,
        "memory_mb": None,
        "rounds": args.rounds,
    } for rev in args.revs]


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The markdown table of BENCHMARKS.md's optimisation log."""
    from inferencegym_jax.cli.common import markdown_header, markdown_row

    print(markdown_header(("revision", "task", "num_envs", "steps/s", "CPU ns per env step"), text_columns=2))
    for r in rows:
        print(markdown_row((r["impl"].split(" @ ")[-1], r["task"], r["num_envs"], r["steps_per_sec"],
                            r["cpu_ns_per_step"])))


def build_parser() -> argparse.ArgumentParser:
    """The parent's options; the child gets --child and the measurement's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="*", metavar="REV", help="git revisions to compare")
    parser.add_argument("--task", default="InferenceGym-Task3-v0", help="task number or id")
    parser.add_argument("--envs", type=int, default=8192, help="parallel envs")
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per child; the median is kept")
    parser.add_argument("--rounds", type=int, default=3, help="alternations over the revisions")
    parser.add_argument("--loop", choices=("bench", "user"), default="bench",
                        help="bench: the bench's program, compiled as `inferencegym` compiles; user: the rollout a "
                             "user writes (actions sampled in the loop, summed rewards only), XLA's default flags")
    parser.add_argument("--json", default=None, help="write the rows and the machine here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parent: check the options, add the CLI's XLA flags, compare, print (and --json)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:  # the revision's own package is on sys.path: nothing of this tree's
        print(json.dumps(measure(args.task, args.envs, args.steps, args.repeats, args.loop)), flush=True)
        return
    from inferencegym_jax.cli import bench, common
    from inferencegym_jax.files import atomic_write_json

    if not args.revs:
        parser.error("give at least one git revision")
    if min(args.envs, args.steps, args.repeats, args.rounds) < 1:
        parser.error("--envs, --steps, --repeats and --rounds must be >= 1")
    try:
        args.task = common.task_id(args.task)
        out = common.check_output_file(args.json, "--json") if args.json else None
    except (argparse.ArgumentTypeError, ValueError) as err:
        parser.error(str(err))
    if args.loop == "bench":
        common.use_xla_cpu_flags()
    rows = compare(args)
    print_rows(rows)
    if out is not None:
        atomic_write_json(out, {"machine": bench.machine(), "rows": rows})


if __name__ == "__main__":
    main()
