"""Non-learning fleet controllers (issue 42): static for the peak, Kubernetes' HPA, the HPA's
stabilisation around the fleet's capacity per size (`hpa_pooled`), a seasonal-naive forecast, and
two clairvoyant oracles (bounds): one at a flat capacity per replica, one at the fleet's capacity
per size measured on its own physics (`data/fleet/<task>_capacity.json`, `scripts/fleet_capacity.py`:
pooled replicas carry more each). Every chosen number is read from the task's
data/fleet/<task>_baselines.json, which `scripts/fleet_baselines.py` writes from a search on the
TRAINING split (never the held-out days).

Every controller is a pytree (`flax.struct`) meeting `protocols.Controller`; its numbers are leaves,
so controllers that differ only in them share one compiled episode. Each routes least-loaded (rule 0)
and commands a target number of replicas (serving + warming; `fleet.physics.scale_to`).

HPA: the algorithm of https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/
  desired = ceil(current x metric / target), no change while |metric / target - 1| <= tolerance
  (0.1, the default `--horizontal-pod-autoscaler-tolerance`); pods without a metric (warming
  replicas) count as 0 load when scaling up and as exactly the target when scaling down, and a
  recomputed ratio that flips direction or falls inside the tolerance keeps the current count;
  scale-up is immediate (default scaleUp stabilizationWindowSeconds 0) at most to max(2 x current,
  current + 4) per 60 s (the default scaleUp policies, k8s API HorizontalPodAutoscalerBehavior);
  scale-down goes to the highest recommendation of the last 300 s (the default scaleDown
  stabilizationWindowSeconds). minReplicas 1, maxReplicas R.
  Metric: requests per second per serving replica over the last control interval (KServe's
  `scaleMetric: rps` with a per-replica `scaleTarget`,
  https://kserve.github.io/website/docs/model-serving/predictive-inference/autoscaling/autoscaling-concept;
  Knative's "rps" metric). The alternative production guides give, vLLM's waiting + running
  requests per replica (llm-d, https://llm-d.ai/docs/dev/architecture/autoscaling: "absolute
  per-replica queued-request and running-request targets"; KServe's KEDA guide), is a gauge that
  Prometheus averages over a scrape window; read as one end-of-interval snapshot of the
  engine, whose code requests finish within seconds, it swung from 0.001 to 1.4 requests per
  replica between minutes of a steady load (a probe on a training window), so the HPA on it
  scaled on noise. `hpa_queue_metric` keeps it for comparison.

Pooled HPA (`PooledHpaController`; not Kubernetes' formula, which has one target per pod): the
recommendation is the fewest replicas whose capacity per fleet size carries the last interval's
arrival rate (`pooled_replicas`, the pooled oracle's rule on the observed rate instead of the
future peak), under the HPA's scale-up rate limit and 300-s scale-down window. A flat target
asks as much of a replica at 3 replicas as at 12; the measured capacity does not (Fleet1-v2: 1.2
req/s per replica at 3, 2.4 at 12), so this is what an operator would configure from a
load test of the fleet at each size.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from inferencegym_jax.files import shipped
from inferencegym_jax.fleet.day_traffic import MINUTE_S, rate_at
from inferencegym_jax.fleet.env import FleetEnv, FleetParams
from inferencegym_jax.fleet.routing import pooled_requests
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.protocols import Seen, StepOutput

BASELINES_FILE = {"InferenceGym-Fleet1-v1": "fleet1_v1_baselines.json",
                  "InferenceGym-Fleet1-v2": "fleet1_v2_baselines.json"}
CAPACITY_FILE = {"InferenceGym-Fleet1-v1": "fleet1_v1_capacity.json",
                 "InferenceGym-Fleet1-v2": "fleet1_v2_capacity.json"}
HPA_TOLERANCE = 0.1  # [ratio] Kubernetes' default --horizontal-pod-autoscaler-tolerance
HPA_DOWN_WINDOW_S = 300.0  # [s] default scaleDown.stabilizationWindowSeconds
HPA_UP_PODS = 4  # [replicas per 60 s] default scaleUp policy (Pods 4 / 60 s; or Percent 100 / 60 s)
FORECAST_RATIO_CLIP = (0.25, 4.0)  # [ratio] today / yesterday, clipped against a near-empty yesterday


def _action(target: jax.Array, params: FleetParams) -> jax.Array:
    """int32 (2,) [target in [1, R], least-loaded routing]."""
    return jnp.stack([jnp.clip(target, 1, params.num_replicas).astype(jnp.int32), jnp.int32(0)])


def _committed(seen: Seen) -> jax.Array:
    """int32 () [replicas] serving + warming (a Deployment's spec.replicas)."""
    return (seen.obs.serving + seen.obs.warming).astype(jnp.int32)


@struct.dataclass
class StaticController:
    """A fixed replica count. replicas: int32 () [replicas]."""

    replicas: jax.Array

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: FleetParams) -> tuple[jax.Array, tuple[()]]:
        return _action(self.replicas, params), memory

    def update(self, memory: tuple[()], step: StepOutput, params: FleetParams) -> tuple[()]:
        return memory


