"""Split a batch of envs (or a sweep axis) across devices with `jax.sharding`.

The building block behind `evaluate.run_episodes(..., devices=...)` and the trainer's
`num_devices` option. One 1-D `Mesh` over the devices, axis "batch"; arrays whose leading axis
is a batch (envs, episodes, sweep members) are split along it, everything else is replicated.

    mesh = sharding.batch_mesh(4)                                 # the first 4 devices
    run = sharding.split_leading(jax.vmap(run_episode), mesh)     # each device: its block
    out = run(keys)                                               # keys (N,), N % 4 == 0

    # inside a jitted program (GSPMD partitions the rest, collectives included):
    state = sharding.constrain_leading(state, mesh)

Two ways, one result:
  * `split_leading` (`jax.shard_map`): each device runs the per-block program on its own
    block, no communication. For embarrassingly parallel work: evaluation episodes, env-only
    rollouts, independent sweep members.
  * `constrain_leading` (`jax.lax.with_sharding_constraint`) inside `jit`: XLA partitions the
    program, inserting the collectives it needs (a PPO update's gradient mean over the batch).

Results equal a single device's for the same keys, to float32 rounding: each env, episode or
sweep member is a function of its own key only (`evaluate`'s fold_in contract), and no reduction
crosses the batch in `split_leading`; but XLA compiles the partitioned program with its own
fusions, so a multiply-add may round differently in the last place (tests/test_sharding.py, on 4
host devices: TTFT quantiles within 1 ulp per step, everything else bit-identical).

CPU: XLA makes one device per process unless told otherwise; set
`XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts to get N, each running
on its own thread.

Several processes (hosts): call `initialize_distributed()` (or `jax.distributed.initialize()`)
first in every process; `jax.devices()` then lists every process's devices, `batch_mesh()` spans
them all, and every process runs the same program (the same keys, the same calls). A mesh must
then hold devices of every process (`require_every_process`). `shard_leading` builds a global
array from the whole value each process holds, and `gather` gives every process the whole of a
result that is spread over the processes (before host use: `np.asarray`, checkpoints, grading).
`evaluate.run_episodes(devices=...)` does both itself. The trainer's program (`num_devices` =
the global device count) needs neither for its input, the root key, and leaves the env state
spread over the processes: `gather(runner)` before host use. tests/test_multiprocess.py: 2
processes on 127.0.0.1 give the numbers of one process with 2 devices, bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"


def batch_mesh(devices: int | Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh, axis `AXIS`, over `devices`: a count (the first n of `jax.devices()`), a list,
    or None for all of them.

    Raises:
      ValueError: a count outside [1, jax.device_count()].
    """
    if devices is None:
        devices = jax.devices()
    elif isinstance(devices, int):
        if not 1 <= devices <= jax.device_count():
            raise ValueError(
                f"devices={devices} must be in [1, {jax.device_count()}] (jax.device_count(); on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts)"
            )
        devices = jax.devices()[:devices]
    return Mesh(np.asarray(list(devices)), (AXIS,))


def leading_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over the mesh, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def shard_leading(tree: Any, mesh: Mesh) -> Any:
    """Place every leaf of `tree` with its leading axis split across the mesh (host side).

    With several processes every process passes the same whole `tree` and places its own
    devices' blocks of it (`jax.make_array_from_callback`; PRNG keys travel as their key data).
    """
    target = leading_sharding(mesh)
    if target.is_fully_addressable:
        return jax.device_put(tree, target)
    return jax.tree_util.tree_map(lambda x: _global_from_whole(x, target), tree)


def _global_from_whole(x: Any, target: NamedSharding) -> jax.Array:
    """The global array `target` makes of `x`, whole in every process, from this process's blocks."""
    if _is_key(x):
        return jax.random.wrap_key_data(_global_from_whole(jax.random.key_data(x), target), impl=jax.random.key_impl(x))
    whole = np.asarray(x)
    return jax.make_array_from_callback(whole.shape, target, lambda index: whole[index])


