"""The mixed engine (`ServerParams.engine == "mixed"`, `serving.mixed`): its step-time special
cases, the closed-form iteration chain against a Monte-Carlo, request conservation and finiteness
on every task's newest version under random and extreme actions, no retrace, and two physical
sanity checks of its latency and capacity against the fluid engine (issue 41)."""

from __future__ import annotations

import dataclasses
import functools

import chex
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import loadtest, perf_model, serving, tasks
from inferencegym_jax.actions import GRID_SIZES, KNOBS
from inferencegym_jax.serving import fresh_ttft
from inferencegym_jax.traffic import strata, workload

NEWEST = [ids[-1] for ids in tasks.task_versions().values()]  # each task's newest version
STEPS = 64  # intervals per rollout (below every task's horizon: no auto-reset inside it)
# [req/s] offered rates of the rollouts: almost idle, the task's own scale, far past any capacity
# (a trace task replays its trace whatever the rate).
RATES = (0.02, 3.0, 400.0)
POLICIES = 4  # action policies (`policy_actions`)


def mixed_make(env_id: str, **overrides):
    """`ig.make` of a task with the mixed engine and all five knobs active."""
    return ig.make(env_id, server={"engine": "mixed"}, active_knobs=list(KNOBS), **overrides)


# ----------------------------------------------------------------- perf_model.mixed_step_time


POINTS = [(gpu, quant, b, c, k) for gpu in ("a100-80gb", "h100-sxm") for quant in ("fp16", "int4")
          for b in (1.0, 16.0, 64.0, 256.0) for c in (200.0, 3000.0) for k in (0.0, 4.0)]


def test_mixed_step_time_special_cases_and_one_weight_read():
    chunks = np.asarray([1.0, 64.0, 256.0, 1024.0, 2048.0, 8192.0], np.float32)
    for gpu, quant, b, c, k in POINTS:
        p = perf_model.get_profile(gpu, quant=quant)
        step = perf_model.decode_step_time(p, b, c, k)
        assert float(perf_model.mixed_step_time(p, b, c, k, 0.0)) == float(step), (gpu, quant, b, c, k)
        mixed = np.asarray(perf_model.mixed_step_time(p, b, c, k, chunks))
        alone = np.asarray(perf_model.prefill_time(p, chunks))
        assert np.all(mixed < alone + float(step)), (gpu, quant, b, c, k, mixed, alone + float(step))
        assert np.all(np.diff(mixed) > 0), (gpu, quant, b, c, k, mixed)
        assert np.all(mixed > float(step))  # a chunk is not free
    for gpu in ("a100-80gb", "h100-sxm"):
        p = perf_model.get_profile(gpu)
        for c in (0.0, 500.0):
            got = np.asarray(perf_model.mixed_step_time(p, 0.0, c, 4.0, chunks))
            np.testing.assert_array_equal(got, np.asarray(perf_model.prefill_time(p, chunks)))


# ----------------------------------------------------------------- fresh_ttft.chain_length_moments


def test_chain_length_moments_at_rate_zero_are_the_decode_step():
    d = jnp.float32(0.031)
    m, biased1, biased2 = fresh_ttft.chain_length_moments(d, jnp.float32(0.0), jnp.float32(0.02),
                                                          jnp.float32(5e-4), jnp.float32(1e-5))
    np.testing.assert_allclose([float(m), float(biased1), float(biased2)], [0.031, 0.031, 0.031**2], rtol=1e-6)


def chain_monte_carlo(d: float, rate: float, w: np.ndarray, pw: np.ndarray, chains: int = 100_000,
                      burn: int = 40, keep: int = 20, seed: int = 0) -> tuple[float, float, float]:
    """E[M], E[M^2] / E[M], E[M^3] / E[M] of the stationary chain M' = D + sum of w over
    Poisson(rate M) arrivals (w iid with values `w` [s] and probabilities `pw`): `chains`
    independent chains from M = D, `burn` steps dropped, the next `keep` pooled. The sum is drawn
    exactly by Poisson thinning: one Poisson(rate M pw_k) count per value."""
    rng = np.random.default_rng(seed)
    m = np.full(chains, d)
    moments = np.zeros(3)
    for i in range(burn + keep):
        counts = rng.poisson(rate * m[:, None] * pw[None, :])
        m = d + counts @ w
        if i >= burn:
            moments += [m.mean(), (m**2).mean(), (m**3).mean()]
    moments /= keep
    return moments[0], moments[1] / moments[0], moments[2] / moments[0]


