"""The episode's request TTFT tally (`ttft_tally`): its quantiles against the exact quantiles of
the mixtures it folds, its mean exact, and what evaluation reports from it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, ttft_tally
from inferencegym_jax.serving import RequestLatency

CELL = ttft_tally.GRID_RATIO - 1.0  # a quantile's largest relative error: one grid cell


def exact_quantiles(parts: list[RequestLatency], qs: tuple[float, ...]) -> np.ndarray:
    """Quantiles of the pooled mixtures by bisection on their exact float64 CDF."""
    lo, hi, w, c, theta, v = (np.concatenate([np.asarray(getattr(p, f), np.float64).ravel() for p in parts])
                              for f in RequestLatency._fields[:6])  # the TTFT mixture, not the TPOT groups
    lo, hi, w = lo[w > 0], hi[w > 0], w[w > 0]
    c, theta, v = c[v > 0], theta[v > 0], v[v > 0]

    def cdf(x: float) -> float:
        ramp = np.where(hi > lo, np.clip((x - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0), x >= lo)
        return float(w @ ramp + v @ -np.expm1(-np.maximum(x - c, 0.0) / theta))

    total = w.sum() + v.sum()
    out = []
    for q in qs:
        a, b = 0.0, 1e4
        for _ in range(200):
            mid = 0.5 * (a + b)
            a, b = (mid, b) if cdf(mid) < q * total else (a, mid)
        out.append(b)
    return np.array(out)


def random_latency(rng: np.random.Generator, uniforms: int = 48, exps: int = 45) -> RequestLatency:
    """A mixture shaped like a v2 interval's: uniforms (3, 16), exponentials (3, 15); some empty."""
    low = rng.uniform(0.01, 3.0, uniforms)
    high = low + rng.choice([0.0, 1e-7, 0.05, 1.0], uniforms)  # point masses and one-cell widths too
    req = rng.exponential(2.0, uniforms) * (rng.random(uniforms) < 0.7)
    shift = rng.uniform(0.011, 0.3, exps)
    scale = rng.uniform(1e-3, 0.5, exps)
    ereq = rng.exponential(3.0, exps) * (rng.random(exps) < 0.8)
    none = np.zeros(1)  # no per-request TPOT ("request" accounting's): not the tally's
    return RequestLatency(*(jnp.asarray(a, jnp.float32) for a in (low, high, req, shift, scale, ereq, none, none)))


def test_quantiles_are_within_one_grid_cell_and_the_mean_is_exact():
    rng = np.random.default_rng(0)
    parts = [random_latency(rng) for _ in range(20)]
    tally = ttft_tally.empty()
    for part in parts:
        tally = jax.jit(ttft_tally.fold)(tally, part)
    qs = (0.01, 0.25, 0.5, 0.9, 0.99, 0.999)
    got = np.asarray(ttft_tally.quantiles(tally, qs))
    want = exact_quantiles(parts, qs)
    np.testing.assert_array_less(np.abs(got / want - 1.0), CELL)
    weights = [(np.asarray(p.requests, np.float64), np.asarray(p.exp_requests, np.float64)) for p in parts]
    total = sum(w.sum() + v.sum() for w, v in weights)
    mean = sum(w @ (0.5 * (np.asarray(p.low_s) + np.asarray(p.high_s))) + v @ (np.asarray(p.exp_shift_s)
               + np.asarray(p.exp_scale_s)) for p, (w, v) in zip(parts, weights)) / total
    assert float(ttft_tally.mean(tally)) == pytest.approx(mean, rel=1e-5)
    assert float(tally.requests) == pytest.approx(total, rel=1e-5)


def test_empty_components_with_nan_parameters_change_nothing():
    rng = np.random.default_rng(1)
    part = random_latency(rng)
    poisoned = RequestLatency(
        low_s=jnp.where(part.requests > 0, part.low_s, jnp.nan),
        high_s=jnp.where(part.requests > 0, part.high_s, jnp.inf),
        requests=part.requests,
        exp_shift_s=jnp.where(part.exp_requests > 0, part.exp_shift_s, jnp.nan),
        exp_scale_s=jnp.where(part.exp_requests > 0, part.exp_scale_s, 0.0),
        exp_requests=part.exp_requests,
        tpot_s=part.tpot_s,
        tpot_requests=part.tpot_requests,
    )
    clean, dirty = ttft_tally.fold(ttft_tally.empty(), part), ttft_tally.fold(ttft_tally.empty(), poisoned)
    jax.tree_util.tree_map(np.testing.assert_array_equal, dirty, clean)
    assert np.isnan(np.asarray(ttft_tally.quantiles(ttft_tally.empty()))).all()
    assert np.isnan(float(ttft_tally.mean(ttft_tally.empty())))


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_evaluation_reports_the_episodes_request_quantiles():
    """The episode loop folds every interval's info["first_token"]: its tally is the one the
    intervals' mixtures give, `run_episodes(with_ttft=True)` returns it beside the trajectory and
    `grade_trajectory` reports its quantiles per episode."""
    task = "InferenceGym-Task3-v2"
    env, params = ig.make(task)
    steps = 60
    policy = baselines.fixed_policy(params.default_action)
    key = evaluate.episode_keys(evaluate.evaluation_key(0), 0, 1)[0]

    def first_token(seen, memory, step):
        return step.info["first_token"]

    _, parts, tally = jax.jit(lambda k: evaluate.play_episode(env, params, policy, k, steps, first_token))(key)
    per_step = [jax.tree_util.tree_map(lambda x, t=t: x[t], parts) for t in range(steps)]
    want = exact_quantiles(per_step, ttft_tally.QUANTILES)
    np.testing.assert_array_less(np.abs(np.asarray(ttft_tally.quantiles(tally)) / want - 1.0), CELL)
    trajectory, ttft = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(0), 2, num_steps=steps,
                                             with_ttft=True)
    first = jax.tree_util.tree_map(lambda x: x[0], ttft)  # a batch of 8 lanes: float32 rounding apart
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3), first, tally)
    assert np.isnan(evaluate.grade_trajectory(trajectory, params, task).metrics["ttft_p99_s"]).all()  # none given
    m = evaluate.grade_trajectory(trajectory, params, task, ttft).metrics
    np.testing.assert_allclose([m[k][0] for k in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s")],
                               np.asarray(ttft_tally.quantiles(first)), rtol=1e-6)
    assert np.all(m["ttft_p50_s"] <= m["ttft_p90_s"]) and np.all(m["ttft_p90_s"] <= m["ttft_p99_s"])
    assert np.all(np.isfinite(m["ttft_mean_s"])) and np.all(m["ttft_mean_s"] > 0.011)  # the overhead alone
