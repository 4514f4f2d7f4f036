"""The serving dynamics, reward and observation in plain NumPy, vectorised over envs.

A second implementation of one environment step (`workload.advance`, `serving.serve_interval`,
the env's reward, observation and auto-reset), written as array code over a leading env axis
with no Python loop per env. It has two uses:

* **parity**: fed the same state, action and random draws as the JAX env, it returns the same
  next state, observation and reward within float32 tolerance (tests/test_reference.py, on
  every registered task);
* **speed baseline**: `ReferenceEnv` with its own NumPy sampler is what `inferencegym bench`
  sets the JAX env against.

It also documents the dynamics in the plainest form: read `serve_interval` next to the module
docstring of `serving`. Shapes: N envs; per-env scalars are (N,), per-class values (N, 3), the
queue (N, 3, A) with A = num_age_buckets; everything float32. States, draws and metrics are the
same pytree classes as the JAX env's (`serving.ServerState`, `workload.Draws`, ...) holding
NumPy arrays with the leading env axis; `to_numpy` converts any pytree of JAX arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax import serving, workload
from inferencegym_jax.actions import GRID, KNOBS, ServingAction
from inferencegym_jax.env import (
    CONTEXT_SCALE, MAX_BATCH, QUEUE_SCALE, RATE_EMA_WEIGHT, EnvParams, EnvState, Observation,
)
from inferencegym_jax.profiles import SPEC_LENGTHS
from inferencegym_jax.serving import IntervalMetrics, ServerState
from inferencegym_jax.workload import NUM_CLASSES, Arrivals, Draws, WorkloadState

F32 = np.float32
_EPS = F32(serving._EPS)


def to_numpy(tree: Any) -> Any:
    """A pytree with every leaf as a NumPy array (float leaves as float32)."""
    import jax

    def leaf(x):
        x = np.asarray(x)
        return x.astype(F32) if np.issubdtype(x.dtype, np.floating) else x

    return jax.tree_util.tree_map(leaf, tree)


def _safe_div(a, b):
    ok = b > _EPS
    return np.where(ok, a / np.where(ok, b, F32(1.0)), F32(0.0)).astype(F32)


# ----------------------------------------------------------------------------- roofline
# perf_model in NumPy; `p` is a dict of per-env (N,) profile fields (`_select_profile`).


def _select_profile(profiles, tier: np.ndarray) -> dict[str, np.ndarray]:
    tier = np.clip(tier.astype(np.int32), 0, 2)
    return {name: np.asarray(getattr(profiles, name))[tier] for name in profiles.__dataclass_fields__}


def _smooth_max(a, b, power):
    top = np.maximum(np.maximum(a, b), F32(1e-30))
    return top * ((a / top) ** power + (b / top) ** power) ** (F32(1.0) / power)


def _forward_time(p, n, kv_tokens, attn_flops, lm_head_tokens):
    gemm_mem = p["weight_read_bytes"] / p["mem_bw"]
    gemm_comp = F32(2.0) * p["linear_params"] * n / p["linear_flops"] + (
        F32(2.0) * p["lm_head_params"] * lm_head_tokens / p["bf16_flops"]
    )
    attn_mem = kv_tokens * p["kv_bytes_per_token"] / p["mem_bw"]
    attn_comp = attn_flops / p["bf16_flops"]
    elementwise = n * p["elementwise_bytes_per_token"] / p["mem_bw"] + p["fixed_kernel_s"]
    k = p["knee_sharpness"]
    return _smooth_max(gemm_mem, gemm_comp, k) + _smooth_max(attn_mem, attn_comp, k) + elementwise


def _tokens_per_step(p, spec):
    """Linear interpolation in the (N, 5) table at SPEC_LENGTHS, as jnp.interp does it."""
    xp = np.asarray(SPEC_LENGTHS, F32)
    fp = p["spec_tokens_per_step"]
    i = np.clip(np.searchsorted(xp, spec, side="right"), 1, len(xp) - 1)
    rows = np.arange(fp.shape[0])
    f0, f1 = fp[rows, i - 1], fp[rows, i]
    f = f0 + ((spec - xp[i - 1]) / (xp[i] - xp[i - 1])) * (f1 - f0)
    return np.where(spec > xp[-1], fp[:, -1], np.where(spec < xp[0], fp[:, 0], f)).astype(F32)


def _draft_token_time(p, batch, ctx):
    t_mem = (F32(2.0) * p["draft_params"] + p["draft_layer_fraction"] * batch * ctx * p["kv_bytes_per_token"]) / p["mem_bw"]
    t_comp = F32(2.0) * p["draft_params"] * batch / p["bf16_flops"]
    return np.where(p["draft_params"] > 0, _smooth_max(t_mem, t_comp, p["knee_sharpness"]), F32(0.0))


def _decode_step_time(p, batch, ctx, spec):
    n = batch * (spec + F32(1.0))
    verify = _forward_time(p, n, batch * ctx, p["attn_flops_per_token_context"] * ctx * n, n)
    return (verify + spec * _draft_token_time(p, batch, ctx) + p["step_overhead_s"]).astype(F32)


def _prefill_time(p, tokens, seqs, sum_sq):
    attn = F32(0.5) * p["attn_flops_per_token_context"] * sum_sq
    t = _forward_time(p, tokens, tokens, attn, seqs) + p["step_overhead_s"]
    return np.where(tokens > 0, t, F32(0.0)).astype(F32)


def _kv_capacity(p, kv_budget):
    free = np.maximum(p["hbm_bytes"] - p["weight_bytes"] - p["reserve_bytes"], F32(0.0))
    return (kv_budget * free / p["kv_bytes_per_token"]).astype(F32)


# ----------------------------------------------------------------------------- workload


def _lognormal_partial_moment(median, sigma, low, high, k):
    from math import erf, sqrt

    ndtr = np.vectorize(lambda x: 0.5 * (1.0 + erf(x / sqrt(2.0))))
    mu = np.log(median.astype(np.float64))
    a = (np.log(low) - mu) / sigma
    b = (np.log(high) - mu) / sigma
    inside = np.exp(k * mu + 0.5 * (k * sigma) ** 2) * (ndtr(b - k * sigma) - ndtr(a - k * sigma))
    return inside + low**k * ndtr(a) + high**k * (1.0 - ndtr(b))


def length_moments(dist: workload.LengthDist) -> tuple[np.ndarray, np.ndarray]:
    """First and second moments [tokens, tokens^2] of each class's length distribution, (3,)."""
    d = to_numpy(dist)
    lo, hi = d.low.astype(np.float64), d.high.astype(np.float64)
    moments = []
    for k, uniform in ((1, 0.5 * (lo + hi)), (2, (lo * lo + lo * hi + hi * hi) / 3.0)):
        c1 = _lognormal_partial_moment(d.median1, d.sigma1, lo, hi, k)
        c2 = _lognormal_partial_moment(d.median2, d.sigma2, lo, hi, k)
        w = np.where(d.kind == 2, d.weight2, 0.0)
        moments.append(np.where(d.kind == 0, uniform, (1.0 - w) * c1 + w * c2).astype(F32))
    return moments[0], moments[1]


