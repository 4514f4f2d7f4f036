"""From the queue into the batch: arrivals, admission limits, admission order and prefill.

Admission runs once per interval. Preempted sequences come first (they are recomputed), then
class 0 before 1 before 2, oldest first within a class (first come, first served, with
head-of-line blocking). Three limits: free sequence slots (batch_size, counting the sequences
expected to finish during the interval), free KV blocks (a vLLM-style watermark is kept), and
the prefill tokens the engine can process in the interval. Without disaggregation the latter is
vLLM's chunked-prefill token budget: each engine step carries the decode tokens plus at most
`max_batched_tokens - decode tokens` prefill tokens; with disaggregation a second GPU prefills
the whole interval and decode never stalls.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import perf_model, xla_ops
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.engine import Engine
from inferencegym_jax.serving.types import Queue, Sequences, ServerParams
from inferencegym_jax.traffic.workload import Arrivals


def enqueue(queue: Queue, arrivals: Arrivals) -> Queue:
    """The queue with this interval's arrivals at age 0."""
    return Queue(
        count=xla_ops.add_at_first(queue.count, arrivals.count),
        prompt=xla_ops.add_at_first(queue.prompt, arrivals.prompt_tokens),
        output=xla_ops.add_at_first(queue.output, arrivals.output_tokens),
        prompt_sq=xla_ops.add_at_first(queue.prompt_sq, arrivals.prompt_sq_tokens),
    )


class Limits(NamedTuple):
    """What admission may take this interval, and the estimates behind it; float32 scalars.

    Attributes:
      slots: [sequences] free batch slots, counting the sequences expected to finish.
      token_cap: [tokens] prompt tokens that fit: min(free KV tokens, prefill capacity).
      prefill_share: fraction of engine time prefill may take (1 on a dedicated GPU, or when
        nothing decodes; else the prefill chunk's share of a mixed engine step).
      step_estimate_s: [s] a decode step of the batch admission expects.
      tokens_per_step: tokens emitted per sequence per decode step.
    """

    slots: Array
    token_cap: Array
    prefill_share: Array
    step_estimate_s: Array
    tokens_per_step: Array


def admission_limits(
    running: Sequences, preempted: Sequences, queue: Queue, engine: Engine, capacity: Array,
    config: ServingAction, profile: perf_model.Profile, params: ServerParams,
) -> Limits:
    """Free slots, free KV tokens and prefill capacity for this interval (module docstring)."""
    batch, spec = config.batch_size, config.spec_length
    tps = perf_model.tokens_per_step(profile, spec)
    waiting = xla_ops.class_sum(jnp.sum(queue.count, axis=1))
    decode_batch = jnp.clip(jnp.minimum(running.seqs + waiting + preempted.seqs, batch), 1.0, None)
    step_est = perf_model.decode_step_time(profile, decode_batch, safe_div(running.context, running.seqs), spec)
    mean_remaining = jnp.maximum(safe_div(running.remaining, running.seqs), 1.0)
    finishing = running.seqs * -jnp.expm1(-(engine.serving_s / step_est) * tps / mean_remaining)
    slots = jnp.maximum(batch - running.seqs + finishing, 0.0)
    kv_free = jnp.maximum(capacity * (1.0 - params.kv_watermark) - running.context, 0.0)
    # Per tier from the task's profiles (under vmap over envs: once per step, not per env).
    tier = jnp.clip(jnp.asarray(config.quant_tier, jnp.int32), 0, 2)
    prefill_rate = perf_model.prefill_throughput(params.profiles)[tier]
    chunk_s = jnp.maximum(params.max_batched_tokens - decode_batch * (spec + 1.0), 0.0) / prefill_rate
    share = jnp.where(engine.disaggregated | (running.seqs < EPS), 1.0, chunk_s / (chunk_s + step_est))
    token_cap = jnp.minimum(kv_free, engine.serving_s * share * prefill_rate)
    return Limits(slots, token_cap, share, step_est, tps)


