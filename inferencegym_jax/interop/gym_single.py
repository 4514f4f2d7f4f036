"""One serving env as a `gymnasium.Env` (spaces, keys and info: the module docstring of
`inferencegym_jax.interop.gymnasium_env`, which registers it and is where to import it from)."""

from __future__ import annotations

from typing import Any

try:
    import gymnasium
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.gym_single needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import numpy as np

from inferencegym_jax.env import EnvParams
from inferencegym_jax.interop.gym_host import (
    RENDER_MODES,
    check_actions,
    check_options,
    check_render_mode,
    describe,
    make_task,
    next_stream,
    to_python,
)
from inferencegym_jax.interop.gym_programs import AdapterState, output_layout, start_batch, step_batch
from inferencegym_jax.observation import OBS_SIZE
from inferencegym_jax.traffic import sampling

__all__ = ["GymnasiumEnv"]


class GymnasiumEnv(gymnasium.Env):
    """One serving env as a `gymnasium.Env` (spaces, keys, info: the module docstring).

    Args:
      task_id: a task id ("InferenceGym-Task1-v0"), its gymnasium id ("InferenceGym/Task1-v0")
        or a task number.
      params: EnvParams to run instead of the task's defaults (e.g. `params.replace(
        max_steps_in_episode=jnp.int32(5))`); checked as the env checks params.
      render_mode: None or "ansi" (`render()` returns a line about the last interval).
      **overrides: task overrides, as `inferencegym_jax.make` takes them (`max_steps=5`,
        `workload={"base_rate": 20.0}`, `gpu="h100-sxm"`).

    Attributes:
      env: the task's serving env (with its default params); params: the EnvParams that run;
      task_id: the registered task id.
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 1}  # one 1 s control interval per frame

    def __init__(self, task_id: str | int = "InferenceGym-Task1-v0", params: EnvParams | None = None,
                 render_mode: str | None = None, **overrides: Any):
        self.render_mode = check_render_mode(render_mode)
        self.task_id, self.env, self.params = make_task(task_id, params, overrides)
        self._nvec = np.asarray(self.env.action_space(self.params).nvec, np.int64)
        self.action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self._horizon = int(self.params.max_steps_in_episode)
        self._root: jax.Array | None = None
        self._episode = 0
        self._state: AdapterState | None = None
        self._last: tuple[int, float | None, dict[str, Any] | None] = (0, None, None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (see the module docstring for which one); returns (obs, {}).

        obs: float32 (OBS_SIZE,), entries in [0, 1].
        """
        stream = check_options(options, seed)
        seed = None if seed is None else sampling.check_seed(seed)
        super().reset(seed=seed)
        self._root, self._episode = next_stream(self._root, self._episode, seed, stream, self.np_random)
        obs, self._state = start_batch(self.env, self.params, self._root[None], np.array([self._episode], np.int32))
        self._last = (0, None, None)
        return np.array(obs[0]), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One control interval (1 s of serving): (obs float32 (OBS_SIZE,), reward float in
        [-1, 1], terminated (always False), truncated (True on the horizon's last interval), info).

        Raises:
          ValueError: before `reset`, or for an action of the wrong shape, dtype or range.
        """
        if self._state is None or self._root is None:
            raise ValueError("call reset() before step()")
        indices = check_actions(action, self._nvec)
        self._state, packed = step_batch(self.env, self.params, self._state, self._root[None],
                                         np.array([self._episode], np.int32), indices[None])
        out = output_layout(self.env).unpack(np.asarray(packed)[0])  # the state stays on the device
        info = to_python(out["info"])
        reward = float(out["reward"])
        self._last = (info["timestep"], reward, info)
        return out["obs"], reward, bool(out["terminated"]), bool(out["truncated"]), info

    def render(self) -> str | None:
        """A line about the last interval for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        return describe(self._last[0], self._horizon, self._last[1], self._last[2])

