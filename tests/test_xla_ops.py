"""Each XLA:CPU speed trick computes the plain quantity its docstring names."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from inferencegym_jax import xla_ops

RNG = np.random.default_rng(0)


def test_older_sum_is_the_sum_over_later_ages():
    x = RNG.random((3, 16)).astype(np.float32)
    want = np.cumsum(x[:, ::-1], axis=1)[:, ::-1] - x
    np.testing.assert_allclose(xla_ops.older_sum(jnp.asarray(x)), want, rtol=1e-6, atol=1e-6)


def test_cumulative_sum_and_class_sums():
    x = RNG.random(16).astype(np.float32)
    np.testing.assert_allclose(xla_ops.cumulative_sum(jnp.asarray(x)), np.cumsum(x), rtol=1e-6)
    c = RNG.random((3, 5)).astype(np.float32)
    np.testing.assert_allclose(xla_ops.class_sum(jnp.asarray(c)), c.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(xla_ops.earlier_classes(jnp.asarray(c)), np.cumsum(c, axis=0) - c, rtol=1e-6,
                               atol=1e-7)


def test_variadic_sums_equal_separate_sums():
    xs = tuple(jnp.asarray(RNG.random((3, 16)).astype(np.float32)) for _ in range(4))
    for axes in ((0,), (0, 1)):
        got = xla_ops.sums(xs, axes)
        for g, x in zip(got, xs):
            np.testing.assert_allclose(g, np.sum(np.asarray(x), axis=axes), rtol=1e-6)


def test_count_below_is_a_search():
    table = np.sort(RNG.random((3, 72)).astype(np.float32), axis=1)
    x = RNG.random(3).astype(np.float32)
    want = [np.searchsorted(table[i], x[i], side="left") for i in range(3)]
    assert np.asarray(xla_ops.count_below(jnp.asarray(table), jnp.asarray(x))).tolist() == want


def test_masked_min_of_ratios():
    a, n, b, p = (RNG.random(50).astype(np.float32) + 0.1 for _ in range(4))
    mask = RNG.random(50) < 0.5
    want = np.where(mask, np.minimum(a / n, b / p), 0.0)
    np.testing.assert_allclose(xla_ops.masked_min_of_ratios(mask, a, n, b, p), want, rtol=1e-6)


def test_add_at_first_and_power():
    x, new = RNG.random((3, 16)).astype(np.float32), RNG.random(3).astype(np.float32)
    want = x.copy()
    want[:, 0] += new
    np.testing.assert_array_equal(xla_ops.add_at_first(jnp.asarray(x), jnp.asarray(new)), want)
    base, p = RNG.random(20).astype(np.float32) + 0.01, np.float32(1.7)
    np.testing.assert_allclose(xla_ops.power(jnp.asarray(base), p), base ** p, rtol=2e-6)


@pytest.mark.parametrize("seed", range(5))
def test_binned_quantiles_of_ordered_uniform_bins(seed):
    """Against the inverse CDF of the mixture of disjoint bins in order, found by bisection on
    its exact CDF."""
    rng = np.random.default_rng(seed)
    lows = np.cumsum(rng.random(8) + 0.5).astype(np.float32)  # steps of >= 0.5, widths < 0.5
    highs = (lows + rng.random(8) * 0.5).astype(np.float32)
    weights = (rng.random(8) * (rng.random(8) < 0.7)).astype(np.float32)  # some empty bins

    def cdf(t):
        inside = np.clip((t - lows) / np.maximum(highs - lows, 1e-12), 0.0, 1.0)
        return np.sum(weights * inside) / weights.sum()

    got = xla_ops.binned_quantiles(jnp.asarray(lows), jnp.asarray(highs), jnp.asarray(weights), (0.5, 0.99))
    for q, value in zip((0.5, 0.99), got):
        lo, hi = 0.0, float(highs.max()) + 1.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
        assert abs(float(value) - hi) < 1e-4, (q, float(value), hi)


def test_binned_quantiles_of_nothing_are_zero():
    z = jnp.zeros(4)
    assert [float(v) for v in xla_ops.binned_quantiles(z, z, z, (0.5, 0.99))] == [0.0, 0.0]
