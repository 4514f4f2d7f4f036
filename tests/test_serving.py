"""Each phase of the serving simulator, called directly, obeys the physics its docstring states."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import perf_model, serving
from inferencegym_jax.serving import admission, engine, latency
from inferencegym_jax.serving.types import Queue, Sequences
from inferencegym_jax.traffic.workload import Arrivals

F = jnp.float32


@pytest.fixture(scope="module")
def task():
    _, params = ig.make("InferenceGym-Task3-v0")
    return params.server, serving.select_profile(params.server.profiles, 0), params.default_action


def config(default, **knobs):
    return default.replace(**{k: F(v) for k, v in knobs.items()})


def pool(seqs, context, remaining):
    return Sequences(F(seqs), F(context), F(remaining))


def queue(count):
    """A queue with `count` (3, A) requests of 500 prompt and 100 output tokens each."""
    count = jnp.asarray(count, jnp.float32)
    return Queue(count, 500.0 * count, 100.0 * count, 500.0**2 * count)


def started_state(default, running, **fields):
    state = serving.initial_state(default, 16)
    return state.replace(running=running, started=jnp.asarray(True), **fields)


def test_first_configuration_is_free(task):
    server, profile, default = task
    state = serving.initial_state(default, 16).replace(running=pool(10, 5000, 800))
    eng, running, preempted, dropped = engine.reconfigure(state, config(default, quant_tier=2, prefill_disagg=1),
                                                          profile, server)
    assert float(eng.busy_s) == 0.0 and float(dropped) == 0.0 and bool(eng.disaggregated)
    assert float(running.seqs) == 10.0 and float(eng.num_gpus) == 2.0


def test_a_precision_change_reloads_the_weights_and_drops_the_kv_cache(task):
    server, profile, default = task
    state = started_state(default, pool(10, 5000, 800))
    eng, running, preempted, dropped = engine.reconfigure(state, config(default, quant_tier=1), profile, server)
    reload_s = float(profile.weight_bytes / profile.weight_load_bw + server.restart_s)
    assert float(eng.stall_s) == pytest.approx(reload_s, rel=1e-6)
    assert float(eng.busy_s) == pytest.approx(min(reload_s, float(server.dt_s)))
    assert float(running.seqs) == 0.0 and float(preempted.context) == 5000.0 and float(dropped) == 10.0


def test_disaggregation_starts_a_prefill_gpu_billed_at_once(task):
    server, profile, default = task
    state = started_state(default, pool(4, 2000, 400))
    eng, running, _, _ = engine.reconfigure(state, config(default, prefill_disagg=1), profile, server)
    up_s = float(profile.weight_bytes / profile.weight_load_bw + server.prefill_start_s)
    assert not bool(eng.disaggregated) and float(eng.num_gpus) == 2.0 and float(eng.busy_s) == 0.0
    assert float(eng.prefill_warmup_s) == pytest.approx(max(up_s - float(server.dt_s), 0.0), rel=1e-6)
    assert float(running.seqs) == 4.0  # this engine keeps serving


def test_preemption_frees_exactly_the_excess_context():
    running, preempted, evicted = engine.preempt_to_fit(pool(10, 1000, 500), pool(1, 50, 10), F(600))
    assert float(running.context) == pytest.approx(600.0) and float(evicted) == pytest.approx(4.0)
    assert float(preempted.seqs) == pytest.approx(5.0) and float(preempted.remaining) == pytest.approx(210.0)
    same, _, none = engine.preempt_to_fit(pool(10, 1000, 500), pool(0, 0, 0), F(2000))
    assert float(none) == 0.0 and float(same.seqs) == 10.0


def test_arrivals_enter_at_age_zero():
    q = queue(np.ones((3, 16)))
    arrivals = Arrivals(jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([10.0, 20.0, 30.0]), jnp.ones(3), jnp.ones(3),
                        F(6.0))
    out = admission.enqueue(q, arrivals)
    np.testing.assert_array_equal(out.count[:, 0], [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(out.count[:, 1:], q.count[:, 1:])
    np.testing.assert_array_equal(out.prompt[:, 0], q.prompt[:, 0] + np.asarray([10.0, 20.0, 30.0]))


def idle_engine(server):
    return engine.Engine(F(0), server.dt_s, F(0), jnp.asarray(False), F(0), F(1))


def test_an_idle_engine_offers_its_batch_and_its_prefill_rate(task):
    server, profile, default = task
    cfg = config(default, batch_size=64)
    capacity = perf_model.kv_capacity_tokens(profile, cfg.kv_budget)
    limits = admission.admission_limits(pool(0, 0, 0), pool(0, 0, 0), queue(np.ones((3, 16))), idle_engine(server),
                                        capacity, cfg, profile, server)
    assert float(limits.slots) == 64.0 and float(limits.prefill_share) == 1.0
    rate = float(perf_model.prefill_throughput(profile))
    assert float(limits.token_cap) == pytest.approx(min(float(capacity) * 0.99, float(server.dt_s) * rate), rel=1e-5)


def test_admission_order_preempted_then_classes_then_oldest(task):
    server, profile, default = task
    count = np.zeros((3, 16), np.float32)
    count[0, 0], count[1, 3], count[1, 1], count[2, 5] = 2.0, 2.0, 2.0, 5.0
    limits = admission.Limits(F(5.0), F(1e9), F(1.0), F(0.01), F(1.0))  # 5 slots, tokens unlimited
    adm, left = admission.admit(queue(count), pool(1, 300, 50), limits)
    assert float(adm.readmitted.seqs) == 1.0 and float(left.seqs) == 0.0  # preempted first
    got = np.asarray(adm.admitted.count)
    assert got[0, 0] == 2.0 and got[1, 3] == 2.0  # class 0, then class 1's oldest
    assert got[1, 1] == 0.0 and got[2, 5] == 0.0  # no slot left for the younger or the lower class
    ahead = np.asarray(adm.ahead_tokens)
    assert ahead[1, 3] == pytest.approx(300.0 + 2 * 500.0)  # the preempted context and class 0's prompts


def test_the_token_cap_limits_admission_and_takes_a_prefix(task):
    limits = admission.Limits(F(100.0), F(1750.0), F(1.0), F(0.01), F(1.0))  # room for 3.5 prompts of 500
    count = np.zeros((3, 16), np.float32)
    count[1, :4] = 1.0
    adm, _ = admission.admit(queue(count), pool(0, 0, 0), limits)
    got = np.asarray(adm.admitted.count[1, :4])
    np.testing.assert_allclose(got, [0.5, 1.0, 1.0, 1.0], atol=1e-6)  # oldest (age 3) first
    assert float(jnp.sum(adm.admitted.prompt)) == pytest.approx(1750.0)


def test_prefill_time_leaves_the_rest_for_decode_unless_disaggregated(task):
    server, profile, _ = task
    count = np.zeros((3, 16), np.float32)
    count[1, 0] = 4.0
    adm = admission.Admission(queue(count), pool(0, 0, 0), jnp.zeros((3, 16)))
    limits = admission.Limits(F(10), F(1e9), F(1.0), F(0.01), F(1.0))
    mixed = admission.prefill(adm, idle_engine(server), limits, profile)
    t = float(perf_model.prefill_time(profile, 2000.0, 4.0, 4 * 500.0**2))
    assert float(mixed.tokens) == 2000.0 and float(mixed.decode_s) == pytest.approx(float(server.dt_s) - t, rel=1e-5)
    dedicated = admission.prefill(adm, idle_engine(server)._replace(disaggregated=jnp.asarray(True)), limits, profile)
    assert float(dedicated.decode_s) == float(server.dt_s)


def test_ttft_grows_by_one_interval_per_age(task):
    server, profile, _ = task
    count = np.zeros((3, 16), np.float32)
    count[1, 0], count[1, 2], count[1, 5] = 1.0, 1.0, 1.0
    q = queue(count)
    adm = admission.Admission(q, pool(0, 0, 0), jnp.zeros((3, 16)))
    p = admission.Prefill(F(1000.0), F(2.0), F(200.0), F(0.5), F(10000.0))
    limits = admission.Limits(F(10), F(1e9), F(1.0), F(0.01), F(1.0))
    ttft = latency.time_to_first_token(q, adm, p, idle_engine(server), limits, profile, server.dt_s)
    centre = np.asarray(ttft.centre_s[1])
    assert centre[5] - centre[2] == pytest.approx(3 * float(server.dt_s), rel=1e-5)
    assert centre[0] >= float(profile.request_overhead_s) + 500.0 / 10000.0 - 1e-6  # own prefill + overhead


def test_decode_conserves_tokens_and_sequences(task):
    server, profile, default = task
    before = pool(20, 20 * 800, 20 * 150)
    after, out = engine.decode(before, F(0.8), F(1.0), config(default, batch_size=32), profile, server.dt_s)
    assert float(out.generated + after.remaining) == pytest.approx(float(before.remaining), rel=1e-5)
    assert float(out.completed + after.seqs) == pytest.approx(float(before.seqs), rel=1e-5)
    step = float(perf_model.decode_step_time(profile, 20.0, 800.0))
    assert float(out.tpot_s) >= step * (1 - 1e-5)
    longer, more = engine.decode(before, F(1.0), F(1.0), config(default, batch_size=32), profile, server.dt_s)
    assert float(more.generated) > float(out.generated)


def test_out_of_memory_fails_everything_and_restarts(task):
    server, profile, _ = task
    eng = idle_engine(server)
    room = float((server.memory_limit_bytes - profile.weight_bytes - profile.reserve_bytes)
                 / profile.kv_bytes_per_token)
    ok, _, fine = engine.check_memory(pool(5, 0.5 * room, 100), pool(1, 10, 10), eng, profile, server)
    assert not bool(fine.oom) and float(ok.seqs) == 5.0 and float(fine.stall_s) == 0.0
    gone, left, oom = engine.check_memory(pool(5, 1.01 * room, 100), pool(1, 10, 10), eng, profile, server)
    assert bool(oom.oom) and float(oom.failed) == 6.0 and float(gone.seqs) == 0.0 and float(left.seqs) == 0.0
    assert float(oom.stall_s) == float(server.restart_s)


def test_the_queue_ages_and_its_oldest_time_out():
    count = np.arange(48, dtype=np.float32).reshape(3, 16)
    admitted = queue(np.zeros((3, 16)))
    aged, waiting, timeouts = admission.age_queue(queue(count), admitted)
    np.testing.assert_array_equal(aged.count[:, 1:], count[:, :-1])
    np.testing.assert_array_equal(aged.count[:, 0], 0.0)
    assert float(timeouts) == float(count[:, -1].sum())
    np.testing.assert_array_equal(waiting.count, count)


def test_latency_statistics_of_one_bin(task):
    server, _, _ = task
    count = np.zeros((3, 16), np.float32)
    count[1, 0] = 10.0
    admitted = queue(count)
    centre = jnp.full((3, 16), 1.0)
    half = jnp.full((3, 16), 0.2)
    stats = latency.latency_statistics(admitted, queue(np.zeros((3, 16))), latency.FirstToken(centre, half),
                                       F(0.01), server)
    assert float(stats.ttft_p50_s) == pytest.approx(1.0, rel=1e-5)
    assert float(stats.ttft_p99_s) == pytest.approx(0.8 + 0.99 * 0.4, rel=1e-5)
    assert float(stats.late) == 0.0 and float(stats.good_tokens) == pytest.approx(1000.0)  # class 1's SLO is 2 s
    late = latency.latency_statistics(admitted, queue(np.zeros((3, 16))), latency.FirstToken(centre * 3, half),
                                      F(0.01), server)
    assert float(late.late) == 10.0 and float(late.good_tokens) == 0.0


def test_a_busy_interval_conserves_requests(task):
    server, profile, default = task
    state = serving.initial_state(default, 16)
    arrivals = Arrivals(jnp.asarray([3.0, 9.0, 4.0]), jnp.asarray([1500.0, 4500.0, 2000.0]),
                        jnp.asarray([300.0, 900.0, 400.0]), jnp.asarray([1500.0 * 500, 4500.0 * 500, 2000.0 * 500]),
                        F(16.0))
    for _ in range(3):
        before = float(jnp.sum(state.queue.count))
        state, m = serving.serve_interval(state, arrivals, config(default, batch_size=8), server)
        after = float(jnp.sum(state.queue.count))
        assert before + 16.0 == pytest.approx(after + float(m.admitted) + float(m.timeouts), rel=1e-5)
        assert float(m.queue_depth) == pytest.approx(after, rel=1e-6)