def hpa_metric(seen: Seen) -> jax.Array:
    """float32 () [req/s per serving replica] over the last control interval."""
    return safe_div(seen.obs.arrival_rate, seen.obs.serving)


def hpa_queue_metric(seen: Seen) -> jax.Array:
    """float32 () [requests per replica], waiting + running, mean over the serving replicas."""
    fleet = seen.state.fleet
    load = jnp.where(fleet.receiving, pooled_requests(fleet.servers), 0.0)
    return safe_div(jnp.sum(load), jnp.sum(fleet.receiving.astype(jnp.float32)))


def hpa_recommendation(metric: jax.Array, ready: jax.Array, missing: jax.Array, target: jax.Array) -> jax.Array:
    """int32 () [replicas], the HPA's raw recommendation (module docstring) from the mean `metric`
    over `ready` serving replicas, `missing` (warming) ones and the `target` per replica."""
    ready_f, missing_f = ready.astype(jnp.float32), missing.astype(jnp.float32)
    current = ready + missing
    ratio = metric / target
    within = jnp.abs(ratio - 1.0) <= HPA_TOLERANCE
    plain = jnp.ceil(ratio * ready_f).astype(jnp.int32)
    total = jnp.maximum(ready_f + missing_f, 1.0)
    filled = jnp.where(ratio > 1.0, metric * ready_f, metric * ready_f + target * missing_f)
    new_ratio = filled / (target * total)
    flips = (ratio > 1.0) != (new_ratio > 1.0)
    rec_missing = jnp.where(flips | (jnp.abs(new_ratio - 1.0) <= HPA_TOLERANCE), current,
                            jnp.ceil(new_ratio * total).astype(jnp.int32))
    rec = jnp.where(missing > 0, rec_missing, plain)
    rec = jnp.where(within, current, rec)
    return jnp.where(ready > 0, rec, jnp.maximum(current, 1))  # no metric at all: hold


@struct.dataclass
class HpaController:
    """Kubernetes' HPA on arrivals per serving replica (module docstring).

    target: float32 () [req/s per serving replica]; window: static int, recommendations kept
    (HPA_DOWN_WINDOW_S / control interval). Memory: int32 (window,) [replicas], the last
    recommendations, newest first.
    """

    target: jax.Array
    window: int = struct.field(pytree_node=False, default=5)

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> jax.Array:
        return jnp.full((self.window,), _committed(seen), jnp.int32)

    def act(self, memory: jax.Array, key: jax.Array, seen: Seen, params: FleetParams) -> tuple[jax.Array, jax.Array]:
        ready = seen.obs.serving.astype(jnp.int32)
        missing = seen.obs.warming.astype(jnp.int32)
        current = ready + missing
        return stabilised(hpa_recommendation(hpa_metric(seen), ready, missing, self.target), memory, current, params)

    def update(self, memory: jax.Array, step: StepOutput, params: FleetParams) -> jax.Array:
        return memory


