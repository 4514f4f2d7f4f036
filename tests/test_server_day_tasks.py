"""The server's fleet and reservation tasks (server.day_tasks, server.day_sessions): episodes over
the HTTP session API and OpenEnv's routes are the gymnasium adapters' and plain JAX's, reward for
reward; refused actions are 422s naming the entry and its range and change nothing; day sessions
are bounded like the serving ones; GET /baseline gives the library's held-out tables.

The fast tests run the app in process (FastAPI's TestClient) over a server of the reservation task
(its programs compile in seconds; its /baseline programs in the warm-up's background thread, ~14 s
cold on 2 busy cores, which the /baseline test's fixture waits for); the slow ones start
`inferencegym serve` with both day tasks on a 127.0.0.1 port and play them with OpenEnv's own
client (a fleet step's program compiles in ~17 s on 2 cores, once per split, unless JAX's
compilation cache holds it), and compare a fleet /baseline with fleet.evaluate.graded_table
(minutes: 8 held-out days per baseline, twice).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jax
import numpy as np
import pytest

pytest.importorskip("openenv", reason="the [server] extra is not installed")

from fastapi.testclient import TestClient  # noqa: E402
from helpers import plain_jax_stream_episode  # noqa: E402 (tests/helpers.py)
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from served import _free_port  # noqa: E402 (tests/served.py)

import inferencegym_jax as ig  # noqa: E402
from inferencegym_jax import evaluate, tasks  # noqa: E402
from inferencegym_jax.cli.serve_command import served_task  # noqa: E402
from inferencegym_jax.fleet.baselines import fleet_baselines  # noqa: E402
from inferencegym_jax.fleet.evaluate import graded_table  # noqa: E402
from inferencegym_jax.fleet.reservation_baselines import reservation_baselines, reservation_table  # noqa: E402
from inferencegym_jax.fleet.reservation_tasks import make_reservation  # noqa: E402
from inferencegym_jax.fleet.tasks import make_fleet  # noqa: E402
from inferencegym_jax.interop.fleet_gym import FleetGymnasiumEnv  # noqa: E402
from inferencegym_jax.interop.reservation_gym import ReservationGymnasiumEnv  # noqa: E402
from inferencegym_jax.server.app import build_app  # noqa: E402
from inferencegym_jax.server.core import ServerCore  # noqa: E402
from inferencegym_jax.server.day_sessions import DayStore  # noqa: E402
from inferencegym_jax.server.day_tasks import DayTask  # noqa: E402
from inferencegym_jax.server.sessions import CapacityError  # noqa: E402

RESERVE, FLEET = "InferenceGym-Reserve1-v1", "InferenceGym-Fleet1-v1"
MAX_SESSIONS = 2
# Commitments of an episode (Reserve1 train: 4 days): flat, a peak in the afternoon, none, the most.
COMMITMENTS = [[4] * 24, [2] * 12 + [9] * 12, [0] * 24, [32] * 24]


@pytest.fixture(scope="module")
def core():
    """A server of Reserve1, warmed up: its /baseline programs compile in the background."""
    core = ServerCore([RESERVE], max_sessions=MAX_SESSIONS)
    core.warm_up()
    return core


@pytest.fixture(scope="module")
def client(core):
    with TestClient(build_app(core)) as c:
        yield c


@pytest.fixture
def baselines_warm(core):
    """Wait for the server's background compilation of Reserve1's /baseline programs (7, one per
    baseline: ~14 s on 2 busy cores from a cold JAX compilation cache, ~5 s from a warm one), as a
    /baseline would: server start-up, not the request."""
    for event in core.day.baselines_warm.values():
        assert event.wait(timeout=300)


def adapter_rewards(seed: int, actions, split: str = "train", episode: int = 0) -> list[float]:
    env = ReservationGymnasiumEnv(RESERVE, split=split)
    env.reset(options={"key": jax.random.key(seed), "episode": episode})
    return [env.step(np.asarray(a))[1] for a in actions]


def plain_jax_rewards(seed: int, actions) -> list[float]:
    """The reservation adapter's module docstring, in plain JAX (helpers.plain_jax_stream_episode)."""
    env, params = ig.make(RESERVE)
    return list(plain_jax_stream_episode(env, params, jax.random.key(seed), 0, actions, "day", ("cost_j",))["rewards"])


