"""FlattenObservationWrapper: the normalised float32 vector as the observation.

    env = FlattenObservationWrapper(ig.make("InferenceGym-Task1-v0")[0])
    obs, state = env.reset(key, params)          # float32 (OBS_SIZE,), each entry in [0, 1]

The vector is the wrapped env's `flatten_observation` of its structured observation (the one
every network of this project sees, `observation.flatten`), and `observation_space` is its
`Box`. Everything else (actions, reward, state, `info`) is the wrapped env's, except that
`info["final_observation"]` (the observation before an auto-reset) is flattened too, so a
trainer that bootstraps truncated episodes reads the same kind of vector it acts on.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax import spaces
from inferencegym_jax.wrappers.base import StepResult, Wrapper


class FlattenObservationWrapper(Wrapper):
    """Observations are float32 (OBS_SIZE,) vectors in [0, 1] (batched: (..., OBS_SIZE))."""

    def observation_space(self, params: Any = None) -> spaces.Box:
        return self.env.flat_observation_space(params)

    def _flat(self, obs: Any, params: Any) -> jax.Array:
        return self.env.flatten_observation(obs, params)

    def _flat_step(self, result: StepResult, params: Any) -> StepResult:
        obs, state, reward, terminated, truncated, info = result
        if "final_observation" in info:
            info = {**info, "final_observation": self._flat(info["final_observation"], params)}
        return self._flat(obs, params), state, reward, terminated, truncated, info

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset(key, params)
        return self._flat(obs, params), state

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset_env(key, params)
        return self._flat(obs, params), state

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        return self._flat_step(self.env.step(key, state, action, params), params)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        return self._flat_step(self.env.step_env(key, state, action, params), params)

    def get_obs(self, state: Any, params: Any) -> jax.Array:
        return self._flat(self.env.get_obs(state, params), params)

    def flatten_observation(self, obs: Any, params: Any = None) -> jax.Array:
        """The observation is flat already: float32 (..., OBS_SIZE) unchanged."""
        return jnp.asarray(obs, jnp.float32)

    def inner_policy(self, policy: Any) -> Any:
        """`policy` of flat vectors as a policy of the wrapped env's structured observations."""

        def act(key: jax.Array, obs: Any, params: Any) -> Any:
            return policy(key, self._flat(obs, params), params)

        return act
