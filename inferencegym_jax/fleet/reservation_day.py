"""One day of a fleet under day-ahead reserved capacity: reserved replicas, a reactive on-demand
autoscaler on top, and what the day costs (`day_outcome`).

A fluid model at the traffic's own resolution (10-min windows of `fleet.servegen`), derived from
Fleet1's replica and its measured numbers rather than simulated request by request:

* the reserved replicas of each hour (the day-ahead commitment) serve from the hour's start;
* on top, an autoscaler as Kubernetes' HPA keeps ceil(rate / target) replicas in all, the rate it
  sees being the last window's (causal): its on-demand replicas are the ones that number lacks,
  wanted(w) = max(ceil(rate(w - 1) / target) - reserved(w), 0);
* an on-demand replica serves `provision_s` after it was asked for, and is given back as soon as
  it is not wanted (newest first): the k-th one serves at time t iff wanted >= k all through
  [t - provision_s, t], so the on-demand replicas serving are the minimum of `wanted` over that
  span (exact for this rule). As provision_s is not a whole number of windows, each window has two
  spans: its first (provision_s mod window) seconds reach one window further back;
* the replicas serving carry `capacity` requests per second each (the rate at which Fleet1's
  replica met its SLO target on training days); requests beyond that, in any span, are counted as
  SLO misses (a fluid model has no queue to hold them);
* the price: reserved replica-hours at the 1-year reserved price, on-demand replica-hours (from
  the ask: a provisioning replica is billed) at the on-demand price.

Within a window the rate is flat: the trace's second-scale burstiness is below this model's
resolution (the per-second fleet env, `fleet.env`, is the one that resolves it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

WINDOW_S = 600.0  # [s] the traffic's resolution (fleet.servegen's windows)
WINDOWS_PER_HOUR = 6  # 3600 s / WINDOW_S
HOURS_PER_DAY = 24
DAY_WINDOWS = WINDOWS_PER_HOUR * HOURS_PER_DAY
HOUR_S = 3600.0  # [s]
# Windows of on-demand history a day needs from the day before: a provisioning delay up to
# (MAX_LAG_WINDOWS - 1) x WINDOW_S = 3000 s reaches that far back (ReservationParams checks it).
MAX_LAG_WINDOWS = 6


@struct.dataclass
class DayPrices:
    """The fleet's replica and prices (a pytree of float32 scalars).

    Attributes:
      capacity: () [req/s per replica], the rate one serving replica carries within its SLO.
      hpa_target: () [req/s per replica], the on-demand autoscaler's target rate per replica.
      provision_s: () [s], from asking for an on-demand replica to its serving.
      reserved_price: () [$/GPU-hour], a reserved replica (one GPU).
      on_demand_price: () [$/GPU-hour], an on-demand replica (one GPU).
    """

    capacity: Array
    hpa_target: Array
    provision_s: Array
    reserved_price: Array
    on_demand_price: Array


@struct.dataclass
class DayOutcome:
    """What one day cost (float32 scalars, or (DAY_WINDOWS,) where said).

    Attributes:
      arrived: () [requests], the day's requests.
      missed: () [requests], those beyond the serving replicas' capacity (SLO misses).
      reserved_gpu_h: () [GPU-hours] of reserved replicas.
      on_demand_gpu_h: () [GPU-hours] of on-demand replicas, provisioning included.
      cost_usd: () [$], both at their prices.
      on_demand_wanted: (DAY_WINDOWS,) [replicas], the autoscaler's on-demand replicas per window
        (the next day starts from its tail).
      serving: (DAY_WINDOWS,) [replicas], replicas serving per window (time-averaged over its spans).
    """

    arrived: Array
    missed: Array
    reserved_gpu_h: Array
    on_demand_gpu_h: Array
    cost_usd: Array
    on_demand_wanted: Array
    serving: Array


def on_demand_wanted(observed_rate: Array, reserved_per_window: Array, hpa_target: Array) -> Array:
    """float32 (..., W) [replicas]: on-demand replicas the autoscaler asks for, given the rate it
    sees at each window's start (req/s) and the reserved replicas then."""
    return jnp.maximum(jnp.ceil(observed_rate / hpa_target) - reserved_per_window, 0.0)