def test_a_reservation_episode_over_http_is_the_adapters_and_plain_jaxs(client):
    """POST /sessions, four steps to termination: the rewards are the adapter's bit for bit and
    plain JAX's to float32; a fifth step is a 409; the log holds the steps; /tasks and /info list it."""
    r = client.post("/sessions", json={"task_id": RESERVE, "seed": 3})
    assert r.status_code == 201, r.text
    sid, first = r.json()["session_id"], r.json()
    assert first["state"]["family"] == "reservation" and first["state"]["horizon"] == 4
    assert len(first["vector"]) == 178 and len(first["observation"]["history"]) == 7
    rewards = []
    for action in COMMITMENTS:
        body = client.post(f"/sessions/{sid}/step", json={"action": {"reserved": action}}).json()
        rewards.append(body["reward"])
    assert body["done"] and body["terminated"] and not body["truncated"] and body["state"]["step_count"] == 4
    assert rewards == adapter_rewards(3, COMMITMENTS)
    np.testing.assert_allclose(rewards, plain_jax_rewards(3, COMMITMENTS), rtol=1e-6, atol=1e-7)
    assert body["info"]["day_index"] == 4 and set(body["info"]["reward_components"]) == {"gpu", "slo"}
    np.testing.assert_allclose(body["state"]["cumulative_reward"], sum(rewards), rtol=1e-12)
    late = client.post(f"/sessions/{sid}/step", json={"action": {"reserved": [1] * 24}})
    assert late.status_code == 409, late.text
    log = client.get(f"/sessions/{sid}/log").json()
    assert [s["reward"] for s in log["steps"]] == rewards and log["family"] == "reservation"
    assert client.get("/tasks").json()["day_tasks"][0]["action_ranges"] == {"reserved": [0, 32]}
    assert "last_missed" in client.get("/info").json()["day_tasks"][RESERVE]["observation_fields"]
    held = client.post(f"/sessions/{sid}/reset", json={"seed": 3, "episode": 2, "day_split": "heldout"}).json()
    assert held["state"]["day_split"] == "heldout" and held["state"]["horizon"] == 3
    rewards = [client.post(f"/sessions/{sid}/step", json={"action": {"reserved": a}}).json()["reward"]
               for a in COMMITMENTS[:3]]
    assert rewards == adapter_rewards(3, COMMITMENTS[:3], "heldout", episode=2)
    assert client.delete(f"/sessions/{sid}").status_code == 204
    assert client.get(f"/sessions/{sid}").status_code == 404


@pytest.mark.parametrize("action, loc, message", [
    ({"reserved": [4] * 23 + [33]}, ["body", "action", "reserved", 23], r"action\[23\] \(hour_23\) = 33 is outside "
                                                                         r"its range \[0, 32\]"),
    ({"reserved": [-1] + [4] * 23}, ["body", "action", "reserved", 0], r"= -1 is outside its range \[0, 32\]"),
    ({"reserved": [4] * 3}, ["body", "action", "reserved"], r"shape \(24,\)"),
    ({"reserved": [2**70] * 24}, ["body", "action", "reserved", 0], r"outside its range \[0, 32\]"),
    ({"replicas": 3}, ["body", "action", "replicas"], "not an action entry of reservation task"),
    ({}, ["body", "action", "reserved"], "required"),
])
def test_a_refused_reservation_action_is_a_422_and_changes_nothing(client, action, loc, message):
    sid = client.post("/sessions", json={"task_id": RESERVE, "seed": 11}).json()["session_id"]
    r = client.post(f"/sessions/{sid}/step", json={"action": action})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == loc and re.search(message, detail["msg"]), detail
    state = client.get(f"/sessions/{sid}").json()["state"]
    assert state["step_count"] == 0 and state["cumulative_reward"] == 0.0
    after = client.post(f"/sessions/{sid}/step", json={"action": {"reserved": COMMITMENTS[0]}}).json()
    assert after["reward"] == adapter_rewards(11, COMMITMENTS[:1])[0]  # as if the refused one never came


