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
on its own thread. Multi-host: call `jax.distributed.initialize()` first in every process;
`jax.devices()` then lists every host's devices, and a mesh over them splits the batch across
hosts (see BENCHMARKS.md, "Multiple devices and hosts").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
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
    """Place every leaf of `tree` with its leading axis split across the mesh (host side)."""
    return jax.device_put(tree, leading_sharding(mesh))


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

    def wrapped(*args):
        specs = tuple(PartitionSpec() if i in replicated else PartitionSpec(AXIS) for i in range(len(args)))
        # check_vma=False: a block's scan carries start from replicated constants (a reset
        # state) and turn per-device; every output is per-device anyway.
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(AXIS), check_vma=False)(*args)

    return wrapped
