"""The day-ahead reservation env: each day, commit the next day's hourly reserved replicas before
its demand is revealed (issue 42, item 3; after llm_capacity_env's task).

    env, params = inferencegym_jax.make("InferenceGym-Reserve1-v1")
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, reservations, params)

gymnax 1.0's call shape, as `fleet.env.FleetEnv`: `step` = `step_env` + auto-reset, with
`info["final_observation"]`.

An episode is one service over the trace's days (`fleet.servegen`: 14 days of 10-min request
rates of real clients): the service is a random subset of the split's clients (each in with
`inclusion_prob`), scaled so that its mean rate over the `history_days` days before the episode's
first committed day is what `history_mean_replicas` replicas serve at the autoscaler's target.
Each step the policy sees the last `history_days` days' hourly peaks, then commits for the next
day; the day is played (`fleet.reservation_day`: reserved replicas, an on-demand autoscaler on top
with its provisioning delay) and revealed. The committed days are `first_day` ..
`first_day + decision_days - 1` of the trace (the split's: training and held-out days differ);
after them the episode ends (terminated: a fixed horizon that the observation's days_left shows).

A commitment (the action) is int (24,) reserved replicas per hour, each in [0, max_reserved].
One outside that range is refused: inside jit the step returns the state unchanged, reward 0,
not done, info["refused"] True; outside jit it raises ValueError. Nothing is counted for it.

Reward of a day (so an episode's return is minus the sum of its days' J):
    J = cost / (max_reserved x 24 h x on-demand price) + slo_weight x missed / arrived requests,
slo_weight = 1 / (1 - slo_target), the exchange rate of Fleet1 (`fleet.env`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax import spaces
from inferencegym_jax.env import TaskIdentity, auto_reset
from inferencegym_jax.fleet.reservation_day import (
    DAY_WINDOWS,
    HOURS_PER_DAY,
    MAX_LAG_WINDOWS,
    WINDOWS_PER_HOUR,
    DayOutcome,
    DayPrices,
    day_outcome,
    on_demand_wanted,
)
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.traffic import sampling

DAYS_PER_WEEK = 7
# Upper clip of the observation's rates, in units of max_reserved replicas at the target: twice
# the most a policy may reserve; only the rarest client bursts reach it.
OBS_RATE_CLIP = 2.0


@struct.dataclass
class ReservationParams:
    """A reservation task (a pytree; the day counts and `max_reserved` are static).

    Attributes:
      client_rates: float32 (C, W) [req/s], each client's mean rate per 10-min window.
      client_pool: float32 (C,), 1 for the clients this split draws services from, else 0.
      inclusion_prob: float32 (), the chance each pool client is in an episode's service.
      history_mean_replicas: float32 () [replicas], the scale: the service's mean rate over the
        history_days days before first_day is what this many replicas serve at prices.hpa_target.
      prices: reservation_day.DayPrices, the replica and its prices.
      slo_target: float32 (), sets slo_weight.
      max_reserved: static int R, the most replicas one hour may reserve.
      history_days: static int, days the policy sees before each commitment.
      first_day: static int, the trace day (0-based) of the first commitment, >= history_days.
      decision_days: static int, commitments per episode (days first_day .. first_day +
        decision_days - 1).
    """

    client_rates: Array
    client_pool: Array
    inclusion_prob: Array
    history_mean_replicas: Array
    prices: DayPrices
    slo_target: Array
    max_reserved: int = struct.field(pytree_node=False, default=16)
    history_days: int = struct.field(pytree_node=False, default=7)
    first_day: int = struct.field(pytree_node=False, default=7)
    decision_days: int = struct.field(pytree_node=False, default=4)

    @property
    def slo_weight(self) -> Array:
        """float32 (), 1 / (1 - slo_target)."""
        return 1.0 / (1.0 - self.slo_target)

    @property
    def max_steps_in_episode(self) -> int:
        """Commitments per episode."""
        return self.decision_days


@struct.dataclass
class DayTotals:
    """Totals of a day or an episode (float32 scalars): arrived and missed [requests],
    reserved_gpu_h and on_demand_gpu_h [GPU-hours], cost_usd [$], cost_j [1] (the reward's J)."""

    arrived: Array
    missed: Array
    reserved_gpu_h: Array
    on_demand_gpu_h: Array
    cost_usd: Array
    cost_j: Array

    @classmethod
    def zeros(cls) -> DayTotals:
        z = jnp.zeros((), jnp.float32)
        return cls(z, z, z, z, z, z)


@struct.dataclass
class ReservationState:
    """Attributes:
      rate: float32 (W,) [req/s], the episode's service per window over the whole trace.
      day: int32 () [days], commitments made so far.
      wanted_tail: float32 (MAX_LAG_WINDOWS,) [replicas], on-demand replicas asked for in the last
        windows before the next day.
      last: DayTotals of the last day played (zeros before the first).
      episode: DayTotals summed over the episode.
    """

    rate: Array
    day: Array
    wanted_tail: Array
    last: DayTotals
    episode: DayTotals


@struct.dataclass
class ReservationObservation:
    """Attributes:
      history: float32 (history_days, 24) [1], the last days' hourly peak rate (busiest window)
        over what max_reserved replicas serve at the target, oldest day first.
      day_of_week: int32 () [day], the next day's index in the trace mod 7 (its weekday is not
        published: fleet.servegen).
      days_left: float32 () [1], commitments left over decision_days.
      last_gpu_cost: float32 () [1], the last day's GPU term of J.
      last_missed: float32 () [1], the last day's missed requests over its arrivals.
    """

    history: Array
    day_of_week: Array
    days_left: Array
    last_gpu_cost: Array
    last_missed: Array


class ReservationEnv(TaskIdentity[ReservationParams]):
    """Day-ahead capacity reservation (module docstring)."""

    def __init__(self, default_params: ReservationParams, env_id: str = "InferenceGym-ReserveCustom-v1"):
        if not isinstance(default_params, ReservationParams):
            raise ValueError("params must be a fleet.reservation.ReservationParams, got "
                             f"{type(default_params).__name__}")
        self._default_params = default_params
        self.env_id = env_id

    def action_space(self, params: ReservationParams | None = None) -> spaces.MultiDiscrete:
        """24 hourly reserved replica counts, each in [0, max_reserved]."""
        p = params or self._default_params
        return spaces.MultiDiscrete((p.max_reserved + 1,) * HOURS_PER_DAY,
                                    tuple(f"hour_{h:02d}" for h in range(HOURS_PER_DAY)))

    def observation_space(self, params: ReservationParams | None = None) -> spaces.Box:
        """The flat observation's space (`flatten_observation`)."""
        p = params or self._default_params
        return spaces.Box(0.0, OBS_RATE_CLIP, (obs_size(p),), jnp.float32)

    def reset(self, key: jax.Array, params: ReservationParams | None = None
              ) -> tuple[ReservationObservation, ReservationState]:
        """A fresh episode: a service drawn from the split's clients (module docstring)."""
        return self.reset_env(key, params or self._default_params)

    def reset_env(self, key: jax.Array, params: ReservationParams) -> tuple[ReservationObservation, ReservationState]:
        p = params
        self._check_days(p)
        u = sampling.uniforms(key, p.client_rates.shape[0])
        member = (u < p.inclusion_prob).astype(jnp.float32) * p.client_pool
        rate = member @ p.client_rates
        first = p.first_day * DAY_WINDOWS
        history = rate[first - p.history_days * DAY_WINDOWS: first]
        scale = safe_div(p.history_mean_replicas * p.prices.hpa_target, jnp.mean(history))
        rate = (rate * scale).astype(jnp.float32)
        before = rate[first - MAX_LAG_WINDOWS - 1: first]
        state = ReservationState(
            rate=rate,
            day=jnp.zeros((), jnp.int32),
            # Before the first commitment the fleet ran on the autoscaler alone (nothing reserved).
            wanted_tail=on_demand_wanted(before[:-1], jnp.zeros((), jnp.float32), p.prices.hpa_target),
            last=DayTotals.zeros(),
            episode=DayTotals.zeros(),
        )
        return self.get_obs(state, p), state

    def step(self, key: jax.Array, state: ReservationState, action: Any, params: ReservationParams | None = None
             ) -> tuple[ReservationObservation, ReservationState, Array, Array, Array, dict[str, Any]]:
        """One commitment (`step_env`), then an auto-reset where the episode ended.

        Args:
          action: int (24,) reserved replicas per hour of the next day.

        Returns obs, state, reward (float32; 0 for a refused commitment), terminated (the last
        commitment was made), truncated (always False), info: `refused` (bool), `day`
        (DayTotals of the day played; zeros if refused), `reward_components` (gpu, slo),
        `discount` and `final_observation`.

        Raises:
          ValueError: outside jit, an action that is not 24 integers in [0, max_reserved].
        """
        params = params or self._default_params
        check_commitment(action, params)
        obs, next_state, reward, terminated, truncated, info = self.step_env(key, state, action, params)
        info["final_observation"] = obs
        obs, next_state = auto_reset(terminated | truncated, self.reset_env(key, params), (obs, next_state))
        return obs, next_state, reward, terminated, truncated, info

    def step_env(self, key: jax.Array, state: ReservationState, action: Any, params: ReservationParams
                 ) -> tuple[ReservationObservation, ReservationState, Array, Array, Array, dict[str, Any]]:
        """One commitment without auto-reset; deterministic (the key is the reset's)."""
        p = params
        a = jnp.asarray(action)
        valid = jnp.all((a >= 0) & (a <= p.max_reserved))
        reserved = jnp.clip(a, 0, p.max_reserved).astype(jnp.int32)
        outcome = self.play_day(state, reserved, p)
        gpu = outcome.cost_usd / (p.max_reserved * HOURS_PER_DAY * p.prices.on_demand_price)
        slo = p.slo_weight * safe_div(outcome.missed, outcome.arrived)
        day = DayTotals(outcome.arrived, outcome.missed, outcome.reserved_gpu_h, outcome.on_demand_gpu_h,
                        outcome.cost_usd, (gpu + slo).astype(jnp.float32))
        played = ReservationState(
            rate=state.rate,
            day=state.day + 1,
            wanted_tail=outcome.on_demand_wanted[-MAX_LAG_WINDOWS:],
            last=day,
            episode=jax.tree_util.tree_map(jnp.add, state.episode, day),
        )
        next_state = jax.tree_util.tree_map(lambda new, old: jnp.where(valid, new, old), played, state)
        zeros = DayTotals.zeros()
        reward = jnp.where(valid, -day.cost_j, 0.0).astype(jnp.float32)
        terminated = valid & (played.day >= p.decision_days)
        info = {
            "refused": ~valid,
            "day": jax.tree_util.tree_map(lambda x, z: jnp.where(valid, x, z), day, zeros),
            "reward_components": {"gpu": jnp.where(valid, gpu, 0.0), "slo": jnp.where(valid, slo, 0.0)},
            "discount": 1.0 - terminated.astype(jnp.float32),
        }
        return self.get_obs(next_state, p), next_state, reward, terminated, jnp.zeros((), bool), info

    @staticmethod
    def play_day(state: ReservationState, reserved: Array, params: ReservationParams) -> DayOutcome:
        """The next day's outcome under `reserved` (int32 (24,)); `reservation_day.day_outcome`."""
        first = (params.first_day + state.day) * DAY_WINDOWS
        rate = jax.lax.dynamic_slice(state.rate, (first,), (DAY_WINDOWS,))
        return day_outcome(rate, state.rate[first - 1], state.wanted_tail, reserved, params.prices)

    def get_obs(self, state: ReservationState, params: ReservationParams) -> ReservationObservation:
        """The observation of a state (ReservationObservation)."""
        p = params
        days = p.history_days
        start = (p.first_day - days + state.day) * DAY_WINDOWS  # the history ends where the next day starts
        seen = jax.lax.dynamic_slice(state.rate, (start,), (days * DAY_WINDOWS,))
        hourly_peak = seen.reshape(days, HOURS_PER_DAY, WINDOWS_PER_HOUR).max(axis=-1)
        return ReservationObservation(
            history=hourly_peak / (p.max_reserved * p.prices.hpa_target),
            day_of_week=jnp.mod(p.first_day + state.day, DAYS_PER_WEEK).astype(jnp.int32),
            days_left=(p.decision_days - state.day).astype(jnp.float32) / p.decision_days,
            last_gpu_cost=state.last.cost_j - p.slo_weight * safe_div(state.last.missed, state.last.arrived),
            last_missed=safe_div(state.last.missed, state.last.arrived),
        )

    def flatten_observation(self, obs: ReservationObservation, params: ReservationParams | None = None) -> Array:
        """float32 (..., obs_size): the history, a one-hot day of the week, days_left, the last
        day's GPU cost and its missed fraction times slo_weight; clipped to [0, OBS_RATE_CLIP]."""
        p = params or self._default_params
        lead = obs.history.shape[:-2]
        values = [
            obs.history.reshape(*lead, -1),
            jax.nn.one_hot(obs.day_of_week, DAYS_PER_WEEK, dtype=jnp.float32),
            obs.days_left[..., None], obs.last_gpu_cost[..., None], (obs.last_missed * p.slo_weight)[..., None],
        ]
        flat = jnp.concatenate([jnp.asarray(v, jnp.float32) for v in values], axis=-1)
        return jnp.clip(jnp.nan_to_num(flat), 0.0, OBS_RATE_CLIP)

    @staticmethod
    def _check_days(params: ReservationParams) -> None:
        """ValueError if the history or the committed days fall outside the trace (static ints)."""
        days = params.client_rates.shape[-1] // DAY_WINDOWS
        p = params
        if not (p.history_days <= p.first_day and p.first_day + p.decision_days <= days and p.decision_days >= 1):
            raise ValueError(f"committed days {p.first_day}..{p.first_day + p.decision_days - 1} after "
                             f"history_days={p.history_days}: allowed first day >= history_days and last day <= "
                             f"{days - 1} (the trace has {days} days)")


def obs_size(params: ReservationParams) -> int:
    """Length of the flat observation."""
    return params.history_days * HOURS_PER_DAY + DAYS_PER_WEEK + 3


def check_commitment(action: Any, params: ReservationParams) -> None:
    """ValueError for a concrete action that is not 24 integers in [0, max_reserved]; a traced
    action passes (the step refuses it inside jit)."""
    if isinstance(action, jax.core.Tracer):
        return
    a = np.asarray(action)
    if a.shape != (HOURS_PER_DAY,) or not np.issubdtype(a.dtype, np.integer) or np.any(a < 0) \
            or np.any(a > params.max_reserved):
        raise ValueError(f"action={a.tolist()} must be {HOURS_PER_DAY} integers (reserved replicas per hour), "
                         f"each in [0, {params.max_reserved}]")

