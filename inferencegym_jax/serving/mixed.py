"""The mixed engine (`ServerParams.engine == "mixed"`): chunked prefill inside the decode iterations.

The phases are the fluid engine's (`serving.serve_interval`: reconfiguration, KV preemption,
admission by class and age, decode, out-of-memory restarts, SLO accounting, timeouts), with four
changes that follow a vLLM V1 worker (issue 41; experiments/crosscheck/README.md has the studies):

1. **One forward per iteration** (`serving.iteration`): prompt chunks ride beside the decodes
   under `max_batched_tokens`, so prefilling P tokens costs the interval P x c of engine time (c
   the marginal time of a prompt token beside the pool), not a prefill pass of its own; the rest
   of the interval decodes. Admission may take what full iterations prefill in the interval.
2. **TTFT of fresh arrivals from the iteration chain** (`serving.fresh_ttft`): a request served
   in the interval it arrives in waits for the iteration in flight, for the prompts that arrived
   before it (Poisson clumps), for the older work admitted ahead of it, then its own
   ceil(p / chunk) iterations, at its own prompt length (5 length nodes per class). Its law is a
   shifted exponential per (class, node). Requests that waited whole intervals keep the fluid
   engine's uniform law per (class, age) bin (`serving.latency`).
3. **SLO outcomes per request**: the share of each component past its class's TTFT SLO, from its
   CDF, not a bin's centre against the SLO.
4. **Per-request overhead measured**: MEASURED_REQUEST_OVERHEAD_S, not the fluid engine's 20 ms.

5. **Decode at the pool's time average** (`mixed_decode`): sequences admitted during the interval
   decode from their admission, not from its start.

Completions stay memoryless (`engine.emit`), as in the fluid engine.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import perf_model, xla_ops
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.admission import Admission, Limits, Prefill
from inferencegym_jax.serving.engine import Decode, Engine, emit, interval_tpot
from inferencegym_jax.serving.fresh_ttft import FreshLaw, backlog_wait, exponential_parts, fresh_law
from inferencegym_jax.serving.iteration import Iterations, chunks, iterations, prefill_cost_s
from inferencegym_jax.serving.latency import FirstToken
from inferencegym_jax.serving.types import Queue, Sequences, ServerParams
from inferencegym_jax.traffic.strata import strata_of_sums
from inferencegym_jax.traffic.workload import Arrivals

# Per-request overhead on TTFT [s], measured on a real vLLM 0.11 server (Llama-2-7B, one GPU,
# guidellm 0.6 streaming client on the same cluster; inference-sim/inference-sim commit e7a4aa37,
# eval/ground_truth/jan20-prefill-llama7b-tp1-1, brought into experiments/crosscheck/data/):
# client TTFT minus the server's own TTFT, 9.36 ms (mean of 40 requests on an idle server), plus
# arrival-to-scheduled inside the server, 1.90 ms (experiments/crosscheck/published_vllm.json,
# "request_overhead").
MEASURED_REQUEST_OVERHEAD_S = 0.00936 + 0.00190


def mixed_profile(profile: perf_model.Profile) -> perf_model.Profile:
    """The profile the mixed engine runs on: its per-request overhead MEASURED_REQUEST_OVERHEAD_S."""
    return dataclasses.replace(profile, request_overhead_s=jnp.float32(MEASURED_REQUEST_OVERHEAD_S))


def arrivals_law(arrivals: Arrivals, it: Iterations, dt: Array) -> FreshLaw:
    """`fresh_ttft.fresh_law` of the interval's arrivals; their length strata from the bin's sums
    where the arrivals carry none."""
    strata = arrivals.prompt_strata
    if strata is None:
        strata = strata_of_sums(arrivals.count, arrivals.prompt_tokens, arrivals.prompt_sq_tokens)
    return fresh_law(it, arrivals.count, arrivals.prompt_tokens, strata, dt)


def pool_iterations(running: Sequences, config: ServingAction, engine: Engine, profile: perf_model.Profile,
                    params: ServerParams) -> Iterations:
    """The iteration model of the interval for the pool decoding at its start (`serving.iteration`)."""
    pool = jnp.minimum(running.seqs, config.batch_size)
    return iterations(profile, pool, safe_div(running.context, running.seqs), config.spec_length,
                      params.max_batched_tokens, engine.disaggregated)


def mixed_limits(
    running: Sequences, preempted: Sequences, queue: Queue, engine: Engine, capacity: Array, it: Iterations,
    config: ServingAction, profile: perf_model.Profile, params: ServerParams,
) -> Limits:
    """Free slots, free KV tokens and the prompt tokens full iterations prefill in the interval.

    Slots count the sequences expected to finish in the interval (vLLM refills a freed slot at the
    next iteration), F = B (1 - exp(-y)) with y the expected completions per sequence in the time
    that decode gets after prefilling the admitted prompts, y = y0 - k F (the slots free at the
    start are taken first; each further admission's prompt, p c of engine time, costs k = p c
    tps / (D m) of it: m the mean remaining output). One Newton step from F = 0 solves it,
    F = B (1 - exp(-y0)) / (1 + B k exp(-y0)); charging the whole backlog's prefill instead would
    leave a saturated engine almost no slot to refill."""
    batch, spec = config.batch_size, config.spec_length
    tps = perf_model.tokens_per_step(profile, spec)
    waiting_n = jnp.sum(queue.count) + preempted.seqs
    prompt_s = jnp.where(engine.disaggregated, 0.0,
                         safe_div(jnp.sum(queue.prompt) + preempted.context, waiting_n) * it.token_s)
    mean_remaining = jnp.maximum(safe_div(running.remaining, running.seqs), 1.0)
    free = jnp.minimum(jnp.maximum(batch - running.seqs, 0.0), waiting_n)
    per_second = tps / (it.step_s * mean_remaining)  # completions per sequence per second of decode
    y0 = jnp.maximum(engine.serving_s - free * prompt_s, 0.0) * per_second
    k = prompt_s * per_second
    done = -jnp.expm1(-y0)  # 1 - exp(-y0) without cancellation
    finishing = running.seqs * done / (1.0 + running.seqs * k * (1.0 - done))
    slots = jnp.maximum(batch - running.seqs + finishing, 0.0)
    kv_free = jnp.maximum(capacity * (1.0 - params.kv_watermark) - running.context, 0.0)
    token_cap = jnp.minimum(kv_free, engine.serving_s * it.prefill_rate)
    return Limits(slots, token_cap, it.prefill_share, it.decode_s, tps)


def mixed_admission_limits(
    running: Sequences, preempted: Sequences, queue: Queue, arrivals: Arrivals, engine: Engine, capacity: Array,
    config: ServingAction, profile: perf_model.Profile, params: ServerParams,
) -> tuple[Limits, Iterations, FreshLaw]:
    """The mixed engine's admission limits (`mixed_limits`), the interval's iteration model
    (`pool_iterations`) and its arrivals' TTFT law (`arrivals_law`), which the next phases use."""
    it = pool_iterations(running, config, engine, profile, params)
    law = arrivals_law(arrivals, it, params.dt_s)
    return mixed_limits(running, preempted, queue, engine, capacity, it, config, profile, params), it, law


