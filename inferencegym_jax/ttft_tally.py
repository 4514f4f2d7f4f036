"""An episode's request-level TTFT distribution, tallied inside jit (issue 41, item 2).

Every interval the engine returns the TTFT distribution of the requests that got their first
token in it (`serving.RequestLatency`: uniform and shifted-exponential components). `fold` adds
that mixture's CDF, evaluated exactly at the points of a fixed log grid, to a running tally, so
an episode's TTFT quantiles are over its *requests*, not a mean of per-interval percentiles, and
cost O(grid) floats of state whatever the episode's length. `evaluate.play_episode` folds every
interval; `evaluate.grade_trajectory` reports the quantiles and the mean.

**The grid.** x_0 = 0, then `GRID_POINTS` points log-spaced from `GRID_LOW_S` to `GRID_HIGH_S`
(neighbours `GRID_RATIO` apart: 5.6 %). The CDF is exact at every grid point (to float32
rounding); a quantile inverts it with linear interpolation between neighbouring points, so it lies
in the same cell as the exact quantile: error below one cell, 5.6 % of the quantile, and far
less where the CDF is smooth across the cell (tests/test_ttft_tally.py checks it against the
exact quantiles of the pooled mixtures). Mass past `GRID_HIGH_S` (a request queued for over
16 minutes) is read as at `GRID_HIGH_S`. The mean is exact: the request-weighted mean of the
components' means.

Cost: (components x GRID_POINTS) elementwise work per interval, ~16k for a v2 task (48 uniform
and 15 exponential components, an `expm1` for each exponential at each point): it makes an
evaluation of a fixed configuration (the env step alone) several times slower, and costs little
beside a policy network or a planner. The training step does not fold (XLA drops the unused
`info["first_token"]`). A host-side load test pools far more intervals on a 0.225 % grid
(`request_stats.TtftCdf`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax.numerics import EPS
from inferencegym_jax.serving import RequestLatency

GRID_LOW_S = 1e-3  # [s] first positive grid point: below any TTFT (the per-request overhead alone is 11-20 ms)
GRID_HIGH_S = 1e3  # [s] last grid point: 100x the loosest TTFT SLO of any task (10 s)
GRID_POINTS = 256  # log-spaced points: 6 decades at 5.6 % spacing, 1 KiB of float32 per episode (cost below)
GRID_RATIO = (GRID_HIGH_S / GRID_LOW_S) ** (1.0 / (GRID_POINTS - 1))  # neighbour ratio, 1.056
QUANTILES = (0.5, 0.9, 0.99)  # what `quantiles` gives by default: evaluation's p50, p90, p99


def grid() -> np.ndarray:
    """x_0 = 0, x_1 = GRID_LOW_S, ..., x_GRID_POINTS = GRID_HIGH_S: float32 (GRID_POINTS + 1,) [s]."""
    return np.concatenate([[0.0], np.geomspace(GRID_LOW_S, GRID_HIGH_S, GRID_POINTS)]).astype(np.float32)


_GRID = grid()


@struct.dataclass
class TtftTally:
    """The TTFT distribution of the requests tallied so far; float32 (leading batch axes allowed).

    Attributes:
      below: (GRID_POINTS + 1,) [requests] requests whose TTFT is at most each grid point.
      requests: () [requests] requests tallied (real-valued: the engine's expected requests).
      ttft_sum: () [requests x s] sum of their TTFTs (the exact mean's numerator).
    """

    below: Array
    requests: Array
    ttft_sum: Array


def empty() -> TtftTally:
    """A tally of no request."""
    return TtftTally(jnp.zeros(_GRID.shape, jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))


def fold(tally: TtftTally, first_token: RequestLatency) -> TtftTally:
    """`tally` with an interval's `RequestLatency` added. Components of <= 0 requests are skipped
    (their parameters are arbitrary, NaN included)."""
    x = jnp.asarray(_GRID)
    w = first_token.requests.reshape(-1)
    take = w > 0.0
    w = jnp.where(take, w, 0.0)
    lo = jnp.where(take, first_token.low_s.reshape(-1), 0.0)
    hi = jnp.where(take, jnp.maximum(first_token.high_s.reshape(-1), lo), 0.0)
    width = (hi - lo)[:, None]
    wide = width > EPS
    ramp = jnp.clip((x - lo[:, None]) / jnp.where(wide, width, 1.0), 0.0, 1.0)
    uniform = jnp.where(wide, ramp, (x >= lo[:, None]).astype(x.dtype))  # a point mass where narrower than EPS
    v = first_token.exp_requests.reshape(-1)
    take_exp = v > 0.0
    v = jnp.where(take_exp, v, 0.0)
    c = jnp.where(take_exp, first_token.exp_shift_s.reshape(-1), 0.0)
    theta = jnp.where(take_exp, jnp.maximum(first_token.exp_scale_s.reshape(-1), EPS), 1.0)
    exponential = -jnp.expm1(-jnp.maximum(x - c[:, None], 0.0) / theta[:, None])
    below = tally.below + w @ uniform + v @ exponential
    ttft_sum = tally.ttft_sum + jnp.sum(w * 0.5 * (lo + hi)) + jnp.sum(v * (c + theta))
    return TtftTally(below, tally.requests + jnp.sum(w) + jnp.sum(v), ttft_sum)


def quantiles(tally: TtftTally, qs: Sequence[float] = QUANTILES) -> Array:
    """The q-quantiles [s], float32 (..., len(qs)): the grid CDF inverted with linear
    interpolation (module docstring); NaN where no request was tallied."""
    x = jnp.asarray(_GRID)
    below = jax.lax.cummax(jnp.maximum(jnp.asarray(tally.below), 0.0), axis=jnp.ndim(tally.below) - 1)  # rounding only
    total = jnp.asarray(tally.requests)[..., None]
    out = []
    for q in qs:
        target = q * total
        k = jnp.clip(jnp.sum(below < target, axis=-1, keepdims=True), 1, GRID_POINTS)  # first point reaching it
        f_hi = jnp.take_along_axis(below, k, axis=-1)
        f_lo = jnp.take_along_axis(below, k - 1, axis=-1)
        share = jnp.clip((target - f_lo) / jnp.maximum(f_hi - f_lo, EPS), 0.0, 1.0)
        value = x[k - 1] + share * (x[k] - x[k - 1])
        out.append(jnp.where(total > EPS, value, jnp.nan)[..., 0])
    return jnp.stack(out, axis=-1)


def mean(tally: TtftTally) -> Array:
    """The exact request-weighted mean TTFT [s], float32 (...,); NaN where no request was tallied."""
    requests = jnp.asarray(tally.requests)
    return jnp.where(requests > EPS, jnp.asarray(tally.ttft_sum) / jnp.maximum(requests, EPS), jnp.nan)
