"""The OpenEnv server over the jitted env (`inferencegym serve`; extra `[server]`).

    pool         every session of a task in one device pool, stepped by one jitted, vmapped program
    sessions     the bounded session store (LRU eviction, 410 for evicted ids) and the batcher
    core         sessions, steps, grading and baselines, without the web framework
    day_tasks    the fleet and reservation tasks on the server: their JSON actions and named observations
    day_sessions their sessions (one gymnasium adapter env each), bounded store, reset and step
    schemas      the typed messages (OpenEnv Action / Observation / State, HTTP bodies)
    openenv_env  OpenEnv's Environment over the core (WS /ws, the stateless /reset, /step)
    mcp_tools    the MCP tools an LLM agent plays with (POST /mcp, WS /mcp; OpenEnv's MCP support)
    routes       the session API, /tasks, /info, /stats, /grader, /baseline, /view
    app          the FastAPI app (OpenEnv's create_app plus routes) and `serve`
    asgi         a module-level app for ASGI servers (openenv.yaml)

`pool`, `sessions`, `day_tasks`, `day_sessions` and `core` need only JAX (day sessions: gymnasium
too); the others import FastAPI and openenv, so nothing here is imported by the package itself.
"""
