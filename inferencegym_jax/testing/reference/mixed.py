"""The mixed engine's phases in NumPy (serving.mixed), for N envs at once.

Prompt chunks ride beside the decodes in one forward per iteration (`iteration`), so prefilling
costs the interval the chunks' added time, not a pass of its own; admission refills the slots
expected to free during the interval; fresh arrivals' TTFT is a shifted exponential per (class,
length node) from the iteration chain (`fresh_ttft`) behind the older work admitted ahead of
them; each bin's share of requests past the TTFT SLO comes from its CDF; decode runs at the
pool's mean over the interval, the admitted decoding from their admission; the per-request
overhead is MEASURED_REQUEST_OVERHEAD_S.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.serving import Queue, Sequences
from inferencegym_jax.testing.reference import roofline
from inferencegym_jax.testing.reference.admission import Admission, Limits, Prefill
from inferencegym_jax.testing.reference.arrays import per_env, safe_div
from inferencegym_jax.testing.reference.constants import EPS, F32, MEASURED_REQUEST_OVERHEAD_S, PRESENCE_SERIES_BELOW
from inferencegym_jax.testing.reference.engine import Decode, emit, interval_tpot
from inferencegym_jax.testing.reference.fresh_ttft import FreshLaw, backlog_wait, exponential_parts, fresh_law
from inferencegym_jax.testing.reference.iteration import Iterations, chunks, iterations, prefill_cost_s
from inferencegym_jax.testing.reference.latency import FirstToken
from inferencegym_jax.testing.reference.traffic import length_strata
from inferencegym_jax.traffic.workload import Arrivals


def mixed_profile(profile: Any) -> Any:
    """The profile with the measured per-request overhead (serving.mixed.mixed_profile)."""
    return dataclasses.replace(profile, request_overhead_s=np.full_like(profile.request_overhead_s,
                                                                        MEASURED_REQUEST_OVERHEAD_S))


def arrivals_law(arrivals: Arrivals, it: Iterations, dt: Any) -> FreshLaw:
    """The fresh arrivals' TTFT law, their strata from the bins' own sums where the arrivals carry
    none (serving.mixed.arrivals_law)."""
    strata = np.asarray(arrivals.prompt_strata) if arrivals.prompt_strata is not None else length_strata(
        safe_div(arrivals.prompt_tokens, arrivals.count), safe_div(arrivals.prompt_sq_tokens, arrivals.count))
    return fresh_law(it, arrivals.count, arrivals.prompt_tokens, strata, dt)


def pool_iterations(running: Sequences, config: Any, engine: Any, profile: Any, params: Any) -> Iterations:
    """The iteration model of the pool decoding at the interval's start (serving.mixed.pool_iterations)."""
    pool = np.minimum(running.seqs, config.batch_size)
    return iterations(profile, pool, safe_div(running.context, running.seqs), config.spec_length,
                      params.max_batched_tokens, engine.disaggregated)


def mixed_limits(running: Sequences, preempted: Sequences, queue: Queue, engine: Any, capacity: np.ndarray,
                 it: Iterations, config: Any, profile: Any, params: Any) -> Limits:
    """Free slots, free KV tokens and what full iterations prefill (serving.mixed.mixed_limits).

    Slots: B - running + F, F the sequences expected to finish, F = B (1 - e^-y0) / (1 + B k e^-y0)
    (one Newton step of F = B (1 - exp(-(y0 - k F)))): y0 the completions per sequence in the time
    left after prefilling the slots free at the start, k what each further admission's prompt
    costs of it."""
    tps = roofline.tokens_per_step(profile, config.spec_length)
    waiting = np.sum(queue.count, axis=(1, 2)) + preempted.seqs
    mean_prompt = safe_div(np.sum(queue.prompt, axis=(1, 2)) + preempted.context, waiting)
    prompt_s = np.where(engine.disaggregated, F32(0.0), mean_prompt * it.token_s)  # [s] one admission's prefill
    mean_remaining = np.maximum(safe_div(running.remaining, running.seqs), F32(1.0))
    free = np.minimum(np.maximum(config.batch_size - running.seqs, F32(0.0)), waiting)
    per_second = tps / (it.step_s * mean_remaining)  # completions per sequence per second of decode
    y0 = np.maximum(engine.serving_s - free * prompt_s, F32(0.0)) * per_second
    k = prompt_s * per_second
    done = -np.expm1(-y0)
    finishing = running.seqs * done / (1.0 + running.seqs * k * (1.0 - done))
    slots = np.maximum(config.batch_size - running.seqs + finishing, F32(0.0))
    kv_free = np.maximum(capacity * (1.0 - params.kv_watermark) - running.context, F32(0.0))
    token_cap = np.minimum(kv_free, engine.serving_s * it.prefill_rate)
    return Limits(slots.astype(F32), token_cap.astype(F32), it.prefill_share, it.decode_s, tps)


