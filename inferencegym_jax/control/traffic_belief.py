"""What the arrivals seen so far say about a schedule's hidden state: a Bayesian filter.

The traffic of a "periodic" or "mmpp" schedule has a hidden part (`workload.WorkloadState`): the
periodic burst's phase, or whether an MMPP burst is on. A controller that plans with the true
one knows when every future periodic burst comes, which no server does. This filter is what a
causal planner may know instead: the posterior over the hidden state given the per-class
arrival counts of the intervals so far (exact Poisson likelihoods of `workload`'s own model).

  * "periodic": a log-likelihood per phase of a grid of PHASE_GRID phases over the period
    (phase_k = k x period / PHASE_GRID); prior uniform, as `workload.init_from_draws` draws it.
    After one burst the posterior sits on the cells whose burst pattern matches what was seen.
  * "mmpp": the forward algorithm of the two-state chain (off, on) with the flip probabilities
    of `workload.advance`; prior the chain's stationary law, as `init_from_draws` draws it.
  * "constant" and "trace": nothing is hidden from this model's point of view (a trace's offset
    is handled by the planner, `mpc_planning._planning_state`); the belief stays at its prior and
    `sample` returns the state it is given.

Counts of class c in an interval are Poisson(lam_c) with lam_c = base_rate x dt x class_mix_c
off a burst and base_rate x dt x burst_class_mix_c x burst_multiplier in one (`workload.
draws_from_uniforms`); the factorial terms are the same for every hypothesis and are dropped.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax.traffic import workload
from inferencegym_jax.traffic.workload import WorkloadParams, WorkloadState

# Phases the "periodic" posterior distinguishes: cells of period / PHASE_GRID (0.47 s for task
# 2's 60 s period, finer than its 1 s control interval, so a cell's burst pattern over the
# episode's intervals is that of every phase in it up to one interval at a burst's edge).
PHASE_GRID = 128


@struct.dataclass
class TrafficBelief:
    """Posterior over the hidden traffic state, unnormalised logs (float32).

    Attributes:
      log_phase: float32 (PHASE_GRID,), log-likelihood of each grid phase [s] k x period /
        PHASE_GRID of a "periodic" schedule given the counts so far (0 otherwise).
      log_burst: float32 (2,), log P(off), log P(on) of an "mmpp" burst in the next interval
        given the counts so far (the stationary law before any; 0 otherwise).
    """

    log_phase: Array
    log_burst: Array


def grid_phases(params: WorkloadParams) -> jax.Array:
    """float32 (PHASE_GRID,) [s], the phases of `TrafficBelief.log_phase`."""
    return jnp.arange(PHASE_GRID, dtype=jnp.float32) * (params.burst_period_s / PHASE_GRID)


def _on_per_phase(t_s: Array, params: WorkloadParams) -> jax.Array:
    """bool (PHASE_GRID,), whether a "periodic" burst is on at t_s for each grid phase."""
    grid = WorkloadState(in_burst=jnp.asarray(False), phase_s=grid_phases(params))
    return workload.burst_on(grid, t_s, params)


def init(params: WorkloadParams) -> TrafficBelief:
    """The prior: every phase alike; an MMPP burst on with its long-run probability."""
    log_burst = jnp.zeros(2, jnp.float32)
    if params.schedule == "mmpp":
        p_on = workload.burst_time_fraction(params)
        log_burst = jnp.log(jnp.stack([1.0 - p_on, p_on]).astype(jnp.float32))
    return TrafficBelief(log_phase=jnp.zeros(PHASE_GRID, jnp.float32), log_burst=log_burst)


def _log_likelihoods(count: Array, dt_s: Array, params: WorkloadParams) -> jax.Array:
    """float32 (2,), log P(count | off), log P(count | on) up to the shared factorial terms."""
    lam_off, lam_on = workload.class_means(dt_s, params)

    def log_poisson(lam):  # xlogy: a class with no rate and no arrivals adds 0, not nan
        return jnp.sum(jax.scipy.special.xlogy(count, lam) - lam)

    return jnp.stack([log_poisson(lam_off), log_poisson(lam_on)])


def update(belief: TrafficBelief, count: Array, t_s: Array, dt_s: Array, params: WorkloadParams) -> TrafficBelief:
    """The belief after seeing `count` (float32 (3,) [requests] per class) arrive in [t_s, t_s + dt_s)."""
    if params.schedule not in ("periodic", "mmpp"):
        return belief
    loglik = _log_likelihoods(count, dt_s, params)
    # A count neither hypothesis allows (not from this model) leaves the belief as it was.
    loglik = jnp.where(jnp.all(jnp.isneginf(loglik)), 0.0, loglik)
    if params.schedule == "periodic":
        on = _on_per_phase(t_s, params)
        log_phase = belief.log_phase + jnp.where(on, loglik[1], loglik[0])
        return dataclasses.replace(belief, log_phase=log_phase - jnp.max(log_phase))
    # mmpp: condition on the count, then step the chain once (workload.advance's flips).
    post = belief.log_burst + loglik
    post = post - jax.scipy.special.logsumexp(post)
    leave_off, leave_on = workload.mmpp_flip_probabilities(dt_s, params)
    transition = jnp.array([[1.0 - leave_off, leave_off], [leave_on, 1.0 - leave_on]], jnp.float32)
    log_next = jax.scipy.special.logsumexp(post[:, None] + jnp.log(transition), axis=0)
    return dataclasses.replace(belief, log_burst=log_next)


def sample(belief: TrafficBelief, key: jax.Array, state: WorkloadState, params: WorkloadParams) -> WorkloadState:
    """`state` with its hidden part drawn from the belief: a posterior phase (uniform within its
    grid cell) or a posterior burst state; unchanged for schedules with nothing hidden."""
    if params.schedule == "periodic":
        k_cell, k_within = jax.random.split(key)
        cell = jax.random.categorical(k_cell, belief.log_phase)
        width = params.burst_period_s / PHASE_GRID
        phase = (cell.astype(jnp.float32) + jax.random.uniform(k_within)) * width
        return dataclasses.replace(state, phase_s=jnp.mod(phase, params.burst_period_s).astype(jnp.float32))
    if params.schedule == "mmpp":
        return dataclasses.replace(state, in_burst=jax.random.categorical(key, belief.log_burst) == 1)
    return state


def forecast(belief: TrafficBelief, t_s: Array, dt_s: Array, steps: int, params: WorkloadParams) -> jax.Array:
    """float32 (steps,), the belief's probability that a burst is on in each of the `steps`
    intervals from t_s (the first is [t_s, t_s + dt_s)): "periodic", the posterior weight of the
    phases whose burst covers each interval's start; "mmpp", the on/off chain's law k intervals
    after the belief's, p_k = p_stat + (p_0 - p_stat) (1 - a - b)^k with a and b the per-interval flip
    probabilities (`workload.mmpp_flip_probabilities`); 0 for schedules with no bursts."""
    ahead = jnp.arange(steps, dtype=jnp.float32)
    if params.schedule == "periodic":
        weights = jax.nn.softmax(belief.log_phase)
        on = jax.vmap(lambda t: _on_per_phase(t, params))(t_s + ahead * dt_s)
        return jnp.sum(on * weights, axis=-1)
    if params.schedule == "mmpp":
        p_now = probability_on(belief, t_s, params)
        leave_off, leave_on = workload.mmpp_flip_probabilities(dt_s, params)
        p_stat = leave_off / (leave_off + leave_on)
        return p_stat + (p_now - p_stat) * (1.0 - leave_off - leave_on) ** ahead
    return jnp.zeros((steps,), jnp.float32)


def probability_on(belief: TrafficBelief, t_s: Array, params: WorkloadParams) -> jax.Array:
    """float32, the belief's probability that a burst is on at t_s (for tests and plots)."""
    if params.schedule == "periodic":
        weights = jax.nn.softmax(belief.log_phase)
        on = _on_per_phase(t_s, params)
        return jnp.sum(weights * on)
    if params.schedule == "mmpp":
        return jnp.exp(belief.log_burst[1] - jax.scipy.special.logsumexp(belief.log_burst))
    return jnp.float32(0.0)


__all__ = ["PHASE_GRID", "TrafficBelief", "forecast", "grid_phases", "init", "probability_on", "sample", "update"]
