"""Per-request TPOT spread (`serving.tpot_spread`, tpot_spread = "bursts"): the share of a cohort's
finished requests whose own TPOT misses the SLO, from the prompt chunks landing in their decode."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.serving import iteration, request_tpot
from inferencegym_jax.serving.tpot_spread import Bursts, finisher_tokens, miss_share
from inferencegym_jax.serving.types import empty_cohorts
from inferencegym_jax.traffic.workload import Arrivals

SLO = 0.05  # [s per token]
C = 7.18e-5  # [s per prompt token] a full 2,048-token chunk beside a small A100 pool, ~0.147 s
PROMPT_MEAN, PROMPT_SIGMA = 3300.0, 1.0  # [tokens], log-sd: a long-prompt code service's order


def bursts(rate: float, present: float = 1.0) -> Bursts:
    mean_g = C * PROMPT_MEAN
    return Bursts(jnp.float32(rate), jnp.float32(np.log(mean_g) - 0.5 * PROMPT_SIGMA**2), jnp.float32(PROMPT_SIGMA),
                  jnp.float32(mean_g), jnp.float32(present))


def monte_carlo_miss(rate: float, mean_tpot: float, tokens: float, n: int = 400_000) -> float:
    """P(X - E[X] > (SLO - m) g) for X compound Poisson (the module's law), by sampling."""
    rng = np.random.default_rng(0)
    gaps = max(tokens - 1.0, 1.0)
    load = rate * (C * PROMPT_MEAN + gaps * mean_tpot)
    mu = np.log(C * PROMPT_MEAN) - 0.5 * PROMPT_SIGMA**2
    k = rng.poisson(load, n)
    g = np.exp(mu + PROMPT_SIGMA * rng.standard_normal(int(k.sum())))
    x = np.bincount(np.repeat(np.arange(n), k), weights=g, minlength=n)
    return float(np.mean(x - load * C * PROMPT_MEAN > (SLO - mean_tpot) * gaps))


@pytest.mark.parametrize("rate, mean_tpot, tokens", [(0.2, 0.012, 8.0), (0.5, 0.015, 12.0), (1.0, 0.02, 6.0),
                                                     (4.0, 0.03, 40.0)])
def test_the_miss_share_is_the_compound_poisson_tail(rate, mean_tpot, tokens):
    """Rare single long prompts (low load) to many small ones (the normal part): within 20 % of the
    sampled tail, or 0.002 absolute."""
    model = float(miss_share(jnp.float32(mean_tpot), jnp.float32(tokens), jnp.float32(SLO), bursts(rate)))
    sampled = monte_carlo_miss(rate, mean_tpot, tokens)
    assert model == pytest.approx(sampled, rel=0.2, abs=2e-3), (model, sampled)
    assert 0.0 < model < 1.0


def test_without_prompts_or_over_many_gaps_the_cohort_mean_decides():
    """No prompt lands (a prefill GPU, or none arriving): 0 within the SLO, 1 past it; over many
    gaps X's spread per gap vanishes and the verdict is the cohort mean's again."""
    none = bursts(2.0, present=0.0)
    assert float(miss_share(jnp.float32(0.049), jnp.float32(10.0), jnp.float32(SLO), none)) == 0.0
    assert float(miss_share(jnp.float32(0.051), jnp.float32(10.0), jnp.float32(SLO), none)) == 1.0
    # a vanishing load (a replica whose fleet is idle: `fleet.routing.busy_join_share` ~ 0) is no miss
    assert float(miss_share(jnp.float32(0.011), jnp.float32(84.0), jnp.float32(SLO), bursts(1e-15))) == 0.0
    long = jnp.float32(5000.0)
    assert float(miss_share(jnp.float32(0.03), long, jnp.float32(SLO), bursts(2.0))) < 1e-4
    assert float(miss_share(jnp.float32(0.06), long, jnp.float32(SLO), bursts(2.0))) > 1.0 - 1e-4
    shares = miss_share(jnp.float32(0.015), jnp.asarray([6.0, 10.0, 30.0, 100.0]), jnp.float32(SLO), bursts(0.5))
    assert bool(jnp.all(jnp.diff(shares) < 0.0)), shares  # the fewer the gaps, the likelier a miss


def test_finishers_emit_the_truncated_exponentials_mean():
    """Memoryless completions at a mean of 15 tokens left, between 0 and 50 tokens: the mean of an
    exponential truncated there (numerically integrated), and the midpoint of a tiny span."""
    t = np.linspace(0.0, 50.0, 200_001)
    density = np.exp(-t / 15.0)
    expected = float(np.sum(t * density) / np.sum(density))
    got = float(finisher_tokens(jnp.float32(0.0), jnp.float32(50.0), jnp.float32(15.0)))
    assert got == pytest.approx(expected, rel=1e-4)
    assert float(finisher_tokens(jnp.float32(80.0), jnp.float32(80.001), jnp.float32(15.0))) == pytest.approx(80.0005)


def test_a_fresh_cohort_misses_by_its_share_and_an_old_one_by_its_mean():
    """`decoded` with bursts: requests finishing in their first interval at a 13-ms mean TPOT miss
    with the model's share (not 0, the cohort mean's verdict); an old cohort is judged as before."""
    fresh = request_tpot.admitted(empty_cohorts(), jnp.asarray([0.0, 4.0, 0.0]), jnp.asarray([0.0, 60.0, 0.0]))
    slo = jnp.full((3,), SLO, jnp.float32)
    _, plain = request_tpot.decoded(fresh, jnp.float32(0.5), jnp.float32(0.013), slo, jnp.float32(1.0))
    _, spread = request_tpot.decoded(fresh, jnp.float32(0.5), jnp.float32(0.013), slo, jnp.float32(1.0), bursts(1.0))
    assert float(plain.missed) == 0.0 and 0.0 < float(spread.missed) < 0.5
    assert float(spread.missed + spread.good_completed) == pytest.approx(2.0)


def test_the_interval_bursts_take_the_law_in_force_not_the_draws():
    """`interval_bursts`: None under "cohort"; under "bursts" the arrival rate and the prompt law in
    force (an interval that drew one short prompt still exposes to the law's long ones); a
    ValueError without the mixed engine's iteration model."""
    _, params = ig.make("InferenceGym-Task1-v2", server={"slo_accounting": "request", "tpot_spread": "bursts"})
    it = iteration.iterations(jax.tree_util.tree_map(lambda x: x[0], params.server.profiles), jnp.float32(4.0),
                              jnp.float32(2000.0), jnp.float32(0.0), jnp.float32(2048.0), jnp.asarray(False))
    one = jnp.asarray([0.0, 1.0, 0.0])
    law = jnp.asarray([PROMPT_MEAN, PROMPT_MEAN**2 * np.exp(PROMPT_SIGMA**2)], jnp.float32)
    arrivals = Arrivals(one, 100.0 * one, 10.0 * one, 1e4 * one, jnp.float32(0.7), None, law)
    got = request_tpot.interval_bursts(arrivals, it, params.server)
    assert float(got.rate) == pytest.approx(0.7) and float(got.present) == 1.0
    assert float(got.own_s) == pytest.approx(float(it.token_s) * PROMPT_MEAN, rel=1e-5)
    assert float(got.log_sd) == pytest.approx(PROMPT_SIGMA, rel=1e-4)
    drawn = request_tpot.interval_bursts(dataclasses.replace(arrivals, prompt_law=None), it, params.server)
    assert float(drawn.own_s) == pytest.approx(float(it.token_s) * 100.0, rel=1e-5)  # no law: the draws
    cohort = dataclasses.replace(params.server, tpot_spread="cohort")
    assert request_tpot.interval_bursts(arrivals, it, cohort) is None
    with pytest.raises(ValueError, match="needs engine='mixed'"):
        request_tpot.interval_bursts(arrivals, None, params.server)


def test_tpot_spread_needs_the_mixed_engine_and_request_accounting():
    with pytest.raises(ValueError, match=r"server.tpot_spread='bursts' needs server.engine='mixed'"):
        ig.make("InferenceGym-Task1-v1", server={"tpot_spread": "bursts"})
    with pytest.raises(ValueError, match="tpot_spread"):
        ig.make("InferenceGym-Task1-v2", server={"tpot_spread": "wide"})


def test_an_episode_with_bursts_misses_more_and_stays_finite():
    """A jitted Task 1-v2 episode under "request" accounting at a long-prompt code load: the bursts
    judgement misses more than the cohort mean on the same draws, every count finite."""
    misses = {}
    for spread in ("cohort", "bursts"):
        env, params = ig.make("InferenceGym-Task1-v2", max_steps=121, server={"slo_accounting": "request",
                                                                               "tpot_spread": spread},
                              workload={"schedule": "constant", "base_rate": 0.5, "class_mix": [0.0, 1.0, 0.0],
                                        "prompt": {"kind": "lognormal", "median1": 1801, "sigma1": 1.36,
                                                   "low": 3, "high": 7437},
                                        "output": {"kind": "lognormal", "median1": 10.6, "sigma1": 0.85,
                                                   "low": 6, "high": 1899}})

        def episode(key, env=env, params=params):
            _, state = env.reset(key, params)

            def body(st, t):
                _, st, reward, _, _, info = env.step(jax.random.fold_in(key, t), st, params.default_action, params)
                return st, (info["metrics"].slo_violations, reward)

            return jax.lax.scan(body, state, jnp.arange(120))[1]

        violations, rewards = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(3), 4))
        assert bool(jnp.all(jnp.isfinite(violations)) & jnp.all(jnp.isfinite(rewards)))
        misses[spread] = float(jnp.sum(violations))
    assert misses["bursts"] > misses["cohort"]