def mixed_prefill(admission: Admission, engine: Engine, it: Iterations, law: FreshLaw) -> Prefill:
    """The admitted prompts and recomputed contexts prefilled in the interval's iterations.

    How many iterations carry them sets what they cost (`iteration.prefill_cost_s`): the
    interval's serving_s / E[M] iterations (E[M] from the fresh arrivals' chain) occupied by the
    prompts' chunks at random, N (1 - exp(-chunks / N)) (the expected occupied cells of N cells
    after `chunks` uniform throws); at least tokens / chunk (full chunks when prompts wait)."""
    a, re = admission.admitted, admission.readmitted
    admitted_n, admitted_p, admitted_o, admitted_sq = xla_ops.sums((a.count, a.prompt, a.output, a.prompt_sq),
                                                                   axes=(0, 1))
    tokens = re.context + admitted_p
    sum_sq = re.context * safe_div(re.context, re.seqs) + admitted_sq
    prompt_chunks = jnp.sum(a.count * chunks(it, safe_div(a.prompt, a.count))) + re.seqs * chunks(
        it, safe_div(re.context, re.seqs))
    iterations_n = engine.serving_s / jnp.maximum(law.iteration_s, EPS)
    carrying = iterations_n * -jnp.expm1(-safe_div(prompt_chunks, iterations_n))
    cost_s = prefill_cost_s(it, tokens, sum_sq, carrying)
    decode_s = jnp.where(engine.disaggregated, engine.serving_s, jnp.maximum(engine.serving_s - cost_s, 0.0))
    return Prefill(tokens, admitted_n, admitted_o, decode_s, jnp.maximum(it.prefill_rate, EPS))


