"""The FastAPI app: OpenEnv's protocol (`create_app`) plus this server's routes, and `serve`.

`build_app(core)` serves, on one port:
  * OpenEnv's routes over `openenv_env.InferenceGymEnvironment`: WS /ws (one episode per
    connection), the stateless POST /reset, POST /step (a step without a reset starts the
    default episode: `openenv_env`'s docstring and the route's OpenAPI description), GET /state,
    and GET /health, /metadata, /schema, POST /mcp;
  * `routes`: the session API, /tasks, /info, /grader, /baseline and the live page /view;
    OpenEnv's POST /reset and /step over typed bodies (`routes.add_openenv_routes`);
  * `task_api`: OpenEnv's task API (/inferencegym/splits, /tasks, /num_tasks, /task, /task_range);
  * `contract`: one error shape for every 4xx, every status declared, and the OpenAPI document
    naming the served tasks and policies, with links from POST /sessions to its session's routes.

A server that serves fleet or reservation tasks (`day_tasks`, `day_sessions`) takes their actions
and `day_split` in the same routes and messages (`schemas.body_models`: the models with the day
tasks' fields, under the same names); one that serves none keeps the serving models unchanged.

Bodies over MAX_BODY_BYTES are refused with 413 before they are read whole. `serve` compiles
every program a session or /grader runs first (`ServerCore.warm_up`) and only then opens the
port, so a client that reaches /health finds them compiled; /baseline's compile next, in the
background (a /baseline waits for its task's).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from openenv.core.env_server.http_server import create_app

from inferencegym_jax.server import contract, task_api
from inferencegym_jax.server.core import ServerCore
from inferencegym_jax.server.openenv_env import DEFAULT_EPISODE, DEFAULT_SEED, ENV_NAME, InferenceGymEnvironment
from inferencegym_jax.server.routes import add_openenv_routes, build_router
from inferencegym_jax.server.schemas import ServingObservation, body_models

# Largest request body [bytes]: a grader log of core.MAX_LOG_INTERVALS records is ~1.5 MB.
MAX_BODY_BYTES = 4 * 2**20

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: 413 for an HTTP body over `limit` bytes (declared or streamed)."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        received = 0
        refused = False

        async def limited_receive() -> dict[str, Any]:
            # Past the limit the app is told the client left (it stops reading) and the client
            # gets the 413; whatever the app still sends is dropped.
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(contract.error_body(["body"], f"request body over {self.limit} bytes",
                                              "body_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


STATELESS_STEP = f"""
Take one control interval (1 s of serving) in a fresh environment, OpenEnv's stateless step: no
prior `POST /reset` is needed nor used (each stateless request has its own environment). The step
starts episode {DEFAULT_EPISODE} of the key stream of seed {DEFAULT_SEED} on the server's first
task, as `POST /reset {{"seed": {DEFAULT_SEED}}}` would, and takes the action in it; the response
says so in its `metadata`: `{{"episode_started": true, "task_id": ..., "seed": {DEFAULT_SEED},
"episode": {DEFAULT_EPISODE}}}`. To play an episode step by step use the WebSocket `/ws` (one
episode per connection) or the session routes (`POST /sessions`, `POST /sessions/{{id}}/step`).

The action is knob values in physical units (omitted knobs take the task default) or
`{{"policy": name}}`, a server policy (GET /tasks); bad values answer 422 naming the field.
The response: `observation` (the fields of GET /schema, in their units, with the reward's
terms, the interval's metrics and the knobs applied), `reward` in [-1, 1], `done`, `metadata`.
"""


def describe_stateless_step(app: FastAPI) -> None:
    """Put STATELESS_STEP as the OpenAPI description of OpenEnv's POST /step (which OpenEnv's
    production mode does not register: then there is nothing to describe)."""
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path == "/step" and "POST" in (route.methods or ()):
            route.description = STATELESS_STEP
            route.summary = "Take one interval; a step without a reset starts the default episode"


def build_app(core: ServerCore) -> FastAPI:
    """The app over a (warmed-up) core (module docstring)."""
    def make_env() -> InferenceGymEnvironment:
        return InferenceGymEnvironment(core)

    models = body_models(bool(core.day.task_ids))  # with the day tasks' fields when it serves them
    app = create_app(
        make_env,
        models.action,
        ServingObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=core.store.max_sessions,
        state_cls=models.state,
    )
    add_openenv_routes(app, core, make_env)
    describe_stateless_step(app)
    task_api.add_task_routes(app, core, ENV_NAME)
    build_router(core, app.router)
    contract.install_error_handlers(app)
    contract.install_openapi(app, core)

    async def start_batcher() -> None:
        core.batcher.start()

    async def stop_batcher() -> None:
        await core.batcher.stop()
        core.day.close()

    app.router.on_startup.append(start_batcher)
    app.router.on_shutdown.append(stop_batcher)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    return app


def serve(task_ids: Sequence[str], host: str, port: int, max_sessions: int = 64,
          batching: bool = True, checkpoints: Mapping[str, str] | None = None) -> None:
    """Build the core, compile everything, then serve on host:port until interrupted."""
    import uvicorn

    t0 = time.perf_counter()
    core = ServerCore(task_ids, max_sessions=max_sessions, batching=batching, checkpoints=checkpoints)
    core.warm_up()
    print(f"inferencegym serve: {len(core.served_ids)} task(s) ready in {time.perf_counter() - t0:.0f} s "
          f"({core.warm_up_report}); "
          f"http://{host}:{port}  (OpenEnv: /ws /reset /step /state /health; sessions: /sessions; "
          f"/tasks /info /grader /baseline; live view: /view)", file=sys.stderr, flush=True)
    uvicorn.run(build_app(core), host=host, port=port, log_level="warning", ws_max_size=MAX_BODY_BYTES)