def _burst_on(state: WorkloadState, t_s, params: workload.WorkloadParams):
    if params.schedule == "periodic":
        return np.mod(t_s + state.phase_s, params.burst_period_s) < params.burst_duration_s
    if params.schedule == "mmpp":
        return state.in_burst
    return np.zeros(np.shape(state.phase_s), bool)


def arrival_rate(state: WorkloadState, t_s, params: workload.WorkloadParams) -> np.ndarray:
    """Scheduled arrival rate [req/s] per env, (N,)."""
    return (params.base_rate * np.where(_burst_on(state, t_s, params), params.burst_multiplier, F32(1.0))).astype(F32)


def sample_draws(rng: np.random.Generator, state: WorkloadState, t_s, dt_s, params) -> Draws:
    """The interval's random draws from a NumPy generator (exact Poisson counts)."""
    n = np.shape(state.phase_s)[0]
    lam = arrival_rate(state, t_s, params)[:, None] * dt_s * params.class_mix[None, :]
    return Draws(
        count=rng.poisson(lam).astype(F32),
        z_prompt=rng.standard_normal((n, NUM_CLASSES), F32),
        z_output=rng.standard_normal((n, NUM_CLASSES), F32),
        u_burst=rng.random(n, F32),
    )


def _sum_of_lengths(z, count, moments, dist):
    m1, m2 = moments
    var = np.maximum(m2 - m1 * m1, F32(0.0))
    total = np.clip(count * m1 + np.sqrt(count * var) * z, count * dist.low, count * dist.high)
    return total.astype(F32), (count * m2).astype(F32)


def _trace_arrivals(state: WorkloadState, t_s, dt_s, params) -> Arrivals:
    tr = params.trace
    start, end = state.phase_s + t_s, state.phase_s + (t_s + dt_s)  # as workload: intervals partition the trace
    cols = []
    for c in range(NUM_CLASSES):  # a loop over the three classes, not over envs
        i0 = np.searchsorted(tr.arrival_s[c], start, side="left") - 1
        i1 = np.searchsorted(tr.arrival_s[c], end, side="left") - 1
        cols.append([(i1 - i0).astype(F32)] + [cs[c][i1] - cs[c][i0] for cs in
                                                  (tr.prompt_cumsum, tr.output_cumsum, tr.prompt_sq_cumsum)])
    count, prompt, output, sq = (np.stack([col[j] for col in cols], axis=1).astype(F32) for j in range(4))
    return Arrivals(count, prompt, output, sq, (np.sum(count, axis=1) / dt_s).astype(F32))


