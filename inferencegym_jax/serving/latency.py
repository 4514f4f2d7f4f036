"""What requests experience: time to first token per queue bin, and the interval's latency
statistics (percentiles, SLO attainment, goodput).

TTFT = queue wait + prefill (own prompt and the prompts ahead of it) + KV transfer (when
disaggregated) + per-request overhead. A queue bin of age a >= 1 holds requests that arrived
uniformly during the interval a intervals ago; they are prefilled at the start of this one after
the tokens ahead of them. Fresh arrivals wait for the engine step in flight (uniform in
[0, step]) and for their own prefill. Each bin's TTFT is a uniform [centre - half-width,
centre + half-width]; the p50/p99 come from the mixture of the bins of the requests admitted in
the interval (at their TTFT) and of those still waiting (at their current wait, a lower bound).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import perf_model, xla_ops
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.admission import Admission, Limits, Prefill
from inferencegym_jax.serving.engine import Engine
from inferencegym_jax.serving.types import Queue, ServerParams

# TTFT counts at most this many times its SLO in the latency ratio (a request 10x late is as
# bad as one 4x late: the ratio measures how late, the violation rate whether late).
TTFT_RATIO_CAP = 4.0


class FirstToken(NamedTuple):
    """TTFT of the requests admitted from each queue bin: a uniform; float32 (3, A) [s].

    Attributes:
      centre_s: its centre.
      half_width_s: its half-width.
    """

    centre_s: Array
    half_width_s: Array


def time_to_first_token(
    queue: Queue, admission: Admission, prefill: Prefill, engine: Engine, limits: Limits,
    profile: perf_model.Profile, dt: Array,
) -> FirstToken:
    """TTFT by (class, age) of the requests admitted this interval (module docstring)."""
    ages = jnp.arange(queue.count.shape[1], dtype=jnp.float32)
    # Prompt tokens prefilled ahead of a bin. Admission takes a prefix of the order (whole bins,
    # then part of one, then none), so that is the bin's tokens ahead capped at all that was
    # taken (bins of < EPS requests, never admitted, count as ahead: < 1e-2 tokens).
    ahead = jnp.minimum(admission.ahead_tokens, prefill.tokens)
    mean_prompt = safe_div(queue.prompt, queue.count)
    own_s = mean_prompt / prefill.wall_rate
    position_s = (ahead + 0.5 * admission.admitted.prompt) / prefill.wall_rate
    fresh_prefill = jnp.maximum(position_s - 0.5 * dt, own_s)
    transfer_s = jnp.where(engine.disaggregated, mean_prompt * profile.kv_bytes_per_token / profile.kv_link_bw, 0.0)
    fixed = engine.busy_s + transfer_s + profile.request_overhead_s
    fresh = ages[None, :] < 1
    centre = jnp.where(fresh, 0.5 * limits.step_estimate_s + fresh_prefill, (ages - 0.5) * dt + position_s) + fixed
    half = jnp.where(fresh, 0.5 * (limits.step_estimate_s + fresh_prefill), 0.5 * dt)
    return FirstToken(centre, half)


class Latency(NamedTuple):
    """The interval's latency statistics; float32 scalars.

    Attributes:
      ttft_p50_s, ttft_p99_s: [s] percentiles of TTFT (module docstring).
      ttft_slo_ratio: mean over requests of min(TTFT / SLO, TTFT_RATIO_CAP) / TTFT_RATIO_CAP.
      late: [requests] admitted past their TTFT SLO, or while TPOT is above its SLO.
      good_tokens: [tokens] output owed to the requests admitted within both SLOs (goodput
        counted at admission: the "admission" accounting of `serving.goodput`).
    """

    ttft_p50_s: Array
    ttft_p99_s: Array
    ttft_slo_ratio: Array
    late: Array
    good_tokens: Array


def bin_late_share(ttft: FirstToken, tpot_s: Array, params: ServerParams) -> Array:
    """The fluid engine's SLO outcome per (class, age) bin, float32 (3, A) of 0 or 1: a bin is late
    when its TTFT centre is past its class's TTFT SLO or the interval's TPOT past its TPOT SLO."""
    late = (ttft.centre_s > params.ttft_slo_s[:, None]) | (tpot_s > params.tpot_slo_s[:, None])
    return late.astype(jnp.float32)


def latency_statistics(
    admitted: Queue, waiting: Queue, ttft: FirstToken, tpot_s: Array, params: ServerParams
) -> Latency:
    """Percentiles, SLO ratio, late requests and goodput of the admitted and waiting requests, a
    bin late by `bin_late_share`."""
    return shared_latency_statistics(admitted, waiting, ttft, bin_late_share(ttft, tpot_s, params), params)


def shared_latency_statistics(
    admitted: Queue, waiting: Queue, ttft: FirstToken, late: Array, params: ServerParams
) -> Latency:
    """Percentiles, SLO ratio, late requests and goodput of the admitted and waiting requests;
    `late` (3, A) is the share of each bin's admitted requests that miss an SLO."""
    dt = params.dt_s
    ages = jnp.arange(admitted.count.shape[1], dtype=jnp.float32)
    slo = params.ttft_slo_s[:, None]
    wait_now = (ages + 0.5) * dt  # requests still waiting: a lower bound on their TTFT
    adm_n, rest_n = admitted.count, waiting.count
    weight = adm_n + rest_n
    wait_sum = adm_n * ttft.centre_s + rest_n * wait_now  # admitted at their TTFT, waiting at their wait
    cap = TTFT_RATIO_CAP * slo
    ratio = jnp.minimum(wait_sum, cap * weight) / cap
    late_n, good_o, wait_sum_age, half_sum_age, ratio_age, weight_age = xla_ops.sums(
        (
            late * adm_n,
            (1.0 - late) * admitted.output,
            wait_sum,
            adm_n * ttft.half_width_s + rest_n * 0.5 * dt,
            ratio,
            weight,
        ),
        axes=(0,),
    )  # (A,) each: classes pooled per age bin; bins increase with age
    centre = safe_div(wait_sum_age, weight_age)
    half = safe_div(half_sum_age, weight_age)
    low = jnp.where(weight_age > EPS, jnp.maximum(centre - half, 0.0), 0.0)
    high = jnp.where(weight_age > EPS, centre + half, 0.0)
    p50, p99 = xla_ops.binned_quantiles(low, high, weight_age, (0.5, 0.99))
    return Latency(p50, p99, safe_div(jnp.sum(ratio_age), jnp.sum(weight_age)), jnp.sum(late_n), jnp.sum(good_o))
