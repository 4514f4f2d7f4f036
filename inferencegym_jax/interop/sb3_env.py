"""Stable-Baselines3 over the jitted batch: an SB3 `VecEnv` whose step is one jit(vmap) call.

    from stable_baselines3 import PPO
    from inferencegym_jax.interop.sb3_env import JaxBatchVecEnv
    from inferencegym_jax.interop.gymnasium_env import GymnasiumVectorEnv

    venv = JaxBatchVecEnv(GymnasiumVectorEnv(8, "InferenceGym-Task1-v0"))
    model = PPO("MlpPolicy", venv).learn(20_000)

SB3's own `DummyVecEnv` of `gymnasium_env.GymnasiumEnv`s works too (it passes SB3's
`check_env`) but steps the envs one by one; this one is 3x faster in SB3 PPO on 8 envs
(BENCHMARKS.md, "Stable-Baselines3"). Optional extra `[sb3]`: importing this module needs
stable-baselines3 (and so torch) and gymnasium.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from gymnasium.vector import AutoresetMode
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError(f'inferencegym_jax.interop.sb3_env needs stable-baselines3: pip install "inferencegym_jax[sb3]" '
                      f"({err})") from err

from inferencegym_jax.interop import gymnasium_env


class JaxBatchVecEnv(VecEnv):
    """An SB3 VecEnv over one `GymnasiumVectorEnv` (SAME_STEP autoreset): one jitted call steps
    every env. SB3's conventions: a finished env's last observation is in
    infos[i]["terminal_observation"] and infos[i]["TimeLimit.truncated"] marks a time limit.

    Args:
      envs: the vector env (its autoreset mode must be SAME_STEP, as SB3 expects).
    """

    def __init__(self, envs: gymnasium_env.GymnasiumVectorEnv):
        if envs.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"envs.autoreset_mode={envs.autoreset_mode}: SB3 needs AutoresetMode.SAME_STEP")
        self.envs = envs
        self.render_mode = None
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        obs, _ = self.envs.reset(seed=list(self._seeds))  # None: that env's next episode
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, reward, terminated, truncated, info = self.envs.step(self._actions)
        dones = terminated | truncated
        infos = [{"TimeLimit.truncated": bool(truncated[i] and not terminated[i])} for i in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = info["final_obs"][i]
        return obs, reward.astype(np.float32), dones, infos

    def close(self) -> None:
        self.envs.close()

    # Attributes and methods are the vector env's, one value for all indices (its envs share them).
    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        value = self.render_mode if attr_name == "render_mode" else getattr(self.envs, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.envs, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        value = getattr(self.envs, method_name)(*args, **kwargs)
        return [value for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