def admitted_fraction(count: Array, prompt: Array, room_seqs: Array, room_tokens: Array) -> Array:
    """Fraction of each bin admitted, in [0, 1]: min(room_seqs / count, room_tokens / prompt),
    each clipped to [0, 1]; 0 for an empty bin, no token limit for a bin without tokens."""
    n = jnp.maximum(count, EPS)
    p = jnp.maximum(prompt, EPS)
    seqs_ok = jnp.clip(room_seqs, 0.0, n)
    tokens_ok = jnp.where(prompt > EPS, jnp.clip(room_tokens, 0.0, p), p)
    return xla_ops.masked_min_of_ratios(count > EPS, seqs_ok, n, tokens_ok, p)


class Admission(NamedTuple):
    """Who enters the batch this interval.

    Attributes:
      admitted: Queue, (3, A) leaves: the part of each queue bin admitted.
      readmitted: Sequences of the preempted pool taken back for recompute.
      ahead_tokens: float32 (3, A) [tokens] of prompt admitted before each bin's requests
        (the preempted, the earlier classes, the older ages).
    """

    admitted: Queue
    readmitted: Sequences
    ahead_tokens: Array


def admit(queue: Queue, preempted: Sequences, limits: Limits) -> tuple[Admission, Sequences]:
    """Admission in order: preempted first, then class 0, 1, 2, oldest first within a class;
    every bin up to the slots and tokens left after the bins ahead of it.
    Returns (admission, the preempted pool left)."""
    x_preempted = admitted_fraction(preempted.seqs, preempted.context, limits.slots, limits.token_cap)
    class_n, class_p = jnp.sum(queue.count, axis=1), jnp.sum(queue.prompt, axis=1)  # (3,) each
    # (two products, not one of the stacked pair: the stack would be one more pass over the queue)
    older_n, older_p = xla_ops.older_sum(queue.count), xla_ops.older_sum(queue.prompt)  # (3, A) each
    before_n = preempted.seqs + xla_ops.earlier_classes(class_n)[:, None] + older_n
    before_p = preempted.context + xla_ops.earlier_classes(class_p)[:, None] + older_p
    x_queue = admitted_fraction(queue.count, queue.prompt, limits.slots - before_n, limits.token_cap - before_p)
    readmitted = preempted.scaled(x_preempted)
    return Admission(queue.scaled(x_queue), readmitted, before_p), preempted - readmitted


class Prefill(NamedTuple):
    """The interval's prefill pass; float32 scalars.

    Attributes:
      tokens: [tokens] prompt tokens prefilled (recompute included).
      new_requests: [requests] admitted from the queue.
      new_output: [tokens] output owed to them.
      decode_s: [s] left for decode after prefill (all of serving_s when disaggregated).
      wall_rate: [tokens/s] prefill throughput a queued request sees (its share of the engine).
    """

    tokens: Array
    new_requests: Array
    new_output: Array
    decode_s: Array
    wall_rate: Array


def prefill(admission: Admission, engine: Engine, limits: Limits, profile: perf_model.Profile) -> Prefill:
    """Prefill of the admitted prompts and the recomputed contexts in one pass."""
    a, re = admission.admitted, admission.readmitted
    admitted_n, admitted_p, admitted_o, admitted_sq = xla_ops.sums((a.count, a.prompt, a.output, a.prompt_sq),
                                                                   axes=(0, 1))
    tokens = re.context + admitted_p
    sum_sq = re.context * safe_div(re.context, re.seqs) + admitted_sq
    prefill_s = perf_model.prefill_time(profile, tokens, jnp.maximum(re.seqs + admitted_n, 1.0), sum_sq)
    decode_s = jnp.where(engine.disaggregated, engine.serving_s, jnp.maximum(engine.serving_s - prefill_s, 0.0))
    wall_rate = jnp.maximum(safe_div(tokens, prefill_s) * limits.prefill_share, EPS)
    return Prefill(tokens, admitted_n, admitted_o, decode_s, wall_rate)


def age_queue(queue: Queue, admitted: Queue) -> tuple[Queue, Queue, Array]:
    """The queue after admission: the admitted removed, the oldest age timed out (the client
    gives up after num_age_buckets intervals), every other bin one interval older.

    Returns (next interval's queue, the requests still waiting at their current age, timed-out
    requests [requests]).
    """
    waiting = queue - admitted
    timeouts = jnp.sum(waiting.count[:, -1])

    def older_by_one(x: Array) -> Array:
        return jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)

    aged = Queue(*(older_by_one(x) for x in (waiting.count, waiting.prompt, waiting.output, waiting.prompt_sq)))
    return aged, waiting, timeouts
