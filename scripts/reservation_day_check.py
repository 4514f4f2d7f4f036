"""Check the reservation task's fluid day model against Fleet1's per-second fleet physics (issue 42).

    nice -n 10 .venv-dev/bin/python scripts/reservation_day_check.py

writes experiments/results/reservation_day_check.json.

For the same service-day and the same reservation plan, two models of the day:

* fluid: `fleet.reservation_day.day_outcome` (what InferenceGym-Reserve1-v1 scores): 10-min windows,
  1.45 req/s per serving replica, everything above that missed;
* physics: Fleet1's env (`fleet.env.FleetEnv.step_env`, 1-s intervals, every replica the single-server
  engine, Poisson arrivals each second at the minute's rate, least-loaded routing, SLO judged per
  request), R raised to what the plan needs, its day curve replaced by the service's rates (each
  10-min window's mean rate held for its 10 minutes: the curve's requests are the trace's, exactly).
  The controller (`floor_hpa_step`): the fleet's slots are two groups, reserved slots [0, k) (k the
  plan's largest hour) and on-demand slots [k, R). At every minute the reserved group is scaled to
  the hour's plan with no delay (committed a day ahead: warm from the hour's start) and the on-demand
  group to the HPA rule of the day model, max(ceil(rate / 1.0) - reserved, 0), decided at each
  10-min window's start from the requests MEASURED in the window before (the fluid model reads the
  trace's mean), started with Fleet1's 830.5-s provisioning delay (`fleet.physics.scale_to`'s rules
  within each group: cancel warming replicas first, drain the highest slots, recall draining ones).

Each physics day starts WARMUP_MIN minutes early, on-demand only at the level the window before asks
(as the fluid model assumes of the day before: the autoscaler alone); the warm-up is not counted.
Every plan of a service-day sees the same arrivals (the same keys: common random numbers).

What each side counts:
  cost: reserved replica-hours of the plan (paid whether used or not; the same on both sides) x the
    reserved price + on-demand replica-hours x the on-demand price; the fluid model bills on-demand
    from the ask per window; the physics bills the on-demand slots that are warming, serving or
    draining at each minute's start (after the controller's scaling) for that minute.
  missed: fluid, requests above the serving replicas' capacity over the day's requests; physics,
    1 - SLO attainment: SLO violations (TTFT 2 s or TPOT 50 ms of class "standard", judged at
    completion, plus refused and dropped requests) over the requests judged during the day.
  J: cost / (32 replicas x 24 h x on-demand price) + 100 x missed (the task's reward, both sides).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

import inferencegym_jax as ig
from inferencegym_jax import evaluate
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.fleet import reservation_baselines as rb
from inferencegym_jax.fleet.day_traffic import MINUTE_S, DayCurve
from inferencegym_jax.fleet.env import FleetEnv, FleetParams
from inferencegym_jax.fleet.reservation import ReservationParams
from inferencegym_jax.fleet.reservation_day import (
    DAY_WINDOWS,
    HOURS_PER_DAY,
    MAX_LAG_WINDOWS,
    WINDOW_S,
    WINDOWS_PER_HOUR,
    on_demand_wanted,
    windows_outcome,
)
from inferencegym_jax.fleet.tasks import make_fleet
from inferencegym_jax.fleet.types import FleetState

RESERVE_ID = "InferenceGym-Reserve1-v1"
FLEET_ID = "InferenceGym-Fleet1-v1"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "reservation_day_check.json"
# docs/RESERVATION.md holds `table` and `load_table` of the stored result between these markers.
DOC_MARKERS = ("<!-- reservation-day-check:start -->", "<!-- reservation-day-check:end -->")
LOAD_MARKERS = ("<!-- reservation-day-check-load:start -->", "<!-- reservation-day-check-load:end -->")
WINDOW_MIN = int(WINDOW_S // MINUTE_S)  # [min] 10, a trace window
HOUR_MIN = 60  # [min]
DAY_MIN = HOURS_PER_DAY * HOUR_MIN  # [min] 1440
# [min] Physics warm-up before the day: 3 windows, more than the 830.5-s provisioning delay reaches
# back (the fluid model's first window reads at most 2 windows of the day before's on-demand asks).
WARMUP_MIN = 3 * WINDOW_MIN
# [replicas] On-demand slots above the fluid model's largest on-demand count: the physics reads a
# measured (Poisson) rate, whose ceil can ask for one or two more replicas than the trace's mean.
OD_MARGIN = 2
SLOT_QUANTUM = 8  # [slots] R rounded up to a multiple of this, so plans of similar size share a compile
# [GPU-h] Rows whose on-demand GPU-hours' relative error is summarised: the fluid day uses at least
# this much (below, a single replica-window, 1/6 GPU-h, is a large relative error of nothing).
OD_ROWS_GPU_H = 1.0
PLANS = ("week_peak", "rolling_quantile", "oracle", "on_demand_only")


def minute_rates(window_rate: np.ndarray) -> np.ndarray:
    """float32 (10 W,) [req/s]: each 10-min window's mean rate held for its 10 minutes (so the
    minutes' requests, rate x 60 s, sum to the window's, rate x 600 s)."""
    w = np.asarray(window_rate, np.float32)
    if w.ndim != 1 or not np.all(np.isfinite(w) & (w >= 0.0)):
        raise ValueError(f"window_rate must be a 1-D array of finite rates >= 0 [req/s], got shape {w.shape}")
    return np.repeat(w, WINDOW_MIN)


def scale_group(fleet: FleetState, group: Array, target: Array, provision_s: Array) -> FleetState:
    """`fleet.physics.scale_to` within the slots of `group` (bool (R,)): its serving + warming
    replicas set to `target` (int32 () [replicas], clipped to the group's slots); started replicas
    serve after `provision_s` (float32 () [s]; 0: at once). Slots outside the group are untouched."""
    def first(mask: Array, count: Array, from_top: bool) -> Array:
        m = mask.astype(jnp.int32)
        rank = jnp.cumsum(m[::-1])[::-1] if from_top else jnp.cumsum(m)
        return mask & (rank <= count)

    serving, warming = fleet.receiving & group, fleet.warming & group
    draining = fleet.active & fleet.draining & group
    target = jnp.clip(target, 0, jnp.sum(group.astype(jnp.int32)))
    need = target - jnp.sum(serving.astype(jnp.int32)) - jnp.sum(warming.astype(jnp.int32))
    up, down = jnp.maximum(need, 0), jnp.maximum(-need, 0)
    recall = first(draining, up, False)
    start = first(~fleet.active & ~fleet.warming & group, up - jnp.sum(recall.astype(jnp.int32)), False)
    cancel = first(warming, down, True)
    drain = first(serving, down - jnp.sum(cancel.astype(jnp.int32)), True)
    instant = start & (provision_s <= 0.0)
    warming_s = jnp.where(start & ~instant, provision_s, jnp.where(cancel, 0.0, fleet.warming_s))
    return FleetState(servers=fleet.servers, active=fleet.active | instant, warming_s=warming_s.astype(jnp.float32),
                      draining=(fleet.draining & ~recall) | drain)


def floor_hpa_step(fleet: FleetState, reserved_slots: Array, reserved: Array, on_demand: Array,
                   provision_s: Array) -> FleetState:
    """The controller's scaling at a minute's start: the reserved group (slots [0, reserved_slots))
    to `reserved` replicas at once, the on-demand group (the other slots) to `on_demand` replicas
    with `provision_s` (all int32 () [replicas] / float32 () [s])."""
    group = jnp.arange(fleet.num_replicas) < reserved_slots
    fleet = scale_group(fleet, group, reserved, jnp.float32(0.0))
    return scale_group(fleet, ~group, on_demand, provision_s)


def physics_day(env: FleetEnv, base: FleetParams, rates: Array, rate_before: Array, plan: Array,
                reserved_slots: Array, hpa_target: Array, key: Array) -> dict[str, Array]:
    """One physics day (module docstring). rates: float32 (WARMUP_MIN + DAY_MIN,) [req/s] per
    minute from the warm-up's start; rate_before: float32 () [req/s] the window before the
    warm-up's mean; plan: int32 (24,) [replicas]. Returns float32 (WARMUP_MIN + DAY_MIN,) per-minute
    records: arrived, judged, violations, lost [requests]; gpu_s, od_billed_s, res_billed_s [GPU s];
    od_target [replicas]; capped (1 where the on-demand target exceeded its slots); serving
    [replicas] at the minute's end."""
    steps = rates.shape[0]
    curve = DayCurve(rate=rates, starts=jnp.zeros((1,), jnp.int32),
                     cumulative=jnp.concatenate([jnp.zeros(1), jnp.cumsum(rates * MINUTE_S)]),
                     first_weekday=jnp.int32(0))
    params = dataclasses.replace(base, curve=curve, max_steps_in_episode=jnp.int32(steps))
    k_reset, k_env = jax.random.split(key)
    _, state = env.reset_env(k_reset, params)
    od_slots = jnp.arange(base.num_replicas) >= reserved_slots
    od0 = on_demand_wanted(rate_before, jnp.float32(0.0), hpa_target).astype(jnp.int32)
    active = od_slots & (jnp.cumsum(od_slots.astype(jnp.int32)) <= od0)
    state = dataclasses.replace(state, fleet=dataclasses.replace(state.fleet, active=active))

    def body(carry: tuple, t: Array) -> tuple[tuple, dict[str, Array]]:
        state, od, window_sum = carry
        m = t - WARMUP_MIN
        r = jnp.where(m >= 0, plan[jnp.clip(m // HOUR_MIN, 0, HOURS_PER_DAY - 1)], 0).astype(jnp.int32)
        at_window = jnp.mod(t, WINDOW_MIN) == 0
        observed = jnp.where(t == 0, rate_before, window_sum / WINDOW_S)
        od = jnp.where(at_window, on_demand_wanted(observed, r.astype(jnp.float32), hpa_target).astype(jnp.int32), od)
        window_sum = jnp.where(at_window, 0.0, window_sum)
        fleet = floor_hpa_step(state.fleet, reserved_slots, r, od, base.provision_s)
        billed = (fleet.active | fleet.warming).astype(jnp.float32) * MINUTE_S
        committed = jnp.sum((fleet.receiving | fleet.warming).astype(jnp.int32))
        action = jnp.stack([committed, jnp.int32(0)])
        _, state, _, _, _, info = env.step_env(jax.random.fold_in(k_env, t), dataclasses.replace(state, fleet=fleet),
                                               action, params)
        tot = info["totals"]
        rec = {"arrived": tot.arrived, "judged": tot.judged, "violations": tot.slo_violations, "lost": tot.lost,
               "gpu_s": tot.gpu_seconds, "od_billed_s": jnp.sum(jnp.where(od_slots, billed, 0.0)),
               "res_billed_s": jnp.sum(jnp.where(od_slots, 0.0, billed)), "od_target": od.astype(jnp.float32),
               "capped": (od > jnp.sum(od_slots.astype(jnp.int32))).astype(jnp.float32), "serving": tot.serving}
        return (state, od, window_sum + tot.arrived), rec

    _, records = jax.lax.scan(body, (state, od0, jnp.float32(0.0)), jnp.arange(steps))
    return records


def _physics_batch(env: FleetEnv, base: FleetParams, rates: Array, before: Array, plans: Array, slots: Array,
                   target: Array, keys: Array) -> dict[str, Array]:
    """physics_day over a batch (leading axis N): per-day sums over the day's minutes (warm-up off),
    the largest on-demand target, and per hour (N, 24) arrived, judged, violations [requests] and
    serving [replicas, the mean of the minutes' ends]."""
    def one(r: Array, b: Array, p: Array, s: Array, k: Array) -> dict[str, Array]:
        rec = {name: v[WARMUP_MIN:] for name, v in physics_day(env, base, r, b, p, s, target, k).items()}
        hourly = {f"hour_{name}": rec[name].reshape(HOURS_PER_DAY, HOUR_MIN).sum(axis=-1)
                  for name in ("arrived", "judged", "violations")}
        return {name: jnp.sum(v) for name, v in rec.items() if name != "serving"} | hourly | {
            "od_target_max": jnp.max(rec["od_target"]),
            "hour_serving": rec["serving"].reshape(HOURS_PER_DAY, HOUR_MIN).mean(axis=-1)}

    return jax.vmap(one)(rates, before, plans, slots, keys)


_physics_jit = jax.jit(_physics_batch, static_argnames=("env",))


def fluid_hours(state: Any, plan: np.ndarray, params: ReservationParams) -> dict[str, list[float]]:
    """The fluid day per hour (`reservation_day.windows_outcome`, as `day_outcome` plays it):
    hour_arrived and hour_missed [requests], hour_serving [replicas, mean over the hour]."""
    first = (params.first_day + state.day) * DAY_WINDOWS
    rate = state.rate[first: first + DAY_WINDOWS]
    observed = jnp.concatenate([state.rate[first - 1][None], rate[:-1]])
    reserved_w = jnp.repeat(jnp.asarray(plan, jnp.float32), WINDOWS_PER_HOUR)
    missed, _, serving = windows_outcome(rate, observed, reserved_w, state.wanted_tail, params.prices)
    hours = (HOURS_PER_DAY, WINDOWS_PER_HOUR)
    return {"hour_arrived": (rate * WINDOW_S).reshape(hours).sum(-1).tolist(),
            "hour_missed": missed.reshape(hours).sum(-1).tolist(),
            "hour_serving": serving.reshape(hours).mean(-1).tolist()}


def service_days(env: Any, params: ReservationParams, services: int, seed: int) -> list[dict[str, Any]]:
    """Held-out service i (the reservation table's episode i of `evaluate.evaluation_key(seed)`) on
    committed day first_day + (i mod decision_days), entered from a fleet on the autoscaler alone.
    Each: the service index, the trace day, the reservation state, every plan of PLANS (int32 (24,))
    and the fluid DayOutcome of each."""
    policies = rb.reservation_baselines(env, params)
    out = []
    for i in range(services):
        k_reset = evaluate.stream_episode_keys(evaluate.evaluation_key(seed), i)[0]
        _, state = env.reset_env(k_reset, params)
        day = i % params.decision_days
        first = (params.first_day + day) * DAY_WINDOWS
        before = state.rate[first - MAX_LAG_WINDOWS - 1: first]
        tail = on_demand_wanted(before[:-1], jnp.float32(0.0), params.prices.hpa_target)
        state = dataclasses.replace(state, day=jnp.int32(day), wanted_tail=tail)
        obs = env.get_obs(state, params)
        plans = {"week_peak": policies["week_peak"](None, obs, params),
                 "rolling_quantile": policies["rolling_quantile"](None, obs, params),
                 "oracle": rb.hindsight_reservation(state, params),
                 "on_demand_only": policies["on_demand_only"](None, obs, params)}
        plans = {k: np.asarray(v, np.int32) for k, v in plans.items()}
        fluid = {k: env.play_day(state, jnp.asarray(v), params) for k, v in plans.items()}
        hours = {k: fluid_hours(state, v, params) for k, v in plans.items()}
        for k in plans:  # the hours add up to the day the task plays
            assert np.isclose(sum(hours[k]["hour_missed"]), float(fluid[k].missed), rtol=1e-4, atol=1e-2)
        out.append({"service": i, "trace_day": params.first_day + day, "state": state, "plans": plans,
                    "fluid": fluid, "hours": hours, "first_window": first})
    return out


def day_j(cost_usd: float, missed: float, params: ReservationParams) -> float:
    """The task's J of a day: cost over max_reserved x 24 h at the on-demand price + slo_weight x missed."""
    budget = params.max_reserved * HOURS_PER_DAY * float(params.prices.on_demand_price)
    return cost_usd / budget + float(params.slo_weight) * missed


def fluid_row(outcome: Any, params: ReservationParams) -> dict[str, float]:
    """The fluid side's numbers of one day (module docstring)."""
    missed = float(outcome.missed) / float(outcome.arrived)
    cost = float(outcome.cost_usd)
    return {"reserved_gpu_h": float(outcome.reserved_gpu_h), "on_demand_gpu_h": float(outcome.on_demand_gpu_h),
            "cost_usd": cost, "missed": missed, "arrived": float(outcome.arrived),
            "J": day_j(cost, missed, params)}


def physics_row(sums: dict[str, float], plan: np.ndarray, params: ReservationParams) -> dict[str, float]:
    """The physics side's numbers of one day (module docstring)."""
    p = params.prices
    reserved_h = float(plan.sum())
    od_h = sums["od_billed_s"] / 3600.0
    cost = reserved_h * float(p.reserved_price) + od_h * float(p.on_demand_price)
    missed = sums["violations"] / max(sums["judged"], 1.0)
    return {"reserved_gpu_h": reserved_h, "on_demand_gpu_h": od_h, "cost_usd": cost, "missed": missed,
            "arrived": sums["arrived"], "judged": sums["judged"], "lost": sums["lost"],
            "gpu_h_billed_by_physics": sums["gpu_s"] / 3600.0, "reserved_gpu_h_used": sums["res_billed_s"] / 3600.0,
            "od_target_max": sums["od_target_max"], "capped_minutes": sums["capped"],
            "J": day_j(cost, missed, params)} | {k: v for k, v in sums.items() if k.startswith("hour_")}


def run_physics(days: list[dict[str, Any]], params: ReservationParams, seed: int) -> dict[str, list[dict]]:
    """{plan: [physics sums per service-day]}: one jitted batch per plan, R = the batch's largest
    plan hour + largest fluid on-demand count + OD_MARGIN, rounded up to SLOT_QUANTUM."""
    out = {}
    keys = jax.vmap(lambda i: jax.random.fold_in(evaluate.evaluation_key(seed), i))(
        jnp.asarray([d["service"] for d in days]))
    rates, before = [], []
    for d in days:
        window = np.asarray(d["state"].rate)
        first = d["first_window"] - WARMUP_MIN // WINDOW_MIN
        rates.append(minute_rates(window[first: d["first_window"] + DAY_WINDOWS]))
        before.append(window[first - 1])
    rates_j, before_j = jnp.asarray(np.stack(rates)), jnp.asarray(np.asarray(before, np.float32))
    for name in PLANS:
        plans = np.stack([d["plans"][name] for d in days])
        need = max(int(plans[i].max()) + int(np.asarray(d["fluid"][name].on_demand_wanted).max()) + OD_MARGIN
                   for i, d in enumerate(days))
        r = -(-need // SLOT_QUANTUM) * SLOT_QUANTUM
        env, base = make_fleet(FLEET_ID, fleet={"num_replicas": r, "initial_replicas": 0})
        t0 = time.perf_counter()
        sums = _physics_jit(env, base, rates_j, before_j, jnp.asarray(plans), jnp.asarray(plans.max(axis=1)),
                            params.prices.hpa_target, keys)
        sums = jax.tree_util.tree_map(np.asarray, sums)
        print(f"physics {name}: R={r}, {len(days)} days, {time.perf_counter() - t0:.0f} s", flush=True)
        out[name] = [{k: (v[i].tolist() if k.startswith("hour_") else float(v[i])) for k, v in sums.items()}
                     | {"R": r} for i in range(len(days))]
    return out


def rel_err(model: float, truth: float) -> float:
    """(fluid - physics) / physics; NaN where the physics value is 0."""
    return (model - truth) / truth if truth != 0.0 else float("nan")


def ranking(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Whether the two models order each service-day's plans alike by `key` ("J" or "cost_usd"):
    service-days with the same full order, with the same best plan, and the pairs of plans ordered
    alike (a pair within 1e-9 on either side counts as alike only if tied on both)."""
    same_order = same_best = pairs = pairs_alike = 0
    days = sorted({(r["service"], r["trace_day"]) for r in rows})
    for day in days:
        mine = [r for r in rows if (r["service"], r["trace_day"]) == day]
        f = np.array([r["fluid"][key] for r in mine])
        p = np.array([r["physics"][key] for r in mine])
        same_order += int(list(np.argsort(f, kind="stable")) == list(np.argsort(p, kind="stable")))
        same_best += int(mine[int(np.argmin(f))]["plan"] == mine[int(np.argmin(p))]["plan"])
        for a in range(len(mine)):
            for b in range(a + 1, len(mine)):
                sf, sp = np.sign(np.round(f[a] - f[b], 9)), np.sign(np.round(p[a] - p[b], 9))
                pairs += 1
                pairs_alike += int(sf == sp)
    return {"service_days": len(days), "same_order": same_order, "same_best": same_best, "pairs": pairs,
            "pairs_alike": pairs_alike}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst relative error of cost (all rows, and rows with on-demand use), absolute
    error of the missed fraction, and the rankings by J and by cost."""
    cost = np.array([rel_err(r["fluid"]["cost_usd"], r["physics"]["cost_usd"]) for r in rows])
    od = [r for r in rows if r["fluid"]["on_demand_gpu_h"] >= OD_ROWS_GPU_H]
    od_err = np.array([rel_err(r["fluid"]["on_demand_gpu_h"], r["physics"]["on_demand_gpu_h"]) for r in od])
    miss = np.array([r["fluid"]["missed"] - r["physics"]["missed"] for r in rows])
    out = {"cost_rel_err": {"median_abs": float(np.median(np.abs(cost))), "worst": float(cost[np.argmax(np.abs(cost))]),
                            "median_signed": float(np.median(cost))},
           "on_demand_gpu_h_rel_err": {"rows": len(od), "median_abs": float(np.median(np.abs(od_err))),
                                       "worst": float(od_err[np.argmax(np.abs(od_err))]),
                                       "median_signed": float(np.median(od_err))} if od else None,
           "missed_abs_err": {"median_abs": float(np.median(np.abs(miss))),
                              "worst": float(miss[np.argmax(np.abs(miss))]),
                              "median_signed": float(np.median(miss))},
           "rank_by_J": ranking(rows, "J"), "rank_by_cost": ranking(rows, "cost_usd")}
    for plan in PLANS:
        mine = [r for r in rows if r["plan"] == plan]
        out[f"plan_{plan}"] = {f"{side}_{k}": float(np.mean([r[side][k] for r in mine]))
                               for side in ("fluid", "physics") for k in ("cost_usd", "missed", "J", "on_demand_gpu_h")}
    return out


# [req/s per serving replica] Bins of an hour's load: the HPA's target 1.0 and the day model's capacity 1.45.
LOAD_EDGES = (0.0, 0.5, 1.0, 1.45, np.inf)
# [replicas] Bins of an hour's serving replicas, <= 4, 5-8, >= 9: Fleet1's measured capacity per replica
# grows with the fleet's size (data/fleet/fleet1_v1_capacity.json: 1.3 req/s at 4, 1.9 at 8, 2.5 at 16).
SERVING_EDGES = (0.0, 4.5, 8.5, np.inf)


def _finite(edge: float) -> float | None:
    """A bin's upper edge for JSON: None for an open bin (JSON has no infinity)."""
    return None if edge == np.inf else float(edge)


def miss_by_load(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every hour of every row binned by the physics' mean serving replicas and its arrivals per
    serving replica: hours, physics 1 - attainment and fluid missed fraction, pooled over the bin
    (edges [low, high], high None for an open bin)."""
    hours = []
    for r in rows:
        f, p = r["fluid"], r["physics"]
        for h in range(HOURS_PER_DAY):
            serving = p["hour_serving"][h]
            load = p["hour_arrived"][h] / 3600.0 / serving if serving > 0 else np.inf
            hours.append((serving, load, p["hour_violations"][h], p["hour_judged"][h], f["hour_missed"][h],
                          f["hour_arrived"][h]))
    a = np.array(hours)
    out = []
    for s_lo, s_hi in zip(SERVING_EDGES[:-1], SERVING_EDGES[1:]):
        for l_lo, l_hi in zip(LOAD_EDGES[:-1], LOAD_EDGES[1:]):
            sel = (a[:, 0] > s_lo) & (a[:, 0] <= s_hi) & (a[:, 1] >= l_lo) & (a[:, 1] < l_hi)
            if sel.any():
                out.append({"serving": [s_lo, _finite(s_hi)], "load": [l_lo, _finite(l_hi)], "hours": int(sel.sum()),
                            "physics_missed": float(a[sel, 2].sum() / max(a[sel, 3].sum(), 1.0)),
                            "fluid_missed": float(a[sel, 4].sum() / max(a[sel, 5].sum(), 1.0))})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The per-row comparison as markdown."""
    lines = ["| service | day | plan | reserved GPU-h | on-demand GPU-h fluid / physics | $ fluid / physics | "
             "cost error | missed fluid / physics | J fluid / physics |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, p = r["fluid"], r["physics"]
        lines.append(f"| {r['service']} | {r['trace_day']} | {r['plan']} | {f['reserved_gpu_h']:.0f} | "
                     f"{f['on_demand_gpu_h']:.1f} / {p['on_demand_gpu_h']:.1f} | {f['cost_usd']:.0f} / "
                     f"{p['cost_usd']:.0f} | {100 * rel_err(f['cost_usd'], p['cost_usd']):+.1f} % | "
                     f"{f['missed']:.4f} / {p['missed']:.4f} | {f['J']:.3f} / {p['J']:.3f} |")
    return "\n".join(lines) + "\n"


def load_table(bins: list[dict[str, Any]]) -> str:
    """`miss_by_load`'s bins as markdown."""
    def span(edges: list[Any], closed_right: bool) -> str:
        lo, hi = edges
        if hi is None:
            return f"> {lo:g}" if closed_right else f">= {lo:g}"
        return f"({lo:g}, {hi:g}]" if closed_right else f"[{lo:g}, {hi:g})"

    lines = ["| serving replicas (hour's mean) | req/s per serving replica | hours | missed: fluid | "
             "1 - attainment: physics |",
             "|---|---|---|---|---|"]
    for b in bins:
        lines.append(f"| {span(b['serving'], True)} | {span(b['load'], False)} | {b['hours']} | "
                     f"{b['fluid_missed']:.4f} | {b['physics_missed']:.4f} |")
    return "\n".join(lines) + "\n"


def rounded(obj: Any, digits: int = 6) -> Any:
    """`obj` (nested dicts and lists) with every float rounded to `digits` significant digits."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rounded(v, digits) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=8, help="held-out services (one day each)")
    ap.add_argument("--seed", type=int, default=0, help="evaluate.evaluation_key(seed): services and arrivals")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not 1 <= args.services <= 64:
        raise ValueError(f"--services={args.services} must be in [1, 64]")
    t0 = time.perf_counter()
    env, params = ig.make(RESERVE_ID, split="heldout")
    days = service_days(env, params, args.services, args.seed)
    physics = run_physics(days, params, args.seed)
    rows = [{"service": d["service"], "trace_day": d["trace_day"], "plan": name,
             "reserved": d["plans"][name].tolist(), "fluid": fluid_row(d["fluid"][name], params) | d["hours"][name],
             "physics": physics_row(physics[name][i], d["plans"][name], params) | {"R": physics[name][i]["R"]}}
            for i, d in enumerate(days) for name in PLANS]
    summary = summarise(rows) | {"miss_by_load": miss_by_load(rows)}
    print(table(rows))
    print(load_table(summary["miss_by_load"]))
    print(json.dumps({k: v for k, v in summary.items() if k != "miss_by_load"}, indent=1))
    record = {
        "what": "Reserve1-v1's fluid day model (fleet.reservation_day) against Fleet1's per-second physics "
                "(fleet.env) for the same service-day and reservation plan; scripts/reservation_day_check.py's "
                "docstring says what each side counts",
        "command": "nice -n 10 .venv-dev/bin/python scripts/reservation_day_check.py",
        "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
        "machine": "2 shared cores, nice 10", "run_s": round(time.perf_counter() - t0, 1),
        "services": {"split": "heldout", "key": f"evaluate.evaluation_key({args.seed})", "count": args.services,
                     "day": "service i on trace day first_day + i mod decision_days"},
        "physics": {"curve": "each 10-min window's mean rate held for its 10 minutes",
                    "warmup_min": WARMUP_MIN, "od_margin_replicas": OD_MARGIN, "fleet": FLEET_ID},
        "summary": summary, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out, (json.dumps(rounded(record), indent=1) + "\n").encode())
    print(f"wrote {args.out} in {record['run_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
