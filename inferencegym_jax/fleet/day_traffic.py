"""Day-scale traffic of a fleet: a real per-minute load curve, Poisson arrivals second by second.

The curve is one service's per-minute request counts over a week (`data/traces/day`, the Azure
LLM inference trace 2024; provenance in its PROVENANCE.txt), times the fleet's share of the
service (`DayCurve.rate` [req/s] = share x requests in the minute / 60 s). Within a minute,
arrivals are Poisson at that minute's rate, drawn per physics interval by `workload`'s own draws
(prompt and output lengths from the replica task's length laws, priority classes from its class
mix): the curve moves the rate, nothing else. Thinning a Poisson stream by a share is again
Poisson, so a share of the service is a smaller stream of the same shape.

Episodes start at a minute drawn uniformly from `DayCurve.starts` (training windows on the first
days, held-out windows on the last: `fleet.tasks`), so evaluation replays days no policy saw.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax.files import shipped

MINUTE_S = 60.0  # [s]
DAY_MIN = 1440  # [min]
# The day traces shipped in data/traces/day (scripts/day_traces.py writes them): name -> file.
DAY_TRACES = {"azure-code-2024": "azure_code_2024_week.npz", "azure-conv-2024": "azure_conv_2024_week.npz"}
# Weekday of each trace's minute 0 (Monday = 0): the code week starts Fri 2024-05-10, the
# conversation week Sun 2024-05-12 (PROVENANCE.txt, start_utc).
FIRST_WEEKDAY = {"azure-code-2024": 4, "azure-conv-2024": 6}


@struct.dataclass
class DayCurve:
    """A fleet's load curve and its episodes' start minutes.

    Attributes:
      rate: float32 (M,) [req/s], the fleet's mean arrival rate in each minute of the trace.
      starts: int32 (K,) [min], the minutes an episode may start at (drawn uniformly at reset).
      cumulative: float32 (M + 1,) [requests], the curve's expected requests before each minute.
      first_weekday: int32 () [day], weekday of minute 0 (Monday = 0).
    """

    rate: Array
    starts: Array
    cumulative: Array
    first_weekday: Array


@functools.cache
def requests_per_minute(trace: str) -> np.ndarray:
    """int64 (M,) [requests] of a shipped day trace, one count per minute since its minute 0.

    Raises:
      ValueError: `trace` is not one of DAY_TRACES.
    """
    if trace not in DAY_TRACES:
        raise ValueError(f"day trace={trace!r} is not one of {sorted(DAY_TRACES)}")
    with shipped("data").joinpath("traces", "day", DAY_TRACES[trace]).open("rb") as f:
        return np.load(f)["requests"].astype(np.int64)


def window_starts(first_day: int, last_day: int, episode_min: int, every_min: int) -> np.ndarray:
    """int32 start minutes, every `every_min`, of the episodes of `episode_min` minutes that lie
    inside days first_day..last_day (inclusive, 0-based); ValueError when none fits."""
    begin, end = first_day * DAY_MIN, (last_day + 1) * DAY_MIN - episode_min
    if end < begin:
        raise ValueError(f"days {first_day}..{last_day} hold no episode of {episode_min} min")
    return np.arange(begin, end + 1, every_min, dtype=np.int32)


def day_curve(trace: str, share: float, starts: np.ndarray) -> DayCurve:
    """The `DayCurve` of a shipped trace at a fleet share of its traffic.

    Raises:
      ValueError: unknown trace, share outside (0, 1], or a start outside the trace.
    """
    counts = requests_per_minute(trace)
    if not 0.0 < share <= 1.0:
        raise ValueError(f"fleet_share={share} must be in (0, 1]")
    starts = np.asarray(starts, np.int32)
    if starts.size == 0 or starts.min() < 0 or starts.max() >= counts.size:
        raise ValueError(f"episode starts must lie in [0, {counts.size}) minutes of {trace}")
    rate = counts * share / MINUTE_S
    return DayCurve(
        rate=jnp.asarray(rate, jnp.float32),
        starts=jnp.asarray(starts),
        cumulative=jnp.asarray(np.concatenate([[0.0], np.cumsum(rate * MINUTE_S)]), jnp.float32),
        first_weekday=jnp.asarray(FIRST_WEEKDAY[trace], jnp.int32),
    )


def rate_at(curve: DayCurve, minute: Array) -> Array:
    """float32 [req/s] of the curve at integer minute `minute` (clipped to the trace)."""
    return curve.rate[jnp.clip(minute, 0, curve.rate.shape[0] - 1)]


def requests_between(curve: DayCurve, first: Array, count: Array) -> Array:
    """float32 [requests], the curve's expected requests in the `count` minutes from `first`
    (both int32, clipped to the trace)."""
    last = curve.cumulative.shape[0] - 1
    return curve.cumulative[jnp.clip(first + count, 0, last)] - curve.cumulative[jnp.clip(first, 0, last)]
