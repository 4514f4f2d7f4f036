"""The fleet environment: an autoscaler and a router over R replicas on a day of real traffic.

    env, params = inferencegym_jax.make("InferenceGym-Fleet1-v1")
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

gymnax 1.0's call shape, as `env.InferenceGymEnv`: `step` = `step_env` + auto-reset, with
`info["final_observation"]` for bootstrapping; the trainer (`training.ppo`) trains it as it is.

One step is one control interval of `substeps` physics intervals of `server.dt_s` (a `lax.scan`):
  1. the action: int32 (2,) [target replicas in 0..R, routing rule]; the target goes through
     `fleet.scale_to` (a started replica serves after `provision_s`, a drained one retires when
     empty); rule 0 routes each interval's arrivals to the least-loaded replicas
     (`fleet.least_loaded_weights`), rule 1 splits them evenly (round robin in the mean; in the v2
     tasks it sends each request whole to a replica drawn at random: `routing_units` below);
  2. per physics interval: Poisson arrivals at the day curve's rate of that minute
     (`fleet.day_traffic`), routed and served by every replica (`fleet.fleet_interval`);
  3. the reward: minus the GPU time used, as a fraction of the whole fleet's over the episode,
     minus `slo_weight` times the requests that missed their SLO (or were refused) as a fraction
     of the episode's expected requests, so an episode's return is -(`episode_cost`):
         J = GPU-seconds / (R x episode seconds) + slo_weight x missed / expected requests,
     slo_weight = 1 / (1 - slo_target): missing the SLO target's whole allowance costs as much as
     running every replica all episode (a stated exchange rate, chosen before any result).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax import spaces, validation
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.env import TaskIdentity, auto_reset
from inferencegym_jax.fleet import request_routing
from inferencegym_jax.fleet.day_traffic import DAY_MIN, MINUTE_S, DayCurve, rate_at, requests_between
from inferencegym_jax.fleet.physics import fleet_interval, scale_to, serve_routed
from inferencegym_jax.fleet.request_routing import routing_draws
from inferencegym_jax.fleet.routing import (
    busy_join_share,
    least_loaded_weights,
    pooled_requests,
    route,
    shares,
    with_busy_rate,
)
from inferencegym_jax.fleet.types import FleetMetrics, FleetState, initial_fleet
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving import ServerParams
from inferencegym_jax.traffic import sampling, workload

ROUTING_RULES = ("least_loaded", "even")
ROUTING_UNITS = ("fluid", "request")
ACTION_NAMES = ("replicas", "routing")
# Uniforms of a reset: the workload's, then the episode's start minute.
RESET_DRAWS = workload.RESET_DRAWS + 1


@struct.dataclass
class FleetParams:
    """A fleet task (a pytree; `num_replicas` and `substeps` are static).

    Attributes:
      server: serving.ServerParams of every replica (one GPU type).
      workload: workload.WorkloadParams, schedule "constant": lengths and class mix of the
        requests; its base_rate is replaced by the day curve's rate of each minute.
      replica_config: ServingAction (scalar leaves), each replica's serving configuration.
      curve: fleet.day_traffic.DayCurve, the load [req/s] per minute and the episode starts.
      provision_s: float32 () [s], from a scale-up request to a replica that serves (node,
        image, weights, engine start; data/fleet/provisioning.json).
      initial_replicas: int32 () [replicas] serving at an episode's start.
      slo_target: float32 (), the SLO attainment the task asks for (sets slo_weight).
      rate_norm: float32 () [req/s], the curve's highest minute (observation scale).
      max_steps_in_episode: int32 () [control intervals].
      num_replicas: static int R.
      substeps: static int, physics intervals per control interval.
      routing_units: static (str, str), the ROUTING_UNITS of the two ROUTING_RULES: "fluid" (each
        replica gets its share of every request, `fleet.routing.route`) or "request" (each request
        goes whole to one replica, `fleet.request_routing`). v1 tasks: ("fluid", "fluid"); v2:
        ("fluid", "request"), the pair that matches exact schedulers behind a least-request and a
        random router (docs/FLEET.md, "Routing, request by request").
    """

    server: ServerParams
    workload: workload.WorkloadParams
    replica_config: ServingAction
    curve: DayCurve
    provision_s: Array
    initial_replicas: Array
    slo_target: Array
    rate_norm: Array
    max_steps_in_episode: Array
    num_replicas: int = struct.field(pytree_node=False, default=16)
    substeps: int = struct.field(pytree_node=False, default=60)
    routing_units: tuple[str, str] = struct.field(pytree_node=False, default=("fluid", "fluid"))

    @property
    def control_interval_s(self) -> Array:
        """float32 () [s], one control interval."""
        return self.server.dt_s * self.substeps

    @property
    def slo_weight(self) -> Array:
        """float32 (), 1 / (1 - slo_target): the price of a missed request (module docstring)."""
        return 1.0 / (1.0 - self.slo_target)


@struct.dataclass
class ControlTotals:
    """One control interval's fleet totals (float32 () leaves; sums over its physics intervals
    unless said otherwise).

    Attributes:
      arrived: [requests] that arrived.
      admitted: [requests] admitted (first token scheduled).
      lost: [requests] refused (no replica serving) or dropped by a retired replica.
      judged: [requests] whose SLO outcome was decided (refused ones included).
      slo_violations: [requests] of those that missed an SLO (refused ones included).
      completed: [requests] finished.
      output_tokens: [tokens] generated.
      gpu_seconds: [GPU s] held by serving, draining and warming replicas.
      cost_usd: [$] of that GPU time.
      ttft_p99_s: [s] the replicas' per-interval TTFT p99, averaged with their admitted requests as weights.
      queue_depth: [requests] waiting at the end (all replicas).
      serving, warming, draining: [replicas] at the end.
    """

    arrived: Array
    admitted: Array
    lost: Array
    judged: Array
    slo_violations: Array
    completed: Array
    output_tokens: Array
    gpu_seconds: Array
    cost_usd: Array
    ttft_p99_s: Array
    queue_depth: Array
    serving: Array
    warming: Array
    draining: Array

    @classmethod
    def zeros(cls) -> ControlTotals:
        return cls(*[jnp.zeros((), jnp.float32) for _ in cls.__dataclass_fields__])


@struct.dataclass
class FleetEnvState:
    """Environment state.

    Attributes:
      fleet: fleet.FleetState (R replicas).
      workload: workload.WorkloadState.
      start_minute: int32 () [min], the trace minute the episode began at.
      time: int32 () [control intervals] since the episode began.
      routing: int32 (), the routing rule in force (ROUTING_RULES index).
      expected_requests: float32 () [requests], the curve's requests over the whole episode.
      last: ControlTotals of the last control interval (zeros after reset).
      episode: ControlTotals summed over the episode so far (the end-of-interval counts are the
        last interval's).
    """

    fleet: FleetState
    workload: workload.WorkloadState
    start_minute: Array
    time: Array
    routing: Array
    expected_requests: Array
    last: ControlTotals
    episode: ControlTotals


@struct.dataclass
class FleetObservation:
    """What the autoscaler sees before a control interval (float32 () leaves).

    Attributes:
      time_of_day: [day fraction] of the next interval's start, UTC, in [0, 1).
      weekend: 1 on Saturday and Sunday (UTC), else 0.
      arrival_rate: [req/s] over the last control interval.
      rate_yesterday: [req/s] the curve 24 h before the next interval (past data).
      rate_yesterday_ahead: [req/s] the curve 24 h before the interval a replica started now
        would first serve in (past data: the seasonal-naive forecast of the provisioning lead).
      serving, warming, draining: [replicas].
      queue_depth: [requests] waiting, all replicas.
      slo_attainment: fraction of the last interval's judged requests that met their SLO (1 when
        none was judged).
      ttft_p99_s: [s] the last interval's TTFT p99 (weighted mean over replicas).
      episode_fraction: time / max_steps_in_episode.
    """

    time_of_day: Array
    weekend: Array
    arrival_rate: Array
    rate_yesterday: Array
    rate_yesterday_ahead: Array
    serving: Array
    warming: Array
    draining: Array
    queue_depth: Array
    slo_attainment: Array
    ttft_p99_s: Array
    episode_fraction: Array


OBS_SIZE = len(FleetObservation.__dataclass_fields__)


# [min] Slack of `whole_minutes`' ceiling: XLA on CPU turns x / 60 into x * float32(1 / 60), which
# rounds up, so 720 s would give ceil(12.000001) = 13 min; 1e-3 min = 60 ms, far below a minute.
CEIL_SLACK_MIN = 1e-3


def whole_minutes(seconds: Array) -> Array:
    """int32 [min], the minutes that hold `seconds` (a ceiling, exact for whole minutes)."""
    return jnp.ceil(seconds / MINUTE_S - CEIL_SLACK_MIN).astype(jnp.int32)


def totals_of(m: FleetMetrics) -> ControlTotals:
    """One physics interval's ControlTotals from its FleetMetrics."""
    return ControlTotals(
        arrived=m.arrived, admitted=m.admitted, lost=m.lost + m.residue, judged=m.judged,
        slo_violations=m.slo_violations, completed=m.completed, output_tokens=m.output_tokens,
        gpu_seconds=m.gpu_seconds, cost_usd=m.cost_usd, ttft_p99_s=m.ttft_p99_s, queue_depth=m.queue_depth,
        serving=m.replicas_serving, warming=m.replicas_warming, draining=m.replicas_draining,
    )


