"""One control interval of the server in NumPy (serving.serve_interval), for N envs at once.

The phases in order, each the function of the same name in this package (and in serving):

  engine.reconfigure          precision reloads, prefill-GPU start-up
  engine.preempt_to_fit       newest sequences preempted when the KV budget shrank
  admission.enqueue           this interval's arrivals at age 0
  admission.admission_limits  free slots, free KV tokens, prefill room
  admission.admit             preempted first, then by class and age
  admission.prefill           the prefill pass and the time it leaves for decode
  latency.time_to_first_token TTFT of each admitted queue bin
  engine.decode               decode steps and memoryless completions
  engine.preempt_to_fit       KV overflow from decode growth
  engine.check_memory         out of memory: every sequence fails, the engine restarts
  admission.age_queue         the admitted removed, the oldest timed out, the rest one older
  latency.latency_statistics  TTFT percentiles, SLO ratio, late requests, goodput
  goodput.*                   the running requests still meeting both SLOs ("completion" accounting; by
                              cohort under "request")

The mixed engine (params.engine "mixed", module `mixed`) runs on the profile with the measured
per-request overhead (mixed_profile) and replaces four phases: admission_limits by
mixed_admission_limits, prefill by mixed_prefill, decode by mixed_decode, and after
time_to_first_token (kept for the older bins) mixed_first_token gives the fresh bin's law and
every bin's late share, which goodput.admit_share_on_time and latency.shared_latency_statistics
take.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.serving import IntervalMetrics, Sequences, ServerState
from inferencegym_jax.testing.reference import goodput, mixed, roofline
from inferencegym_jax.testing.reference.admission import admission_limits, admit, age_queue, enqueue, prefill
from inferencegym_jax.testing.reference.arrays import add_pools, per_env, safe_div
from inferencegym_jax.testing.reference.constants import EPS, F32, NUM_CLASSES, SECONDS_PER_HOUR
from inferencegym_jax.testing.reference.engine import (
    Decode,
    Engine,
    Memory,
    check_memory,
    decode,
    preempt_to_fit,
    reconfigure,
)
from inferencegym_jax.testing.reference.latency import (
    Latency,
    latency_statistics,
    shared_latency_statistics,
    time_to_first_token,
)
from inferencegym_jax.traffic.workload import Arrivals


def serve_interval(
    state: ServerState, arrivals: Arrivals, config: Any, params: Any
) -> tuple[ServerState, IntervalMetrics]:
    """Advance N servers by one interval of params.dt_s seconds (serving.serve_interval; the
    phases above, the mixed engine's where params.engine is "mixed"). `config` is the applied
    ServingAction, (N,) leaves."""
    is_mixed = params.engine == "mixed"
    profile = roofline.select_profile(params.profiles, config.quant_tier)
    if is_mixed:
        profile = mixed.mixed_profile(profile)
    capacity = roofline.kv_capacity_tokens(profile, config.kv_budget)
    engine, running, preempted, dropped = reconfigure(state, config, profile, params)
    running, preempted, shrunk = preempt_to_fit(running, preempted, capacity)
    kept = goodput.surviving(state.running, running)
    on_time = goodput.scale(state.on_time, kept)
    request = params.slo_accounting == "request"
    cohorts = goodput.scale_cohorts(goodput.age_cohorts(state.tpot), kept) if request else None
    queue = enqueue(state.queue, arrivals)
    if is_mixed:
        limits, it, law = mixed.mixed_admission_limits(running, preempted, queue, arrivals, engine, capacity, config,
                                                       profile, params)
    else:
        limits = admission_limits(running, preempted, queue, engine, capacity, config, profile, params)
    admission, preempted = admit(queue, preempted, limits)
    pass_ = mixed.mixed_prefill(admission, engine, it, law) if is_mixed else prefill(admission, engine, limits, profile)
    ttft = time_to_first_token(queue, admission, pass_, engine, limits, profile, params.dt_s)
    re = admission.readmitted
    if is_mixed:
        _, ttft_late, binned = mixed.mixed_first_token(ttft, admission, law, it, engine, profile, params)
        on_time = goodput.admit_share_on_time(on_time, admission.admitted, re.seqs, 1.0 - ttft_late)
        new = Sequences(re.seqs + pass_.new_requests, pass_.tokens, re.remaining + pass_.new_output)
        decoding = add_pools(running, new)
        fresh = np.sum(admission.admitted.count[:, :, 0], axis=1)
        running, produced = mixed.mixed_decode(running, new, fresh, pass_.decode_s, it.step_s, limits.tokens_per_step,
                                               config, profile, params.dt_s)
    else:
        decoding = Sequences(running.seqs + re.seqs + pass_.new_requests, running.context + pass_.tokens,
                             running.remaining + re.remaining + pass_.new_output)
        on_time = goodput.admit_on_time(on_time, admission.admitted, re.seqs, ttft.centre_s, params)
        running, produced = decode(decoding, pass_.decode_s, limits.tokens_per_step, config, profile, params.dt_s)
    if request:
        on_time, cohorts = goodput.admit_cohorts(on_time, cohorts)
    on_time, good_tokens, _, late_done = goodput.decode_on_time(on_time, decoding, running, produced.tpot_s, params)
    if request:
        cohorts, cohort_tokens, _, cohort_late = goodput.decode_cohorts(cohorts, decoding, running, produced.tpot_s,
                                                                        params)
        good_tokens, late_done = good_tokens + cohort_tokens, late_done + cohort_late
    decoded = running
    running, preempted, overflow = preempt_to_fit(running, preempted, capacity)
    running, preempted, memory = check_memory(running, preempted, engine, profile, params)
    on_time = goodput.scale(on_time, goodput.surviving(decoded, running))
    if request:
        cohorts = goodput.scale_cohorts(cohorts, goodput.surviving(decoded, running))
    next_queue, waiting, timeouts = age_queue(queue, admission.admitted)
    if is_mixed:  # a bin's late share: its TTFT CDF's, all of it while TPOT is past its SLO
        late = np.where(per_env(produced.tpot_s) > params.tpot_slo_s[None, :, None], F32(1.0), ttft_late)
        latency = shared_latency_statistics(admission.admitted, waiting, binned, late, params)
    else:
        latency = latency_statistics(admission.admitted, waiting, ttft, produced.tpot_s, params)
    if params.slo_accounting == "admission":  # decided at admission, the good pool untracked
        on_time, judged, missed, good = state.on_time, pass_.new_requests, latency.late, latency.good_tokens
    else:  # decided at completion
        judged, missed, good = produced.completed, late_done, good_tokens
    next_state = ServerState(next_queue, running, preempted, memory.stall_s.astype(F32), engine.prefill_warmup_s,
                             config, np.ones_like(state.started), on_time, cohorts)
    metrics = interval_metrics(
        next_state, arrivals, engine, pass_.tokens, pass_.new_requests, judged, missed, good, produced, memory,
        latency, timeouts, dropped + shrunk + overflow, capacity, limits.tokens_per_step, config, profile, params,
    )
    return next_state, metrics


def interval_metrics(
    next_state: ServerState, arrivals: Arrivals, engine: Engine, prefill_tokens: np.ndarray, admitted: np.ndarray,
    judged: np.ndarray, missed: np.ndarray, good_tokens: np.ndarray, produced: Decode, memory: Memory,
    latency: Latency, timeouts: np.ndarray, evicted: np.ndarray, capacity: np.ndarray, tokens_per_step: np.ndarray,
    config: Any, profile: Any, params: Any,
) -> IntervalMetrics:
    """The interval's IntervalMetrics from the phases' results (serving.interval_metrics)."""
    dt = params.dt_s
    violations = missed + timeouts + memory.failed
    decided = judged + timeouts + memory.failed
    waiting_n = np.sum(next_state.queue.count, axis=2)  # (N, 3)
    queue_depth = np.sum(waiting_n, axis=1)
    share_n = waiting_n + arrivals.count
    share_total = np.sum(share_n, axis=1, keepdims=True)
    class_share = np.where(share_total > EPS, share_n / np.maximum(share_total, EPS), F32(1.0 / NUM_CLASSES))
    generated_rate = produced.generated / dt

    def f32(x: Any) -> np.ndarray:
        return np.asarray(x).astype(F32)

    return IntervalMetrics(
        ttft_p50_s=latency.ttft_p50_s,
        ttft_p99_s=latency.ttft_p99_s,
        ttft_slo_ratio=latency.ttft_slo_ratio,
        tpot_s=produced.tpot_s,
        output_tokens=produced.generated,
        good_tokens=f32(good_tokens),
        tokens_per_s=f32(generated_rate),
        quality_tokens_per_s=f32(generated_rate * (1.0 - profile.quality_loss)),
        prefill_tokens=prefill_tokens,
        admitted=f32(admitted),
        completed=produced.completed,
        slo_violations=f32(violations),
        slo_violation_rate=f32(np.clip(safe_div(violations, decided), 0.0, 1.0)),
        timeouts=f32(timeouts),
        failed=f32(memory.failed),
        evictions=f32(evicted),
        oom=f32(memory.oom),
        gpu_memory_bytes=f32(memory.used_bytes),
        kv_capacity_tokens=capacity,
        kv_occupancy=f32(np.clip(safe_div(next_state.running.context, capacity), 0.0, 1.0)),
        spec_acceptance=safe_div(tokens_per_step - 1.0, config.spec_length),
        num_gpus=f32(engine.num_gpus),
        cost_usd=f32(engine.num_gpus * profile.price_per_hour * dt / SECONDS_PER_HOUR),
        stall_s=f32(engine.busy_s),
        queue_depth=f32(queue_depth),
        queue_mean_prompt=safe_div(np.sum(next_state.queue.prompt, axis=(1, 2)), queue_depth),
        class_share=f32(class_share),
    )
