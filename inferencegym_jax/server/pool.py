"""The sessions of one task in one device pool, advanced together by one jitted, vmapped program.

A `TaskPool` holds the env state of up to `capacity` sessions of one task as one pytree whose
leaves have a leading slot axis. `advance(ops)` applies a batch of operations, each on its own
slot: start an episode (`Op.reset`) or run one interval with an action in physical units or
with one of the server's policies (`Op.policy`). The batch is padded to the next of a few fixed
sizes (`batch_sizes`), so after `warm_up` nothing compiles again, whatever the traffic; every
size is a multiple of `evaluate.BATCH_MULTIPLE`, so a session's numbers are bit-identical
whether it is stepped alone or among 63 others (XLA:CPU rounds a full SIMD width of envs the
same way whatever the width: see `evaluate.BATCH_MULTIPLE`).

Keys: a session started with seed s and episode e is episode e of the stream
root = jax.random.key(s) (or, with `Op.held_out`, root = evaluate.evaluation_key(s), the
held-out episodes `evaluate.evaluate` grades): (k_reset, k_env, k_policy) =
evaluate.stream_episode_keys(root, e), interval t steps with fold_in(k_env, t) and asks a policy
with fold_in(k_policy, t). So its trajectory is the one `gymnasium_env.GymnasiumEnv.reset(seed=s)`
starts (plain stream), and, stepped with a policy of the server, episode e of
`evaluate.run_episodes(env, params, policy, root, ...)`. `held_out` is a traced flag: both
streams share one program.

The pool is not donated to the program: a program that fails leaves every session as it was
(a copy of the pool costs ~1 kB per slot).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import evaluate, tasks
from inferencegym_jax.actions import GRID_SIZES, KNOBS, ServingAction, action_from_indices
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
from inferencegym_jax.evaluate import BATCH_MULTIPLE, Policy
from inferencegym_jax.observation import FEATURES
from inferencegym_jax.serving import IntervalMetrics

# Batch sizes up to which a batch of operations is padded (more are added for larger pools).
BASE_BATCH_SIZES = (BATCH_MULTIPLE, 64)
# Op.policy of an operation that applies the action it carries.
GIVEN_ACTION = 0


def batch_sizes(capacity: int) -> tuple[int, ...]:
    """The padded batch sizes of a pool of `capacity` slots: 8, 64 and the capacity rounded up
    to a multiple of 8, each at most that rounded capacity."""
    top = -(-capacity // BATCH_MULTIPLE) * BATCH_MULTIPLE
    return tuple(sorted({min(b, top) for b in BASE_BATCH_SIZES} | {top}))


@struct.dataclass
class Slots:
    """Every session's state; leading axis: slots (C,).

    Attributes:
      state: env.EnvState with (C, ...) leaves.
      k_env: uint32 (C, *key_data) key data of each slot's episode stepping key.
      k_policy: uint32 (C, *key_data) key data of each slot's policy key.
    """

    state: EnvState
    k_env: jax.Array
    k_policy: jax.Array


@struct.dataclass
class Ops:
    """A batch of operations (B,), one per distinct slot; padding rows have slot = capacity.

    Attributes:
      slot: int32 (B,), the slot each operation acts on.
      reset: bool (B,), True to start an episode (seed, episode), False to run an interval.
      seed: uint32 (B,), the stream's seed (reset only).
      episode: int32 (B,), the episode of the stream (reset only).
      held_out: bool (B,), True for the stream evaluate.evaluation_key(seed), False for
        jax.random.key(seed) (reset only).
      policy: int32 (B,), GIVEN_ACTION for `action`, i >= 1 for the pool's i-th policy.
      action: float32 (B, 5) [knob units, KNOBS order], the action of GIVEN_ACTION rows.
    """

    slot: jax.Array
    reset: jax.Array
    seed: jax.Array
    episode: jax.Array
    held_out: jax.Array
    policy: jax.Array
    action: jax.Array


@struct.dataclass
class Outcome:
    """What each operation of a batch produced; leading axis (B,).

    Attributes:
      obs: observation.Observation after the operation (the first one after a reset).
      reward: float32 (B,), the interval's reward in [-1, 1] (0 after a reset).
      reward_components: dict of float32 (B,), the reward's terms (reward.reward).
      truncated: bool (B,), the episode reached its horizon.
      metrics: serving.IntervalMetrics of the interval, (B,) leaves.
      applied: float32 (B, 5) [knob units], the knobs applied (after clipping and masking).
      clipped: bool (B, 5), knobs the env clipped, snapped or masked.
      offered_tokens: float32 (B,) [tokens], output tokens of the requests that arrived.
      time: int32 (B,) [intervals] since the episode began, after the operation.
    """

    obs: Any
    reward: jax.Array
    reward_components: dict[str, jax.Array]
    truncated: jax.Array
    metrics: IntervalMetrics
    applied: jax.Array
    clipped: jax.Array
    offered_tokens: jax.Array
    time: jax.Array


def physical_action(action: Any, params: EnvParams) -> jax.Array:
    """A policy's action (grid indices or a ServingAction) as float32 (5,) knob values; the
    knobs the task masks at their default, as the env would apply them."""
    if isinstance(action, ServingAction):
        values = action.as_vector()
    else:
        top = jnp.asarray(GRID_SIZES, jnp.int32) - 1
        values = action_from_indices(jnp.clip(jnp.asarray(action, jnp.int32), 0, top)).as_vector()
    return jnp.where(jnp.asarray(params.active_knobs), values, params.default_action.as_vector())


def _one(env: InferenceGymEnv, params: EnvParams, policies: tuple[Policy, ...], state: EnvState,
         k_env: jax.Array, k_policy: jax.Array, op: Ops) -> tuple[EnvState, jax.Array, jax.Array, Outcome]:
    """One operation on one slot: both branches are computed and `op.reset` selects."""
    plain = jax.random.key(op.seed)
    held_out = jax.random.fold_in(plain, evaluate.EVAL_STREAM)  # evaluate.evaluation_key(op.seed)
    root = jax.random.wrap_key_data(jnp.where(op.held_out, jax.random.key_data(held_out), jax.random.key_data(plain)))
    k_reset, k_env_new, k_policy_new = evaluate.stream_episode_keys(root, op.episode)
    obs0, state0 = env.reset_env(k_reset, params)
    k_env, k_policy = jax.random.wrap_key_data(k_env), jax.random.wrap_key_data(k_policy)
    obs = env.get_obs(state, params)
    t = state.time
    choices = [op.action] + [physical_action(p(jax.random.fold_in(k_policy, t), obs, params), params) for p in policies]
    action = jnp.stack(choices)[op.policy]
    obs1, state1, reward, _, truncated, info = env.step_env(
        jax.random.fold_in(k_env, t), state, ServingAction(*(action[i] for i in range(len(KNOBS)))), params)

    def pick(fresh: Any, stepped: Any) -> Any:
        return jax.tree_util.tree_map(lambda a, b: jnp.where(op.reset, a, b), fresh, stepped)

    outcome = Outcome(
        obs=pick(obs0, obs1),
        reward=jnp.where(op.reset, 0.0, reward),
        reward_components={k: jnp.where(op.reset, 0.0, v) for k, v in info["reward_components"].items()},
        truncated=~op.reset & truncated,
        metrics=info["metrics"],
        applied=info["applied_action"].as_vector(),
        clipped=info["clipped"],
        offered_tokens=jnp.sum(info["arrivals"].output_tokens),
        time=jnp.where(op.reset, state0.time, state1.time),
    )
    keys = (jax.random.key_data(k_env_new), jax.random.key_data(k_policy_new))
    new_k_env = jnp.where(op.reset, keys[0], jax.random.key_data(k_env))
    new_k_policy = jnp.where(op.reset, keys[1], jax.random.key_data(k_policy))
    return pick(state0, state1), new_k_env, new_k_policy, outcome


def _advance(env: InferenceGymEnv, params: EnvParams, policies: tuple[Policy, ...], slots: Slots,
             ops: Ops) -> tuple[Slots, Outcome]:
    """Gather the slots of `ops`, apply every operation (vmapped), scatter the slots back
    (padding rows, slot = capacity, are dropped)."""
    taken = jax.tree_util.tree_map(lambda x: x[ops.slot], slots)
    one = functools.partial(_one, env, params, policies)
    state, k_env, k_policy, outcome = jax.vmap(one)(taken.state, taken.k_env, taken.k_policy, ops)

    def put(pool: jax.Array, rows: jax.Array) -> jax.Array:
        return pool.at[ops.slot].set(rows, mode="drop")

    new = Slots(jax.tree_util.tree_map(put, slots.state, state), put(slots.k_env, k_env), put(slots.k_policy, k_policy))
    return new, outcome


class TaskPool:
    """Device-resident sessions of one task (thread-safe: one batch at a time).

    Args:
      task_id: a registered task id.
      capacity: slots (sessions of this task at once), >= 1.
      policies: name -> policy the sessions may step with (`Op.policy` = 1 + its position).
    """

    def __init__(self, task_id: str, capacity: int, policies: Mapping[str, Policy]):
        if capacity < 1:
            raise ValueError(f"capacity={capacity} must be >= 1")
        self.task_id = tasks.resolve_id(task_id)
        self.env, self.params = tasks.make(self.task_id)
        self.capacity = capacity
        self.batch_sizes = batch_sizes(capacity)
        self.policy_names: tuple[str, ...] = tuple(policies)
        self.policies = tuple(evaluate.as_policy_pytree(p) for p in policies.values())
        self.traces = 0  # compilations of the program: one per batch size, then never again
        self._program = jax.jit(self._traced_advance)
        self._default = np.asarray(self.params.default_action.as_vector(), np.float32)
        self._slot_lock = threading.Lock()  # the free list
        self._run_lock = threading.Lock()  # one batch at a time
        self._free = list(range(capacity - 1, -1, -1))
        self._slots = self._empty_slots()
        # How to unpack the program's output: set when the program is first traced (warm_up).
        self._outcome_layout: tuple[Any, list[tuple[tuple[int, ...], np.dtype]]] | None = None

    def _traced_advance(self, params: EnvParams, policies: tuple[Policy, ...], slots: Slots,
                        ops: Ops) -> tuple[Slots, jax.Array]:
        # Runs only while jit traces (chex.assert_max_traces keys its counter by call site, so
        # the pools of several tasks would share one count): a batch size past warm-up is a bug.
        self.traces += 1
        if self.traces > len(self.batch_sizes):
            raise AssertionError(f"{self.task_id}: pool program traced {self.traces} times, "
                                 f"expected one per batch size {self.batch_sizes}")
        slots, outcome = _advance(self.env, params, policies, slots, ops)
        self._outcome_layout = _layout(outcome)  # tracers have shapes: no second trace to learn them
        return slots, _pack(outcome)

    def _empty_slots(self) -> Slots:
        """Zeros of every slot's state and keys (a slot is reset before it steps; padding rows
        may step a zero state, and their results are dropped). From the state's shapes alone:
        nothing compiles (start-up)."""
        keys = jax.eval_shape(lambda: jax.random.key_data(jax.random.split(jax.random.key(0), self.capacity)))
        shapes = jax.eval_shape(lambda k: jax.vmap(self.env.reset_env, in_axes=(0, None))(
            jax.random.wrap_key_data(k), self.params)[1], keys)

        def zeros(leaf: jax.ShapeDtypeStruct) -> jax.Array:
            return jax.device_put(np.zeros(leaf.shape, leaf.dtype))

        data = zeros(keys)
        return Slots(jax.tree_util.tree_map(zeros, shapes), data, data)

    @property
    def horizon(self) -> int:
        """Intervals per episode."""
        return int(self.params.max_steps_in_episode)

    def policy_index(self, name: str) -> int:
        """`Op.policy` of a policy name; ValueError naming the allowed names."""
        if name not in self.policy_names:
            raise ValueError(f"policy={name!r}: allowed for {self.task_id}: {list(self.policy_names)}")
        return 1 + self.policy_names.index(name)

    def allocate(self) -> int | None:
        """A free slot, or None when all `capacity` are taken."""
        with self._slot_lock:
            return self._free.pop() if self._free else None

    def release(self, slot: int) -> None:
        """Give a slot back (its state stays until the next reset there)."""
        with self._slot_lock:
            if not 0 <= slot < self.capacity or slot in self._free:
                raise ValueError(f"slot {slot} is not in use")
            self._free.append(slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def warm_up(self) -> None:
        """Compile the program for every batch size (padding rows only: no slot changes)."""
        for size in self.batch_sizes:
            self.advance_arrays(self._padding(size))

    def _padding(self, size: int) -> dict[str, np.ndarray]:
        return {
            "slot": np.full(size, self.capacity, np.int32),
            "reset": np.zeros(size, bool),
            "seed": np.zeros(size, np.uint32),
            "episode": np.zeros(size, np.int32),
            "held_out": np.zeros(size, bool),
            "policy": np.zeros(size, np.int32),
            "action": np.tile(self._default, (size, 1)),
        }

    def advance(self, ops: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Apply operations on distinct slots (dicts with the fields of `Ops`, one row each;
        missing fields take the padding's values); one result dict per operation (`Outcome`'s
        fields as Python numbers and lists)."""
        if not ops:
            return []
        if len(ops) > self.batch_sizes[-1]:
            raise ValueError(f"{len(ops)} operations: at most {self.batch_sizes[-1]} per batch")
        slots = [int(op["slot"]) for op in ops]
        if len(set(slots)) != len(slots) or not all(0 <= s < self.capacity for s in slots):
            raise ValueError(f"operations must act on distinct slots in [0, {self.capacity}), got {slots}")
        size = next(b for b in self.batch_sizes if b >= len(ops))
        arrays = self._padding(size)
        for i, op in enumerate(ops):
            for name, value in op.items():
                arrays[name][i] = value
        out = self.advance_arrays(arrays)
        return [_row(out, i) for i in range(len(ops))]

    def advance_arrays(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Run the program on one padded batch; the Outcome as nested lists (host side)."""
        ops = Ops(**{name: jnp.asarray(value) for name, value in arrays.items()})
        with self._run_lock:
            slots, packed = self._program(self.params, self.policies, self._slots, ops)
            packed = np.asarray(packed)
            self._slots = slots
        assert self._outcome_layout is not None  # the call above traced the program
        return _as_lists(_unpack(packed, self._outcome_layout))


# Performance: the program returns its Outcome as one float32 (B, width) matrix, so the host
# fetches one array instead of one per leaf (~50 small transfers, ~0.5 ms of a 1.6 ms batch).
# float32 holds every leaf exactly: floats, bools and the int32 interval count (< 2**24).


def _pack(outcome: Outcome) -> jax.Array:
    """Every leaf of `outcome` as columns of one float32 (B, width) matrix (tree-leaf order)."""
    leaves = jax.tree_util.tree_leaves(outcome)
    return jnp.concatenate([leaf.reshape(leaf.shape[0], -1).astype(jnp.float32) for leaf in leaves], axis=1)


def _layout(outcome_shapes: Outcome) -> tuple[Any, list[tuple[tuple[int, ...], np.dtype]]]:
    """(treedef, per-leaf (trailing shape, dtype)) of an Outcome's shapes, to undo `_pack`."""
    leaves, treedef = jax.tree_util.tree_flatten(outcome_shapes)
    return treedef, [(tuple(leaf.shape[1:]), np.dtype(leaf.dtype)) for leaf in leaves]


def _unpack(packed: np.ndarray, layout: tuple[Any, list[tuple[tuple[int, ...], np.dtype]]]) -> Outcome:
    """The Outcome (NumPy leaves) of a `_pack`ed matrix."""
    treedef, shapes = layout
    leaves, column = [], 0
    for shape, dtype in shapes:
        width = int(np.prod(shape, dtype=np.int64))
        leaves.append(packed[:, column:column + width].reshape((packed.shape[0], *shape)).astype(dtype))
        column += width
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _as_lists(outcome: Outcome) -> dict[str, Any]:
    """An Outcome as {field: list over the batch} (nested dicts for obs, metrics, components)."""
    obs = {name: np.asarray(getattr(outcome.obs, name)).tolist() for name, _ in FEATURES}
    metrics = {f.name: np.asarray(getattr(outcome.metrics, f.name)).tolist()
               for f in dataclasses.fields(outcome.metrics)}
    return {
        "obs": obs,
        "reward": np.asarray(outcome.reward).tolist(),
        "reward_components": {k: np.asarray(v).tolist() for k, v in outcome.reward_components.items()},
        "truncated": np.asarray(outcome.truncated).tolist(),
        "metrics": metrics,
        "applied": np.asarray(outcome.applied).tolist(),
        "clipped": np.asarray(outcome.clipped).tolist(),
        "offered_tokens": np.asarray(outcome.offered_tokens).tolist(),
        "time": np.asarray(outcome.time).tolist(),
    }


def _row(lists: dict[str, Any], i: int) -> dict[str, Any]:
    """Row i of `_as_lists`' output."""
    return {k: ({name: v[i] for name, v in value.items()} if isinstance(value, dict) else value[i])
            for k, value in lists.items()}
