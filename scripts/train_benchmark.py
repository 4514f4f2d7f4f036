"""End-to-end PPO training throughput: env steps per second with the updates included.

Usage: python scripts/train_benchmark.py [--task 1] [--envs 256 2048] [--epochs 4 2 1]
       [--updates 5] [--repeats 3] [--json PATH]

For each (num_envs, update_epochs) it times a jitted chunk of `updates` PPO updates (rollout of
num_steps intervals of num_envs envs, GAE, epochs x minibatches of Adam steps) from the
task's shipped config, median of `repeats` runs, compile time apart, and prints
env steps/s = num_envs * num_steps * updates / median seconds. The first row of each task is
the env alone (the same rollout length, random actions, no network) for the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from inferencegym_jax.training_setup import load_config, make_train


def _time(fn, *args, repeats: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), compile_s


def bench_env_only(trainer, updates: int, repeats: int) -> dict:
    config = trainer.config
    space = trainer.env.action_space(trainer.env_params)

    @jax.jit
    def run(runner):
        def body(state, k):
            k_a, k_s = jax.random.split(k)
            actions = jax.vmap(space.sample)(jax.random.split(k_a, config.num_envs))
            _, state, reward, *_ = trainer._env_step(k_s, state, actions)
            return state, reward

        keys = jax.random.split(runner.key, config.num_steps * updates)
        return jax.lax.scan(body, runner.env_state, keys)[1].sum()

    runner = trainer.jit_init(trainer.root_key())
    median, compile_s = _time(run, runner, repeats=repeats)
    return {"what": "env only", "median_s": median, "compile_s": compile_s}


def bench_train(trainer, updates: int, repeats: int) -> dict:
    runner = trainer.jit_init(trainer.root_key())
    hp = trainer.default_hparams()
    median, compile_s = _time(lambda r: trainer.jit_run_updates(r, hp, updates)[0].params, runner, repeats=repeats)
    return {"what": "PPO", "median_s": median, "compile_s": compile_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, nargs="+", default=[1])
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--epochs", type=int, nargs="+", default=None, help="default: the config's")
    parser.add_argument("--minibatch-size", type=int, default=None,
                        help="samples per minibatch (default: the config's num_minibatches)")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    rows = []
    for task in args.task:
        base = load_config(f"ppo_task{task}")
        for num_envs in args.envs:
            config = base.replace(num_envs=num_envs)
            if args.minibatch_size:
                config = config.replace(num_minibatches=max(1, config.batch_size // args.minibatch_size))
            trainer = make_train(config)
            row = bench_env_only(trainer, args.updates, args.repeats)
            rows.append({"task": task, "num_envs": num_envs, "epochs": "-", "minibatch": "-", **row})
            for epochs in args.epochs or [base.update_epochs]:
                trainer = make_train(config.replace(update_epochs=epochs))
                row = bench_train(trainer, args.updates, args.repeats)
                rows.append({"task": task, "num_envs": num_envs, "epochs": epochs,
                             "minibatch": config.minibatch_size, **row})
            for row in rows:
                if "steps_per_s" not in row:
                    row["steps_per_s"] = num_envs * config.num_steps * args.updates / row["median_s"]
            print(f"  done task {task} envs {num_envs}", flush=True)

    print(f"\nPPO training throughput ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__}, {jax.default_backend()}); num_steps and minibatches from configs/train/, "
          f"{args.updates} updates per timed call, median of {args.repeats}")
    print("| task | num_envs | what | epochs | minibatch | env steps/s | median s | compile s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['task']} | {r['num_envs']:,} | {r['what']} | {r['epochs']} | {r['minibatch']} "
              f"| {r['steps_per_s']:,.0f} "
              f"| {r['median_s']:.2f} | {r['compile_s']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    jnp.zeros(())  # initialise the backend before timing
    main()