def advance(draws: Draws, state: WorkloadState, t_s, dt_s, params, moments) -> tuple[WorkloadState, Arrivals]:
    """`workload.advance`: arrivals of the interval and the next traffic state."""
    if params.schedule == "trace":
        return state, _trace_arrivals(state, t_s, dt_s, params)
    rate = arrival_rate(state, t_s, params)
    count = draws.count
    prompt, prompt_sq = _sum_of_lengths(draws.z_prompt, count, moments["prompt"], params.prompt)
    output, _ = _sum_of_lengths(draws.z_output, count, moments["output"], params.output)
    arrivals = Arrivals(count, prompt, np.maximum(output, count), prompt_sq, rate)
    if params.schedule == "mmpp":
        flip = np.where(state.in_burst, dt_s / params.burst_duration_s, dt_s / params.burst_gap_s)
        state = state.replace(in_burst=np.where(draws.u_burst < flip, ~state.in_burst, state.in_burst))
    return state, arrivals


def init_workload(u: np.ndarray, params, episode_s) -> WorkloadState:
    """`workload.init_from_draws` for (N, 2) uniforms."""
    if params.schedule == "trace":
        phase = u[:, 0] * np.maximum(np.min(params.trace.duration_s) - episode_s, F32(0.0))
    else:
        phase = u[:, 0] * params.burst_period_s
    p_on = params.burst_duration_s / (params.burst_duration_s + params.burst_gap_s)
    in_burst = (params.schedule == "mmpp") & (u[:, 1] < p_on)
    return WorkloadState(in_burst=np.asarray(in_burst), phase_s=phase.astype(F32))


# ----------------------------------------------------------------------------- serving


def _binned_quantile(low, high, weights, q):
    """Quantile of a mixture of uniform bins, per env: (N, B) bins -> (N,)."""
    total = np.sum(weights, axis=1)
    cum = np.cumsum(weights, axis=1)
    target = q * total
    i = np.clip(np.sum(cum < target[:, None], axis=1), 0, weights.shape[1] - 1)  # searchsorted left
    take = lambda a: np.take_along_axis(a, i[:, None], axis=1)[:, 0]  # noqa: E731
    frac = np.clip((target - (take(cum) - take(weights))) / np.maximum(take(weights), _EPS), 0.0, 1.0)
    return np.where(total > _EPS, take(low) + frac * (take(high) - take(low)), F32(0.0)).astype(F32)


def _evict(seqs, context, remaining, excess):
    frac = np.clip(_safe_div(excess, context), 0.0, 1.0)
    return frac * seqs, frac * context, frac * remaining


