"""What requests experience, in NumPy (serving.latency): TTFT per queue bin and the interval's
latency statistics, for N envs at once.

TTFT = queue wait + prefill (own prompt and those ahead) + KV transfer (disaggregated) +
per-request overhead + the stall. A bin of age a >= 1 arrived uniformly over the interval a
intervals ago and is prefilled at the start of this one, after the tokens ahead of it: a uniform
of half-width dt / 2. Fresh arrivals wait for the step in flight (uniform in [0, step]) and for
their prefill. p50 and p99 come from the mixture of the bins of the admitted requests (at their
TTFT) and of those still waiting (at their wait so far, a lower bound), classes pooled per age.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.serving import Queue
from inferencegym_jax.testing.reference.arrays import per_env, safe_div
from inferencegym_jax.testing.reference.constants import EPS, F32, TTFT_QUANTILES, TTFT_RATIO_CAP


class FirstToken(NamedTuple):
    """TTFT of the requests admitted from each bin, a uniform (serving.latency.FirstToken);
    (N, 3, A) float32 [s].

    Attributes:
      centre_s: its centre.
      half_width_s: its half-width.
    """

    centre_s: np.ndarray
    half_width_s: np.ndarray


def time_to_first_token(
    queue: Queue, admission: Any, prefill: Any, engine: Any, limits: Any, profile: Any, dt: Any
) -> FirstToken:
    """TTFT by (class, age) of the requests admitted this interval (serving.latency.time_to_first_token)."""
    ages = np.arange(queue.count.shape[2], dtype=F32)
    rate = per_env(prefill.wall_rate)
    # admission takes a prefix of the order, so what was prefilled ahead of a bin is its tokens
    # ahead, capped at all that was prefilled
    ahead = np.minimum(admission.ahead_tokens, per_env(prefill.tokens))
    mean_prompt = safe_div(queue.prompt, queue.count)
    own_s = mean_prompt / rate
    position_s = (ahead + 0.5 * admission.admitted.prompt) / rate  # to the middle of the bin's prompts
    fresh_prefill = np.maximum(position_s - 0.5 * dt, own_s)
    link_s = mean_prompt * per_env(profile.kv_bytes_per_token) / per_env(profile.kv_link_bw)
    transfer_s = np.where(per_env(engine.disaggregated), link_s, F32(0.0))
    fixed = per_env(engine.busy_s) + transfer_s + per_env(profile.request_overhead_s)
    step = per_env(limits.step_estimate_s)
    fresh = ages < 1
    centre = np.where(fresh, 0.5 * step + fresh_prefill, (ages - 0.5) * dt + position_s) + fixed
    half = np.where(fresh, 0.5 * (step + fresh_prefill), 0.5 * dt)
    return FirstToken(centre.astype(F32), half.astype(F32))


def value_at(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """x[n, index[n]] of each env n: (N, B), (N,) -> (N,)."""
    return np.take_along_axis(x, index[:, None], axis=1)[:, 0]


def binned_quantiles(low: np.ndarray, high: np.ndarray, weights: np.ndarray, qs: tuple) -> tuple[np.ndarray, ...]:
    """Quantiles of a mixture of uniform bins (xla_ops.binned_quantiles), per env: bins (N, B)
    in order, bin i spanning [max(low[:i+1]), max(high[:i+1], that)] (running maxima keep the
    bins in order). Quantile q lies in the first bin whose cumulative weight reaches q * total
    (the last bin if rounding leaves none), at the fraction of its weight still needed."""
    low_run = np.maximum.accumulate(low, axis=1)
    high_run = np.maximum(np.maximum.accumulate(high, axis=1), low_run)
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    out = []
    for q in qs:
        target = q * total
        # searchsorted(cum, target, side="left") on each env's row
        i = np.minimum(np.sum(cum < target[:, None], axis=1), weights.shape[1] - 1)
        w, cum_i, lo, hi = (value_at(x, i) for x in (weights, cum, low_run, high_run))
        frac = np.clip((target - (cum_i - w)) / np.maximum(w, EPS), 0.0, 1.0)
        out.append(np.where(total > EPS, lo + frac * (hi - lo), F32(0.0)).astype(F32))
    return tuple(out)


class Latency(NamedTuple):
    """The interval's latency statistics (serving.latency.Latency); (N,) float32.

    Attributes:
      ttft_p50_s, ttft_p99_s: [s] TTFT percentiles.
      ttft_slo_ratio: mean over requests of min(TTFT / SLO, TTFT_RATIO_CAP) / TTFT_RATIO_CAP.
      late: [requests] admitted past their TTFT SLO, or while TPOT is above its SLO.
      good_tokens: [tokens] output owed to the requests admitted within both SLOs.
    """

    ttft_p50_s: np.ndarray
    ttft_p99_s: np.ndarray
    ttft_slo_ratio: np.ndarray
    late: np.ndarray
    good_tokens: np.ndarray


def bin_late_share(ttft: Any, tpot_s: np.ndarray, params: Any) -> np.ndarray:
    """The fluid engine's SLO outcome per bin, (N, 3, A) of 0 or 1 (serving.latency.bin_late_share):
    late when the bin's TTFT centre is past its class's TTFT SLO or the TPOT past its TPOT SLO."""
    late = (ttft.centre_s > params.ttft_slo_s[None, :, None]) | (per_env(tpot_s) > params.tpot_slo_s[None, :, None])
    return late.astype(F32)


def latency_statistics(admitted: Queue, waiting: Queue, ttft: Any, tpot_s: np.ndarray, params: Any) -> Latency:
    """Percentiles, SLO ratio, late requests and goodput (serving.latency.latency_statistics), a bin
    late by `bin_late_share`."""
    return shared_latency_statistics(admitted, waiting, ttft, bin_late_share(ttft, tpot_s, params), params)


def shared_latency_statistics(admitted: Queue, waiting: Queue, ttft: Any, late: np.ndarray, params: Any) -> Latency:
    """Percentiles, SLO ratio, late requests and goodput (serving.latency.shared_latency_statistics);
    `late` (N, 3, A) is the share of each bin's admitted requests that miss an SLO."""
    dt = params.dt_s
    ages = np.arange(admitted.count.shape[2], dtype=F32)
    slo = params.ttft_slo_s[None, :, None]
    wait_now = (ages + 0.5) * dt  # still waiting: a lower bound on their TTFT
    adm_n, rest_n = admitted.count, waiting.count
    weight = adm_n + rest_n
    wait_sum = adm_n * ttft.centre_s + rest_n * wait_now
    half_sum = adm_n * ttft.half_width_s + rest_n * 0.5 * dt
    cap = TTFT_RATIO_CAP * slo
    ratio = np.minimum(wait_sum / cap, weight)  # requests times their capped TTFT in units of the cap
    weight_age = np.sum(weight, axis=1)  # (N, A): classes pooled per age
    centre = safe_div(np.sum(wait_sum, axis=1), weight_age)
    half = safe_div(np.sum(half_sum, axis=1), weight_age)
    present = weight_age > EPS
    low = np.where(present, np.maximum(centre - half, F32(0.0)), F32(0.0))
    high = np.where(present, centre + half, F32(0.0))
    p50, p99 = binned_quantiles(low, high, weight_age, TTFT_QUANTILES)
    return Latency(
        ttft_p50_s=p50,
        ttft_p99_s=p99,
        ttft_slo_ratio=safe_div(np.sum(ratio, axis=(1, 2)), np.sum(weight, axis=(1, 2))),
        late=np.sum(late * adm_n, axis=(1, 2)).astype(F32),
        good_tokens=np.sum((1.0 - late) * admitted.output, axis=(1, 2)).astype(F32),
    )
