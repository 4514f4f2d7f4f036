"""The wrapper base: holds an env and passes the serving env's API through to it unchanged.

A wrapper overrides what it changes (spaces, step, observations) and, so that a policy of the
wrapped env can be evaluated on the serving env (`evaluate` runs the unwrapped env's
reset_env/step_env), `inner_policy`: the same policy expressed in the spaces of the env it wraps.
Wrappers compare equal when they are of the same type, wrap equal envs and have equal
`static_config()`, so a jitted function that takes one as a static argument compiles once per
task and layout, not once per object.
"""

from __future__ import annotations

from typing import Any

import jax

from inferencegym_jax import spaces
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.protocols import Environment, ServingEnvironment, StepResult

# The action layout of the serving env itself (grid indices); knob_actions adds the others.
ABSOLUTE = "absolute"


def action_mode_of(env: Any) -> str:
    """The action layout of a wrapped or plain env: 'hold', 'relative' or 'absolute'."""
    return getattr(env, "action_mode", ABSOLUTE)


class Wrapper:
    """Holds `env` and passes the serving env's API through to it unchanged.

    Attributes:
      env: the wrapped env (a serving env or another wrapper).
    """

    def __init__(self, env: ServingEnvironment):
        self.env = env

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"

    def static_config(self) -> tuple[Any, ...]:
        """The wrapper's own settings (hashable); part of its identity."""
        return ()

    def _identity(self) -> tuple[Any, ...]:
        return (type(self), self.env, self.static_config())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Wrapper) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def action_mode(self) -> str:
        """The action layout of this env: the wrapped env's, for a wrapper that keeps its actions."""
        return action_mode_of(self.env)

    @property
    def unwrapped(self) -> Any:
        """The serving env under every wrapper."""
        return getattr(self.env, "unwrapped", self.env)

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    @property
    def env_id(self) -> str:
        return self.env.env_id

    @property
    def name(self) -> str:
        return self.env.name

    def observation_space(self, params: Any = None) -> spaces.Space:
        return self.env.observation_space(params)

    def flat_observation_space(self, params: Any = None) -> spaces.Box:
        return self.env.flat_observation_space(params)

    def action_space(self, params: Any = None) -> spaces.Space:
        return self.env.action_space(params)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        return self.env.reset(key, params)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        return self.env.reset_env(key, params)

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        return self.env.step(key, state, action, params)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        return self.env.step_env(key, state, action, params)

    def get_obs(self, state: Any, params: Any) -> Any:
        return self.env.get_obs(state, params)

    def flatten_observation(self, obs: Any, params: Any = None) -> jax.Array:
        return self.env.flatten_observation(obs, params)

    def knobs_in_force(self, state: Any, params: Any) -> ServingAction:
        return self.env.knobs_in_force(state, params)

    def inner_policy(self, policy: Any) -> Any:
        """`policy(key, obs, params)`, acting in this wrapper's spaces, as a policy of `self.env`'s
        spaces (the same actions applied). A wrapper that keeps both spaces returns it as is."""
        return policy


def flag_clipped(result: StepResult, clipped: jax.Array) -> StepResult:
    """`result` with `info["clipped"]` (bool (5,)) also True where `clipped` is."""
    obs, state, reward, terminated, truncated, info = result
    info = {**info, "clipped": info["clipped"] | clipped}
    return obs, state, reward, terminated, truncated, info


def base_action_policy(env: Environment, policy: Any) -> Any:
    """A policy of `env`'s spaces (a serving env under any stack of wrappers) as a policy of the
    serving env's: structured observations in, int32 (5,) grid indices out.

    Each wrapper, outermost first, turns the policy into one of the env it wraps
    (`Wrapper.inner_policy`), so `evaluate.run_episodes(env.unwrapped, params, base_action_policy(env,
    policy), ...)` applies the same actions as `policy` on the wrapped env.
    """
    while isinstance(env, Wrapper):
        policy = env.inner_policy(policy)
        env = env.env
    return policy
