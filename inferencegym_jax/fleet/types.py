"""The fleet's state and per-interval metrics (pytrees), and an initial fleet.

A fleet is R replicas of one server (`serving.ServerState` stacked on a leading axis R, static).
Each replica is in one of four phases, read from `FleetState`'s masks:

  idle      ~active & warming_s == 0: no GPU held, costs nothing, its server state empty.
  warming   warming_s > 0: provisioning (node start, image pull, weight load, engine start);
            billed, serves nothing, becomes active when warming_s reaches 0.
  serving   active & ~draining: receives arrivals.
  draining  active & draining: takes no new arrivals, serves its backlog, billed; becomes idle
            when its queue, running and preempted pools are empty (`physics.EMPTY_BELOW_REQUESTS`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax.actions import ServingAction
from inferencegym_jax.serving import IntervalMetrics, ServerState, initial_state


@struct.dataclass
class FleetState:
    """R replicas between two control intervals (R static: the leading axis of every leaf).

    Attributes:
      servers: serving.ServerState with a leading axis R on every leaf (queue leaves float32
        (R, 3, A), pool leaves float32 (R,), config leaves float32 (R,), started bool (R,)).
      active: bool (R,), the replica's engine is up (serving or draining): it is stepped and billed.
      warming_s: float32 (R,) [s] of provisioning left for a replica being started; 0 otherwise.
      draining: bool (R,), an active replica that takes no new arrivals and is retired (made idle)
        once its queue and pools are empty.
    """

    servers: ServerState
    active: Array
    warming_s: Array
    draining: Array

    @property
    def num_replicas(self) -> int:
        """R, the static number of replica slots."""
        return int(self.active.shape[-1])

    @property
    def receiving(self) -> Array:
        """bool (R,): the replicas the router may send arrivals to (active and not draining)."""
        return self.active & ~self.draining

    @property
    def warming(self) -> Array:
        """bool (R,): the replicas being provisioned."""
        return self.warming_s > 0.0


@struct.dataclass
class FleetMetrics:
    """What one control interval produced over the fleet; float32 scalars unless noted.

    Sums run over the active replicas (idle and warming ones serve nothing and are masked to 0).

    Attributes:
      arrived: [requests] the fleet's arrivals.
      lost: [requests] refused: arrivals while no replica was receiving.
      residue: [requests] the fluid remainder (each below `physics.EMPTY_BELOW_REQUESTS`) of the
        draining replicas retired this interval, dropped with them.
      admitted: [requests] admitted for the first time.
      completed: [requests] finished.
      judged: [requests] whose SLO outcome the interval decided: each replica's judged requests
        (`serving.types.judged_metric`: completed or admitted) + timeouts + failed, plus `lost`
        and `residue`; the denominator of SLO attainment.
      slo_violations: [requests] the replicas' violations plus `lost` and `residue`.
      timeouts: [requests] that gave up waiting.
      failed: [requests] lost to out-of-memory restarts.
      output_tokens: [tokens] generated.
      good_tokens: [tokens] goodput (serving.IntervalMetrics.good_tokens summed).
      cost_usd: [$] GPU cost of the active and the warming replicas.
      gpu_seconds: [GPU s] GPUs held by the active and the warming replicas times the interval.
      ttft_p50_s, ttft_p99_s: [s] the replicas' TTFT percentiles averaged with weights their
        admitted requests (stand-ins: a mean of percentiles, not the mixture's percentile); 0
        when none was admitted.
      ttft_slo_ratio: the replicas' `ttft_slo_ratio`, same weights, in [0, 1].
      tpot_s: [s] the replicas' time per output token weighted by their output tokens.
      queue_depth: [requests] waiting at the end of the interval.
      replicas_serving, replicas_warming, replicas_draining: [replicas] at the end of the interval.
      replica: serving.IntervalMetrics with a leading axis R, each replica's own (zeros where
        the replica was not active during the interval).
    """

    arrived: Array
    lost: Array
    residue: Array
    admitted: Array
    completed: Array
    judged: Array
    slo_violations: Array
    timeouts: Array
    failed: Array
    output_tokens: Array
    good_tokens: Array
    cost_usd: Array
    gpu_seconds: Array
    ttft_p50_s: Array
    ttft_p99_s: Array
    ttft_slo_ratio: Array
    tpot_s: Array
    queue_depth: Array
    replicas_serving: Array
    replicas_warming: Array
    replicas_draining: Array
    replica: IntervalMetrics


def stack_configs(config: ServingAction, num_replicas: int) -> ServingAction:
    """`config` with (R,) float32 leaves: scalar leaves broadcast, (R,) leaves kept.

    Raises:
      ValueError: a leaf of another shape (names the knob and the allowed shapes).
    """
    def one(name: str, leaf: Array) -> Array:
        leaf = jnp.asarray(leaf, jnp.float32)
        if leaf.shape not in ((), (num_replicas,)):
            raise ValueError(f"config.{name} has shape {leaf.shape}; allowed: () or ({num_replicas},)")
        return jnp.broadcast_to(leaf, (num_replicas,))

    return ServingAction(**{k: one(k, getattr(config, k)) for k in ServingAction.__dataclass_fields__})


def initial_fleet(config: ServingAction, num_age_buckets: int, num_replicas: int, num_active: int,
                  slo_accounting: str = "admission") -> FleetState:
    """A fleet of `num_replicas` empty servers, the first `num_active` of them active (up, not
    yet configured: their first configuration is free, as `serving.initial_state`'s), the rest idle.

    Args:
      config: ServingAction, the configuration each server reports before its first interval
        (scalar or (R,) leaves).
      num_age_buckets: static int, `ServerParams.num_age_buckets`.
      num_replicas: static int R >= 1.
      num_active: int in [0, R].
      slo_accounting: static str, `ServerParams.slo_accounting` ("request" adds TPOT cohorts).

    Raises:
      ValueError: `num_replicas` < 1 or `num_active` outside [0, num_replicas].
    """
    if num_replicas < 1:
        raise ValueError(f"num_replicas={num_replicas} must be >= 1")
    if not 0 <= num_active <= num_replicas:
        raise ValueError(f"num_active={num_active} must be in [0, {num_replicas}] (num_replicas)")
    servers = jax.vmap(lambda c: initial_state(c, num_age_buckets, slo_accounting))(
        stack_configs(config, num_replicas))
    index = jnp.arange(num_replicas)
    return FleetState(
        servers=servers,
        active=index < num_active,
        warming_s=jnp.zeros((num_replicas,), jnp.float32),
        draining=jnp.zeros((num_replicas,), bool),
    )
