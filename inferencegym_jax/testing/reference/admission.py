"""From the queue into the batch in NumPy (serving.admission): arrivals, admission limits,
admission order, prefill and queue ageing, for N envs at once.

Admission takes the preempted sequences first, then class 0, 1, 2, oldest first within a class,
each queue bin up to the sequence slots and prompt tokens left after the bins ahead of it
(head-of-line blocking). Slots: batch_size minus the running sequences plus those expected to
finish. Tokens: the free KV tokens above a watermark, and the prefill the interval has room for
(all of it on a ready prefill GPU or an idle engine; else the chunk a mixed engine step carries,
max_batched_tokens minus the decode tokens, as a share of the step).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.serving import Queue, Sequences
from inferencegym_jax.testing.reference import roofline
from inferencegym_jax.testing.reference.arrays import (
    per_env,
    safe_div,
    scale_pool,
    scale_queue,
    subtract_pools,
    subtract_queues,
)
from inferencegym_jax.testing.reference.constants import EPS, F32
from inferencegym_jax.traffic.workload import Arrivals


def enqueue(queue: Queue, arrivals: Arrivals) -> Queue:
    """The queue with this interval's arrivals (N, 3) added at age 0 (serving.admission.enqueue)."""

    def at_age_zero(bins: np.ndarray, new: np.ndarray) -> np.ndarray:
        out = bins.copy()
        out[:, :, 0] += new
        return out

    return Queue(
        count=at_age_zero(queue.count, arrivals.count),
        prompt=at_age_zero(queue.prompt, arrivals.prompt_tokens),
        output=at_age_zero(queue.output, arrivals.output_tokens),
        prompt_sq=at_age_zero(queue.prompt_sq, arrivals.prompt_sq_tokens),
    )


class Limits(NamedTuple):
    """What admission may take (serving.admission.Limits); (N,) float32.

    Attributes:
      slots: [sequences] free batch slots, counting those expected to finish.
      token_cap: [tokens] prompt tokens that fit: min(free KV tokens, prefill room).
      prefill_share: fraction of engine time prefill may take.
      step_estimate_s: [s] a decode step of the batch admission expects.
      tokens_per_step: [tokens] emitted per sequence per decode step.
    """

    slots: np.ndarray
    token_cap: np.ndarray
    prefill_share: np.ndarray
    step_estimate_s: np.ndarray
    tokens_per_step: np.ndarray


def admission_limits(
    running: Sequences, preempted: Sequences, queue: Queue, engine: Any, capacity: np.ndarray, config: Any,
    profile: Any, params: Any,
) -> Limits:
    """Free slots, free KV tokens and prefill room of the interval (serving.admission.admission_limits)."""
    batch, spec = config.batch_size, config.spec_length
    tps = roofline.tokens_per_step(profile, spec)
    waiting = np.sum(queue.count, axis=(1, 2))
    decode_batch = np.maximum(np.minimum(running.seqs + waiting + preempted.seqs, batch), F32(1.0))
    step_estimate = roofline.decode_step_time(profile, decode_batch, safe_div(running.context, running.seqs), spec)
    mean_remaining = np.maximum(safe_div(running.remaining, running.seqs), F32(1.0))
    emitted = (engine.serving_s / step_estimate) * tps  # per sequence, if the whole interval decodes
    finishing = running.seqs * -np.expm1(-emitted / mean_remaining)
    slots = np.maximum(batch - running.seqs + finishing, F32(0.0))
    kv_free = np.maximum(capacity * (1.0 - params.kv_watermark) - running.context, F32(0.0))
    prefill_rate = roofline.prefill_throughput(profile)
    chunk_tokens = np.maximum(params.max_batched_tokens - decode_batch * (spec + 1.0), F32(0.0))
    chunk_s = chunk_tokens / prefill_rate
    alone = engine.disaggregated | (running.seqs < EPS)
    share = np.where(alone, F32(1.0), chunk_s / (chunk_s + step_estimate))
    token_cap = np.minimum(kv_free, engine.serving_s * share * prefill_rate)
    return Limits(slots.astype(F32), token_cap.astype(F32), share.astype(F32), step_estimate, tps)


def admitted_fraction(
    count: np.ndarray, prompt: np.ndarray, room_seqs: np.ndarray, room_tokens: np.ndarray
) -> np.ndarray:
    """Fraction of each bin admitted (serving.admission.admitted_fraction): the smaller of
    room_seqs / count and room_tokens / prompt, each clipped to [0, 1]; 0 for an empty bin, no
    token limit for a bin without tokens."""
    by_seqs = np.clip(room_seqs / np.maximum(count, EPS), 0.0, 1.0)
    by_tokens = np.where(prompt > EPS, np.clip(room_tokens / np.maximum(prompt, EPS), 0.0, 1.0), F32(1.0))
    return np.where(count > EPS, np.minimum(by_seqs, by_tokens), F32(0.0)).astype(F32)


