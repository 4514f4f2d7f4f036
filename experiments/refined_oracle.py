"""A stronger oracle bound: a clairvoyant controller's episode refined block by block.

An offline study (experiments/README.md), not part of the package: experiments/mpc_gap.py
--refine-block imports it from beside itself.

The receding-horizon oracle (`mpc`, clairvoyant) scores each candidate as if held for `horizon`
intervals and then forgotten, so it misjudges what pays over longer than its window (a prefill
GPU kept on through a minute of bursts) and undoes its own choices. Refinement takes the
configurations that oracle applied in an episode (the schedule, one per interval) and improves
them with the rollout algorithm (Bertsekas, Tsitsiklis and Wu, "Rollout algorithms for
combinatorial optimization", Journal of Heuristics 3(3), 1997), the schedule as the base
policy: for each block of `block` intervals in turn, every candidate configuration is tried for
the whole block, the rest of the schedule kept as it is, and the whole episode is scored exactly
on the episode's own keys, fold_in(k_env, t), to its last interval (the grader's unnormalised
value from the summed statistics, `graders.SUM_FIELDS`). The best option replaces the block;
keeping the block as it is is one option and wins ties, so no pass lowers the episode's grade
(up to float rounding of the sums): the refined oracle is at least the oracle it starts from on
every episode.

An ORACLE BOUND like its base: it sees every future arrival. Episode i of
`refined_episodes(..., key, base, ...)` replays episode i of `mpc.run_mpc_episodes(..., key, ...)`
and of `evaluate.run_episodes(..., key, ...)` (the same keys), so gains pair episode by episode.
Cost: (num_steps / block) x (candidates + 1) rollouts of half an episode on average, per pass.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import graders
from inferencegym_jax.actions import indices_from_action
from inferencegym_jax.control.mpc_rollout import step_sums
from inferencegym_jax.env import EnvParams, InferenceGymEnv
from inferencegym_jax.evaluate import BATCH_MULTIPLE, Trajectory, in_batches, run_episode
from inferencegym_jax.protocols import Seen, StepOutput

KEEP = -1  # an option's first index: keep the schedule's own configurations in the block


def refine_schedule(env: InferenceGymEnv, params: EnvParams, candidates: jax.Array, key: jax.Array,
                    schedule: jax.Array, block: int, passes: int, grader: str) -> jax.Array:
    """The refined schedule (module docstring): int32 (num_steps, 5) grid indices.

    Args:
      candidates: int32 (C, 5) grid indices tried for each block.
      key: the episode's key (its reset and step keys, as `evaluate.run_episode`'s).
      schedule: int32 (num_steps, 5), the configuration applied in each interval.
      block: [intervals] per block; divides num_steps.
    """
    num_steps = schedule.shape[0]
    k_reset, k_env, _ = jax.random.split(key, 3)
    _, start = env.reset_env(k_reset, params)
    times = jnp.arange(num_steps)
    step_keys = jax.vmap(lambda t: jax.random.fold_in(k_env, t))(times)
    options = jnp.concatenate([jnp.full((1, 5), KEEP, jnp.int32), candidates])

    def step(state, sums, t, action):
        _, nxt, _, _, _, info = env.step_env(step_keys[t], state, action, params)
        add = step_sums(info, params, ~state.server.started)
        return nxt, {k: sums[k] + add[k] for k in graders.SUM_FIELDS}

    def episode_value(state, sums, first, option, schedule):
        """The grade of the episode that plays `option` in intervals first .. first + block - 1
        and `schedule` after them, from `state` and `sums` at interval `first`."""
        def body(carry, t):
            in_block = (t < first + block) & (option[0] != KEEP)
            action = jnp.where(in_block, option, schedule[t])
            # t and first are not vmapped, so the cond skips the intervals before the block.
            return jax.lax.cond(t >= first, lambda: step(*carry, t, action), lambda: carry), None

        (_, sums), _ = jax.lax.scan(body, (state, sums), times)
        return graders.value_from_sums(sums, params, grader)

    def one_pass(schedule, _):
        def refine_block(carry, b):
            state, sums, schedule = carry
            first = b * block
            values = jax.vmap(lambda o: episode_value(state, sums, first, o, schedule))(options)
            best = options[jnp.argmax(values)]  # KEEP is first: it wins ties
            in_block = first + jnp.arange(block)
            schedule = schedule.at[in_block].set(jnp.where(best[0] != KEEP, best, schedule[in_block]))
            (state, sums), _ = jax.lax.scan(lambda c, t: (step(*c, t, schedule[t]), None), (state, sums), in_block)
            return (state, sums, schedule), None

        sums = {k: jnp.float32(0.0) for k in graders.SUM_FIELDS}
        (_, _, schedule), _ = jax.lax.scan(refine_block, (start, sums, schedule), jnp.arange(num_steps // block))
        return schedule, None

    schedule, _ = jax.lax.scan(one_pass, schedule, None, length=passes)
    return schedule


@struct.dataclass
class Schedule:
    """A fixed schedule as a `protocols.Controller`: interval t serves `actions[t]`, whatever it sees.

    Attributes:
      actions: int32 (num_steps, 5), the configuration of each interval (grid indices).
    """

    actions: jax.Array

    def init(self, key: jax.Array, seen: Seen, params: EnvParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: EnvParams) -> tuple[jax.Array, tuple[()]]:
        return self.actions[seen.t], memory

    def update(self, memory: tuple[()], step: StepOutput, params: EnvParams) -> tuple[()]:
        return memory


def replay(env: InferenceGymEnv, params: EnvParams, key: jax.Array, schedule: jax.Array) -> Trajectory:
    """The episode of `key` that applies `schedule` (int32 (num_steps, 5)); `evaluate.run_episode`'s."""
    return run_episode(env, params, Schedule(schedule), key, schedule.shape[0])


