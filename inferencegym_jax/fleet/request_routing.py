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

The shares are the router's rule applied to the interval's expected count: the least-loaded rule
(`routing.water_filling_weights` of sum_c lam_c) makes a replica likelier to receive the further
its load is below the common level; it is randomised join-the-shortest-queue, balancing the
loads in the mean but not request by request as a router that sees every queue at each arrival
would, so the per-replica bursts it leaves are at least a real least-loaded router's (the fleet's
pooling is not overstated). The even rule is random routing, not round robin (which spreads
requests more evenly than Poisson).
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


def route_requests(u: Array, share: Array, lost_share: Array, state: WorkloadState, t_s: Array, dt_s: Array,
                   params: WorkloadParams) -> tuple[Arrivals, Arrivals]:
    """One interval's arrivals, drawn replica by replica under randomised routing (module docstring).

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
    z = sampling.normals(u[:, 1:])
    prompt_dist, strata = workload.prompt_law(state, t_s, params)
    rate = workload.arrival_rate(state, t_s, params)
    arrivals = jax.vmap(
        lambda n, zp, zo, s: workload.arrivals_of_counts(n, zp, zo, s * rate, prompt_dist, strata, params)
    )(count, z[:, 0], z[:, 1], slots)
    per_replica = jax.tree_util.tree_map(lambda x: x[:-1], arrivals)
    lost = dataclasses.replace(jax.tree_util.tree_map(lambda x: x[-1], arrivals), prompt_strata=None)
    return per_replica, lost
