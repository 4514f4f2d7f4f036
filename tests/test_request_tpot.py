"""Per-request TPOT ("request" SLO accounting, serving.request_tpot): the good running sequences by
cohort, judged at completion on their mean TPOT as vLLM reports it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.serving import request_tpot
from inferencegym_jax.serving.types import TPOT_COHORTS, TpotCohorts, empty_cohorts
from inferencegym_jax.testing.reference import goodput as ref_goodput
from inferencegym_jax.testing.reference import to_numpy

H = TPOT_COHORTS
SLO = jnp.asarray([0.05, 0.05, 0.05], jnp.float32)  # [s per token]
DT = jnp.float32(1.0)  # [s]


def one_cohort(k: int, seqs: float, decode_s: float, tokens: float) -> TpotCohorts:
    """`seqs` class-1 sequences in cohort k with the given time [s] and tokens since their first token."""
    c = empty_cohorts()
    return TpotCohorts(c.seqs.at[1, k].set(seqs), c.remaining.at[1, k].set(10.0 * seqs),
                       c.decode_s.at[k].set(decode_s), c.tokens.at[k].set(tokens))


def test_a_slow_interval_is_judged_on_each_requests_mean():
    """40 ms per token for 9 s, then one interval at 100 ms: a request admitted 9 intervals ago
    finishes at (9 + 1) / (225 + 10) = 43 ms, within a 50 ms SLO (the per-interval check of
    "completion" accounting would miss it); a request whose first token came in this interval
    finishes at 100 ms and misses."""
    old = one_cohort(9, 4.0, 9.0, 9.0 / 0.04)
    _, out = request_tpot.decoded(old, jnp.float32(0.5), jnp.float32(0.1), SLO, DT)
    assert float(out.good_completed) == pytest.approx(2.0) and float(out.missed) == 0.0
    assert float(out.good_tokens) == pytest.approx(20.0)
    fresh = request_tpot.admitted(empty_cohorts(), jnp.asarray([0.0, 4.0, 0.0]), jnp.asarray([0.0, 40.0, 0.0]))
    left, out = request_tpot.decoded(fresh, jnp.float32(0.5), jnp.float32(0.1), SLO, DT)
    assert float(out.missed) == pytest.approx(2.0) and float(out.good_completed) == 0.0
    assert float(left.seqs[1, 0]) == pytest.approx(2.0)  # the unfinished half stays, its mean 100 ms so far
    np.testing.assert_allclose(np.asarray(left.mean_tpot_s())[0], 0.1, rtol=1e-6)


def test_at_a_steady_tpot_every_cohort_is_judged_as_per_interval():
    """Every interval at the same TPOT: each cohort's mean is that TPOT, so the outcome is the
    per-interval check's, whatever the cohorts' ages."""
    c = empty_cohorts()
    for _ in range(H + 3):  # past the last cohort: the merge keeps the steady mean
        c = request_tpot.admitted(request_tpot.aged(c), jnp.asarray([1.0, 2.0, 0.5]), jnp.asarray([9.0, 9.0, 9.0]))
        c, out = request_tpot.decoded(c, jnp.float32(0.1), jnp.float32(0.03), SLO, DT)
        assert float(out.missed) == 0.0
    np.testing.assert_allclose(np.asarray(c.mean_tpot_s()), 0.03, rtol=1e-5)
    _, slow = request_tpot.decoded(c, jnp.float32(0.1), jnp.float32(0.03), SLO * 0.5, DT)
    assert float(slow.good_completed) == 0.0
    assert float(slow.missed) == pytest.approx(0.1 * float(jnp.sum(c.seqs)), rel=1e-5)


def test_the_phases_follow_a_cohort_through_an_interval_and_do_nothing_without_cohorts():
    """serve_interval's phases on their own: at the start the cohorts age and keep the share the
    reconfiguration left; the good admissions move from on_time to cohort 0; the decode judges them;
    an overflow scales them. Without cohorts each is a no-op, and a state whose cohorts disagree with
    the accounting is refused."""
    _, params = ig.make("InferenceGym-Task4-v2", server={"slo_accounting": "request"})
    sp = params.server
    c = one_cohort(0, 4.0, 1.0, 1.0 / 0.04)
    c = request_tpot.cohorts_at_start(c, jnp.float32(0.5), sp)
    assert float(c.seqs[1, 1]) == pytest.approx(2.0) and float(jnp.sum(c.seqs[:, 0])) == 0.0
    on_time = ig.serving.OnTime(jnp.asarray([0.0, 3.0, 0.0]), jnp.asarray([0.0, 30.0, 0.0]), jnp.float32(1.0))
    on_time, c = request_tpot.admit_to_cohorts(on_time, c)
    assert float(jnp.sum(on_time.seqs)) == 0.0 and float(on_time.late_seqs) == 1.0
    assert float(c.seqs[1, 0]) == pytest.approx(3.0)
    pool = ig.serving.Sequences(jnp.float32(6.0), jnp.float32(0.0), jnp.float32(0.0))
    after = ig.serving.Sequences(jnp.float32(3.0), jnp.float32(0.0), jnp.float32(0.0))
    tpot = jnp.float32(0.02)
    late = request_tpot.Decoded(jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.5))
    mean, finishing = request_tpot.finished_by_cohort(c, pool, after, tpot, sp)
    left, good = request_tpot.judge_cohorts(c, late, pool, after, tpot, sp)
    assert float(good.good_completed) == pytest.approx(2.5) and float(good.missed) == pytest.approx(0.5)
    assert float(jnp.sum(finishing)) == pytest.approx(2.5)
    np.testing.assert_allclose(np.asarray(mean)[:2], [0.02, (2.0 / (1.0 / 0.04 + 50.0))], rtol=1e-5)
    assert float(jnp.sum(request_tpot.rescale_cohorts(left, jnp.float32(0.0)).seqs)) == 0.0
    completion = sp.replace(slo_accounting="completion")
    assert request_tpot.cohorts_at_start(None, jnp.float32(1.0), completion) is None
    assert request_tpot.admit_to_cohorts(on_time, None) == (on_time, None)
    assert request_tpot.judge_cohorts(None, late, pool, after, tpot, completion) == (None, late)
    assert request_tpot.rescale_cohorts(None, jnp.float32(1.0)) is None
    assert float(jnp.sum(request_tpot.finished_by_cohort(None, pool, after, tpot, sp)[1])) == 0.0
    with pytest.raises(ValueError, match="slo_accounting='request'"):
        request_tpot.cohorts_at_start(None, jnp.float32(1.0), sp)


def random_cohorts(rng: np.random.Generator, n: int) -> TpotCohorts:
    seqs = rng.exponential(1.0, (n, 3, H)).astype(np.float32) * (rng.random((n, 3, H)) < 0.7)
    seqs[: n // 4, :, -2:] = 0.0  # both oldest empty: the merge keeps the older one's time
    tokens = rng.uniform(1.0, 400.0, (n, H)).astype(np.float32)
    return TpotCohorts(seqs, (seqs * 50.0).astype(np.float32), (tokens * rng.uniform(0.01, 0.08, (n, H))).astype(
        np.float32), tokens)


def test_cohorts_match_the_numpy_reference():
    """Aging (the oldest two merged), admission and judgement against the reference's loops."""
    rng = np.random.default_rng(11)
    n = 32
    c = random_cohorts(rng, n)
    got = to_numpy(jax.vmap(request_tpot.aged)(jax.tree_util.tree_map(jnp.asarray, c)))
    want = ref_goodput.age_cohorts(c)
    for name in ("seqs", "remaining", "decode_s", "tokens"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-6, err_msg=name)
    tpot = rng.uniform(0.01, 0.2, n).astype(np.float32)
    done = rng.uniform(0.0, 1.0, n).astype(np.float32)
    _, params = ig.make("InferenceGym-Task4-v2", server={"slo_accounting": "request"})
    left, out = jax.vmap(request_tpot.decoded, in_axes=(0, 0, 0, None, None))(
        jax.tree_util.tree_map(jnp.asarray, c), done, tpot, params.server.tpot_slo_s, params.server.dt_s)
    before = ig.serving.Sequences(np.ones(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32))
    after = ig.serving.Sequences(1.0 - done, np.zeros(n, np.float32), np.zeros(n, np.float32))
    r_left, r_tokens, r_good, r_late = ref_goodput.decode_cohorts(c, before, after, tpot, to_numpy(params.server))
    np.testing.assert_allclose(np.asarray(out.good_tokens), r_tokens, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out.good_completed), r_good, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out.missed), r_late, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(left.seqs), r_left.seqs, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(left.tokens), r_left.tokens, rtol=1e-6)


