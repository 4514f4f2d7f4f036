"""The day-ahead reservation tasks (issue 42, item 3) as a `gymnasium.Env`: each day, commit the
next day's hourly reserved replicas.

    import gymnasium
    import inferencegym_jax.interop.gymnasium_env  # registers the serving, fleet and reservation ids

    env = gymnasium.make("InferenceGym/Reserve1-v1", split="heldout")
    obs, info = env.reset(seed=0)                    # float32 (178,), entries in [0, 2]
    obs, reward, terminated, truncated, info = env.step(np.full(24, 4))   # 4 replicas every hour

Ids. Reservation task "InferenceGym-Reserve1-v1" of `fleet.reservation_tasks.reservation_envs()`
is registered as "InferenceGym/Reserve1-v1" (`gym_host.gymnasium_id`: the first "-" becomes "/");
`gymnasium_env.register_envs` registers them (`register_reservation_envs`), and so does importing
this module. `ReservationGymnasiumEnv(task_id=...)` takes either spelling.

Spaces. Observations are `ReservationEnv.flatten_observation`: float32 (obs_size,) = (178,) for
Reserve1 (7 days x 24 hourly peaks, a one-hot day of the week, days left, the last day's GPU cost
and missed fraction; `fleet.reservation`), each entry in [0, fleet.reservation.OBS_RATE_CLIP] = [0, 2].
Actions are `gymnasium.spaces.MultiDiscrete([R + 1] * 24)`: the replicas reserved for each hour
of the next day, each in [0, R], R = params.max_reserved (Reserve1: 32).

A commitment outside that range raises ValueError naming the entry (its hour) and its range, and
leaves the env as it was: as in llm_capacity_env, an invalid submission neither advances the
episode nor changes its accumulated cost, so the next valid step returns what it would have
returned without it (the plain env refuses it inside jit the same way: state unchanged, reward 0).

Keys, as the fleet adapter's (`fleet_gym`; `gym_host.StreamedEnv`): `reset(seed=s)` starts the
stream root = `jax.random.key(s)` (s in [0, 2**32 - 1]) at episode 0, each `reset()` without a
seed starts the stream's next episode, `reset(options={"key": k, "episode": e})` episode e of root
k, and a first `reset()` without a seed draws s from gymnasium's `np_random`. Episode e, in plain
JAX (`tests/test_reservation_gym.py` checks it, bit for bit), with `evaluate.stream_episode_keys`:

    k_reset, k_env, _ = jax.random.split(jax.random.fold_in(root, e), 3)
    obs, state = env.reset_env(k_reset, params)       # draws the episode's service from the split's clients
    obs, state, reward, terminated, truncated, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)

for commitments t = 0, 1, ... (step_env is deterministic: its key is unused).

Tasks. `split` ("train", the default, or "heldout": the other half of the clients, on later days) and
overrides as `fleet.reservation_tasks.make_reservation` takes them (`reservation={"train_days": [7, 8]}`), or
`params=` (a `fleet.reservation.ReservationParams`). Reset and step are jitted with the task's
training env as a static argument and params as an argument: an env compiles them once (the test
counts traces); params with other static fields (max_reserved, history_days, first_day, decision_days)
trace them once more.

Episodes end after `params.decision_days` commitments (Reserve1: 4, held out 3): `terminated` is True on the
last (the horizon is part of the task: the observation's days_left shows it), `truncated` is
always False; a step after that raises ValueError (call reset()). The reward is minus the day's J
(`fleet.reservation`): GPU cost over the fleet's whole on-demand budget + slo_weight x missed /
arrived requests, so an episode's return is -J. Infos hold only Python ints, floats and dicts of
them (JSON-safe). Reset info: {}. Step info:
  day: {field: float} of the day played (`fleet.reservation.DayTotals`: arrived, missed
    [requests], reserved_gpu_h, on_demand_gpu_h [GPU-h], cost_usd [$], cost_j [1]).
  episode_totals: {field: float}, the episode's DayTotals so far (`ReservationState.episode`).
  reward_components: {gpu, slo: float}, the two terms of J (reward = -(gpu + slo)).
  day_index: int [days], the days played so far (1 after the first commitment; decision_days on
    the last), as fleet_gym's timestep.
"""

from __future__ import annotations

import functools
from typing import Any

try:
    import gymnasium
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.reservation_gym needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.fleet.reservation import (
    OBS_RATE_CLIP,
    DayTotals,
    ReservationEnv,
    ReservationParams,
    ReservationState,
    obs_size,
)
from inferencegym_jax.fleet.reservation_tasks import make_reservation, reservation_envs
from inferencegym_jax.interop.gym_host import (
    RENDER_MODES,
    AdapterTask,
    StreamedEnv,
    check_entries,
    json_scalars,
    register_ids,
)

__all__ = ["DAY_NAMES", "RESERVATION_ENTRY_POINT", "RESERVATION_TASKS", "ReservationGymnasiumEnv",
           "register_reservation_envs", "reservation_task_id"]

RESERVATION_ENTRY_POINT = "inferencegym_jax.interop.reservation_gym:ReservationGymnasiumEnv"
DAY_NAMES = tuple(DayTotals.__dataclass_fields__)  # DayTotals' fields, in order
RESERVATION_TASKS = AdapterTask(reservation_envs, make_reservation, ReservationEnv)