def test_chain_length_moments_match_a_monte_carlo_of_the_chain():
    d = 0.02  # [s] decode-only iteration
    w = np.asarray([0.004, 0.012, 0.05])  # [s] engine time one arrival adds
    pw = np.asarray([0.5, 0.35, 0.15])
    ew = float(pw @ w)
    rate = 0.5 / ew  # load rate E[w] = 0.5
    got = fresh_ttft.chain_length_moments(jnp.float32(d), jnp.float32(rate), jnp.float32(ew),
                                          jnp.float32(pw @ w**2), jnp.float32(pw @ w**3))
    want = chain_monte_carlo(d, rate, w, pw)
    np.testing.assert_allclose([float(x) for x in got], want, rtol=0.02)  # MC error ~0.5 %
    assert float(got[1]) > float(got[0]) * 1.05  # the length bias is there (not a degenerate chain)


# ----------------------------------------------------------------- rollouts on every task


def policy_actions(seed: int = 41) -> np.ndarray:
    """Grid indices, int32 (POLICIES x len(RATES), STEPS, 5), of each env's intervals; env
    policy * len(RATES) + r runs policy `policy` at RATES[r]: 0 every knob uniform; 1 every knob
    at an end of its range (kv 0.1 or 1, spec_length 0 or 8, batch 1 or 512, disaggregation off or
    on), the quant tier changing every interval; 2 kv/spec/batch uniform, FP16, no second GPU (an
    engine that serves); 3 as 2 with disaggregation toggled every 8 intervals."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(GRID_SIZES)
    shape = (POLICIES, len(RATES), STEPS, 5)
    uniform = rng.integers(0, sizes, shape)
    extreme = np.where(rng.random(shape) < 0.5, sizes - 1, 0)
    extreme[..., 4] = np.arange(STEPS) % 3
    out = np.stack([uniform[0], extreme[1], uniform[2], uniform[3]])
    out[2:, ..., 3:] = 0
    out[3, ..., 3] = (np.arange(STEPS) // 8) % 2
    return out.reshape(-1, STEPS, 5).astype(np.int32)


def _episode(env, params, key: jax.Array, actions: jax.Array, rate: jax.Array):
    """STEPS intervals of one env at offered `rate` [req/s] under `actions` (STEPS, 5): per step
    (server state before it, obs, reward, truncated, info, server state after it)."""
    params = dataclasses.replace(params, workload=dataclasses.replace(params.workload, base_rate=rate))
    k_reset, k_run = jax.random.split(key)
    _, state = env.reset(k_reset, params)

    def body(state, xs):
        action, k = xs
        obs, nxt, reward, _, truncated, info = env.step(k, state, action, params)
        return nxt, (state.server, obs, reward, truncated, info, nxt.server)

    return jax.lax.scan(body, state, (actions, jax.random.split(k_run, STEPS)))[1]


@functools.cache
def rollout(env_id: str):
    """The rollouts (`_episode`, leaves (envs, STEPS, ...), NumPy) of POLICIES x len(RATES) envs of
    `env_id` on the mixed engine (`policy_actions`), and the task's params."""
    env, params = mixed_make(env_id)
    rates = np.tile(np.asarray(RATES, np.float32), POLICIES)
    keys = jax.random.split(jax.random.key(41), rates.size)
    out = jax.jit(jax.vmap(functools.partial(_episode, env, params)))(keys, jnp.asarray(policy_actions()),
                                                                        jnp.asarray(rates))
    return jax.tree_util.tree_map(np.asarray, out), params