def test_bad_task_seed_split_and_serving_only_operations_are_422s(client):
    cases = [
        ({"task_id": "InferenceGym-Fleet1-v1"}, ["body", "task_id"], "this server serves"),
        ({"task_id": RESERVE, "seed": -1}, ["body", "seed"], "greater than or equal to 0"),
        ({"task_id": RESERVE, "day_split": "test"}, ["body", "day_split"], "'train' or 'heldout'"),
    ]
    for body, loc, message in cases:
        r = client.post("/sessions", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc and message in r.text, r.text
    graded = client.post("/grader", json={"task_id": RESERVE, "intervals": []})
    assert graded.status_code == 422 and "reservation task" in graded.text, graded.text
    sid = client.post("/sessions", json={"task_id": RESERVE, "seed": 0}).json()["session_id"]
    policy = client.post(f"/sessions/{sid}/step", json={"policy": "heuristic"})
    assert policy.status_code == 422 and policy.json()["detail"][0]["loc"] == ["body", "policy"], policy.text


def test_openenv_stateless_routes_take_the_reservation_task(client):
    """POST /reset and the stateless POST /step (its default episode: seed 0, episode 0)."""
    reset = client.post("/reset", json={"task_id": RESERVE, "seed": 5, "day_split": "heldout"}).json()
    assert len(reset["observation"]["vector"]) == 178 and reset["observation"]["family"] == "reservation"
    step = client.post("/step", json={"action": {"reserved": COMMITMENTS[1]}}).json()
    assert step["observation"]["metadata"]["episode_started"]
    assert step["reward"] == adapter_rewards(0, COMMITMENTS[1:2])[0]
    bad = client.post("/step", json={"action": {"reserved": [99] * 24}})
    assert bad.status_code == 422 and "[0, 32]" in bad.text, bad.text


def test_the_mcp_tools_refuse_a_day_task(client):
    """The MCP tools play the serving tasks' knobs: reset_episode on a day task is a tool error."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "reset_episode", "arguments": {"task_id": RESERVE, "seed": 0}}}
    answer = client.post("/mcp", json=call).json()
    assert "fleet or reservation task" in answer["error"]["message"], answer


def test_day_sessions_are_bounded_least_recently_used_first(client):
    """The third session evicts the least recently used (410 afterwards); pinned ones are never
    evicted: with every slot pinned a new one is a CapacityError (503)."""
    ids = [client.post("/sessions", json={"task_id": RESERVE, "seed": s}).json()["session_id"] for s in range(2)]
    client.get(f"/sessions/{ids[0]}")  # ids[1] is now the least recently used
    third = client.post("/sessions", json={"task_id": RESERVE, "seed": 2}).json()["session_id"]
    assert client.get(f"/sessions/{ids[1]}").status_code == 410
    assert client.get(f"/sessions/{ids[0]}").status_code == 200 and client.get(f"/sessions/{third}").status_code == 200
    store = DayStore({RESERVE: DayTask.load(RESERVE)}, max_sessions=2)
    pinned = [store.create(RESERVE, pinned=True) for _ in range(2)]
    with pytest.raises(CapacityError, match="held by open connections"):
        store.create(RESERVE)
    store.close(pinned[0].id)
    assert store.create(RESERVE).task_id == RESERVE and store.evictions == 0


def as_json_rows(table) -> list[dict]:
    """A library table's rows as /baseline gives them (NaN: null)."""
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in table.reset_index().to_dict(orient="records")]


def test_baseline_of_the_reservation_task_is_the_librarys_heldout_table(client, baselines_warm):
    """GET /baseline on Reserve1: the rows of reservation_table on the held-out services
    (make_reservation(split="heldout"), its baselines, evaluation_key(seed), the same episodes),
    equal numbers; by default seed 0 and 16 episodes (what the warm-up ran), other services; the
    same request answers the same."""
    env, params = make_reservation(RESERVE, split="heldout")
    body = client.get("/baseline", params={"task_id": RESERVE, "seed": 5, "episodes": 16}).json()
    assert body["family"] == "reservation" and body["split"] == "heldout" and body["episodes"] == 16, body
    table, _ = reservation_table(env, params, reservation_baselines(env, params), evaluate.evaluation_key(5), 16)
    assert body["policies"] == as_json_rows(table)
    assert [row["policy"] for row in body["policies"]][:2] == ["week_peak", "on_demand_only"]
    assert body["policies"][0]["d_J_vs_week_peak"] is None and body["policies"][-1]["score"] == 1.0  # NaN: null
    default = client.get("/baseline", params={"task_id": RESERVE}).json()
    assert default["seed"] == 0 and default["episodes"] == 16 and default["policies"] != body["policies"]
    assert client.get("/baseline", params={"task_id": RESERVE, "seed": 5, "episodes": 16}).json() == body


