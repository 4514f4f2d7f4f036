"""The OpenAPI document as the server's contract (docs/RELIABILITY.md, "Schemathesis").

  * One error shape: every 4xx body is `schemas.ErrorResponse`, FastAPI's
    `{"detail": [{"loc", "msg", "type"}, ...]}`. `validation_error` answers pydantic's errors
    (loc as the client sent the field); `http_error` answers every HTTPException (the core's,
    OpenEnv's, Starlette's 404 / 405) in that shape, a string detail becoming one error whose
    loc is the path parameter it concerns; a body that is not UTF-8 (FastAPI's 400) is a 422
    `json_invalid` at ["body"], as malformed JSON is. A 405 lists in `Allow` every method of
    every route of that path (Starlette's names only the first route's).
  * Every status a route answers is declared (`declare_statuses`): 413 on every POST (the body
    limit), 422 on every route that takes a body or parameters, and STATUSES' others.
  * `install_openapi`: the document names what this server accepts: the served tasks' ids and
    numbers for every task_id, the policies for every policy, the task API's index range; the
    error schema; examples of each body (`examples`); and OpenAPI links from POST /sessions to
    the routes of the session it created (so a stateful client, or Schemathesis's stateful
    phase, follows real sessions).
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from inferencegym_jax import tasks
from inferencegym_jax.server.core import ServerCore
from inferencegym_jax.server.schemas import TASKS_PER_SPLIT, ErrorResponse

ERROR_DOCS = {
    404: "No such session (unknown, closed, or evicted long ago), or no such route",
    409: "The episode is over (reset the session first)",
    410: "The session was evicted to make room for a newer one",
    413: "The request body is over 4 MiB",
    422: "A malformed body (not JSON, not UTF-8) or a bad value; loc names the field",
    503: "Every session slot is held by a WebSocket connection",
}
# Statuses a route answers besides 2xx, 413 (every POST) and 422 (every route with input).
STATUSES: dict[tuple[str, str], tuple[int, ...]] = {
    ("POST", "/reset"): (503,),
    ("POST", "/step"): (503,),
    ("POST", "/sessions"): (503,),
    ("GET", "/sessions/{session_id}"): (404, 410),
    ("DELETE", "/sessions/{session_id}"): (404, 410),
    ("POST", "/sessions/{session_id}/reset"): (404, 410),
    ("POST", "/sessions/{session_id}/step"): (404, 409, 410),
    ("GET", "/sessions/{session_id}/log"): (404, 410),
}
# A string detail's error type by status (an HTTPException raised with a list keeps its own).
ERROR_TYPES = {404: "not_found", 405: "method_not_allowed", 409: "episode_done", 410: "session_gone",
               413: "body_too_large", 422: "value_error", 503: "no_free_slot"}
SESSION_ROUTES = {  # link name -> (method, path) of the routes a created session answers on
    "GetSession": ("get", "/sessions/{session_id}"),
    "ResetSession": ("post", "/sessions/{session_id}/reset"),
    "StepSession": ("post", "/sessions/{session_id}/step"),
    "SessionLog": ("get", "/sessions/{session_id}/log"),
    "CloseSession": ("delete", "/sessions/{session_id}"),
}


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float as its text ("nan", "inf"): JSON has no NaN, and a
    422 that quotes the NaN a client sent must still be valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def error_body(loc: list[str | int], msg: str, kind: str) -> dict[str, Any]:
    """An ErrorResponse body with one error."""
    return {"detail": [{"loc": loc, "msg": msg, "type": kind}]}


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 with FastAPI's usual body (each error's loc names the field), JSON-safe."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else [{"loc": ["body"], "msg": str(exc),
                                                                             "type": "value_error"}]
    return JSONResponse(status_code=422, content={"detail": json_safe(jsonable_encoder(errors))})


def allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method some route of `app` answers on the request's path (the Allow of a 405)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches({**request.scope, "type": "http"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def http_error(request: Request, exc: Exception) -> Response:
    """Any HTTPException in the ErrorResponse shape (module docstring)."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):  # FastAPI: body not decodable
        return JSONResponse(error_body(["body"], f"the body is not UTF-8 JSON: {exc.__cause__}", "json_invalid"), 422)
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request.app, request)
    if isinstance(exc.detail, list):
        content = {"detail": json_safe(jsonable_encoder(exc.detail))}
    else:
        param = "session_id" if "session_id" in request.path_params else None
        loc: list[str | int] = ["path", param] if param else (["path"] if exc.status_code in (404, 405) else ["body"])
        kind = ERROR_TYPES.get(exc.status_code, "http_error")
        if param and exc.status_code == 404:
            kind = "session_not_found"
        content = error_body(loc, str(exc.detail), kind)
    return JSONResponse(content, exc.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """`validation_error` and `http_error` as the app's handlers."""
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


def _error_response(code: int) -> dict[str, Any]:
    return {"description": ERROR_DOCS[code],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}


def declare_statuses(app: FastAPI) -> None:
    """Declare on every API route the error statuses it can answer (module docstring)."""
    for route in app.router.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            codes = set(STATUSES.get((method, route.path), ()))
            if method == "POST":
                codes.add(413)
            if route.body_field is not None or route.dependant.query_params:
                codes.add(422)  # (the path parameters are strings: any value is one)
            for code in sorted(codes):
                route.responses[code] = _error_response(code)


def task_id_schemas(core: ServerCore) -> tuple[dict[str, Any], dict[str, Any]]:
    """JSON Schemas of the task_ids this server resolves (tasks.resolve_id on a served task): in
    a JSON body (ids, numbers, numbers as digit strings) and in a query string (strings)."""
    numbers = sorted(n for n in tasks.task_versions() if tasks.newest_version(n) in core.task_ids)
    day_ids = [spelling for t in core.day.task_ids for spelling in (t, t.replace("-", "/", 1))]  # day_tasks.day_task_id
    strings: list[dict[str, Any]] = [{"type": "string", "enum": list(core.task_ids) + day_ids}]
    if numbers:
        strings.append({"type": "string", "pattern": "^0*(" + "|".join(map(str, numbers)) + ")$"})
    body = {"anyOf": [*strings, {"type": "integer", "enum": numbers}] if numbers else strings}
    return body, {"anyOf": strings}


def _patch_property(components: dict[str, Any], model: str, field: str, schema: dict[str, Any]) -> None:
    """Replace the schema of `model.field` (each of its -Input / -Output variants; keeping null
    where the field is nullable, and its description)."""
    for name, component in components.items():
        if name.split("-")[0] != model or field not in component.get("properties", {}):
            continue
        old = component["properties"][field]
        nullable = any(branch.get("type") == "null" for branch in old.get("anyOf", []))
        new = {"anyOf": [*schema["anyOf"], {"type": "null"}]} if nullable else dict(schema)
        component["properties"][field] = {**new, **{k: old[k] for k in ("description", "default", "title") if k in old}}


def day_examples(core: ServerCore) -> dict[str, list[dict[str, Any]]]:
    """Request bodies of a server of day tasks only (the document's examples)."""
    task = core.day.tasks[core.day.task_ids[0]]
    action = {"replicas": 8, "routing": 0} if task.family == "fleet" else {"reserved": [4] * 24}
    return {
        "CreateSession": [{"task_id": task.id, "seed": 0}, {"task_id": task.id, "seed": 0, "day_split": "heldout"}],
        "ResetSession": [{"seed": 0, "episode": 3}, {}],
        "StepSession": [{"action": action}],
        "OpenEnvReset": [{"seed": 0}, {"seed": 42, "episode": 3, "task_id": task.id}, {}],
        "OpenEnvStep": [{"action": action}],
    }


def examples(core: ServerCore) -> dict[str, list[dict[str, Any]]]:
    """Request bodies that this server accepts, by schema (the document's examples)."""
    if not core.task_ids:
        return day_examples(core)
    task, policy = core.task_ids[0], core.pools[core.task_ids[0]].policy_names[0]
    knobs = {"batch_size": 64, "kv_budget": 0.8}
    return {
        "CreateSession": [{"task_id": task, "seed": 0}, {"split": "test", "index": 3}]
        + ([{"task_id": 1, "seed": 7, "episode": 2, "episode_id": "run-1"}] if tasks.newest_version(1) == task else []),
        "ResetSession": [{"seed": 0, "episode": 3}, {}],
        "StepSession": [{"action": knobs}, {"policy": policy}],
        "GraderRequest": [{"task_id": task, "intervals": []}],
        "OpenEnvReset": [{"seed": 0}, {"seed": 42, "episode": 3, "task_id": task}, {"split": "test", "index": 3}, {}],
        "OpenEnvStep": [{"action": knobs}, {"action": {"policy": policy}}],
    }


def _add_links(doc: dict[str, Any]) -> None:
    """OpenAPI links from POST /sessions's 201 to the routes of the session it created."""
    paths = doc["paths"]
    links = {name: {"operationId": paths[path][method]["operationId"],
                    "parameters": {"session_id": "$response.body#/session_id"},
                    "description": f"{method.upper()} {path} of the session created"}
             for name, (method, path) in SESSION_ROUTES.items() if method in paths.get(path, {})}
    paths["/sessions"]["post"]["responses"]["201"]["links"] = links


def install_openapi(app: FastAPI, core: ServerCore) -> None:
    """Make `app.openapi()` the contract of the module docstring (built once, then cached)."""
    declare_statuses(app)
    build = app.openapi
    body_task, query_task = task_id_schemas(core)
    policies = sorted({name for pool in core.pools.values() for name in pool.policy_names})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = build()
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        error = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(error.pop("$defs", {}))
        components["ErrorResponse"] = error
        for model in ("CreateSession", "GraderRequest", "OpenEnvReset"):
            _patch_property(components, model, "task_id", body_task)
        for model in ("StepSession", "ServingAction"):
            _patch_property(components, model, "policy", {"anyOf": [{"type": "string", "enum": policies}]})
        for model in ("TaskBody", "OpenEnvReset", "CreateSession"):
            _patch_property(components, model, "index", {"anyOf": [
                {"type": "integer", "minimum": 0, "maximum": max(TASKS_PER_SPLIT * len(core.task_ids) - 1, 0)}]})
        for model, bodies in examples(core).items():
            components[model]["examples"] = bodies
        for parameter in doc["paths"].get("/baseline", {}).get("get", {}).get("parameters", []):
            if parameter["name"] == "task_id":
                parameter["schema"] = {**query_task, "description": "a served task: id or number (GET /tasks)"}
        for operation in (op for path in doc["paths"].values() for op in path.values()):
            if "422" in operation.get("responses", {}):  # FastAPI's own 422s (HTTPValidationError) too
                operation["responses"]["422"] = _error_response(422)
        _add_links(doc)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
