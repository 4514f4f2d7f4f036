"""Request traffic in NumPy (workload): arrival schedules, length sums, trace replay.

Per interval and class: a Poisson count of new requests (the draw is an input: `Draws`), and the
sums of their prompt and output lengths from the normal law of a sum of n i.i.d. lengths (mean
n m1, variance n (m2 - m1^2), kept within [n low, n high]); the summed squared prompts are their
expectation n m2. A trace schedule replays recorded requests instead and draws nothing.

The arrivals also carry each class's prompt-length strata (the mixed engine's length nodes,
strata.length_strata): the lengths at STRATA_Z standard deviations of the lognormal with the
class's law's two moments (of the whole trace's prompts for a trace), relative to their
STRATA_W-weighted mean; under the "clamped" rule (workload.WorkloadParams.length_strata) none above
the law's longest prompt (its clamp `high` over the interval's mean), the excess raised onto the
strata below.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferencegym_jax.testing.reference.arrays import safe_div, to_numpy
from inferencegym_jax.testing.reference.constants import F32, NUM_CLASSES, STRATA_W, STRATA_Z
from inferencegym_jax.traffic.workload import Arrivals, Draws, WorkloadState

Moments = dict[str, tuple[np.ndarray, np.ndarray]]  # "prompt" / "output" / "burst_prompt" -> (m1, m2), (3,) each


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF, elementwise, in float64."""
    return np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))))(np.asarray(x, np.float64))


def clipped_lognormal_moment(median: Any, sigma: Any, low: Any, high: Any, k: int) -> np.ndarray:
    """E[clip(X, low, high)^k] for X lognormal(log median, sigma) (lengths._lognormal_partial_moment)."""
    mu = np.log(np.asarray(median, np.float64))
    a = (np.log(low) - mu) / sigma
    b = (np.log(high) - mu) / sigma
    inside = np.exp(k * mu + 0.5 * (k * sigma) ** 2) * (normal_cdf(b - k * sigma) - normal_cdf(a - k * sigma))
    return inside + low**k * normal_cdf(a) + high**k * (1.0 - normal_cdf(b))


def length_moments(dist: Any) -> tuple[np.ndarray, np.ndarray]:
    """First and second moments [tokens, tokens^2] of each class's length distribution, (3,)
    float32 (workload.length_moments): uniform, clamped lognormal or a two-lognormal mixture."""
    d = to_numpy(dist)
    low, high = d.low.astype(np.float64), d.high.astype(np.float64)
    uniform = (0.5 * (low + high), (low * low + low * high + high * high) / 3.0)
    second_weight = np.where(d.kind == 2, d.weight2, 0.0)
    moments = []
    for k in (1, 2):
        first = clipped_lognormal_moment(d.median1, d.sigma1, low, high, k)
        second = clipped_lognormal_moment(d.median2, d.sigma2, low, high, k)
        mixture = (1.0 - second_weight) * first + second_weight * second
        moments.append(np.where(d.kind == 0, uniform[k - 1], mixture).astype(F32))
    return moments[0], moments[1]


def length_strata(mean: np.ndarray, mean_sq: np.ndarray) -> np.ndarray:
    """Lengths at the strata relative to their weighted mean, (..., 5) float32, of the lognormal
    with mean `mean` [tokens] and mean square `mean_sq` [tokens^2] (any equal shapes;
    strata.strata_of_sums): log-space sd sqrt(log(m2 / m1^2)), 0 for m2 <= m1^2 or no mean."""
    ratio = np.where(mean > 0, mean_sq / np.maximum(mean * mean, F32(1e-30)), F32(1.0))
    log_sd = np.sqrt(np.log(np.maximum(ratio, F32(1.0))))
    shape = np.exp(log_sd[..., None] * STRATA_Z)
    return (shape / np.sum(STRATA_W * shape, axis=-1, keepdims=True)).astype(F32)


