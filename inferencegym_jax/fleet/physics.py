"""One control interval of a fleet, and the autoscaler's actuator.

`fleet_interval(state, arrivals, weights, configs, params)`, in order (`serve_routed` is steps
2-5, for arrivals routed request by request: `fleet.request_routing`):
  1. `routing.route`: the interval's arrivals split among the receiving replicas (active, not
     draining) by `weights`; with none receiving, everything is refused (`FleetMetrics.lost`).
  2. `jax.vmap(serving.serve_interval)` over the R replicas (one `ServerParams` for all); the
     replicas not active keep their state and their metrics are zeros.
  3. Draining replicas whose queue, running and preempted pools are empty (below
     EMPTY_BELOW_REQUESTS) are retired: idle, their server state reset (config kept).
  4. Warming replicas count `warming_s` down by dt; one that reaches 0 is active from the next
     interval on (a replica started with provision_s serves after ceil(provision_s / dt) intervals).
  5. `FleetMetrics`: sums over the replicas, request-weighted TTFT / TPOT stand-ins, GPU cost and
     GPU-seconds of the active and the warming replicas.

`scale_to(state, target, provision_s)` sets the fleet's committed size (serving + warming
replicas) to `target`: up, it first recalls draining replicas (lowest index first; their engine
is still up, so no delay), then starts the lowest-index idle ones (warming for provision_s);
down, it first cancels warming replicas, then drains serving ones (highest index first both).

The provisioning delay is the caller's, float32 [s]; no default here. A published breakdown of
one part of it for an 8B model on one GPU: Microsoft's "Dissecting LLM Container Cold-Start"
(techcommunity.microsoft.com, robcronin, 2026-04-15: vLLM and llama.cpp, Llama 3.1 8B, A100 80GB,
image pull + container start + first inference from a clean node), which does not include
acquiring the node; BentoML's "Cold-Starting LLMs on Kubernetes in Under 30 Seconds" (2025-04-11)
gives an unoptimised Llama 3.1 8B timeline of about 10 min. The fleet task should take its delay
from such a measurement, with the source beside the number.
"""

from __future__ import annotations

from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from inferencegym_jax import serving
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.fleet.routing import check_weights, pooled_requests, route
from inferencegym_jax.fleet.types import FleetMetrics, FleetState, stack_configs
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving import IntervalMetrics, ServerParams, ServerState
from inferencegym_jax.serving.types import judged_metric, select_profile
from inferencegym_jax.traffic.workload import Arrivals

# [requests] A draining replica is empty (and retired) once it holds fewer requests than this:
# the fluid engine's counts are expected values of integer counts, and its memoryless completions
# decay a pool geometrically without reaching 0; below half a request the nearest integer count
# is 0. The remainder is reported (FleetMetrics.residue), not silently dropped.
EMPTY_BELOW_REQUESTS = 0.5
# [s] A warming replica is ready once warming_s <= this: absorbs the float32 rounding of repeated
# subtraction of dt (each rounds by at most half the float32 spacing at the value, 1.9e-6 s near
# 60 s; exact for whole-second dt and delays), 1 ms, far below the seconds-to-minutes resolution of
# provisioning delays.
COUNTDOWN_TOLERANCE_S = 1e-3

Tree = TypeVar("Tree", ServerState, IntervalMetrics)


def _replica_mask(mask: Array, leaf: Array) -> Array:
    """`mask` (R,) reshaped to broadcast against `leaf` (R, ...)."""
    return mask.reshape(mask.shape + (1,) * (jnp.ndim(leaf) - 1))


