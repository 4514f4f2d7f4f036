"""Sessions of the day tasks (`day_tasks`: fleet and reservation), beside the serving sessions.

A serving session is a slot of a task's vmapped device pool (`pool`, `sessions`); a day session
holds one gymnasium adapter env of its own (`interop.fleet_gym.FleetGymnasiumEnv` or
`interop.reservation_gym.ReservationGymnasiumEnv`), so its episode is the adapter's, reward for
reward, and its programs are the adapter's: jitted with the task's env static and its params an
argument, compiled once per task and split, whatever the number of sessions (`DayCore.warm_up`
compiles them before the port opens). A fleet step is one jitted call (~13 ms on 2 CPU cores),
a reservation step one (~1 ms); they run one at a time on a worker thread of their own, off the
event loop.

`DayStore` holds at most `max_sessions` day sessions (a bound of their own, apart from the
serving sessions'), with `sessions.SessionStore`'s conventions: creating one more evicts the
least recently used one that no WebSocket holds (its id then answers `SessionGone`, HTTP 410, for
the last GONE_MEMORY evicted ids), or raises `CapacityError` (503) when every one is held.

Episodes: `reset(seed, episode, day_split)` starts episode `episode` of the key stream
jax.random.key(seed) of split `day_split` ("train" or "heldout", the task's days or windows:
`ig.make(task_id, split=...)`), exactly as the adapter's `reset(options={"key":
jax.random.key(seed), "episode": episode})` does (and, for episode 0, `reset(seed=seed)`). A step
after the horizon (fleet: 1,440 intervals; reservation: its decision days) raises `EpisodeDone`
(409); a refused action (`day_tasks.ActionError`, 422) leaves the episode as it was.

GET /baseline (`DayCore.baseline`): the task's baselines on its held-out split, graded as the
library grades them (`day_tasks.DayTask.baseline_frame`), on the request's thread (FastAPI's thread
pool, off the event loop and off the step worker), one at a time per fleet task and over the
reservation tasks; the last ANSWERS_KEPT answers are kept. Reservation: a batch of exactly N
episodes (~3 s for 16 on 2 busy cores), compiled once per N (~14 s), programs of at most
RESERVATION_COUNTS_KEPT counts held (~50 MB each); the default count's compile after start-up in
`ServerCore`'s background thread (`warm_baselines`: seed 0), and a /baseline waits for it. Fleet:
computed on the first request of a seed, not at start-up: each of the 5 baselines runs one padded
batch of 8 whole held-out days (~30-40 s on 2 busy cores, after a ~20 s compile on the first
request: ~4 min then, ~2.5 min for a new seed), minutes of both cores that a server started for
sessions should not spend unasked (nor wait for at exit, where a warm-up thread is joined); the
runs of the last FLEET_SEEDS_KEPT seeds are kept, so any count 1..8 of them answers at once.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import secrets
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import jax
import numpy as np

from inferencegym_jax.server.day_tasks import (
    DAY_SPLITS,
    FLEET,
    ActionError,
    DayTask,
    check_split,
    day_task_id,
    json_rows,
)
from inferencegym_jax.server.sessions import EpisodeDone, LruStore, SessionGone, SessionRecord
from inferencegym_jax.traffic import sampling

MAX_SEED = sampling.MAX_SEED
MAX_EPISODE = 2**31 - 1  # the adapters' options["episode"] bound (gym_host.check_options)
# Seeds whose fleet baseline runs /baseline keeps (8 days x 5 baselines, ~1.6 MB a seed, FleetEpisodes):
# a repeated or smaller request of one of them is answered without running the fleet again.
FLEET_SEEDS_KEPT = 8
# Episode counts whose reservation programs (7 per count, ~50 MB, measured) stay compiled; past it
# they are dropped (the next count compiles anew, from JAX's persistent compilation cache if it has it).
RESERVATION_COUNTS_KEPT = 4
# /baseline answers kept, by (task, seed, episodes) (a few kB each): a repeated request runs nothing.
ANSWERS_KEPT = 64


@dataclasses.dataclass
class DayResult:
    """The outcome of a reset or a step of a day session (host side, Python numbers).

    Attributes:
      observation: entry -> value of the flat observation, by name (day_tasks.DayTask.named).
      vector: the adapter's flat float32 observation, as floats (obs_size,).
      reward: the step's reward <= 0 (None after a reset).
      terminated, truncated: the adapter's flags (fleet: truncated at the horizon; reservation:
        terminated on the last commitment).
      done: the episode reached its horizon (a step now raises EpisodeDone).
      info: the adapter's info (JSON-safe; the reset's start_minute for a fleet, else {}).
      step_count: [steps] stepped in the episode.
    """

    observation: dict[str, Any]
    vector: list[float]
    reward: float | None
    terminated: bool
    truncated: bool
    done: bool
    info: dict[str, Any]
    step_count: int


@dataclasses.dataclass
class DaySession(SessionRecord):
    """One episode of a day task (`sessions.SessionRecord`'s fields, its log one record per step:
    {"reward": float, **the step's info}).

    Attributes:
      family: its task's family (day_tasks: "fleet" or "reservation").
      env: the adapter env (None until the first reset); split: the split it runs ("train", "heldout").
    """

    family: str = dataclasses.field(kw_only=True)
    env: Any = None
    split: str = "train"


class DayStore(LruStore):
    """At most `max_sessions` day sessions (module docstring: eviction)."""

    label = "day-task sessions"

    def __init__(self, tasks: Mapping[str, DayTask], max_sessions: int):
        super().__init__(max_sessions)
        self.tasks = tasks

    def create(self, task_id: str, pinned: bool = False) -> DaySession:
        """A new session of `task_id` (evicting the least recently used unpinned one when full)."""
        task = self.tasks[task_id]
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                self._evict_first(lambda session: True)
            session = DaySession(id=secrets.token_urlsafe(16), task_id=task_id, family=task.family, pinned=pinned,
                                 horizon=task.horizon("train"))
            self._sessions[session.id] = session
            return session

    def _release(self, session: DaySession) -> None:
        session.env = None  # its device state goes with it

    def get(self, sid: str) -> DaySession:
        """The session `sid`, marked most recently used; SessionGone / SessionNotFound."""
        session: DaySession = super().get(sid)
        return session


def _check_episode(seed: int | None, episode: Any) -> tuple[int, int]:
    """(seed, episode) of a reset: a fresh random seed for None; ValueError naming a bad one."""
    seed = secrets.randbelow(MAX_SEED + 1) if seed is None else sampling.check_seed(seed)
    if isinstance(episode, bool) or not isinstance(episode, int) or not 0 <= episode <= MAX_EPISODE:
        raise ValueError(f"episode={episode!r}: must be an integer in [0, {MAX_EPISODE}]")
    return seed, episode


class DayCore:
    """The day tasks' sessions (module docstring).

    Args:
      task_ids: the day task ids served (day_tasks.day_task_id's); may be empty.
      max_sessions: day sessions at once, >= 1.
    """

    def __init__(self, task_ids: Sequence[str], max_sessions: int = 64):
        self.task_ids = tuple(dict.fromkeys(task_ids))
        self.tasks = {t: DayTask.load(t) for t in self.task_ids}
        self.store = DayStore(self.tasks, max_sessions)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferencegym-day")
        self.steps = 0
        # /baseline (module docstring): a reservation task's, set once its programs are compiled (or
        # nothing to wait for); the fleet's compile on the first request.
        self.baselines_warm = {t: threading.Event() for t in self.task_ids if self.tasks[t].family != FLEET}
        for event in self.baselines_warm.values():
            event.set()
        reserving = threading.Lock()  # the reservation tasks share their programs' bound (RESERVATION_COUNTS_KEPT)
        self._baseline_locks = {t: threading.Lock() if self.tasks[t].family == FLEET else reserving
                                for t in self.task_ids}
        self._fleet_runs: collections.OrderedDict[tuple[str, int], dict[str, Any]] = collections.OrderedDict()
        self._reservation_counts: list[tuple[str, int]] = []  # (task, episodes) compiled
        self._answers: collections.OrderedDict[tuple[str, int, int], list[dict[str, Any]]] = collections.OrderedDict()

    def resolve(self, task: Any, served: Sequence[str]) -> str | None:
        """The id of a served day task `task` names; None when it names no day task; ValueError
        naming the `served` tasks for a day task not served."""
        day = day_task_id(task)
        if day is not None and day not in self.tasks:
            raise ValueError(f"task_id={task!r}: this server serves {list(served)}")
        return day

    def warm_up(self) -> None:
        """Compile every program a session runs: the adapter's reset and step of each task and
        split (an episode of each, one step; a fleet step compiles in ~17 s on 2 cores, ~1.5 s
        from JAX's persistent compilation cache)."""
        for task in self.tasks.values():
            for split in DAY_SPLITS:
                env = task.make_env(split)
                env.reset(seed=0)
                env.step(np.zeros(task.nvec.shape, np.int64))

    # ------------------------------------------------------------------ baselines

    def baseline_episodes(self, task_id: str, episodes: int | None) -> int:
        """/baseline's episode count for `task_id` (None: its family's default); ValueError naming
        episodes and its range (day_tasks.BASELINE_EPISODES)."""
        return self.tasks[task_id].check_baseline_episodes(episodes)

    def baseline(self, task_id: str, seed: int = 0, episodes: int | None = None) -> list[dict[str, Any]]:
        """The task's baselines on held-out episodes 0..episodes-1 of evaluate.evaluation_key(seed),
        one row per baseline (day_tasks.DayTask.baseline_frame's columns, NaN as None); waits for
        the task's programs (module docstring). ValueError naming seed or episodes."""
        seed = sampling.check_seed(seed)
        episodes = self.baseline_episodes(task_id, episodes)
        if task_id in self.baselines_warm:
            self.baselines_warm[task_id].wait()
        with self._baseline_locks[task_id]:
            return copy.deepcopy(self._answer(task_id, seed, episodes))

    def _answer(self, task_id: str, seed: int, episodes: int) -> list[dict[str, Any]]:
        """The rows of (task, seed, episodes), kept (ANSWERS_KEPT) or computed (`_frame`)."""
        key = (task_id, seed, episodes)
        if key not in self._answers:
            self._answers[key] = json_rows(self._frame(task_id, seed, episodes))
            while len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
        self._answers.move_to_end(key)
        return self._answers[key]

    def _frame(self, task_id: str, seed: int, episodes: int) -> Any:
        task = self.tasks[task_id]
        if task.family == FLEET:
            runs = self._fleet_runs.get((task_id, seed))
            if runs is None:
                runs = self._fleet_runs[task_id, seed] = task.fleet_runs(seed)
                while len(self._fleet_runs) > FLEET_SEEDS_KEPT:
                    self._fleet_runs.popitem(last=False)
            self._fleet_runs.move_to_end((task_id, seed))
            return task.baseline_frame(seed, episodes, runs)
        if (task_id, episodes) not in self._reservation_counts:
            if len(self._reservation_counts) >= RESERVATION_COUNTS_KEPT:
                from inferencegym_jax.fleet import reservation_baselines

                # every count's programs (jit's clear_cache, which JAX's type stubs do not declare)
                cast(Any, reservation_baselines._run_batch).clear_cache()
                self._reservation_counts.clear()
            self._reservation_counts.append((task_id, episodes))
        return task.baseline_frame(seed, episodes)

    def warm_baselines(self, stop: threading.Event) -> None:
        """Compile (and run) each reservation task's /baseline programs for seed 0 and its default
        count (the fleet's: at its first request, module docstring); each task's `baselines_warm`
        is set after. Stops between tasks once `stop` is set."""
        for task_id, warm in self.baselines_warm.items():
            try:
                with self._baseline_locks[task_id]:
                    if stop.is_set():
                        return
                    self._answer(task_id, 0, self.tasks[task_id].check_baseline_episodes(None))
            finally:
                warm.set()  # a failure here shows again, and is answered, at the first /baseline

    # ------------------------------------------------------------------ operations

    def _reset_op(self, session: DaySession, seed: int | None, episode: int, episode_id: str | None,
                  split: str | None) -> DayResult:
        seed, episode = _check_episode(seed, episode)
        split = check_split(split)
        task = self.tasks[session.task_id]
        if session.closed:
            raise SessionGone(f"session {session.id!r} was closed")
        if session.env is None or session.split != split:
            session.env, session.split = task.make_env(split), split
        obs, info = session.env.reset(options={"key": jax.random.key(seed), "episode": episode})
        session.seed, session.episode, session.episode_id = seed, episode, episode_id or session.id
        session.started, session.step_count, session.done, session.cumulative_reward = True, 0, False, 0.0
        session.horizon, session.log = task.horizon(split), []
        return DayResult(task.named(obs), np.asarray(obs, np.float64).tolist(), None, False, False, False,
                         dict(info), 0)

    def _step_op(self, session: DaySession, action: Mapping[str, Any]) -> DayResult:
        if session.closed:
            raise SessionGone(f"session {session.id!r} was closed")
        if not session.started:
            raise EpisodeDone(f"session {session.id}: reset it before stepping")
        if session.done:
            raise EpisodeDone(f"session {session.id}: the episode ended after {session.step_count} steps; "
                              "reset it to start another")
        task = self.tasks[session.task_id]
        vector = task.action_vector(action)
        try:
            obs, reward, terminated, truncated, info = session.env.step(vector)
        except ValueError as err:  # the adapter's range check: nothing advanced
            raise ActionError(task.locate(vector), str(err)) from None
        self.steps += 1
        session.step_count += 1
        session.done = bool(terminated or truncated) or session.step_count >= session.horizon
        session.cumulative_reward += reward
        session.log.append({"reward": reward, **info})
        return DayResult(task.named(obs), np.asarray(obs, np.float64).tolist(), reward, bool(terminated),
                         bool(truncated), session.done, info, session.step_count)

    async def reset(self, session: DaySession, seed: int | None = None, episode: int = 0,
                    episode_id: str | None = None, split: str | None = None) -> DayResult:
        """Start episode `episode` of seed `seed`'s stream of `split` in `session` (module
        docstring; seed None: a fresh random seed, kept in the session)."""
        async with session.lock:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, self._reset_op, session, seed, episode, episode_id, split)

    async def step(self, session: DaySession, action: Mapping[str, Any]) -> DayResult:
        """One step with `action` (day_tasks' JSON action); ActionError, EpisodeDone."""
        async with session.lock:
            return await asyncio.get_running_loop().run_in_executor(self._executor, self._step_op, session, action)

    def reset_now(self, session: DaySession, seed: int | None = None, episode: int = 0,
                  episode_id: str | None = None, split: str | None = None) -> DayResult:
        """`reset` on the calling thread (no event loop)."""
        return self._reset_op(session, seed, episode, episode_id, split)

    def step_now(self, session: DaySession, action: Mapping[str, Any]) -> DayResult:
        """`step` on the calling thread (no event loop)."""
        return self._step_op(session, action)

    def close(self) -> None:
        """Stop the worker thread (pending operations are dropped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ descriptions

    @property
    def task_table(self) -> list[dict[str, Any]]:
        """GET /tasks' day_tasks: one row per served day task (day_tasks.DayTask.row)."""
        return [task.row() for task in self.tasks.values()]

    def info(self) -> dict[str, Any]:
        """GET /info's day_tasks: task id -> action, observation fields with units, reward."""
        return {task_id: task.info() for task_id, task in self.tasks.items()}


def state_fields(session: DaySession) -> dict[str, Any]:
    """A day session's state (schemas.DayState's fields)."""
    return {"episode_id": session.episode_id, "step_count": session.step_count, "task_id": session.task_id,
            "seed": session.seed, "episode": session.episode, "stream": "plain", "horizon": session.horizon,
            "done": session.done, "cumulative_reward": session.cumulative_reward, "family": session.family,
            "day_split": session.split}
