"""`to_gymnax`: the serving env as gymnax-style libraries (rejax, PureJaxRL) expect an env.

    import rejax
    env, params = to_gymnax(*ig.make("InferenceGym-Task1-v0"), legacy_step=True)
    algo = rejax.PPO.create(env=env, env_params=params, total_timesteps=200_000)
    train_state, returns = jax.jit(algo.train)(jax.random.PRNGKey(0))

What such a library needs and the serving env lacks:
  * an array observation: `FlattenObservationWrapper` (float32 (OBS_SIZE,) in [0, 1]);
  * one categorical action (PureJaxRL's `ppo.py` reads `action_space(params).n`; rejax's PPO is
    categorical only for `Discrete`): `JointDiscreteActionWrapper`;
  * spaces of gymnax's own classes, which these libraries test with `isinstance`: when gymnax
    is installed, `action_space` and `observation_space` return `gymnax.environments.spaces`
    objects (gymnax stays an optional dependency; without it, this package's look-alikes);
  * the step signature of the gymnax version the library was written for. gymnax >= 1.0
    returns (obs, state, reward, terminated, truncated, info), as this env does
    (`legacy_step=False`, the default). gymnax 0.0.x, and rejax and PureJaxRL, which still
    unpack it, take (obs, state, reward, done, info): `legacy_step=True`, where
    done = terminated | truncated and info keeps "terminated" and "truncated" apart.

Every serving episode ends by truncation at the horizon (a time limit, not a terminal state), so
a trainer that treats the legacy `done` as terminal stops bootstrapping one step early; with 200
intervals and discount 0.99 that bias is small, and it is the library's choice, not the env's.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from inferencegym_jax import spaces
from inferencegym_jax.protocols import ServingEnvironment
from inferencegym_jax.wrappers.base import Wrapper
from inferencegym_jax.wrappers.flatten import FlattenObservationWrapper
from inferencegym_jax.wrappers.joint_discrete import JointDiscreteActionWrapper


def _gymnax_spaces() -> Any:
    """gymnax.environments.spaces if gymnax is installed, else this package's spaces module."""
    try:
        from gymnax.environments import spaces as gymnax_spaces
    except ImportError:
        return spaces
    return gymnax_spaces


class GymnaxEnv(Wrapper):
    """A flat-observation, joint-discrete serving env with gymnax's spaces and step signature.

    Attributes:
      env: the wrapped env (JointDiscreteActionWrapper over FlattenObservationWrapper).
      legacy_step: True: `step` and `step_env` return gymnax 0.0.x's five values (obs, state,
        reward, done, info); False: six, as gymnax >= 1.0 and the serving env.
    """

    def __init__(self, env: ServingEnvironment, legacy_step: bool = False):
        super().__init__(env)
        self.legacy_step = bool(legacy_step)

    def static_config(self) -> tuple[Any, ...]:
        return (self.legacy_step,)

    def __repr__(self) -> str:
        return f"GymnaxEnv({self.env!r}, legacy_step={self.legacy_step})"

    @property
    def num_actions(self) -> int:
        """Number of joint actions (gymnax's `Environment.num_actions`)."""
        return self.action_space(self.default_params).n

    def action_space(self, params: Any = None) -> Any:
        return _gymnax_spaces().Discrete(self.env.action_space(params).n)

    def observation_space(self, params: Any = None) -> Any:
        box = self.env.observation_space(params)
        return _gymnax_spaces().Box(np.asarray(box.low), np.asarray(box.high), tuple(box.shape), box.dtype)

    def _signature(self, result: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.legacy_step:
            return result
        obs, state, reward, terminated, truncated, info = result
        info = {**info, "terminated": terminated, "truncated": truncated}
        return obs, state, reward, terminated | truncated, info

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> tuple[Any, ...]:
        return self._signature(self.env.step(key, state, action, params))

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> tuple[Any, ...]:
        return self._signature(self.env.step_env(key, state, action, params))


def to_gymnax(env: Any, params: Any = None, *, legacy_step: bool = False) -> tuple[GymnaxEnv, Any]:
    """`env` (a serving env, or one under knob-action wrappers) for gymnax-style libraries.

    Args:
      env: the env, e.g. from `ig.make`.
      params: its EnvParams (default: `env.default_params`).
      legacy_step: five-value step for libraries written for gymnax 0.0.x (rejax, PureJaxRL).

    Returns (GymnaxEnv, params): float32 (OBS_SIZE,) observations, int32 scalar actions in
    [0, action_space(params).n); the task, reward and info are `env`'s.
    """
    params = env.default_params if params is None else params
    return GymnaxEnv(JointDiscreteActionWrapper(FlattenObservationWrapper(env)), legacy_step), params