@pytest.mark.parametrize("env_id", helpers.physics_task_params(NEWEST))
def test_mixed_engine_conserves_requests_on_every_task(env_id):
    """Per step: arrived so far = completed + failed + timed out so far + waiting + running + preempted."""
    (_, _, _, truncated, info, after), _ = rollout(env_id)
    assert not truncated.any()  # one episode per rollout: no auto-reset in the sums
    m = info["metrics"]
    f64 = functools.partial(np.asarray, dtype=np.float64)
    arrived = np.cumsum(f64(info["arrivals"].count).sum(-1), axis=1)
    left = np.cumsum(f64(m.completed) + f64(m.failed) + f64(m.timeouts), axis=1)
    inside = f64(after.queue.count).sum((-2, -1)) + f64(after.running.seqs) + f64(after.preempted.seqs)
    np.testing.assert_allclose(left + inside, arrived, rtol=2e-5, atol=1e-3)
    assert arrived[:, -1].sum() > 0 and m.completed.sum() > 0  # traffic came and was served
    assert np.all(after.running.seqs >= -1e-4) and np.all(after.preempted.seqs >= -1e-4)
    assert np.all(f64(after.queue.count) >= -1e-4)


def _all_finite(tree) -> bool:
    return all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree_util.tree_leaves(tree))


@jax.jit
def _with_requests(server, arrivals, action, params):
    """`serving.serve_interval_with_requests` of each of a batch of intervals (leading axis)."""
    return jax.vmap(serving.serve_interval_with_requests, in_axes=(0, 0, 0, None))(server, arrivals, action, params)


@pytest.mark.parametrize("env_id", helpers.physics_task_params(NEWEST))
def test_mixed_engine_fuzz_stays_finite_with_valid_ttft_laws(env_id):
    """Random and extreme actions (`policy_actions`) at RATES: reward, observation and every
    IntervalMetrics field finite; every interval replayed through `serve_interval_with_requests`
    (with length spreads from 0 to 3 in log space) gives TTFT components with finite, >= 0
    parameters, scale > 0 and finite, >= 0 request counts."""
    (before, obs, reward, _, info, _), params = rollout(env_id)
    assert _all_finite(reward) and _all_finite(obs) and _all_finite(info["metrics"])
    flat = functools.partial(jax.tree_util.tree_map, lambda x: x.reshape((-1,) + x.shape[2:]))
    arrivals = flat(info["arrivals"])
    log_sd = np.random.default_rng(0).choice([0.0, 0.3, 1.0, 3.0], size=arrivals.count.shape).astype(np.float32)
    arrivals = arrivals.replace(prompt_strata=strata.length_strata(jnp.asarray(log_sd)))
    for budget in (1.0, 2048.0, 1048576.0):  # [tokens] max_batched_tokens: the schema's ends and vLLM's default
        server_params = dataclasses.replace(params.server, max_batched_tokens=jnp.float32(budget))
        server, metrics, first = _with_requests(flat(before), arrivals, flat(info["applied_action"]), server_params)
        assert _all_finite(server) and _all_finite(metrics) and _all_finite(first), budget
        first = jax.tree_util.tree_map(np.asarray, first)
        assert np.all(first.low_s >= 0) and np.all(first.high_s >= first.low_s)
        assert np.all(first.exp_shift_s >= 0) and np.all(first.exp_scale_s > 0)
        assert np.all(first.requests >= 0) and np.all(first.exp_requests >= 0)
        assert first.exp_requests.sum() > 0  # the fresh arrivals' laws were exercised
        # the interval's admitted requests are exactly the components' requests
        np.testing.assert_allclose(first.requests.sum((1, 2)) + first.exp_requests.sum((1, 2)), metrics.admitted,
                                   rtol=1e-4, atol=1e-3)