def serve_interval(
    state: ServerState, arrivals: Arrivals, config: ServingAction, params: serving.ServerParams
) -> tuple[ServerState, IntervalMetrics]:
    """`serving.serve_interval` for N envs at once (see that module's docstring)."""
    dt = params.dt_s
    p = _select_profile(params.profiles, config.quant_tier)
    batch, spec = config.batch_size, config.spec_length
    disagg_requested = config.prefill_disagg > 0.5
    num_gpus = np.where(disagg_requested, F32(2.0), F32(1.0))  # billed from the request
    cls = lambda x: x[:, :, None]  # noqa: E731  (N, 3) -> (N, 3, 1)
    env = lambda x: x[:, None, None]  # noqa: E731  (N,) -> (N, 1, 1)

    # reconfiguration: a new precision stalls the engine and drops its KV cache; a prefill GPU
    # turned on takes the same time to come up while this engine keeps serving
    old = state.config
    started = old.quant_tier >= 0
    weights_changed = started & (config.quant_tier != old.quant_tier)
    reload_s = p["weight_bytes"] / p["weight_load_bw"] + params.restart_s
    newly_on = started & disagg_requested & (old.prefill_disagg < 0.5)
    prefill_up_s = p["weight_bytes"] / p["weight_load_bw"] + params.prefill_start_s
    warmup = np.where(disagg_requested, np.where(newly_on, prefill_up_s, state.prefill_warmup_s), F32(0.0))
    disagg = disagg_requested & (warmup <= 0.0)
    warmup_next = np.maximum(warmup - dt, F32(0.0))
    stall = state.stall_s + np.where(weights_changed, reload_s, F32(0.0))
    busy = np.minimum(stall, dt)
    t_avail = dt - busy
    drop = np.where(weights_changed, F32(1.0), F32(0.0))
    swap_seqs = state.swap_seqs + drop * state.run_seqs
    swap_context = state.swap_context + drop * state.run_context
    swap_remaining = state.swap_remaining + drop * state.run_remaining
    evicted = drop * state.run_seqs
    keep = F32(1.0) - drop
    run_seqs, run_context, run_remaining = keep * state.run_seqs, keep * state.run_context, keep * state.run_remaining

    # KV capacity: shrink-eviction when the budget went down
    capacity = _kv_capacity(p, config.kv_budget)
    ev = _evict(run_seqs, run_context, run_remaining, run_context - capacity)
    run_seqs, run_context, run_remaining = run_seqs - ev[0], run_context - ev[1], run_remaining - ev[2]
    swap_seqs, swap_context, swap_remaining = swap_seqs + ev[0], swap_context + ev[1], swap_remaining + ev[2]
    evicted = evicted + ev[0]

    # queue with this interval's arrivals at age 0
    q_count, q_prompt, q_output, q_sq = (a.copy() for a in (state.queue_count, state.queue_prompt,
                                                             state.queue_output, state.queue_prompt_sq))
    q_count[:, :, 0] += arrivals.count
    q_prompt[:, :, 0] += arrivals.prompt_tokens
    q_output[:, :, 0] += arrivals.output_tokens
    q_sq[:, :, 0] += arrivals.prompt_sq_tokens
    n_env, _, num_ages = q_count.shape

    # admission limits
    tps = _tokens_per_step(p, spec)
    mean_ctx = _safe_div(run_context, run_seqs)
    decode_batch = np.maximum(np.minimum(run_seqs + q_count.sum(axis=(1, 2)) + swap_seqs, batch), F32(1.0))
    step_est = _decode_step_time(p, decode_batch, mean_ctx, spec)
    mean_remaining = np.maximum(_safe_div(run_remaining, run_seqs), F32(1.0))
    finish_est = run_seqs * -np.expm1(-(t_avail / step_est) * tps / mean_remaining)
    slots = np.maximum(batch - run_seqs + finish_est, F32(0.0))
    kv_free = np.maximum(capacity * (F32(1.0) - params.kv_watermark) - run_context, F32(0.0))
    ref = np.full(n_env, serving._PREFILL_REF_TOKENS, F32)
    prefill_rate = ref / _prefill_time(p, ref, np.ones(n_env, F32), ref * ref)
    chunk = np.maximum(params.max_batched_tokens - decode_batch * (spec + F32(1.0)), F32(0.0))
    chunk_s = chunk / prefill_rate
    share = np.where(disagg | (run_seqs < _EPS), F32(1.0), chunk_s / (chunk_s + step_est))
    token_cap = np.minimum(kv_free, t_avail * share * prefill_rate)

    # admission order: preempted first, then class 0, 1, 2, oldest first within a class; each
    # bin is admitted up to the slots and prefill tokens left after the bins ahead of it
    def admit(count, before, limit):
        return np.where(count > _EPS, (limit - before) / np.maximum(count, _EPS), F32(1.0))

    x_swap = np.minimum(admit(swap_seqs, 0.0, slots), admit(swap_context, 0.0, token_cap))
    x_swap = np.where(swap_seqs > _EPS, np.clip(x_swap, 0.0, 1.0), F32(0.0))
    older = lambda q: np.cumsum(q[:, :, ::-1], axis=2)[:, :, ::-1] - q  # noqa: E731  older ages, same class
    earlier = lambda c: np.cumsum(c, axis=1) - c  # noqa: E731  earlier classes
    before_n = env(swap_seqs) + cls(earlier(q_count.sum(axis=2))) + older(q_count)
    before_p = env(swap_context) + cls(earlier(q_prompt.sum(axis=2))) + older(q_prompt)
    x_queue = np.minimum(admit(q_count, before_n, env(slots)), admit(q_prompt, before_p, env(token_cap)))
    x_queue = np.where(q_count > _EPS, np.clip(x_queue, 0.0, 1.0), F32(0.0)).astype(F32)

    adm_n, adm_p, adm_o, adm_sq = x_queue * q_count, x_queue * q_prompt, x_queue * q_output, x_queue * q_sq
    re_n, re_c, re_r = x_swap * swap_seqs, x_swap * swap_context, x_swap * swap_remaining
    swap_seqs, swap_context, swap_remaining = swap_seqs - re_n, swap_context - re_c, swap_remaining - re_r

    # prefill
    prefill_tokens = re_c + adm_p.sum(axis=(1, 2))
    prefill_seqs = re_n + adm_n.sum(axis=(1, 2))
    prefill_sq = re_c * _safe_div(re_c, re_n) + adm_sq.sum(axis=(1, 2))
    prefill_s = _prefill_time(p, prefill_tokens, np.maximum(prefill_seqs, F32(1.0)), prefill_sq)
    decode_s = np.where(disagg, t_avail, np.maximum(t_avail - prefill_s, F32(0.0)))
    prefill_wall_rate = np.maximum(_safe_div(prefill_tokens, prefill_s) * share, _EPS)

    # TTFT of admitted requests by (class, age): centre and half-width of a uniform
    ages = np.arange(num_ages, dtype=F32)
    ahead = np.minimum(before_p, env(prefill_tokens))  # admission takes a prefix of the order
    mean_prompt = _safe_div(q_prompt, q_count)
    own_s = mean_prompt / env(prefill_wall_rate)
    position_s = (ahead + F32(0.5) * adm_p) / env(prefill_wall_rate)
    fresh_prefill = np.maximum(position_s - F32(0.5) * dt, own_s)
    transfer_s = np.where(env(disagg), mean_prompt * env(p["kv_bytes_per_token"]) / env(p["kv_link_bw"]), F32(0.0))
    fixed = env(busy) + transfer_s + env(p["request_overhead_s"])
    fresh = ages < 1
    ttft = np.where(fresh, F32(0.5) * env(step_est) + fresh_prefill, (ages - F32(0.5)) * dt + position_s) + fixed
    ttft_half = np.where(fresh, F32(0.5) * (env(step_est) + fresh_prefill), F32(0.5) * dt)

    # decode
    run_seqs = run_seqs + re_n + adm_n.sum(axis=(1, 2))
    run_context = run_context + prefill_tokens
    run_remaining = run_remaining + re_r + adm_o.sum(axis=(1, 2))
    concurrent = np.minimum(run_seqs, batch)
    step_s = _decode_step_time(p, np.maximum(concurrent, F32(1.0)), _safe_div(run_context, run_seqs), spec)
    per_seq_tokens = (decode_s / step_s) * tps * _safe_div(concurrent, run_seqs)
    rate = per_seq_tokens / np.maximum(_safe_div(run_remaining, run_seqs), F32(1.0))
    done_frac, left_frac = -np.expm1(-rate), np.exp(-rate)  # memoryless completions
    generated = run_remaining * done_frac
    completed = run_seqs * done_frac
    run_context = (run_context + generated) * left_frac
    run_remaining = run_remaining * left_frac
    run_seqs = run_seqs * left_frac
    tpot = np.where(run_seqs + completed > _EPS, np.minimum(dt / np.maximum(per_seq_tokens, _EPS), dt), step_s / tps)

    # KV overflow from decode growth: preempt the newest
    ev = _evict(run_seqs, run_context, run_remaining, run_context - capacity)
    run_seqs, run_context, run_remaining = run_seqs - ev[0], run_context - ev[1], run_remaining - ev[2]
    swap_seqs, swap_context, swap_remaining = swap_seqs + ev[0], swap_context + ev[1], swap_remaining + ev[2]
    evicted = evicted + ev[0]

    # memory and out-of-memory: every running and preempted sequence fails, the engine restarts
    memory = p["weight_bytes"] + run_context * p["kv_bytes_per_token"] + p["reserve_bytes"]
    oom = memory > params.memory_limit_bytes
    failed = np.where(oom, run_seqs + swap_seqs, F32(0.0))
    lost = np.where(oom, F32(0.0), F32(1.0))
    run_seqs, run_context, run_remaining = lost * run_seqs, lost * run_context, lost * run_remaining
    swap_seqs, swap_context, swap_remaining = lost * swap_seqs, lost * swap_context, lost * swap_remaining
    memory_after = p["weight_bytes"] + run_context * p["kv_bytes_per_token"] + p["reserve_bytes"]
    stall_next = stall - busy + np.where(oom, params.restart_s, F32(0.0))

    # queue: remove admitted, time out the oldest, age by one
    rest = [q_count - adm_n, q_prompt - adm_p, q_output - adm_o, q_sq - adm_sq]
    timeouts = rest[0][:, :, -1].sum(axis=1)
    new_queue = [np.concatenate([np.zeros_like(a[:, :, :1]), a[:, :, :-1]], axis=2) for a in rest]

    # latency statistics
    rest_n = rest[0]
    slo = params.ttft_slo_s[None, :, None]
    wait_now = (ages + F32(0.5)) * dt
    late = (ttft > slo) | env(tpot > params.tpot_slo_s)
    violations = np.where(late, adm_n, F32(0.0)).sum(axis=(1, 2)) + timeouts + failed
    good_tokens = np.where(late, F32(0.0), adm_o).sum(axis=(1, 2))  # goodput, counted at admission
    decided = adm_n.sum(axis=(1, 2)) + timeouts + failed
    weight_age = (adm_n + rest_n).sum(axis=1)
    centre = _safe_div((adm_n * ttft + rest_n * wait_now).sum(axis=1), weight_age)
    half = _safe_div((adm_n * ttft_half + rest_n * F32(0.5) * dt).sum(axis=1), weight_age)
    has_w = weight_age > _EPS
    low = np.maximum.accumulate(np.where(has_w, np.maximum(centre - half, F32(0.0)), F32(0.0)), axis=1)
    high = np.maximum(np.maximum.accumulate(np.where(has_w, centre + half, F32(0.0)), axis=1), low)
    ratio = np.minimum(adm_n * ttft + rest_n * wait_now, F32(4.0) * slo * (adm_n + rest_n)) / (F32(4.0) * slo)
    queue_depth = new_queue[0].sum(axis=(1, 2))
    share_n = new_queue[0].sum(axis=2) + arrivals.count
    total_n = share_n.sum(axis=1, keepdims=True)
    class_share = np.where(total_n > _EPS, share_n / np.maximum(total_n, _EPS), F32(1.0 / NUM_CLASSES))
    generated_rate = generated / dt
    f32 = lambda x: np.asarray(x, F32)  # noqa: E731
    metrics = IntervalMetrics(
        ttft_p50_s=_binned_quantile(low, high, weight_age, 0.5),
        ttft_p99_s=_binned_quantile(low, high, weight_age, 0.99),
        ttft_slo_ratio=_safe_div(ratio.sum(axis=(1, 2)), (adm_n + rest_n).sum(axis=(1, 2))),
        tpot_s=f32(tpot),
        output_tokens=f32(generated),
        good_tokens=f32(good_tokens),
        tokens_per_s=f32(generated_rate),
        quality_tokens_per_s=f32(generated_rate * (F32(1.0) - p["quality_loss"])),
        prefill_tokens=f32(prefill_tokens),
        admitted=f32(adm_n.sum(axis=(1, 2))),
        completed=f32(completed),
        slo_violations=f32(violations),
        slo_violation_rate=np.clip(_safe_div(violations, decided), 0.0, 1.0),
        timeouts=f32(timeouts),
        failed=f32(failed),
        evictions=f32(evicted),
        oom=f32(oom),
        gpu_memory_bytes=f32(np.where(oom, memory, memory_after)),
        kv_capacity_tokens=capacity,
        kv_occupancy=np.clip(_safe_div(run_context, capacity), 0.0, 1.0),
        spec_acceptance=_safe_div(tps - F32(1.0), spec),
        num_gpus=f32(num_gpus),
        cost_usd=f32(num_gpus * p["price_per_hour"] * dt / F32(3600.0)),
        stall_s=f32(busy),
        queue_depth=f32(queue_depth),
        queue_mean_prompt=_safe_div(new_queue[1].sum(axis=(1, 2)), queue_depth),
        class_share=f32(class_share),
    )
    new_state = ServerState(
        *(f32(q) for q in new_queue),
        run_seqs=f32(run_seqs),
        run_context=f32(run_context),
        run_remaining=f32(run_remaining),
        swap_seqs=f32(swap_seqs),
        swap_context=f32(swap_context),
        swap_remaining=f32(swap_remaining),
        stall_s=f32(stall_next),
        prefill_warmup_s=f32(warmup_next),
        config=config,
    )
    return new_state, metrics


