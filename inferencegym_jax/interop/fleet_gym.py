"""The fleet tasks (issue 42) as a `gymnasium.Env`: an autoscaler and a router over R replicas.

    import gymnasium
    import inferencegym_jax.interop.gymnasium_env  # registers the serving and the fleet ids

    env = gymnasium.make("InferenceGym/Fleet1-v1", split="heldout", max_steps=60)
    obs, info = env.reset(seed=0)                   # float32 (12,), entries in [0, 1]
    obs, reward, terminated, truncated, info = env.step([8, 0])   # 8 replicas, least-loaded routing

Ids. Fleet task "InferenceGym-Fleet1-v1" of `inferencegym_jax.fleet.tasks.fleet_envs()` is
registered as "InferenceGym/Fleet1-v1", as the serving tasks are (`gym_host.gymnasium_id`: the
first "-" becomes "/"); `gymnasium_env.register_envs` registers them (`register_fleet_envs`), and
so does importing this module. `FleetGymnasiumEnv(task_id=...)` takes either spelling. There is
no vector entry point: `gymnasium.make_vec` steps `FleetGymnasiumEnv`s with `SyncVectorEnv`.

Spaces. Observations are `FleetEnv.flatten_observation`: float32 (fleet.env.OBS_SIZE,) = (12,),
each entry in [0, 1] (`fleet.env.FleetObservation`'s fields, scaled as that method says). Actions
are `gymnasium.spaces.MultiDiscrete([R + 1, 2])`: [target replicas in 0..R, routing rule]
(`fleet.env.ROUTING_RULES`: 0 least-loaded, 1 even); an action outside it raises ValueError
naming the entry and its range, as the serving adapter's `gym_host.check_actions` does.

Keys, as the serving adapter's (`gymnasium_env`'s module docstring): `reset(seed=s)` starts the
stream root = `jax.random.key(s)` (s in [0, 2**32 - 1]) at episode 0, each `reset()` without a seed
starts the stream's next episode, `reset(options={"key": k, "episode": e})` episode e of root k,
and a first `reset()` without a seed draws s from gymnasium's `np_random`. Episode e, in plain JAX
(`tests/test_fleet_gym.py` checks it), with `evaluate.stream_episode_keys`:

    k_reset, k_env, _ = jax.random.split(jax.random.fold_in(root, e), 3)
    obs, state = env.reset_env(k_reset, params)       # draws the episode's window from params.curve.starts
    obs, state, reward, terminated, truncated, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)

for control intervals t = 0, 1, ...

Tasks. `split` ("train", the default, or "heldout": the evaluation days) and overrides as
`fleet.tasks.make_fleet` takes them (`max_steps=60`, `fleet={"provision_s": 300.0}`), or
`params=` (a `fleet.env.FleetParams`). Reset and step are jitted with the task's training env as
a static argument and params as an argument: an env compiles them once (the test counts traces);
params of another shape (another split or horizon changes the number of episode windows) trace
them once more.

Episodes end only at the horizon, `params.max_steps_in_episode` intervals of 60 s (Fleet1: 1440,
one day): `terminated` is always False, `truncated` True on the last interval; stepping on
continues the day. The reward is minus the interval's cost (`fleet.env`): GPU-time fraction +
slo_weight x missed / expected requests, so an episode's return is -J. Infos hold only Python
ints, floats and dicts of them (JSON-safe). Reset info: {"start_minute": int [min], the trace
minute the episode's window starts at}. Step info:
  totals: {field: float} of the interval's `fleet.env.ControlTotals` (units there).
  episode_totals: {field: float} of the episode's ControlTotals so far (`FleetEnvState.episode`;
    not "episode", the key gymnasium's RecordEpisodeStatistics and SB3's Monitor write).
  reward_components: {gpu, slo: float}, the two costs (reward = -(gpu + slo)).
  applied_action: {replicas, routing: int}, the target and rule the env applied.
  timestep: int [control intervals] since the episode began.
"""

from __future__ import annotations

import functools
from typing import Any

try:
    import gymnasium
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.fleet_gym needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.fleet.env import ACTION_NAMES, OBS_SIZE, ROUTING_RULES, ControlTotals, FleetEnv, FleetParams
from inferencegym_jax.fleet.tasks import fleet_envs, make_fleet
from inferencegym_jax.interop.gym_host import (
    RENDER_MODES,
    AdapterTask,
    StreamedEnv,
    check_entries,
    json_scalars,
    register_ids,
)

__all__ = ["FLEET_ENTRY_POINT", "TOTAL_NAMES", "FleetGymnasiumEnv", "check_fleet_action", "fleet_task_id",
           "register_fleet_envs"]

FLEET_ENTRY_POINT = "inferencegym_jax.interop.fleet_gym:FleetGymnasiumEnv"
TOTAL_NAMES = tuple(ControlTotals.__dataclass_fields__)  # ControlTotals' fields, in order


# ----------------------------------------------------------------------------- ids and checks


FLEET_TASKS = AdapterTask(fleet_envs, make_fleet, FleetEnv)


def fleet_task_id(task: str) -> str:
    """The fleet task id ("InferenceGym-Fleet1-v1") of a fleet task id or its gymnasium id
    ("InferenceGym/Fleet1-v1"); ValueError naming what was typed otherwise."""
    return FLEET_TASKS.task_id(task)


def register_fleet_envs() -> list[str]:
    """Register one gymnasium id per fleet task (module docstring); returns the ids.

    Idempotent: ids already registered are left as they are.
    """
    return register_ids(fleet_envs(), FLEET_ENTRY_POINT, gymnasium)


