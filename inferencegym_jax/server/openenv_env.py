"""The serving env as an OpenEnv `Environment`: one pinned session of the shared core each.

OpenEnv's `create_app` makes one `InferenceGymEnvironment` per WebSocket connection (`/ws`) and
a fresh one per stateless `POST /reset`, `POST /step` and `GET /state`, closing it after the
request. Each holds at most one session of the core, created at its first reset (so building
one, as `/metadata` does, costs nothing) and closed with it. Its `reset_async` and `step_async`
go through the core's batcher, so the episodes of all open connections are stepped together.

reset(seed=s, episode=e, task_id=t): episode e of the key stream of seed s (pool module
docstring), task t (default: the first served task). A step after the horizon raises HTTP 409.
reset(split=..., index=i) starts task spec i of a split of OpenEnv's task API (`task_api`):
"train" episodes of seed 0's stream, "test" the held-out episodes of evaluate.evaluation_key(0)
that `evaluate.evaluate` grades; the state's `stream` says which stream ("plain", "held_out").

A step with no episode started (every stateless `POST /step`, whose environment is fresh, or a
connection's first message when it is a step) first starts episode 0 of the stream of
DEFAULT_SEED on the default task, as `reset(seed=DEFAULT_SEED)` would, and then takes the step:
OpenEnv's HTTP routes are stateless by design, and its reference environments step from a
fresh instance. The observation says so in its metadata (`started_metadata`; OpenEnv's
`POST /step` also gives it at the top level of its response):
{"episode_started": true, "task_id": ..., "seed": DEFAULT_SEED, "episode": 0}. A step in an
episode already started has empty metadata.

A fleet or reservation task (`day_tasks`) runs in a day session (`day_sessions`) instead:
reset(task_id=..., seed, episode, day_split) and a step with its entries ({"replicas",
"routing"} or {"reserved"}: the action model of a server serving day tasks has them,
`schemas.body_models`) give a `schemas.DayObservation`, and the state is a `schemas.DayState`;
the stateless step's default episode is then that task's when it is the first served.

It is an OpenEnv `MCPEnvironment`: its FastMCP server (`mcp_tools.build_server`) has the tools an
LLM agent plays with (reset_episode, observe, configure, step_interval, grade), which OpenEnv
serves on `POST /mcp` and `WS /mcp`. They drive this environment's session through the same
`reset_async` / `step_async` as `/ws`; the environment keeps the latest observation (`latest`)
and the knobs configured for the next intervals (`knobs`, emptied at every reset) for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fastapi import HTTPException
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES, CallToolAction, ListToolsAction
from openenv.core.env_server.types import EnvironmentMetadata

from inferencegym_jax.server import mcp_tools
from inferencegym_jax.server.core import ServerCore, StepResult
from inferencegym_jax.server.day_sessions import DayResult, DaySession, state_fields
from inferencegym_jax.server.schemas import (
    DAY_ACTION_FIELDS,
    DayObservation,
    DayState,
    ServingAction,
    ServingObservation,
    ServingState,
    day_values,
)
from inferencegym_jax.server.sessions import CapacityError, EpisodeDone, Session, SessionGone, SessionNotFound
from inferencegym_jax.server.task_api import TaskProvider

ENV_NAME = "inferencegym"
# The seed and episode of the episode a step with none started begins (module docstring).
DEFAULT_SEED = 0
DEFAULT_EPISODE = 0


def started_metadata(session: Session | DaySession) -> dict[str, Any]:
    """The observation metadata of a step that started its episode (module docstring)."""
    return {"episode_started": True, "task_id": session.task_id, "seed": session.seed, "episode": session.episode}


def observation(result: StepResult, task_id: str, metadata: dict[str, Any] | None = None) -> ServingObservation:
    """The OpenEnv observation of a step result, with `metadata` (default: none)."""
    return ServingObservation(
        **result.observation,
        done=result.done,
        reward=result.reward,
        reward_components=result.reward_components,
        metrics=result.metrics,
        applied_action=result.applied_action,
        clipped=result.clipped,
        step_count=result.step_count,
        task_id=task_id,
        metadata=metadata or {},
    )


def day_observation(result: DayResult, session: DaySession, metadata: dict[str, Any] | None = None
                    ) -> DayObservation:
    """The OpenEnv observation of a day session's reset or step, with `metadata` (default: none)."""
    return DayObservation(fields=result.observation, vector=result.vector, info=result.info, reward=result.reward,
                          done=result.done, terminated=result.terminated, truncated=result.truncated,
                          step_count=result.step_count, task_id=session.task_id, family=session.family,
                          metadata=metadata or {})


