"""TrafficForecastWrapper: the flat observation plus the traffic belief's forecast of bursts.

    env = TrafficForecastWrapper(ig.make("InferenceGym-Task2-v1")[0], intervals=15)
    obs, state = env.reset(key, params)          # float32 (OBS_SIZE + 15,), each entry in [0, 1]

A controller that must be ready when a burst comes needs to know when it comes. The arrivals
seen so far say it: `traffic_belief` is the exact Bayesian filter of a schedule's hidden traffic
state (a periodic burst's phase, an MMPP burst's on/off state) given the per-class arrival
counts, the same posterior the causal `mpc` plans from. This wrapper keeps that belief in its
state, updates it with each interval's arrivals, and appends its forecast: the probability that
a burst is on in each of the next `intervals` intervals (`traffic_belief.forecast`). Before any
arrivals it is the prior (a periodic burst equally likely at every phase, an MMPP burst on with
its long-run probability); one burst later, a periodic schedule's forecast is 0 or 1 up to an
interval at a burst's edges. Schedules without bursts ("constant", "trace") forecast 0.

What the policy sees is a function of the arrivals it could have counted and of the workload's
model (`params.workload`), nothing of the episode's future draws: a causal feature. It resets
with the episode (`memory.MemoryWrapper`), so a policy of it has no stateless `inner_policy`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax.control import traffic_belief
from inferencegym_jax.control.traffic_belief import TrafficBelief
from inferencegym_jax.protocols import ServingEnvironment
from inferencegym_jax.wrappers.memory import MemoryWrapper


@struct.dataclass
class ForecastState:
    """Attributes:
      env_state: the wrapped env's state.
      belief: traffic_belief.TrafficBelief given the arrivals of the episode so far.
      time: int32 [intervals], intervals since the episode began (the next interval's index).
    """

    env_state: Any
    belief: TrafficBelief
    time: Array


class TrafficForecastWrapper(MemoryWrapper):
    """Observations are float32 (OBS_SIZE + intervals,) vectors in [0, 1]: entry OBS_SIZE + k is the
    probability that a burst is on in the k-th interval from now (k = 0: the interval the action
    acts in). Actions, reward and info are the wrapped env's."""

    def __init__(self, env: ServingEnvironment, intervals: int = 15):
        if intervals < 1:
            raise ValueError(f"intervals={intervals} must be >= 1")
        super().__init__(env)
        self.intervals = self.num_features = int(intervals)

    def static_config(self) -> tuple[Any, ...]:
        return (self.intervals,)

    def fresh(self, env_state: Any, params: Any) -> ForecastState:
        """The prior, at the episode's first interval."""
        return ForecastState(env_state, traffic_belief.init(params.workload), jnp.zeros((), jnp.int32))

    def advance(self, state: ForecastState, env_state: Any, info: dict[str, Any], params: Any) -> ForecastState:
        """The belief after the interval's per-class arrivals (info["arrivals"].count)."""
        dt = params.server.dt_s
        belief = traffic_belief.update(state.belief, info["arrivals"].count, state.time.astype(jnp.float32) * dt, dt,
                                       params.workload)
        return ForecastState(env_state, belief, state.time + 1)

    def features(self, state: ForecastState, params: Any) -> jax.Array:
        dt = params.server.dt_s
        return traffic_belief.forecast(state.belief, state.time.astype(jnp.float32) * dt, dt, self.intervals,
                                       params.workload)