def pooled_replicas(rate: jax.Array, capacity: jax.Array, scale: jax.Array, num_replicas: int) -> jax.Array:
    """int32 () [replicas], the fewest N with scale x N x capacity[N] >= rate [req/s]; num_replicas
    if none. capacity: float32 (R + 1,) [req/s per replica] by fleet size; scale: float32 () [1]."""
    carried = scale * jnp.arange(capacity.shape[0], dtype=jnp.float32) * capacity
    enough = carried >= rate
    return jnp.where(enough.any(), jnp.argmax(enough), num_replicas).astype(jnp.int32)


def stabilised(desired: jax.Array, memory: jax.Array, current: jax.Array, params: FleetParams
               ) -> tuple[jax.Array, jax.Array]:
    """(int32 (2,) action, memory): the HPA's scale-up rate limit and scale-down window applied to
    the raw recommendation `desired` [replicas] (memory: int32 (window,), newest first)."""
    desired = jnp.clip(desired, 1, params.num_replicas)
    desired = jnp.minimum(desired, jnp.maximum(2 * current, current + HPA_UP_PODS))  # scale-up rate limit
    memory = jnp.concatenate([desired[None], memory[:-1]])
    # k8s stabilizeRecommendationWithBehaviors: up window 0 -> up_rec = desired; down_rec = max
    final = jnp.minimum(jnp.maximum(current, desired), jnp.max(memory))
    return _action(final, params), memory


@struct.dataclass
class PooledHpaController:
    """The HPA's stabilisation around the capacity per fleet size (module docstring): causal.

    capacity: float32 (R + 1,) [req/s per replica] by fleet size (`scripts/fleet_capacity.py`);
    scale: float32 () [1], chosen on the training days (below 1: headroom for the provisioning
    lead); window: static int, recommendations kept. Memory: int32 (window,) [replicas].
    """

    capacity: jax.Array
    scale: jax.Array
    window: int = struct.field(pytree_node=False, default=5)

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> jax.Array:
        return jnp.full((self.window,), _committed(seen), jnp.int32)

    def act(self, memory: jax.Array, key: jax.Array, seen: Seen, params: FleetParams) -> tuple[jax.Array, jax.Array]:
        desired = pooled_replicas(seen.obs.arrival_rate, self.capacity, self.scale, params.num_replicas)
        return stabilised(desired, memory, _committed(seen), params)

    def update(self, memory: jax.Array, step: StepOutput, params: FleetParams) -> jax.Array:
        return memory


@struct.dataclass
class ForecastMemory:
    """observed, yesterday: float32 (W,) [req/s], the last W intervals' arrival rate and the curve's
    rate 24 h earlier (ring buffers); filled: int32 () entries written; pending: float32 () [req/s]
    yesterday's rate of the interval being served."""

    observed: jax.Array
    yesterday: jax.Array
    filled: jax.Array
    pending: jax.Array


@struct.dataclass
class ForecastController:
    """Seasonal-naive: replicas for yesterday's rate at the provisioning lead
    (obs.rate_yesterday_ahead) x today's / yesterday's rate over the last `window` intervals,
    over `capacity` [req/s per replica], plus `spare` [replicas] (both float32 ())."""

    capacity: jax.Array
    spare: jax.Array
    window: int = struct.field(pytree_node=False, default=60)

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> ForecastMemory:
        zeros = jnp.zeros((self.window,), jnp.float32)
        return ForecastMemory(zeros, zeros, jnp.int32(0), jnp.float32(0.0))

    def act(self, memory: ForecastMemory, key: jax.Array, seen: Seen, params: FleetParams
            ) -> tuple[jax.Array, ForecastMemory]:
        ratio = jnp.where(jnp.sum(memory.yesterday) > 0.0,
                          safe_div(jnp.sum(memory.observed), jnp.sum(memory.yesterday)), 1.0)
        ratio = jnp.clip(jnp.where(memory.filled > 0, ratio, 1.0), *FORECAST_RATIO_CLIP)
        need = seen.obs.rate_yesterday_ahead * ratio / self.capacity + self.spare
        memory = dataclasses.replace(memory, pending=seen.obs.rate_yesterday)
        return _action(jnp.ceil(need - 1e-4), params), memory

    def update(self, memory: ForecastMemory, step: StepOutput, params: FleetParams) -> ForecastMemory:
        return ForecastMemory(
            observed=jnp.concatenate([step.obs.arrival_rate[None], memory.observed[:-1]]),
            yesterday=jnp.concatenate([memory.pending[None], memory.yesterday[:-1]]),
            filled=memory.filled + 1, pending=memory.pending)