def _serving_on_demand(wanted: Array, wanted_before: Array, provision_s: Array) -> tuple[Array, Array, Array]:
    """On-demand replicas serving in each window's two spans, and the first span's length [s].

    The k-th replica serves at t iff wanted >= k over all of [t - provision_s, t] (module
    docstring): a running minimum of `wanted` over 0..MAX_LAG_WINDOWS windows back, read at the
    lag each span needs."""
    extended = jnp.concatenate([wanted_before, wanted])  # (MAX_LAG + W,)
    lagged = jnp.stack([extended[MAX_LAG_WINDOWS - s: MAX_LAG_WINDOWS - s + wanted.shape[0]]
                        for s in range(MAX_LAG_WINDOWS + 1)])  # (MAX_LAG + 1, W): s windows back
    running_min = jax.lax.cummin(lagged, axis=0)
    whole = jnp.floor(provision_s / WINDOW_S).astype(jnp.int32)
    first_span_s = provision_s - whole.astype(jnp.float32) * WINDOW_S
    return running_min[whole + 1], running_min[whole], first_span_s


def windows_outcome(rate: Array, observed: Array, reserved_w: Array, wanted_before: Array, prices: DayPrices
                    ) -> tuple[Array, Array, Array]:
    """Consecutive windows under reserved replicas (module docstring).

    Args:
      rate: float32 (W,) [req/s], each window's mean rate.
      observed: float32 (W,) [req/s], the rate the autoscaler sees at each window's start (the
        window before's).
      reserved_w: float32 (W,) [replicas] reserved in each window.
      wanted_before: float32 (MAX_LAG_WINDOWS,) [replicas], on-demand replicas asked for in the
        windows before these, oldest first.
      prices: the replica and prices.

    Returns float32 (W,) each: missed [requests], on-demand replicas wanted [replicas], replicas
    serving [replicas] (time-averaged over the window's two spans).
    """
    wanted = on_demand_wanted(observed, reserved_w, prices.hpa_target)
    early, late, first_span_s = _serving_on_demand(wanted, wanted_before, prices.provision_s)
    late_span_s = WINDOW_S - first_span_s
    missed_early = jnp.maximum(rate - (reserved_w + early) * prices.capacity, 0.0) * first_span_s
    missed_late = jnp.maximum(rate - (reserved_w + late) * prices.capacity, 0.0) * late_span_s
    serving = reserved_w + (early * first_span_s + late * late_span_s) / WINDOW_S
    return missed_early + missed_late, wanted, serving


def day_outcome(rate: Array, rate_before: Array, wanted_before: Array, reserved: Array, prices: DayPrices
                ) -> DayOutcome:
    """The day's cost under `reserved` (module docstring).

    Args:
      rate: float32 (DAY_WINDOWS,) [req/s], the day's mean rate per window.
      rate_before: float32 () [req/s], the last window's rate before the day (what the autoscaler
        sees at the day's start).
      wanted_before: float32 (MAX_LAG_WINDOWS,) [replicas], the on-demand replicas asked for in
        the windows before the day, oldest first.
      reserved: int32 (HOURS_PER_DAY,) [replicas], the reserved replicas of each hour.
      prices: the replica and prices.
    """
    reserved_w = jnp.repeat(reserved.astype(jnp.float32), WINDOWS_PER_HOUR)
    observed = jnp.concatenate([rate_before[None], rate[:-1]])
    missed, wanted, serving = windows_outcome(rate, observed, reserved_w, wanted_before, prices)
    reserved_gpu_h = reserved.astype(jnp.float32).sum() * (HOUR_S / 3600.0)
    on_demand_gpu_h = wanted.sum() * (WINDOW_S / 3600.0)
    return DayOutcome(
        arrived=(rate * WINDOW_S).sum(),
        missed=missed.sum(),
        reserved_gpu_h=reserved_gpu_h,
        on_demand_gpu_h=on_demand_gpu_h,
        cost_usd=reserved_gpu_h * prices.reserved_price + on_demand_gpu_h * prices.on_demand_price,
        on_demand_wanted=wanted,
        serving=serving,
    )