def day_action(action: Any) -> dict[str, Any]:
    """A day session's JSON action from an OpenEnv action: its day entries, and whatever else it
    gives (knobs, a policy: day_tasks refuses them, naming them)."""
    given = {**action.knobs(), "policy": action.policy}
    given.update({k: getattr(action, k, None) for k in DAY_ACTION_FIELDS})
    return {k: v for k, v in given.items() if v is not None}


def state_of(session: Session | DaySession | None) -> ServingState:
    """The OpenEnv state of a session (an empty state before the first reset)."""
    if session is None:
        return ServingState()
    if isinstance(session, DaySession):
        return DayState(**state_fields(session))
    return ServingState(episode_id=session.episode_id, step_count=session.step_count, task_id=session.task_id,
                        seed=session.seed, episode=session.episode, stream=session.stream,
                        horizon=session.horizon, done=session.done,
                        cumulative_reward=session.cumulative_reward)


@contextlib.contextmanager
def http_errors() -> Iterator[None]:
    """The core's errors as HTTP errors (OpenEnv's stateless routes answer them as such; over
    /ws the message reaches the client as an error message): bad values 422, a finished
    episode 409, an unknown session 404, an evicted or closed one 410, no free slot 503."""
    try:
        yield
    except ValueError as err:
        raise HTTPException(422, str(err)) from None
    except EpisodeDone as err:
        raise HTTPException(409, str(err)) from None
    except SessionGone as err:  # before SessionNotFound: both are KeyErrors (args[0]: no quotes)
        raise HTTPException(410, str(err.args[0])) from None
    except SessionNotFound as err:
        raise HTTPException(404, str(err.args[0])) from None
    except CapacityError as err:
        raise HTTPException(503, str(err)) from None


