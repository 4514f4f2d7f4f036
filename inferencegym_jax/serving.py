"""One control interval of an LLM server: queue -> prefill -> decode -> completion.

The server is a fluid model of a continuous-batching engine (vLLM-style) with fixed shapes:

* **Queue**: waiting requests by priority class and age, `queue_*[class, age]`, age in control
  intervals. New arrivals enter at age 0; each interval ages them by one; requests still waiting
  after `num_age_buckets` intervals time out (the client gives up).
* **Admission** (once per interval): preempted sequences first (they are recomputed), then
  class 0 before 1 before 2, oldest first within a class (first come, first served, with
  head-of-line blocking). Three limits: free sequence slots (batch_size, counting the
  sequences expected to finish during the interval), free KV blocks (a vLLM-style watermark
  is kept), and the prefill tokens the engine can process in the interval. Without
  disaggregation the latter is vLLM's chunked-prefill token budget: each engine step carries
  the decode tokens plus at most `max_batched_tokens - decode tokens` prefill tokens; with
  disaggregation a second GPU prefills the whole interval and decode never stalls.
* **Decode**: the running set decodes for the rest of the interval at the roofline's step
  time; each sequence emits `tokens_per_step(spec_length)` tokens per step. Completions are
  memoryless: with mean remaining output m and e tokens emitted per sequence, a fraction
  1 - exp(-e / m) of the sequences finishes and exactly that fraction of the outstanding
  output tokens is produced (the expected tokens of min(e, Exp(m)) draws). The finished
  sequences free their KV cache.
* **KV capacity**: when resident tokens exceed the capacity (the budget shrank, or decode
  grew the contexts), the newest sequences are preempted and later recomputed, as vLLM does.
* **Memory**: weights + resident KV + reserve. Above `memory_limit_bytes` the engine runs out
  of memory: every running and preempted sequence fails and the engine restarts.
* **Reconfiguration**: a new precision tier loads new weights (weight_bytes / weight_load_bw)
  and restarts the engine (restart_s): the server stalls and the KV cache is lost (running
  sequences are preempted). Turning disaggregation on starts a prefill engine on a second GPU
  (weight load + prefill_start_s), billed from the request, while this engine keeps serving;
  it takes over prefill once ready. Turning it off releases the GPU at once.

Counts are real-valued (expected requests) inside the fluid model; arrivals are integer.
TTFT = queue wait + prefill (own prompt and the prompts ahead of it) + KV transfer (when
disaggregated) + per-request overhead; its p50/p99 come from the distribution of waits of the
requests admitted in the interval and of those still waiting (at their current wait).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import perf_model
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.workload import NUM_CLASSES, Arrivals

Array = Any
_EPS = 1e-6
# Reference prefill chunk for the prefill throughput estimate used by admission [tokens].
_PREFILL_REF_TOKENS = 2048.0


@struct.dataclass
class ServerParams:
    """Engine and SLO parameters of one task (a pytree).

    Attributes:
      profiles: `perf_model.Profile` with a leading axis of 3, one per precision tier.
      dt_s: float32 [s], length of one control interval.
      ttft_slo_s: float32 (3,) [s], time-to-first-token SLO per priority class.
      tpot_slo_s: float32 [s], time-per-output-token SLO (all classes).
      memory_limit_bytes: float32 [B], memory above which the engine runs out of memory.
      max_batched_tokens: float32 [tokens], tokens per engine step with chunked prefill
        (vLLM's max_num_batched_tokens; 2048 is vLLM V1's default for the online server).
      kv_watermark: float32, fraction of KV blocks kept free at admission (vLLM: 0.01).
      restart_s: float32 [s], engine restart after a weight change or OOM (CUDA-graph capture
        and warm-up; vLLM logs 5-30 s, we take the warm end).
      prefill_start_s: float32 [s], start of a prefill-only engine on a second GPU once its
        weights are loaded (process and KV-transfer setup; prefill runs large batches without
        CUDA graphs, so no graph capture).
      num_age_buckets: static int, queue ages tracked; also the client timeout in intervals.
    """

    profiles: perf_model.Profile
    dt_s: Array
    ttft_slo_s: Array
    tpot_slo_s: Array
    memory_limit_bytes: Array
    max_batched_tokens: Array
    kv_watermark: Array
    restart_s: Array
    prefill_start_s: Array
    num_age_buckets: int = struct.field(pytree_node=False, default=16)


@struct.dataclass
class ServerState:
    """The server between two control intervals.

    Attributes:
      queue_count: float32 (3, A) [requests] waiting, by class and age in intervals.
      queue_prompt: float32 (3, A) [tokens], their prompt tokens.
      queue_output: float32 (3, A) [tokens], their output tokens still to generate.
      queue_prompt_sq: float32 (3, A) [tokens^2], their summed squared prompt lengths.
      run_seqs: float32 [sequences] in the decode batch.
      run_context: float32 [tokens] resident in their KV cache.
      run_remaining: float32 [tokens] of output they still have to generate.
      swap_seqs: float32 [sequences] preempted, waiting to be recomputed.
      swap_context: float32 [tokens] to recompute for them.
      swap_remaining: float32 [tokens] of output they still have to generate.
      stall_s: float32 [s] of reconfiguration or restart still to sit out.
      prefill_warmup_s: float32 [s] until a newly requested prefill GPU is ready.
      config: ServingAction currently applied.
    """

    queue_count: Array
    queue_prompt: Array
    queue_output: Array
    queue_prompt_sq: Array
    run_seqs: Array
    run_context: Array
    run_remaining: Array
    swap_seqs: Array
    swap_context: Array
    swap_remaining: Array
    stall_s: Array
    prefill_warmup_s: Array
    config: ServingAction


@struct.dataclass
class IntervalMetrics:
    """What one control interval produced; float32 scalars unless noted.

    Attributes:
      ttft_p50_s, ttft_p99_s: [s] percentiles of time to first token (see module docstring).
      ttft_slo_ratio: mean over requests of min(TTFT / class SLO, 4) / 4, in [0, 1].
      tpot_s: [s] wall time per output token of a running sequence (stalls included).
      output_tokens: [tokens] output tokens generated in the interval.
      good_tokens: [tokens] output tokens of the requests admitted this interval within their
        TTFT and TPOT SLOs (goodput, counted when the request is admitted).
      tokens_per_s: [tokens/s] output tokens generated per second.
      quality_tokens_per_s: [tokens/s] generated tokens times (1 - quality loss of the tier).
      prefill_tokens: [tokens] prompt tokens prefilled (recompute included).
      admitted: [requests] admitted for the first time.
      completed: [requests] finished.
      slo_violations: [requests] admitted past their TTFT SLO or with TPOT above its SLO,
        plus those that timed out or failed.
      slo_violation_rate: violations / (admitted + timed out + failed), 0 when none.
      timeouts: [requests] that gave up waiting.
      failed: [requests] lost to an out-of-memory restart.
      evictions: [sequences] preempted for lack of KV space (or by a reconfiguration).
      oom: 1.0 when the engine ran out of memory, else 0.
      gpu_memory_bytes: [B] memory in use on the decode GPU.
      kv_capacity_tokens: [tokens] KV capacity at the applied kv_budget.
      kv_occupancy: resident KV tokens / capacity, in [0, 1].
      spec_acceptance: fraction of draft tokens accepted, 0 without speculation.
      num_gpus: GPUs in use (2 when disaggregated).
      cost_usd: [$] GPU cost of the interval.
      stall_s: [s] of the interval lost to reconfiguration or restart.
      queue_depth: [requests] waiting at the end of the interval.
      queue_mean_prompt: [tokens] mean prompt length of the waiting requests (0 if none).
      class_share: float32 (3,) share of waiting and new requests per class.
    """

    ttft_p50_s: Array
    ttft_p99_s: Array
    ttft_slo_ratio: Array
    tpot_s: Array
    output_tokens: Array
    good_tokens: Array
    tokens_per_s: Array
    quality_tokens_per_s: Array
    prefill_tokens: Array
    admitted: Array
    completed: Array
    slo_violations: Array
    slo_violation_rate: Array
    timeouts: Array
    failed: Array
    evictions: Array
    oom: Array
    gpu_memory_bytes: Array
    kv_capacity_tokens: Array
    kv_occupancy: Array
    spec_acceptance: Array
    num_gpus: Array
    cost_usd: Array
    stall_s: Array
    queue_depth: Array
    queue_mean_prompt: Array
    class_share: Array


def initial_state(config: ServingAction, num_age_buckets: int) -> ServerState:
    """An idle server with an empty queue, not yet started: its first configuration is free.

    `config` is the task default, kept for observation; quant_tier -1 marks "not started".
    """
    zeros = jnp.zeros((NUM_CLASSES, num_age_buckets), jnp.float32)
    z = jnp.zeros((), jnp.float32)
    return ServerState(zeros, zeros, zeros, zeros, z, z, z, z, z, z, z, z, config.replace(quant_tier=-jnp.ones((), jnp.float32)))


def select_profile(profiles: perf_model.Profile, tier: Array) -> perf_model.Profile:
    """The profile of one precision tier from the stacked (3,) profiles."""
    tier = jnp.clip(jnp.asarray(tier, jnp.int32), 0, 2)
    return jax.tree_util.tree_map(lambda x: x[tier], profiles)


def _safe_div(a: Array, b: Array) -> Array:
    return jnp.where(b > _EPS, a / jnp.where(b > _EPS, b, 1.0), 0.0)


def _older_sum(x: Array) -> Array:
    """Sum over strictly older ages, x[..., a] -> sum of x[..., a'] for a' > a; ages last.

    A product with a constant triangular matrix: XLA's CPU cumsum is an O(A^2) reduce-window
    that costs several times more under vmap.
    """
    num_ages = x.shape[-1]
    older = jnp.asarray(np.tril(np.ones((num_ages, num_ages), np.float32), -1))
    return jnp.dot(x, older, precision=jax.lax.Precision.HIGHEST)


def _class_sum(x: Array) -> Array:
    """Sum over the (3,) class axis in a fixed order (x0 + x1) + x2. XLA's reduction may add in
    another order depending on the batch width, and results must not depend on it."""
    return x[0] + x[1] + x[2]


def _sums(xs: tuple[Array, ...], axes: tuple[int, ...]) -> tuple[Array, ...]:
    """Sums of same-shaped arrays over `axes`, in one variadic reduction.

    One reduction, one pass: XLA:CPU computes the inputs' shared producers (each queue bin's
    TTFT, say) once per element, where a separate sum per input would re-derive them from the
    queue arrays each time (the whole env step is 1.18x faster with the TTFT statistics summed
    this way, and 1.04x more with the four admitted totals). Results must not depend on the
    batch width; tests/test_env.py checks that they do not.
    """
    zeros = tuple(np.float32(0.0) for _ in xs)
    return tuple(jax.lax.reduce(tuple(xs), zeros, lambda a, b: tuple(u + v for u, v in zip(a, b)), axes))


def _earlier_classes(x: Array) -> Array:
    """Exclusive prefix sum over the (3,) class axis: (0, x0, x0 + x1)."""
    return jnp.stack([jnp.zeros_like(x[0]), x[0], x[0] + x[1]])


def _binned_quantiles(low: Array, high: Array, weights: Array, qs: tuple[float, ...]) -> tuple[Array, ...]:
    """Quantiles of a mixture of uniform bins with `weights` (1-D, bins in order).

    Bin i spans [max(low[:i+1]), max(high[:i+1], that)] (running maxima keep the bins in
    order). Quantile q lies in the first bin whose cumulative weight reaches q * total
    (searchsorted side="left"; the last bin takes any rounding overshoot), at the fraction of
    that bin's weight still needed. The bins up to it are those whose weight before them is
    below q * total, so its running maxima are masked maxima: no cummax, search or gather,
    which XLA's CPU backend runs several times slower under vmap.
    """
    num_bins = weights.shape[-1]
    cum = jnp.dot(weights, jnp.asarray(np.triu(np.ones((num_bins, num_bins), np.float32))),
                  precision=jax.lax.Precision.HIGHEST)  # cumsum: see _older_sum
    total = cum[-1]
    cum_before = cum - weights
    out = []
    for q in qs:
        target = q * total
        upto = cum_before < target
        crosses = upto & ((cum >= target) | (jnp.arange(num_bins) == num_bins - 1))
        frac = jnp.sum(jnp.where(crosses, jnp.clip((target - cum_before) / jnp.maximum(weights, _EPS), 0.0, 1.0), 0.0))
        lo = jnp.max(jnp.where(upto, low, 0.0))
        hi = jnp.maximum(jnp.max(jnp.where(upto, high, 0.0)), lo)
        out.append(jnp.where(total > _EPS, lo + frac * (hi - lo), 0.0))
    return tuple(out)


def _admitted_fraction(count: Array, prompt: Array, room_seqs: Array, room_tokens: Array) -> Array:
    """Fraction of each queue bin admitted, in [0, 1]: min(room_seqs / count, room_tokens /
    prompt), each clipped to [0, 1]; 0 for an empty bin, no token limit for a bin without tokens.

    Both ratios over one common denominator, so that the result ends in a division: XLA:CPU
    then computes it once and stores it, where it would re-derive a cheap expression (and read
    its five (3, A) inputs again) inside each of the fraction's many consumers.
    """
    n = jnp.maximum(count, _EPS)
    p = jnp.maximum(prompt, _EPS)
    seqs_ok = jnp.clip(room_seqs, 0.0, n)
    tokens_ok = jnp.where(prompt > _EPS, jnp.clip(room_tokens, 0.0, p), p)
    return jnp.where(count > _EPS, jnp.minimum(seqs_ok * p, tokens_ok * n), 0.0) / (n * p)


def _evict(seqs: Array, context: Array, remaining: Array, excess: Array):
    """Fraction of the running set to preempt so that `excess` KV tokens are freed."""
    frac = jnp.clip(_safe_div(excess, context), 0.0, 1.0)
    return frac * seqs, frac * context, frac * remaining, frac


def serve_interval(
    state: ServerState, arrivals: Arrivals, config: ServingAction, params: ServerParams
) -> tuple[ServerState, IntervalMetrics]:
    """Advance the server by one control interval of `params.dt_s` seconds."""
    dt = params.dt_s
    profile = select_profile(params.profiles, config.quant_tier)
    batch = config.batch_size
    spec = config.spec_length
    disagg_requested = config.prefill_disagg > 0.5
    num_gpus = jnp.where(disagg_requested, 2.0, 1.0)  # billed from the moment it is requested

    # --- reconfiguration ---------------------------------------------------------------------
    # A negative tier marks an engine not yet started: the first configuration is free.
    # A new precision loads new weights into the serving engine: it stalls and drops its KV
    # cache. Turning disaggregation on brings up a prefill engine on a second GPU (load its
    # weights, start it: prefill_start_s) while this one keeps serving and prefilling; turning
    # it off releases that GPU at once. Disaggregated serving starts once the prefill GPU is ready.
    started = state.config.quant_tier >= 0
    weights_changed = started & (config.quant_tier != state.config.quant_tier)
    reload_s = profile.weight_bytes / profile.weight_load_bw + params.restart_s
    newly_on = started & disagg_requested & (state.config.prefill_disagg < 0.5)
    prefill_up_s = profile.weight_bytes / profile.weight_load_bw + params.prefill_start_s
    warmup = jnp.where(disagg_requested, jnp.where(newly_on, prefill_up_s, state.prefill_warmup_s), 0.0)
    disagg = disagg_requested & (warmup <= 0.0)
    warmup_next = jnp.maximum(warmup - dt, 0.0)
    stall = state.stall_s + jnp.where(weights_changed, reload_s, 0.0)
    busy = jnp.minimum(stall, dt)
    t_avail = dt - busy
    keep = jnp.where(weights_changed, 0.0, 1.0)
    swap_seqs = state.swap_seqs + (1.0 - keep) * state.run_seqs
    swap_context = state.swap_context + (1.0 - keep) * state.run_context
    swap_remaining = state.swap_remaining + (1.0 - keep) * state.run_remaining
    evicted = (1.0 - keep) * state.run_seqs
    run_seqs, run_context, run_remaining = keep * state.run_seqs, keep * state.run_context, keep * state.run_remaining

    # --- KV capacity: shrink-eviction when the budget went down ---------------------------
    capacity = perf_model.kv_capacity_tokens(profile, config.kv_budget)
    ev_s, ev_c, ev_r, frac = _evict(run_seqs, run_context, run_remaining, run_context - capacity)
    run_seqs, run_context, run_remaining = run_seqs - ev_s, run_context - ev_c, run_remaining - ev_r
    swap_seqs, swap_context, swap_remaining = swap_seqs + ev_s, swap_context + ev_c, swap_remaining + ev_r
    evicted = evicted + ev_s

    # --- queue with this interval's arrivals at age 0 --------------------------------------
    # Arrivals zero-padded to the queue's shape: XLA fuses the arrival sampler into the pad and
    # runs it for age 0 only (a `where` over ages would run it for every age).
    enqueue = lambda queue, new: queue + jnp.pad(new[:, None], ((0, 0), (0, queue.shape[1] - 1)))  # noqa: E731
    q_count = enqueue(state.queue_count, arrivals.count)
    q_prompt = enqueue(state.queue_prompt, arrivals.prompt_tokens)
    q_output = enqueue(state.queue_output, arrivals.output_tokens)
    q_sq = enqueue(state.queue_prompt_sq, arrivals.prompt_sq_tokens)
    num_ages = q_count.shape[1]

    # --- admission limits -------------------------------------------------------------------
    tps = perf_model.tokens_per_step(profile, spec)
    mean_ctx = _safe_div(run_context, run_seqs)
    class_n, class_p = jnp.sum(q_count, axis=1), jnp.sum(q_prompt, axis=1)  # (3,) each
    decode_batch = jnp.clip(jnp.minimum(run_seqs + _class_sum(class_n) + swap_seqs, batch), 1.0, None)
    step_est = perf_model.decode_step_time(profile, decode_batch, mean_ctx, spec)
    mean_remaining = jnp.maximum(_safe_div(run_remaining, run_seqs), 1.0)
    finish_est = run_seqs * -jnp.expm1(-(t_avail / step_est) * tps / mean_remaining)
    slots = jnp.maximum(batch - run_seqs + finish_est, 0.0)
    kv_free = jnp.maximum(capacity * (1.0 - params.kv_watermark) - run_context, 0.0)
    # Per tier from the task's profiles (under vmap over envs: once per step, not per env).
    prefill_rates = _PREFILL_REF_TOKENS / perf_model.prefill_time(params.profiles, _PREFILL_REF_TOKENS)
    prefill_rate = prefill_rates[jnp.clip(jnp.asarray(config.quant_tier, jnp.int32), 0, 2)]
    chunk = jnp.maximum(params.max_batched_tokens - decode_batch * (spec + 1.0), 0.0)
    chunk_s = chunk / prefill_rate
    # Share of engine time prefill may take: all of it on a dedicated GPU, else the chunk's
    # share of a mixed step (and all of it when nothing is decoding).
    share = jnp.where(disagg | (run_seqs < _EPS), 1.0, chunk_s / (chunk_s + step_est))
    prefill_cap = t_avail * share * prefill_rate
    token_cap = jnp.minimum(kv_free, prefill_cap)

    # Admission order: preempted first, then class 0, 1, 2, oldest first within a class. The
    # requests ahead of each queue bin: the preempted, the earlier classes, the older ages.
    x_swap = _admitted_fraction(swap_seqs, swap_context, slots, token_cap)
    # (two products, not one of the stacked pair: the stack would be one more pass over the queue)
    older_n, older_p = _older_sum(q_count), _older_sum(q_prompt)  # (3, A) each
    before_n = swap_seqs + _earlier_classes(class_n)[:, None] + older_n
    before_p = swap_context + _earlier_classes(class_p)[:, None] + older_p
    x_queue = _admitted_fraction(q_count, q_prompt, slots - before_n, token_cap - before_p)

    adm_n = x_queue * q_count
    adm_p = x_queue * q_prompt
    adm_o = x_queue * q_output
    adm_sq = x_queue * q_sq
    re_n, re_c, re_r = x_swap * swap_seqs, x_swap * swap_context, x_swap * swap_remaining
    swap_seqs, swap_context, swap_remaining = swap_seqs - re_n, swap_context - re_c, swap_remaining - re_r

    # --- prefill ------------------------------------------------------------------------------
    admitted_n, admitted_p, admitted_o, admitted_sq = _sums((adm_n, adm_p, adm_o, adm_sq), axes=(0, 1))
    prefill_tokens = re_c + admitted_p
    prefill_seqs = re_n + admitted_n
    prefill_sq = re_c * _safe_div(re_c, re_n) + admitted_sq
    prefill_s = perf_model.prefill_time(profile, prefill_tokens, jnp.maximum(prefill_seqs, 1.0), prefill_sq)
    decode_s = jnp.where(disagg, t_avail, jnp.maximum(t_avail - prefill_s, 0.0))
    # Wall-clock prefill throughput seen by a request in the queue [tokens/s].
    prefill_wall_rate = jnp.maximum(_safe_div(prefill_tokens, prefill_s) * share, _EPS)

    # --- TTFT of admitted requests, by (class, age): centre and half-width of a uniform ------
    # Queued requests (age a >= 1) arrived uniformly during the interval a intervals ago and
    # are prefilled at the start of this one after the tokens ahead of them; fresh arrivals wait
    # for the engine step in flight (uniform in [0, step]) and for their own prefill.
    ages = jnp.arange(num_ages, dtype=jnp.float32)
    # Prompt tokens prefilled ahead of a bin. Admission takes a prefix of the order (whole bins,
    # then part of one, then none), so that is the bin's `before_p` capped at all that was taken
    # (bins of < _EPS requests, never admitted, count as ahead: < 1e-2 tokens).
    ahead = jnp.minimum(before_p, prefill_tokens)
    mean_prompt = _safe_div(q_prompt, q_count)
    own_s = mean_prompt / prefill_wall_rate
    position_s = (ahead + 0.5 * adm_p) / prefill_wall_rate
    fresh_prefill = jnp.maximum(position_s - 0.5 * dt, own_s)
    transfer_s = jnp.where(disagg, mean_prompt * profile.kv_bytes_per_token / profile.kv_link_bw, 0.0)
    fixed = busy + transfer_s + profile.request_overhead_s
    fresh = ages[None, :] < 1
    ttft = jnp.where(fresh, 0.5 * step_est + fresh_prefill, (ages - 0.5) * dt + position_s) + fixed
    ttft_half = jnp.where(fresh, 0.5 * (step_est + fresh_prefill), 0.5 * dt)

    # --- decode -----------------------------------------------------------------------------
    run_seqs = run_seqs + re_n + admitted_n
    run_context = run_context + prefill_tokens
    run_remaining = run_remaining + re_r + admitted_o
    concurrent = jnp.minimum(run_seqs, batch)
    ctx = _safe_div(run_context, run_seqs)
    step_s = perf_model.decode_step_time(profile, jnp.maximum(concurrent, 1.0), ctx, spec)
    per_seq_tokens = (decode_s / step_s) * tps * _safe_div(concurrent, run_seqs)
    mean_remaining = jnp.maximum(_safe_div(run_remaining, run_seqs), 1.0)
    done_frac = -jnp.expm1(-per_seq_tokens / mean_remaining)
    left_frac = jnp.exp(-per_seq_tokens / mean_remaining)  # 1 - done_frac without cancellation
    generated = run_remaining * done_frac
    completed = run_seqs * done_frac
    run_context = (run_context + generated) * left_frac
    run_remaining = run_remaining * left_frac
    run_seqs = run_seqs * left_frac
    tpot = jnp.where(
        run_seqs + completed > _EPS,
        jnp.minimum(dt / jnp.maximum(per_seq_tokens, _EPS), dt),
        step_s / tps,
    )

    # --- KV overflow from decode growth: preempt the newest ------------------------------------
    ev_s, ev_c, ev_r, _ = _evict(run_seqs, run_context, run_remaining, run_context - capacity)
    run_seqs, run_context, run_remaining = run_seqs - ev_s, run_context - ev_c, run_remaining - ev_r
    swap_seqs, swap_context, swap_remaining = swap_seqs + ev_s, swap_context + ev_c, swap_remaining + ev_r
    evicted = evicted + ev_s

    # --- memory and out-of-memory ----------------------------------------------------------------
    memory = profile.weight_bytes + run_context * profile.kv_bytes_per_token + profile.reserve_bytes
    oom = memory > params.memory_limit_bytes
    failed = jnp.where(oom, run_seqs + swap_seqs, 0.0)
    lost = jnp.where(oom, 0.0, 1.0)
    run_seqs, run_context, run_remaining = lost * run_seqs, lost * run_context, lost * run_remaining
    swap_seqs, swap_context, swap_remaining = lost * swap_seqs, lost * swap_context, lost * swap_remaining
    memory_after = profile.weight_bytes + run_context * profile.kv_bytes_per_token + profile.reserve_bytes
    stall_next = stall - busy + jnp.where(oom, params.restart_s, 0.0)

    # --- queue: remove admitted, time out the oldest, age by one -----------------------------------
    rest_n, rest_p, rest_o, rest_sq = q_count - adm_n, q_prompt - adm_p, q_output - adm_o, q_sq - adm_sq
    timeouts = jnp.sum(rest_n[:, -1])
    shift = lambda a: jnp.concatenate([jnp.zeros_like(a[:, :1]), a[:, :-1]], axis=1)  # noqa: E731
    new_queue = (shift(rest_n), shift(rest_p), shift(rest_o), shift(rest_sq))

    # --- latency statistics ----------------------------------------------------------------------
    slo = params.ttft_slo_s[:, None]
    wait_now = (ages + 0.5) * dt  # requests still waiting: a lower bound on their TTFT
    tpot_bad = tpot > params.tpot_slo_s
    late = (ttft > slo) | tpot_bad
    waiting_and_admitted = adm_n + rest_n
    # Admitted at their TTFT, waiting at their current wait.
    wait_sum = adm_n * ttft + rest_n * wait_now
    ratio = jnp.minimum(wait_sum, 4.0 * slo * waiting_and_admitted) / (4.0 * slo)
    # Every statistic that needs a bin's TTFT, summed over classes in one pass (see _sums).
    late_n, good_o, wait_sum_age, half_sum_age, ratio_age, weight_age = _sums(
        (
            jnp.where(late, adm_n, 0.0),
            # output tokens owed to requests admitted within their SLO (goodput, counted at admission)
            jnp.where(late, 0.0, adm_o),
            wait_sum,
            adm_n * ttft_half + rest_n * 0.5 * dt,
            ratio,
            waiting_and_admitted,
        ),
        axes=(0,),
    )  # (A,) each
    violations = jnp.sum(late_n) + timeouts + failed
    good_tokens = jnp.sum(good_o)
    decided = admitted_n + timeouts + failed
    # Pool classes per age bin; each bin is a uniform [centre - half-width, centre + half-width];
    # bins increase with age.
    centre = _safe_div(wait_sum_age, weight_age)
    half = _safe_div(half_sum_age, weight_age)
    low = jnp.where(weight_age > _EPS, jnp.maximum(centre - half, 0.0), 0.0)
    high = jnp.where(weight_age > _EPS, centre + half, 0.0)
    ttft_p50, ttft_p99 = _binned_quantiles(low, high, weight_age, (0.5, 0.99))
    ttft_slo_ratio = _safe_div(jnp.sum(ratio_age), jnp.sum(weight_age))

    waiting_n = jnp.sum(new_queue[0], axis=1)  # (3,)
    queue_depth = _class_sum(waiting_n)
    share_n = waiting_n + arrivals.count
    class_share = jnp.where(
        jnp.sum(share_n) > _EPS, share_n / jnp.maximum(jnp.sum(share_n), _EPS), 1.0 / NUM_CLASSES
    )
    generated_rate = generated / dt
    metrics = IntervalMetrics(
        ttft_p50_s=ttft_p50,
        ttft_p99_s=ttft_p99,
        ttft_slo_ratio=ttft_slo_ratio,
        tpot_s=tpot,
        output_tokens=generated,
        good_tokens=good_tokens,
        tokens_per_s=generated_rate,
        quality_tokens_per_s=generated_rate * (1.0 - profile.quality_loss),
        prefill_tokens=prefill_tokens,
        admitted=admitted_n,
        completed=completed,
        slo_violations=violations,
        slo_violation_rate=jnp.clip(_safe_div(violations, decided), 0.0, 1.0),
        timeouts=timeouts,
        failed=failed,
        evictions=evicted,
        oom=oom.astype(jnp.float32),
        gpu_memory_bytes=jnp.where(oom, memory, memory_after),
        kv_capacity_tokens=capacity,
        kv_occupancy=jnp.clip(_safe_div(run_context, capacity), 0.0, 1.0),
        spec_acceptance=_safe_div(tps - 1.0, spec),
        num_gpus=num_gpus,
        cost_usd=num_gpus * profile.price_per_hour * dt / 3600.0,
        stall_s=busy,
        queue_depth=queue_depth,
        queue_mean_prompt=_safe_div(jnp.sum(new_queue[1]), queue_depth),
        class_share=class_share,
    )
    new_state = ServerState(
        *new_queue,
        run_seqs=run_seqs,
        run_context=run_context,
        run_remaining=run_remaining,
        swap_seqs=swap_seqs,
        swap_context=swap_context,
        swap_remaining=swap_remaining,
        stall_s=stall_next,
        prefill_warmup_s=warmup_next,
        config=config,
    )
    return new_state, metrics
