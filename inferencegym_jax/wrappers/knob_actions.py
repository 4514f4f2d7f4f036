"""Knob-action wrappers: the same env with each knob set relative to the knobs in force.

    env, params = ig.make("InferenceGym-Task3-v0")
    env = HoldActions(env)                      # or RelativeActions(env)
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, env.action_space(params).sample(k), params)

A wrapper holds the env it wraps (`wrapper.env`) and passes everything it does not change
through to it: reset, reset_env, get_obs, flatten_observation, observation_space,
default_params, env_id, knobs_in_force; it overrides action_space, step and step_env (training
calls reset/step, evaluation reset_env/step_env). Its step turns its action into the base env's
action, int32 (5,) grid indices in `actions.KNOBS` order, from the grid indices of the knobs in
force (`env.knobs_in_force(state, params)`: the configuration the server runs with, the task's
default before the first interval), and steps the base env with it; reward, observations and
`info` (its `applied_action` included) are the base env's.

Action layouts, per knob with a grid of n values (all int32, one entry per knob of KNOBS):

| action space          | choices, active knob | choice c -> base grid index                                    |
|-----------------------|----------------------|----------------------------------------------------------------|
| base env ("absolute") | n                    | c                                                              |
| HoldActions ("hold")  | n + 1                | c = 0: the index in force; c >= 1: c - 1                       |
| RelativeActions       | 3                    | in force + c - 1 (one step down, keep, one step up), clipped   |
|   ("relative")        |                      | to [0, n - 1]                                                  |

A knob the task masks has one choice (0) in every layout and base index 0 (the env applies the
task default there). Outside jit a wrapper action of the wrong shape, dtype or range raises
ValueError; inside jit choices are clipped to the wrapper's space and `info["clipped"]` flags
the knobs whose choice was clipped (as well as what the base env clipped).

`initial_action(env, params, which)` gives the action an initial policy should favour, in the
action space of a wrapped or plain serving env.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import spaces, validation
from inferencegym_jax.actions import KNOBS, ServingAction, indices_from_action
from inferencegym_jax.wrappers.base import ABSOLUTE, StepResult, Wrapper, action_mode_of, flag_clipped

HOLD, RELATIVE = "hold", "relative"
ACTION_MODES: tuple[str, ...] = (ABSOLUTE, HOLD, RELATIVE)
INITIAL_ACTIONS: tuple[str, ...] = ("default", "best_static")


class KnobActions(Wrapper):
    """Base of the wrappers whose action sets each knob relative to the knobs in force.

    Subclasses give `action_mode`, `choices(n)` (choices of an active knob with an n-value grid)
    and `grid_index(choice, in_force, nvec)` (the base grid index of each active knob).
    """

    action_mode: str = ABSOLUTE  # overridden by every subclass

    @staticmethod
    def choices(n: int) -> int:
        raise NotImplementedError

    @staticmethod
    def grid_index(choice: jax.Array, in_force: jax.Array, nvec: np.ndarray) -> jax.Array:
        raise NotImplementedError

    def action_space(self, params: Any = None) -> spaces.MultiDiscrete:
        base = self.env.action_space(params)
        return spaces.MultiDiscrete(tuple(self.choices(n) if n > 1 else 1 for n in base.nvec), base.names)

    def base_action(self, action: Any, in_force: ServingAction, params: Any = None) -> tuple[jax.Array, jax.Array]:
        """The base env's action of `action` given the knobs in force.

        Args:
          action: int32 (5,) choices in this wrapper's action space.
          in_force: ServingAction, the knobs the server runs with.

        Returns (int32 (5,) base grid indices, 0 on masked knobs; bool (5,), True where a
        choice was outside this wrapper's space and clipped).
        """
        space = self.action_space(params)
        _check_action(action, space, self.action_mode)
        raw = jnp.asarray(action, jnp.int32)
        choice = jnp.clip(raw, 0, np.asarray(space.nvec) - 1)
        nvec = np.asarray(self.env.action_space(params).nvec)
        moved = self.grid_index(choice, indices_from_action(in_force), nvec)
        return jnp.where(nvec > 1, moved, 0).astype(jnp.int32), choice != raw

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        """`env.step` (auto-reset) with this wrapper's action, int32 (5,)."""
        params = self.default_params if params is None else params
        base, clipped = self.base_action(action, self.knobs_in_force(state, params), params)
        return flag_clipped(self.env.step(key, state, base, params), clipped)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        """`env.step_env` (no auto-reset) with this wrapper's action, int32 (5,)."""
        base, clipped = self.base_action(action, self.knobs_in_force(state, params), params)
        return flag_clipped(self.env.step_env(key, state, base, params), clipped)

    def inner_policy(self, policy: Any) -> Any:
        """`policy` (choices in this wrapper's space) as a policy of the wrapped env's grid
        indices, from the knobs in force the observation shows (`obs.config`, which the env
        fills from `knobs_in_force`)."""

        def act(key: jax.Array, obs: Any, params: Any) -> jax.Array:
            in_force = ServingAction(*[obs.config[..., i] for i in range(len(KNOBS))])
            return self.base_action(policy(key, obs, params), in_force, params)[0]

        return act


class HoldActions(KnobActions):
    """Per active knob n + 1 choices: 0 keeps the index in force, c >= 1 sets grid index c - 1."""

    action_mode = HOLD

    @staticmethod
    def choices(n: int) -> int:
        return n + 1

    @staticmethod
    def grid_index(choice: jax.Array, in_force: jax.Array, nvec: np.ndarray) -> jax.Array:
        return jnp.where(choice == 0, in_force, choice - 1)


class RelativeActions(KnobActions):
    """Per active knob 3 choices: 0 one grid step down, 1 keep, 2 one step up (clipped to the grid)."""

    action_mode = RELATIVE

    @staticmethod
    def choices(n: int) -> int:
        return 3

    @staticmethod
    def grid_index(choice: jax.Array, in_force: jax.Array, nvec: np.ndarray) -> jax.Array:
        return jnp.clip(in_force + choice - 1, 0, nvec - 1)


WRAPPERS: dict[str, type[KnobActions]] = {HOLD: HoldActions, RELATIVE: RelativeActions}


def _check_action(action: Any, space: spaces.MultiDiscrete, mode: str) -> None:
    """Host-side check of a wrapper action: shape and dtype always, values when concrete."""
    shape = jnp.shape(action)
    if shape != space.shape:
        raise ValueError(f"{mode} action must be an int vector of shape {space.shape} (choices per knob of {KNOBS}), "
                         f"got shape {shape}")
    dtype = jnp.result_type(action) if hasattr(action, "dtype") else np.asarray(action).dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"{mode} action must have an integer dtype, got {dtype}")
    if validation.is_concrete(action):
        values = np.asarray(action)
        for i, (name, n) in enumerate(zip(space.names, space.nvec)):
            if not 0 <= values[i] < n:
                raise ValueError(f"{mode} action[{i}] ({name}) = {int(values[i])} is outside its range [0, {n - 1}]")