class Admission(NamedTuple):
    """Who enters the batch (serving.admission.Admission).

    Attributes:
      admitted: Queue, (N, 3, A) leaves: the part of each bin admitted.
      readmitted: Sequences taken back from the preempted pool, (N,) leaves.
      ahead_tokens: (N, 3, A) [tokens] of prompt ahead of each bin in the admission order.
    """

    admitted: Queue
    readmitted: Sequences
    ahead_tokens: np.ndarray


def ahead_in_order(bins: np.ndarray, preempted: np.ndarray) -> np.ndarray:
    """Amount ahead of each (class, age) bin of `bins` (N, 3, A) in the admission order: the
    preempted (N,), the earlier classes, the older ages of the same class."""
    per_class = np.sum(bins, axis=2)
    earlier_classes = np.concatenate([np.zeros_like(per_class[:, :1]), np.cumsum(per_class, axis=1)[:, :-1]], axis=1)
    from_oldest = np.cumsum(bins[:, :, ::-1], axis=2)[:, :, ::-1]  # age a..A-1
    older_ages = np.concatenate([from_oldest[:, :, 1:], np.zeros_like(bins[:, :, :1])], axis=2)
    return per_env(preempted) + earlier_classes[:, :, None] + older_ages


def admit(queue: Queue, preempted: Sequences, limits: Limits) -> tuple[Admission, Sequences]:
    """Admission in order (serving.admission.admit; module docstring).
    Returns (admission, the preempted pool left)."""
    x_preempted = admitted_fraction(preempted.seqs, preempted.context, limits.slots, limits.token_cap)
    before_seqs = ahead_in_order(queue.count, preempted.seqs)
    before_tokens = ahead_in_order(queue.prompt, preempted.context)
    room_seqs = per_env(limits.slots) - before_seqs
    room_tokens = per_env(limits.token_cap) - before_tokens
    x_queue = admitted_fraction(queue.count, queue.prompt, room_seqs, room_tokens)
    readmitted = scale_pool(preempted, x_preempted)
    admission = Admission(scale_queue(queue, x_queue), readmitted, before_tokens.astype(F32))
    return admission, subtract_pools(preempted, readmitted)


class Prefill(NamedTuple):
    """The interval's prefill pass (serving.admission.Prefill); (N,) float32.

    Attributes:
      tokens: [tokens] prompt tokens prefilled (recompute included).
      new_requests: [requests] admitted from the queue.
      new_output: [tokens] output owed to them.
      decode_s: [s] left for decode.
      wall_rate: [tokens/s] prefill throughput a queued request sees.
    """

    tokens: np.ndarray
    new_requests: np.ndarray
    new_output: np.ndarray
    decode_s: np.ndarray
    wall_rate: np.ndarray


def prefill(admission: Admission, engine: Any, limits: Limits, profile: Any) -> Prefill:
    """One prefill pass over the admitted prompts and the recomputed contexts
    (serving.admission.prefill). A recomputed pool counts as its mean context per sequence."""
    a, re = admission.admitted, admission.readmitted
    admitted_n, admitted_p, admitted_o, admitted_sq = (np.sum(x, axis=(1, 2)) for x in
                                                       (a.count, a.prompt, a.output, a.prompt_sq))
    tokens = re.context + admitted_p
    sum_sq = re.context * safe_div(re.context, re.seqs) + admitted_sq
    prefill_s = roofline.prefill_time(profile, tokens, np.maximum(re.seqs + admitted_n, F32(1.0)), sum_sq)
    decode_s = np.where(engine.disaggregated, engine.serving_s, np.maximum(engine.serving_s - prefill_s, F32(0.0)))
    wall_rate = np.maximum(safe_div(tokens, prefill_s) * limits.prefill_share, EPS)
    return Prefill(tokens.astype(F32), admitted_n, admitted_o, decode_s.astype(F32), wall_rate.astype(F32))


def age_queue(queue: Queue, admitted: Queue) -> tuple[Queue, Queue, np.ndarray]:
    """The admitted removed, the oldest age timed out, every other bin one interval older
    (serving.admission.age_queue). Returns (next queue, still waiting at their current age,
    timed-out requests (N,))."""
    waiting = subtract_queues(queue, admitted)
    timeouts = np.sum(waiting.count[:, :, -1], axis=1)

    def older_by_one(bins: np.ndarray) -> np.ndarray:
        return np.concatenate([np.zeros_like(bins[:, :, :1]), bins[:, :, :-1]], axis=2)

    aged = Queue(*(older_by_one(x) for x in (waiting.count, waiting.prompt, waiting.output, waiting.prompt_sq)))
    return aged, waiting, timeouts
