"""The HTTP routes beside OpenEnv's: sessions by id, tasks, info, grader, baseline, live view.

    POST   /sessions                 {task_id, seed?, episode?, episode_id?} or {split, index, episode_id?}
                                     (task_api: "test" is the held-out episodes) -> 201 session, first observation
    GET    /sessions/{id}            the session's state
    POST   /sessions/{id}/reset      {seed?, episode?, episode_id?} -> the first observation
    POST   /sessions/{id}/step       {action: {knob: value}} or {policy: name} -> observation, reward, done
    GET    /sessions/{id}/log        the episode's grader records (POST /grader's input)
    DELETE /sessions/{id}            close it (204)
    GET    /tasks                    served tasks: ids, names, difficulty, knobs, defaults, SLOs, policies
    GET    /stats                    sessions, evictions, batched program runs and compilations
    GET    /info                     action and observation schemas with units, reward weights, limits
    POST   /grader                   {task_id, intervals: [...]} -> score, breakdown, feedback (stateless)
    GET    /baseline?task_id&seed&episodes   every server policy on held-out episodes (reproducible;
                                     a day task: its baselines on its held-out split)
    GET    /view                     the live page (static HTML and JavaScript)

Fleet and reservation tasks (`day_tasks`, `day_sessions`) take the same session routes: POST
/sessions {task_id, seed?, episode?, day_split?}, a step's {action: {replicas, routing}} or
{action: {reserved: [24 ints]}} -> observation (entries by name), vector, reward, terminated,
truncated, done, info; their log is {task_id, family, steps: [{reward, **info}]}. GET /tasks and
/info list them under day_tasks. GET /baseline gives their non-learning baselines on the held-out
split (day_sessions.DayCore.baseline: fleet.evaluate.graded_table's or
fleet.reservation_baselines.reservation_table's rows; episodes at most 8 for a fleet, 64 for a
reservation task, day_tasks.BASELINE_EPISODES). /grader (its input is the serving grader's
interval record) and server policies answer 422 for them.

`add_openenv_routes` replaces OpenEnv's stateless POST /reset and POST /step with the same
operations over typed bodies (schemas.OpenEnvReset, OpenEnvStep), so that their OpenAPI schemas
are the checks the server makes (seed bounds, the action's fields: an unknown field of the
action is a 422 at ["body", "action", field]).

Errors (every body schemas.ErrorResponse; contract.STATUSES declares them per route): 422 for a
malformed body or a bad value (loc names the field), 404 for an unknown session, 410 for an
evicted one (sessions.SessionStore), 409 for a step after the episode's horizon, 413 for a body
over app.MAX_BODY_BYTES, 503 when every slot is held by a WebSocket.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import numpy as np
from fastapi import APIRouter, FastAPI, HTTPException, Query, Response
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import ResetResponse, StepResponse

from inferencegym_jax import observation as observation_module
from inferencegym_jax import reward
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.server import schemas
from inferencegym_jax.server.core import (
    DEFAULT_BASELINE_EPISODES,
    MAX_BASELINE_EPISODES,
    MAX_SEED,
    ServerCore,
    StepResult,
)
from inferencegym_jax.server.day_sessions import DayResult, DaySession
from inferencegym_jax.server.day_tasks import ActionError
from inferencegym_jax.server.openenv_env import InferenceGymEnvironment, http_errors, state_of
from inferencegym_jax.server.sessions import Session
from inferencegym_jax.server.task_api import invalid, reset_target


def session_body(session: Session | DaySession, result: StepResult | DayResult | None = None) -> dict[str, Any]:
    """A session's JSON: id, state, and the result of the operation that answered."""
    body: dict[str, Any] = {"session_id": session.id, "state": state_of(session).model_dump()}
    if result is not None:
        body.update(dataclasses.asdict(result))
    return body