def wrap(env: Any, action_mode: str) -> Any:
    """`env` with the action layout `action_mode` names ('absolute': the env itself)."""
    if action_mode == ABSOLUTE:
        return env
    if action_mode not in WRAPPERS:
        raise ValueError(f"config key 'action_mode' = {action_mode!r} out of range: must be one of {ACTION_MODES}")
    return WRAPPERS[action_mode](env)


def _best_static_indices(env: Any, nvec: tuple[int, ...]) -> np.ndarray:
    """int32 (5,): the graders' best static configuration of the env's task, as grid indices."""
    from inferencegym_jax import graders

    try:
        best = graders.load_constants(env.env_id)["best_static_action"]
    except ValueError as err:
        raise ValueError(f"config key 'initial_action' = 'best_static': no best static configuration for task "
                         f"{env.env_id!r} ({err})") from None
    if len(best) != len(nvec) or any(not 0 <= b < n for b, n in zip(best, nvec)):
        raise ValueError(f"config key 'initial_action' = 'best_static': {env.env_id}'s best static action "
                         f"{best} does not fit the env's action space nvec={nvec}")
    return np.asarray(best, np.int32)  # a masked knob (nvec 1) passed the check only at index 0


def initial_action(env: Any, params: Any, which: str = "default") -> np.ndarray:
    """The action an initial policy should favour, int32 (5,) in `env`'s action space.

    Args:
      env: a serving env, plain (absolute) or wrapped once by HoldActions / RelativeActions.
      which: 'default': the task's default action as grid indices (absolute), "keep the knob in
        force" (hold: 0, relative: 1); 'best_static': the graders' stored best static
        configuration of `env.env_id` (absolute: its indices, hold: index + 1, "set it";
        relative: ValueError, a relative action moves one step from the knobs in force).
      Masked knobs get 0.

    Raises:
      ValueError: unknown `which`, 'best_static' for a relative env or a task without a stored
        best static configuration, or one that does not fit the env's action space.
    """
    mode = action_mode_of(env)
    if which not in INITIAL_ACTIONS:
        raise ValueError(f"config key 'initial_action' = {which!r} out of range: must be one of {INITIAL_ACTIONS}")
    if which == "best_static" and mode == RELATIVE:
        raise ValueError("config key 'initial_action' = 'best_static' needs action_mode = 'absolute' or 'hold': a "
                         "relative policy moves one grid step from the knobs in force")
    base_nvec = (env.env if isinstance(env, KnobActions) else env).action_space(params).nvec
    active = np.asarray(base_nvec) > 1
    if which == "best_static":
        index = _best_static_indices(env, tuple(base_nvec)) + (1 if mode == HOLD else 0)
    elif mode == ABSOLUTE:
        index = np.asarray(indices_from_action(params.default_action))
    else:
        index = np.full(len(base_nvec), 1 if mode == RELATIVE else 0)
    return np.where(active, index, 0).astype(np.int32)


__all__ = ["ACTION_MODES", "HoldActions", "KnobActions", "RelativeActions", "action_mode_of", "initial_action", "wrap"]