def test_mixed_env_step_traces_once():
    env, params = mixed_make(NEWEST[0])
    chex.clear_trace_counter()
    step = jax.jit(chex.assert_max_traces(env.step, n=1))
    _, state = env.reset(jax.random.key(0), params)
    actions = policy_actions()[:, 0]
    for i in (0, 5):  # different keys, actions (a quant change, disaggregation on), and the stepped state
        _, state, reward, *_ = step(jax.random.key(i + 1), state, jnp.asarray(actions[i]), params)
        _, state, reward, *_ = step(jax.random.key(i + 2), state, jnp.asarray(actions[i + 3]), params)
    assert np.isfinite(float(reward))


# ----------------------------------------------------------------- physics against the fluid engine

LOAD_POINT = loadtest.LoadPoint(gpu="a100-80gb", batch_size=64)  # fixed 512-token prompts, 128-token outputs
BELOW = (4.0, 8.0, 12.0)  # [req/s] below the point's capacity (~14-16 req/s, issue 41)
OVERLOAD = 32.0  # [req/s] about twice it
WARMUP, SECONDS, EPISODES = 20, 40, 4


@functools.partial(jax.jit, static_argnames=("seconds",))
def _load_episodes(keys, rates, action, params, seconds: int):
    """Per (rate, key) pair, `seconds` 1-s intervals of Poisson traffic at the rate under the fixed
    `action` (as `loadtest` runs them): per interval (completed, running sequences at its end,
    first-token `RequestLatency`)."""

    def episode(key, rate):
        p = dataclasses.replace(params, workload=dataclasses.replace(params.workload, base_rate=rate))
        k_reset, k_run = jax.random.split(key)
        carry = (serving.initial_state(action, p.server.num_age_buckets),
                 workload.init(k_reset, p.workload, seconds * p.server.dt_s))

        def body(carry, xs):
            k, t = xs
            traffic, arrivals = workload.step(k, carry[1], t * p.server.dt_s, p.server.dt_s, p.workload)
            server, m, first = serving.serve_interval_with_requests(carry[0], arrivals, action, p.server)
            return (server, traffic), (m.completed, server.running.seqs, first)

        return jax.lax.scan(body, carry, (jax.random.split(k_run, seconds), jnp.arange(seconds, dtype=jnp.float32)))[1]

    return jax.vmap(episode)(keys, rates)


def load_run(engine: str, rates: tuple[float, ...]):
    """Completions per second, the fresh arrivals' mean TTFT [s] and the largest running pool
    [sequences] at each rate (the measured SECONDS after WARMUP, EPISODES episodes each) of LOAD_POINT
    on `engine`."""
    params = loadtest.env_params(LOAD_POINT, WARMUP + SECONDS)
    params = dataclasses.replace(params, server=dataclasses.replace(params.server, engine=engine))
    rate = np.repeat(np.asarray(rates, np.float32), EPISODES)
    keys = jax.random.split(jax.random.key(7), rate.size)
    completed, running, first = jax.tree_util.tree_map(
        lambda x: np.asarray(x, np.float64)[:, WARMUP:],
        _load_episodes(keys, jnp.asarray(rate), LOAD_POINT.action(), params, WARMUP + SECONDS))
    per_rate = (len(rates), -1)
    served = completed.reshape(per_rate).sum(1) / (EPISODES * SECONDS)
    fresh_n = first.exp_requests.reshape(per_rate).sum(1)
    fresh_s = (first.exp_requests * (first.exp_shift_s + first.exp_scale_s)).reshape(per_rate).sum(1)
    fresh_mean = np.where(fresh_n > 0, fresh_s / np.maximum(fresh_n, 1e-30), np.nan)
    return served, fresh_mean, running.reshape(per_rate).max(1)


