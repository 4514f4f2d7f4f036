"""ArrivalHistoryWrapper: the flat observation plus the arrivals of the last minute, window by window.

    env = ArrivalHistoryWrapper(ig.make("InferenceGym-Task2-v1")[0], windows=12, window_intervals=5)
    obs, state = env.reset(key, params)          # float32 (OBS_SIZE + 12,), each entry in [0, 1]

The serving env's observation is a snapshot: the arrival-rate EMA forgets a burst within a few
intervals, so a policy of it cannot know where a periodic burst's cycle is or whether the load
is rising. This wrapper appends what a server's request counter shows over the last
`windows x window_intervals` intervals: the arrivals of each completed window, newest first,
over what the peak rate brings in a window (`observation.scales(params).peak_rate`, the scale
of `arrival_rate_ema`), clipped to [0, 1]. The history is part of the wrapper's state and
starts anew at every reset, auto-resets included (`info["final_observation"]` carries the
history before it): the windows before the episode began count the schedule's mean arrivals
(`workload.mean_rate`, the long-run load a server knows it carries), so that the first minute
looks like steady traffic and not like a server nobody sends requests to (with empty windows,
a policy trained on task 1-v1 ran batch 2 until its history filled: score 0.57 against 0.99).

A policy of this wrapper is stateful in the serving env's terms (its input depends on past
intervals), so it has no `inner_policy`: evaluate it in the wrapper (`memory.MemoryWrapper`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax import observation
from inferencegym_jax.protocols import ServingEnvironment
from inferencegym_jax.traffic import workload
from inferencegym_jax.wrappers.memory import MemoryWrapper


@struct.dataclass
class HistoryState:
    """Attributes:
      env_state: the wrapped env's state.
      counts: float32 (windows,) [requests], arrivals of each completed window, newest first
        (the schedule's mean per window for windows before the episode).
      current: float32 [requests], arrivals so far in the window under way.
      age: int32 [intervals], intervals of the window under way, in [0, window_intervals).
    """

    env_state: Any
    counts: Array
    current: Array
    age: Array


class ArrivalHistoryWrapper(MemoryWrapper):
    """Observations are float32 (OBS_SIZE + windows,) vectors in [0, 1]; actions, reward and info
    are the wrapped env's."""

    def __init__(self, env: ServingEnvironment, windows: int = 12, window_intervals: int = 5):
        if windows < 1 or window_intervals < 1:
            raise ValueError(f"windows={windows} and window_intervals={window_intervals} must be >= 1")
        super().__init__(env)
        self.windows, self.window_intervals = int(windows), int(window_intervals)
        self.num_features = self.windows

    def static_config(self) -> tuple[Any, ...]:
        return (self.windows, self.window_intervals)

    def fresh(self, env_state: Any, params: Any) -> HistoryState:
        """The history at a reset: every window at the schedule's mean arrivals."""
        mean = workload.mean_rate(params.workload) * params.server.dt_s * self.window_intervals
        return HistoryState(env_state, jnp.full((self.windows,), mean, jnp.float32), jnp.zeros((), jnp.float32),
                            jnp.zeros((), jnp.int32))

    def features(self, history: HistoryState, params: Any) -> jax.Array:
        per_window = observation.scales(params).peak_rate * params.server.dt_s * self.window_intervals
        return history.counts / jnp.maximum(per_window, 1e-6)

    def advance(self, history: HistoryState, env_state: Any, info: dict[str, Any], params: Any) -> HistoryState:
        """The history after an interval that brought info["arrivals"]."""
        current, age = history.current + jnp.sum(info["arrivals"].count), history.age + 1
        full = age >= self.window_intervals
        counts = jnp.where(full, jnp.concatenate([current[None], history.counts[:-1]]), history.counts)
        return HistoryState(env_state, counts, jnp.where(full, 0.0, current), jnp.where(full, 0, age))
