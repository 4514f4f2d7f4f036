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

`--env` measures the environments instead (`env_main`): InferenceGym-Fleet1-v1's `FleetEnv.step`
(auto-reset included, action [16, 0]: every replica up, least-loaded routing) vmapped over each of
`--env-sizes` envs, `--env-steps` 60-s control steps (60 one-second physics intervals x 16
replicas each) in one jitted `lax.scan`, against the single-server env of the fleet's replica
task (`InferenceGymEnv.step` at its default configuration and the fleet file's workload at 1
req/s) at 16x as many envs for 60x as many one-second steps, so both sides simulate the same
replica-seconds. All programs are compiled first (timed apart), then timed in `--rounds`
interleaved rounds; reported: the medians of env steps/s, replica-seconds per wall second, and
the wall seconds one env's simulated fleet-day (1,440 control steps) costs at that width.
`--fleet-tasks A B` measures several fleet tasks in the same interleaved rounds (the rows of the
second are named "fleet-<n> <task>"), so their ratio is one run's.

    python scripts/bench_fleet.py --env --json experiments/results/fleet_env_speed.json
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
from inferencegym_jax import fleet, serving, tasks
from inferencegym_jax.env import InferenceGymEnv
from inferencegym_jax.fleet import tasks as fleet_tasks
from inferencegym_jax.traffic import workload

TASK = "InferenceGym-Task1-v2"
FLEET_TASK = "InferenceGym-Fleet1-v1"
DAY_STEPS = 1440  # [control steps of 60 s] one simulated day


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


def env_program(env: Any, params: Any, envs: int, steps: int, action: Any) -> Callable[[jax.Array], jax.Array]:
    """`envs` envs (vmapped) for `steps` calls of `env.step` (auto-reset included) with `action`
    from a reset, in one jitted scan: the summed rewards (so nothing is compiled away)."""
    def run(key: jax.Array) -> jax.Array:
        keys = jax.random.split(key, envs)
        _, states = jax.vmap(env.reset_env, in_axes=(0, None))(keys, params)

        def body(states: Any, t: jax.Array) -> tuple[Any, jax.Array]:
            ks = jax.vmap(lambda k: jax.random.fold_in(k, t))(keys)
            _, states, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, None, None))(ks, states, action, params)
            return states, jnp.sum(reward)

        return jnp.sum(jax.lax.scan(body, states, jnp.arange(steps))[1])

    return jax.jit(run)


def env_programs(sizes: list[int], steps: int, fleet_tasks_: list[str]
                 ) -> tuple[dict[str, Callable[[jax.Array], jax.Array]], dict[str, Any]]:
    """{name: program} of each fleet task's env at each size and of the single env (the first
    task's replica) at 16x the size, and {name: (envs, env steps, replica-seconds) per call}."""
    fleet_env, fleet_params = ig.make(fleet_tasks_[0])
    _, replica = fleet_tasks.fleet_task_config(fleet_tasks_[0])
    single_params = tasks.build_params(replica)
    single_env = InferenceGymEnv(single_params, replica.id)
    r, substeps = fleet_params.num_replicas, fleet_params.substeps
    dt = float(single_params.server.dt_s)
    full = jnp.asarray([r, 0], jnp.int32)
    programs, work = {}, {}
    fleets = {task: ig.make(task) for task in fleet_tasks_}
    for n in sizes:
        for task, (env, params) in fleets.items():
            name = f"fleet-{n}" if task == fleet_tasks_[0] else f"fleet-{n} {task.removeprefix('InferenceGym-')}"
            programs[name] = env_program(env, params, n, steps, full)
            work[name] = (n, n * steps, n * steps * substeps * r * dt)
        programs[f"single-{n * r}"] = env_program(single_env, single_params, n * r, steps * substeps,
                                                  single_params.default_action)
        work[f"single-{n * r}"] = (n * r, n * r * steps * substeps, n * r * steps * substeps * dt)
    return programs, work


def env_main(args: argparse.Namespace) -> None:
    """The `--env` measurement (module docstring). Beside each call's wall seconds, the process's
    CPU seconds (all threads): on a machine shared with other work, replica-seconds per CPU
    second still compares the programs' cost."""
    load_before = os.getloadavg()[0]
    programs, work = env_programs(args.env_sizes, args.env_steps, args.fleet_tasks)
    first = {name: timed(p, jax.random.key(0))[0] for name, p in programs.items()}  # compile included
    seconds: dict[str, list[float]] = {name: [] for name in programs}
    cpu: dict[str, list[float]] = {name: [] for name in programs}
    for r in range(args.rounds):
        for name, program in programs.items():
            c0 = time.process_time()
            seconds[name].append(timed(program, jax.random.key(r + 1))[0])
            cpu[name].append(time.process_time() - c0)
    rows = {}
    for name, (envs, env_steps, replica_s) in work.items():
        median, cpu_median = float(np.median(seconds[name])), float(np.median(cpu[name]))
        rows[name] = {"envs": envs, "env_steps_per_call": env_steps, "median_s": median, "all_s": seconds[name],
                      "env_steps_per_s": env_steps / median, "replica_s_per_s": replica_s / median,
                      "median_cpu_s": cpu_median, "replica_s_per_cpu_s": replica_s / cpu_median,
                      "first_call_s": first[name]}
        if name.startswith("fleet"):
            rows[name]["s_per_env_day"] = median * DAY_STEPS / (env_steps / envs) / envs
        print(f"{name:26s} {env_steps / median:>12,.1f} env steps/s {replica_s / median:>12,.0f} replica-s/s"
              + (f"  {rows[name]['s_per_env_day']:8.3f} s per env-day" if "s_per_env_day" in rows[name] else "")
              + f"  {replica_s / cpu_median:>10,.0f} replica-s/CPU-s  (first call {first[name]:.1f} s)", flush=True)
    result = {"fleet_task": args.fleet_tasks[0], "fleet_tasks": args.fleet_tasks,
              "control_steps_per_call": args.env_steps, "rounds": args.rounds,
              "rows": rows, "machine": f"{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}",
              "load_average_1m": [load_before, os.getloadavg()[0]],
              "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=1024)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--steps", type=int, default=32, help="one-second intervals per call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--routing", choices=("least_loaded", "equal"), default="least_loaded")
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--env", action="store_true", help="measure the fleet env against the single env")
    parser.add_argument("--env-sizes", type=int, nargs="+", default=[1, 16, 64, 256], help="fleet envs vmapped")
    parser.add_argument("--env-steps", type=int, default=10, help="60-s control steps per call")
    parser.add_argument("--fleet-tasks", nargs="+", default=[FLEET_TASK],
                        help="fleet tasks measured with --env (the first one's replica is the single env)")
    args = parser.parse_args()
    for name in ("fleets", "replicas", "steps", "rounds", "env_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    if min(args.env_sizes) < 1:
        parser.error(f"--env-sizes={args.env_sizes} must all be >= 1")
    if args.env:
        env_main(args)
        return
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
