"""Schemathesis hooks for tests/test_schemathesis.py (`SCHEMATHESIS_HOOKS=schemathesis_hooks`).

The server under test is the one the whole test run shares (tests/served.py), whose other
tests hold sessions of their own; every session one more client creates past `--max-sessions`
evicts the least recently used one. So the sessions Schemathesis creates (POST /sessions, 201)
are closed once more than KEEP of them are open, oldest first: Schemathesis never holds more
than KEEP slots, and the stateful phase, which uses a session right after creating it, still
finds it open (a closed one answers 404, which the schema declares).
"""

from __future__ import annotations

import collections
from typing import Any

import httpx
import schemathesis

KEEP = 8
BASELINE_EPISODES = 8
_open: collections.deque[str] = collections.deque()


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """Record a session POST /sessions created; close the oldest past KEEP."""
    if case.method.upper() != "POST" or case.path != "/sessions" or response.status_code != 201:
        return
    _open.append(response.json()["session_id"])
    base = str(response.request.url).rsplit("/sessions", 1)[0]
    while len(_open) > KEEP:
        httpx.delete(f"{base}/sessions/{_open.popleft()}", timeout=30)


@schemathesis.hook
def map_query(context: Any, query: Any) -> Any:
    """GET /baseline evaluates every policy on `episodes` episodes (256: ~3 s on 2 cores): a
    valid count above BASELINE_EPISODES becomes BASELINE_EPISODES (still valid), so that the
    fuzzing and stateful phases stay within the test's time; invalid counts go unchanged."""
    if context.operation is not None and context.operation.path == "/baseline" and isinstance(query, dict):
        episodes = query.get("episodes")
        if isinstance(episodes, int) and not isinstance(episodes, bool) and BASELINE_EPISODES < episodes <= 256:
            query["episodes"] = BASELINE_EPISODES
    return query