class FreshTTFT(NamedTuple):
    """TTFT of the requests admitted in the interval they arrived in: a shifted exponential per
    (class, length node); float32 (3, NUM_NODES).

    Attributes:
      shift_s: [s] smallest TTFT.
      scale_s: [s] mean above the shift.
      requests: [requests] admitted at the node.
      prompt: [tokens] the node's prompt length.
    """

    shift_s: Array
    scale_s: Array
    requests: Array
    prompt: Array

    def past(self, slo_s: Array) -> Array:
        """Share of each component past `slo_s` (3,) [s]: P(TTFT > SLO), (3, NUM_NODES)."""
        over = jnp.maximum(slo_s[:, None] - self.shift_s, 0.0) / self.scale_s
        return jnp.exp(-over)


def fresh_first_token(law: FreshLaw, admission: Admission, it: Iterations, engine: Engine,
                      profile: perf_model.Profile, dt: Array) -> FreshTTFT:
    """The law of the fresh admitted requests (module docstring, item 2): engine time from `law`
    (`fresh_ttft.fresh_law` of the interval's arrivals), the older work admitted ahead of them (the
    preempted, earlier classes, older ages; the fresh of earlier classes share the chain), the
    stall, the KV transfer and the per-request overhead (`profile.request_overhead_s`, which
    MEASURED_REQUEST_OVERHEAD_S in the engine's `mixed_profile`)."""
    fresh_earlier = xla_ops.earlier_classes(admission.admitted.prompt[:, 0])
    ahead_s = jnp.maximum(admission.ahead_tokens[:, 0] - fresh_earlier, 0.0) / jnp.maximum(it.prefill_rate, EPS)
    w1, w2 = backlog_wait(ahead_s, dt)
    mean = law.wait_mean_s + w1[:, None]
    var = law.wait_var_s2 + jnp.maximum(w2 - w1 * w1, 0.0)[:, None]
    shift, scale = exponential_parts(mean, var)
    transfer = jnp.where(engine.disaggregated, law.prompt * profile.kv_bytes_per_token / profile.kv_link_bw, 0.0)
    fixed = engine.busy_s + transfer + profile.request_overhead_s
    requests = admission.admitted.count[:, 0:1] * law.node_weight
    return FreshTTFT(shift + law.service_s + fixed, scale, requests, law.prompt)


def aged_late_share(ttft: FirstToken, slo_s: Array, dt: Array) -> Array:
    """Share of each (class, age >= 1) bin's uniform TTFT past `slo_s` (3,) [s], (3, A): the bins
    of older requests are `dt` wide (`latency.time_to_first_token`), so the share is
    clip((centre + dt / 2 - SLO) / dt, 0, 1) (one multiplication by 1 / dt, no division per bin);
    the fresh bin's (age 0) is not used."""
    return jnp.clip((ttft.centre_s + 0.5 * dt - slo_s[:, None]) * (1.0 / dt), 0.0, 1.0)


def with_fresh(ttft: FirstToken, fresh: FreshTTFT) -> FirstToken:
    """The per-bin uniform laws with the fresh bin (age 0) replaced by a uniform of the fresh
    mixture's mean and standard deviation per class (for the interval's percentiles and SLO
    ratio, which pool bins as uniforms)."""
    mean_nodes = fresh.shift_s + fresh.scale_s
    n, first, second = xla_ops.sums((fresh.requests, fresh.requests * mean_nodes, fresh.requests * (
        mean_nodes * mean_nodes + fresh.scale_s * fresh.scale_s)), axes=(1,))
    mean = safe_div(first, n)
    second = safe_div(second, n)
    half = jnp.sqrt(3.0 * jnp.maximum(second - mean * mean, 0.0))
    is_fresh = jnp.arange(ttft.centre_s.shape[1]) < 1
    return FirstToken(jnp.where(is_fresh, mean[:, None], ttft.centre_s),
                      jnp.where(is_fresh, jnp.minimum(half, mean)[:, None], ttft.half_width_s))


