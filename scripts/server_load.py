"""Load test of `inferencegym serve` on 127.0.0.1: concurrent clients over OpenEnv's /ws and
over the HTTP session API, batched against unbatched (`serve --no-batching`).

    python scripts/server_load.py                      # 50 clients x 200 steps, both transports, both modes
    python scripts/server_load.py --clients 8 --steps 50 --modes batched --transports ws

For each mode it starts its own server (`inferencegym serve --task InferenceGym-Task1-v0 --max-sessions 64` on a
free loopback port; nothing else is contacted), waits for /health, and then runs each transport:
every client opens a session with its own seed, steps it `--steps` times with its own action
sequence, and records each step's latency. It reports aggregate env steps per second (all
clients' steps over the wall time from the first reset to the last step), p50 / p99 step
latency, errors (5xx and any other refusal), lost or crossed sessions (a client whose step
counts do not run 1, 2, ... or whose rewards differ from a replay of the same seed and actions
on a fresh session, checked for `--replays` clients), the server's peak RSS, and how many
program runs the batcher made. Prints a markdown table; --json writes the rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import websockets

TASK = "InferenceGym-Task1-v0"
BATCH_SIZES = (16, 32, 64, 128, 256)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, batching: bool, max_sessions: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "inferencegym_jax.cli", "serve", "--task", TASK, "--port", str(port),
           "--max-sessions", str(max_sessions)] + ([] if batching else ["--no-batching"])
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_ready(base: str, proc: subprocess.Popen, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read()}")
        try:
            if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become ready")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def action(client: int, t: int) -> dict[str, Any]:
    """Client `client`'s action at interval t: its own cycle over batch size and KV budget."""
    return {"batch_size": BATCH_SIZES[(client + t // 10) % len(BATCH_SIZES)], "kv_budget": 0.5 + 0.1 * (client % 5)}


class Run:
    """One client's record."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.rewards: list[float] = []
        self.counts: list[int] = []
        self.errors: list[str] = []
        self.server_errors = 0


async def ws_client(base: str, client: int, steps: int, run: Run) -> None:
    url = base.replace("http://", "ws://") + "/ws"
    async with websockets.connect(url, max_size=2**22) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"seed": client, "task_id": TASK}}))
        reply = json.loads(await ws.recv())
        if reply.get("type") == "error":
            run.errors.append(str(reply["data"]))
            return
        for t in range(steps):
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "step", "data": action(client, t)}))
            reply = json.loads(await ws.recv())
            run.latencies.append(time.perf_counter() - t0)
            if reply.get("type") == "error":
                run.errors.append(str(reply["data"])[:200])
                continue
            data = reply["data"]
            run.rewards.append(data["reward"])
            run.counts.append(data["observation"]["step_count"])
        await ws.send(json.dumps({"type": "close", "data": {}}))


class KeepAlive:
    """A minimal HTTP/1.1 keep-alive client on one connection (JSON in, status and JSON out).

    The load generator shares the server's 2 cores, so it must be light: httpx's AsyncClient
    measured ~4 ms of client CPU per request here (50 clients: client-bound at ~230 steps/s),
    this ~0.1 ms.
    """

    def __init__(self, base: str):
        host, port = base.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)

    async def __aenter__(self) -> KeepAlive:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.writer.close()

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n")
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length) if length else b""
        return status, (json.loads(payload) if payload else None)


async def http_client(base: str, client: int, steps: int, run: Run) -> None:
    async with KeepAlive(base) as http:
        status, created = await http.request("POST", "/sessions", {"task_id": TASK, "seed": client})
        if status != 201:
            run.errors.append(f"create {status}")
            run.server_errors += status >= 500
            return
        sid = created["session_id"]
        for t in range(steps):
            t0 = time.perf_counter()
            status, body = await http.request("POST", f"/sessions/{sid}/step", {"action": action(client, t)})
            run.latencies.append(time.perf_counter() - t0)
            if status != 200:
                run.errors.append(f"step {status}")
                run.server_errors += status >= 500
                continue
            run.rewards.append(body["reward"])
            run.counts.append(body["step_count"])
        await http.request("DELETE", f"/sessions/{sid}")


async def replay(base: str, client: int, steps: int) -> list[float]:
    """The rewards of client `client`'s seed and actions on a fresh session, stepped alone."""
    run = Run()
    await http_client(base, client, steps, run)
    return run.rewards


async def guarded(client: Any, run: Run) -> None:
    """A client whose connection fails counts an error (and its steps lost) instead of ending the test."""
    try:
        await client
    except (websockets.WebSocketException, OSError, ValueError, asyncio.IncompleteReadError) as err:
        run.errors.append(f"{type(err).__name__}: {err}")


async def load(base: str, transport: str, clients: int, steps: int) -> tuple[list[Run], float]:
    runs = [Run() for _ in range(clients)]
    t0 = time.perf_counter()
    if transport == "ws":
        clients_ = [ws_client(base, i, steps, runs[i]) for i in range(clients)]
    else:
        clients_ = [http_client(base, i, steps, runs[i]) for i in range(clients)]
    await asyncio.gather(*(guarded(c, r) for c, r in zip(clients_, runs)))
    wall = time.perf_counter() - t0
    return runs, wall


def measure(mode: str, transport: str, base: str, pid: int, clients: int, steps: int, replays: int) -> dict[str, Any]:
    before = httpx.get(f"{base}/stats").json()
    runs, wall = asyncio.run(load(base, transport, clients, steps))
    after = httpx.get(f"{base}/stats").json()
    latencies = np.concatenate([r.latencies for r in runs]) * 1e3
    lost = sum(r.counts != list(range(1, steps + 1)) for r in runs)
    crossed = 0
    for client in range(min(replays, clients)):
        alone = asyncio.run(replay(base, client, steps))
        crossed += runs[client].rewards != alone
    total = sum(len(r.rewards) for r in runs)
    return {
        "mode": mode, "transport": transport, "clients": clients, "steps/client": steps,
        "steps/s": total / wall, "p50 ms": float(np.percentile(latencies, 50)),
        "p99 ms": float(np.percentile(latencies, 99)),
        "5xx": sum(r.server_errors for r in runs), "errors": sum(len(r.errors) for r in runs),
        "lost": lost, "crossed": crossed, "replayed": min(replays, clients),
        "ops/run": (after["operations"] - before["operations"]) / max(after["batches"] - before["batches"], 1),
        "peak RSS MB": peak_rss_mb(pid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200, help="steps per client (task 1's horizon is 200)")
    parser.add_argument("--modes", nargs="+", default=["batched", "unbatched"], choices=["batched", "unbatched"])
    parser.add_argument("--transports", nargs="+", default=["ws", "http"], choices=["ws", "http"])
    parser.add_argument("--replays", type=int, default=5, help="clients whose trajectory is replayed alone")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    if not 1 <= args.clients <= 64 or not 1 <= args.steps <= 200:
        raise SystemExit("--clients must be in [1, 64] (the server's --max-sessions) and --steps in [1, 200]")
    rows = []
    for mode in args.modes:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start_server(port, mode == "batched", max_sessions=64)
        try:
            wait_ready(base, proc)
            for transport in args.transports:
                rows.append(measure(mode, transport, base, proc.pid, args.clients, args.steps, args.replays))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    columns = list(rows[0])
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    print(f"\n{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