def test_mixed_engine_ttft_grows_with_load_and_capacity_is_not_below_the_fluid_engines():
    """Fresh arrivals wait longer at a higher rate (more prompts share the iterations); and one
    forward per iteration reads the weights once for the decodes and the chunks, so the mixed
    engine serves at least what the fluid engine's prefill pass + decode steps serve (the exact
    per-iteration scheduler: ~+7 to +13 % at this point, experiments/crosscheck/README.md)."""
    served, ttft, pool = load_run("mixed", (*BELOW, OVERLOAD))
    assert np.all(np.isfinite(ttft[:3])) and np.all(np.diff(ttft[:3]) > 0), ttft  # (none fresh at overload)
    np.testing.assert_allclose(served[:3], BELOW, rtol=0.05)  # below saturation: what comes is served
    fluid, _, fluid_pool = load_run("fluid", (OVERLOAD,))
    assert served[3] < 0.75 * OVERLOAD and fluid[0] < 0.75 * OVERLOAD  # both saturated
    assert served[3] >= fluid[0], (served[3], fluid[0])
    # the mixed engine's pool stays within the batch cap, where the fluid engine's passes it (issue 41, item 3)
    assert pool.max() <= LOAD_POINT.batch_size * (1 + 1e-5) < fluid_pool[0], (pool, fluid_pool)


# ----------------------------------------------------------------- the phases, one interval by hand


def test_the_chunk_time_table_follows_the_step_model():
    """`iteration.chunk_time_s` (6 knots, linear between) against `iteration.chunk_s` (a forward per
    chunk size): within 0.5 ms everywhere, and within 7 % of the iteration it adds to."""
    from inferencegym_jax.serving import iteration

    for gpu in ("a100-80gb", "h100-sxm"):
        for quant in ("fp16", "int4"):
            p = perf_model.get_profile(gpu, quant=quant)
            for pool in (0.0, 0.3, 2.0, 64.0, 250.0):
                for spec in (0.0, 4.0):
                    it = iteration.iterations(p, jnp.float32(pool), jnp.float32(800.0), jnp.float32(spec),
                                              jnp.float32(2048.0), jnp.asarray(False))
                    k = jnp.linspace(1.0, it.chunk_tokens, 200)
                    exact, table = iteration.chunk_s(p, it, k), iteration.chunk_time_s(it, k)
                    assert float(jnp.max(jnp.abs(table - exact))) < 5e-4, (gpu, quant, pool, spec)
                    assert float(jnp.max(jnp.abs(table - exact) / (exact + it.decode_s))) < 0.07
                    assert float(iteration.chunk_time_s(it, jnp.float32(0.0))) == 0.0


def one_interval(disaggregated: bool = False):
    """The inputs of the mixed phases for one hand-built interval on Task 3's newest version: 30
    sequences decoding, 6 fresh arrivals of 512 tokens and 4 requests waiting 2 intervals."""
    from inferencegym_jax.serving import admission, engine, mixed

    _, params = mixed_make(NEWEST[2])
    server = params.server
    config = serving.initial_state(params.default_action, server.num_age_buckets).config
    config = dataclasses.replace(config, batch_size=jnp.float32(64.0), prefill_disagg=jnp.float32(disaggregated))
    state = serving.initial_state(config, server.num_age_buckets)
    state = dataclasses.replace(state, started=jnp.asarray(True),
                                running=serving.Sequences(jnp.float32(30.0), jnp.float32(30 * 700.0),
                                                          jnp.float32(30 * 100.0)))
    aged = jnp.zeros_like(state.queue.count).at[1, 2].set(4.0)
    state = dataclasses.replace(state, queue=serving.Queue(aged, aged * 300.0, aged * 100.0, aged * 300.0**2))
    arrivals = workload.Arrivals(jnp.asarray([0.0, 6.0, 0.0]), jnp.asarray([0.0, 6 * 512.0, 0.0]),
                                 jnp.asarray([0.0, 600.0, 0.0]), jnp.asarray([0.0, 6 * 512.0**2, 0.0]),
                                 jnp.float32(6.0), jnp.ones((3, 5), jnp.float32))
    profile = mixed.mixed_profile(serving.select_profile(server.profiles, config.quant_tier))
    eng, running, preempted, _ = engine.reconfigure(state, config, profile, server)
    queue = admission.enqueue(state.queue, arrivals)
    capacity = perf_model.kv_capacity_tokens(profile, config.kv_budget)
    return server, config, profile, eng, running, preempted, queue, arrivals, capacity