def mixed_first_token(
    ttft: FirstToken, admission: Admission, law: FreshLaw, it: Iterations, engine: Engine,
    profile: perf_model.Profile, params: ServerParams,
) -> tuple[FreshTTFT, Array, FirstToken]:
    """The mixed engine's first tokens: the fresh admitted requests' law (`fresh_first_token`),
    the share of each (class, age) bin past its TTFT SLO (`late_share`) and the per-bin uniforms
    with the fresh bin's (`with_fresh`), from the fluid per-bin laws `ttft` of the older bins."""
    fresh = fresh_first_token(law, admission, it, engine, profile, params.dt_s)
    return fresh, late_share(ttft, fresh, admission.admitted, params), with_fresh(ttft, fresh)


def late_share(ttft: FirstToken, fresh: FreshTTFT, admitted: Queue, params: ServerParams) -> Array:
    """Share of each (class, age) bin's admitted requests past their class's TTFT SLO, (3, A), by
    their component's CDF (the fresh bin from its nodes)."""
    fresh_late = safe_div(jnp.sum(fresh.requests * fresh.past(params.ttft_slo_s), axis=1), admitted.count[:, 0])
    is_fresh = jnp.arange(ttft.centre_s.shape[1]) < 1
    return jnp.where(is_fresh, fresh_late[:, None], aged_late_share(ttft, params.ttft_slo_s, params.dt_s))


def mixed_decode(
    old: Sequences, new: Sequences, fresh: Array, decode_s: Array, first_step_s: Array, tokens_per_step: Array,
    config: ServingAction, profile: perf_model.Profile, dt: Array,
) -> tuple[Sequences, Decode]:
    """Decode for `decode_s` [s] with the pool's time average: the `old` sequences (running at the
    interval's start) decode until they finish, the `new` ones (admitted or readmitted) from their
    admission. Of the new, those that waited (all but the `fresh` [requests] arrivals of the
    interval) and fit the slots free at the start decode from the start; the others join as they
    arrive or as slots free, half the interval on average (admission counted the slots expected
    to free: vLLM refills a slot at the next iteration, so the batch stays full). The step time
    is that of the mean pool over the interval, completions included (`mean_presence`); the fluid
    engine's `engine.decode` takes every sequence admitted in the interval as present throughout
    and none finished, which overstates the batch, and so TPOT, when many finish within an
    interval. `first_step_s` [s]: a decode step of the pool at the interval's start
    (`iteration.Iterations.step_s`). Memoryless completions (`engine.emit`). Returns (running after
    completions, what was produced)."""
    at_start = jnp.minimum(jnp.maximum(new.seqs - fresh, 0.0), jnp.maximum(config.batch_size - old.seqs, 0.0))
    present_new = jnp.where(new.seqs > EPS, safe_div(at_start + 0.5 * (new.seqs - at_start), new.seqs), 1.0)
    context = safe_div(old.context + new.context, old.seqs + new.seqs)
    mean_remaining = jnp.maximum(safe_div(old.remaining + new.remaining, old.seqs + new.seqs), 1.0)

    # the completions over the interval at the step of the pool at its start (`first_step_s`) set the
    # mean pool, whose step is the interval's (one fixed-point pass)
    hazard = (decode_s / first_step_s) * tokens_per_step / mean_remaining  # completions per sequence (memoryless)
    pool = old.seqs * mean_presence(hazard) + present_new * new.seqs * mean_presence(present_new * hazard)
    concurrent = jnp.minimum(pool, config.batch_size)
    step_s = perf_model.decode_step_time(profile, jnp.maximum(concurrent, 1.0), context, config.spec_length)
    per_seq_tokens = (decode_s / step_s) * tokens_per_step * safe_div(concurrent, pool)
    old_after, old_generated, old_completed = emit(old, per_seq_tokens)
    new_after, new_generated, new_completed = emit(new, present_new * per_seq_tokens)
    after = old_after + new_after
    completed = old_completed + new_completed
    tpot = interval_tpot(after, completed, per_seq_tokens, step_s, tokens_per_step, dt)
    return after, Decode(old_generated + new_generated, completed, tpot)


def mean_presence(hazard: Array) -> Array:
    """Mean share of a span that a sequence with memoryless completions at total `hazard` over it
    is still running: (1 - exp(-hazard)) / hazard (1 at hazard 0)."""
    return jnp.where(hazard > 1e-4, -jnp.expm1(-hazard) / jnp.maximum(hazard, 1e-4), 1.0 - 0.5 * hazard)