def typed(**annotations: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Set an endpoint's parameter types before FastAPI reads them (the body models of this
    server, schemas.body_models, are chosen at run time)."""
    def decorate(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        endpoint.__annotations__.update(annotations)
        return endpoint
    return decorate


def build_router(core: ServerCore, router: APIRouter | None = None) -> APIRouter:
    """The routes of the module docstring over `core`, in that order, on `router` (a new one by
    default; `app.router` adds them to the app itself, where `contract` finds them)."""
    router = APIRouter() if router is None else router
    models = schemas.body_models(bool(core.day.task_ids))
    add_session_routes(router, core, models)
    add_log_routes(router, core)
    add_task_routes(router, core)
    add_grading_routes(router, core)
    add_view_route(router)
    return router


@contextlib.contextmanager
def at(*loc: str) -> Iterator[None]:
    """`http_errors`, with a 422's loc the field the value came from (["body", "task_id"]; a day
    task's refused action entry: its path appended, ["body", "action", "reserved", 3])."""
    try:
        with http_errors():
            try:
                yield
            except ActionError as err:
                raise invalid([*loc, *err.loc], str(err)) from None
    except HTTPException as err:
        if err.status_code == 422 and isinstance(err.detail, str):
            raise HTTPException(422, [{"loc": list(loc), "msg": err.detail, "type": "value_error"}]) from None
        raise


def find(core: ServerCore, session_id: str) -> Session | DaySession:
    """The open session `session_id` of either kind; HTTP 404 (unknown) or 410 (evicted) otherwise."""
    with http_errors():
        if core.day.store.has(session_id):
            return core.day.store.get(session_id)
        return core.store.get(session_id)


def add_session_routes(router: APIRouter, core: ServerCore, models: schemas.BodyModels) -> None:
    """POST /sessions, GET /sessions/{id}, POST /sessions/{id}/reset and /step (a day task's
    sessions: day_sessions)."""

    @router.post("/sessions", status_code=201, tags=["Sessions"])
    @typed(body=models.create)
    async def create_session(body: schemas.CreateSession) -> dict[str, Any]:
        task, seed, episode, held_out = reset_target(core, body.split, body.index, body.task_id, body.seed,
                                                     body.episode)
        if task is None:
            raise invalid(["body", "task_id"], "give task_id, or split and index")
        with at("body", "task_id"):
            task_id, day = core.resolve_any(task)
        day_split = getattr(body, "day_split", None)
        if day:
            with http_errors():
                day_session = core.day.store.create(task_id)
            with at("body"):
                day_result = await core.day.reset(day_session, seed, episode, body.episode_id, day_split)
            return session_body(day_session, day_result)
        if day_split is not None:
            raise invalid(["body", "day_split"], f"day_split: for fleet and reservation tasks only ({task_id} is "
                                                 "a serving task)")
        with http_errors():
            session = core.store.create(task_id)
        with http_errors():
            result = await core.reset(session, seed, episode, body.episode_id, held_out)
        return session_body(session, result)

    @router.get("/sessions/{session_id}", tags=["Sessions"])
    async def get_session(session_id: str) -> dict[str, Any]:
        return session_body(find(core, session_id))

    @router.post("/sessions/{session_id}/reset", tags=["Sessions"])
    @typed(body=models.reset)
    async def reset_session(session_id: str, body: schemas.ResetSession) -> dict[str, Any]:
        session = find(core, session_id)
        day_split = getattr(body, "day_split", None)
        if isinstance(session, DaySession):
            with at("body"):
                day_result = await core.day.reset(session, body.seed, body.episode, body.episode_id, day_split)
            return session_body(session, day_result)
        if day_split is not None:
            raise invalid(["body", "day_split"], f"day_split: for fleet and reservation tasks only ({session.task_id} "
                                                 "is a serving task)")
        with http_errors():
            result = await core.reset(session, body.seed, body.episode, body.episode_id)
        return session_body(session, result)

    @router.post("/sessions/{session_id}/step", tags=["Sessions"])
    @typed(body=models.step)
    async def step_session(session_id: str, body: schemas.StepSession) -> dict[str, Any]:
        session = find(core, session_id)
        action = None if body.action is None else body.action.model_dump()
        if isinstance(session, DaySession):
            if body.policy is not None:
                raise invalid(["body", "policy"], f"policy: {session.task_id} has no server policies; give its "
                                                  "action's entries (GET /tasks)")
            with at("body", "action"):
                day_result = await core.day.step(session, {k: v for k, v in (action or {}).items() if v is not None})
            return session_body(session, day_result)
        with at("body", "action" if body.policy is None else "policy"):
            result = await core.step(session, action, body.policy)
        return session_body(session, result)


