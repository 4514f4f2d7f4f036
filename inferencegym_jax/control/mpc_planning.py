"""The MPC's choice at a plan (`inferencegym_jax.control.mpc`, module docstring): the futures its
rollouts step with, the state each rollout starts from, and the candidate (or the base policy)
whose rollouts score best.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax.control import switch_rule, trace_analogs, traffic_belief
from inferencegym_jax.control.mpc_config import MPCConfig
from inferencegym_jax.control.mpc_rollout import OBJECTIVES, Handover
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
from inferencegym_jax.traffic import workload


@struct.dataclass
class Planner:
    """What a plan needs besides the moment it plans at: the controller's fixed part.

    Attributes:
      candidates: int32 (C, 5) grid-index actions the plan chooses among (row 0 the best static).
      base: the base policy (`mpc` module docstring, "Rollout with a base policy"), or None: a
        candidate is held for the whole rollout.
      env: the serving env the rollouts step (static).
      config: the settings (static).
      grader: the task grader's name, the "grade" objective's (static).
      num_steps: [intervals] the episode's length (static).
    """

    candidates: jax.Array
    base: switch_rule.SwitchRule | None
    env: InferenceGymEnv = struct.field(pytree_node=False)
    config: MPCConfig = struct.field(pytree_node=False)
    grader: str = struct.field(pytree_node=False, default="throughput")
    num_steps: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class Moment:
    """The moment a plan is made at: interval t of an episode.

    Attributes:
      state: the serving env's true state before interval t.
      past: the episode's graders.SUM_FIELDS sums (float32 ()) before interval t (`mpc.start_memory`,
        `mpc.advance`).
      belief: the traffic belief given the arrivals before interval t (a causal plan's hidden
        traffic state); None: the true one.
      t: int32 () [intervals].
      k_env, k_plan: the episode's step and planning keys.
      base_memory: the base policy's memory before interval t (switch_rule.SwitchRule.init,
        .update); () without one.
    """

    state: EnvState
    past: dict
    belief: traffic_belief.TrafficBelief | None
    t: jax.Array
    k_env: jax.Array
    k_plan: jax.Array
    base_memory: tuple = ()


def future_keys(k_env: jax.Array, k_plan: jax.Array, t: jax.Array, horizon: int, samples: int,
                clairvoyant: bool) -> jax.Array:
    """The keys the rollouts planned at interval t step with: typed keys (futures, horizon).

    Clairvoyant: one future, the episode's own keys fold_in(k_env, t + h). Causal: `samples`
    futures fold_in(fold_in(fold_in(k_plan, t), s), h), from a stream the episode never steps with.
    """
    ahead = jnp.arange(horizon)
    if clairvoyant:
        return jax.vmap(lambda h: jax.random.fold_in(k_env, t + h))(ahead)[None]
    k_t = jax.random.fold_in(k_plan, t)
    return jax.vmap(lambda s: jax.vmap(lambda h: jax.random.fold_in(jax.random.fold_in(k_t, s), h))(ahead))(
        jnp.arange(samples))


# Fold-in tag of a causal plan's trace offset where the trace has no past to replay (`_planning_state`).
FORECAST_OFFSET_TAG = 1


# Fold-in tag of a causal plan's draw of the hidden traffic state from its belief (`_planning_state`).
BELIEF_SAMPLE_TAG = 2



def _planning_state(state: EnvState, params: EnvParams, keys: jax.Array, clairvoyant: bool,
                    num_steps: int, horizon: int, belief: traffic_belief.TrafficBelief | None = None,
                    analog: tuple[jax.Array, jax.Array] | None = None) -> EnvState:
    """The state a rollout on future `keys` (`horizon` intervals) starts from: the true one,
    except in a causal plan
      * on a replayed trace (which draws nothing from keys, so every rollout would see the
        episode's own future): the stretch of the trace that starts at `analog`'s time [s] on
        the trace's clock where it has one (`trace_analogs.analog_starts`: (start, found),
        float32 (), bool ()), else the trace's own last `horizon` intervals replayed again, a
        persistence forecast (`_recent_trace_offset`);
      * with a `belief`: the hidden traffic state (a periodic burst's phase, an MMPP burst's
        on/off) drawn from the posterior given the arrivals seen so far (`traffic_belief`).
    """
    if clairvoyant:
        return state
    if belief is not None:
        k_sample = jax.random.fold_in(keys[0], BELIEF_SAMPLE_TAG)
        workload = traffic_belief.sample(belief, k_sample, state.workload, params.workload)
        state = dataclasses.replace(state, workload=workload)
    if params.workload.schedule != "trace":
        return state
    offset = _recent_trace_offset(state, params, keys, num_steps, horizon)
    if analog is not None:
        start_s, found = analog  # the replay reads the trace at offset + time x dt (workload._trace_arrivals)
        offset = jnp.where(found, start_s - state.time.astype(jnp.float32) * params.server.dt_s, offset)
    return dataclasses.replace(state, workload=dataclasses.replace(state.workload, phase_s=offset))


def _trace_now(state: EnvState, params: EnvParams) -> jax.Array:
    """[s] float32 (): the start of `state`'s interval on the replayed trace's clock."""
    return state.workload.phase_s + state.time.astype(jnp.float32) * params.server.dt_s


def _recent_trace_offset(state: EnvState, params: EnvParams, keys: jax.Array, num_steps: int,
                         horizon: int) -> jax.Array:
    """[s] float32 (): the replay offset under which a rollout from `state` replays, in its
    `horizon` intervals, the trace's `horizon` intervals just before `state`'s: the recent past
    repeats (a persistence forecast, the trace's own regime: its load is correlated over tens of
    seconds, README "Graders and baselines"). Those intervals are in the past of the server, if
    partly before the episode began (a server that ran before it saw them). Where the trace has
    fewer than `horizon` intervals before `state`, another stretch of it, from an offset drawn
    from the future's first key as a reset draws one.
    """
    lookback = horizon * params.server.dt_s
    now = _trace_now(state, params)
    u = jax.random.uniform(jax.random.fold_in(keys[0], FORECAST_OFFSET_TAG))
    draws = jnp.stack([u, jnp.float32(0.0)])  # a reset's draws: the offset, no burst (a trace has none)
    elsewhere = workload.init_from_draws(draws, params.workload, num_steps * params.server.dt_s).phase_s
    return jnp.where(now >= lookback, state.workload.phase_s - lookback, elsewhere)


def plan(planner: Planner, params: EnvParams, now: Moment) -> jax.Array:
    """The controller's choice at interval `now.t`: the candidate (int32 (5,), a row of
    `planner.candidates`) with the best mean score over the futures (`mpc` module docstring)."""
    score = _scorer(planner, params, now)
    return planner.candidates[jnp.argmax(jax.vmap(lambda action: jnp.mean(score(action, None)))(planner.candidates))]


def plan_with_base(planner: Planner, params: EnvParams, now: Moment) -> tuple[jax.Array, jax.Array]:
    """The rollout controller's choice at interval `now.t` (`mpc` module docstring, "Rollout with a
    base policy"): (follow: bool (), the base policy's rollout scored best, so it decides the next
    `replan_every` intervals; else action: int32 (5,), the candidate to hold for them, whose
    rollout (held `replan_every` intervals, then the base policy) scored best). Ties go to the base.
    With config.margin > 0 a candidate may replace the base only if its mean gain over the base's
    rollout on the same futures exceeds `margin` standard errors of that paired gain (`mpc`
    module docstring, "A margin before leaving the base"); 0: the best mean wins.
    """
    base = planner.base
    if base is None:
        raise ValueError("base=None: plan_with_base needs a base policy (use plan)")
    score = _scorer(planner, params, now)
    candidates, margin = planner.candidates, planner.config.margin
    actions = jnp.concatenate([candidates[:1], candidates])  # row 0: the base's own rollout (its action unused)
    holds = jnp.full(actions.shape[0], planner.config.replan_every, jnp.int32).at[0].set(0)
    per_future = jax.vmap(lambda action, h: score(action, Handover(base, now.base_memory, now.t, h)))(
        actions, holds)
    if margin == 0.0:  # margin is static
        scores = jnp.mean(per_future, axis=1)
    else:
        gain = per_future - per_future[:1]  # (options, futures), paired with the base's rollout
        mean = jnp.mean(gain, axis=1)
        standard_error = jnp.std(gain, axis=1, ddof=1) / np.sqrt(gain.shape[1])
        scores = jnp.where(mean > margin * standard_error, mean, 0.0)  # the base's row is 0: none clears, it wins
    best = jnp.argmax(scores)
    return best == 0, actions[best]


def _scorer(planner: Planner, params: EnvParams,
            now: Moment) -> Callable[[jax.Array, Handover | None], jax.Array]:
    """The plan's scoring: a function (action int32 (5,), handover: Handover | None) -> float32
    (futures,), the objective of the rollout from `now.state` at interval `now.t` on each future."""
    cfg, num_steps, state, t = planner.config, planner.num_steps, now.state, now.t
    clairvoyant, horizon, samples = cfg.clairvoyant, cfg.horizon, cfg.futures
    ahead = jnp.arange(horizon)
    valid = (t + ahead) < num_steps
    analogs, trace = None, params.workload.trace
    if params.workload.schedule == "trace" and trace is not None:  # a trace schedule always has its trace
        if clairvoyant or cfg.trace_forecast == "persistence":
            samples = 1  # the episode's own future, or its recent past (`_recent_trace_offset`): one future
        else:
            analogs = trace_analogs.analog_starts(trace, _trace_now(state, params), horizon, samples,
                                                  params.server.dt_s, cfg.analog_window)
    futures = future_keys(now.k_env, now.k_plan, t, horizon, samples, clairvoyant)
    score = functools.partial(OBJECTIVES[cfg.objective], planner.env, params, valid=valid, past=now.past,
                              grader=planner.grader, is_open=(t + horizon) < num_steps)

    def future_scores(action: jax.Array, handover: Handover | None) -> jax.Array:
        def one_future(keys, analog):
            state_h = _planning_state(state, params, keys, clairvoyant, num_steps, horizon, now.belief, analog)
            return score(state_h, action, keys, handover=handover)

        return jax.vmap(one_future)(futures, analogs)

    return future_scores
