"""Baselines and grading of the day-ahead reservation task (`fleet.reservation`).

    table, results = reservation_table(env, params, reservation_baselines(env, params), evaluation_key(0), 64)

The causal baselines read only the observation (the last week's hourly peaks, in units of
max_reserved replicas at the autoscaler's target), as llm_capacity_env's do:

* `on_demand_only`: reserve nothing; the autoscaler's on-demand replicas serve everything;
* `week_peak`: every hour, the last week's busiest hour (provisioning for the peak, score 0);
* `flat_fraction`: every hour, a fraction of that peak, the fraction chosen on the training
  services (the best flat reservation: a static configuration in the fleet's terms);
* `yesterday`: each hour, the replicas the same hour needed yesterday;
* `last_week`: each hour, what it needed a week before (the same day of the week);
* `rolling_quantile`: each hour, a quantile over the last week of what it needed, the quantile
  chosen on the training services (`scripts/reservation_baselines.py`; the newsvendor's critical
  ratio would be 1 - reserved / on-demand price = 0.375 if a late on-demand replica lost nothing);

and the clairvoyant `oracle` (score 1), which reads the day's realised rates from the env state
and reserves the day's least-J plan (`hindsight_reservation`: exact for the day model, a dynamic
programme over the hours). Each day is optimised from the on-demand replicas the oracle's own
previous day left, so it is a bound day by day, labelled clairvoyant, not a causal policy.

"Needed" is the replicas the autoscaler would run at its target for the hour's busiest window,
ceil(peak rate / hpa_target), each clipped to [0, max_reserved].

Grading: an episode's cost is J, the sum of its days' J (`fleet.reservation`); its score is
(J_week_peak - J) / (J_week_peak - J_oracle), paired on the same services.
"""

from __future__ import annotations

import functools
import json
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import evaluate
from inferencegym_jax.files import shipped
from inferencegym_jax.fleet.evaluate import grade, paired_ci95
from inferencegym_jax.fleet.reservation import ReservationEnv, ReservationObservation, ReservationParams
from inferencegym_jax.fleet.reservation_day import (
    DAY_WINDOWS,
    HOUR_S,
    HOURS_PER_DAY,
    WINDOW_S,
    WINDOWS_PER_HOUR,
    on_demand_wanted,
    windows_outcome,
)
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.protocols import Seen, StepOutput

# ceil() slack: a rate that is a whole number of replicas' target, after float32 rounding, needs
# that number, not one more (1e-4 replicas is far below one request per day).
CEIL_SLACK = 1e-4
# The grids scripts/reservation_baselines.py searches on the training services.
QUANTILE_GRID = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
FRACTION_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _replicas(level: jax.Array, params: ReservationParams) -> jax.Array:
    """int32: replicas for a level in the observation's units (max_reserved replicas at target)."""
    return jnp.clip(jnp.ceil(level * params.max_reserved - CEIL_SLACK), 0, params.max_reserved).astype(jnp.int32)