@pytest.mark.slow
def test_an_episode_under_request_accounting_keeps_its_books():
    """A jitted episode of a mixed-engine task under "request" accounting: the cohorts hold every
    good running sequence (good + late = running), nothing negative or non-finite, and per-request
    judgement misses no more than the per-interval check on the same draws."""
    misses = {}
    for accounting in ("completion", "request"):
        env, params = ig.make("InferenceGym-Task3-v2", max_steps=200, server={"slo_accounting": accounting})
        action = params.default_action

        def episode(key, env=env, params=params, action=action):
            _, state = env.reset(key, params)

            def body(st, t):
                _, st, _, _, _, info = env.step(jax.random.fold_in(key, t), st, action, params)
                return st, (info["metrics"].slo_violations, info["metrics"].completed, st.server)

            return jax.lax.scan(body, state, jnp.arange(199))[1]

        violations, completed, servers = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(2), 4))
        misses[accounting] = float(jnp.sum(violations))
        if accounting == "request":
            good = jnp.sum(servers.tpot.seqs, axis=(-2, -1)) + jnp.sum(servers.on_time.seqs, axis=-1)
            np.testing.assert_allclose(np.asarray(good + servers.on_time.late_seqs), np.asarray(servers.running.seqs),
                                       rtol=2e-4, atol=1e-3)
            assert float(jnp.max(jnp.abs(servers.on_time.seqs))) == 0.0  # the good part lives in the cohorts
            for leaf in jax.tree_util.tree_leaves(servers.tpot):
                assert bool(jnp.all(jnp.isfinite(leaf)) & jnp.all(leaf >= 0.0))
        assert float(jnp.sum(completed)) > 100.0
    assert misses["request"] <= misses["completion"] + 1e-3
