"""Whole-request routing (the v2 fleet tasks): each request is served whole by one replica.

`routing.route` gives every replica its share of every request (the expected value of routing,
the v1 fleet tasks), which hides the bursts and the long prompts a real replica receives
(docs/FLEET.md, "What the fleet's pooling rests on"). Here the router sends each request to one
replica, replica r with probability share_r, independently of the other requests (randomised
routing). A Poisson stream of mean lam_c requests per interval routed so splits into independent
Poisson streams of means share_r lam_c (Poisson thinning), one per replica and one for the
refused share. So each replica's count is a Poisson draw of its own (`sampling.poisson_from_uniform`,
exact up to POISSON_EXACT_MAX) and its prompt and output sums are drawn from the length law for
that count (`workload.arrivals_of_counts`): a replica given one request gets one whole prompt.

That is the even rule (`route_requests` with equal shares): random routing, as a Kubernetes
Service in kube-proxy's iptables mode routes; round robin would spread the requests more evenly.

The least-loaded rule is join-the-shortest-queue (`jsq_counts`): the interval's requests (the
fleet's Poisson counts) go one by one to the replica holding the fewest (`routing.pooled_requests`
at the interval's start, plus those it was given this interval), as a least-request router sends
each request to the upstream with the fewest in flight. The loads it sees are the interval's
start's, so requests arriving in the same second do not see each other leave.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import Array

from inferencegym_jax.traffic import sampling, workload
from inferencegym_jax.traffic.workload import NUM_CLASSES, Arrivals, WorkloadParams, WorkloadState

# Uniforms per slot (each replica, then the refused share): per class a Poisson count and the
# normals of the prompt and output length sums.
SLOT_DRAWS = 3 * NUM_CLASSES


def routing_draws(num_replicas: int) -> int:
    """Uniforms one physics interval's routing uses for R = `num_replicas` (static int)."""
    return (num_replicas + 1) * SLOT_DRAWS


def expected_counts(state: WorkloadState, t_s: Array, dt_s: Array, params: WorkloadParams) -> Array:
    """float32 (3,) [requests], the Poisson means of the interval's arrivals per class (the burst
    means inside a burst).

    Raises:
      ValueError: a "trace" schedule (a replay has counts, not means: route it with `routing.route`).
    """
    if params.schedule == "trace":
        raise ValueError("whole-request routing needs a Poisson schedule; workload.schedule='trace' is a replay")
    lam_off, lam_on = workload.class_means(dt_s, params)
    if params.schedule in ("periodic", "mmpp"):
        return jnp.where(workload.burst_on(state, t_s, params), lam_on, lam_off)
    return lam_off


# Bisection steps of `jsq_counts`' level: the bracket is at most the interval's requests wide
# (< 2^7 at every shipped rate), and 40 halvings bring it below float32's spacing there.
JSQ_BISECTIONS = 40


