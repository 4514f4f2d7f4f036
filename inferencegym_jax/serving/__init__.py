"""One control interval of an LLM server: queue -> prefill -> decode -> completion.

The server is a fluid model of a continuous-batching engine (vLLM-style) with fixed shapes:
waiting requests by priority class and age (`types.Queue`, (3, A)), the decode batch and the
preempted sequences as pools (`types.Sequences`), counts real-valued (expected requests)
inside the model, arrivals integer. `serve_interval` runs the phases in order; each lives in
the module of its concept:

  engine.reconfigure        precision reloads, prefill-GPU start-up (stall, dropped KV cache)
  engine.preempt_to_fit     newest sequences preempted when the KV budget shrank
  admission.enqueue         this interval's arrivals at age 0
  admission.admission_limits free slots, free KV tokens, prefill capacity
  admission.admit           preempted first, then by class and age (head-of-line blocking)
  admission.prefill         the prefill pass and the time it leaves for decode
  latency.time_to_first_token  TTFT of each admitted queue bin
  engine.decode             decode steps and memoryless completions
  engine.preempt_to_fit     KV overflow from decode growth
  engine.check_memory       out of memory: every sequence fails, the engine restarts
  admission.age_queue       the admitted removed, the oldest timed out, the rest one older
  latency.latency_statistics  TTFT percentiles, SLO ratio, late requests, goodput
  goodput.*                 the running requests still meeting both SLOs ("completion" accounting)
  request_tpot.*            the good running requests by cohort, TPOT judged on each request's mean
                            ("request" accounting; no-ops otherwise), or with tpot_spread "bursts" on
                            each request's own (`tpot_spread`)

With `ServerParams.engine == "mixed"` (`serving.mixed`: prompt chunks in the decode iterations,
one forward each; fresh arrivals' TTFT from the iteration chain) the profile is the tier's with the
measured per-request overhead (mixed.mixed_profile) and four phases are replaced:
admission_limits by mixed.mixed_admission_limits, prefill by mixed.mixed_prefill, decode by
mixed.mixed_decode, and after time_to_first_token (kept for the older bins) come
mixed.mixed_first_token, goodput.admit_share_on_time and latency.shared_latency_statistics with
each bin's share of late requests. The fluid engine ("fluid", every v0/v1 task) is unchanged.

XLA:CPU speed tricks are in `inferencegym_jax.xla_ops`, guarded divisions in `numerics`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, overload

import jax.numpy as jnp

from inferencegym_jax import perf_model, xla_ops
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.admission import admission_limits, admit, age_queue, enqueue, prefill
from inferencegym_jax.serving.engine import Decode, Engine, Memory, check_memory, decode, preempt_to_fit, reconfigure
from inferencegym_jax.serving.goodput import admit_on_time, admit_share_on_time, decode_on_time, kept_share
from inferencegym_jax.serving.latency import (
    FirstToken,
    Latency,
    latency_statistics,
    shared_latency_statistics,
    time_to_first_token,
)
from inferencegym_jax.serving.mixed import (
    FreshTTFT,
    mixed_admission_limits,
    mixed_decode,
    mixed_first_token,
    mixed_prefill,
    mixed_profile,
)
from inferencegym_jax.serving.request_tpot import (
    admit_to_cohorts,
    cohorts_at_start,
    finished_by_cohort,
    interval_bursts,
    judge_cohorts,
    rescale_cohorts,
)
from inferencegym_jax.serving.types import (
    SLO_ACCOUNTINGS,
    IntervalMetrics,
    OnTime,
    Queue,
    Sequences,
    ServerParams,
    ServerState,
    initial_state,
    select_profile,
    zero_metrics,
)
from inferencegym_jax.traffic.workload import NUM_CLASSES, Arrivals

__all__ = [
    "SLO_ACCOUNTINGS",
    "IntervalMetrics",
    "OnTime",
    "Queue",
    "RequestLatency",
    "ServerParams",
    "ServerState",
    "Sequences",
    "initial_state",
    "select_profile",
    "serve_interval",
    "serve_interval_with_requests",
    "zero_metrics",
]


class RequestLatency(NamedTuple):
    """The TTFT distribution of the requests that got their first token in an interval: a mixture
    of uniform components (`requests` requests with TTFT uniform on [`low_s`, `high_s`]) and
    shifted-exponential ones (`exp_requests` requests with TTFT `exp_shift_s` + Exp(mean
    `exp_scale_s`)).

    Float32 arrays, one shape per kind, whatever the engine's components are: the fluid engine's
    uniforms are (3, A), one per admitted (class, age) queue bin (`latency.FirstToken`), and it has
    no exponential part (shape (1,), 0 requests); the mixed engine's exponentials are its fresh
    arrivals per (class, length node) (`serving.mixed`). A consumer flattens them
    (`inferencegym_jax.loadtest`). Components of 0 requests carry arbitrary parameters.

    Attributes:
      low_s: [s] lower end of each uniform component's TTFT (>= 0).
      high_s: [s] upper end (>= low_s; equal for a point mass).
      requests: [requests] requests in the uniform component (real-valued: expected requests).
      exp_shift_s: [s] the exponential components' smallest TTFT (>= 0).
      exp_scale_s: [s] their mean TTFT above the shift (> 0).
      exp_requests: [requests] requests in each exponential component.
      tpot_s: [s per token] the per-request TPOT of each group of good requests that finished in
        the interval, under "request" SLO accounting (`request_tpot.finished_by_cohort`: one per cohort);
        (1,) zeros otherwise.
      tpot_requests: [requests] finished good requests in each group.
    """

    low_s: jnp.ndarray
    high_s: jnp.ndarray
    requests: jnp.ndarray
    exp_shift_s: jnp.ndarray
    exp_scale_s: jnp.ndarray
    exp_requests: jnp.ndarray
    tpot_s: jnp.ndarray
    tpot_requests: jnp.ndarray


if TYPE_CHECKING:  # the two call shapes; the implementation below is the one module-level function of the name

    @overload
    def serve_interval(state: ServerState, arrivals: Arrivals, config: ServingAction, params: ServerParams,
                       *, with_requests: Literal[False] = False) -> tuple[ServerState, IntervalMetrics]: ...

    @overload
    def serve_interval(state: ServerState, arrivals: Arrivals, config: ServingAction, params: ServerParams,
                       *, with_requests: Literal[True]) -> tuple[ServerState, IntervalMetrics, RequestLatency]: ...


def serve_interval(
    state: ServerState, arrivals: Arrivals, config: ServingAction, params: ServerParams,
    *, with_requests: bool = False,
) -> tuple[ServerState, IntervalMetrics] | tuple[ServerState, IntervalMetrics, RequestLatency]:
    """Advance the server by one control interval of `params.dt_s` seconds (phases above).

    With `with_requests` (static), also the interval's `RequestLatency`; without it (the env's
    call) nothing of it is built, so the env's computation is the same program as before.
    """
    mixed = params.engine == "mixed"
    profile = select_profile(params.profiles, config.quant_tier)
    if mixed:
        profile = mixed_profile(profile)
    capacity = perf_model.kv_capacity_tokens(profile, config.kv_budget)
    engine, running, preempted, dropped = reconfigure(state, config, profile, params)
    before_shrink = running
    running, preempted, shrunk = preempt_to_fit(running, preempted, capacity)
    kept = kept_share(state.running, before_shrink) * kept_share(before_shrink, running)
    on_time = state.on_time.scaled(kept)
    cohorts = cohorts_at_start(state.tpot, kept, params)  # None unless "request" accounting
    queue = enqueue(state.queue, arrivals)
    if mixed:
        limits, it, law = mixed_admission_limits(running, preempted, queue, arrivals, engine, capacity, config,
                                                 profile, params)
    else:
        limits = admission_limits(running, preempted, queue, engine, capacity, config, profile, params)
    admission, preempted = admit(queue, preempted, limits)
    pass_ = mixed_prefill(admission, engine, it, law) if mixed else prefill(admission, engine, limits, profile)
    ttft = time_to_first_token(queue, admission, pass_, engine, limits, profile, params.dt_s)
    if mixed:
        fresh, ttft_late, binned = mixed_first_token(ttft, admission, law, it, engine, profile, params)
        on_time = admit_share_on_time(on_time, admission.admitted, admission.readmitted, 1.0 - ttft_late)
    else:
        on_time = admit_on_time(on_time, admission.admitted, admission.readmitted, ttft, params)
        binned = ttft
    on_time, cohorts = admit_to_cohorts(on_time, cohorts)
    re = admission.readmitted
    if mixed:
        new = Sequences(re.seqs + pass_.new_requests, pass_.tokens, re.remaining + pass_.new_output)
        before_decode = running + new
        running, produced = mixed_decode(running, new, jnp.sum(admission.admitted.count[:, 0]), pass_.decode_s,
                                         it.step_s, limits.tokens_per_step, config, profile, params.dt_s)
    else:
        before_decode = Sequences(running.seqs + re.seqs + pass_.new_requests, running.context + pass_.tokens,
                                  running.remaining + re.remaining + pass_.new_output)
        running, produced = decode(before_decode, pass_.decode_s, limits.tokens_per_step, config, profile,
                                   params.dt_s)
    on_time, good = decode_on_time(on_time, before_decode, running, produced.tpot_s, params)
    # the finished good requests' per-request TPOT, for `with_requests` (else unused: XLA drops it)
    tpot_law = finished_by_cohort(cohorts, before_decode, running, produced.tpot_s, params)
    bursts = interval_bursts(arrivals, it if mixed else None, params)  # None unless tpot_spread "bursts"
    cohorts, good = judge_cohorts(cohorts, good, before_decode, running, produced.tpot_s, params, bursts)
    before_overflow = running
    running, preempted, overflow = preempt_to_fit(running, preempted, capacity)
    running, preempted, memory = check_memory(running, preempted, engine, profile, params)
    kept = kept_share(before_overflow, running)
    on_time = on_time.scaled(kept)
    cohorts = rescale_cohorts(cohorts, kept)
    next_queue, waiting, timeouts = age_queue(queue, admission.admitted)
    if mixed:
        late = jnp.where((produced.tpot_s > params.tpot_slo_s)[:, None], 1.0, ttft_late)
        latency = shared_latency_statistics(admission.admitted, waiting, binned, late, params)
    else:
        latency = latency_statistics(admission.admitted, waiting, ttft, produced.tpot_s, params)
    if params.slo_accounting == "admission":
        on_time = state.on_time  # not tracked: zeros
        outcome = SloOutcome(pass_.new_requests, latency.late, latency.good_tokens)
    else:
        outcome = SloOutcome(produced.completed, good.missed, good.good_tokens)
    next_state = ServerState(next_queue, running, preempted, memory.stall_s, engine.prefill_warmup_s, config,
                             jnp.ones((), bool), on_time, cohorts)
    metrics = interval_metrics(
        next_state, arrivals, engine, pass_.tokens, pass_.new_requests, produced, memory, latency, outcome,
        timeouts, dropped + shrunk + overflow, capacity, limits.tokens_per_step, config, profile, params,
    )
    if not with_requests:
        return next_state, metrics
    return next_state, metrics, request_latency(ttft, admission.admitted.count, fresh if mixed else None, tpot_law)


def request_latency(ttft: FirstToken, admitted: jnp.ndarray, fresh: FreshTTFT | None,
                    tpot_law: tuple[jnp.ndarray, jnp.ndarray]) -> RequestLatency:
    """The interval's `RequestLatency`: the per-bin uniforms of the `admitted` (3, A) requests, the
    fresh bin (age 0) as `fresh`'s exponentials when the mixed engine gives them, and `tpot_law`
    (`request_tpot.finished_by_cohort`: each cohort's mean TPOT and finished good requests)."""
    low = jnp.maximum(ttft.centre_s - ttft.half_width_s, 0.0)
    high = jnp.maximum(ttft.centre_s + ttft.half_width_s, low)
    if fresh is None:
        none = jnp.zeros((1,), jnp.float32)
        return RequestLatency(low, high, admitted, none, none + 1.0, none, *tpot_law)
    aged = jnp.where(jnp.arange(admitted.shape[1]) < 1, 0.0, admitted)
    return RequestLatency(low, high, aged, fresh.shift_s, fresh.scale_s, fresh.requests, *tpot_law)


def serve_interval_with_requests(
    state: ServerState, arrivals: Arrivals, config: ServingAction, params: ServerParams
) -> tuple[ServerState, IntervalMetrics, RequestLatency]:
    """`serve_interval` and the TTFT mixture of the requests whose first token came in the
    interval (`RequestLatency`), for request-level statistics (`inferencegym_jax.loadtest`)."""
    return serve_interval(state, arrivals, config, params, with_requests=True)


class SloOutcome(NamedTuple):
    """The requests whose SLO outcome the interval decided (`ServerParams.slo_accounting`);
    float32 scalars.

    Attributes:
      judged: [requests] admitted ("admission") or finished ("completion") in the interval.
      missed: [requests] of them that missed an SLO.
      good_tokens: [tokens] the interval's goodput.
    """

    judged: jnp.ndarray
    missed: jnp.ndarray
    good_tokens: jnp.ndarray


def interval_metrics(
    next_state: ServerState, arrivals: Arrivals, engine: Engine, prefill_tokens: jnp.ndarray,
    admitted: jnp.ndarray, produced: Decode, memory: Memory, latency: Latency, outcome: SloOutcome,
    timeouts: jnp.ndarray,
    evicted: jnp.ndarray, capacity: jnp.ndarray, tokens_per_step: jnp.ndarray, config: ServingAction,
    profile: perf_model.Profile, params: ServerParams,
) -> IntervalMetrics:
    """The interval's `IntervalMetrics` from the phases' results."""
    dt = params.dt_s
    violations = outcome.missed + timeouts + memory.failed
    decided = outcome.judged + timeouts + memory.failed
    waiting_n = jnp.sum(next_state.queue.count, axis=1)  # (3,)
    queue_depth = xla_ops.class_sum(waiting_n)
    share_n = waiting_n + arrivals.count
    class_share = jnp.where(
        jnp.sum(share_n) > EPS, share_n / jnp.maximum(jnp.sum(share_n), EPS), 1.0 / NUM_CLASSES
    )
    generated_rate = produced.generated / dt
    return IntervalMetrics(
        ttft_p50_s=latency.ttft_p50_s,
        ttft_p99_s=latency.ttft_p99_s,
        ttft_slo_ratio=latency.ttft_slo_ratio,
        tpot_s=produced.tpot_s,
        output_tokens=produced.generated,
        good_tokens=outcome.good_tokens,
        tokens_per_s=generated_rate,
        quality_tokens_per_s=generated_rate * (1.0 - profile.quality_loss),
        prefill_tokens=prefill_tokens,
        admitted=admitted,
        completed=produced.completed,
        slo_violations=violations,
        slo_violation_rate=jnp.clip(safe_div(violations, decided), 0.0, 1.0),
        timeouts=timeouts,
        failed=memory.failed,
        evictions=evicted,
        oom=memory.oom.astype(jnp.float32),
        gpu_memory_bytes=memory.used_bytes,
        kv_capacity_tokens=capacity,
        kv_occupancy=jnp.clip(safe_div(next_state.running.context, capacity), 0.0, 1.0),
        spec_acceptance=safe_div(tokens_per_step - 1.0, config.spec_length),
        num_gpus=engine.num_gpus,
        cost_usd=engine.num_gpus * profile.price_per_hour * dt / 3600.0,
        stall_s=engine.busy_s,
        queue_depth=queue_depth,
        queue_mean_prompt=safe_div(jnp.sum(next_state.queue.prompt), queue_depth),
        class_share=class_share,
    )
