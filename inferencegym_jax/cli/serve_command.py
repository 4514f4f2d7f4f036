"""`inferencegym serve`: the OpenEnv server over the jitted env (extra `[server]`).

    inferencegym serve                                  # every task, 127.0.0.1:8000
    inferencegym serve --task 1 --port 8001 --max-sessions 16
    inferencegym serve --task 1 --checkpoint runs/task1  # sessions may also step with policy "ppo"

The server compiles every program before it opens its port (about 10-20 s per task on a 2-core
machine, less from a warm JAX compilation cache); see inferencegym_jax.server.app. The extra's
packages (openenv, which brings FastAPI and uvicorn) are imported only by this command.
"""

from __future__ import annotations

import argparse
import importlib.util

from inferencegym_jax.cli.common import add_command, positive_int, task_id

DEFAULT_HOST = "127.0.0.1"  # loopback unless the user asks for more
DEFAULT_PORT = 8000
MAX_PORT = 65535


def port_int(value: str) -> int:
    """argparse type: a TCP port in [1, 65535]."""
    if not value.isdigit() or not 1 <= int(value) <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value!r} must be an integer in [1, {MAX_PORT}]")
    return int(value)


def cmd_serve(args: argparse.Namespace) -> None:
    """Serve until interrupted; ValueError (one line, exit 2) for a missing extra or bad input."""
    if importlib.util.find_spec("openenv") is None:
        raise ValueError("serve needs the server extra: pip install 'inferencegym_jax[server]'")
    from inferencegym_jax.cli.common import registered_tasks
    from inferencegym_jax.server.app import serve

    tasks = args.task or registered_tasks()
    checkpoints = {}
    if args.checkpoint is not None:
        from inferencegym_jax.training_setup import read_config

        try:
            checkpoints[read_config(args.checkpoint).task] = args.checkpoint
        except ValueError as err:
            raise ValueError(f"--checkpoint {args.checkpoint!r}: {err}") from None
    serve(tasks, host=args.host, port=args.port, max_sessions=args.max_sessions,
          batching=not args.no_batching, checkpoints=checkpoints)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `serve` subcommand."""
    p = add_command(sub, "serve", help="serve the env over OpenEnv's protocol and an HTTP session API")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=port_int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--task", type=task_id, action="append", default=None,
                   help="a task to serve (number or id; repeat for several; default: every task)")
    p.add_argument("--max-sessions", type=positive_int, default=64,
                   help="sessions at once over all tasks; at the limit the least recently used HTTP session is "
                        "evicted (its id then answers 410) (default 64)")
    p.add_argument("--checkpoint", default=None,
                   help="a trained run directory: its task's sessions may step with policy 'ppo'")
    p.add_argument("--no-batching", action="store_true",
                   help="run each request's step alone (for the load test's comparison)")
    p.set_defaults(func=cmd_serve)