def mixed_admission_limits(running: Sequences, preempted: Sequences, queue: Queue, arrivals: Arrivals, engine: Any,
                           capacity: np.ndarray, config: Any, profile: Any,
                           params: Any) -> tuple[Limits, Iterations, FreshLaw]:
    """The admission limits, the iteration model and the arrivals' TTFT law
    (serving.mixed.mixed_admission_limits)."""
    it = pool_iterations(running, config, engine, profile, params)
    law = arrivals_law(arrivals, it, params.dt_s)
    return mixed_limits(running, preempted, queue, engine, capacity, it, config, profile, params), it, law


def mixed_prefill(admission: Admission, engine: Any, it: Iterations, law: FreshLaw) -> Prefill:
    """The admitted prompts and recomputed contexts prefilled in the interval's iterations
    (serving.mixed.mixed_prefill): their chunks land in serving_s / E[M] iterations at random,
    occupying N (1 - exp(-chunks / N)) of the N, at least tokens / chunk."""
    a, re = admission.admitted, admission.readmitted
    admitted_n, admitted_p, admitted_o, admitted_sq = (np.sum(x, axis=(1, 2)) for x in
                                                       (a.count, a.prompt, a.output, a.prompt_sq))
    tokens = re.context + admitted_p
    sum_sq = re.context * safe_div(re.context, re.seqs) + admitted_sq
    prompt_chunks = (np.sum(a.count * chunks(it, safe_div(a.prompt, a.count)), axis=(1, 2))
                     + re.seqs * chunks(it, safe_div(re.context, re.seqs)))
    slots_n = engine.serving_s / np.maximum(law.iteration_s, EPS)
    carrying = slots_n * -np.expm1(-safe_div(prompt_chunks, slots_n))
    cost_s = prefill_cost_s(it, tokens, sum_sq, carrying)
    decode_s = np.where(engine.disaggregated, engine.serving_s, np.maximum(engine.serving_s - cost_s, F32(0.0)))
    return Prefill(tokens.astype(F32), admitted_n, admitted_o, decode_s.astype(F32),
                   np.maximum(it.prefill_rate, EPS))


class FreshTTFT(NamedTuple):
    """TTFT of the requests admitted in the interval they arrived in, a shifted exponential per
    (class, length node) (serving.mixed.FreshTTFT); (N, 3, 5) float32.

    Attributes:
      shift_s: [s] smallest TTFT.
      scale_s: [s] mean above the shift.
      requests: [requests] admitted at the node.
      prompt: [tokens] the node's prompt length.
    """

    shift_s: np.ndarray
    scale_s: np.ndarray
    requests: np.ndarray
    prompt: np.ndarray


def fresh_first_token(law: FreshLaw, admission: Admission, it: Iterations, engine: Any, profile: Any,
                      dt: Any) -> FreshTTFT:
    """The fresh admitted requests' law (serving.mixed.fresh_first_token): the chain's wait, the
    older work admitted ahead of them (not the fresh of earlier classes, already in the chain), the
    stall, the KV transfer and the per-request overhead."""
    fresh_prompt = admission.admitted.prompt[:, :, 0]  # (N, 3)
    fresh_earlier = np.concatenate([np.zeros_like(fresh_prompt[:, :1]), np.cumsum(fresh_prompt, axis=1)[:, :-1]],
                                   axis=1)  # the fresh prompts of the earlier classes
    ahead_s = np.maximum(admission.ahead_tokens[:, :, 0] - fresh_earlier, F32(0.0)) / np.maximum(
        it.prefill_rate, EPS)[:, None]
    w1, w2 = backlog_wait(ahead_s, dt)
    mean = law.wait_mean_s + w1[:, :, None]
    var = law.wait_var_s2 + np.maximum(w2 - w1**2, F32(0.0))[:, :, None]
    shift, scale = exponential_parts(mean, var)
    link_s = law.prompt * per_env(profile.kv_bytes_per_token) / per_env(profile.kv_link_bw)
    transfer = np.where(per_env(engine.disaggregated), link_s, F32(0.0))
    fixed = per_env(engine.busy_s) + transfer + per_env(profile.request_overhead_s)
    requests = admission.admitted.count[:, :, 0:1] * law.node_weight
    return FreshTTFT((shift + law.service_s + fixed).astype(F32), scale.astype(F32), requests.astype(F32), law.prompt)


def with_fresh(ttft: FirstToken, fresh: FreshTTFT) -> FirstToken:
    """The per-bin uniforms with the fresh bin (age 0) a uniform of the fresh mixture's mean and
    standard deviation per class, its half-width at most the mean (serving.mixed.with_fresh)."""
    node_mean = fresh.shift_s + fresh.scale_s
    n = np.sum(fresh.requests, axis=2)
    mean = safe_div(np.sum(fresh.requests * node_mean, axis=2), n)
    second = safe_div(np.sum(fresh.requests * (node_mean**2 + fresh.scale_s**2), axis=2), n)
    half = np.sqrt(3.0 * np.maximum(second - mean**2, F32(0.0)))
    centre, half_width = ttft.centre_s.copy(), ttft.half_width_s.copy()
    centre[:, :, 0], half_width[:, :, 0] = mean, np.minimum(half, mean)
    return FirstToken(centre, half_width)


