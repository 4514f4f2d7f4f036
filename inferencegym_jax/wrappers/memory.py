"""MemoryWrapper: the flat observation plus features a wrapper keeps from past intervals.

A server's operator sees more than the current interval: counters over the last minute, what
the traffic so far says about the next one. A memory wrapper keeps such a summary in its state,
advances it from each step's `info`, and appends `num_features` features in [0, 1] to the
wrapped env's flat observation. Subclasses say what the memory is (`fresh`), how an interval
changes it (`advance`) and what the policy sees of it (`features`); this class does the rest:

  * the memory starts anew at every reset, auto-resets included, and `info["final_observation"]`
    carries the memory of the episode that ended (so truncation bootstraps from what the policy
    saw);
  * a policy of such an env reads past intervals, so it has no stateless `inner_policy`: run it
    in the wrapper (`evaluate.run_episodes(wrapper, params, policy, ...)`).

Subclasses: `ArrivalHistoryWrapper` (arrivals per window), `TrafficForecastWrapper` (the traffic
belief's forecast of bursts).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax import spaces
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.wrappers.base import StepResult, Wrapper


class MemoryWrapper(Wrapper):
    """Observations are float32 (OBS_SIZE + num_features,) vectors in [0, 1]; actions, reward and
    info are the wrapped env's. The state is a pytree with the wrapped env's state in `env_state`."""

    num_features: int

    def fresh(self, env_state: Any, params: Any) -> Any:
        """The wrapper's state at a reset, around the wrapped env's `env_state`."""
        raise NotImplementedError

    def advance(self, state: Any, env_state: Any, info: dict[str, Any], params: Any) -> Any:
        """The state after an interval whose step gave `env_state` and `info`."""
        raise NotImplementedError

    def features(self, state: Any, params: Any) -> jax.Array:
        """float32 (num_features,) in [0, 1], what the policy sees of the memory."""
        raise NotImplementedError

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (int(self.env.flat_observation_space(params).shape[0]) + self.num_features,))

    def flat_observation_space(self, params: Any = None) -> spaces.Box:
        return self.observation_space(params)

    def _params(self, params: Any) -> Any:
        return self.default_params if params is None else params

    def _obs(self, inner_obs: Any, state: Any, params: Any) -> jax.Array:
        params = self._params(params)
        extra = jnp.clip(self.features(state, params), 0.0, 1.0).astype(jnp.float32)
        return jnp.concatenate([self.env.flatten_observation(inner_obs, params), extra], -1)

    def _step(self, result: StepResult, state: Any, params: Any, resets: bool) -> StepResult:
        obs, env_state, reward, terminated, truncated, info = result
        after = self.advance(state, env_state, info, self._params(params))
        if "final_observation" in info:
            info = {**info, "final_observation": self._obs(info["final_observation"], after, params)}
        if resets:  # the wrapped env reset itself at the episode's end: so does the memory
            done = terminated | truncated
            after = jax.tree_util.tree_map(lambda fresh, kept: jnp.where(done, fresh, kept),
                                           self.fresh(env_state, self._params(params)), after)
        return self._obs(obs, after, params), after, reward, terminated, truncated, info

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        obs, env_state = self.env.reset(key, params)
        state = self.fresh(env_state, self._params(params))
        return self._obs(obs, state, params), state

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        obs, env_state = self.env.reset_env(key, params)
        state = self.fresh(env_state, self._params(params))
        return self._obs(obs, state, params), state

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        return self._step(self.env.step(key, state.env_state, action, params), state, params, resets=True)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        return self._step(self.env.step_env(key, state.env_state, action, params), state, params, resets=False)

    def get_obs(self, state: Any, params: Any) -> jax.Array:
        return self._obs(self.env.get_obs(state.env_state, params), state, params)

    def flatten_observation(self, obs: Any, params: Any = None) -> jax.Array:
        """The observation is flat already: float32 (..., OBS_SIZE + num_features) unchanged."""
        return jnp.asarray(obs, jnp.float32)

    def knobs_in_force(self, state: Any, params: Any) -> ServingAction:
        return self.env.knobs_in_force(state.env_state, params)

    def inner_policy(self, policy: Any) -> Any:
        raise ValueError(f"a policy of {type(self).__name__} reads past intervals (its state), so it cannot act "
                         "on the serving env's observation alone: run it in the wrapper "
                         "(evaluate.run_episodes(wrapper, params, policy, ...))")


def is_memory_wrapper(env: Any) -> bool:
    """Whether `env` or any wrapper under it keeps a memory of past intervals."""
    while env is not None:
        if isinstance(env, MemoryWrapper):
            return True
        env = getattr(env, "env", None)
    return False
