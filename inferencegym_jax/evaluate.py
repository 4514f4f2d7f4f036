"""Key-seeded evaluation: N episodes of any policy or controller in one jitted, vmapped call.

A policy is a function `policy(key, obs, params) -> action` (an int32 (5,) index vector or a
`ServingAction`) for one env; anything it needs (network weights, normaliser) is closed over,
or, for a policy that is a pytree with a `__call__` (the baselines are), held in its leaves:
those are arguments of the compiled program, so such policies share one compilation. A
controller (`protocols.Controller`: the switching rule, the MPC) also remembers what it saw: an
init of its memory, an act, an update from what the step returned. `play_episode` is the one
episode loop of the package; it plays either (a policy through `as_controller`).

Reproducibility contract:
  * episode i uses `jax.random.fold_in(key, i)`, so its result does not depend on how many
    episodes are run, nor on how they are split into batches or devices;
  * evaluation and training keys come from disjoint streams of the same seed:
    `training_key(seed) = fold_in(key(seed), 0)` and `evaluation_key(seed) = fold_in(key(seed), 1)`.
    A trainer that derives every key from `training_key` never sees an evaluation episode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
from flax import struct

from inferencegym_jax import sharding, ttft_tally
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.env import EnvParams, Observation
from inferencegym_jax.protocols import Controller, Seen, ServingEnvironment, StepOutput
from inferencegym_jax.serving import IntervalMetrics

Policy = Callable[[jax.Array, Observation, EnvParams], Any]
TRAIN_STREAM, EVAL_STREAM = 0, 1


def training_key(seed: int) -> jax.Array:
    """Root key of everything a trainer draws for `seed`."""
    return jax.random.fold_in(jax.random.key(seed), TRAIN_STREAM)


def evaluation_key(seed: int) -> jax.Array:
    """Root key of held-out evaluation episodes for `seed` (disjoint from `training_key`)."""
    return jax.random.fold_in(jax.random.key(seed), EVAL_STREAM)


@struct.dataclass
class Trajectory:
    """Per-interval records of a batch of episodes; leading axes (episodes, time).

    Attributes:
      reward: float32 (N, T), reward per interval.
      reward_components: dict of float32 (N, T): throughput, latency, violations, cost.
      metrics: serving.IntervalMetrics with (N, T) leaves (class_share (N, T, 3)).
      action: ServingAction applied, (N, T) leaves.
      clipped: bool (N, T, 5), knobs the env clipped or masked.
      offered_tokens: float32 (N, T) [tokens], output tokens of the requests that arrived.
      valid: bool (N, T), True for intervals inside the episode (all of them here: episodes
        run exactly to the horizon; graders accept shorter, masked ones).

    Every leaf has the (N, T) axes, so a trajectory can be sliced in time with one tree_map. An
    episode's request TTFTs (a per-episode quantity) travel beside it: `run_episodes(...,
    with_ttft=True)` returns them, `grade_trajectory(..., ttft=...)` reads them.
    """

    reward: jax.Array
    reward_components: dict[str, jax.Array]
    metrics: IntervalMetrics
    action: ServingAction
    clipped: jax.Array
    offered_tokens: jax.Array
    valid: jax.Array


def episode_keys(key: jax.Array, start: int, count: int) -> jax.Array:
    """Keys of episodes start .. start + count - 1: fold_in(key, i)."""
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(start, start + count))


def stream_episode_keys(root: jax.Array, episode: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(k_reset, k_env, k_policy) of episode `episode` of the stream `root` (a typed key ()):
    `split(fold_in(root, episode), 3)`, the keys `run_episode` gives episode `episode` of
    `run_episodes(..., root, ...)`. Interval t steps with fold_in(k_env, t) and asks the policy
    with fold_in(k_policy, t). The gymnasium adapter and the server start episodes with it."""
    k_reset, k_env, k_policy = jax.random.split(jax.random.fold_in(root, episode), 3)
    return k_reset, k_env, k_policy


def interval_record(reward: jax.Array, info: dict[str, Any]) -> Trajectory:
    """One interval's Trajectory entry (no time axis) from a step's reward and info."""
    return Trajectory(
        reward=reward,
        reward_components=info["reward_components"],
        metrics=info["metrics"],
        action=info["applied_action"],
        clipped=info["clipped"],
        offered_tokens=jnp.sum(info["arrivals"].output_tokens),
        valid=jnp.ones((), bool),
    )


@struct.dataclass
class FunctionPolicy:
    """A plain policy function as a pytree with no leaves: `run_episodes` passes every policy
    to its jitted program as an argument, and a function is part of the program (static)."""

    fn: Policy = struct.field(pytree_node=False)

    def __call__(self, key: jax.Array, obs: Observation, params: EnvParams) -> Any:
        return self.fn(key, obs, params)


def as_policy_pytree(policy: Any) -> Any:
    """`policy` if it is a pytree (its arrays are then arguments of the compiled program, so
    policies that differ only in them share it), else wrapped in a FunctionPolicy."""
    return FunctionPolicy(policy) if jax.tree_util.all_leaves([policy]) else policy


@struct.dataclass
class PolicyController:
    """A stateless policy as a `protocols.Controller`: no memory, the action `policy(key, obs,
    params)`. The policy is a child of the pytree (a pytree policy's arrays stay traced)."""

    policy: Any

    def init(self, key: jax.Array, seen: Seen, params: EnvParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: EnvParams) -> tuple[Any, tuple[()]]:
        return self.policy(key, seen.obs, params), memory

    def update(self, memory: tuple[()], step: StepOutput, params: EnvParams) -> tuple[()]:
        return memory


def is_controller(policy: Any) -> bool:
    """Whether `policy` meets `protocols.Controller` (has init, act and update)."""
    return all(callable(getattr(policy, name, None)) for name in ("init", "act", "update"))


def as_controller(policy: Policy | Controller) -> Controller:
    """`policy` if it is a Controller, else the stateless policy as one (`PolicyController`)."""
    return cast(Controller, policy) if is_controller(policy) else PolicyController(as_policy_pytree(policy))


def default_record(seen: Seen, memory: Any, step: StepOutput) -> Trajectory:
    """`run_episode`'s record of an interval: its Trajectory entry (`interval_record`)."""
    return interval_record(step.reward, step.info)


def play_episode(env: ServingEnvironment, params: EnvParams, policy: Policy | Controller, key: jax.Array,
                 num_steps: int, record: Callable[[Seen, Any, StepOutput], Any] = default_record,
                 ) -> tuple[Seen, Any, ttft_tally.TtftTally]:
    """The one episode loop: `num_steps` intervals of `policy` (a Policy or a protocols.Controller)
    from a reset with `key` (no auto-reset inside), the keys of `stream_episode_keys`:
    (k_reset, k_env, k_policy) = split(key, 3), interval t steps with fold_in(k_env, t) and asks
    the controller with fold_in(k_policy, t) (its init gets `key` itself).

    Returns: (what the controller would be shown after the last interval (t = num_steps), the
    records stacked on a leading time axis: `record(seen, memory, step)` of each interval, with
    the memory after the controller's act and the step's output; the episode's request TTFTs,
    every interval's `info["first_token"]` folded by `ttft_tally.fold`; empty for an env whose info
    has none, a fleet's).
    """
    controller = as_controller(policy)
    k_reset, k_env, k_policy = jax.random.split(key, 3)
    obs, state = env.reset_env(k_reset, params)
    memory = controller.init(key, Seen(jnp.int32(0), obs, state), params)

    def body(carry, t):
        obs, state, memory, tally = carry
        seen = Seen(t, obs, state)
        action, memory = controller.act(memory, jax.random.fold_in(k_policy, t), seen, params)
        obs, nxt, reward, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)
        step = StepOutput(t, state, obs, nxt, reward, info)
        out = record(seen, memory, step)
        if "first_token" in info:  # a fleet's info has none (static: the info's keys are the env's)
            tally = ttft_tally.fold(tally, info["first_token"])
        return (obs, nxt, controller.update(memory, step, params), tally), out

    carry = (obs, state, memory, ttft_tally.empty())
    (obs, state, _, tally), records = jax.lax.scan(body, carry, jnp.arange(num_steps))
    return Seen(jnp.int32(num_steps), obs, state), records, tally


def run_episode(env: ServingEnvironment, params: EnvParams, policy: Policy | Controller, key: jax.Array,
                num_steps: int, with_ttft: bool = False) -> Any:
    """One episode of `num_steps` intervals of `policy` (a Policy or a protocols.Controller) from a
    reset with `key` (no auto-reset inside): `play_episode`'s Trajectory, or with `with_ttft`
    (static) the pair (Trajectory, the episode's `ttft_tally.TtftTally`)."""
    _, trajectory, tally = play_episode(env, params, policy, key, num_steps)
    return (trajectory, tally) if with_ttft else trajectory


# Episodes per batch are a multiple of this. XLA:CPU vectorises a batch of envs over its SIMD
# lanes, and a width that fills whole vectors rounds like any other such width, where a ragged
# one (1, 3, 5, 6, 7, 9, 63 episodes) rounds its remainder differently (rewards ~1e-7, scores
# ~2e-7 apart). 8 float32 lanes: AVX2; AVX-512 and NEON widths divide it or are met by it.
BATCH_MULTIPLE = 8

# Compiled programs are cached by the env (equal envs compare equal: `InferenceGymEnv.__eq__`),
# the policy's structure and static fields, num_steps and the shapes of params and keys; so
# evaluating the same task again, from a fresh `make`, compiles nothing.
@functools.partial(jax.jit, static_argnames=("env", "num_steps", "with_ttft"))
def _run_batch(env, params, policy, keys, num_steps, with_ttft=False):
    return jax.vmap(lambda k: run_episode(env, params, policy, k, num_steps, with_ttft))(keys)


@functools.partial(jax.jit, static_argnames=("env", "num_steps", "mesh", "with_ttft"))
def _run_batch_sharded(env, params, policy, keys, num_steps, mesh, with_ttft=False):
    def run(k: jax.Array, p: EnvParams, pol: Any) -> Any:
        return jax.vmap(lambda k1: run_episode(env, p, pol, k1, num_steps, with_ttft))(k)

    return sharding.split_leading(run, mesh, replicated=(1, 2))(keys, params, policy)


def run_episodes(
    env: ServingEnvironment,
    params: EnvParams,
    policy: Policy | Controller,
    key: jax.Array,
    num_episodes: int,
    *,
    batch_size: int | None = None,
    num_steps: int | None = None,
    devices: int | Sequence[jax.Device] | None = None,
    with_ttft: bool = False,
) -> Any:
    """Episodes 0 .. num_episodes-1 of `policy`, episode i from fold_in(key, i): their Trajectory,
    or with `with_ttft` (Trajectory, `ttft_tally.TtftTally` with leaves (N, ...): each episode's
    request TTFTs, for `grade_trajectory`).

    Args:
      batch_size: episodes per jitted call (default: all at once). Batches run padded to a
        multiple of BATCH_MULTIPLE episodes (later episodes, dropped), so on CPU results are
        bit-identical whatever the batch size (tests/test_graders.py checks widths 1 to 16).
      num_steps: intervals per episode (default: the task horizon).
      devices: split each batch of episodes across this many devices (or these devices) with
        `sharding.split_leading`; None runs on the default device. A batch is padded to a
        multiple of BATCH_MULTIPLE x the device count. Results equal one device's to float32
        rounding (the partitioned program may fuse a multiply-add differently). With several
        processes (`jax.distributed`) the devices must include every process's (None: all of
        them), every process makes the same call, and each gets the whole result
        (`sharding.gather`).
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes={num_episodes} must be >= 1")
    num_steps = int(num_steps or int(params.max_steps_in_episode))
    batch_size = int(batch_size or num_episodes)
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    mesh = None if devices is None else sharding.batch_mesh(devices)
    if mesh is not None:
        sharding.require_every_process(mesh, "devices")
    policy = as_policy_pytree(policy)

    def run_batch(keys: jax.Array, start: int, count: int) -> Any:
        if mesh is None:
            return _run_batch(env, params, policy, keys, num_steps, with_ttft)
        out = _run_batch_sharded(env, params, policy, sharding.shard_leading(keys, mesh), num_steps, mesh, with_ttft)
        return sharding.gather(out)  # several processes: each gets every episode

    lanes = BATCH_MULTIPLE * (1 if mesh is None else mesh.size)
    return in_batches(run_batch, key, num_episodes, batch_size, lanes)


def in_batches(run_batch: Callable[[jax.Array, int, int], Any], key: jax.Array, num_episodes: int,
               batch_size: int, lanes: int = BATCH_MULTIPLE) -> Any:
    """Episodes 0 .. num_episodes-1 of `key` in batches of `batch_size`: run_batch(keys, start,
    count) runs episodes start .. start + count - 1 with the keys fold_in(key, i) of those and of
    the next episodes up to a multiple of `lanes` (whose results are dropped, so on CPU a result
    does not depend on the batch size); the batches' results (leading axis: episodes) concatenated."""
    chunks = []
    for start in range(0, num_episodes, batch_size):
        count = min(batch_size, num_episodes - start)
        out = run_batch(episode_keys(key, start, count + (-count) % lanes), start, count)
        chunks.append(jax.tree_util.tree_map(lambda x, count=count: x[:count], out))
    if len(chunks) == 1:
        return chunks[0]
    return jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *chunks)


# ----------------------------------------------------------------------------- graded evaluation


@struct.dataclass
class EvalResult:
    """Graded evaluation of one policy (host-side numpy arrays, one entry per episode).

    Attributes:
      scores: float (N,), grader scores in [0, 1].
      breakdown: dict of float (N,), grader components in [0, 1].
      metrics: dict of float (N,), per episode: mean tokens_per_s; ttft_p50_s, ttft_p90_s,
        ttft_p99_s and ttft_mean_s [s] over the episode's requests (`grade_trajectory`'s `ttft`;
        NaN without it); tpot_s [s/token], the output-token-weighted mean of the
        intervals' TPOT (a request's TPOT is the token-weighted mean over the intervals it
        decodes in); slo_violation_rate (1 - SLO attainment), cost_per_1k [$], total cost_usd
        [$] and output_tokens [tokens], served_fraction, knob_changes.
      feedback: one readable line per episode.
    """

    scores: Any
    breakdown: dict[str, Any]
    metrics: dict[str, Any]
    feedback: list[str] = struct.field(pytree_node=False, default_factory=list)


def grade_trajectory(trajectory: Trajectory, params: EnvParams, task_id: str,
                     ttft: ttft_tally.TtftTally | None = None) -> EvalResult:
    """Grade a batch of episodes and collect the key metrics (host side); `ttft`: the episodes'
    request TTFTs (`run_episodes(..., with_ttft=True)`), else the TTFT columns are NaN."""
    import numpy as np

    from inferencegym_jax import graders

    g = graders.grade(trajectory, params, task_id)
    m = trajectory.metrics
    valid = trajectory.valid.astype(jnp.float32)
    def per_episode(x: jax.Array) -> jax.Array:
        return jnp.sum(valid * x, axis=1) / jnp.maximum(jnp.sum(valid, axis=1), 1.0)

    episodes = valid.shape[0]
    if ttft is None:
        ttft_q = jnp.full((episodes, len(ttft_tally.QUANTILES)), jnp.nan)
        ttft_mean = jnp.full((episodes,), jnp.nan)
    else:
        ttft_q, ttft_mean = ttft_tally.quantiles(ttft), ttft_tally.mean(ttft)  # p50, p90, p99
    tokens = valid * m.output_tokens
    episode_tokens = jnp.sum(tokens, axis=1)
    metrics = {
        "tokens_per_s": per_episode(m.tokens_per_s),
        "ttft_p50_s": ttft_q[:, 0],
        "ttft_p90_s": ttft_q[:, 1],
        "ttft_p99_s": ttft_q[:, 2],
        "ttft_mean_s": ttft_mean,
        "tpot_s": jnp.where(episode_tokens > 0, jnp.sum(tokens * m.tpot_s, axis=1) / jnp.maximum(episode_tokens, 1e-9),
                            jnp.nan),
        "slo_violation_rate": 1.0 - g.slo_attainment,
        "cost_per_1k": g.cost_per_1k,
        "cost_usd": jnp.sum(valid * m.cost_usd, axis=1),
        "output_tokens": episode_tokens,
        "served_fraction": g.served_fraction,
        "knob_changes": g.knob_changes,
    }
    def to_np(tree: Any) -> Any:
        return jax.tree_util.tree_map(np.asarray, tree)

    return EvalResult(
        scores=np.asarray(g.score),
        breakdown=to_np(g.breakdown),
        metrics=to_np(metrics),
        feedback=graders.feedback(g, task_id),
    )


def evaluate(
    env: ServingEnvironment,
    params: EnvParams,
    policy: Policy | Controller,
    key: jax.Array,
    num_episodes: int,
    task_id: str,
    *,
    batch_size: int | None = None,
    devices: int | Sequence[jax.Device] | None = None,
) -> EvalResult:
    """Run and grade `num_episodes` episodes of `policy` (episode i from fold_in(key, i)),
    split across `devices` as `run_episodes` does (with several processes: every process grades
    every episode)."""
    traj, ttft = run_episodes(env, params, policy, key, num_episodes, batch_size=batch_size, devices=devices,
                              with_ttft=True)
    return grade_trajectory(traj, params, task_id, ttft)


def confidence_interval_95(values: Any) -> float:
    """Half-width of the normal-approximation 95 % confidence interval of the mean.

    The normal quantile (1.96) is within 1 % of Student's t for the >= 256 episodes the
    reported tables use; with fewer than 30 episodes it is optimistic.
    """
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return float("nan")
    return float(1.959964 * values.std(ddof=1) / np.sqrt(values.size))


def summarize(results: dict[str, EvalResult]) -> Any:
    """One row per policy: mean score, its 95 % CI, breakdown means and key metrics (pandas;
    the TTFT columns are means over episodes of each episode's request-level statistic)."""
    import numpy as np
    import pandas as pd

    rows = []
    for name, r in results.items():
        row = {
            "policy": name,
            "episodes": int(np.size(r.scores)),
            "score": float(np.mean(r.scores)),
            "ci95": confidence_interval_95(r.scores),
        }
        row.update({f"{k}": float(np.mean(v)) for k, v in r.breakdown.items()})
        row.update({
            "tokens/s": float(np.mean(r.metrics["tokens_per_s"])),
            "ttft_p50_s": float(np.mean(r.metrics["ttft_p50_s"])),
            "ttft_p99_s": float(np.mean(r.metrics["ttft_p99_s"])),
            "ttft_mean_s": float(np.mean(r.metrics["ttft_mean_s"])),
            "slo_violation_rate": float(np.mean(r.metrics["slo_violation_rate"])),
            # over all episodes' tokens: a mean of per-episode ratios would be dominated by
            # episodes that served (almost) nothing
            "cost_per_1k": float(np.sum(r.metrics["cost_usd"]) / max(np.sum(r.metrics["output_tokens"]) / 1e3, 1e-9)),
        })
        rows.append(row)
    return pd.DataFrame(rows).set_index("policy")
