"""A fleet of replicas of one server: the router, the replicas vmapped, the autoscaler's actuator.

The physics core of the fleet tasks (issue 42): R replicas (static) of `serving.serve_interval`,
each replica idle, warming (provisioning), serving or draining (`fleet.types`); one interval's
arrivals split among the serving replicas by routing weights or the least-loaded rule
(`fleet.routing`), or request by request (`fleet.request_routing`, then
`fleet.physics.serve_routed`); `fleet.physics.fleet_interval` steps them all in one `jax.vmap` and sums the
fleet's metrics; `fleet.physics.scale_to` starts or drains replicas towards a target count. Pure
JAX, jit- and vmap-able; a one-replica fleet with weight 1 is the single server.
"""

from __future__ import annotations

from inferencegym_jax.fleet.physics import (
    COUNTDOWN_TOLERANCE_S,
    EMPTY_BELOW_REQUESTS,
    fleet_interval,
    scale_to,
    serve_routed,
)
from inferencegym_jax.fleet.request_routing import jsq_counts, route_jsq, route_requests
from inferencegym_jax.fleet.routing import least_loaded_weights, pooled_requests, route, shares
from inferencegym_jax.fleet.types import FleetMetrics, FleetState, initial_fleet, stack_configs

__all__ = [
    "COUNTDOWN_TOLERANCE_S",
    "EMPTY_BELOW_REQUESTS",
    "FleetMetrics",
    "FleetState",
    "fleet_interval",
    "initial_fleet",
    "jsq_counts",
    "least_loaded_weights",
    "pooled_requests",
    "route",
    "route_jsq",
    "route_requests",
    "scale_to",
    "serve_routed",
    "shares",
    "stack_configs",
]