def on_demand_only(key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
    return jnp.zeros(obs.history.shape[:-2] + (HOURS_PER_DAY,), jnp.int32)


def week_peak(key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
    peak = obs.history.max(axis=(-2, -1))
    return _replicas(jnp.broadcast_to(peak[..., None], peak.shape + (HOURS_PER_DAY,)), params)


def yesterday(key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
    return _replicas(obs.history[..., -1, :], params)


def last_week(key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
    return _replicas(obs.history[..., 0, :], params)


@struct.dataclass
class FlatFraction:
    """Every hour, ceil(fraction x the last week's busiest hour) (fraction: float32 () in [0, 1])."""

    fraction: jax.Array

    def __call__(self, key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
        peak = obs.history.max(axis=(-2, -1)) * self.fraction
        return _replicas(jnp.broadcast_to(peak[..., None], peak.shape + (HOURS_PER_DAY,)), params)


@struct.dataclass
class RollingQuantile:
    """Each hour, the q-quantile over the last week of what it needed (q: float32 () in [0, 1])."""

    q: jax.Array

    def __call__(self, key: jax.Array, obs: ReservationObservation, params: ReservationParams) -> jax.Array:
        return _replicas(jnp.quantile(obs.history, self.q, axis=-2), params)


@struct.dataclass
class HindsightOracle:
    """The clairvoyant reference (module docstring), a `protocols.Controller` that reads the
    state's realised rates."""

    def init(self, key: jax.Array, seen: Seen, params: ReservationParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: ReservationParams
            ) -> tuple[jax.Array, tuple[()]]:
        return hindsight_reservation(seen.state, params), memory

    def update(self, memory: tuple[()], step: StepOutput, params: ReservationParams) -> tuple[()]:
        return memory


def hindsight_reservation(state: Any, params: ReservationParams) -> jax.Array:
    """int32 (24,): the reservation of least J for the state's next day, knowing its rates.

    Exact for the day model (`fleet.reservation_day`): an hour's cost depends on its own reserved
    count and, through the on-demand replicas still provisioning at its start (at most
    MAX_LAG_WINDOWS = one hour of windows back), on the hour before's; so a dynamic programme over
    the hours with the previous hour's count as its state finds the optimum (17 x 17 pairs per
    hour for max_reserved 16). The first hour starts from the state's on-demand tail.
    """
    p = params
    first = (p.first_day + state.day) * DAY_WINDOWS
    rate = jax.lax.dynamic_slice(state.rate, (first,), (DAY_WINDOWS,))
    observed = jnp.concatenate([state.rate[first - 1][None], rate[:-1]]).reshape(HOURS_PER_DAY, WINDOWS_PER_HOUR)
    rate = rate.reshape(HOURS_PER_DAY, WINDOWS_PER_HOUR)
    counts = jnp.arange(p.max_reserved + 1, dtype=jnp.float32)
    budget = p.max_reserved * HOURS_PER_DAY * p.prices.on_demand_price
    arrived = rate.sum() * WINDOW_S

    def hour_j(hour: jax.Array, tail: jax.Array, r: jax.Array) -> jax.Array:
        reserved_w = jnp.full((WINDOWS_PER_HOUR,), r)
        missed, wanted, _ = windows_outcome(rate[hour], observed[hour], reserved_w, tail, p.prices)
        usd = r * p.prices.reserved_price + wanted.sum() * (WINDOW_S / HOUR_S) * p.prices.on_demand_price
        return usd / budget + p.slo_weight * safe_div(missed.sum(), arrived)

    def tails(hour: jax.Array) -> jax.Array:  # (R+1, 6): the previous hour's on-demand, per its count
        return jax.vmap(lambda r: on_demand_wanted(observed[hour - 1], r, p.prices.hpa_target))(counts)

    first_j = jax.vmap(lambda r: hour_j(jnp.int32(0), state.wanted_tail, r))(counts)

    def forward(best: jax.Array, hour: jax.Array) -> tuple[jax.Array, jax.Array]:
        pair_j = jax.vmap(lambda tail: jax.vmap(lambda r: hour_j(hour, tail, r))(counts))(tails(hour))  # [prev, r]
        total = best[:, None] + pair_j
        return total.min(axis=0), total.argmin(axis=0).astype(jnp.int32)

    best, came_from = jax.lax.scan(forward, first_j, jnp.arange(1, HOURS_PER_DAY))

    def backward(r: jax.Array, back: jax.Array) -> tuple[jax.Array, jax.Array]:
        return back[r], r

    last = jnp.argmin(best).astype(jnp.int32)
    r0, later = jax.lax.scan(backward, last, came_from, reverse=True)
    return jnp.concatenate([r0[None], later]).astype(jnp.int32)


@struct.dataclass
class ReservationEpisodes:
    """N episodes' totals, float32 (N,): J (the sum of the days' J; lower is better), cost_usd
    [$], reserved_gpu_h and on_demand_gpu_h [GPU-hours], gpu_hours (both), missed and arrived
    [requests], slo_attainment (1 - missed / arrived), refused [commitments]."""

    J: jax.Array
    cost_usd: jax.Array
    reserved_gpu_h: jax.Array
    on_demand_gpu_h: jax.Array
    gpu_hours: jax.Array
    missed: jax.Array
    arrived: jax.Array
    slo_attainment: jax.Array
    refused: jax.Array

    @property
    def episode_cost(self) -> jax.Array:
        """J, under the name `fleet.evaluate.grade` reads."""
        return self.J


def _record(seen: Seen, memory: Any, step: StepOutput) -> tuple[Any, jax.Array]:
    return step.info["day"], step.info["refused"]


@functools.partial(jax.jit, static_argnames=("env",))
def _run_batch(env: ReservationEnv, params: ReservationParams, policy: Any, keys: jax.Array) -> ReservationEpisodes:
    def one(key: jax.Array) -> ReservationEpisodes:
        # play_episode is typed for the serving env; it calls only what ReservationEnv has too.
        _, (days, refused), _ = evaluate.play_episode(cast(Any, env), cast(Any, params), policy, key,
                                                      params.decision_days, _record)
        gpu = days.reserved_gpu_h.sum() + days.on_demand_gpu_h.sum()
        return ReservationEpisodes(
            J=days.cost_j.sum(), cost_usd=days.cost_usd.sum(), reserved_gpu_h=days.reserved_gpu_h.sum(),
            on_demand_gpu_h=days.on_demand_gpu_h.sum(), gpu_hours=gpu, missed=days.missed.sum(),
            arrived=days.arrived.sum(), slo_attainment=1.0 - safe_div(days.missed.sum(), days.arrived.sum()),
            refused=refused.sum().astype(jnp.float32))

    return jax.vmap(one)(keys)


def run_reservation_episodes(env: ReservationEnv, params: ReservationParams, policy: Any, key: jax.Array,
                             num_episodes: int) -> ReservationEpisodes:
    """Episodes 0..num_episodes-1 of `policy` (a plain policy or a Controller), episode i from
    `evaluate.episode_keys(key, 0, N)[i]`: the service is drawn from that key's reset."""
    if num_episodes < 1:
        raise ValueError(f"num_episodes={num_episodes} must be >= 1")
    keys = evaluate.episode_keys(key, 0, num_episodes)
    return _run_batch(env, params, evaluate.as_controller(policy), keys)


def load_chosen(env_id: str) -> dict[str, Any]:
    """The numbers chosen on the training services (data/fleet/<task>_baselines.json)."""
    name = env_id.removeprefix("InferenceGym-").lower().replace("-", "_") + "_baselines.json"
    path = shipped("data").joinpath("fleet", name)
    if not path.is_file():
        raise ValueError(f"no baseline file for env id {env_id!r} (data/fleet/{name}); run "
                         "scripts/reservation_baselines.py")
    return json.loads(path.read_text())["chosen"]


def reservation_baselines(env: ReservationEnv, params: ReservationParams, chosen: dict[str, Any] | None = None
                          ) -> dict[str, Any]:
    """{name: policy or controller} of the module docstring, with the numbers chosen on the
    training services (`load_chosen`; or `chosen`, the same layout)."""
    chosen = load_chosen(env.env_id) if chosen is None else chosen
    fraction = float(chosen["flat_fraction"]["fraction"]["value"])
    q = float(chosen["rolling_quantile"]["q"]["value"])
    return {"week_peak": week_peak, "on_demand_only": on_demand_only,
            "flat_fraction": FlatFraction(jnp.float32(fraction)), "yesterday": yesterday, "last_week": last_week,
            "rolling_quantile": RollingQuantile(jnp.float32(q)),
            "oracle": HindsightOracle()}


def reservation_table(env: ReservationEnv, params: ReservationParams, policies: dict[str, Any], key: jax.Array,
                      num_episodes: int, references: tuple[str, ...] = ("week_peak", "rolling_quantile"),
                      ) -> tuple[Any, dict[str, ReservationEpisodes]]:
    """Every policy on the same services, graded week_peak (0) to oracle (1): (a pandas table, one
    row per policy: score and its 95 % CI, J, cost per episode [$], GPU-hours, SLO attainment,
    and for each reference the paired difference in J and in cost with 95 % CIs; the episodes)."""
    import pandas as pd

    results = {name: run_reservation_episodes(env, params, p, key, num_episodes) for name, p in policies.items()}
    scores = grade(results, zero="week_peak", one="oracle")  # type: ignore[arg-type]
    rows = []
    for name, r in results.items():
        mean, half = paired_ci95(scores[name], np.zeros_like(scores[name]))
        row = {"policy": name + (" (clairvoyant)" if name == "oracle" else ""), "episodes": num_episodes,
               "score": mean, "score_ci95": half, "J": float(np.mean(r.J)), "cost_usd": float(np.mean(r.cost_usd)),
               "reserved_gpu_h": float(np.mean(r.reserved_gpu_h)), "on_demand_gpu_h": float(np.mean(r.on_demand_gpu_h)),
               "slo_attainment": float(np.mean(r.slo_attainment)), "refused": float(np.sum(r.refused))}
        for ref in references:
            if ref in results and ref != name:
                row[f"d_J_vs_{ref}"], row[f"d_J_vs_{ref}_ci95"] = paired_ci95(r.J, results[ref].J)
                row[f"d_cost_vs_{ref}"], row[f"d_cost_vs_{ref}_ci95"] = paired_ci95(r.cost_usd, results[ref].cost_usd)
        rows.append(row)
    return pd.DataFrame(rows).set_index("policy"), results
