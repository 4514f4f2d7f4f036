"""Request lengths: the per-class length laws of prompts and outputs and their moments.

Length distributions (`LengthDist.kind`, per class, traced):
  0 uniform on [low, high]; 1 lognormal (median1, sigma1) clamped to [low, high];
  2 bimodal: with probability weight2 the second lognormal (median2, sigma2), else the first,
  clamped to [low, high].
An interval's length sums of n requests are drawn from the normal law of a sum of n i.i.d. lengths
(`sum_of_lengths`). `traffic.workload` re-exports the public names.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import struct
from jax import Array
from jax.scipy.special import ndtr

NUM_CLASSES = 3
LENGTH_KINDS = {"uniform": 0, "lognormal": 1, "bimodal": 2}


@struct.dataclass
class LengthDist:
    """A distribution of token counts per request, one per priority class; leaves shape (3,).

    Attributes:
      kind: int32, 0 uniform, 1 clamped lognormal, 2 clamped two-lognormal mixture.
      low: float32 [tokens], lower bound (uniform start or clamp).
      high: float32 [tokens], upper bound (uniform end or clamp).
      median1: float32 [tokens], median of the first lognormal component.
      sigma1: float32, log-space standard deviation of the first component.
      median2: float32 [tokens], median of the second component (bimodal only).
      sigma2: float32, log-space standard deviation of the second component.
      weight2: float32, probability of the second component (bimodal only).
    """

    kind: Array
    low: Array
    high: Array
    median1: Array
    sigma1: Array
    median2: Array
    sigma2: Array
    weight2: Array


def length_dist(
    kind: str,
    low: float,
    high: float,
    median1: float = 1.0,
    sigma1: float = 1.0,
    median2: float = 1.0,
    sigma2: float = 1.0,
    weight2: float = 0.0,
) -> LengthDist:
    """One `LengthDist`, the same for every class; validated (ValueError names the field)."""
    if kind not in LENGTH_KINDS:
        raise ValueError(f"length kind={kind!r} is not one of {sorted(LENGTH_KINDS)}")
    if not 1 <= low <= high:
        raise ValueError(f"length low={low}, high={high}: need 1 <= low <= high")
    for name, value in (("median1", median1), ("median2", median2), ("sigma1", sigma1), ("sigma2", sigma2)):
        if not value > 0:
            raise ValueError(f"length {name}={value} must be > 0")
    if not 0.0 <= weight2 <= 1.0:
        raise ValueError(f"length weight2={weight2} must be in [0, 1]")
    def full(x: float, dtype: Any = jnp.float32) -> Array:
        return jnp.full((NUM_CLASSES,), x, dtype)

    return LengthDist(
        kind=full(LENGTH_KINDS[kind], jnp.int32),
        low=full(low),
        high=full(high),
        median1=full(median1),
        sigma1=full(sigma1),
        median2=full(median2),
        sigma2=full(sigma2),
        weight2=full(weight2),
    )


def _lognormal_partial_moment(median: Array, sigma: Array, low: Array, high: Array, k: int) -> Array:
    """E[clip(X, low, high)^k] for X lognormal(log median, sigma), in closed form."""
    mu = jnp.log(median)
    a = (jnp.log(low) - mu) / sigma
    b = (jnp.log(high) - mu) / sigma
    inside = jnp.exp(k * mu + 0.5 * (k * sigma) ** 2) * (ndtr(b - k * sigma) - ndtr(a - k * sigma))
    return inside + low**k * ndtr(a) + high**k * (1.0 - ndtr(b))


def length_moments(dist: LengthDist) -> tuple[Array, Array]:
    """First and second moments of each class's length distribution; shapes (3,)."""
    lo, hi = dist.low, dist.high
    uniform_m1 = 0.5 * (lo + hi)
    uniform_m2 = (lo * lo + lo * hi + hi * hi) / 3.0
    c1 = [_lognormal_partial_moment(dist.median1, dist.sigma1, lo, hi, k) for k in (1, 2)]
    c2 = [_lognormal_partial_moment(dist.median2, dist.sigma2, lo, hi, k) for k in (1, 2)]
    w = jnp.where(dist.kind == 2, dist.weight2, 0.0)
    mix = [(1.0 - w) * x + w * y for x, y in zip(c1, c2)]
    m1 = jnp.where(dist.kind == 0, uniform_m1, mix[0])
    m2 = jnp.where(dist.kind == 0, uniform_m2, mix[1])
    return m1, m2


def sum_of_lengths(z: Array, count: Array, dist: LengthDist) -> tuple[Array, Array]:
    """Sum of `count` i.i.d. lengths (normal law of the sum) and the expected sum of squares."""
    m1, m2 = length_moments(dist)
    var = jnp.maximum(m2 - m1 * m1, 0.0)
    total = count * m1 + jnp.sqrt(count * var) * z
    total = jnp.clip(total, count * dist.low, count * dist.high)
    return total, count * m2
