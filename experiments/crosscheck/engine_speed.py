"""Steps per second of the loop a user writes (random actions from the action space, `lax.scan` over
`vmap(env.step)`, the summed rewards returned) on one task with the fluid and the mixed engine (or
other VARIANTS), interleaved in one process (rounds alternate the variants; medians reported),
compile time apart.

    .venv-test/bin/python experiments/crosscheck/engine_speed.py [--task 4] [--envs 8192] [--steps 64] [--rounds 5]
    .venv-test/bin/python experiments/crosscheck/engine_speed.py --variants mixed mixed_request   # issue 41's options
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp

import inferencegym_jax as ig
from inferencegym_jax import tasks

# Each variant's overrides of the task (ig.make's keyword arguments).
VARIANTS = {
    "fluid": {"server": {"engine": "fluid"}},
    "mixed": {"server": {"engine": "mixed"}},
    # per-request TPOT (serving.request_tpot) and the clamped length strata (traffic.strata)
    "mixed_request": {"server": {"engine": "mixed", "slo_accounting": "request"},
                      "workload": {"length_strata": "clamped"}},
}


def program(env_id: str, variant: str, envs: int, steps: int):  # noqa: ANN201
    env, params = ig.make(env_id, **VARIANTS[variant])
    space = env.action_space(params)

    @jax.jit
    def run(key: jax.Array) -> jax.Array:
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, envs), params)

        def body(state, key):  # noqa: ANN001, ANN202
            k_act, k_step = jax.random.split(key)
            actions = jax.vmap(space.sample)(jax.random.split(k_act, envs))
            _, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, envs), state, actions, params)
            return state, jnp.sum(reward)

        return jax.lax.scan(body, state, jax.random.split(k_steps, steps))[1].sum()

    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", type=int, default=4, help="task number (its newest version)")
    ap.add_argument("--envs", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", nargs=2, choices=tuple(VARIANTS), default=("fluid", "mixed"),
                    help="the two variants compared (the ratio is the second's over the first's)")
    a = ap.parse_args()
    env_id = tasks.newest_version(a.task)
    runs, compile_s, rates = {}, {}, {v: [] for v in a.variants}
    for engine in rates:
        t0 = time.perf_counter()
        runs[engine] = program(env_id, engine, a.envs, a.steps)
        runs[engine](jax.random.key(0)).block_until_ready()
        compile_s[engine] = time.perf_counter() - t0
    for r in range(a.rounds):
        for engine in rates:
            t0 = time.perf_counter()
            runs[engine](jax.random.key(r + 1)).block_until_ready()
            rates[engine].append(a.envs * a.steps / (time.perf_counter() - t0))
    med = {e: statistics.median(v) for e, v in rates.items()}
    first, second = a.variants
    ratio_key = "ratio_mixed_over_fluid" if tuple(a.variants) == ("fluid", "mixed") else f"ratio_{second}_over_{first}"
    print(json.dumps({"task": env_id, "envs": a.envs, "steps": a.steps, "rounds": a.rounds,
                      "variants": {v: VARIANTS[v] for v in a.variants},
                      "steps_per_s_median": med, ratio_key: med[second] / med[first],
                      "first_call_s_incl_compile": compile_s, "all": rates}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