def peak_ahead(seen: Seen, params: FleetParams, lookahead_min: int) -> jax.Array:
    """float32 () [req/s], the episode's own curve at its highest over the next `lookahead_min`
    minutes from interval seen.t (what the clairvoyant oracles provision for)."""
    control_min = params.control_interval_s / MINUTE_S
    now = seen.state.start_minute + jnp.floor(seen.t.astype(jnp.float32) * control_min).astype(jnp.int32)
    return jnp.max(rate_at(params.curve, now + jnp.arange(lookahead_min + 1)))


@struct.dataclass
class OracleController:
    """Clairvoyant (a bound, not a causal policy): reads the episode's own future curve and commands
    at t the replicas for the highest rate over the next `lookahead_min` minutes (provisioning lead
    + one control interval), at `capacity` [req/s per replica] (float32 ())."""

    capacity: jax.Array
    lookahead_min: int = struct.field(pytree_node=False, default=16)

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: FleetParams) -> tuple[jax.Array, tuple[()]]:
        peak = peak_ahead(seen, params, self.lookahead_min)
        return _action(jnp.ceil(peak / self.capacity - 1e-4), params), memory

    def update(self, memory: tuple[()], step: StepOutput, params: FleetParams) -> tuple[()]:
        return memory


@struct.dataclass
class PooledOracleController:
    """Clairvoyant (a bound, not a causal policy): at t, the fewest replicas N whose measured
    capacity carries the highest rate over the next `lookahead_min` minutes,
    scale x N x capacity[N] >= peak (R if none does). capacity: float32 (R + 1,) [req/s per
    replica] by fleet size (`scripts/fleet_capacity.py`); scale: float32 () [1], chosen on the
    training days. Where OracleController provisions each replica for one flat rate, this one
    plans with the physics' pooling: 16 replicas carry more per replica than 4."""

    capacity: jax.Array
    scale: jax.Array
    lookahead_min: int = struct.field(pytree_node=False, default=16)

    def init(self, key: jax.Array, seen: Seen, params: FleetParams) -> tuple[()]:
        return ()

    def act(self, memory: tuple[()], key: jax.Array, seen: Seen, params: FleetParams) -> tuple[jax.Array, tuple[()]]:
        peak = peak_ahead(seen, params, self.lookahead_min)
        return _action(pooled_replicas(peak, self.capacity, self.scale, params.num_replicas), params), memory

    def update(self, memory: tuple[()], step: StepOutput, params: FleetParams) -> tuple[()]:
        return memory


def lookahead_minutes(params: FleetParams) -> int:
    """[min] the oracle's lookahead: ceil(provision_s / 60 s) + ceil(control interval / 60 s)."""
    return int(math.ceil(float(params.provision_s) / MINUTE_S) + math.ceil(float(params.control_interval_s) / MINUTE_S))


def hpa_window(params: FleetParams) -> int:
    """Recommendations in the HPA's 300-s scale-down window at this control interval (>= 1)."""
    return max(1, int(round(HPA_DOWN_WINDOW_S / float(params.control_interval_s))))


