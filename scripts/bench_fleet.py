"""The fleet's physics against the single server, in simulated replica-intervals per wall second
(issue 42: ">= 0.5x the single-server engine's simulated replica-seconds per wall second at 1,024
fleets on 2 cores").

Both sides run task 1-v2's server (the mixed engine) for `--steps` one-second intervals in one
jitted `lax.scan`, each interval's arrivals drawn by the task's workload (`workload.step`) and the
sums of the completions returned (so nothing is compiled away):

* single: `--fleets` x `--replicas` independent servers, `jax.vmap(serving.serve_interval)`, each
  at the task's rate;
* fleet: `--fleets` fleets of `--replicas` replicas, all active, `jax.vmap(fleet.fleet_interval)`,
  each fleet's arrivals drawn at `--replicas` x the task's rate and routed by the least-loaded rule
  (`fleet.least_loaded_weights`) or by equal weights (`--routing equal`).

Compiled apart (the first call, timed and reported), then timed in `--rounds` alternating rounds;
the medians and their ratio go to stdout and, with `--json`, to a file.

    python scripts/bench_fleet.py --json experiments/results/fleet_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import fleet, serving
from inferencegym_jax.traffic import workload

TASK = "InferenceGym-Task1-v2"


def program(params: Any, workload_params: Any, units: int, steps: int, initial: Callable[[], Any],
            serve: Callable[[Any, Any], tuple[Any, jax.Array]]) -> Callable[[jax.Array], jax.Array]:
    """`units` (servers or fleets) for `steps` intervals, each interval's arrivals drawn by the
    workload `workload_params` per unit: the summed completions. `initial()`: the units' first
    state (leading axis `units`, built inside the program, not baked in as a constant);
    `serve(state, arrivals)` -> (state, completed) of one unit."""
    dt = params.server.dt_s

    def run(key: jax.Array) -> jax.Array:
        keys = jax.random.split(key, units)
        traffic = jax.vmap(lambda k: workload.init(k, workload_params, steps * dt))(keys)

        def body(carry: Any, t: jax.Array) -> tuple[Any, jax.Array]:
            state, traffic = carry
            ks = jax.vmap(lambda k: jax.random.fold_in(k, t))(keys)
            traffic, arrivals = jax.vmap(lambda k, w: workload.step(k, w, t * dt, dt, workload_params))(ks, traffic)
            state, completed = jax.vmap(serve)(state, arrivals)
            return (state, traffic), jnp.sum(completed)

        _, done = jax.lax.scan(body, (initial(), traffic), jnp.arange(steps, dtype=jnp.float32))
        return jnp.sum(done)

    return jax.jit(run)


def single_program(params: Any, servers: int, steps: int) -> Callable[[jax.Array], jax.Array]:
    """`servers` independent servers at the task's rate."""
    sp, action = params.server, params.default_action
    def initial() -> Any:
        return jax.vmap(lambda _: serving.initial_state(action, sp.num_age_buckets))(jnp.arange(servers))

    def serve(state: Any, arrivals: Any) -> tuple[Any, jax.Array]:
        state, m = serving.serve_interval(state, arrivals, action, sp)
        return state, m.completed

    return program(params, params.workload, servers, steps, initial, serve)


def fleet_program(params: Any, fleets: int, replicas: int, steps: int,
                  routing: str) -> Callable[[jax.Array], jax.Array]:
    """`fleets` fleets of `replicas` active replicas, each fleet at `replicas` x the task's rate."""
    sp, action = params.server, params.default_action
    wp = params.workload.replace(base_rate=params.workload.base_rate * replicas)  # one replica's load each
    def initial() -> Any:
        return jax.vmap(lambda _: fleet.initial_fleet(action, sp.num_age_buckets, replicas, replicas))(
            jnp.arange(fleets))

    def serve(state: fleet.FleetState, arrivals: Any) -> tuple[fleet.FleetState, jax.Array]:
        weights = (fleet.least_loaded_weights(state, arrivals) if routing == "least_loaded"
                   else jnp.ones((replicas,), jnp.float32))
        state, m = fleet.fleet_interval(state, arrivals, weights, action, sp)
        return state, m.completed

    return program(params, wp, fleets, steps, initial, serve)


def timed(program: Callable[[jax.Array], jax.Array], key: jax.Array) -> tuple[float, float]:
    """(wall seconds of one call, the summed completions)."""
    t0 = time.perf_counter()
    done = float(jax.block_until_ready(program(key)))
    return time.perf_counter() - t0, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=1024)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--steps", type=int, default=32, help="one-second intervals per call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--routing", choices=("least_loaded", "equal"), default="least_loaded")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args()
    for name in ("fleets", "replicas", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be >= 1")
    _, params = ig.make(TASK)
    replica_intervals = args.fleets * args.replicas * args.steps
    programs = {"single": single_program(params, args.fleets * args.replicas, args.steps),
                "fleet": fleet_program(params, args.fleets, args.replicas, args.steps, args.routing)}
    first = {name: timed(p, jax.random.key(0))[0] for name, p in programs.items()}  # compile included
    rates: dict[str, list[float]] = {name: [] for name in programs}
    served: dict[str, float] = {}
    for r in range(args.rounds):
        for name, program in programs.items():
            seconds, served[name] = timed(program, jax.random.key(r + 1))
            rates[name].append(replica_intervals / seconds)
    median = {name: float(np.median(v)) for name, v in rates.items()}
    result = {
        "task": TASK, "fleets": args.fleets, "replicas": args.replicas, "steps": args.steps,
        "rounds": args.rounds, "routing": args.routing,
        "replica_intervals_per_s": {name: {"median": median[name], "all": rates[name]} for name in rates},
        "fleet_over_single": median["fleet"] / median["single"],
        "first_call_s": first, "completions_last_round": served,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}",
        "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
    }
    for name in rates:
        print(f"{name:6s} {median[name]:>12,.0f} replica-intervals/s (median of {args.rounds}; "
              f"first call {first[name]:.1f} s, compile included)")
    print(f"fleet / single: {result['fleet_over_single']:.2f}x ({args.fleets} fleets x {args.replicas} replicas, "
          f"{args.routing} routing)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
