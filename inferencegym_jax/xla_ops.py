"""Named operations written for XLA:CPU's speed, kept apart from the physics that uses them.

Each op computes a plain mathematical quantity (its docstring says which); its body is written
the way XLA:CPU runs fastest under `vmap` over thousands of envs, and the first line of the
docstring's second paragraph says why. Swapping any of them for the obvious formula gives the
same numbers to float32 rounding (tests/test_xla_ops.py checks each against it), only slower.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from inferencegym_jax.numerics import EPS


def older_sum(x: Array) -> Array:
    """Sum over strictly later indices of the last axis: out[..., a] = sum of x[..., a'] for a' > a.

    A product with a constant triangular matrix: XLA's CPU cumsum is an O(A^2) reduce-window
    that costs several times more under vmap.
    """
    n = x.shape[-1]
    later = jnp.asarray(np.tril(np.ones((n, n), np.float32), -1))
    return jnp.dot(x, later, precision=jax.lax.Precision.HIGHEST)


def cumulative_sum(x: Array) -> Array:
    """Inclusive cumulative sum over a 1-D array (x[0], x[0] + x[1], ...).

    A product with a constant triangular matrix, as `older_sum`.
    """
    n = x.shape[-1]
    upto = jnp.asarray(np.triu(np.ones((n, n), np.float32)))
    return jnp.dot(x, upto, precision=jax.lax.Precision.HIGHEST)


def class_sum(x: Array) -> Array:
    """Sum over a leading axis of length 3, as (x[0] + x[1]) + x[2].

    A fixed order: XLA's reduction may add in another order depending on the batch width, and
    results must not depend on it.
    """
    return x[0] + x[1] + x[2]


def earlier_classes(x: Array) -> Array:
    """Exclusive prefix sum over a leading axis of length 3: (0, x[0], x[0] + x[1]).

    Three explicit terms: no cumsum (see `older_sum`).
    """
    return jnp.stack([jnp.zeros_like(x[0]), x[0], x[0] + x[1]])


def sums(xs: tuple[Array, ...], axes: tuple[int, ...]) -> tuple[Array, ...]:
    """Sums of same-shaped arrays over `axes`.

    One variadic reduction, one pass: XLA:CPU computes the inputs' shared producers (each queue
    bin's TTFT, say) once per element, where a separate sum per input re-derives them from the
    queue arrays each time (the env step is 1.18x faster with the TTFT statistics summed so).
    """
    zeros = tuple(np.float32(0.0) for _ in xs)
    return tuple(jax.lax.reduce(tuple(xs), zeros, lambda a, b: tuple(u + v for u, v in zip(a, b)), axes))


def count_below(table: Array, x: Array) -> Array:
    """Number of entries of `table` (last axis) below `x` (shape table.shape[:-1]), int32.

    A reduction: XLA:CPU computes it once and stores it. An unrolled sum of compares is plain
    elementwise work that XLA copies into every consumer's fusion (the Poisson sampler ran 4x
    per step when a rollout did not return its states).
    """
    return jnp.sum((table < x[..., None]).astype(jnp.int32), axis=-1)


def masked_min_of_ratios(mask: Array, a: Array, n: Array, b: Array, p: Array) -> Array:
    """min(a / n, b / p) where `mask`, else 0; n, p > 0.

    As where(mask, min(a p, b n), 0) / (n p): the result ends in one division, which XLA:CPU
    computes once and stores, where it would re-derive a cheap expression (and read its inputs
    again) in each of the result's consumers.
    """
    return jnp.where(mask, jnp.minimum(a * p, b * n), 0.0) / (n * p)


def add_at_first(x: Array, new: Array) -> Array:
    """`x` with `new` added at index 0 of its last axis (x: (..., A), new: (...)).

    `new` zero-padded to x's shape: XLA fuses new's producer into the pad and evaluates it for
    index 0 only, where a `where` over the axis would evaluate it for every index.
    """
    pad = [(0, 0)] * (x.ndim - 1) + [(0, x.shape[-1] - 1)]
    return x + jnp.pad(new[..., None], pad)


def power(x: Array, p: Array) -> Array:
    """x ** p for x > 0 (x = 0 gives 0 for p > 0).

    exp(p log x): XLA:CPU vectorises exp and log, while `**` with a traced exponent becomes a
    scalar libm powf call per element (about a tenth of an env step's time).
    """
    return jnp.exp(p * jnp.log(x))


def binned_quantiles(low: Array, high: Array, weights: Array, qs: tuple[float, ...]) -> tuple[Array, ...]:
    """Quantiles of a mixture of uniform bins with `weights` (1-D, bins in order; each bin's
    mass is placed after the previous bin's, which is exact for disjoint bins).

    Masked maxima instead of a cummax, search or gather, which XLA:CPU runs several times
    slower under vmap. Bin i spans [max(low[:i+1]), max(high[:i+1], that)] (running maxima keep
    the bins in order). Quantile q lies in the first bin whose cumulative weight reaches
    q * total (searchsorted side="left"; the last bin takes any rounding overshoot), at the
    fraction of that bin's weight still needed. The bins up to it are those whose weight before
    them is below q * total, so its running maxima are maxima over a mask.
    """
    num_bins = weights.shape[-1]
    cum = cumulative_sum(weights)
    total = cum[-1]
    cum_before = cum - weights
    out = []
    for q in qs:
        target = q * total
        upto = cum_before < target
        crosses = upto & ((cum >= target) | (jnp.arange(num_bins) == num_bins - 1))
        frac = jnp.sum(jnp.where(crosses, jnp.clip((target - cum_before) / jnp.maximum(weights, EPS), 0.0, 1.0), 0.0))
        lo = jnp.max(jnp.where(upto, low, 0.0))
        hi = jnp.maximum(jnp.max(jnp.where(upto, high, 0.0)), lo)
        out.append(jnp.where(total > EPS, lo + frac * (hi - lo), 0.0))
    return tuple(out)
