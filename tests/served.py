"""The one `inferencegym serve` a test run shares (the `server` and `http` fixtures, registered
in conftest.py): a real uvicorn on a free 127.0.0.1 port, started from the installed CLI, serving
SERVED_TASK with MAX_SESSIONS sessions. tests/test_server.py, tests/test_mcp.py and
tests/test_schemathesis.py use it; compiling a server takes about a minute, so pytest-xdist's
workers share it too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import filelock
import httpx
import pytest

SERVED_TASK = "InferenceGym-Task1-v1"  # the fluid engine's task 1 (its newest version is v2, the mixed engine)
MAX_SESSIONS = 64
TASK = SERVED_TASK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class Served:
    """A running `inferencegym serve`: its base URL, process id and stderr file."""

    url: str
    pid: int
    stderr: str

    def alive(self) -> bool:
        """Whether the process runs (not gone, not a zombie)."""
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (FileNotFoundError, IndexError):
            return False


def _start_server(folder: Path) -> Served:
    """`inferencegym serve --task TASK` on a free loopback port, once it answers /health."""
    port = _free_port()
    stderr = folder / f"serve-{port}.err"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inferencegym_jax.cli", "serve", "--task", TASK, "--port", str(port),
             "--max-sessions", str(MAX_SESSIONS)], stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    served = Served(f"http://127.0.0.1:{port}", proc.pid, str(stderr))
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}: {stderr.read_text()[-3000:]}")
        try:
            if httpx.get(f"{served.url}/health", timeout=2).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("serve did not answer /health within 600 s")
        time.sleep(0.25)


def _stop_server(served: Served) -> None:
    """SIGTERM, wait for the process to end, and check it ended without a traceback."""
    os.kill(served.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while served.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not served.alive(), "serve did not stop within 60 s of SIGTERM"
    err = Path(served.stderr).read_text()
    assert "Traceback" not in err, err[-3000:]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server for the whole test run, whichever test process needs it: compiling a server
    takes about a minute, so pytest-xdist's workers share it. The first to need it starts it, each
    counts itself in a file under a lock, and the last one out stops it (a later one would start
    another)."""
    folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the xdist workers' base folders share this parent
        folder = folder.parent
    record, lock = folder / "server.json", filelock.FileLock(str(folder / "server.lock"))
    with lock:
        if record.is_file():
            state = json.loads(record.read_text())
        else:
            state = {"served": dataclasses.asdict(_start_server(folder)), "users": 0}
        state["users"] += 1
        record.write_text(json.dumps(state))
    served = Served(**state["served"])
    yield served
    with lock:
        state = json.loads(record.read_text())
        state["users"] -= 1
        last = state["users"] == 0
        if last:
            record.unlink()
        else:
            record.write_text(json.dumps(state))
    if last:
        _stop_server(served)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