def check_fleet_action(action: Any, nvec: np.ndarray, name: str = "action") -> np.ndarray:
    """int32 (2,) [target replicas, routing rule] of `action`.

    Raises:
      ValueError: wrong shape, a non-integer dtype, or an entry outside [0, nvec - 1] (the
        message names the entry, its name, the value and the allowed range).
    """
    rules = f" ({', '.join(f'{k} {r}' for k, r in enumerate(ROUTING_RULES))})"
    return check_entries(action, nvec, ACTION_NAMES, name, notes={1: rules})


# ----------------------------------------------------------------------------- the jitted programs


@functools.partial(jax.jit, static_argnums=0)
def _start(env: FleetEnv, params: FleetParams, root: jax.Array, episode: jax.Array) -> tuple:
    """(flat obs float32 (OBS_SIZE,), state, start minute int32 ()) of episode `episode` of `root`."""
    obs, state = env.reset_env(evaluate.stream_episode_keys(root, episode)[0], params)
    return env.flatten_observation(obs, params), state, state.start_minute


def _totals(totals: ControlTotals) -> dict[str, jax.Array]:
    return {name: getattr(totals, name) for name in TOTAL_NAMES}


@functools.partial(jax.jit, static_argnums=0)
def _step(env: FleetEnv, params: FleetParams, state: Any, root: jax.Array, episode: jax.Array,
          action: jax.Array) -> tuple[Any, dict[str, Any]]:
    """One control interval: (state, {obs, reward, terminated, truncated, info arrays})."""
    key = jax.random.fold_in(evaluate.stream_episode_keys(root, episode)[1], state.time)
    obs, state, reward, terminated, truncated, info = env.step_env(key, state, action, params)
    applied = info["applied_action"]
    out_info = {
        "totals": _totals(info["totals"]),
        "episode_totals": _totals(state.episode),
        "reward_components": dict(info["reward_components"]),
        "applied_action": {name: applied[i] for i, name in enumerate(ACTION_NAMES)},
        "timestep": state.time,
    }
    return state, {"obs": env.flatten_observation(obs, params), "reward": reward, "terminated": terminated,
                   "truncated": truncated, "info": out_info}


# ----------------------------------------------------------------------------- the env


class FleetGymnasiumEnv(StreamedEnv, gymnasium.Env):
    """One fleet env as a `gymnasium.Env` (spaces, keys, info: the module docstring).

    Args:
      task_id: a fleet task id ("InferenceGym-Fleet1-v1") or its gymnasium id ("InferenceGym/Fleet1-v1").
      split: "train" (default) or "heldout", the episode windows (`fleet.tasks.make_fleet`).
      params: fleet.env.FleetParams to run instead of the task's (not with split or overrides).
      render_mode: None or "ansi" (`render()` returns a line about the last interval).
      **overrides: task overrides, as `make_fleet` takes them (`max_steps=60`).

    Attributes:
      env: the task's FleetEnv (training params; the static argument of the programs);
      params: the FleetParams that run; task_id: the fleet task id.
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 1}  # one 60-s control interval per frame

    def __init__(self, task_id: str = "InferenceGym-Fleet1-v1", split: str | None = None,
                 params: FleetParams | None = None, render_mode: str | None = None, **overrides: Any):
        self._init_task(FLEET_TASKS, task_id, split, params, overrides, render_mode)
        self._nvec = np.asarray(self.env.action_space(self.params).nvec, np.int64)
        self.action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self._horizon = int(self.params.max_steps_in_episode)
        self._last: tuple[int, float | None, dict[str, Any] | None] = (0, None, None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, int]]:
        """Start an episode (module docstring); returns (obs float32 (OBS_SIZE,) in [0, 1],
        {"start_minute": int [min]})."""
        root, episode = self._begin(seed, options)
        obs, self._state, start = _start(self.env, self.params, root, episode)
        self._last = (0, None, None)
        return np.array(obs), {"start_minute": int(start)}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One control interval (60 s of the fleet): (obs float32 (OBS_SIZE,), reward float <= 0,
        terminated (always False), truncated (True from the horizon's last interval on), info).

        Raises:
          ValueError: before `reset`, or for an action of the wrong shape, dtype or range.
        """
        state, root, episode = self._running()
        indices = check_fleet_action(action, self._nvec)
        self._state, out = _step(self.env, self.params, state, root, episode, indices)
        out = jax.device_get(out)  # the state stays on the device
        info = json_scalars(out["info"])
        reward = float(out["reward"])
        self._last = (info["timestep"], reward, info)
        return np.array(out["obs"]), reward, bool(out["terminated"]), bool(out["truncated"]), info

    def render(self) -> str | None:
        """A line about the last interval for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        t, reward, info = self._last
        if info is None:
            return f"t=0/{self._horizon}: episode start, no interval served yet"
        m, a = info["totals"], info["applied_action"]
        attainment = 1.0 - m["slo_violations"] / m["judged"] if m["judged"] > 0 else 1.0
        interval_s = float(self.params.control_interval_s)
        return (f"t={t}/{self._horizon} reward {reward:+.5f} | {m['arrived'] / interval_s:.1f} req/s, "
                f"replicas serving {m['serving']:.0f} warming {m['warming']:.0f} draining {m['draining']:.0f}, "
                f"SLO attainment {100 * attainment:.1f}%, TTFT p99 {m['ttft_p99_s']:.2f} s, "
                f"queue {m['queue_depth']:.0f} req, {m['gpu_seconds']:.0f} GPU s | target {a['replicas']}, "
                f"routing {ROUTING_RULES[a['routing']]}")


register_fleet_envs()