def gather(tree: Any) -> Any:
    """`tree` with every leaf whole in this process: a leaf spread over other processes' devices
    is gathered (`multihost_utils.process_allgather`, a collective: every process must call it)
    onto the default device; every other leaf is returned as it is (one process: all of them).
    """

    def whole(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if _is_key(x):
            return jax.random.wrap_key_data(whole(jax.random.key_data(x)), impl=jax.random.key_impl(x))
        return jnp.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree_util.tree_map(whole, tree)


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def require_every_process(mesh: Mesh, name: str) -> None:
    """ValueError naming the option `name` unless the mesh holds a device of every process.

    A program over some processes' devices only cannot run in the others, which would wait for
    it (or fail) in the next collective; one process always passes.
    """
    held = {d.process_index for d in mesh.devices.flat}
    if len(held) < jax.process_count():
        raise ValueError(
            f"{name}: {mesh.size} devices, on processes {sorted(held)} of {jax.process_count()}; with several "
            f"processes split over devices of every process (all jax.device_count()={jax.device_count()} of them)"
        )


def constrain_leading(tree: Any, mesh: Mesh) -> Any:
    """Inside jit: ask XLA to keep every leaf's leading axis split across the mesh."""
    return jax.lax.with_sharding_constraint(tree, leading_sharding(mesh))


def split_leading(fn: Callable, mesh: Mesh, replicated: Sequence[int] = ()) -> Callable:
    """`fn` run by every device on its block of the leading axis (`jax.shard_map`).

    Args:
      fn: a function of arrays (pytrees) that all carry the same leading batch axis, except
        the positional arguments listed in `replicated`, which every device gets whole; its
        outputs carry the batch axis too. `fn` must treat the batch elements independently.
      replicated: positions of arguments without a batch axis (params, hyperparameters).
    """

    def wrapped(*args: Any) -> Any:
        specs = tuple(PartitionSpec() if i in replicated else PartitionSpec(AXIS) for i in range(len(args)))
        # check_vma=False: a block's scan carries start from replicated constants (a reset
        # state) and turn per-device; every output is per-device anyway.
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(AXIS), check_vma=False)(*args)

    return wrapped


# The variables of a plain launch: JAX itself reads JAX_COORDINATOR_ADDRESS; the count and the
# rank are named after it (jax.distributed.initialize takes them as arguments only).
LAUNCH_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def initialize_distributed(environ: Mapping[str, str] | None = None) -> bool:
    """Join a multi-process run if the environment describes one; call before any other JAX call.

    * JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID all
      set: `jax.distributed.initialize` with them (one command per process, any launcher);
    * else, inside a SLURM step of several tasks (`srun`, SLURM_NTASKS > 1):
      `jax.distributed.initialize()`, which reads SLURM's variables (and JAX_COORDINATOR_ADDRESS,
      if set) itself;
    * else nothing: one process.

    Args:
      environ: the variables to read (default `os.environ`).
    Returns:
      True if it initialised `jax.distributed`.
    Raises:
      ValueError: some but not all of LAUNCH_VARIABLES set outside SLURM, or a count or rank that
        is not an integer with 0 <= JAX_PROCESS_ID < JAX_NUM_PROCESSES.
    """
    environ = os.environ if environ is None else environ
    given = [name for name in LAUNCH_VARIABLES if environ.get(name)]
    if len(given) == len(LAUNCH_VARIABLES):
        count, rank = (_int_variable(environ, name) for name in LAUNCH_VARIABLES[1:])
        if not 0 <= rank < count:
            raise ValueError(f"JAX_PROCESS_ID={rank} must be in [0, JAX_NUM_PROCESSES={count})")
        jax.distributed.initialize(environ["JAX_COORDINATOR_ADDRESS"], num_processes=count, process_id=rank)
        return True
    if environ.get("SLURM_JOB_ID") and _int_variable(environ, "SLURM_NTASKS", default=1) > 1:
        jax.distributed.initialize()
        return True
    if given:
        missing = [name for name in LAUNCH_VARIABLES if name not in given]
        raise ValueError(f"{', '.join(given)} set but not {', '.join(missing)}: a launch sets all three")
    return False


def _int_variable(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    """The environment variable `name` as an int; ValueError naming it if it is not one."""
    text = environ.get(name)
    if text is None and default is not None:
        return default
    try:
        return int(str(text))
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} must be an integer") from None