def reservation_task_id(task: str) -> str:
    """The reservation task id ("InferenceGym-Reserve1-v1") of a task id or its gymnasium id
    ("InferenceGym/Reserve1-v1"); ValueError naming what was typed otherwise."""
    return RESERVATION_TASKS.task_id(task)


def register_reservation_envs() -> list[str]:
    """Register one gymnasium id per reservation task (module docstring); returns the ids.

    Idempotent: ids already registered are left as they are.
    """
    return register_ids(reservation_envs(), RESERVATION_ENTRY_POINT, gymnasium)


# ----------------------------------------------------------------------------- the jitted programs


@functools.partial(jax.jit, static_argnums=0)
def _start(env: ReservationEnv, params: ReservationParams, root: jax.Array, episode: jax.Array
           ) -> tuple[jax.Array, ReservationState]:
    """(flat obs float32 (obs_size,), state) of episode `episode` of `root`."""
    obs, state = env.reset_env(evaluate.stream_episode_keys(root, episode)[0], params)
    return env.flatten_observation(obs, params), state


def _totals(totals: DayTotals) -> dict[str, jax.Array]:
    return {name: getattr(totals, name) for name in DAY_NAMES}


@functools.partial(jax.jit, static_argnums=0)
def _step(env: ReservationEnv, params: ReservationParams, state: ReservationState, root: jax.Array,
          episode: jax.Array, action: jax.Array) -> tuple[ReservationState, dict[str, Any]]:
    """One commitment (an action in range: the host checked it): (state, {obs, reward,
    terminated, info arrays})."""
    key = jax.random.fold_in(evaluate.stream_episode_keys(root, episode)[1], state.day)
    obs, state, reward, terminated, _, info = env.step_env(key, state, action, params)
    out_info = {
        "day": _totals(info["day"]),
        "episode_totals": _totals(state.episode),
        "reward_components": dict(info["reward_components"]),
        "day_index": state.day,
    }
    return state, {"obs": env.flatten_observation(obs, params), "reward": reward, "terminated": terminated,
                   "info": out_info}


# ----------------------------------------------------------------------------- the env


class ReservationGymnasiumEnv(StreamedEnv, gymnasium.Env):
    """One reservation env as a `gymnasium.Env` (spaces, keys, info: the module docstring).

    Args:
      task_id: a reservation task id ("InferenceGym-Reserve1-v1") or its gymnasium id
        ("InferenceGym/Reserve1-v1").
      split: "train" (default) or "heldout", the clients services are drawn from and the days they
        commit for (`fleet.reservation_tasks.make_reservation`).
      params: fleet.reservation.ReservationParams to run instead of the task's (not with split
        or overrides).
      render_mode: None or "ansi" (`render()` returns a line about the last day).
      **overrides: task overrides, as `make_reservation` takes them (`reservation={"train_days": [7, 8]}`).

    Attributes:
      env: the task's ReservationEnv (training params; the static argument of the programs);
      params: the ReservationParams that run; task_id: the reservation task id.
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 1}  # one day per frame

    def __init__(self, task_id: str = "InferenceGym-Reserve1-v1", split: str | None = None,
                 params: ReservationParams | None = None, render_mode: str | None = None, **overrides: Any):
        self._init_task(RESERVATION_TASKS, task_id, split, params, overrides, render_mode)
        space = self.env.action_space(self.params)
        self._nvec = np.asarray(space.nvec, np.int64)
        self._hours = space.names
        self.action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, OBS_RATE_CLIP, (obs_size(self.params),), np.float32)
        self._horizon = int(self.params.decision_days)
        self._ended = False
        self._last: tuple[int, float | None, dict[str, Any] | None] = (0, None, None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode (module docstring); returns (obs float32 (obs_size,) in [0, 2], {})."""
        root, episode = self._begin(seed, options)
        obs, self._state = _start(self.env, self.params, root, episode)
        self._ended = False
        self._last = (0, None, None)
        return np.array(obs), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One commitment, the next day played: (obs float32 (obs_size,), reward float <= 0,
        terminated (True on the decision_days-th commitment), truncated (always False), info).

        Raises:
          ValueError: before `reset`, after the episode ended, or for an action of the wrong
            shape, dtype or range (the env is left as it was).
        """
        state, root, episode = self._running()
        if self._ended:
            raise ValueError(f"the episode ended after its {self._horizon} commitments: call reset()")
        reserved = check_entries(action, self._nvec, self._hours,
                                 what=f"reserved replicas for each of the next day's {len(self._nvec)} hours")
        self._state, out = _step(self.env, self.params, state, root, episode, reserved)
        out = jax.device_get(out)  # the state stays on the device
        info = json_scalars(out["info"])
        reward = float(out["reward"])
        self._ended = bool(out["terminated"])
        self._last = (info["day_index"], reward, info)
        return np.array(out["obs"]), reward, self._ended, False, info

    def render(self) -> str | None:
        """A line about the last day for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        t, reward, info = self._last
        if info is None:
            return f"day 0/{self._horizon}: episode start, nothing committed yet"
        d = info["day"]
        missed = d["missed"] / d["arrived"] if d["arrived"] > 0 else 0.0
        return (f"day {t}/{self._horizon} reward {reward:+.5f} | reserved {d['reserved_gpu_h']:.0f} GPU-h, "
                f"on-demand {d['on_demand_gpu_h']:.1f} GPU-h, ${d['cost_usd']:.2f}, "
                f"missed {100 * missed:.2f}% of {d['arrived']:.0f} requests")


register_reservation_envs()