def add_log_routes(router: APIRouter, core: ServerCore) -> None:
    """GET /sessions/{id}/log and DELETE /sessions/{id}."""

    @router.get("/sessions/{session_id}/log", tags=["Sessions"])
    async def session_log(session_id: str) -> dict[str, Any]:
        session = find(core, session_id)
        if isinstance(session, DaySession):  # no grader log: the adapter's per-step reward and info
            return {"task_id": session.task_id, "family": session.family, "steps": list(session.log)}
        return {"task_id": session.task_id, "intervals": list(session.log)}

    @router.delete("/sessions/{session_id}", status_code=204, tags=["Sessions"])
    async def close_session(session_id: str) -> Response:
        session = find(core, session_id)
        with http_errors():
            (core.day.store if isinstance(session, DaySession) else core.store).close(session_id)
        return Response(status_code=204)


def add_task_routes(router: APIRouter, core: ServerCore) -> None:
    """GET /tasks, /stats and /info."""

    @router.get("/tasks", tags=["Tasks"])
    async def list_tasks() -> dict[str, Any]:
        return {"ready": core.ready, "max_sessions": core.store.max_sessions, "tasks": core.task_table,
                "day_tasks": core.day.task_table}

    @router.get("/stats", tags=["Tasks"])
    async def stats() -> dict[str, Any]:
        """Sessions open, evictions, and how many operations the batched programs ran in how many runs."""
        return {"sessions": len(core.store), "max_sessions": core.store.max_sessions,
                "evictions": core.store.evictions, "batching": core.batcher.batching,
                "batches": core.batcher.batches, "operations": core.batcher.operations,
                "compilations": {t: pool.traces for t, pool in core.pools.items()},
                "day_sessions": len(core.day.store), "day_evictions": core.day.store.evictions,
                "day_steps": core.day.steps}

    @router.get("/info", tags=["Tasks"])
    async def info() -> dict[str, Any]:
        return info_body(core)


def add_grading_routes(router: APIRouter, core: ServerCore) -> None:
    """POST /grader and GET /baseline."""

    @router.post("/grader", tags=["Grading"])
    async def grader(body: schemas.GraderRequest) -> dict[str, Any]:
        with at("body", "task_id"):
            task_id = core.resolve_task(body.task_id)
        with at("body", "intervals"):
                return core.grade(task_id, [r.model_dump() for r in body.intervals])

    @router.get("/baseline", tags=["Grading"])
    def baseline(task_id: str = Query(..., description="a served task"),
                 seed: int = Query(0, ge=0, le=MAX_SEED, description="seed of evaluate.evaluation_key"),
                 # None when absent (the task's default); typed int so that the document says integer
                 # (a query value is never null)
                 episodes: int = Query(None, ge=1, le=MAX_BASELINE_EPISODES, description=(
                     "episodes 0..episodes-1; default 16 (a fleet task: 8). At most 256; a fleet task 8, a "
                     "reservation task 64"))) -> dict[str, Any]:
        # A plain def: FastAPI runs it on its thread pool, so the event loop keeps serving (a fleet
        # task's first request of a seed runs 8 held-out days per baseline: minutes on 2 cores).
        with at("query", "task_id"):
            resolved, day = core.resolve_any(task_id)
        if day:
            with at("query", "episodes"):
                episodes = core.day.baseline_episodes(resolved, episodes)
        episodes = DEFAULT_BASELINE_EPISODES if episodes is None else episodes
        with at("query"):
            rows = core.baseline(resolved, seed, episodes)
        body = {"task_id": resolved, "seed": seed, "episodes": episodes,
                "key": f"evaluate.evaluation_key({seed}), episodes 0..{episodes - 1}", "policies": rows}
        if day:
            body.update(family=core.day.tasks[resolved].family, split="heldout")
        return body


