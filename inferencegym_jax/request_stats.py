"""Request-level TTFT statistics on the host: the pooled distribution of many intervals'
`serving.RequestLatency` mixtures, streamed into a fixed grid (`TtftCdf`), and the exact
quantiles of a mixture of uniforms it is checked against (`mixture_quantiles`).

**Why a grid.** A load test pools every measured interval of every episode (the cross-check:
1,024 episodes x 600 s per rate). Keeping every component and sorting them is exact but holds
~10^8 floats for an engine with a few dozen components per interval; `TtftCdf` holds 3 float64
arrays of `GRID_POINTS` + 2 entries, whatever it has been fed, and costs O(components) per fold.

**The grid.** x_0 = 0, then `GRID_POINTS` points log-spaced from `GRID_LOW_S` to `GRID_HIGH_S`
(neighbours `GRID_RATIO` apart: 0.225 %), then one overflow point at max(largest TTFT seen,
`GRID_HIGH_S`), where F is the total. The CDF F is accumulated EXACTLY (up to float64 rounding)
at the grid points:

* a uniform component (weight w on [l, h], l < h) adds w/(h - l) x ((x_g - l)+ - (x_g - h)+) at
  each x_g. Split at the grid points inside [l, h): its mass below the first of them, x_a, and
  above the last, x_b, lies inside one cell each, where F at the grid points sees it exactly as
  a point mass at that cell's upper point; between x_a and x_b it is a ramp of slope s = w/(h - l),
  s (x_g - x_a) for a <= g <= b and constant above. The ramps are stored as changes of the slope
  (+s at a, -s at b) and of slope x start (+s x_a, -s x_b): F(x_g) = x_g C_s[g] - C_sx[g] + C_m[g]
  with C the cumulative sums and the changes summed per grid point by numpy bincount (the
  "bincount trick"), so a component costs O(1) whatever its width. The split keeps every ramp at
  least a cell wide, so its slope, and the rounding left when +s and -s cancel, stay bounded. A
  component within one cell, a point mass (h == l) included, is a point mass at the cell's upper
  point.
* a shifted exponential (w requests, TTFT c + Exp(mean theta)) is replaced by uniform pieces cut
  at the probabilities 1 - r^k, k = 0..`EXP_PIECES`, r = `EXP_PIECE_RATIO`: equal widths
  theta ln(1/r) in x, masses w (r^k - r^(k+1)), i.e. the exponential's CDF interpolated linearly
  between the cuts, then one tail piece of mass w r^EXP_PIECES (4.2e-5 w) on [x_cut, x_cut +
  2 theta] (uniform with the tail's exact mean, by memorylessness). That CDF is continuous and
  piecewise linear, so it is folded as slope changes at its 37 knots (the same accumulators; the
  steepest slope is 0.87 w / theta, and an exponential narrower than one cell is a point mass
  there, so the rounding stays bounded). Chords under the concave CDF overstate each quantile below the tail piece by
  at most `EXP_QUANTILE_ERROR` x theta (0.0103 theta, 13 % into a piece, the same in every piece;
  tests/test_loadtest.py measures it against the exact quantiles), i.e. <= 0.9 % of the TTFT
  whenever theta <= c and 0.0103 theta / c in general. An exact exp(-(x_g - c)/theta) at every
  grid point would cost O(grid) per component, what the grid is there to avoid; 36 pieces cost
  ~1 us per exponential on one core.

**Quantiles** invert the grid CDF with linear interpolation between neighbouring grid points.
Since F is exact at the grid points, the true q-quantile lies in the same cell as the answer:
the error is below one cell, 0.225 % of the quantile (for the exponentials, plus the chord
error above; past `GRID_HIGH_S`, F is linear up to the largest TTFT seen). **The mean** is exact:
the uniform midpoints and c + theta, request-weighted. Both NaN when no request was added.

**Order.** Each `add_*` call sums its own arrays in element order and adds the sums to the
totals, so feeding the same arrays in the same calls gives the same bits, however the caller
batched the simulations that produced them (`inferencegym_jax.loadtest` adds one episode per call).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

GRID_LOW_S = 1e-4  # [s] first positive grid point: 0.1 ms, below any TTFT (the per-request overhead alone is 11-20 ms)
GRID_HIGH_S = 1e4  # [s] last log-spaced point: above any client timeout (num_age_buckets <= 1024 one-second intervals)
GRID_POINTS = 8192  # log-spaced points: 8 decades at 0.225 % spacing, 3 x 64 KiB of float64 accumulators
GRID_RATIO = (GRID_HIGH_S / GRID_LOW_S) ** (1.0 / (GRID_POINTS - 1))  # neighbour ratio, 1.00225
EXP_PIECE_RATIO = 0.75  # 1 - (cumulative probability) shrinks by this factor from one cut to the next
EXP_PIECES = 35  # chord pieces per exponential: 0.75^35 = 4.2e-5 of its mass is left for the tail piece
EXP_QUANTILE_ERROR = 0.0103  # [theta] largest quantile overstatement of a piece (module docstring; tested)
_PIECE_WIDTH = math.log(1.0 / EXP_PIECE_RATIO)  # [theta] width of every piece but the tail
_TAIL_WIDTH = 2.0  # [theta] the tail piece's width: uniform on it has the tail's mean, x_cut + theta
_KNOTS_X = np.append(np.arange(EXP_PIECES + 1) * _PIECE_WIDTH, EXP_PIECES * _PIECE_WIDTH + _TAIL_WIDTH)  # [theta]
_ABOVE = EXP_PIECE_RATIO ** np.arange(EXP_PIECES + 1)  # mass above each cut, as a share of w
_SLOPES = np.append((_ABOVE[:-1] - _ABOVE[1:]) / _PIECE_WIDTH, _ABOVE[-1] / _TAIL_WIDTH)  # [w/theta] per piece
_SLOPE_CHANGES = np.diff(_SLOPES, prepend=0.0, append=0.0)  # [w/theta] at each knot


def grid() -> np.ndarray:
    """The grid points x_0 = 0, x_1 = GRID_LOW_S, ..., x_GRID_POINTS = GRID_HIGH_S: float64 [s]."""
    return np.concatenate([[0.0], np.geomspace(GRID_LOW_S, GRID_HIGH_S, GRID_POINTS)])


_GRID = grid()
_GRID_PAST = np.append(_GRID, np.inf)  # the grid and +inf at the overflow index, for `_index`
_SIZE = GRID_POINTS + 2  # grid indices 0..GRID_POINTS, then the overflow point (the largest TTFT seen)


class TtftCdf:
    """A streaming, memory-bounded CDF of pooled request TTFTs on the grid (module docstring).

    Attributes (float64; (GRID_POINTS + 2,) arrays indexed by grid point, the last the overflow):
      slope: [requests/s] changes of the summed ramp slopes.
      slope_start: [requests] changes of the summed slope x ramp start.
      mass: [requests] point masses (F at a grid point includes those at it and below).
      requests: [requests] total weight added.
      weighted_sum: [requests x s] sum of weight x component mean, for the exact mean.
      largest: [s] the largest TTFT any added component reaches (0 before any).
    """

    def __init__(self) -> None:
        self.slope = np.zeros(_SIZE)
        self.slope_start = np.zeros(_SIZE)
        self.mass = np.zeros(_SIZE)
        self.requests = 0.0
        self.weighted_sum = 0.0
        self.largest = 0.0

    def add_uniform(self, low: Any, high: Any, weight: Any) -> None:
        """Add a mixture of uniforms: `weight[i]` requests on [low[i], high[i]] [s] (any equal
        shapes, flattened; components of weight <= 0 skipped; high < low read as high = low)."""
        lo, hi, w = (np.asarray(a, np.float64).ravel() for a in (low, high, weight))
        keep = w > 0
        lo, w = lo[keep], w[keep]
        hi = np.maximum(hi[keep], lo)
        if w.size == 0:
            return
        _check_finite("uniform", lo, hi, w)
        self.requests += float(w.sum())
        self.weighted_sum += float((w * 0.5 * (lo + hi)).sum())
        self.largest = max(self.largest, float(hi.max()))
        self._fold(lo, hi, w, _index(lo), _index(hi))

    def add_shifted_exponential(self, shift: Any, scale: Any, weight: Any) -> None:
        """Add a mixture of shifted exponentials: `weight[i]` requests with TTFT `shift[i]` +
        Exp(mean `scale[i]`) [s] (equal shapes, flattened; weight <= 0 skipped), as uniform pieces
        (module docstring)."""
        c, theta, w = (np.asarray(a, np.float64).ravel() for a in (shift, scale, weight))
        keep = w > 0
        c, theta, w = c[keep], np.maximum(theta[keep], 0.0), w[keep]
        if w.size == 0:
            return
        _check_finite("shifted-exponential", c, theta, w)
        self.requests += float(w.sum())
        self.weighted_sum += float((w * (c + theta)).sum())
        knots = c[:, None] + theta[:, None] * _KNOTS_X  # (n, EXP_PIECES + 2) [s]
        self.largest = max(self.largest, float(knots[:, -1].max()))
        at = _index(knots)
        narrow = at[:, 0] == at[:, -1]  # the whole support inside one cell: a point mass at its upper point
        if narrow.any():
            self.mass += np.bincount(at[narrow, 0], w[narrow], _SIZE)
            at, knots, w, theta = at[~narrow], knots[~narrow], w[~narrow], theta[~narrow]
        change = (w / theta)[:, None] * _SLOPE_CHANGES  # [requests/s] slope changes at the knots
        self.slope += np.bincount(at.ravel(), change.ravel(), _SIZE)
        self.slope_start += np.bincount(at.ravel(), (change * knots).ravel(), _SIZE)

    def _fold(self, lo: np.ndarray, hi: np.ndarray, w: np.ndarray, a: np.ndarray, past: np.ndarray) -> None:
        """Add components (float64 (n,), w > 0, hi >= lo; a = _index(lo), past = _index(hi))."""
        b = past - 1  # last grid point < hi
        split = b >= a  # a grid point inside [lo, hi): the component is cut there
        ramp = b > a  # and a full cell inside
        x_a = _GRID[np.minimum(a, GRID_POINTS)]
        x_b = _GRID[np.minimum(b, GRID_POINTS)]
        s = np.where(split, w / np.where(split, hi - lo, 1.0), 0.0)  # [requests/s] density
        # below x_a and above x_b: inside one cell each, point masses at the cells' upper points;
        # a component inside one cell (no grid point in [lo, hi)) is one point mass at its upper point.
        below = np.where(split, s * (x_a - lo), w)
        above = np.maximum(np.where(split, w - below - s * (x_b - x_a), 0.0), 0.0)
        size = _SIZE
        self.mass += np.bincount(a, below, size) + np.bincount(b + 1, above, size)
        a, b, s, x_a, x_b = a[ramp], b[ramp], s[ramp], x_a[ramp], x_b[ramp]
        self.slope += np.bincount(a, s, size) - np.bincount(b, s, size)
        self.slope_start += np.bincount(a, s * x_a, size) - np.bincount(b, s * x_b, size)

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """The CDF at the grid: (x [s], F [requests]), float64 (GRID_POINTS + 2,), F nondecreasing;
        the last point is max(largest TTFT seen, GRID_HIGH_S), where F is the total."""
        f = _GRID * np.cumsum(self.slope[:-1]) - np.cumsum(self.slope_start[:-1]) + np.cumsum(self.mass[:-1])
        f = np.maximum.accumulate(np.clip(f, 0.0, self.requests))  # rounding only
        f[_index(np.array(self.largest)):] = self.requests  # every request is at or below the largest TTFT
        x = np.append(_GRID, max(self.largest, GRID_HIGH_S))
        return x, np.append(f, self.requests)

    def quantiles(self, quantiles: Sequence[float]) -> np.ndarray:
        """The q-quantiles [s] (float64 (len(quantiles),)), F inverted with linear interpolation
        between grid points (error below one cell, module docstring); NaN when empty."""
        if not self.requests > 0:
            return np.full(len(quantiles), np.nan)
        x, f = self.points()
        out = np.empty(len(quantiles))
        for j, q in enumerate(quantiles):
            target = q * self.requests
            k = min(int(np.searchsorted(f, target, side="left")), len(x) - 1)
            if k == 0:
                out[j] = x[0]
                continue
            rise = f[k] - f[k - 1]
            share = (target - f[k - 1]) / rise if rise > 0 else 1.0
            out[j] = x[k - 1] + min(max(share, 0.0), 1.0) * (x[k] - x[k - 1])
        return out

    def mean(self) -> float:
        """The exact request-weighted mean TTFT [s]; NaN when empty."""
        return self.weighted_sum / self.requests if self.requests > 0 else math.nan


def _check_finite(kind: str, *arrays: np.ndarray) -> None:
    """ValueError unless every parameter of the components with requests is finite (an engine
    bug otherwise: NaN would land on an arbitrary grid point)."""
    if not all(np.isfinite(a).all() for a in arrays):
        raise ValueError(f"{kind} TTFT components: a component with requests has a NaN or infinite parameter")


def _index(x: np.ndarray) -> np.ndarray:
    """For each x [s] the first grid index g with x_g >= x (int64, x's shape; GRID_POINTS + 1,
    the overflow, past the grid): `np.searchsorted(grid(), x)`, 5x faster. The log-grid formula
    (x <= 0 read as tiny), then one step of correction where rounding, or x <= 0, put x on the
    wrong side of a grid point."""
    u = np.log(np.maximum(x, 1e-300) * (1.0 / GRID_LOW_S)) * (1.0 / math.log(GRID_RATIO))
    g = np.clip(np.ceil(u), 0.0, float(GRID_POINTS)).astype(np.int64) + 1
    g -= _GRID[g - 1] >= x
    g += _GRID_PAST[g] < x
    return g


def mixture_quantiles(low: Any, high: Any, weight: Any, quantiles: Sequence[float]) -> np.ndarray:
    """Exact quantiles of a mixture of uniforms: component i holds `weight[i]` of the mass, uniform
    on [low[i], high[i]] (a point mass where high == low). Any equal shapes (flattened). The
    reference `TtftCdf` is tested against; it holds and sorts every component.

    The CDF F is piecewise linear between the sorted component ends (slope: the summed densities
    of the components open there; a jump at each point mass). The q-quantile is the smallest x with
    F(x) >= q W (W the total weight): the first end at which F reaches q W, then one linear solve
    on the segment before it. Float64 throughout. NaN for each quantile when W = 0.

    Returns float64 (len(quantiles),) [the unit of low and high].
    """
    lo = np.asarray(low, np.float64).ravel()
    hi = np.asarray(high, np.float64).ravel()
    w = np.asarray(weight, np.float64).ravel()
    keep = w > 0
    lo, hi, w = lo[keep], np.maximum(hi[keep], lo[keep]), w[keep]
    total = w.sum()
    if not total > 0:
        return np.full(len(quantiles), np.nan)
    width = hi - lo
    spread = width > 0
    density = np.where(spread, w / np.where(spread, width, 1.0), 0.0)
    ends = np.concatenate([lo, hi])
    slope_change = np.concatenate([density, -density])
    jump = np.concatenate([np.where(spread, 0.0, w), np.zeros_like(w)])
    order = np.argsort(ends, kind="stable")
    x, slope_change, jump = ends[order], slope_change[order], jump[order]
    slope_before = np.concatenate([[0.0], np.cumsum(slope_change)[:-1]])  # F's slope on (x[k-1], x[k])
    rise = slope_before * np.diff(x, prepend=x[0])  # F's increase over (x[k-1], x[k])
    reached_before = np.cumsum(rise + jump) - jump  # F just below x[k] (left limit)
    at = reached_before + jump  # F at x[k]
    out = np.empty(len(quantiles))
    for j, q in enumerate(quantiles):
        target = q * total
        k = min(int(np.searchsorted(at, target, side="left")), len(x) - 1)
        if k > 0 and reached_before[k] >= target and slope_before[k] > 0:
            start = reached_before[k] - rise[k]  # F at x[k-1]
            out[j] = min(max(x[k - 1] + (target - start) / slope_before[k], x[k - 1]), x[k])
        else:
            out[j] = x[k]
    return out