@pytest.mark.parametrize("task_id, query, loc, message", [
    (RESERVE, {"episodes": 65}, ["query", "episodes"], r"episodes=65: must be an integer in \[1, 64\]"),
    (RESERVE, {"episodes": 0}, ["query", "episodes"], "greater than or equal to 1"),
    (RESERVE, {"episodes": 257}, ["query", "episodes"], "less than or equal to 256"),
    (RESERVE, {"seed": -1}, ["query", "seed"], "greater than or equal to 0"),
    (RESERVE, {"seed": 2**32}, ["query", "seed"], "less than or equal to 4294967295"),
    (FLEET, {"episodes": 9}, ["query", "episodes"], r"episodes=9: must be an integer in \[1, 8\] for fleet task"),
])
def test_bad_baseline_queries_of_day_tasks_are_422s_naming_the_parameter(unwarmed, task_id, query, loc, message):
    """Per family: a fleet's episodes at most 8, a reservation task's 64 (refused before any
    program runs: this server of both is never warmed up)."""
    r = unwarmed.get("/baseline", params={"task_id": task_id, **query})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == loc and re.search(message, detail["msg"]), detail


@pytest.fixture(scope="module")
def unwarmed():
    """A server of both day tasks, not warmed up (nothing compiled: requests that run programs would)."""
    with TestClient(build_app(ServerCore([RESERVE, FLEET]))) as c:
        yield c


def test_serve_takes_fleet_and_reservation_ids():
    assert served_task("InferenceGym/Fleet1-v1") == FLEET and served_task(RESERVE) == RESERVE
    assert served_task("1") == tasks.newest_version(1)  # serving tasks as before: a number is its newest version

    with pytest.raises(argparse.ArgumentTypeError, match="or a fleet or reservation task"):
        served_task("InferenceGym-Fleet9-v1")


@pytest.mark.slow  # compiles a serving task's pool program (a cache hit after tests/test_server_pool.py)
def test_a_server_of_serving_and_day_tasks_keeps_each_kind_to_its_own_actions():
    """Task 1 and Reserve1 on one server (in process; programs compiled on first use): each
    kind's sessions step as before, and each refuses the other's action entries and day_split."""
    core = ServerCore([tasks.newest_version(1), RESERVE])
    assert core.served_ids == (tasks.newest_version(1), RESERVE) and core.task_ids == (tasks.newest_version(1),)
    with TestClient(build_app(core)) as c:
        serving = c.post("/sessions", json={"task_id": 1, "seed": 0}).json()["session_id"]
        day = c.post("/sessions", json={"task_id": RESERVE, "seed": 0}).json()["session_id"]
        assert c.post(f"/sessions/{serving}/step", json={"action": {"batch_size": 64}}).status_code == 200
        crossed = c.post(f"/sessions/{serving}/step", json={"action": {"reserved": [1] * 24}})
        assert crossed.status_code == 422 and "unknown knobs ['reserved']" in crossed.text, crossed.text
        split = c.post(f"/sessions/{serving}/reset", json={"day_split": "heldout"})
        assert split.status_code == 422 and split.json()["detail"][0]["loc"] == ["body", "day_split"]
        knob = c.post(f"/sessions/{day}/step", json={"action": {"batch_size": 64}})
        assert knob.status_code == 422 and knob.json()["detail"][0]["loc"] == ["body", "action", "batch_size"]
        stateless = c.post("/step", json={"action": {"reserved": [1] * 24}})  # the default task is task 1
        assert stateless.status_code == 422 and "fleet or reservation entries" in stateless.text, stateless.text
        doc = c.get("/openapi.json").json()["components"]["schemas"]
        assert {"replicas", "routing", "reserved"} <= set(doc["ServingAction"]["properties"])
        assert RESERVE in doc["CreateSession"]["properties"]["task_id"]["anyOf"][0]["enum"]
        with c.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"task_id": RESERVE, "seed": 4}})
            assert ws.receive_json()["data"]["observation"]["family"] == "reservation"
            ws.send_json({"type": "step", "data": {"reserved": COMMITMENTS[0]}})
            assert ws.receive_json()["data"]["reward"] == adapter_rewards(4, COMMITMENTS[:1])[0]
            ws.send_json({"type": "reset", "data": {"task_id": tasks.newest_version(1), "seed": 4}})
            assert ws.receive_json()["data"]["observation"]["task_id"] == tasks.newest_version(1)
            ws.send_json({"type": "state"})
            assert ws.receive_json()["data"]["stream"] == "plain"
        # Not checked here: that the socket's session closes with it. Starlette's TestClient cancels the
        # endpoint as soon as it sends the disconnect, so OpenEnv's clean-up races that cancellation in
        # process (CI lost it); test_served_day_tasks_over_http_and_openenvs_client checks it on uvicorn.


