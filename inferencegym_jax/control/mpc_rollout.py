"""Scoring one rollout of the MPC (`inferencegym_jax.control.mpc`, module docstring, "Objectives"):
a candidate configuration held from a state for a window of intervals (or until it hands over to a
base policy), scored by the task grader's value of the episode so far plus the window ("grade") or
by the window's summed reward ("reward").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from inferencegym_jax import graders
from inferencegym_jax.control import switch_rule
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv


@struct.dataclass
class Handover:
    """Where a rollout hands over to the base policy (`mpc` module docstring, "Rollout with a base policy").

    Attributes:
      rule: the base policy, a switch_rule.SwitchRule.
      memory: the rule's memory at the plan's interval (switch_rule.start_memory: float32
        (window,) [tokens], bool ()).
      t: int32 (), the plan's interval.
      hold: int32 () [intervals], the rollout holds its candidate for its first `hold` intervals
        and the rule decides from then on; 0: the base policy's own rollout.
    """

    rule: switch_rule.SwitchRule
    memory: tuple[jax.Array, jax.Array]
    t: jax.Array
    hold: jax.Array


def _rollout_action(action: jax.Array, handover: Handover | None, memory: tuple, h: jax.Array,
                    dt_s: jax.Array) -> tuple[tuple, jax.Array]:
    """(the rule's memory, int32 (5,) the configuration) for the rollout's interval h: `action`,
    or from the handover on, the rule's choice. Without a handover the memory is ()."""
    if handover is None:
        return memory, action
    memory, by_rule = switch_rule.decide(handover.rule, memory, handover.t + h, dt_s)
    return memory, jnp.where(h >= handover.hold, by_rule, action)


def _rollout_memory(handover: Handover | None, memory: tuple, h: jax.Array, info: dict) -> tuple:
    """The rule's memory after the rollout's interval h, whose step returned `info`."""
    return memory if handover is None else switch_rule.remember(handover.rule, memory, handover.t + h, info)


def _window_reward(env: InferenceGymEnv, params: EnvParams, state: EnvState, action: jax.Array, keys: jax.Array, *,
                   valid: jax.Array, past: dict, grader: str, is_open: jax.Array,
                   handover: Handover | None = None) -> jax.Array:
    """Summed reward of holding `action` from `state` for len(keys) intervals (or until the
    `handover`), counting only the intervals inside the episode (`valid`); float32. (`past`,
    `grader`, `is_open`: unused.)"""

    def body(carry, inputs):
        state, memory = carry
        key, h = inputs
        memory, act = _rollout_action(action, handover, memory, h, params.server.dt_s)
        _, state, reward, _, _, info = env.step_env(key, state, act, params)
        return (state, _rollout_memory(handover, memory, h, info)), reward

    start = () if handover is None else handover.memory
    _, rewards = jax.lax.scan(body, (state, start), (keys, jnp.arange(keys.shape[0])))
    return jnp.sum(valid * rewards)


def step_sums(info: dict, params: EnvParams, first: jax.Array) -> dict:
    """One interval's contribution to the episode's graders.SUM_FIELDS (float32 scalars) from
    its step's `info`; `first` (bool): the interval is the episode's first, whose configuration
    has no predecessor to count a change against."""
    sums = graders.interval_sums(info["metrics"], jnp.sum(info["arrivals"].output_tokens),
                                 info["applied_action"].quant_tier, params)
    not_first = 1.0 - first.astype(jnp.float32)
    return {**sums, "changes": info["reward_components"]["stability"], "pairs": not_first,
            "num_valid": jnp.float32(1.0)}


def _window_grade(env: InferenceGymEnv, params: EnvParams, state: EnvState, action: jax.Array, keys: jax.Array, *,
                  valid: jax.Array, past: dict, grader: str, is_open: jax.Array,
                  handover: Handover | None = None) -> jax.Array:
    """The grader's value of the episode so far (`past` sums) plus holding `action` from `state`
    for len(keys) intervals (or until the `handover`; those inside the episode, `valid`), with
    the backlog left at the end counted as decided violations when the episode goes on
    (`is_open`); float32."""

    def body(carry, inputs):
        state, memory = carry
        key, ok, h = inputs
        memory, act = _rollout_action(action, handover, memory, h, params.server.dt_s)
        _, nxt, _, _, _, info = env.step_env(key, state, act, params)
        sums = step_sums(info, params, ~state.server.started)
        return (nxt, _rollout_memory(handover, memory, h, info)), {k: ok * v for k, v in sums.items()}

    start = () if handover is None else handover.memory
    (end, _), window = jax.lax.scan(body, (state, start),
                                    (keys, valid.astype(jnp.float32), jnp.arange(keys.shape[0])))
    total = {k: past[k] + jnp.sum(window[k]) for k in graders.SUM_FIELDS}
    server = end.server
    backlog = jnp.sum(server.queue.count)
    if params.server.slo_accounting != "admission":  # the running requests already late
        backlog = backlog + server.on_time.late_seqs
    backlog = jnp.where(is_open, backlog, 0.0)
    total = {**total, "decided": total["decided"] + backlog, "violations": total["violations"] + backlog}
    return graders.value_from_sums(total, params, grader)


OBJECTIVES = {"grade": _window_grade, "reward": _window_reward}