def add_view_route(router: APIRouter) -> None:
    """GET /view: the live page."""

    @router.get("/view", response_class=HTMLResponse, tags=["Live view"])
    async def view() -> HTMLResponse:
        page = resources.files("inferencegym_jax.server").joinpath("static", "view.html").read_text()
        return HTMLResponse(page)


def info_body(core: ServerCore) -> dict[str, Any]:
    """GET /info: the schemas (with units), the observation table, reward weights, limits."""
    from inferencegym_jax.serving import IntervalMetrics

    return {
        "knobs": list(KNOBS),
        "action_schema": schemas.ServingAction.model_json_schema(),
        "step_body_schema": schemas.StepSession.model_json_schema(),
        "observation_schema": schemas.ServingObservation.model_json_schema(),
        "observation_fields": {name: {"unit": f.unit, "low": f.low, "high": f.high, "size": f.size, "doc": f.doc}
                               for name, f in observation_module.FEATURES},
        "metrics_doc": (IntervalMetrics.__doc__ or "").strip(),
        "reward": {
            "range": [-1.0, 1.0],
            "weights": {task_id: dict(zip(reward.COMPONENTS, np.asarray(pool.params.reward.weights).tolist()))
                        for task_id, pool in core.pools.items()},
            "kind": {task_id: pool.params.reward.kind for task_id, pool in core.pools.items()},
            "doc": "R = alpha throughput - beta latency - gamma violations - delta cost - epsilon stability per "
                   "interval, clipped to [-1, 1]; weights by term; kind 'rates' (v0: the interval's rates) or "
                   "'increments' (v1: what the interval adds to the grade) (reward.py)",
        },
        "grader_record_schema": schemas.IntervalRecord.model_json_schema(),
        "limits": {"max_sessions": core.store.max_sessions, "max_log_intervals": schemas.MAX_LOG_INTERVALS,
                   "max_baseline_episodes": MAX_BASELINE_EPISODES, "max_seed": MAX_SEED,
                   "max_day_sessions": core.day.store.max_sessions},
        "day_tasks": core.day.info(),
    }


def add_openenv_routes(app: FastAPI, core: ServerCore, make_env: Callable[[], InferenceGymEnvironment]) -> None:
    """OpenEnv's POST /reset and POST /step over typed bodies (module docstring), in place of
    `create_app`'s (same paths, descriptions, responses; each request its own environment)."""
    replaced = {r.path: r for r in app.router.routes if isinstance(r, APIRoute) and r.path in ("/reset", "/step")}
    app.router.routes[:] = [r for r in app.router.routes if r not in replaced.values()]
    doc: dict[str, dict[str, Any]] = {path: {"summary": r.summary, "description": r.description, "tags": r.tags}
           for path, r in replaced.items()}
    models = schemas.body_models(bool(core.day.task_ids))

    @app.post("/reset", response_model=ResetResponse, **doc.get("/reset", {}))
    @typed(body=models.openenv_reset | None)
    async def reset(body: schemas.OpenEnvReset | None = None) -> ResetResponse:
        body = body or models.openenv_reset.model_validate({})
        if body.task_id is not None:
            with at("body", "task_id"):
                core.resolve_any(body.task_id)
        env = make_env()
        try:
            obs = await env.reset_async(**body.model_dump(exclude_unset=True))
            return ResetResponse(**serialize_observation(obs))
        finally:
            env.close()

    @app.post("/step", response_model=StepResponse, **doc.get("/step", {}))
    @typed(body=models.openenv_step)
    async def step(body: schemas.OpenEnvStep) -> StepResponse:
        if body.action.policy is not None and core.default_task in core.pools:
            with at("body", "action", "policy"):
                core.pools[core.default_task].policy_index(body.action.policy)
        env = make_env()
        try:
            obs = await env.step_async(body.action, timeout_s=body.timeout_s)
            return StepResponse(**serialize_observation(obs))
        finally:
            env.close()
