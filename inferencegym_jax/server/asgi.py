"""A module-level ASGI app for ASGI servers and openenv.yaml: `uvicorn inferencegym_jax.server.asgi:app`.

Importing it builds and compiles the server (as `inferencegym serve` does) from environment
variables: INFERENCEGYM_SERVE_TASKS (comma-separated task numbers or ids; default every task)
and INFERENCEGYM_SERVE_MAX_SESSIONS (default 64). Bind the ASGI server to 127.0.0.1 unless the
machine's network is trusted.
"""

from __future__ import annotations

import os

from inferencegym_jax.server.app import build_app
from inferencegym_jax.server.core import ServerCore
from inferencegym_jax.tasks import registered_envs


def _tasks() -> list[str]:
    text = os.environ.get("INFERENCEGYM_SERVE_TASKS", "").strip()
    return [t.strip() for t in text.split(",") if t.strip()] or registered_envs()


def _max_sessions() -> int:
    text = os.environ.get("INFERENCEGYM_SERVE_MAX_SESSIONS", "64")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"INFERENCEGYM_SERVE_MAX_SESSIONS={text!r}: must be a positive integer")
    return int(text)


core = ServerCore(_tasks(), max_sessions=_max_sessions())
core.warm_up()
app = build_app(core)
