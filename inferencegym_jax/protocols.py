"""The contracts the package's parts meet, as typing Protocols (checked by the type checker, not at run time).

Controllers (`Controller`): anything that chooses a serving configuration interval by interval,
remembering what it saw: the switching rule and the MPC (`inferencegym_jax.control`), a plain
stateless policy through `evaluate.as_controller`. `evaluate.run_episode` plays any of them, with
the keys of `evaluate.stream_episode_keys`. A controller is a pytree (its arrays are arguments of
the compiled episode, its static fields part of it), its memory a pytree carried by the episode's
scan, so both must keep their structure and shapes from one interval to the next.

Environments (`Environment`, `ServingEnvironment`): what the trainer, the wrappers and the
evaluation call on an env. `Environment` is gymnax 1.0's call shape (reset, step, spaces, default
params) plus `flatten_observation`, the trainer's contract (`training.ppo.Trainer.env`; the
training probes meet it). `ServingEnvironment` adds what the wrappers and `evaluate` call on a
serving env: the steps without auto-reset (`reset_env`, `step_env`), `get_obs`, the flat
observation space, the knobs in force and the env's names. `InferenceGymEnv` and every wrapper
meet both (tests/test_protocols.py). Both are `runtime_checkable`, which checks only that the
members exist; their signatures are checked by mypy.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
from flax import struct

from inferencegym_jax import spaces
from inferencegym_jax.actions import ServingAction

# What `step` and `step_env` return: (obs, state, reward float32 (), terminated bool (),
# truncated bool (), info).
StepResult = tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]


@struct.dataclass
class Seen:
    """What a controller is shown before interval t.

    Attributes:
      t: int32 () [intervals], the interval about to be served (0 at the episode's start).
      obs: the env's observation (the env's own type; a wrapped env's wrapped one).
      state: the env's state (a wrapped env's wrapped one). A causal controller reads only what
        a server sees (`evaluate` module docstring); a simulator-based planner (the MPC) reads the
        server's true state from it.
    """

    t: jax.Array
    obs: Any
    state: Any


@struct.dataclass
class StepOutput:
    """What the step of interval t returned, with the state it started from.

    Attributes:
      t: int32 () [intervals], the interval just served.
      state: the env state the step started from (`Seen.state` of interval t).
      obs: the observation the step returned (`Seen.obs` of interval t + 1).
      next_state: the env state the step returned.
      reward: float32 (), the step's reward.
      info: the step's info dict (serving metrics, arrivals, applied action, ...; `env.step_env`).
    """

    t: jax.Array
    state: Any
    obs: Any
    next_state: Any
    reward: jax.Array
    info: dict[str, Any]


class Controller(Protocol):
    """A stateful controller: an init of its memory, an act, an update from what the step returned.

    `evaluate.run_episode` calls, for an episode of key `key` ((k_reset, k_env, k_policy) =
    split(key, 3)): `memory = init(key, seen_0, params)` after the reset, then for every interval t
    `action, memory = act(memory, fold_in(k_policy, t), seen_t, params)`, the step with
    fold_in(k_env, t), and `memory = update(memory, step_output, params)`.
    """

    def init(self, key: jax.Array, seen: Seen, params: Any) -> Any:
        """The memory at the episode's start. `key` is the episode's own key (a clairvoyant
        oracle reads the episode's step keys from it; a causal controller must not)."""
        ...

    def act(self, memory: Any, key: jax.Array, seen: Seen, params: Any) -> tuple[Any, Any]:
        """(the action for interval `seen.t`: an int32 (5,) index vector or a ServingAction, the
        memory after choosing it); `key`: this interval's policy key."""
        ...

    def update(self, memory: Any, step: StepOutput, params: Any) -> Any:
        """The memory after interval `step.t`, from what its step returned."""
        ...


@runtime_checkable
class Environment(Protocol):
    """An env with gymnax 1.0's call shape, and the flat observation the trainer feeds its network.

    `params` is the env's own params pytree (`EnvParams` for the serving env); None means
    `default_params`. `step` auto-resets: at the end of an episode it returns the first
    observation and state of the next one (gymnax's convention).
    """

    @property
    def default_params(self) -> Any:
        """The params an env runs when called with params=None."""
        ...

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        """(first observation, first state) of an episode drawn with `key`."""
        ...

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        """One step of `action` from `state` with `key`, auto-resetting at the episode's end."""
        ...

    def observation_space(self, params: Any = None) -> Any:
        """The space of `reset`'s and `step`'s observations: a `spaces.Space` (`spaces.Dict` for the
        serving env), gymnax's own for `wrappers.GymnaxEnv`; so its type is each env's own."""
        ...

    def action_space(self, params: Any = None) -> Any:
        """The space of `step`'s actions: `spaces.MultiDiscrete` for the serving env and the
        knob-action wrappers, `spaces.Discrete` for the joint action, gymnax's for `GymnaxEnv`."""
        ...

    def flatten_observation(self, obs: Any, params: Any = None) -> jax.Array:
        """`obs` as one float32 (D,) vector (the trainer's network input)."""
        ...


@runtime_checkable
class ServingEnvironment(Environment, Protocol):
    """A serving env (`InferenceGymEnv`) or a wrapper of one: what the wrappers call on the env
    they wrap and `evaluate` plays an episode with."""

    @property
    def env_id(self) -> str:
        """The registered task id (e.g. "InferenceGym-Task3-v2")."""
        ...

    @property
    def name(self) -> str:
        """The env's name (gymnax's `name`; the serving env's is its `env_id`)."""
        ...

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        """`reset` with explicit params."""
        ...

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        """One step without auto-reset (the episode runner's step)."""
        ...

    def get_obs(self, state: Any, params: Any) -> Any:
        """The observation of `state`."""
        ...

    def flat_observation_space(self, params: Any = None) -> spaces.Box:
        """The space of `flatten_observation`'s vectors."""
        ...

    def knobs_in_force(self, state: Any, params: Any) -> ServingAction:
        """The serving configuration that `state` runs with."""
        ...
