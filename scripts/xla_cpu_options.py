"""Env-only steps/s of the jitted env under XLA:CPU compiler options, side by side.

    python scripts/xla_cpu_options.py --envs 8192
    python scripts/xla_cpu_options.py --option 'fast min/max={"xla_cpu_enable_fast_min_max": true}'

Compiles the env-only loop of `inferencegym bench` (Task 3, `--steps` steps of `vmap(env.step)`,
a fresh key per env per step) once per set of options, passed per executable
(`lowered.compile(compiler_options=...)`, no global XLA_FLAGS), then times the programs in
alternation, `--rounds` times, and prints the median steps/s, the CPU time per wall second
(how many cores XLA kept busy) and the largest change of the summed rewards against the default
options (0 when the options keep the bits).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp

import inferencegym_jax as ig
from inferencegym_jax.cli import bench

DEFAULT_OPTIONS = {
    "default": {},
    "vector width 512": {"xla_cpu_prefer_vector_width": 512},
    "concurrency scheduler": {"xla_cpu_enable_concurrency_optimized_scheduler": True},
    "fast math": {"xla_cpu_enable_fast_math": True},
    # what `inferencegym` (inferencegym_jax.cli.common.use_xla_cpu_flags) turns on
    "no YNNPACK reductions": {"xla_cpu_experimental_ynn_fusion_type": ""},
}


def main() -> None:
    """Compile the bench's env-only program once per set of options, time them alternately, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--task", default="InferenceGym-Task3-v0")
    parser.add_argument("--option", action="append", default=[], metavar='NAME={"xla_cpu_...": VALUE}',
                        help="another set of options, as NAME=JSON (repeatable)")
    args = parser.parse_args()
    variants = dict(DEFAULT_OPTIONS)
    for item in args.option:
        name, _, text = item.partition("=")
        try:
            variants[name] = json.loads(text)
        except json.JSONDecodeError as err:
            raise SystemExit(f"--option {item!r}: not NAME=JSON ({err})") from None

    env, params = ig.make(args.task)
    actions = jnp.asarray(bench.action_table(env, params, args.envs))

    # The bench's program as it is, final states included: a program that returns only the
    # rewards fuses differently (XLA re-derives some values instead of storing them).
    key = jax.random.key(0)
    lowered = jax.jit(bench.env_only_loop(env, params, args.steps)).lower(key, actions)
    programs, compile_s, rewards = {}, {}, {}
    for name, options in variants.items():
        t0 = time.perf_counter()
        try:
            programs[name] = lowered.compile(compiler_options=options)
        except jax.errors.JaxRuntimeError as err:
            raise SystemExit(f"options {name!r} = {options}: XLA refused them ({err})") from None
        compile_s[name] = time.perf_counter() - t0
        rewards[name] = jax.block_until_ready(programs[name](key, actions)[1])  # warm-up; the summed rewards
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in programs}
    for _ in range(args.rounds):
        for name, program in programs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(program(key, actions))
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))

    print(f"{args.task}, {args.envs:,} envs x {args.steps} steps, median of {args.rounds} alternating rounds; "
          f"jax {jax.__version__}")
    print("| options | steps/s | vs default | CPU s per wall s | max abs change of summed rewards | compile s |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for name, samples in times.items():
        wall = statistics.median(t[0] for t in samples)
        cpu = statistics.median(t[1] for t in samples)
        rate = args.envs * args.steps / wall
        base = base or rate
        change = float(jnp.max(jnp.abs(rewards[name] - rewards["default"])))
        label = f"{name} `{json.dumps(variants[name])}`" if variants[name] else name
        print(f"| {label} | {rate:,.0f} | {rate / base:.2f}x | {cpu / wall:.2f} | {change:.1e} "
              f"| {compile_s[name]:.1f} |")


if __name__ == "__main__":
    main()
