"""Probe environments: tiny tasks whose value function and best action are known exactly.

They have the serving env's call shape (reset / step with auto-reset and
`info["final_observation"]` / spaces / flatten_observation / default_params: the
`protocols.Environment` contract), so the PPO trainer runs on them unchanged; tests use them
to check value learning, discounting, advantage signs and truncation bootstrapping in
isolation (after Andy Jones' "debugging RL" probes).

| probe             | observation            | reward                   | episode           | V                       |
|-------------------|------------------------|--------------------------|-------------------|-------------------------|
| ConstantReward    | 0                      | 1 every step             | `horizon` steps   | 1 (horizon 1, terminal) |
|                   |                        |                          |                   | 1/(1-gamma) (truncated) |
| ObservationReward | +1 or -1 (random draw) | the observation          | 1 step, terminal  | V(o) = o                |
| TwoStepDiscount   | 0, then 1              | 0, then 1                | 2 steps, terminal | V(0) = gamma, V(1) = 1  |
| ActionReward      | 0                      | +1 if action[0] == 1,    | 1 step, terminal  | best action 1, V = 1    |
|                   |                        | else -1                  |                   |                         |

Observations are float32 (1,); the action is an int32 (2,) MultiDiscrete with nvec (2, 1) (the
second knob masked, as in the serving tasks).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from inferencegym_jax import spaces
from inferencegym_jax.env import auto_reset
from inferencegym_jax.protocols import StepResult

NVEC = (2, 1)


@struct.dataclass
class ProbeParams:
    """Attributes:
      max_steps_in_episode: int32 (), the horizon [steps].
      terminal: static bool; True: the horizon is a terminal state (terminated), False: a time
        limit (truncated) that the observation does not reveal.
    """

    max_steps_in_episode: Any
    terminal: bool = struct.field(pytree_node=False, default=True)


@struct.dataclass
class ProbeState:
    """Attributes: time int32 () [steps]; sign float32 (), the observation drawn at reset."""

    time: Any
    sign: Any


class ProbeEnv:
    """Base: a fixed-horizon episode; subclasses define observation and reward."""

    horizon: int = 1
    terminal: bool = True

    def __init__(self, horizon: int | None = None, terminal: bool | None = None):
        horizon = self.horizon if horizon is None else horizon
        if horizon < 1:
            raise ValueError(f"horizon={horizon} must be >= 1")
        self._params = ProbeParams(jnp.int32(horizon), self.terminal if terminal is None else terminal)

    @property
    def default_params(self) -> ProbeParams:
        return self._params

    def action_space(self, params: ProbeParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete(NVEC, ("choice", "masked"))

    def observation_space(self, params: ProbeParams | None = None) -> spaces.Box:
        """float32 (1,) in [-1, 1]: the sign the probe shows, or 0."""
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def flatten_observation(self, obs: jax.Array, params: ProbeParams | None = None) -> jax.Array:
        return obs.astype(jnp.float32)

    def observation(self, state: ProbeState) -> jax.Array:
        return jnp.zeros((1,), jnp.float32)

    def reward(self, state: ProbeState, action: jax.Array) -> jax.Array:
        raise NotImplementedError

    def reset(self, key: jax.Array, params: ProbeParams | None = None) -> tuple[jax.Array, ProbeState]:
        sign = jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)
        state = ProbeState(jnp.zeros((), jnp.int32), sign)
        return self.observation(state), state

    def step(self, key: jax.Array, state: ProbeState, action: jax.Array,
             params: ProbeParams | None = None) -> StepResult:
        params = params or self._params
        reward = self.reward(state, action).astype(jnp.float32)
        next_state = ProbeState(state.time + 1, state.sign)
        at_horizon = next_state.time >= params.max_steps_in_episode
        terminated = at_horizon & params.terminal
        truncated = at_horizon & (not params.terminal)
        final_obs = self.observation(next_state)
        obs, state = auto_reset(at_horizon, self.reset(key, params), (final_obs, next_state))
        info = {"final_observation": final_obs, "discount": 1.0 - terminated.astype(jnp.float32)}
        return obs, state, reward, terminated, truncated, info


class ConstantReward(ProbeEnv):
    """Reward 1 every step, observation 0: value learning and (with terminal=False) truncation."""

    def reward(self, state: ProbeState, action: jax.Array) -> jax.Array:
        return jnp.float32(1.0)


class ObservationReward(ProbeEnv):
    """Observation +-1 drawn at reset, reward = observation: the critic must read its input."""

    def observation(self, state: ProbeState) -> jax.Array:
        return state.sign[None]

    def reward(self, state: ProbeState, action: jax.Array) -> jax.Array:
        return state.sign


class TwoStepDiscount(ProbeEnv):
    """Observation = step index (0, 1), reward 1 only on the second step: V(0) = gamma."""

    horizon = 2

    def observation(self, state: ProbeState) -> jax.Array:
        return state.time.astype(jnp.float32)[None]

    def reward(self, state: ProbeState, action: jax.Array) -> jax.Array:
        return (state.time == 1).astype(jnp.float32)


class ActionReward(ProbeEnv):
    """Reward +1 for action[0] == 1, -1 for 0: the policy must learn to pick 1."""

    def reward(self, state: ProbeState, action: jax.Array) -> jax.Array:
        return jnp.where(action[0] == 1, 1.0, -1.0)


PROBES: dict[str, type[ProbeEnv]] = {
    "constant": ConstantReward,
    "observation": ObservationReward,
    "two_step": TwoStepDiscount,
    "action": ActionReward,
}