def select_replicas(mask: Array, new: Tree, old: Tree) -> Tree:
    """Per replica, `new` where `mask` (bool (R,)) else `old` (same-structured pytrees, leading axis R)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(_replica_mask(mask, a), a, b), new, old)


def retire_drained(servers: ServerState, active: Array, draining: Array) -> tuple[ServerState, Array, Array, Array]:
    """The draining replicas holding fewer than EMPTY_BELOW_REQUESTS made idle.

    Returns the servers (the retired ones reset to `serving.initial_state` with their config: a
    replica started later loads its weights while warming, so its first configuration is free),
    active and draining (bool (R,)), and the residue dropped (float32 [requests]).
    """
    pools = pooled_requests(servers)
    retire = active & draining & (pools < EMPTY_BELOW_REQUESTS)
    buckets = servers.queue.count.shape[-1]
    accounting = "admission" if servers.tpot is None else "request"  # only the cohorts' presence matters here
    fresh = jax.vmap(lambda c: serving.initial_state(c, buckets, accounting))(servers.config)
    servers = select_replicas(retire, fresh, servers)
    residue = jnp.sum(jnp.where(retire, pools, 0.0))
    return servers, active & ~retire, draining & ~retire, residue


def count_down(warming_s: Array, active: Array, dt_s: Array) -> tuple[Array, Array]:
    """Warming replicas one interval nearer: `warming_s` (float32 (R,) [s]) less dt; those at 0
    (within COUNTDOWN_TOLERANCE_S) become active. Returns warming_s and active."""
    warming = warming_s > 0.0
    left = jnp.where(warming, warming_s - dt_s, 0.0)
    ready = warming & (left <= COUNTDOWN_TOLERANCE_S)
    return jnp.where(ready, 0.0, left).astype(jnp.float32), active | ready


def warming_gpus(configs: ServingAction) -> Array:
    """float32 (R,) [GPUs] a replica being provisioned for `configs` holds: 2 with a prefill GPU
    (as `engine.reconfigure` bills it), else 1."""
    return jnp.where(configs.prefill_disagg > 0.5, 2.0, 1.0).astype(jnp.float32)


def weighted(values: Array, weights: Array) -> Array:
    """sum(values * weights) / sum(weights), 0 when the weights sum to 0."""
    return safe_div(jnp.sum(values * weights), jnp.sum(weights))


def fleet_metrics(m: IntervalMetrics, arrived: Array, lost: Arrivals, residue: Array, warming: Array,
                  next_state: FleetState, configs: ServingAction, params: ServerParams) -> FleetMetrics:
    """The interval's `FleetMetrics` from the replicas' masked metrics `m` ((R,) leaves), the
    fleet's arrivals (float32 () [requests]) and `warming` (bool (R,): the replicas provisioning
    during the interval)."""
    dt = params.dt_s
    price = jax.vmap(lambda tier: select_profile(params.profiles, tier).price_per_hour)(configs.quant_tier)
    warm_gpus = jnp.where(warming, warming_gpus(configs), 0.0)
    refused = jnp.sum(lost.count) + residue
    judged = jnp.sum(getattr(m, judged_metric(params.slo_accounting)) + m.timeouts + m.failed)
    return FleetMetrics(
        arrived=arrived,
        lost=jnp.sum(lost.count),
        residue=residue,
        admitted=jnp.sum(m.admitted),
        completed=jnp.sum(m.completed),
        judged=judged + refused,
        slo_violations=jnp.sum(m.slo_violations) + refused,
        timeouts=jnp.sum(m.timeouts),
        failed=jnp.sum(m.failed),
        output_tokens=jnp.sum(m.output_tokens),
        good_tokens=jnp.sum(m.good_tokens),
        cost_usd=jnp.sum(m.cost_usd) + jnp.sum(warm_gpus * price) * dt / 3600.0,
        gpu_seconds=(jnp.sum(m.num_gpus) + jnp.sum(warm_gpus)) * dt,
        ttft_p50_s=weighted(m.ttft_p50_s, m.admitted),
        ttft_p99_s=weighted(m.ttft_p99_s, m.admitted),
        ttft_slo_ratio=weighted(m.ttft_slo_ratio, m.admitted),
        tpot_s=weighted(m.tpot_s, m.output_tokens),
        queue_depth=jnp.sum(m.queue_depth),
        replicas_serving=jnp.sum(next_state.receiving.astype(jnp.float32)),
        replicas_warming=jnp.sum(next_state.warming.astype(jnp.float32)),
        replicas_draining=jnp.sum((next_state.active & next_state.draining).astype(jnp.float32)),
        replica=m,
    )


def fleet_interval(state: FleetState, arrivals: Arrivals, weights: Array, configs: ServingAction,
                   params: ServerParams) -> tuple[FleetState, FleetMetrics]:
    """Advance the fleet by one interval of `params.dt_s` seconds (the module docstring's steps).

    Args:
      state: FleetState of R replicas.
      arrivals: workload.Arrivals of the fleet, (3,) leaves.
      weights: float32 (R,) routing weights (>= 0; renormalised over the receiving replicas;
        `routing.least_loaded_weights` gives the least-loaded rule's).
      configs: ServingAction applied to each replica: (R,) leaves, or scalars for all.
      params: serving.ServerParams shared by the replicas.

    Raises:
      ValueError: outside jit, weights of the wrong shape or a negative or non-finite weight, or
        a config leaf of a shape other than () or (R,).
    """
    check_weights(weights, state.num_replicas)
    per_replica, lost = route(arrivals, weights, state.receiving)
    return serve_routed(state, per_replica, lost, jnp.sum(arrivals.count), configs, params)


def serve_routed(state: FleetState, per_replica: Arrivals, lost: Arrivals, arrived: Array, configs: ServingAction,
                 params: ServerParams) -> tuple[FleetState, FleetMetrics]:
    """Steps 2-5 of `fleet_interval` for arrivals already routed: `per_replica` (Arrivals with a
    leading axis R; zeros where not receiving) and `lost` (Arrivals (3,), refused), as
    `routing.route` or `request_routing.route_requests` give them; `arrived` (float32 ()
    [requests]) the fleet's arrivals.

    Raises:
      ValueError: outside jit, a config leaf of a shape other than () or (R,).
    """
    configs = stack_configs(configs, state.num_replicas)
    stepped, m = jax.vmap(serving.serve_interval, in_axes=(0, 0, 0, None))(state.servers, per_replica, configs,
                                                                          params)
    servers = select_replicas(state.active, stepped, state.servers)
    m = select_replicas(state.active, m, jax.tree_util.tree_map(jnp.zeros_like, m))
    servers, active, draining, residue = retire_drained(servers, state.active, state.draining)
    warming_s, active = count_down(state.warming_s, active, params.dt_s)
    next_state = FleetState(servers, active, warming_s, draining)
    return next_state, fleet_metrics(m, arrived, lost, residue, state.warming, next_state, configs, params)


def _check_scale(target: Array, provision_s: Array, num_replicas: int) -> None:
    """Host-side checks of concrete `scale_to` arguments (ValueError naming the argument)."""
    if not isinstance(target, jax.core.Tracer):
        value = np.asarray(target, np.float64)
        if value.shape != () or not (np.isfinite(value) and 0 <= value <= num_replicas):
            raise ValueError(f"target_active={value.tolist()} must be a number in [0, {num_replicas}] (replicas)")
    if not isinstance(provision_s, jax.core.Tracer):
        delay = np.asarray(provision_s, np.float64)
        if delay.shape not in ((), (num_replicas,)) or not np.all(np.isfinite(delay) & (delay >= 0.0)):
            raise ValueError(f"provision_s={delay.tolist()} must be finite and >= 0 [s], shape () or "
                             f"({num_replicas},)")


def _first(mask: Array, count: Array, *, from_top: bool) -> Array:
    """bool (R,): the first `count` True entries of `mask`, lowest index first (or highest)."""
    m = mask.astype(jnp.int32)
    rank = jnp.cumsum(m[::-1])[::-1] if from_top else jnp.cumsum(m)
    return mask & (rank <= count)


def scale_to(state: FleetState, target_active: Array, provision_s: Array) -> FleetState:
    """Set the committed replicas (serving + warming) to `target_active` (module docstring).

    Args:
      state: FleetState.
      target_active: int or float scalar [replicas] in [0, R] (rounded; clipped inside jit).
      provision_s: float32 [s] >= 0, scalar or (R,) per replica slot: node start, image pull,
        weight load and engine start of a replica started now (the caller's, sourced). 0 makes
        a started replica active at once.

    Raises:
      ValueError: outside jit, a target outside [0, R] or a negative or non-finite delay.
    """
    r = state.num_replicas
    _check_scale(target_active, provision_s, r)
    target = jnp.clip(jnp.round(jnp.nan_to_num(jnp.asarray(target_active, jnp.float32))), 0, r).astype(jnp.int32)
    delay = jnp.broadcast_to(jnp.nan_to_num(jnp.maximum(jnp.asarray(provision_s, jnp.float32), 0.0)), (r,))
    serving_, warming, draining = state.receiving, state.warming, state.active & state.draining
    need = target - jnp.sum(serving_.astype(jnp.int32)) - jnp.sum(warming.astype(jnp.int32))
    up, down = jnp.maximum(need, 0), jnp.maximum(-need, 0)
    recall = _first(draining, up, from_top=False)
    idle = ~state.active & ~warming
    start = _first(idle, up - jnp.sum(recall.astype(jnp.int32)), from_top=False)
    cancel = _first(warming, down, from_top=True)
    drain = _first(serving_, down - jnp.sum(cancel.astype(jnp.int32)), from_top=True)
    instant = start & (delay <= 0.0)
    warming_s = jnp.where(start & ~instant, delay, jnp.where(cancel, 0.0, state.warming_s))
    return FleetState(
        servers=state.servers,
        active=state.active | instant,
        warming_s=warming_s.astype(jnp.float32),
        draining=(state.draining & ~recall) | drain,
    )
