"""DistServe goodput ("completion" SLO accounting, serving.goodput) and the v1 tasks' traffic."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import evaluate, graders
from inferencegym_jax.actions import BATCH_SIZES, KNOBS
from inferencegym_jax.serving import engine, goodput
from inferencegym_jax.serving.latency import FirstToken
from inferencegym_jax.serving.types import OnTime, Queue, Sequences
from inferencegym_jax.traffic import workload

F = jnp.float32
V1_IDS = [i for i in ig.registered_envs() if i.endswith("-v1")]


def test_every_v1_and_v2_task_judges_at_completion_and_every_v0_task_at_admission():
    assert len(V1_IDS) == 4
    for env_id in ig.registered_envs():
        _, params = ig.make(env_id)
        v0 = env_id.endswith("-v0")
        assert params.server.slo_accounting == ("admission" if v0 else "completion"), env_id
        assert graders.score_scale(env_id) == ("best_static" if v0 else "oracle")


def test_an_interval_above_a_class_tpot_slo_ends_that_class_good_status_only():
    _, params = ig.make("InferenceGym-Task3-v1")  # TPOT SLOs 40 / 50 / 150 ms
    slo = np.asarray(params.server.tpot_slo_s)
    on_time = OnTime(jnp.asarray([2.0, 4.0, 6.0]), jnp.asarray([200.0, 400.0, 600.0]), F(8.0))
    before, after = Sequences(F(20.0), F(1e4), F(2000.0)), Sequences(F(15.0), F(8e3), F(1500.0))
    # 45 ms per token: above the interactive SLO, within the other two; a quarter finishes
    left, decoded = goodput.decode_on_time(on_time, before, after, F(0.045), params.server)
    assert slo[0] < 0.045 < slo[1]
    np.testing.assert_allclose(left.seqs, [0.0, 3.0, 4.5], rtol=1e-6)  # class 0's good sequences turned late
    np.testing.assert_allclose(left.remaining, [0.0, 300.0, 450.0], rtol=1e-6)
    assert float(left.late_seqs) == pytest.approx(0.75 * (8.0 + 2.0))
    assert float(decoded.good_tokens) == pytest.approx(0.25 * (400.0 + 600.0))
    assert float(decoded.good_completed) == pytest.approx(0.25 * (4.0 + 6.0))
    assert float(decoded.missed) == pytest.approx(0.25 * (8.0 + 2.0))
    # within every SLO: each part finishes the same quarter and keeps the rest
    left, decoded = goodput.decode_on_time(on_time, before, after, F(0.01), params.server)
    np.testing.assert_allclose(left.seqs, [1.5, 3.0, 4.5], rtol=1e-6)
    assert float(left.late_seqs) == pytest.approx(6.0) and float(decoded.missed) == pytest.approx(2.0)
    assert float(decoded.good_tokens) == pytest.approx(0.25 * 1200.0)


def pool(seqs: float, context: float, remaining: float) -> Sequences:
    return Sequences(F(seqs), F(context), F(remaining))


def admitted_queue(count: np.ndarray, output_per_request: float = 100.0) -> Queue:
    """(3, A) admitted bins of `count` requests with 500 prompt and `output_per_request` output
    tokens each."""
    count = jnp.asarray(count, jnp.float32)
    return Queue(count, 500.0 * count, output_per_request * count, 500.0**2 * count)


@pytest.fixture(scope="module")
def server_v1():
    return ig.make("InferenceGym-Task3-v1")[1].server  # TTFT SLOs 0.5 / 2 / 8 s, 16 ages


def test_admissions_within_their_class_ttft_slo_are_good_the_rest_and_the_readmitted_late(server_v1):
    """A hand-computed case: each bin is judged by its TTFT centre against its own class's SLO,
    at the SLO itself still good; empty bins add nothing wherever their TTFT lies."""
    assert np.asarray(server_v1.ttft_slo_s).tolist() == [0.5, 2.0, 8.0]
    count = np.zeros((3, 16), np.float32)
    centre = np.full((3, 16), 100.0, np.float32)  # empty bins: far past every SLO
    for (c, a), n, t in (((0, 0), 2.0, 0.3), ((0, 1), 3.0, 0.9), ((1, 2), 4.0, 2.0), ((2, 5), 5.0, 8.5)):
        count[c, a], centre[c, a] = n, t
    before = OnTime(jnp.asarray([1.0, 1.0, 1.0]), jnp.asarray([10.0, 10.0, 10.0]), F(0.5))
    ttft = FirstToken(jnp.asarray(centre), jnp.zeros((3, 16)))
    got = goodput.admit_on_time(before, admitted_queue(count), pool(1.5, 300.0, 60.0), ttft, server_v1)
    np.testing.assert_allclose(got.seqs, [1.0 + 2.0, 1.0 + 4.0, 1.0], rtol=1e-6)  # 0.3 <= 0.5, 2.0 <= 2.0
    np.testing.assert_allclose(got.remaining, [10.0 + 200.0, 10.0 + 400.0, 10.0], rtol=1e-6)
    assert float(got.late_seqs) == pytest.approx(0.5 + 3.0 + 5.0 + 1.5)  # 0.9 > 0.5, 8.5 > 8, readmitted


def test_admit_on_time_conserves_requests_and_a_later_first_token_only_moves_them_late(server_v1):
    """Every admitted and readmitted request joins exactly one part, with its output if good;
    delaying every first token never adds a good request (random bins, 5 draws)."""
    rng = np.random.default_rng(0)
    before = OnTime(jnp.asarray([0.5, 2.0, 1.0]), jnp.asarray([40.0, 300.0, 90.0]), F(3.0))
    for _ in range(5):
        count = rng.uniform(0.0, 4.0, (3, 16)).astype(np.float32) * (rng.uniform(size=(3, 16)) < 0.5)
        centre = rng.uniform(0.0, 12.0, (3, 16)).astype(np.float32)
        readmitted = pool(rng.uniform(0.0, 3.0), 200.0, 50.0)
        queue = admitted_queue(count, output_per_request=float(rng.uniform(10.0, 500.0)))
        got = goodput.admit_on_time(before, queue, readmitted, FirstToken(jnp.asarray(centre), jnp.zeros((3, 16))),
                                    server_v1)
        joined = np.sum(np.asarray(got.seqs) - np.asarray(before.seqs)) + float(got.late_seqs - before.late_seqs)
        assert joined == pytest.approx(count.sum() + float(readmitted.seqs), rel=1e-5)
        gained = np.asarray(got.remaining) - np.asarray(before.remaining)
        assert np.all(np.asarray(got.seqs) >= np.asarray(before.seqs)) and np.all(gained >= 0.0)
        assert gained.sum() <= float(jnp.sum(queue.output)) * (1 + 1e-6)
        later = goodput.admit_on_time(before, queue, readmitted,
                                      FirstToken(jnp.asarray(centre * 1.5), jnp.zeros((3, 16))), server_v1)
        assert np.all(np.asarray(later.seqs) <= np.asarray(got.seqs) + 1e-6)
        assert float(later.late_seqs) >= float(got.late_seqs) - 1e-5


def test_kept_share_is_the_fraction_of_sequences_left_in_0_1():
    assert float(goodput.kept_share(pool(10, 1000, 500), pool(4, 999, 1))) == pytest.approx(0.4)  # sequences only
    assert float(goodput.kept_share(pool(10, 1000, 500), pool(10, 1000, 500))) == 1.0
    assert float(goodput.kept_share(pool(0, 0, 0), pool(0, 0, 0))) == 0.0  # an empty pool: no NaN
    assert float(goodput.kept_share(pool(5, 0, 0), pool(5.001, 0, 0))) == 1.0  # rounding above: clipped
    shares = [float(goodput.kept_share(pool(8, 0, 0), pool(a, 0, 0))) for a in np.linspace(0.0, 8.0, 9)]
    np.testing.assert_allclose(shares, np.linspace(0.0, 1.0, 9), rtol=1e-6)  # linear, so monotone


def test_the_good_pool_shrinks_with_a_preemption_in_proportion_and_stays_a_partition():
    """serve_interval scales the standing by kept_share after a preemption: the good and late
    parts of a partitioned running pool still partition what the preemption left."""
    before = pool(10, 1000, 500)
    on_time = OnTime(jnp.asarray([2.0, 3.0, 4.0]), jnp.asarray([100.0, 150.0, 200.0]), F(1.0))  # 10 sequences
    after, _, evicted = engine.preempt_to_fit(before, pool(0, 0, 0), F(600.0))
    share = goodput.kept_share(before, after)
    assert float(share) == pytest.approx(0.6) and float(evicted) == pytest.approx(4.0)
    left = on_time.scaled(share)
    assert float(jnp.sum(left.seqs) + left.late_seqs) == pytest.approx(float(after.seqs), rel=1e-6)
    np.testing.assert_allclose(left.remaining, [60.0, 90.0, 120.0], rtol=1e-6)


def flip_policy(small: int, large: int):
    """Batch size flipped between two grid values every interval, the other knobs at the default."""
    b = KNOBS.index("batch_size")

    def policy(key, obs, params):
        base = jnp.asarray([9, 0, 5, 0, 0], jnp.int32)  # kv 1.0, batch 32
        return base.at[b].set(jnp.where(obs.timestep.astype(jnp.int32) % 2 == 0, small, large))

    return policy


def test_completion_accounting_closes_the_batch_flipping_loophole():
    """Batch 2 <-> 192 every interval: under v0's admission accounting the requests admitted in
    a fast interval keep their whole output as goodput though they decode in slow ones; judged at
    completion they are not good, and goodput falls with the TPOT they see."""
    small, large = BATCH_SIZES.index(2), BATCH_SIZES.index(192)
    served = {}
    for env_id in ("InferenceGym-Task2-v0", "InferenceGym-Task2-v1"):
        env, params = ig.make(env_id)
        traj = evaluate.run_episodes(env, params, flip_policy(small, large), evaluate.evaluation_key(0), 8)
        m = traj.metrics
        tpot_bad = np.mean(np.asarray(m.tpot_s) > float(params.server.tpot_slo_s[1]))
        assert tpot_bad > 0.3, env_id  # the flipping does break the TPOT SLO often
        served[env_id] = float(np.sum(m.good_tokens) / np.sum(m.output_tokens))
    assert served["InferenceGym-Task2-v1"] < 0.6 * served["InferenceGym-Task2-v0"], served


@pytest.mark.parametrize("env_id", ["InferenceGym-Task3-v1", "InferenceGym-Task4-v1"])
def test_the_good_pool_stays_inside_the_running_pool(env_id):
    env, params = ig.make(env_id)

    def run(key):
        _, state = env.reset_env(key, params)

        def body(carry, t):
            state, k = carry
            k, k_act, k_step = jax.random.split(k, 3)
            action = env.action_space(params).sample(k_act)
            _, state, _, _, _, info = env.step_env(k_step, state, action, params)
            return (state, k), (state.server.on_time, state.server.running.seqs, info["metrics"])

        return jax.lax.scan(body, (state, key), jnp.arange(60))[1]

    on_time, running, m = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(3), 16))
    total = np.asarray(on_time.seqs).sum(axis=-1) + np.asarray(on_time.late_seqs)
    assert np.all(np.asarray(on_time.seqs) >= 0) and np.all(np.asarray(on_time.remaining) >= 0)
    assert np.all(np.asarray(on_time.late_seqs) >= 0) and np.all(np.asarray(m.slo_violations) >= 0)
    # the good and late parts partition the running pool, to float32 rounding
    np.testing.assert_allclose(total, np.asarray(running), rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(m.good_tokens) <= np.asarray(m.output_tokens) * (1 + 1e-5) + 1e-3)
    assert np.all(np.asarray(m.slo_violations) <= np.asarray(m.completed + m.timeouts + m.failed) + 1e-3)
    assert np.isfinite(np.asarray(m.slo_violation_rate)).all()


def test_task3_v1_bursts_are_document_jobs_of_the_batch_tenant():
    env, params = ig.make("InferenceGym-Task3-v1")
    wl = params.workload
    keys = jax.random.split(jax.random.key(0), 4000)
    t = F(0.0)

    def arrivals(key, in_burst):
        state = workload.WorkloadState(in_burst=jnp.asarray(in_burst), phase_s=F(0.0))
        return workload.step(key, state, t, params.server.dt_s, wl)[1]

    off = jax.vmap(lambda k: arrivals(k, False))(keys)
    on = jax.vmap(lambda k: arrivals(k, True))(keys)
    off_count, on_count = np.asarray(off.count).sum(0), np.asarray(on.count).sum(0)
    np.testing.assert_allclose(off_count / len(keys), [0.9, 2.1, 0.0], rtol=0.05)  # 3 req/s of chat
    np.testing.assert_allclose(on_count / len(keys), [0.9, 2.1, 3.0], rtol=0.05)  # plus 3 req/s of documents
    off_prompt = np.asarray(off.prompt_tokens).sum() / off_count.sum()
    on_prompt = np.asarray(on.prompt_tokens).sum() / on_count.sum()
    assert 450 < off_prompt < 600 and 1600 < on_prompt < 2000, (off_prompt, on_prompt)
    base_mean, burst_mean = (float(workload.length_moments(d)[0][0]) for d in (wl.prompt, wl.burst_prompt))
    # The sums' normal law, clipped at count x the shortest prompt, errs high where counts are
    # small and the law wide (lengths.sum_of_lengths): +10 % between bursts (~1 request per
    # class and interval, 5 % documents), +1 % in them.
    assert base_mean < off_prompt < 1.15 * base_mean and on_prompt == pytest.approx(burst_mean, rel=0.03)
    # the long-run mean the reward's reference uses weighs both regimes by their requests: bursts
    # are 1/3 of the time at twice the rate, half of the requests
    mean_prompt, _ = workload.mean_lengths(wl)
    assert float(mean_prompt) == pytest.approx(0.5 * base_mean + 0.5 * burst_mean, rel=1e-5)


def test_an_oracle_scaled_grade_maps_the_floor_to_0_and_the_ceiling_to_1_without_capping():
    env, params = ig.make("InferenceGym-Task1-v1")
    traj = evaluate.run_episodes(env, params, lambda k, o, p: jnp.asarray([9, 0, 6, 0, 0], jnp.int32),
                                 evaluate.evaluation_key(0), 2)
    value = graders.grade_episodes(traj, params, "throughput", 0.0, 1.0, 0.0, 1.0).score  # unnormalised
    for floor, ceiling in ((0.2, 0.9), (0.1, 0.5)):
        got = graders.grade_episodes(traj, params, "throughput", 0.0, 1.0, floor, ceiling).score
        np.testing.assert_allclose(got, np.maximum((np.asarray(value) - floor) / (ceiling - floor), 0.0), rtol=1e-6)
    assert np.all(np.asarray(graders.grade_episodes(traj, params, "throughput", 0.0, 1.0, 0.1, 0.5).score) > 1.0)
    consts = graders.load_constants("InferenceGym-Task1-v1")
    assert graders.scale_constants("InferenceGym-Task1-v1") == (0.0, 1.0, consts["score_floor"],
                                                                 consts["score_ceiling"])
