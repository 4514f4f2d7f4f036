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
    GET    /baseline?task_id&seed&episodes   every server policy on held-out episodes (reproducible)
    GET    /view                     the live page (static HTML and JavaScript)

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
from inferencegym_jax.server.core import MAX_BASELINE_EPISODES, MAX_SEED, ServerCore, StepResult
from inferencegym_jax.server.openenv_env import InferenceGymEnvironment, http_errors, state_of
from inferencegym_jax.server.sessions import Session
from inferencegym_jax.server.task_api import invalid, reset_target


def session_body(session: Session, result: StepResult | None = None) -> dict[str, Any]:
    """A session's JSON: id, state, and the result of the operation that answered."""
    body: dict[str, Any] = {"session_id": session.id, "state": state_of(session).model_dump()}
    if result is not None:
        body.update(dataclasses.asdict(result))
    return body


def build_router(core: ServerCore, router: APIRouter | None = None) -> APIRouter:
    """The routes of the module docstring over `core`, in that order, on `router` (a new one by
    default; `app.router` adds them to the app itself, where `contract` finds them)."""
    router = APIRouter() if router is None else router
    add_session_routes(router, core)
    add_log_routes(router, core)
    add_task_routes(router, core)
    add_grading_routes(router, core)
    add_view_route(router)
    return router


@contextlib.contextmanager
def at(*loc: str) -> Iterator[None]:
    """`http_errors`, with a 422's loc the field the value came from (["body", "task_id"])."""
    try:
        with http_errors():
            yield
    except HTTPException as err:
        if err.status_code == 422 and isinstance(err.detail, str):
            raise HTTPException(422, [{"loc": list(loc), "msg": err.detail, "type": "value_error"}]) from None
        raise


def find(core: ServerCore, session_id: str) -> Session:
    """The open session `session_id`; HTTP 404 (unknown) or 410 (evicted) otherwise."""
    with http_errors():
        return core.store.get(session_id)


def add_session_routes(router: APIRouter, core: ServerCore) -> None:
    """POST /sessions, GET /sessions/{id}, POST /sessions/{id}/reset and /step."""

    @router.post("/sessions", status_code=201, tags=["Sessions"])
    async def create_session(body: schemas.CreateSession) -> dict[str, Any]:
        task, seed, episode, held_out = reset_target(core, body.split, body.index, body.task_id, body.seed,
                                                     body.episode)
        if task is None:
            raise invalid(["body", "task_id"], "give task_id, or split and index")
        with at("body", "task_id"):
            task_id = core.resolve_task(task)
        with http_errors():
            session = core.store.create(task_id)
        with http_errors():
            result = await core.reset(session, seed, episode, body.episode_id, held_out)
        return session_body(session, result)

    @router.get("/sessions/{session_id}", tags=["Sessions"])
    async def get_session(session_id: str) -> dict[str, Any]:
        return session_body(find(core, session_id))

    @router.post("/sessions/{session_id}/reset", tags=["Sessions"])
    async def reset_session(session_id: str, body: schemas.ResetSession) -> dict[str, Any]:
        session = find(core, session_id)
        with http_errors():
            result = await core.reset(session, body.seed, body.episode, body.episode_id)
        return session_body(session, result)

    @router.post("/sessions/{session_id}/step", tags=["Sessions"])
    async def step_session(session_id: str, body: schemas.StepSession) -> dict[str, Any]:
        session = find(core, session_id)
        action = None if body.action is None else body.action.model_dump()
        with at("body", "action" if body.policy is None else "policy"):
            result = await core.step(session, action, body.policy)
        return session_body(session, result)


def add_log_routes(router: APIRouter, core: ServerCore) -> None:
    """GET /sessions/{id}/log and DELETE /sessions/{id}."""

    @router.get("/sessions/{session_id}/log", tags=["Sessions"])
    async def session_log(session_id: str) -> dict[str, Any]:
        session = find(core, session_id)
        return {"task_id": session.task_id, "intervals": list(session.log)}

    @router.delete("/sessions/{session_id}", status_code=204, tags=["Sessions"])
    async def close_session(session_id: str) -> Response:
        find(core, session_id)
        with http_errors():
            core.store.close(session_id)
        return Response(status_code=204)


def add_task_routes(router: APIRouter, core: ServerCore) -> None:
    """GET /tasks, /stats and /info."""

    @router.get("/tasks", tags=["Tasks"])
    async def list_tasks() -> dict[str, Any]:
        return {"ready": core.ready, "max_sessions": core.store.max_sessions, "tasks": core.task_table}

    @router.get("/stats", tags=["Tasks"])
    async def stats() -> dict[str, Any]:
        """Sessions open, evictions, and how many operations the batched programs ran in how many runs."""
        return {"sessions": len(core.store), "max_sessions": core.store.max_sessions,
                "evictions": core.store.evictions, "batching": core.batcher.batching,
                "batches": core.batcher.batches, "operations": core.batcher.operations,
                "compilations": {t: pool.traces for t, pool in core.pools.items()}}

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
                 episodes: int = Query(16, ge=1, le=MAX_BASELINE_EPISODES)) -> dict[str, Any]:
        # A plain def: FastAPI runs it on its thread pool, so the event loop keeps serving.
        with at("query", "task_id"):
            resolved = core.resolve_task(task_id)
        with at("query"):
            rows = core.baseline(resolved, seed, episodes)
        return {"task_id": resolved, "seed": seed, "episodes": episodes,
                "key": f"evaluate.evaluation_key({seed}), episodes 0..{episodes - 1}", "policies": rows}


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
                   "max_baseline_episodes": MAX_BASELINE_EPISODES, "max_seed": MAX_SEED},
    }


def add_openenv_routes(app: FastAPI, core: ServerCore, make_env: Callable[[], InferenceGymEnvironment]) -> None:
    """OpenEnv's POST /reset and POST /step over typed bodies (module docstring), in place of
    `create_app`'s (same paths, descriptions, responses; each request its own environment)."""
    replaced = {r.path: r for r in app.router.routes if isinstance(r, APIRoute) and r.path in ("/reset", "/step")}
    app.router.routes[:] = [r for r in app.router.routes if r not in replaced.values()]
    doc: dict[str, dict[str, Any]] = {path: {"summary": r.summary, "description": r.description, "tags": r.tags}
           for path, r in replaced.items()}

    @app.post("/reset", response_model=ResetResponse, **doc.get("/reset", {}))
    async def reset(body: schemas.OpenEnvReset | None = None) -> ResetResponse:
        body = body or schemas.OpenEnvReset.model_validate({})
        if body.task_id is not None:
            with at("body", "task_id"):
                core.resolve_task(body.task_id)
        env = make_env()
        try:
            obs = await env.reset_async(**body.model_dump(exclude_unset=True))
            return ResetResponse(**serialize_observation(obs))
        finally:
            env.close()

    @app.post("/step", response_model=StepResponse, **doc.get("/step", {}))
    async def step(body: schemas.OpenEnvStep) -> StepResponse:
        if body.action.policy is not None:
            with at("body", "action", "policy"):
                core.pools[core.task_ids[0]].policy_index(body.action.policy)
        env = make_env()
        try:
            obs = await env.step_async(body.action, timeout_s=body.timeout_s)
            return StepResponse(**serialize_observation(obs))
        finally:
            env.close()