def accumulate(total: ControlTotals, step: ControlTotals) -> ControlTotals:
    """`total` + `step`, with the end-of-interval counts taken from `step` and ttft_p99_s
    averaged with the admitted requests as weights."""
    summed = jax.tree_util.tree_map(jnp.add, total, step)
    p99 = safe_div(total.ttft_p99_s * total.admitted + step.ttft_p99_s * step.admitted, summed.admitted)
    return dataclasses.replace(summed, ttft_p99_s=p99, queue_depth=step.queue_depth, serving=step.serving,
                          warming=step.warming, draining=step.draining)


class FleetEnv(TaskIdentity[FleetParams]):
    """A fleet of LLM inference replicas on day-scale traffic (module docstring)."""

    def __init__(self, default_params: FleetParams, env_id: str = "InferenceGym-FleetCustom-v1"):
        if not isinstance(default_params, FleetParams):
            raise ValueError(f"params must be a fleet.FleetParams, got {type(default_params).__name__}")
        self._default_params = default_params
        self.env_id = env_id

    # ------------------------------------------------------------------ spaces

    def action_space(self, params: FleetParams | None = None) -> spaces.MultiDiscrete:
        """[target replicas 0..R, routing rule (ROUTING_RULES)]."""
        params = params or self._default_params
        return spaces.MultiDiscrete((params.num_replicas + 1, len(ROUTING_RULES)), ACTION_NAMES)

    def observation_space(self, params: FleetParams | None = None) -> spaces.Box:
        """The flat observation's space (the structured one is FleetObservation)."""
        return self.flat_observation_space(params)

    def flat_observation_space(self, params: FleetParams | None = None) -> spaces.Box:
        """OBS_SIZE float32 values in [0, 1] (`flatten_observation`)."""
        return spaces.Box(0.0, 1.0, (OBS_SIZE,), jnp.float32)

    # ------------------------------------------------------------------ reset and step

    def reset(self, key: jax.Array, params: FleetParams | None = None) -> tuple[FleetObservation, FleetEnvState]:
        """A fresh episode from `key` (a start minute drawn from the curve's starts)."""
        return self.reset_env(key, params or self._default_params)

    def reset_env(self, key: jax.Array, params: FleetParams) -> tuple[FleetObservation, FleetEnvState]:
        return self._reset_from_uniforms(sampling.uniforms(key, RESET_DRAWS), params)

    def step(self, key: jax.Array, state: FleetEnvState, action: Any, params: FleetParams | None = None
             ) -> tuple[FleetObservation, FleetEnvState, Array, Array, Array, dict[str, Any]]:
        """One control interval (`step_env`), then an auto-reset where the episode ended.

        Args:
          action: int (2,) [target replicas, routing rule]; clipped to the action space inside jit.

        Returns obs, state, reward (float32), terminated (always False), truncated (bool), info:
        `totals` (ControlTotals of the interval), `applied_action` (int32 (2,)), `reward_components`
        (gpu, slo: the two costs), `discount` and `final_observation`.

        Raises:
          ValueError: outside jit, an action that is not 2 integers in the action space.
        """
        params = params or self._default_params
        self._check_action(action, params)
        u = sampling.uniforms(key, self._draws(params) + RESET_DRAWS)
        obs, next_state, reward, terminated, truncated, info = self._transition(u, state, action, params)
        reset = self._reset_from_uniforms(u[self._draws(params):], params)
        info["final_observation"] = obs
        obs, next_state = auto_reset(terminated | truncated, reset, (obs, next_state))
        return obs, next_state, reward, terminated, truncated, info

    def step_env(self, key: jax.Array, state: FleetEnvState, action: Any, params: FleetParams
                 ) -> tuple[FleetObservation, FleetEnvState, Array, Array, Array, dict[str, Any]]:
        """One control interval without auto-reset (the transition `step` makes for the same key)."""
        return self._transition(sampling.uniforms(key, self._draws(params) + RESET_DRAWS), state, action, params)

    @staticmethod
    def _draws_per_substep(params: FleetParams) -> int:
        units = params.routing_units
        if len(units) != len(ROUTING_RULES) or any(u not in ROUTING_UNITS for u in units):
            raise ValueError(f"routing_units={units!r}: one of {list(ROUTING_UNITS)} per routing rule {ROUTING_RULES}")
        return workload.STEP_DRAWS + (routing_draws(params.num_replicas) if "request" in units else 0)

    def _draws(self, params: FleetParams) -> int:
        return params.substeps * self._draws_per_substep(params)

    @staticmethod
    def _check_action(action: Any, params: FleetParams) -> None:
        if isinstance(action, jax.core.Tracer):
            return
        a = np.asarray(action)
        limits = (params.num_replicas, len(ROUTING_RULES) - 1)
        if a.shape != (2,) or not np.issubdtype(a.dtype, np.integer) or np.any(a < 0) or np.any(a > limits):
            raise ValueError(f"action={a.tolist()} must be 2 integers: replicas in [0, {limits[0]}], "
                             f"routing in [0, {limits[1]}] ({', '.join(ROUTING_RULES)})")

    def _reset_from_uniforms(self, u: Array, params: FleetParams) -> tuple[FleetObservation, FleetEnvState]:
        starts = params.curve.starts
        start = starts[jnp.minimum((u[-1] * starts.shape[0]).astype(jnp.int32), starts.shape[0] - 1)]
        episode_min = whole_minutes(params.max_steps_in_episode * params.control_interval_s)
        r = params.num_replicas
        fleet = initial_fleet(params.replica_config, params.server.num_age_buckets, r, 0, params.server.slo_accounting)
        fleet = dataclasses.replace(fleet, active=jnp.arange(r) < params.initial_replicas)
        expected = requests_between(params.curve, start, episode_min)
        horizon_s = params.max_steps_in_episode * params.control_interval_s
        state = FleetEnvState(
            fleet=fleet,
            workload=workload.init_from_draws(u[: workload.RESET_DRAWS], params.workload, horizon_s),
            start_minute=start,
            time=jnp.zeros((), jnp.int32),
            routing=jnp.zeros((), jnp.int32),
            expected_requests=jnp.maximum(expected, 1.0).astype(jnp.float32),
            last=ControlTotals.zeros(),
            episode=ControlTotals.zeros(),
        )
        return self.get_obs(state, params), state

    def _transition(self, u: Array, state: FleetEnvState, action: Any, params: FleetParams
                    ) -> tuple[FleetObservation, FleetEnvState, Array, Array, Array, dict[str, Any]]:
        a = jnp.asarray(action, jnp.int32)
        target = jnp.clip(a[0], 0, params.num_replicas)
        rule = jnp.clip(a[1], 0, len(ROUTING_RULES) - 1)
        fleet = scale_to(state.fleet, target, params.provision_s)
        draws = u[: self._draws(params)].reshape(params.substeps, self._draws_per_substep(params))
        (fleet, wl, totals), _ = jax.lax.scan(
            lambda carry, x: (self._physics_interval(carry, x, state, rule, params), None),
            (fleet, state.workload, ControlTotals.zeros()),
            (jnp.arange(params.substeps), draws),
        )
        episode = accumulate(state.episode, totals)
        time = state.time + 1
        next_state = dataclasses.replace(state, fleet=fleet, workload=wl, time=time, routing=rule, last=totals,
                                         episode=episode)
        gpu_cost = totals.gpu_seconds / (params.num_replicas * params.max_steps_in_episode * params.control_interval_s)
        slo_cost = params.slo_weight * totals.slo_violations / state.expected_requests
        terminated = jnp.zeros((), bool)
        truncated = time >= params.max_steps_in_episode
        info = {
            "totals": totals,
            "applied_action": jnp.stack([target, rule]),
            "reward_components": {"gpu": gpu_cost, "slo": slo_cost},
            "discount": 1.0 - terminated.astype(jnp.float32),
        }
        reward = -(gpu_cost + slo_cost).astype(jnp.float32)
        return self.get_obs(next_state, params), next_state, reward, terminated, truncated, info

    def _physics_interval(self, carry: tuple, x: tuple, state: FleetEnvState, rule: Array,
                          params: FleetParams) -> tuple:
        """One physics interval of the control interval's scan: traffic, routing, the replicas."""
        fleet, wl_state, totals = carry
        k, u = x
        dt = params.server.dt_s
        t_s = (state.time * params.substeps + k).astype(jnp.float32) * dt
        minute = state.start_minute + jnp.floor(t_s / MINUTE_S).astype(jnp.int32)
        wl = dataclasses.replace(params.workload, base_rate=rate_at(params.curve, minute))
        if params.routing_units == ("fluid", "fluid"):  # v1: one routing path for both rules
            draws = workload.draws_from_uniforms(u, wl_state, t_s, dt, wl)
            wl_state, arrivals = workload.advance(draws, wl_state, t_s, dt, wl)
            even = fleet.receiving.astype(jnp.float32)
            weights = jnp.where(rule == 0, least_loaded_weights(fleet, arrivals), even)
            fleet, m = fleet_interval(fleet, arrivals, weights, params.replica_config, params.server)
            return fleet, wl_state, accumulate(totals, totals_of(m))
        least_loaded, even = (self._route(unit, i, fleet, wl_state, u, t_s, wl, params)
                              for i, unit in enumerate(params.routing_units))
        per_replica, lost, arrived = jax.tree_util.tree_map(lambda a, b: jnp.where(rule == 0, a, b), least_loaded, even)
        fleet, m = serve_routed(fleet, per_replica, lost, arrived, params.replica_config, params.server)
        wl_state = workload.next_burst_state(u[workload.NUM_CLASSES], wl_state, dt, wl)  # draws_from_uniforms' u_burst
        return fleet, wl_state, accumulate(totals, totals_of(m))

    @staticmethod
    def _route(unit: str, rule: int, fleet: FleetState, wl_state: workload.WorkloadState, u: Array, t_s: Array,
               wl: workload.WorkloadParams, params: FleetParams) -> tuple:
        """One physics interval's arrivals routed in `unit` ("fluid" or "request") by the rule
        `rule` (static ROUTING_RULES index): (per-replica Arrivals, refused Arrivals, the fleet's
        arrivals [requests]). Whole requests go by join-the-shortest-queue (least-loaded) or at
        random (even) (`fleet.request_routing`)."""
        dt = params.server.dt_s
        draws = workload.draws_from_uniforms(u[: workload.STEP_DRAWS], wl_state, t_s, dt, wl)
        receiving = fleet.receiving
        # the share of a replica's arrivals that join it beside a request it holds (serving.tpot_spread)
        joins_busy = busy_join_share(fleet.servers, receiving) if rule == 0 else jnp.float32(1.0)
        if unit == "fluid":
            arrivals = workload.advance(draws, wl_state, t_s, dt, wl)[1]
            weights = least_loaded_weights(fleet, arrivals) if rule == 0 else receiving.astype(jnp.float32)
            per_replica, lost = route(arrivals, weights, receiving)
            return with_busy_rate(per_replica, joins_busy), lost, jnp.sum(arrivals.count)
        u_route = u[workload.STEP_DRAWS:]
        if rule == 0:
            per_replica, lost = request_routing.route_jsq(u_route, draws.count, pooled_requests(fleet.servers),
                                                          receiving, wl_state, t_s, wl)
        else:
            share, lost_share = shares(receiving.astype(jnp.float32), receiving)
            per_replica, lost = request_routing.route_requests(u_route, share, lost_share, wl_state, t_s, dt, wl)
        return with_busy_rate(per_replica, joins_busy), lost, jnp.sum(per_replica.count) + jnp.sum(lost.count)

    # ------------------------------------------------------------------ observation

    def get_obs(self, state: FleetEnvState, params: FleetParams) -> FleetObservation:
        """The observation of a state (FleetObservation)."""
        control_min = params.control_interval_s / MINUTE_S
        minutes = state.time.astype(jnp.float32) * control_min
        now = state.start_minute + jnp.floor(minutes).astype(jnp.int32)
        lead = whole_minutes(params.provision_s)
        day = now // DAY_MIN + params.curve.first_weekday
        return FleetObservation(
            time_of_day=jnp.mod(now, DAY_MIN).astype(jnp.float32) / DAY_MIN,
            weekend=(jnp.mod(day, 7) >= 5).astype(jnp.float32),
            arrival_rate=state.last.arrived / params.control_interval_s,
            rate_yesterday=rate_at(params.curve, now - DAY_MIN),
            rate_yesterday_ahead=rate_at(params.curve, now - DAY_MIN + lead),
            serving=state.fleet.receiving.sum().astype(jnp.float32),
            warming=state.fleet.warming.sum().astype(jnp.float32),
            draining=(state.fleet.active & state.fleet.draining).sum().astype(jnp.float32),
            queue_depth=state.last.queue_depth,
            slo_attainment=1.0 - safe_div(state.last.slo_violations, state.last.judged),
            ttft_p99_s=state.last.ttft_p99_s,
            episode_fraction=state.time.astype(jnp.float32) / params.max_steps_in_episode,
        )

    def flatten_observation(self, obs: FleetObservation, params: FleetParams | None = None) -> Array:
        """The float32 (..., OBS_SIZE) vector of an observation, every entry in [0, 1]: rates over
        the curve's highest minute, replicas over R, the queue over one control interval of that
        rate, the TTFT p99 as p99 / (p99 + the strictest TTFT SLO)."""
        p = params or self._default_params
        r = float(p.num_replicas) if validation.is_concrete(p.num_replicas) else p.num_replicas
        slo = jnp.min(p.server.ttft_slo_s)
        ttft = jnp.maximum(obs.ttft_p99_s, 0.0)
        values = [
            obs.time_of_day, obs.weekend,
            obs.arrival_rate / p.rate_norm, obs.rate_yesterday / p.rate_norm, obs.rate_yesterday_ahead / p.rate_norm,
            obs.serving / r, obs.warming / r, obs.draining / r,
            obs.queue_depth / (p.rate_norm * p.control_interval_s),
            obs.slo_attainment, ttft / (ttft + slo), obs.episode_fraction,
        ]
        return jnp.clip(jnp.nan_to_num(jnp.stack(values, axis=-1).astype(jnp.float32)), 0.0, 1.0)
