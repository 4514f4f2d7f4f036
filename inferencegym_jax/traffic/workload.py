"""Request traffic: arrival-rate schedules, Poisson arrivals, prompt/output lengths, priority mix.

Everything is a pure function of (key, state, params) with fixed shapes. There are
`NUM_CLASSES` priority classes (0 = highest); a task that has one class puts all its traffic in
class 1 ("standard").

Per control interval the environment needs, per class, the number of new requests and the sums
of their prompt and output lengths. Counts are Poisson with the scheduled rate. Length sums of
n requests are drawn from the normal law of a sum of n i.i.d. lengths (mean n * m, variance
n * v, kept >= n * min), which is exact in its first two moments and far cheaper than n
individual draws.

Arrival schedules (`schedule`, static):
  "constant": rate = base_rate.
  "periodic": rate = base_rate * burst_multiplier for burst_duration_s of every
    burst_period_s, else base_rate; the phase is drawn at reset.
  "mmpp": a two-state Markov-modulated Poisson process: bursts at burst_multiplier * base_rate
    start with probability dt / burst_gap_s per interval and end with probability
    dt / burst_duration_s (mean gap and mean burst length in seconds).
  "trace": replay of a recorded trace (see `trace` below).
A burst of "periodic" or "mmpp" can be a traffic regime of its own: its requests split over the
classes by `burst_class_mix` and draw their prompts from `burst_prompt` (a document tenant's
batch job among chat traffic, say); both equal the base traffic's by default.

Length distributions: `traffic.lengths` (re-exported here).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax.numerics import safe_div
from inferencegym_jax.traffic import sampling
from inferencegym_jax.traffic.lengths import (  # noqa: F401 (LENGTH_KINDS, length_dist: re-exported)
    LENGTH_KINDS,
    NUM_CLASSES,
    LengthDist,
    length_dist,
    length_moments,
    sum_of_lengths,
)
from inferencegym_jax.traffic.strata import capped_strata, length_strata, log_sd_of, strata_of_sums

SCHEDULES = ("constant", "periodic", "mmpp", "trace")
# How an interval's prompt-length strata follow from its law (`strata` module docstring): "moments" (the
# v0-v2 tasks and Fleet1-v1: the lognormal of the law's two moments, scaled to the interval's mean) or
# "clamped" (the same, with no stratum above the law's longest prompt, `LengthDist.high`).
LENGTH_STRATA_RULES = ("moments", "clamped")


@struct.dataclass
class Trace:
    """A recorded request trace in fixed-shape arrays, one per class; leaves shape (3, N+1).

    Attributes:
      arrival_s: float32 [s], arrival time of request i since the trace start, sorted; padded
        past the end with +inf. Index 0 is a sentinel at -inf.
      prompt_cumsum: float32 [tokens], prompt tokens of requests 1..i (prefix sums, 0 at 0).
      output_cumsum: float32 [tokens], output tokens of requests 1..i.
      prompt_sq_cumsum: float32 [tokens^2], squared prompt tokens of requests 1..i.
      duration_s: float32 [s], shape (3,), length of each class's trace; episodes start at an
        offset in [0, duration_s - episode length).
    """

    arrival_s: Array
    prompt_cumsum: Array
    output_cumsum: Array
    prompt_sq_cumsum: Array
    duration_s: Array


@struct.dataclass
class WorkloadParams:
    """Traffic parameters (a pytree; `schedule` is static).

    Attributes:
      base_rate: float32 [req/s], mean arrival rate outside bursts, all classes together.
      class_mix: float32 (3,), fraction of requests in each priority class; sums to 1.
      burst_multiplier: float32, rate factor during a burst.
      burst_period_s: float32 [s], period of "periodic" bursts.
      burst_duration_s: float32 [s], burst length ("periodic") or mean burst length ("mmpp").
      burst_gap_s: float32 [s], mean time between "mmpp" bursts.
      burst_class_mix: float32 (3,), fraction of the requests in each class during a burst.
      prompt: LengthDist of prompt lengths [tokens].
      output: LengthDist of output lengths [tokens].
      burst_prompt: LengthDist of the prompt lengths of requests arriving during a burst.
      trace: Trace for "trace" replay, else None.
      schedule: static str, one of SCHEDULES.
      length_strata: static str, one of LENGTH_STRATA_RULES: how `Arrivals.prompt_strata` follow
        from the law's strata (`traffic.strata`).
    """

    base_rate: Array
    class_mix: Array
    burst_multiplier: Array
    burst_period_s: Array
    burst_duration_s: Array
    burst_gap_s: Array
    burst_class_mix: Array
    prompt: LengthDist
    output: LengthDist
    burst_prompt: LengthDist
    trace: Trace | None = None
    schedule: str = struct.field(pytree_node=False, default="constant")
    length_strata: str = struct.field(pytree_node=False, default="moments")


@struct.dataclass
class WorkloadState:
    """Per-episode traffic state.

    Attributes:
      in_burst: bool, whether an "mmpp" burst is on.
      phase_s: float32 [s], offset of the "periodic" schedule, or of the trace replay start.
    """

    in_burst: Array
    phase_s: Array


@struct.dataclass
class Arrivals:
    """New requests of one control interval, per class; leaves shape (3,).

    Attributes:
      count: float32 [requests], integer-valued.
      prompt_tokens: float32 [tokens], sum of their prompt lengths.
      output_tokens: float32 [tokens], sum of their output lengths.
      prompt_sq_tokens: float32 [tokens^2], sum of squared prompt lengths (prefill attention).
      rate: float32 [req/s], the scheduled rate of the interval (all classes), for reference.
      prompt_strata: float32 (3, len(strata.LENGTH_STRATA_W)) or None, one request's prompt length at
        each length stratum relative to the mean, per class (`strata.length_strata`): of the lognormal
        with the class's length law's two moments (synthetic traffic), or with the whole trace's
        (a trace), given the interval's count and sum under the "conditional" rule
        (`WorkloadParams.length_strata`); the mixed engine's length nodes (`serving.fresh_ttft`).
        None where unknown (the engine then takes the spread from the bin's sums).
      prompt_law: float32 (2,) or None, [tokens] and [tokens^2]: the mean and mean square of the prompt
        length of a request arriving now, over the classes at their rates (the law in force:
        `pooled_prompt_law`; a trace's over the whole trace), whatever this interval drew; the
        prompts that may land in a request's decode (`serving.tpot_spread`). None where unknown.
      busy_rate: float32 () or None, [req/s] the rate at which requests join this server while it
        holds a given request (a replica behind a least-loaded router: `fleet.routing.busy_join_share`
        of its rate); None: `rate` (a lone server, or a random router's Poisson thinning).
    """

    count: Array
    prompt_tokens: Array
    output_tokens: Array
    prompt_sq_tokens: Array
    rate: Array
    prompt_strata: Array | None = None
    prompt_law: Array | None = None
    busy_rate: Array | None = None


# ----------------------------------------------------------------------------- lengths


def trace_strata(trace: Trace) -> Array:
    """`strata.length_strata` of each class's prompts over the whole trace, float32 (3, 5): from the
    trace's totals (params only, so computed once for a batch of episodes, not per episode)."""
    count, prompt, _, prompt_sq = trace_totals_before(trace, jnp.asarray(jnp.inf, jnp.float32))
    return strata_of_sums(count, prompt, prompt_sq)


# ----------------------------------------------------------------------------- random draws

# Uniforms one reset uses: burst phase or trace offset, initial burst state.
RESET_DRAWS = 2


def reset_draws(key: jax.Array) -> Array:
    """The uniforms a reset uses, (RESET_DRAWS,)."""
    return sampling.uniforms(key, RESET_DRAWS)


def trace_of(params: WorkloadParams) -> Trace:
    """The recorded trace a "trace" schedule replays.

    Raises:
      ValueError: the params have no trace (the task validator requires one for "trace").
    """
    if params.trace is None:
        raise ValueError("workload schedule 'trace' needs a recorded trace; WorkloadParams.trace is None")
    return params.trace


def init_from_draws(u: Array, params: WorkloadParams, episode_s: Array) -> WorkloadState:
    """Per-episode traffic state from two uniforms `u` (2,) in [0, 1) (see `reset_draws`)."""
    if params.schedule == "trace":
        span = jnp.maximum(jnp.min(trace_of(params).duration_s) - episode_s, 0.0)
        phase = u[0] * span
    else:
        phase = u[0] * params.burst_period_s
    in_burst = (params.schedule == "mmpp") & (u[1] < burst_time_fraction(params))
    return WorkloadState(in_burst=jnp.asarray(in_burst), phase_s=jnp.asarray(phase, jnp.float32))


def init(key: jax.Array, params: WorkloadParams, episode_s: Array) -> WorkloadState:
    """Per-episode traffic state: a random burst phase or trace offset."""
    return init_from_draws(reset_draws(key), params, episode_s)


def burst_on(state: WorkloadState, t_s: Array, params: WorkloadParams) -> Array:
    """Whether a burst is on at time t_s (bool)."""
    if params.schedule == "periodic":
        return jnp.mod(t_s + state.phase_s, params.burst_period_s) < params.burst_duration_s
    if params.schedule == "mmpp":
        return state.in_burst
    return jnp.asarray(False)


def arrival_rate(state: WorkloadState, t_s: Array, params: WorkloadParams) -> Array:
    """Scheduled arrival rate [req/s] at time t_s (all classes)."""
    return params.base_rate * jnp.where(burst_on(state, t_s, params), params.burst_multiplier, 1.0)


@struct.dataclass
class Draws:
    """The random draws of one control interval; `advance` is deterministic given them.

    Attributes:
      count: float32 (3,) [requests], Poisson arrivals per class (integer-valued).
      z_prompt: float32 (3,), standard normals for the prompt-length sums.
      z_output: float32 (3,), standard normals for the output-length sums.
      u_burst: float32, uniform in [0, 1) for the "mmpp" burst switch.
    """

    count: Array
    z_prompt: Array
    z_output: Array
    u_burst: Array


# Uniforms one interval uses: a Poisson count and two length-sum normals per class, the burst switch.
STEP_DRAWS = 3 * NUM_CLASSES + 1


def class_means(dt_s: Array, params: WorkloadParams) -> tuple[Array, Array]:
    """Poisson means [requests] of an interval's arrivals per class, float32 (3,) each: outside
    a burst and inside one ("periodic" or "mmpp")."""
    lam_off = params.base_rate * dt_s * params.class_mix
    lam_on = params.base_rate * dt_s * params.burst_class_mix * params.burst_multiplier
    return lam_off, lam_on


def mmpp_flip_probabilities(dt_s: Array, params: WorkloadParams) -> tuple[Array, Array]:
    """Per-interval probabilities that an "mmpp" burst starts (while off) and ends (while on)."""
    return dt_s / params.burst_gap_s, dt_s / params.burst_duration_s


def draws_from_uniforms(
    u: Array, state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams
) -> Draws:
    """The interval's `Draws` from STEP_DRAWS uniforms in [0, 1) (see `draw`)."""
    z = sampling.normals(u[NUM_CLASSES + 1:])
    # The CDF tables depend on the task only (two rates: outside and inside a burst), so under
    # vmap over envs they are computed once per step and each env only compares against them.
    lam_off, lam_on = class_means(dt_s, params)
    u_count = u[:NUM_CLASSES]
    count = sampling.poisson_quantile(u_count, lam_off, sampling.poisson_cdf(lam_off))
    if params.schedule in ("periodic", "mmpp"):
        on = burst_on(state, t_s, params)
        count = jnp.where(on, sampling.poisson_quantile(u_count, lam_on, sampling.poisson_cdf(lam_on)), count)
    return Draws(count=count, z_prompt=z[:NUM_CLASSES], z_output=z[NUM_CLASSES:], u_burst=u[NUM_CLASSES])


def draw(key: jax.Array, state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams) -> Draws:
    """All random draws of the interval [t_s, t_s + dt_s) from one key."""
    return draws_from_uniforms(sampling.uniforms(key, STEP_DRAWS), state, t_s, dt_s, params)


def prompt_law(state: WorkloadState, t_s: Array, params: WorkloadParams) -> tuple[LengthDist, Array]:
    """The prompt-length law of requests arriving at t_s (the burst law inside a burst) and its
    strata (float32 (3, len(strata.LENGTH_STRATA_W)), `Arrivals.prompt_strata` before clamping)."""
    prompt_dist = params.prompt
    strata = length_strata(log_sd_of(*length_moments(params.prompt)))
    if params.schedule in ("periodic", "mmpp"):  # both laws' strata, then a select: the exponentials stay per batch
        on = burst_on(state, t_s, params)
        prompt_dist = jax.tree_util.tree_map(lambda b, p: jnp.where(on, b, p), params.burst_prompt, params.prompt)
        strata = jnp.where(on, length_strata(log_sd_of(*length_moments(params.burst_prompt))), strata)
    return prompt_dist, strata


def pooled_prompt_law(state: WorkloadState, t_s: Array, params: WorkloadParams) -> Array:
    """`Arrivals.prompt_law` of synthetic traffic at t_s: each class's prompt law in force
    (`prompt_law`) weighted by its Poisson mean (`class_means`), float32 (2,) [tokens, tokens^2]."""
    dist, _ = prompt_law(state, t_s, params)
    lam_off, lam_on = class_means(jnp.ones((), jnp.float32), params)
    weight = jnp.where(burst_on(state, t_s, params), lam_on, lam_off) if params.schedule in ("periodic", "mmpp") \
        else lam_off
    m1, m2 = length_moments(dist)
    return jnp.stack([safe_div(jnp.sum(weight * m1), jnp.sum(weight)), safe_div(jnp.sum(weight * m2), jnp.sum(weight))])


def arrivals_of_counts(count: Array, z_prompt: Array, z_output: Array, rate: Array, prompt_dist: LengthDist,
                       strata: Array, params: WorkloadParams, law: Array | None = None) -> Arrivals:
    """`Arrivals` of `count` (3,) requests per class with prompts of `prompt_dist` (and its
    `prompt_law` strata), their length sums from the normals z_prompt, z_output (3,); `rate` and
    `law` (`Arrivals.prompt_law`) as they are."""
    prompt, prompt_sq = sum_of_lengths(z_prompt, count, prompt_dist)
    output, _ = sum_of_lengths(z_output, count, params.output)
    if params.length_strata == "clamped":  # none above the law's longest prompt
        strata = capped_strata(strata, safe_div(prompt_dist.high, safe_div(prompt, count)))
    return Arrivals(count, prompt, jnp.maximum(output, count), prompt_sq, rate, strata, law)


def next_burst_state(u_burst: Array, state: WorkloadState, dt_s: Array, params: WorkloadParams) -> WorkloadState:
    """The traffic state after an interval: an "mmpp" burst switches when u_burst < its flip probability."""
    if params.schedule != "mmpp":
        return state
    start, end = mmpp_flip_probabilities(dt_s, params)
    flip = jnp.where(state.in_burst, end, start)
    return dataclasses.replace(state, in_burst=jnp.where(u_burst < flip, ~state.in_burst, state.in_burst))


def advance(
    draws: Draws, state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams
) -> tuple[WorkloadState, Arrivals]:
    """Arrivals in [t_s, t_s + dt_s) and the next traffic state, given the interval's draws."""
    if params.schedule == "trace":
        return state, _trace_arrivals(state, t_s, dt_s, params)
    prompt_dist, strata = prompt_law(state, t_s, params)
    arrivals = arrivals_of_counts(draws.count, draws.z_prompt, draws.z_output, arrival_rate(state, t_s, params),
                                  prompt_dist, strata, params, pooled_prompt_law(state, t_s, params))
    return next_burst_state(draws.u_burst, state, dt_s, params), arrivals


def step(
    key: jax.Array, state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams
) -> tuple[WorkloadState, Arrivals]:
    """Arrivals in [t_s, t_s + dt_s) and the next traffic state."""
    if params.schedule == "trace":  # a replay draws nothing
        return state, _trace_arrivals(state, t_s, dt_s, params)
    return advance(draw(key, state, t_s, dt_s, params), state, t_s, dt_s, params)


def trace_totals_before(trace: Trace, time_s: Array) -> tuple[Array, Array, Array, Array]:
    """Per class, the requests of `trace` that arrived before `time_s` [s] on its clock:
    (count, prompt tokens, output tokens, squared prompt tokens), each float32 (3, *time_s.shape)."""
    def one_class(arrival: Array, prompt_cs: Array, output_cs: Array,
                  sq_cs: Array) -> tuple[Array, Array, Array, Array]:
        # Index of the last request with arrival < time (the sentinel at 0 is -inf).
        i = jnp.searchsorted(arrival, time_s, side="left") - 1
        return i.astype(jnp.float32), prompt_cs[i], output_cs[i], sq_cs[i]

    return jax.vmap(one_class)(trace.arrival_s, trace.prompt_cumsum, trace.output_cumsum, trace.prompt_sq_cumsum)


def _trace_arrivals(state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams) -> Arrivals:
    """Exact replay: requests of each class's trace with arrival in [t, t + dt) past the offset."""
    # end = phase + (t + dt), not (phase + t) + dt: bit for bit the next interval's start, so
    # consecutive intervals partition the trace (no request counted twice or lost to rounding).
    start, end = state.phase_s + t_s, state.phase_s + (t_s + dt_s)
    totals = trace_totals_before(trace_of(params), jnp.stack([start, end]))  # each (3, 2)
    count, prompt, output, sq = (total[:, 1] - total[:, 0] for total in totals)
    return Arrivals(count, prompt, output, sq, jnp.sum(count) / dt_s, trace_strata(trace_of(params)),
                    trace_prompt_law(trace_of(params)))


def trace_prompt_law(trace: Trace) -> Array:
    """`Arrivals.prompt_law` of a trace: its prompts' mean and mean square over the whole trace,
    float32 (2,) [tokens, tokens^2] (params only, as `trace_strata`)."""
    count, prompt, _, prompt_sq = trace_totals_before(trace, jnp.asarray(jnp.inf, jnp.float32))
    return jnp.stack([safe_div(jnp.sum(prompt), jnp.sum(count)), safe_div(jnp.sum(prompt_sq), jnp.sum(count))])


def burst_time_fraction(params: WorkloadParams) -> Array:
    """Long-run fraction of time in a burst ("periodic" or "mmpp"; 0 otherwise)."""
    if params.schedule == "periodic":
        return jnp.minimum(params.burst_duration_s / params.burst_period_s, 1.0)
    if params.schedule == "mmpp":
        return params.burst_duration_s / (params.burst_duration_s + params.burst_gap_s)
    return jnp.float32(0.0)


def mean_rate(params: WorkloadParams) -> Array:
    """Long-run mean arrival rate [req/s] of the schedule (trace: requests / duration)."""
    if params.schedule == "trace":
        trace = trace_of(params)
        n = jnp.sum(jnp.isfinite(trace.arrival_s[:, 1:]), axis=1)
        return jnp.sum(n / trace.duration_s)
    return params.base_rate * (1.0 + burst_time_fraction(params) * (params.burst_multiplier - 1.0))


# Window of a trace's peak rate: the per-minute resolution of the Azure load curve
# (scripts/azure_load_curve.py) [s].
PEAK_WINDOW_S = 60.0


def peak_rate(params: WorkloadParams) -> Array:
    """Highest scheduled arrival rate [req/s]: the burst rate ("periodic", "mmpp"), the base rate
    ("constant"), or a trace's busiest PEAK_WINDOW_S window (all classes together)."""
    if params.schedule == "trace":
        arrivals = jnp.sort(trace_of(params).arrival_s[:, 1:].reshape(-1))  # +inf padding sorts last
        in_window = jnp.searchsorted(arrivals, arrivals + PEAK_WINDOW_S) - jnp.arange(arrivals.size)
        return jnp.max(jnp.where(jnp.isfinite(arrivals), in_window, 0)) / PEAK_WINDOW_S
    if params.schedule in ("periodic", "mmpp"):
        return params.base_rate * jnp.maximum(params.burst_multiplier, 1.0)
    return params.base_rate


def mean_lengths(params: WorkloadParams) -> tuple[Array, Array]:
    """Mean prompt and output lengths [tokens] per request: mix-weighted, over the base and the
    burst regimes in proportion to the requests each brings (trace: over the whole trace)."""
    if params.schedule == "trace":
        tr = trace_of(params)
        n = jnp.sum(jnp.isfinite(tr.arrival_s[:, 1:]), axis=1)
        total = jnp.maximum(jnp.sum(n), 1)
        return jnp.sum(jnp.max(tr.prompt_cumsum, axis=1)) / total, jnp.sum(jnp.max(tr.output_cumsum, axis=1)) / total
    mix = params.class_mix
    base = jnp.sum(mix * length_moments(params.prompt)[0]), jnp.sum(mix * length_moments(params.output)[0])
    if params.schedule not in ("periodic", "mmpp"):
        return base
    bmix = params.burst_class_mix
    burst = jnp.sum(bmix * length_moments(params.burst_prompt)[0]), jnp.sum(bmix * length_moments(params.output)[0])
    # Share of the requests that arrive in bursts: burst time fraction x its rate factor.
    on = burst_time_fraction(params) * params.burst_multiplier
    share = on / (on + 1.0 - burst_time_fraction(params))
    same = jnp.all(bmix == mix) & jax.tree_util.tree_reduce(
        jnp.logical_and, jax.tree_util.tree_map(lambda a, b: jnp.all(a == b), params.burst_prompt, params.prompt))
    # A burst like the base traffic leaves the means as they are, to the bit.
    prompt_mean, output_mean = (jnp.where(same, b, (1.0 - share) * b + share * u) for b, u in zip(base, burst))
    return prompt_mean, output_mean