class InferenceGymEnvironment(TaskProvider, MCPEnvironment):
    """An OpenEnv environment over `core`, with MCP tools (module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, core: ServerCore):
        self._core = core
        self._session: Session | None = None
        self._day: DaySession | None = None  # a day task's session, when the episode is one (day_sessions)
        self._latest: ServingObservation | None = None
        self.knobs: dict[str, Any] = {}  # knob -> value the MCP tools configured (mcp_tools)
        super().__init__(mcp_tools.build_server(self))
        self.mcp_client = mcp_tools.FiniteClient(self.mcp_server)  # NaN refused, not sent as null

    def _validate_tool_names(self, mcp_server: Any) -> None:
        """MCPEnvironment's check that no tool takes a name OpenEnv reserves, on the names
        `mcp_tools` registers (MCPEnvironment lists the server's tools: an event loop per env)."""
        reserved = sorted(set(mcp_tools.TOOL_NAMES) & RESERVED_TOOL_NAMES)
        if reserved:
            raise ValueError(f"MCP tools cannot use reserved names: {reserved}")

    @property
    def core(self) -> ServerCore:
        return self._core

    @property
    def session(self) -> Session | None:
        """The core session this environment holds (None before its first reset)."""
        return self._session

    @property
    def latest(self) -> ServingObservation | None:
        """The observation of the latest reset or step (None before the first)."""
        return self._latest

    def _record(self, obs: ServingObservation, reset: bool) -> ServingObservation:
        self._latest = obs
        if reset:
            self.knobs.clear()
        return obs

    @property
    def current(self) -> Session | DaySession | None:
        """The session this environment holds, of either kind (None before its first reset)."""
        return self._session if self._session is not None else self._day

    def _open(self, task_id: Any, day_split: str | None = None) -> Session | DaySession:
        """The session a reset of `task_id` (None: the default task) runs in: this environment's,
        or a new one of that task (the one held closed); a 422 for day_split on a serving task."""
        with http_errors():
            task, day = self._core.resolve_any(self._core.default_task if task_id is None else task_id)
            if day_split is not None and not day:
                raise ValueError(f"day_split={day_split!r}: for fleet and reservation tasks only ({task} is a "
                                 "serving task)")
            current = self.current
            if current is not None and (current.task_id != task or current.closed):
                self._release()
            if self.current is None:
                if day:
                    self._day = self._core.day.store.create(task, pinned=True)
                else:
                    self._session = self._core.store.create(task, pinned=True)
        session = self.current
        assert session is not None
        return session

    def _stepping(self, action: Any) -> tuple[Session | DaySession, bool]:
        """The session a step runs in, and whether its episode must start first (none started:
        the module docstring's stateless step); the action checked against its task first."""
        current = self.current
        if current is not None and current.started:
            session, start = current, False
        else:
            session, start = self._open(None if current is None else current.task_id), True
        with http_errors():
            if isinstance(session, DaySession):
                self._core.day.tasks[session.task_id].action_vector(day_action(action))
            elif day_values(action):
                raise ValueError(f"action: {sorted(day_values(action))} are fleet or reservation entries; "
                                 f"{session.task_id} takes knob values or a policy")
        return session, start

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
                          episode: int = 0, split: str | None = None, index: int | None = None,
                          day_split: str | None = None) -> Any:
        task_id, seed, episode, held_out = self.task_reset(split, index, task_id, seed, episode)  # a split's task
        session = self._open(task_id, day_split)
        with http_errors():
            if isinstance(session, DaySession):
                day = await self._core.day.reset(session, seed, episode, episode_id, day_split)
                return day_observation(day, session)
            result = await self._core.reset(session, seed, episode, episode_id, held_out)
        return self._record(observation(result, session.task_id), reset=True)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              episode: int = 0, split: str | None = None, index: int | None = None,
              day_split: str | None = None) -> Any:
        task_id, seed, episode, held_out = self.task_reset(split, index, task_id, seed, episode)  # a split's task
        session = self._open(task_id, day_split)
        with http_errors():
            if isinstance(session, DaySession):
                return day_observation(self._core.day.reset_now(session, seed, episode, episode_id, day_split),
                                       session)
            result = self._core.reset_now(session, seed, episode, episode_id, held_out)
        return self._record(observation(result, session.task_id), reset=True)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """One interval (ServingAction), one step of a day task (its entries), or OpenEnv's MCP
        actions (ListToolsAction, CallToolAction)."""
        if isinstance(action, (ListToolsAction, CallToolAction)):
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)
        session, start = self._stepping(action)
        metadata = started_metadata(session) if start else None
        with http_errors():
            if isinstance(session, DaySession):
                if start:
                    await self._core.day.reset(session, DEFAULT_SEED, DEFAULT_EPISODE)
                return day_observation(await self._core.day.step(session, day_action(action)), session, metadata)
            if start:
                await self._core.reset(session, DEFAULT_SEED, DEFAULT_EPISODE)
            result = await self._core.step(session, action.knobs(), action.policy)
        return self._record(observation(result, session.task_id, metadata), reset=start)

    def _step_impl(self, action: ServingAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """`step` of a ServingAction or a day task's (MCPEnvironment.step routes MCP actions to the tools)."""
        session, start = self._stepping(action)
        metadata = started_metadata(session) if start else None
        with http_errors():
            if isinstance(session, DaySession):
                if start:
                    self._core.day.reset_now(session, DEFAULT_SEED, DEFAULT_EPISODE)
                return day_observation(self._core.day.step_now(session, day_action(action)), session, metadata)
            if start:
                self._core.reset_now(session, DEFAULT_SEED, DEFAULT_EPISODE)
            result = self._core.step_now(session, action.knobs(), action.policy)
        return self._record(observation(result, session.task_id, metadata), reset=start)

    @property
    def state(self) -> ServingState:
        return state_of(self.current)

    def _release(self) -> None:
        """Close this environment's core session (its slot goes back to the pool)."""
        session, self._session, self._latest = self._session, None, None
        if session is not None and not session.closed:
            self._core.store.close(session.id)
        day, self._day = self._day, None
        if day is not None and not day.closed:
            self._core.day.store.close(day.id)

    def close(self) -> None:
        """Close this environment's session and drop its MCP server and client."""
        self._release()
        super().close()

    def get_metadata(self) -> EnvironmentMetadata:
        tasks = ", ".join(self._core.served_ids)
        return EnvironmentMetadata(
            name=ENV_NAME,
            description=f"LLM inference-serving control (JAX simulator), tasks {tasks}; "
                        "reset(seed, episode, task_id) or reset(split, index) (test: the held-out evaluation "
                        "episodes), step(knob values or a server policy; a fleet task's replicas and routing, a "
                        "reservation task's reserved); MCP tools (serving tasks) "
                        f"for LLM agents on /mcp: {', '.join(mcp_tools.TOOL_NAMES)}",
            version=_version(),
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("inferencegym_jax")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+source"