# ----------------------------------------------------------------------------- env


def apply_action(indices: np.ndarray, params: EnvParams) -> ServingAction:
    """`actions.clip_action` for (N, 5) int grid indices: clip, look up, mask inactive knobs."""
    n = indices.shape[0]
    values = []
    for i, (grid, active) in enumerate(zip(GRID, params.active_knobs)):
        default = np.asarray(getattr(params.default_action, KNOBS[i]), F32)
        grid = np.asarray(grid, F32)
        picked = grid[np.clip(indices[:, i], 0, len(grid) - 1)]
        values.append(picked if active else np.full(n, default, F32))
    return ServingAction(*values)


def reward(
    m: IntervalMetrics, params: EnvParams, applied: ServingAction, changed: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-interval reward in [-1, 1] and its components (env.InferenceGymEnv.reward)."""
    r = params.reward
    tier = np.clip(applied.quant_tier.astype(np.int32), 0, 2)
    quality = F32(1.0) - np.asarray(params.server.profiles.quality_loss, F32)[tier]
    offered = r.throughput_ref * params.server.dt_s
    throughput = np.clip(m.good_tokens * quality / offered, 0.0, 2.0)
    over = m.cost_usd - r.cost_budget_per_1k * m.output_tokens / F32(1000.0)
    cost = np.clip(over / (r.cost_budget_per_1k * offered / F32(1000.0)), -1.0, 1.0)
    stability = changed.astype(F32)
    w = r.weights
    total = (w[0] * throughput - w[1] * m.ttft_slo_ratio - w[2] * m.slo_violation_rate - w[3] * cost
             - w[4] * stability)
    components = {"throughput": throughput, "latency": m.ttft_slo_ratio, "violations": m.slo_violation_rate,
                  "cost": cost, "stability": stability}
    return np.clip(total, -1.0, 1.0).astype(F32), components


def get_obs(state: EnvState, params: EnvParams) -> Observation:
    """env.InferenceGymEnv.get_obs for N envs."""
    m = state.last
    c = state.server.config
    config = np.stack([np.asarray(getattr(c, k), F32) for k in KNOBS], axis=1)
    default = np.asarray([getattr(params.default_action, k) for k in KNOBS], F32)
    config = np.where(config < 0, default[None, :], config)
    return Observation(
        queue_depth=state.server.queue_count.sum(axis=(1, 2)),
        mean_prompt_len=m.queue_mean_prompt,
        arrival_rate_ema=state.arrival_rate_ema,
        kv_occupancy=m.kv_occupancy,
        ttft_p50_s=m.ttft_p50_s,
        ttft_p99_s=m.ttft_p99_s,
        tpot_p50_s=m.tpot_s,
        slo_violation_rate=m.slo_violation_rate,
        gpu_memory_gb=m.gpu_memory_bytes / F32(1e9),
        spec_acceptance=m.spec_acceptance,
        priority_mix=m.class_share,
        timestep=state.time.astype(F32),
        cost_so_far=state.cost_so_far,
        running_seqs=state.server.run_seqs,
        config=config,
    )


def flatten_observation(obs: Observation, params: EnvParams) -> np.ndarray:
    """env.InferenceGymEnv.flatten_observation for N envs: (N, 21) in [0, 1]."""
    s, wl = params.server, params.workload
    slo_ref = np.sum(wl.class_mix * s.ttft_slo_s)
    frac = {"periodic": min(float(wl.burst_duration_s / wl.burst_period_s), 1.0),
            "mmpp": float(wl.burst_duration_s / (wl.burst_duration_s + wl.burst_gap_s))}.get(wl.schedule, 0.0)
    if wl.schedule == "trace":
        n = np.sum(np.isfinite(wl.trace.arrival_s[:, 1:]), axis=1)
        mean_rate = np.sum(n / wl.trace.duration_s)
    else:
        mean_rate = wl.base_rate * (1.0 + frac * (wl.burst_multiplier - 1.0))
    peak_rate = mean_rate + wl.base_rate * (wl.burst_multiplier - 1.0)
    horizon = F32(params.max_steps_in_episode)
    max_cost = 2.0 * np.max(s.profiles.price_per_hour) * horizon * s.dt_s / 3600.0
    c = obs.config
    parts = [
        np.log1p(obs.queue_depth) / np.log1p(F32(QUEUE_SCALE)),
        obs.mean_prompt_len / F32(CONTEXT_SCALE),
        obs.arrival_rate_ema / np.maximum(peak_rate, 1e-6),
        obs.kv_occupancy,
        obs.ttft_p50_s / (4.0 * slo_ref),
        obs.ttft_p99_s / (4.0 * slo_ref),
        obs.tpot_p50_s / (4.0 * s.tpot_slo_s),
        obs.slo_violation_rate,
        obs.gpu_memory_gb * 1e9 / s.memory_limit_bytes,
        obs.spec_acceptance,
        *[obs.priority_mix[:, i] for i in range(NUM_CLASSES)],
        obs.timestep / horizon,
        obs.cost_so_far / max_cost,
        obs.running_seqs / F32(MAX_BATCH),
        (c[:, 0] - 0.1) / 0.9,
        c[:, 1] / 8.0,
        np.log2(np.maximum(c[:, 2], 1.0)) / 9.0,
        c[:, 3],
        c[:, 4] / 2.0,
    ]
    return np.clip(np.stack(parts, axis=1), 0.0, 1.0).astype(F32)


def _zero_metrics(n: int) -> IntervalMetrics:
    fields = {f: np.zeros(n, F32) for f in IntervalMetrics.__dataclass_fields__}
    fields["class_share"] = np.full((n, NUM_CLASSES), 1.0 / NUM_CLASSES, F32)
    return IntervalMetrics(**fields)


def reset(u: np.ndarray, params: EnvParams) -> tuple[Observation, EnvState]:
    """env.reset_env for N envs from (N, 2) uniforms (`workload.reset_draws`)."""
    n = u.shape[0]
    ages = params.server.num_age_buckets
    zeros = np.zeros((n, NUM_CLASSES, ages), F32)
    z = np.zeros(n, F32)
    d = params.default_action
    config = ServingAction(*[np.full(n, getattr(d, k), F32) for k in KNOBS])
    config = config.replace(quant_tier=np.full(n, -1.0, F32))
    server = ServerState(zeros, zeros.copy(), zeros.copy(), zeros.copy(), z, z, z, z, z, z, z, z, config)
    horizon_s = F32(params.max_steps_in_episode) * params.server.dt_s
    state = EnvState(server, init_workload(u, params.workload, horizon_s), np.zeros(n, np.int32), z, z, _zero_metrics(n))
    return get_obs(state, params), state


def step_env(state: EnvState, action: np.ndarray, draws: Draws, params: EnvParams, moments) -> tuple:
    """env.step_env for N envs given the interval's draws: obs, state, reward, terminated, truncated, info."""
    applied = apply_action(action, params)
    dt = params.server.dt_s
    t_s = state.time.astype(F32) * dt
    wl_state, arrivals = advance(draws, state.workload, t_s, dt, params.workload, moments)
    server, m = serve_interval(state.server, arrivals, applied, params.server)
    ema = F32(1.0 - RATE_EMA_WEIGHT) * state.arrival_rate_ema + F32(RATE_EMA_WEIGHT) * arrivals.count.sum(axis=1) / dt
    time = state.time + 1
    new_state = EnvState(server, wl_state, time, ema.astype(F32), (state.cost_so_far + m.cost_usd).astype(F32), m)
    c = state.server.config
    previous = np.stack([np.asarray(getattr(c, k), F32) for k in KNOBS], axis=1)
    now = np.stack([np.asarray(getattr(applied, k), F32) for k in KNOBS], axis=1)
    changed = (previous[:, 4] >= 0) & np.any(np.abs(now - previous) > 1e-6, axis=1)
    r, components = reward(m, params, applied, changed)
    truncated = time >= params.max_steps_in_episode
    info = {"metrics": m, "applied_action": applied, "reward_components": components, "arrivals": arrivals}
    return get_obs(new_state, params), new_state, r, np.zeros_like(truncated), truncated, info


def _select(done: np.ndarray, a: Any, b: Any) -> Any:
    import jax

    return jax.tree_util.tree_map(lambda x, y: np.where(done.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def step(state: EnvState, action: np.ndarray, draws: Draws, u_reset: np.ndarray, params: EnvParams, moments) -> tuple:
    """env.step for N envs: one interval, then auto-reset (from `u_reset`, (N, 2)) where done."""
    obs, next_state, r, terminated, truncated, info = step_env(state, action, draws, params, moments)
    obs_reset, state_reset = reset(u_reset, params)
    done = terminated | truncated
    info["final_observation"] = obs
    return _select(done, obs_reset, obs), _select(done, state_reset, next_state), r, terminated, truncated, info


class ReferenceEnv:
    """N parallel envs of one task in NumPy, with their own sampler (the speed baseline).

        ref = ReferenceEnv(params, num_envs=1024, seed=0)
        obs = ref.reset()
        obs, reward, terminated, truncated, info = ref.step(actions)   # (N, 5) int grid indices
    """

    def __init__(self, params: EnvParams, num_envs: int, seed: int = 0):
        self.params = to_numpy(params)
        self.num_envs = int(num_envs)
        self.rng = np.random.default_rng(seed)
        self.moments = {"prompt": length_moments(params.workload.prompt), "output": length_moments(params.workload.output)}
        self.state: EnvState | None = None

    def reset(self) -> Observation:
        obs, self.state = reset(self.rng.random((self.num_envs, 2), F32), self.params)
        return obs

    def step(self, action: np.ndarray) -> tuple:
        p = self.params
        t_s = self.state.time.astype(F32) * p.server.dt_s
        draws = sample_draws(self.rng, self.state.workload, t_s, p.server.dt_s, p.workload)
        u_reset = self.rng.random((self.num_envs, 2), F32)
        obs, self.state, r, terminated, truncated, info = step(self.state, action, draws, u_reset, p, self.moments)
        return obs, r, terminated, truncated, info