@functools.partial(jax.jit, static_argnames=("env", "block", "passes", "grader"))
def _refine_batch(env, params, candidates, keys, schedules, block, passes, grader):
    def one(key, schedule):
        return replay(env, params, key, refine_schedule(env, params, candidates, key, schedule, block, passes, grader))

    return jax.vmap(one)(keys, schedules)


def refined_episodes(env: InferenceGymEnv, params: EnvParams, task_id: str, key: jax.Array, base: Trajectory,
                     candidates: np.ndarray, *, block: int, passes: int = 1,
                     batch_size: int = BATCH_MULTIPLE) -> Trajectory:
    """Episodes 0 .. N-1 of `key` with the configurations of `base` (a clairvoyant controller's
    Trajectory of those episodes, leaves (N, num_steps, ...)) refined (module docstring).

    Args:
      candidates: int32 (C, 5) grid indices tried for every block (say `mpc.candidate_actions`).
      block: [intervals] per block, >= 1, dividing the episode's length.
      passes: refinement passes over the episode, >= 1.
    """
    # (N, num_steps, 5); a knob the task masks at index 0, as in the candidates (its applied value
    # is the task default whatever the index).
    schedules = jnp.where(jnp.asarray(params.active_knobs), indices_from_action(base.action), 0).astype(jnp.int32)
    num_episodes, num_steps = schedules.shape[:2]
    if block < 1 or passes < 1 or batch_size < 1 or num_steps % block:
        raise ValueError(f"block={block}, passes={passes} and batch_size={batch_size} must be >= 1, and block "
                         f"must divide the episode's {num_steps} intervals")
    cands = jnp.asarray(candidates, jnp.int32)
    grader = graders.grader_name(task_id)

    def run_batch(keys: jax.Array, start: int, count: int) -> Trajectory:
        batch = schedules[start:start + count]  # padded with the last one's to the keys' width
        batch = jnp.concatenate([batch, jnp.repeat(batch[-1:], len(keys) - count, axis=0)])
        return _refine_batch(env, params, cands, keys, batch, block, passes, grader)

    return in_batches(run_batch, key, num_episodes, batch_size)