def trace_strata(trace: Any) -> np.ndarray:
    """Each class's length strata over the whole trace's prompts, (3, 5) (workload.trace_strata):
    the last finite arrival's prefix sums (the trace is padded with +inf)."""
    last = np.sum(np.isfinite(trace.arrival_s[:, 1:]), axis=1)  # (3,), index 0 is the -inf sentinel
    rows = np.arange(NUM_CLASSES)
    count = last.astype(F32)
    prompt, prompt_sq = trace.prompt_cumsum[rows, last], trace.prompt_sq_cumsum[rows, last]
    return length_strata(safe_div(prompt, count), safe_div(prompt_sq, count))


def capped_strata(strata: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Strata (N, 3, 5) with none above `cap` (N, 3) (relative to the mean, at least 1), the excess
    raised onto the strata below in proportion to their room (strata.capped_strata)."""
    cap = np.maximum(cap, F32(1.0))[..., None]
    clipped = np.minimum(strata, cap)
    weighted = np.sum(STRATA_W * clipped, axis=-1, keepdims=True)
    return (clipped + (cap - clipped) * safe_div(F32(1.0) - weighted, cap - weighted)).astype(F32)


def burst_on(state: WorkloadState, t_s: Any, params: Any) -> np.ndarray:
    """Whether a burst is on at time t_s, (N,) bool (workload.burst_on)."""
    if params.schedule == "periodic":
        return np.mod(t_s + state.phase_s, params.burst_period_s) < params.burst_duration_s
    if params.schedule == "mmpp":
        return np.asarray(state.in_burst)
    return np.zeros(np.shape(state.phase_s), bool)


def arrival_rate(state: WorkloadState, t_s: Any, params: Any) -> np.ndarray:
    """Scheduled arrival rate [req/s] per env, (N,) (workload.arrival_rate)."""
    factor = np.where(burst_on(state, t_s, params), params.burst_multiplier, F32(1.0))
    return (params.base_rate * factor).astype(F32)


def sample_draws(rng: np.random.Generator, state: WorkloadState, t_s: Any, dt_s: Any, params: Any) -> Draws:
    """The interval's random draws from a NumPy generator: exact Poisson counts at the scheduled
    rate, standard normals, one uniform (workload.draw, with NumPy's samplers)."""
    n = np.shape(state.phase_s)[0]
    mix = np.where(burst_on(state, t_s, params)[:, None], params.burst_class_mix[None, :], params.class_mix[None, :])
    mean_count = arrival_rate(state, t_s, params)[:, None] * dt_s * mix
    return Draws(
        count=rng.poisson(mean_count).astype(F32),
        z_prompt=rng.standard_normal((n, NUM_CLASSES), F32),
        z_output=rng.standard_normal((n, NUM_CLASSES), F32),
        u_burst=rng.random(n, F32),
    )


def sum_of_lengths(z: np.ndarray, count: np.ndarray, moments: tuple, dist: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sum of `count` lengths drawn as a normal (z) and the expected sum of their squares, (N, 3)
    each (lengths.sum_of_lengths)."""
    m1, m2 = moments
    variance = np.maximum(m2 - m1 * m1, F32(0.0))
    total = np.clip(count * m1 + np.sqrt(count * variance) * z, count * dist.low, count * dist.high)
    return total.astype(F32), (count * m2).astype(F32)


def trace_arrivals(state: WorkloadState, t_s: Any, dt_s: Any, params: Any) -> Arrivals:
    """Replay (workload._trace_arrivals): each class's recorded requests arriving in
    [phase + t, phase + (t + dt)), from prefix sums over the sorted trace (index 0 a -inf sentinel)."""
    trace = params.trace
    start, end = state.phase_s + t_s, state.phase_s + (t_s + dt_s)  # as workload: intervals tile the trace
    columns = []
    for c in range(NUM_CLASSES):  # over the three classes, not over envs
        first = np.searchsorted(trace.arrival_s[c], start, side="left") - 1  # last request before start
        last = np.searchsorted(trace.arrival_s[c], end, side="left") - 1
        sums = [cs[c][last] - cs[c][first] for cs in (trace.prompt_cumsum, trace.output_cumsum, trace.prompt_sq_cumsum)]
        columns.append([(last - first).astype(F32), *sums])
    count, prompt, output, prompt_sq = (np.stack([col[j] for col in columns], axis=1).astype(F32) for j in range(4))
    strata = np.broadcast_to(trace_strata(trace), count.shape + (len(STRATA_W),))
    return Arrivals(count, prompt, output, prompt_sq, (np.sum(count, axis=1) / dt_s).astype(F32), strata)


def advance(
    draws: Draws, state: WorkloadState, t_s: Any, dt_s: Any, params: Any, moments: Moments
) -> tuple[WorkloadState, Arrivals]:
    """Arrivals in [t_s, t_s + dt_s) and the next traffic state (workload.advance); `moments`
    are `length_moments` of params.prompt and params.output."""
    if params.schedule == "trace":
        return state, trace_arrivals(state, t_s, dt_s, params)
    count = draws.count
    prompt, prompt_sq = sum_of_lengths(draws.z_prompt, count, moments["prompt"], params.prompt)
    if params.schedule in ("periodic", "mmpp"):  # a burst's requests draw from the burst's prompt lengths
        in_burst = burst_on(state, t_s, params)[:, None]
        burst, burst_sq = sum_of_lengths(draws.z_prompt, count, moments["burst_prompt"], params.burst_prompt)
        prompt, prompt_sq = np.where(in_burst, burst, prompt), np.where(in_burst, burst_sq, prompt_sq)
    output, _ = sum_of_lengths(draws.z_output, count, moments["output"], params.output)
    strata = np.broadcast_to(length_strata(*moments["prompt"]), count.shape + (len(STRATA_W),))
    if params.schedule in ("periodic", "mmpp"):
        strata = np.where(in_burst[..., None], length_strata(*moments["burst_prompt"]), strata)
    if params.length_strata == "clamped":  # none above the law's longest prompt
        high = np.broadcast_to(params.prompt.high, count.shape)
        if params.schedule in ("periodic", "mmpp"):
            high = np.where(in_burst, params.burst_prompt.high, high)
        strata = capped_strata(strata, safe_div(high, safe_div(prompt, count)))
    arrivals = Arrivals(count, prompt, np.maximum(output, count), prompt_sq, arrival_rate(state, t_s, params), strata)
    if params.schedule == "mmpp":  # a burst ends with probability dt / duration, starts with dt / gap
        flip = np.where(state.in_burst, dt_s / params.burst_duration_s, dt_s / params.burst_gap_s)
        state = WorkloadState(in_burst=np.where(draws.u_burst < flip, ~state.in_burst, state.in_burst),
                              phase_s=state.phase_s)
    return state, arrivals


def init_from_draws(u: np.ndarray, params: Any, episode_s: Any) -> WorkloadState:
    """Per-episode traffic state from (N, RESET_DRAWS) uniforms (workload.init_from_draws): the
    trace offset or burst phase from u[:, 0], the initial "mmpp" burst from u[:, 1]."""
    if params.schedule == "trace":
        phase = u[:, 0] * np.maximum(np.min(params.trace.duration_s) - episode_s, F32(0.0))
    else:
        phase = u[:, 0] * params.burst_period_s
    p_on = params.burst_duration_s / (params.burst_duration_s + params.burst_gap_s)
    in_burst = (params.schedule == "mmpp") & (u[:, 1] < p_on)
    return WorkloadState(in_burst=np.asarray(in_burst), phase_s=phase.astype(F32))


def mean_rate(params: Any) -> np.ndarray:
    """Long-run mean arrival rate [req/s] of the schedule (workload.mean_rate)."""
    if params.schedule == "trace":
        requests = np.sum(np.isfinite(params.trace.arrival_s[:, 1:]), axis=1)
        return np.sum(requests / params.trace.duration_s).astype(F32)
    if params.schedule == "periodic":
        burst_fraction = np.minimum(params.burst_duration_s / params.burst_period_s, F32(1.0))
    elif params.schedule == "mmpp":
        burst_fraction = params.burst_duration_s / (params.burst_duration_s + params.burst_gap_s)
    else:
        burst_fraction = F32(0.0)
    return (params.base_rate * (1.0 + burst_fraction * (params.burst_multiplier - 1.0))).astype(F32)
