"""Env steps per second against the number of parallel envs, compile time apart.

Usage: python scripts/benchmark.py [--envs 1 64 1024 8192] [--steps 100] [--repeats 5] [--json PATH]
(also `inferencegym bench`). Prints one row per (task, num_envs) with the median of `repeats`
timed runs of a jitted `lax.scan` over `steps` vmapped steps (auto-reset included), and the
compile time of the first call apart.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp

import inferencegym_jax as ig


def bench_env(env_id: str, num_envs: int, steps: int, repeats: int) -> dict:
    env, params = ig.make(env_id)
    space = env.action_space(params)

    def run(key):
        k_reset, k_scan = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)

        def body(state, k):
            k_a, k_s = jax.random.split(k)
            actions = jax.vmap(space.sample)(jax.random.split(k_a, num_envs))
            _, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_s, num_envs), state, actions, params
            )
            return state, reward

        return jax.lax.scan(body, state, jax.random.split(k_scan, steps))[1].sum()

    run = jax.jit(run)
    t0 = time.perf_counter()
    run(jax.random.key(0)).block_until_ready()
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        run(jax.random.key(i + 1)).block_until_ready()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {
        "impl": "jax",
        "task": env_id,
        "num_envs": num_envs,
        "steps_per_sec": num_envs * steps / median,
        "compile_s": compile_s,
        "median_s": median,
        "steps": steps,
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 64, 1024, 8192])
    parser.add_argument("--tasks", nargs="+", default=["InferenceGym-Task3-v0"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({platform.processor() or platform.machine()}), "
          f"{jax.device_count()} device(s)")
    rows = []
    print(f"{'task':24s} {'num_envs':>9s} {'steps/s':>14s} {'compile s':>10s}")
    for env_id in args.tasks:
        for n in args.envs:
            row = bench_env(env_id, n, args.steps, args.repeats)
            rows.append(row)
            print(f"{env_id:24s} {n:9d} {row['steps_per_sec']:14,.0f} {row['compile_s']:10.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
