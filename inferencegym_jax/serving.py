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
* **Reconfiguration**: a new precision tier or a change of disaggregation loads new weights
  (weight_bytes / weight_load_bw) and restarts the engine (restart_s): the server stalls and
  the KV cache is lost (running sequences are preempted).

Counts are real-valued (expected requests) inside the fluid model; arrivals are integer.
TTFT = queue wait + prefill (own prompt and the prompts ahead of it) + KV transfer (when
disaggregated) + per-request overhead; its p50/p99 come from the distribution of waits of the
requests admitted in the interval and of those still waiting (at their current wait).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
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
    config: ServingAction


@struct.dataclass
class IntervalMetrics:
    """What one control interval produced; float32 scalars unless noted.

    Attributes:
      ttft_p50_s, ttft_p99_s: [s] percentiles of time to first token (see module docstring).
      ttft_slo_ratio: mean over requests of min(TTFT / class SLO, 4) / 4, in [0, 1].
      tpot_s: [s] wall time per output token of a running sequence (stalls included).
      output_tokens: [tokens] output tokens generated in the interval.
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
    return ServerState(zeros, zeros, zeros, zeros, z, z, z, z, z, z, z, config.replace(quant_tier=-jnp.ones((), jnp.float32)))


def select_profile(profiles: perf_model.Profile, tier: Array) -> perf_model.Profile:
    """The profile of one precision tier from the stacked (3,) profiles."""
    tier = jnp.clip(jnp.asarray(tier, jnp.int32), 0, 2)
    return jax.tree_util.tree_map(lambda x: x[tier], profiles)


def _safe_div(a: Array, b: Array) -> Array:
    return jnp.where(b > _EPS, a / jnp.where(b > _EPS, b, 1.0), 0.0)


def _binned_quantile(low: Array, high: Array, weights: Array, q: float) -> Array:
    """Quantile of a mixture of uniform bins [low_i, high_i] with `weights` (1-D, bins in order)."""
    total = jnp.sum(weights)
    cum = jnp.cumsum(weights)
    target = q * total
    i = jnp.clip(jnp.searchsorted(cum, target, side="left"), 0, weights.shape[0] - 1)
    frac = jnp.clip((target - (cum[i] - weights[i])) / jnp.maximum(weights[i], _EPS), 0.0, 1.0)
    return jnp.where(total > _EPS, low[i] + frac * (high[i] - low[i]), 0.0)


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
    disagg = config.prefill_disagg > 0.5
    num_gpus = jnp.where(disagg, 2.0, 1.0)

    # --- reconfiguration: new weights stall the engine and drop the KV cache -------------
    # A negative tier marks an engine not yet started: the first configuration is free.
    weights_changed = (state.config.quant_tier >= 0) & (
        (config.quant_tier != state.config.quant_tier) | (config.prefill_disagg != state.config.prefill_disagg)
    )
    reload_s = profile.weight_bytes / profile.weight_load_bw + params.restart_s
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
    q_count = state.queue_count.at[:, 0].add(arrivals.count)
    q_prompt = state.queue_prompt.at[:, 0].add(arrivals.prompt_tokens)
    q_output = state.queue_output.at[:, 0].add(arrivals.output_tokens)
    q_sq = state.queue_prompt_sq.at[:, 0].add(arrivals.prompt_sq_tokens)
    num_ages = q_count.shape[1]

    # --- admission limits -------------------------------------------------------------------
    tps = perf_model.tokens_per_step(profile, spec)
    mean_ctx = _safe_div(run_context, run_seqs)
    decode_batch = jnp.clip(jnp.minimum(run_seqs + jnp.sum(q_count) + swap_seqs, batch), 1.0, None)
    step_est = perf_model.decode_step_time(profile, decode_batch, mean_ctx, spec)
    mean_remaining = jnp.maximum(_safe_div(run_remaining, run_seqs), 1.0)
    finish_est = run_seqs * -jnp.expm1(-(t_avail / step_est) * tps / mean_remaining)
    slots = jnp.maximum(batch - run_seqs + finish_est, 0.0)
    kv_free = jnp.maximum(capacity * (1.0 - params.kv_watermark) - run_context, 0.0)
    prefill_rate = _PREFILL_REF_TOKENS / perf_model.prefill_time(profile, _PREFILL_REF_TOKENS)
    chunk = jnp.maximum(params.max_batched_tokens - decode_batch * (spec + 1.0), 0.0)
    chunk_s = chunk / prefill_rate
    # Share of engine time prefill may take: all of it on a dedicated GPU, else the chunk's
    # share of a mixed step (and all of it when nothing is decoding).
    share = jnp.where(disagg | (run_seqs < _EPS), 1.0, chunk_s / (chunk_s + step_est))
    prefill_cap = t_avail * share * prefill_rate
    token_cap = jnp.minimum(kv_free, prefill_cap)

    # Candidates in admission order: preempted first, then (class, age from oldest).
    cand_n = jnp.concatenate([swap_seqs[None], q_count[:, ::-1].reshape(-1)])
    cand_p = jnp.concatenate([swap_context[None], q_prompt[:, ::-1].reshape(-1)])
    cum_n = jnp.cumsum(cand_n)
    cum_p = jnp.cumsum(cand_p)
    before_n, before_p = cum_n - cand_n, cum_p - cand_p
    x = jnp.minimum(
        jnp.where(cand_n > _EPS, (slots - before_n) / jnp.maximum(cand_n, _EPS), 1.0),
        jnp.where(cand_p > _EPS, (token_cap - before_p) / jnp.maximum(cand_p, _EPS), 1.0),
    )
    x = jnp.clip(x, 0.0, 1.0)
    x = jnp.where(cand_n > _EPS, x, 0.0)
    x_swap, x_queue = x[0], x[1:].reshape(NUM_CLASSES, num_ages)[:, ::-1]  # back to (class, age)

    adm_n = x_queue * q_count
    adm_p = x_queue * q_prompt
    adm_o = x_queue * q_output
    adm_sq = x_queue * q_sq
    re_n, re_c, re_r = x_swap * swap_seqs, x_swap * swap_context, x_swap * swap_remaining
    swap_seqs, swap_context, swap_remaining = swap_seqs - re_n, swap_context - re_c, swap_remaining - re_r

    # --- prefill ------------------------------------------------------------------------------
    prefill_tokens = re_c + jnp.sum(adm_p)
    prefill_seqs = re_n + jnp.sum(adm_n)
    prefill_sq = re_c * _safe_div(re_c, re_n) + jnp.sum(adm_sq)
    prefill_s = perf_model.prefill_time(profile, prefill_tokens, jnp.maximum(prefill_seqs, 1.0), prefill_sq)
    decode_s = jnp.where(disagg, t_avail, jnp.maximum(t_avail - prefill_s, 0.0))
    # Wall-clock prefill throughput seen by a request in the queue [tokens/s].
    prefill_wall_rate = jnp.maximum(_safe_div(prefill_tokens, prefill_s) * share, _EPS)

    # --- TTFT of admitted requests, by (class, age): centre and half-width of a uniform ------
    # Queued requests (age a >= 1) arrived uniformly during the interval a intervals ago and
    # are prefilled at the start of this one after the tokens ahead of them; fresh arrivals wait
    # for the engine step in flight (uniform in [0, step]) and for their own prefill.
    ages = jnp.arange(num_ages, dtype=jnp.float32)
    ahead = (re_c + jnp.cumsum(cand_p[1:] * x[1:]) - cand_p[1:] * x[1:])  # tokens ahead in order
    ahead = ahead.reshape(NUM_CLASSES, num_ages)[:, ::-1]
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
    run_seqs = run_seqs + re_n + jnp.sum(adm_n)
    run_context = run_context + prefill_tokens
    run_remaining = run_remaining + re_r + jnp.sum(adm_o)
    concurrent = jnp.minimum(run_seqs, batch)
    ctx = _safe_div(run_context, run_seqs)
    step_s = perf_model.decode_step_time(profile, jnp.maximum(concurrent, 1.0), ctx, spec)
    per_seq_tokens = (decode_s / step_s) * tps * _safe_div(concurrent, run_seqs)
    mean_remaining = jnp.maximum(_safe_div(run_remaining, run_seqs), 1.0)
    done_frac = -jnp.expm1(-per_seq_tokens / mean_remaining)
    generated = run_remaining * done_frac
    completed = run_seqs * done_frac
    run_context = (run_context + generated) * (1.0 - done_frac)
    run_remaining = run_remaining - generated
    run_seqs = run_seqs - completed
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
    violations = (
        jnp.sum(jnp.where((ttft > slo) | tpot_bad, adm_n, 0.0)) + timeouts + jnp.sum(failed)
    )
    decided = jnp.sum(adm_n) + timeouts + failed
    # Pool classes per age bin (admitted at their TTFT, waiting at their current wait); each
    # bin is a uniform [centre - half-width, centre + half-width]; bins increase with age.
    weight_age = jnp.sum(adm_n + rest_n, axis=0)
    centre = _safe_div(jnp.sum(adm_n * ttft + rest_n * wait_now, axis=0), weight_age)
    half = _safe_div(jnp.sum(adm_n * ttft_half + rest_n * 0.5 * dt, axis=0), weight_age)
    low = jax.lax.cummax(jnp.where(weight_age > _EPS, jnp.maximum(centre - half, 0.0), 0.0))
    high = jnp.maximum(jax.lax.cummax(jnp.where(weight_age > _EPS, centre + half, 0.0)), low)
    ttft_p50 = _binned_quantile(low, high, weight_age, 0.5)
    ttft_p99 = _binned_quantile(low, high, weight_age, 0.99)
    ratio = jnp.minimum(adm_n * ttft + rest_n * wait_now, 4.0 * slo * (adm_n + rest_n)) / (4.0 * slo)
    ttft_slo_ratio = _safe_div(jnp.sum(ratio), jnp.sum(adm_n + rest_n))

    queue_depth = jnp.sum(new_queue[0])
    share_n = jnp.sum(new_queue[0], axis=1) + arrivals.count
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
        tokens_per_s=generated_rate,
        quality_tokens_per_s=generated_rate * (1.0 - profile.quality_loss),
        prefill_tokens=prefill_tokens,
        admitted=jnp.sum(adm_n),
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
        config=config,
    )
    return new_state, metrics