def aged_late_share(ttft: FirstToken, slo_s: np.ndarray, dt: Any) -> np.ndarray:
    """Share of each bin's uniform TTFT (dt wide for the bins of age >= 1) past its class's SLO
    `slo_s` (N, 3, 1) [s], (N, 3, A): (centre + dt / 2 - SLO) / dt within [0, 1]
    (serving.mixed.aged_late_share)."""
    return np.clip((ttft.centre_s + 0.5 * dt - slo_s) / dt, 0.0, 1.0).astype(F32)


def late_share(ttft: FirstToken, fresh: FreshTTFT, admitted: Queue, params: Any) -> np.ndarray:
    """Share of each (class, age) bin's admitted requests past their class's TTFT SLO, (N, 3, A)
    (serving.mixed.late_share): the fresh bin (age 0) by its nodes' exponential tails,
    exp(-(SLO - shift) / scale) above the shift; the older bins by `aged_late_share`."""
    slo = params.ttft_slo_s[None, :, None]
    past = np.exp(-np.maximum(slo - fresh.shift_s, F32(0.0)) / fresh.scale_s)
    share = aged_late_share(ttft, slo, params.dt_s)
    share[:, :, 0] = safe_div(np.sum(fresh.requests * past, axis=2), admitted.count[:, :, 0])
    return share


def mixed_first_token(ttft: FirstToken, admission: Admission, law: FreshLaw, it: Iterations, engine: Any,
                      profile: Any, params: Any) -> tuple[FreshTTFT, np.ndarray, FirstToken]:
    """The fresh requests' law, each bin's late share and the per-bin uniforms with the fresh bin's
    (serving.mixed.mixed_first_token)."""
    fresh = fresh_first_token(law, admission, it, engine, profile, params.dt_s)
    return fresh, late_share(ttft, fresh, admission.admitted, params), with_fresh(ttft, fresh)


def mean_presence(hazard: np.ndarray) -> np.ndarray:
    """Mean share of a span that a sequence with memoryless completions at total `hazard` over it is
    still running, (1 - exp(-hazard)) / hazard; 1 - hazard / 2 below PRESENCE_SERIES_BELOW."""
    return np.where(hazard > PRESENCE_SERIES_BELOW, -np.expm1(-hazard) / np.maximum(hazard, PRESENCE_SERIES_BELOW),
                    1.0 - 0.5 * hazard).astype(F32)


def mixed_decode(old: Sequences, new: Sequences, fresh: np.ndarray, decode_s: np.ndarray, first_step_s: np.ndarray,
                 tokens_per_step: np.ndarray, config: Any, profile: Any, dt: Any) -> tuple[Sequences, Decode]:
    """Decode for `decode_s` (N,) [s] at the pool's mean (serving.mixed.mixed_decode): the `old`
    sequences from the start, the `new` that waited and fit the slots free at the start too, the
    rest (the `fresh` arrivals among them) half the interval on average; the pool's mean from the
    completions at the first step's pace (`first_step_s`), its step the interval's."""
    at_start = np.minimum(np.maximum(new.seqs - fresh, F32(0.0)), np.maximum(config.batch_size - old.seqs, F32(0.0)))
    present_new = np.where(new.seqs > EPS, safe_div(at_start + 0.5 * (new.seqs - at_start), new.seqs), F32(1.0))
    context = safe_div(old.context + new.context, old.seqs + new.seqs)
    mean_remaining = np.maximum(safe_div(old.remaining + new.remaining, old.seqs + new.seqs), F32(1.0))
    hazard = (decode_s / first_step_s) * tokens_per_step / mean_remaining  # completions per sequence
    pool = old.seqs * mean_presence(hazard) + present_new * new.seqs * mean_presence(present_new * hazard)
    concurrent = np.minimum(pool, config.batch_size)
    step_s = roofline.decode_step_time(profile, np.maximum(concurrent, F32(1.0)), context, config.spec_length)
    tokens_per_seq = (decode_s / step_s) * tokens_per_step * safe_div(concurrent, pool)
    old_after, old_generated, old_completed = emit(old, tokens_per_seq)
    new_after, new_generated, new_completed = emit(new, present_new * tokens_per_seq)
    after = Sequences(old_after.seqs + new_after.seqs, old_after.context + new_after.context,
                      old_after.remaining + new_after.remaining)
    completed = old_completed + new_completed
    tpot = interval_tpot(after, completed, tokens_per_seq, step_s, tokens_per_step, dt)
    return after, Decode((old_generated + new_generated).astype(F32), completed.astype(F32), tpot)
