"""The router: one interval's `Arrivals` split among the replicas.

The engine is fluid in counts (`serving`: real-valued expected requests), so a replica given a
share s of the traffic receives s times every per-class sum: count, prompt and output tokens,
squared prompt tokens, and the rate. A per-request shape (`Arrivals.prompt_strata`, the prompt
length at each stratum relative to the mean) is the same for every replica; the strata the mixed
engine derives from the sums (`strata.strata_of_sums`) are unchanged by a common factor too.
This is the expected value of independent (Bernoulli) routing, not its distribution: Bernoulli
routing thins a Poisson stream of rate L into Poisson streams of rates s L (variance s L), while
this split gives each replica s times the fleet's realised count (variance s^2 L) and every long
prompt as s of a prompt. A fleet of N equal replicas so sees N times less burstiness per replica
than whole-request routing would give it; with the engine's per-interval TPOT check (a prefill
that slows an interval past the SLO turns that interval's decodes late: `serving.goodput`), this
makes pooling look far stronger than it is (docs/FLEET.md, "What the fleet's pooling rests on").

Whole requests (each to one replica; the even rule of the v2 fleet tasks, and join-the-shortest-
queue on whole requests) are `fleet.request_routing`'s.

Two rules give the weights:
  `route` with caller weights (float32 (R,), >= 0): renormalised over the receiving replicas.
  `least_loaded_weights`: the fluid limit of join-the-shortest-queue within an interval:
    arrivals fill the least-loaded receiving replicas (`pooled_requests`: queue + running + preempted) up
    to a common level (water-filling), so the loads after routing are as even as the arrivals
    allow.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.special import gammainc

from inferencegym_jax.fleet.types import FleetState
from inferencegym_jax.serving import ServerState
from inferencegym_jax.traffic.workload import Arrivals


def check_weights(weights: Array, num_replicas: int) -> None:
    """Host-side check of concrete routing weights (inside jit they are clipped instead).

    Raises:
      ValueError: weights of a shape other than (R,), or a weight negative or not finite.
    """
    if np.shape(weights) != (num_replicas,):
        raise ValueError(f"weights has shape {np.shape(weights)}; allowed: ({num_replicas},), one per replica")
    if isinstance(weights, jax.core.Tracer):
        return
    values = np.asarray(weights, np.float64)
    if not np.all(np.isfinite(values) & (values >= 0.0)):
        raise ValueError(f"weights={values.tolist()}: each must be finite and in [0, inf)")


def shares(weights: Array, receiving: Array) -> tuple[Array, Array]:
    """Each replica's share of the traffic and the refused share.

    Args:
      weights: float32 (R,) routing weights (negative or non-finite ones count as 0).
      receiving: bool (R,), the replicas that may receive.

    Returns:
      share: float32 (R,), the weights renormalised over the receiving replicas; if those are
        all 0, an equal split among the receiving replicas (a router without preference); 0 for
        the others.
      lost: float32 scalar, 1 when no replica is receiving (everything refused), else 0.
    """
    w = jnp.asarray(weights, jnp.float32)
    w = jnp.where(receiving & jnp.isfinite(w), jnp.maximum(w, 0.0), 0.0)
    total = jnp.sum(w)
    n = jnp.sum(receiving.astype(jnp.float32))
    even = jnp.where(receiving, 1.0 / jnp.maximum(n, 1.0), 0.0)
    share = jnp.where(total > 0.0, w / jnp.where(total > 0.0, total, 1.0), even)
    return share, jnp.where(n > 0.0, 0.0, 1.0).astype(jnp.float32)


def scale_arrivals(arrivals: Arrivals, share: Array) -> Arrivals:
    """`arrivals` split by `share`: leaves (R, 3) for per-class sums, (R,) for the rate, and the
    prompt strata and prompt law (per-request shapes) repeated on a leading axis R (or None)."""
    r = share.shape[0]
    strata, law = arrivals.prompt_strata, arrivals.prompt_law
    return Arrivals(
        count=share[:, None] * arrivals.count[None, :],
        prompt_tokens=share[:, None] * arrivals.prompt_tokens[None, :],
        output_tokens=share[:, None] * arrivals.output_tokens[None, :],
        prompt_sq_tokens=share[:, None] * arrivals.prompt_sq_tokens[None, :],
        rate=share * arrivals.rate,
        prompt_strata=None if strata is None else jnp.broadcast_to(strata, (r, *jnp.shape(strata))),
        prompt_law=None if law is None else jnp.broadcast_to(law, (r, *jnp.shape(law))),
    )


def route(arrivals: Arrivals, weights: Array, receiving: Array) -> tuple[Arrivals, Arrivals]:
    """Split one interval's arrivals among the replicas by `weights` (see `shares`).

    Args:
      arrivals: workload.Arrivals of the fleet, (3,) leaves.
      weights: float32 (R,) [dimensionless] routing weights, >= 0.
      receiving: bool (R,), the replicas that may receive (active, not draining).

    Returns:
      per_replica: Arrivals with a leading axis R (see `scale_arrivals`); zeros where not receiving.
      lost: Arrivals (3,) refused for want of a receiving replica (all of them or none), with
        no prompt strata. Per class, the replicas' counts and token sums add up to the fleet's
        minus `lost`'s (to float32 rounding).
    """
    share, lost_share = shares(weights, receiving)
    lost = dataclasses.replace(scale_arrivals(arrivals, lost_share[None]), prompt_strata=None, prompt_law=None)
    lost = jax.tree_util.tree_map(lambda x: x[0], lost)
    return scale_arrivals(arrivals, share), lost


def pooled_requests(servers: ServerState) -> Array:
    """float32 (R,) [requests] each replica holds: waiting + running + preempted."""
    return jnp.sum(servers.queue.count, axis=(-2, -1)) + servers.running.seqs + servers.preempted.seqs


def busy_join_share(servers: ServerState, receiving: Array) -> Array:
    """float32 () the share of a replica's arrival rate that joins it while it holds a given request,
    behind join-the-shortest-queue: the chance that every other receiving replica holds one too (a
    balanced JSQ sends a request to an empty replica while there is one). The fleet's other
    requests are taken Poisson with its mean count in system (`pooled_requests` at the interval's
    start: requests overlap independently, as in an infinite-server queue), so the share is
    P(Poisson(K) >= N - 1) for N receiving replicas, 1 for a lone one (`serving.tpot_spread`: the
    prompts that land in a request's decode)."""
    others = jnp.maximum(jnp.sum(receiving.astype(jnp.float32)) - 1.0, 0.0)
    in_system = jnp.sum(jnp.where(receiving, pooled_requests(servers), 0.0))
    return jnp.where(others > 0.0, gammainc(jnp.maximum(others, 1.0), in_system), 1.0)


def with_busy_rate(per_replica: Arrivals, share: Array) -> Arrivals:
    """`per_replica` with `Arrivals.busy_rate` its rate times `share` (`busy_join_share`; 1 for a
    random router)."""
    return dataclasses.replace(per_replica, busy_rate=per_replica.rate * share)


def least_loaded_weights(state: FleetState, arrivals: Arrivals) -> Array:
    """Routing weights of the least-loaded rule: float32 (R,) [requests], the arrivals each
    receiving replica gets by water-filling its load (`pooled_requests`) up to the common level h
    with sum_r max(h - load_r, 0) = the interval's arrivals; 0 for the others.

    h = min over k of (arrivals + sum of the k smallest loads) / k: for every k the k smallest
    loads need at least k h - (their sum) <= arrivals, with equality for the k replicas below h.
    With no arrivals every weight is 0 (`shares` then splits nothing evenly).
    """
    receiving = state.receiving
    load = jnp.where(receiving, pooled_requests(state.servers), 0.0)
    n = jnp.sum(arrivals.count)
    ordered = jnp.sort(jnp.where(receiving, load, jnp.inf))
    k = jnp.arange(1, ordered.shape[0] + 1, dtype=jnp.float32)
    level = jnp.min((n + jnp.cumsum(ordered)) / k)  # inf where no replica receives
    return jnp.where(receiving, jnp.maximum(jnp.where(receiving, level, 0.0) - load, 0.0), 0.0)
