"""`inferencegym serve`: the OpenEnv server over the jitted env (extra `[server]`).

    inferencegym serve                                  # every task, 127.0.0.1:8000
    inferencegym serve --task 1 --port 8001 --max-sessions 16
    inferencegym serve --task 1 --checkpoint runs/task1  # sessions may also step with policy "ppo"
    inferencegym serve --task InferenceGym-Fleet1-v1 --task InferenceGym-Reserve1-v1   # the day tasks
    inferencegym serve --no-compile-cache               # compile everything afresh, keep nothing

The server compiles every program before it opens its port (see inferencegym_jax.server.app).
It keeps them in JAX's persistent compilation cache, so a restart loads them instead of
compiling (BENCHMARKS.md, "Server start-up and memory": on 2 cores, every task from an empty cache
in minutes, from a warm one in seconds). The cache folder is, first found: --compile-cache DIR;
$JAX_COMPILATION_CACHE_DIR (JAX's own variable, as JAX reads it); $INFERENCEGYM_CACHE_DIR;
~/.cache/inferencegym/jax. Every program is cached however fast it compiled, unless
$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise. Entries are keyed by the program,
jax/jaxlib version and XLA flags, so a stale entry is never used; delete the folder to reclaim
its space. --no-compile-cache turns the cache off (even where $JAX_COMPILATION_CACHE_DIR is
set). The extra's packages (openenv, which brings FastAPI and uvicorn) are imported only by this
command.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from inferencegym_jax.cli.common import add_command, positive_int, task_id

DEFAULT_HOST = "127.0.0.1"  # loopback unless the user asks for more
DEFAULT_PORT = 8000
MAX_PORT = 65535
CACHE_DIR_VARIABLE = "INFERENCEGYM_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/inferencegym/jax"


def compile_cache_dir(option: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The folder of JAX's persistent compilation cache `serve` uses (module docstring's order;
    `environ` defaults to os.environ)."""
    environ = os.environ if environ is None else environ
    chosen = (option or environ.get("JAX_COMPILATION_CACHE_DIR") or environ.get(CACHE_DIR_VARIABLE)
              or DEFAULT_CACHE_DIR)
    return Path(chosen).expanduser()


def use_compile_cache(directory: Path | None) -> None:
    """Point JAX's persistent compilation cache at `directory` (made if missing; ValueError
    naming it if it cannot be), caching every program unless
    $JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS is set; None turns the cache off. Call it
    before anything compiles."""
    import jax

    if directory is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"compilation cache folder {str(directory)!r}: {err.strerror or err}") from None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def port_int(value: str) -> int:
    """argparse type: a TCP port in [1, 65535]."""
    if not value.isdigit() or not 1 <= int(value) <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value!r} must be an integer in [1, {MAX_PORT}]")
    return int(value)


def served_task(value: str) -> str:
    """argparse type: a serving task (`common.task_id`: a number or a registered id) or a fleet or
    reservation task id ("InferenceGym-Fleet1-v1", "InferenceGym-Reserve1-v1"; their sessions
    need gymnasium, which the server extra brings)."""
    from inferencegym_jax.server.day_tasks import all_day_ids, day_task_id

    day = day_task_id(value)
    if day is not None:
        return day
    try:
        return task_id(value)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err}; or a fleet or reservation task, one of {all_day_ids()}") from None


def cmd_serve(args: argparse.Namespace) -> None:
    """Serve until interrupted; ValueError (one line, exit 2) for a missing extra or bad input."""
    if importlib.util.find_spec("openenv") is None:
        raise ValueError("serve needs the server extra: pip install 'inferencegym_jax[server]'")
    use_compile_cache(None if args.no_compile_cache else compile_cache_dir(args.compile_cache))
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
    p.add_argument("--task", type=served_task, action="append", default=None,
                   help="a task to serve (number or id, or a fleet or reservation id such as InferenceGym-Fleet1-v1; "
                        "repeat for several; default: every serving task)")
    p.add_argument("--max-sessions", type=positive_int, default=64,
                   help="sessions at once over all tasks; at the limit the least recently used HTTP session is "
                        "evicted (its id then answers 410) (default 64)")
    p.add_argument("--checkpoint", default=None,
                   help="a trained run directory: its task's sessions may step with policy 'ppo'")
    p.add_argument("--no-batching", action="store_true",
                   help="run each request's step alone (for the load test's comparison)")
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--compile-cache", default=None, metavar="DIR",
                       help="folder of JAX's persistent compilation cache (default: $JAX_COMPILATION_CACHE_DIR, "
                            f"else ${CACHE_DIR_VARIABLE}, else {DEFAULT_CACHE_DIR})")
    cache.add_argument("--no-compile-cache", action="store_true",
                       help="compile every program afresh and keep none (start-up takes minutes, not seconds)")
    p.set_defaults(func=cmd_serve)