@pytest.mark.parametrize("disaggregated", [False, True])
def test_the_mixed_phases_of_one_interval(disaggregated):
    from inferencegym_jax.serving import admission, goodput, latency, mixed

    server, config, profile, eng, running, preempted, queue, arrivals, capacity = one_interval(disaggregated)
    limits, it, law = mixed.mixed_admission_limits(running, preempted, queue, arrivals, eng, capacity, config,
                                                   profile, server)
    assert float(limits.token_cap) <= float(eng.serving_s * it.prefill_rate) + 1e-3
    assert 0.0 < float(limits.slots) <= 64.0
    adm, _ = admission.admit(queue, preempted, limits)
    np.testing.assert_allclose(np.asarray(adm.admitted.count), np.asarray(queue.count))  # room for all 10
    pass_ = mixed.mixed_prefill(adm, eng, it, law)
    if disaggregated:  # a prefill GPU: decode keeps the whole interval
        assert float(pass_.decode_s) == float(eng.serving_s)
    else:  # 4,272 prompt tokens cost at least their full-chunk share of engine time, at most a lone pass each
        cost = float(eng.serving_s - pass_.decode_s)
        assert 4272 * 0.5 * float(it.token_s) < cost < 10 * float(perf_model.prefill_time(profile, 512.0))
    ttft = latency.time_to_first_token(queue, adm, pass_, eng, limits, profile, server.dt_s)
    fresh, late, binned = mixed.mixed_first_token(ttft, adm, law, it, eng, profile, server)
    assert float(jnp.sum(fresh.requests)) == pytest.approx(6.0, rel=1e-6)
    lone = float(perf_model.prefill_time(profile, 512.0)) if disaggregated else float(
        perf_model.mixed_step_time(profile, 30.0, 700.0, config.spec_length, 512.0))
    assert float(jnp.min(fresh.shift_s[1])) >= 0.9 * lone + mixed.MEASURED_REQUEST_OVERHEAD_S  # class 1 arrived
    assert np.all((np.asarray(late) >= 0) & (np.asarray(late) <= 1))
    wide = dataclasses.replace(server, ttft_slo_s=jnp.full(3, 1000.0), tpot_slo_s=jnp.full(3, 10.0))
    never = mixed.mixed_first_token(ttft, adm, law, it, eng, profile, wide)[1]
    assert float(jnp.max(never)) == 0.0
    # shares of 0 and 1 reproduce the fluid engine's per-bin outcome exactly
    binary = latency.bin_late_share(ttft, jnp.float32(0.01), server)
    assert latency.shared_latency_statistics(adm.admitted, queue, ttft, binary, server) == \
        latency.latency_statistics(adm.admitted, queue, ttft, jnp.float32(0.01), server)
    on_time = serving.initial_state(config, server.num_age_buckets).on_time
    split = goodput.admit_share_on_time(on_time, adm.admitted, adm.readmitted, 1.0 - late)
    assert float(jnp.sum(split.seqs) + split.late_seqs) == pytest.approx(10.0, rel=1e-6)
    assert binned.centre_s.shape == ttft.centre_s.shape


def test_mixed_decode_conserves_and_late_joiners_decode_less():
    from inferencegym_jax.serving import mixed

    server, config, profile, *_ = one_interval()
    old = serving.Sequences(jnp.float32(30.0), jnp.float32(30 * 700.0), jnp.float32(30 * 100.0))
    new = serving.Sequences(jnp.float32(10.0), jnp.float32(10 * 512.0), jnp.float32(10 * 100.0))
    outs = []
    for fresh in (0.0, 10.0):  # waited (joins at the start: 34 free slots) or all fresh (join as they arrive)
        step = perf_model.decode_step_time(profile, 30.0, 700.0, config.spec_length)
        after, made = mixed.mixed_decode(old, new, jnp.float32(fresh), jnp.float32(0.8), step, jnp.float32(1.0),
                                         config, profile, server.dt_s)
        assert float(after.seqs + made.completed) == pytest.approx(40.0, rel=1e-6)
        assert float(made.generated) > 0 and float(made.tpot_s) > 0
        outs.append(made)
    assert float(outs[1].generated) < float(outs[0].generated)
