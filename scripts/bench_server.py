"""Start-up time and memory of `inferencegym serve` (BENCHMARKS.md, "Server start-up and memory").

    python scripts/bench_server.py                   # one task, then every task: ~10 min on 2 cores
    python scripts/bench_server.py --tasks 1 --tasks 3

For each set of tasks: a first start from an empty JAX compilation cache (a fresh folder, given
to `serve --compile-cache`) and a restart from the cache that start wrote, each timed from the
process's launch to the first 200 from /health (the port open: sessions and /grader compiled),
and then until /baseline's background compilation ends (a one-episode /baseline of every task
answered; the first start is stopped only then, so that the cache holds every program). Then,
on the restarted server: the RSS at the open port and once /baseline is warm, and the peak RSS
(VmHWM) after a /baseline of MAX_BASELINE_EPISODES episodes and two /grader calls (a full
MAX_LOG_INTERVALS log, and one with values past float32) on every task. RSS per task: the
difference between every task and one task, over the tasks added. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from inferencegym_jax import registered_envs
from inferencegym_jax.graders import METRIC_FIELDS
from inferencegym_jax.server.core import MAX_BASELINE_EPISODES, MAX_LOG_INTERVALS

CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "INFERENCEGYM_CACHE_DIR")
COLUMNS = ("tasks", "first start [s]", "first: baselines warm [s]", "restart [s]", "baselines warm [s]",
           "RSS at open [MB]",
           "RSS warm [MB]", "peak after /baseline, /grader [MB]")


def _memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process [MB]."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def _start(tasks: list[str], cache: Path, max_sessions: int) -> tuple[subprocess.Popen, str, float]:
    """`serve` on a free port with `cache`: (process, base URL, seconds to the first /health 200)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    args = [sys.executable, "-m", "inferencegym_jax.cli", "serve", "--port", str(port), "--max-sessions",
            str(max_sessions), "--compile-cache", str(cache)] + [a for t in tasks for a in ("--task", t)]
    t0 = time.perf_counter()
    log = cache.with_name(cache.name + ".err")
    with open(log, "w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}"
    while proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url, time.perf_counter() - t0
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"serve exited with {proc.returncode}: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=300)


def _log(action: dict[str, float], huge: bool) -> list[dict]:
    """A grader log: MAX_LOG_INTERVALS plausible intervals, or one past float32."""
    value = 1e39 if huge else 100.0
    record = {"metrics": {f: (0.0 if f == "oom" else value) for f in METRIC_FIELDS}, "action": action,
              "offered_tokens": 2 * value}
    return [record] * (1 if huge else MAX_LOG_INTERVALS)


def _baselines_warm(url: str) -> float:
    """Seconds until a one-episode /baseline of every task answers (its programs compiled)."""
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=3600) as http:
        for task in http.get("/tasks").json()["tasks"]:
            http.get("/baseline", params={"task_id": task["id"], "episodes": 1}).raise_for_status()
    return time.perf_counter() - t0


def _exercise(url: str, pid: int) -> tuple[float, dict[str, float], dict[str, float]]:
    """(seconds until every task's /baseline programs are warm, memory then, memory after a
    full /baseline and /grader on every task)."""
    warm_s, warm = _baselines_warm(url), _memory(pid)
    with httpx.Client(base_url=url, timeout=3600) as http:
        for task in http.get("/tasks").json()["tasks"]:
            http.get("/baseline", params={"task_id": task["id"], "episodes": MAX_BASELINE_EPISODES}).raise_for_status()
            for huge in (False, True):
                body = {"task_id": task["id"], "intervals": _log(task["default_action"], huge)}
                http.post("/grader", json=body).raise_for_status()
    return warm_s, warm, _memory(pid)


def measure(tasks: list[str], max_sessions: int) -> dict[str, float]:
    """One row of the table (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="bench-server-") as folder:
        cache = Path(folder) / "cache"
        proc, url, first = _start(tasks, cache, max_sessions)
        try:
            first_warm_s = _baselines_warm(url)  # so that the cache holds every program
        finally:
            _stop(proc)
        proc, url, restart = _start(tasks, cache, max_sessions)
        try:
            at_open = _memory(proc.pid)["VmRSS"]
            warm_s, warm, after = _exercise(url, proc.pid)
        finally:
            _stop(proc)
    return {"tasks": len(tasks), "first start [s]": first, "first: baselines warm [s]": first_warm_s,
            "restart [s]": restart, "baselines warm [s]": warm_s,
            "RSS at open [MB]": at_open, "RSS warm [MB]": warm["VmRSS"],
            "peak after /baseline, /grader [MB]": after["VmHWM"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", action="append", default=None,
                        help="a task to serve in the larger row (repeat; default: every task)")
    parser.add_argument("--max-sessions", type=int, default=64, help="serve's --max-sessions (default 64)")
    args = parser.parse_args()
    every = args.tasks or registered_envs()
    rows = [measure(["InferenceGym-Task1-v1"], args.max_sessions)]
    if len(every) > 1:
        rows.append(measure(every, args.max_sessions))
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, --max-sessions {args.max_sessions}")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(f"{row[c]:.1f}" if c == "baselines warm [s]" else f"{row[c]:.0f}"
                                for c in COLUMNS) + " |")
    if len(rows) == 2 and rows[1]["tasks"] > 1:
        per_task = (rows[1]["RSS warm [MB]"] - rows[0]["RSS warm [MB]"]) / (rows[1]["tasks"] - 1)
        peak = (rows[1]["peak after /baseline, /grader [MB]"] - rows[0]["peak after /baseline, /grader [MB]"])
        print(f"\nRSS per served task (each task past the first): {per_task:.0f} MB warm, "
              f"{peak / (rows[1]['tasks'] - 1):.0f} MB at the peak")


if __name__ == "__main__":
    main()