def _greedy_counts(load: Array, n: Array) -> Array:
    """float32 (R,) [requests]: n whole requests given one by one to the replica of least load + given
    (load float32 (R,) [requests], +inf where not receiving; ties to the lowest index).

    Replica r's k-th request is given at level load_r + k, and the greedy router gives the n lowest
    levels: below the level V of the n-th, r gets ceil(V - load_r) of them (`below`), and the ones
    at V (ties) go in index order.
    """
    def below(level: Array) -> Array:
        return jnp.where(jnp.isfinite(load), jnp.maximum(jnp.ceil(level - load), 0.0), 0.0)

    def halve(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        enough = jnp.sum(below(mid)) >= n
        return jnp.where(enough, lo, mid), jnp.where(enough, mid, hi)

    lowest = jnp.min(jnp.where(jnp.isfinite(load), load, jnp.float32(3e38)))
    lo, hi = jax.lax.fori_loop(0, JSQ_BISECTIONS, halve, (lowest, lowest + n + 1.0))
    base = below(lo)
    tied = below(hi) > base  # a level in [lo, hi): the n-th level V and its ties (the same counting as base)
    extra = tied & (jnp.cumsum(tied.astype(jnp.float32)) <= n - jnp.sum(base))
    return jnp.where(jnp.any(jnp.isfinite(load)), base + extra.astype(jnp.float32), 0.0)


def jsq_counts(count: Array, load: Array, receiving: Array) -> Array:
    """float32 (R, 3) [requests]: the interval's requests per class, `count` (3,), given whole by
    join-the-shortest-queue to the receiving replicas (bool (R,)) of loads `load` (float32 (R,)
    [requests]); classes in priority order, each seeing the loads the ones before it left. All
    zeros when no replica receives (the caller refuses the requests)."""
    load = jnp.where(receiving, load, jnp.inf)

    def one_class(current: Array, n: Array) -> tuple[Array, Array]:
        given = _greedy_counts(current, n)
        return current + given, given

    return jax.lax.scan(one_class, load, count)[1].T


def _whole_requests(count: Array, u: Array, rate: Array, state: WorkloadState, t_s: Array,
                    params: WorkloadParams) -> tuple[Arrivals, Arrivals]:
    """Per slot (R replicas, then the refused), Arrivals of `count` (S, 3) whole requests: length
    sums from the law for the slot's own count, normals from u (S, 3, NUM_CLASSES)[:, 1:]; `rate`
    (S,) [req/s]. Returns the replicas' (leading axis R) and the refused (no prompt strata)."""
    z = sampling.normals(u[:, 1:])
    prompt_dist, strata = workload.prompt_law(state, t_s, params)
    law = workload.pooled_prompt_law(state, t_s, params)
    arrivals = jax.vmap(
        lambda n, zp, zo, r: workload.arrivals_of_counts(n, zp, zo, r, prompt_dist, strata, params, law)
    )(count, z[:, 0], z[:, 1], rate)
    per_replica = jax.tree_util.tree_map(lambda x: x[:-1], arrivals)
    lost = dataclasses.replace(jax.tree_util.tree_map(lambda x: x[-1], arrivals), prompt_strata=None,
                               prompt_law=None)
    return per_replica, lost


def route_requests(u: Array, share: Array, lost_share: Array, state: WorkloadState, t_s: Array, dt_s: Array,
                   params: WorkloadParams) -> tuple[Arrivals, Arrivals]:
    """One interval's arrivals under random routing, drawn replica by replica (module docstring).

    Args:
      u: float32 (routing_draws(R),) uniforms in [0, 1).
      share: float32 (R,), each replica's probability of a request (`routing.shares`: 0 for a
        replica not receiving).
      lost_share: float32 (), the probability a request is refused (1 when no replica receives).
      state, t_s, dt_s, params: the traffic's state, the interval's start [s] and length [s], and
        its WorkloadParams (a Poisson schedule; the rate of the interval as `workload.advance`'s).

    Returns:
      per_replica: Arrivals with (R, 3) leaves, rate (R,) [req/s] (share x the scheduled rate) and
        prompt strata (R, 3, strata) (clamped per replica under "clamped" strata).
      lost: Arrivals (3,) refused, with no prompt strata. The fleet's arrivals are the sum of the
        two: Poisson with means lam_c per class, as `workload.advance` draws them.
    """
    slots = jnp.concatenate([share, jnp.reshape(lost_share, (1,))]).astype(jnp.float32)
    u = u.reshape(slots.shape[0], 3, NUM_CLASSES)
    count = sampling.poisson_from_uniform(u[:, 0], slots[:, None] * expected_counts(state, t_s, dt_s, params))
    return _whole_requests(count, u, slots * workload.arrival_rate(state, t_s, params), state, t_s, params)


def route_jsq(u: Array, count: Array, load: Array, receiving: Array, state: WorkloadState, t_s: Array,
              params: WorkloadParams) -> tuple[Arrivals, Arrivals]:
    """One interval's `count` (float32 (3,), the fleet's Poisson draw) routed whole by
    join-the-shortest-queue (`jsq_counts` over `load` float32 (R,) [requests] and `receiving`
    bool (R,)); everything refused when no replica receives. u: float32 (routing_draws(R),)
    uniforms (the length normals). Returns per_replica and lost as `route_requests` does; the
    replicas' rate is the scheduled rate times their share of the interval's requests."""
    r = load.shape[0]
    given = jsq_counts(count, load, receiving)
    slots = jnp.concatenate([given, jnp.where(jnp.any(receiving), 0.0, count)[None]])
    share = jnp.sum(slots, axis=-1) / jnp.maximum(jnp.sum(count), 1.0)
    return _whole_requests(slots, u.reshape(r + 1, 3, NUM_CLASSES), share * workload.arrival_rate(state, t_s, params),
                           state, t_s, params)
