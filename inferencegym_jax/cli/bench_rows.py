"""The rows of `inferencegym bench`, measured: env-only JAX and NumPy, the user loop (in a child
process), PPO end to end and grading. Each `bench_*` returns one row, a dict with `impl`, `task`,
`num_envs`, `steps_per_sec`, `compile_s` [s], `median_s` [s], `steps`, `repeats`, `devices`,
`memory_mb` [MiB] and `rss_mb` [MiB], plus its own fields; `inferencegym_jax.cli.bench`
documents what each row times.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencegym_jax.cli.common import ppo_config_name

ACTION_TABLE = 16  # distinct steps of random actions, cycled
USER_LOOP = "jax-user-loop"

# The child process of the user-loop row: a call, so that the loop itself is `user_loop` below.
_USER_LOOP_CHILD = (
    "import sys; from inferencegym_jax.cli.bench_rows import user_loop_child; user_loop_child(sys.argv[1:])"
)


def _rss_mb() -> float:
    """This process's peak resident set so far, MiB. Linux: VmHWM of /proc/self/status (KiB),
    which starts afresh in a child process, where `ru_maxrss` keeps the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024.0
    except (OSError, StopIteration, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


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
    from inferencegym_jax.training_setup import load_config, make_train
    from training.config import shipped_configs

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

