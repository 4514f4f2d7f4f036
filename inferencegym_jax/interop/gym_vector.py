"""N serving envs as one `gymnasium.vector.VectorEnv`, stepped by one jitted, vmapped program
(spaces, keys and info: the module docstring of `inferencegym_jax.interop.gymnasium_env`, which
registers it as every id's vector entry point and is where to import it from)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.gym_vector needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import ttft_tally
from inferencegym_jax.env import EnvParams
from inferencegym_jax.interop.gym_host import (
    MAX_SEED,
    RENDER_MODES,
    batched_info,
    check_actions,
    check_options,
    check_render_mode,
    describe,
    make_task,
    to_python,
)
from inferencegym_jax.interop.gym_programs import AdapterState, output_layout, select_state, start_batch, step_batch
from inferencegym_jax.observation import OBS_SIZE
from inferencegym_jax.traffic import sampling

__all__ = ["GymnasiumVectorEnv"]


class GymnasiumVectorEnv(gymnasium.vector.VectorEnv):
    """N serving envs stepped together by one jitted, vmapped program.

    Results equal `gymnasium.vector.SyncVectorEnv` over N `GymnasiumEnv`s with the same seeds
    and autoreset mode (to float32 rounding: the batch is vectorised), info masks included.

    Args:
      num_envs: N >= 1.
      task_id, params, render_mode, **overrides: as `GymnasiumEnv`'s.
      autoreset_mode: `AutoresetMode.SAME_STEP` (default; the step that ends an episode returns
        the next episode's first observation, the last one in info["final_obs"] (object array,
        None elsewhere) with mask info["_final_obs"], and that step's info in
        info["final_info"] / info["_final_info"]) or `AutoresetMode.NEXT_STEP` (the step after
        the end returns the next episode's first observation with reward 0, terminated and
        truncated False, and no info), or their names.
    """

    def __init__(self, num_envs: int = 1, task_id: str | int = "InferenceGym-Task1-v0",
                 params: EnvParams | None = None, render_mode: str | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP, **overrides: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: must be an integer >= 1")
        modes = (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP)
        if autoreset_mode not in modes and autoreset_mode not in [m.value for m in modes]:
            raise ValueError(f"autoreset_mode={autoreset_mode!r}: must be one of {[m.value for m in modes]}")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.render_mode = check_render_mode(render_mode)
        self.task_id, self.env, self.params = make_task(task_id, params, overrides)
        self.num_envs = int(num_envs)
        self.metadata = {"render_modes": RENDER_MODES, "render_fps": 1, "autoreset_mode": self.autoreset_mode}
        self._nvec = np.asarray(self.env.action_space(self.params).nvec, np.int64)
        self.single_action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._batch_nvec = np.broadcast_to(self._nvec, (self.num_envs, len(self._nvec)))
        self._horizon = int(self.params.max_steps_in_episode)
        self._roots: jax.Array | None = None
        self._episodes: np.ndarray | None = None  # int32 (N,), each env's episode of its stream
        self._state: AdapterState | None = None
        self._restart = np.zeros(self.num_envs, bool)
        self._last: list[tuple[int, float | None, dict[str, Any] | None]] = [(0, None, None)] * self.num_envs

    def _seed_list(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """One seed (or None) per env, checked; ValueError naming the offending entry."""
        if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
            return [None if seed is None else sampling.check_seed(int(seed) + i, f"seed={seed} + {i}")
                    for i in range(self.num_envs)]
        if isinstance(seed, Sequence) and not isinstance(seed, str) and len(seed) == self.num_envs:
            return [None if s is None else sampling.check_seed(s, f"seed[{i}]") for i, s in enumerate(seed)]
        raise ValueError(f"seed={seed!r}: must be None, an int or a list of {self.num_envs} ints or Nones")

    def _set_streams(self, seed: int | Sequence[int | None] | None, stream: tuple[jax.Array, int] | None) -> None:
        """Every env's root key and episode for `reset` (see its docstring)."""
        if stream is not None:
            root, first = stream
            data = jax.random.key_data(root)
            self._roots = jax.random.wrap_key_data(jnp.broadcast_to(data, (self.num_envs, *data.shape)),
                                                   impl=jax.random.key_impl(root))
            self._episodes = np.arange(first, first + self.num_envs, dtype=np.int32)
            return
        seeds = self._seed_list(seed)
        if self._roots is None:  # no stream yet: random ones, from gymnasium's np_random
            seeds = [int(self.np_random.integers(MAX_SEED + 1)) if s is None else s for s in seeds]
        fresh = np.array([s is not None for s in seeds])
        if fresh.any():
            new = jax.random.key_data(jax.vmap(jax.random.key)(  # = jax.random.key(seed) of each env
                np.asarray([0 if s is None else s for s in seeds], np.uint32)))
            old = new if self._roots is None else jax.random.key_data(self._roots)
            self._roots = jax.random.wrap_key_data(jnp.where(fresh[:, None], new, old))
        previous = np.zeros(self.num_envs, np.int32) if self._episodes is None else self._episodes
        self._episodes = np.where(fresh, 0, previous + 1).astype(np.int32)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode in every env: obs float32 (N, OBS_SIZE) and info {}.

        seed: None (each env's next episode; random streams the first time), an int s (env i
        seeded with s + i) or a list of N ints or Nones (None: that env's next episode).
        options: {"key": k, "episode": e} starts episodes e, e + 1, ..., e + N - 1 of the stream
        of root key k in envs 0 .. N-1 (held-out evaluation: `evaluate_policy`); a later
        `reset()` moves every env on by one episode of that stream.
        """
        stream = check_options(options, seed)
        super().reset(seed=seed if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None)
        self._set_streams(seed, stream)
        obs, self._state = start_batch(self.env, self.params, self._roots, self._episodes)
        self._restart = np.zeros(self.num_envs, bool)
        self._last = [(0, None, None)] * self.num_envs
        return np.array(obs), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One interval in every env: obs float32 (N, OBS_SIZE), reward float64 (N,),
        terminated bool (N,), truncated bool (N,), info (batched as `SyncVectorEnv` batches it).

        Raises:
          ValueError: before `reset`, or for actions of the wrong shape (N, 5), dtype or range.
        """
        if self._state is None:
            raise ValueError("call reset() before step()")
        indices = check_actions(actions, self._batch_nvec, "actions")
        restart = self._restart  # NEXT_STEP: the envs that ended on the previous step start again
        self._restart = np.zeros(self.num_envs, bool)
        if restart.all():  # every env ended together (one horizon): nothing steps
            obs = self._next_episodes(restart)
            self._remember(None, restart)
            zeros = np.zeros(self.num_envs, bool)
            return obs, np.zeros(self.num_envs), zeros, zeros.copy(), {}
        stepped, packed = step_batch(self.env, self.params, self._state, self._roots, self._episodes, indices)
        self._state = stepped
        out = output_layout(self.env).unpack(np.asarray(packed))
        ended = out["terminated"] | out["truncated"]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            out["reward"][restart], out["terminated"][restart], out["truncated"][restart] = 0.0, False, False
            self._restart = ended & ~restart
        else:
            restart = ended
        obs, info = out["obs"], batched_info(out["info"], ~restart)
        if restart.any():
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(restart):
                    final_obs[i] = obs[i].copy()
                info.update(final_obs=final_obs, _final_obs=restart.copy(),
                            final_info=batched_info(out["info"], restart), _final_info=restart.copy())
            obs = np.where(restart[:, None], self._next_episodes(restart), obs)
        self._remember(out, restart)
        return obs, out["reward"].astype(np.float64), out["terminated"], out["truncated"], info

    def _next_episodes(self, mask: np.ndarray) -> np.ndarray:
        """Start the next episode of the envs in `mask` (bool (N,)); their first observations
        float32 (N, OBS_SIZE) (rows outside the mask: unused)."""
        self._episodes = (self._episodes + mask).astype(np.int32)
        obs, fresh = start_batch(self.env, self.params, self._roots, self._episodes)
        self._state = fresh if mask.all() else select_state(mask, fresh, self._state)
        return np.asarray(obs)

    def _remember(self, out: dict[str, Any] | None, restart: np.ndarray) -> None:
        """Keep what `render` shows, only when rendering (the conversion costs time)."""
        if self.render_mode != "ansi":
            return
        for i in range(self.num_envs):
            if restart[i] or out is None:
                self._last[i] = (0, None, None)
            else:
                one = to_python(jax.tree_util.tree_map(lambda x, i=i: x[i], out["info"]))
                self._last[i] = (one["timestep"], float(out["reward"][i]), one)

    def episode_ttft(self) -> ttft_tally.TtftTally:
        """The request TTFTs of each env's episode so far (`ttft_tally.TtftTally`, NumPy leaves
        with a leading axis N): what `evaluate_policy` grades. With `AutoresetMode.SAME_STEP` an
        episode's last step has already started the next episode (an empty tally there).

        Raises:
          ValueError: before the first `reset`.
        """
        if self._state is None:
            raise ValueError("episode_ttft: call reset() first")
        return jax.tree_util.tree_map(np.asarray, self._state[1])

    def render(self) -> tuple[str, ...] | None:
        """One line per env about its last interval for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        return tuple(describe(t, self._horizon, r, info) for t, r, info in self._last)