def make_controllers(params: FleetParams, chosen: dict[str, Any], capacity: Any = None) -> dict[str, Any]:
    """The controllers from the chosen numbers {"static_for_peak": {"replicas"}, "hpa": {"target"},
    "forecast": {"capacity", "spare"}, "oracle": {"capacity"}} and, with `capacity` (float (R + 1,)
    [req/s per replica] by fleet size), the pooled ones of "hpa_pooled" and "oracle_pooled": {"scale"}
    where chosen has them."""
    f32 = jnp.float32
    controllers = {
        "static_for_peak": StaticController(jnp.int32(chosen["static_for_peak"]["replicas"])),
        "hpa": HpaController(f32(chosen["hpa"]["target"]), hpa_window(params)),
        "forecast": ForecastController(f32(chosen["forecast"]["capacity"]), f32(chosen["forecast"]["spare"])),
        "oracle": OracleController(f32(chosen["oracle"]["capacity"]), lookahead_minutes(params)),
    }
    if capacity is None:
        return controllers
    table = jnp.asarray(capacity, f32)
    if table.shape != (params.num_replicas + 1,):
        raise ValueError(f"capacity has shape {table.shape}; allowed: ({params.num_replicas + 1},), one per "
                         f"fleet size 0..{params.num_replicas}")
    if "hpa_pooled" in chosen:
        controllers["hpa_pooled"] = PooledHpaController(table, f32(chosen["hpa_pooled"]["scale"]), hpa_window(params))
    if "oracle_pooled" in chosen:
        controllers["oracle_pooled"] = PooledOracleController(table, f32(chosen["oracle_pooled"]["scale"]),
                                                              lookahead_minutes(params))
    return controllers


def load_chosen(env_id: str) -> dict[str, Any]:
    """The chosen numbers of a fleet task's baselines file (its "chosen" table).

    Raises:
      ValueError: a task without a baselines file (names the ones that have one).
    """
    data = _baselines_file(env_id)
    return {name: {k: v["value"] for k, v in entry.items()} for name, entry in data["chosen"].items()}


def _baselines_file(env_id: str) -> dict[str, Any]:
    """A fleet task's baselines file, parsed; ValueError for a task without one (names those with one)."""
    if env_id not in BASELINES_FILE:
        raise ValueError(f"env_id={env_id!r} has no fleet baselines file; allowed: {sorted(BASELINES_FILE)}")
    return json.loads(shipped("data").joinpath("fleet", BASELINES_FILE[env_id]).read_text())


def lowest_cost_numbers(env_id: str, name: str) -> dict[str, Any]:
    """The numbers of baseline `name`'s training-search candidate with the lowest mean episode cost J
    (the reward PPO maximises) in the task's baselines file, where "chosen" has the fewest GPU-hours
    at the SLO target.

    Raises:
      ValueError: a baseline the file did not search (names the ones it did).
    """
    data = _baselines_file(env_id)
    if name not in data["search"]:
        raise ValueError(f"baseline {name!r} is not in {BASELINES_FILE[env_id]}; allowed: {sorted(data['search'])}")
    best = min(data["search"][name]["table"], key=lambda row: row["J_mean"])
    return {key: best[key] for key in data["chosen"][name]}


def load_capacity(env_id: str) -> list[float] | None:
    """The capacity per fleet size [req/s per replica] of data/fleet/<task>_capacity.json
    (`scripts/fleet_capacity.py`); None for a task without one."""
    if env_id not in CAPACITY_FILE:
        return None
    data = json.loads(shipped("data").joinpath("fleet", CAPACITY_FILE[env_id]).read_text())
    return [float(c) for c in data["capacity"]["value"]]


def fleet_baselines(env: FleetEnv, params: FleetParams) -> dict[str, Any]:
    """{"static_for_peak", "hpa", "forecast", "oracle"[, "hpa_pooled", "oracle_pooled"]}: the task's baselines,
    their numbers from data/fleet/<task>_baselines.json (chosen on the training split by
    scripts/fleet_baselines.py), the pooled oracle's capacities from data/fleet/<task>_capacity.json."""
    return make_controllers(params, load_chosen(env.env_id), load_capacity(env.env_id))