def _serve(port: int, stderr: Path) -> subprocess.Popen:
    with open(stderr, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "inferencegym_jax.cli", "serve", "--task", RESERVE, "--task",
                                 FLEET, "--port", str(port), "--max-sessions", "4"],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, stderr.read_text()[-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.25)
    proc.kill()
    pytest.fail("serve did not answer /health within 600 s")


@pytest.mark.slow  # a server of its own; the fleet's step compiles in ~17 s per split on 2 cores (cold cache)
def test_served_day_tasks_over_http_and_openenvs_client(tmp_path):
    """`inferencegym serve --task Reserve1 --task Fleet1`: OpenEnv's GenericEnvClient (WS /ws) plays
    a reservation episode to its end, as the adapter does; a few fleet steps over the session API
    are the fleet adapter's; a bad fleet action is a 422 naming routing's range."""
    port = _free_port()
    proc = _serve(port, tmp_path / "serve.err")
    url = f"http://127.0.0.1:{port}"
    try:
        with GenericEnvClient(base_url=url).sync() as env:
            result = env.reset(task_id=RESERVE, seed=7)
            rewards = []
            for action in COMMITMENTS:
                result = env.step({"reserved": action})
                rewards.append(result.reward)
            assert result.done and env.state()["step_count"] == 4 and env.state()["family"] == "reservation"
            assert rewards == adapter_rewards(7, COMMITMENTS)
            with pytest.raises(RuntimeError, match="409"):
                env.step({"reserved": COMMITMENTS[0]})
        actions = [[8, 0], [12, 1], [3, 0]]
        gym = FleetGymnasiumEnv(FLEET)
        gym.reset(seed=2)
        expected = [gym.step(np.asarray(a)) for a in actions]
        with httpx.Client(base_url=url, timeout=120) as http:
            deadline = time.monotonic() + 30  # the socket's session closes with it (OpenEnv's clean-up)
            while http.get("/stats").json()["day_sessions"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert http.get("/stats").json()["day_sessions"] == 0
            tasks = http.get("/tasks").json()
            assert [t["id"] for t in tasks["day_tasks"]] == [RESERVE, FLEET] and tasks["tasks"] == []
            sid = http.post("/sessions", json={"task_id": FLEET, "seed": 2}).json()["session_id"]
            bad = http.post(f"/sessions/{sid}/step", json={"action": {"replicas": 8, "routing": 2}})
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "action", "routing"]
            assert "[0, 1]" in bad.text, bad.text
            for action, (obs, reward, _, truncated, info) in zip(actions, expected):
                body = http.post(f"/sessions/{sid}/step", json={"action": {"replicas": action[0],
                                                                           "routing": action[1]}}).json()
                assert body["reward"] == reward and body["vector"] == np.asarray(obs, np.float64).tolist()
                assert body["info"] == info and body["truncated"] == truncated
            assert body["observation"]["serving"] == body["vector"][5] and body["state"]["horizon"] == 1440
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert "Traceback" not in (tmp_path / "serve.err").read_text()


@pytest.mark.slow  # 8 held-out days per fleet baseline, twice (the server's, the library's): ~10 min on 2 busy cores
def test_baseline_of_the_fleet_task_is_graded_tables():
    """GET /baseline on Fleet1 with 1 episode: fleet.evaluate.graded_table's rows on the held-out days
    (make_fleet(split="heldout"), fleet_baselines, evaluation_key(seed)), equal numbers; 8 episodes
    of the same seed come from the runs the server kept: static_for_peak 0, the oracle 1."""
    env, params = make_fleet(FLEET, split="heldout")
    with TestClient(build_app(ServerCore([FLEET]))) as c:
        one = c.get("/baseline", params={"task_id": FLEET, "seed": 2, "episodes": 1})
        assert one.status_code == 200, one.text
        start = time.monotonic()
        eight = c.get("/baseline", params={"task_id": FLEET, "seed": 2}).json()
        kept_s = time.monotonic() - start
    expected = as_json_rows(graded_table(env, params, fleet_baselines(env, params), evaluate.evaluation_key(2), 1)[0])
    assert one.json()["policies"] == expected and one.json()["family"] == "fleet"
    assert [row["policy"] for row in expected] == ["static_for_peak", "hpa", "forecast", "oracle (clairvoyant bound)",
                                                   "oracle_pooled"]
    assert eight["episodes"] == 8 and [row["episodes"] for row in eight["policies"]] == [8] * 5
    assert eight["policies"][0]["score"] == 0.0 and eight["policies"][3]["score"] == 1.0
    assert kept_s < 10, kept_s  # no fleet ran again (a run of the 5 baselines takes minutes)
