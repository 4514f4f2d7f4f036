"""`inferencegym serve` as users run it: a real uvicorn on 127.0.0.1 started from the installed
CLI, OpenEnv's own client and validator, the HTTP session API and the README's curl quick start,
the grader and baseline routes, bad input and faults, and the live page in headless Chromium.

One server for the whole run, shared by pytest-xdist's workers and other test files (the `server`
fixture, tests/served.py), serving task 1 with the default 64 sessions; its programs are those
tests/test_server_pool.py compiles, so with the test command's shared XLA cache the second
compilation is a cache hit.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("openenv", reason="the [server] extra is not installed")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from served import MAX_SESSIONS, TASK, _free_port  # noqa: E402 (the shared server: tests/served.py)

import inferencegym_jax as ig  # noqa: E402
from inferencegym_jax import baselines, evaluate, graders  # noqa: E402
from inferencegym_jax.actions import KNOBS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RTOL, ATOL = 2e-5, 1e-6  # another compiled program than the pool's: float32 rounding (test_server_pool)


def new_session(http, seed=0):
    r = http.post("/sessions", json={"task_id": TASK, "seed": seed})
    assert r.status_code == 201, r.text
    return r.json()


def heuristic_rewards(seed: int) -> np.ndarray:
    env, params = ig.make(TASK)
    traj = evaluate.run_episodes(env, params, baselines.heuristic_policy(env), jax.random.key(seed), 1)
    return np.asarray(traj.reward[0])


def test_openenv_client_plays_full_episodes_over_the_websocket(server):
    """OpenEnv's GenericEnvClient (WS /ws): a whole episode with the server's heuristic policy is
    episode 0 of run_episodes(heuristic, key(seed)); knob values step too; 409 after the horizon."""
    with GenericEnvClient(base_url=server.url).sync() as env:
        result = env.reset(seed=5, task_id=TASK)
        assert not result.done and result.observation["step_count"] == 0
        rewards = []
        while not result.done:
            result = env.step({"policy": "heuristic"})
            rewards.append(result.reward)
        state = env.state()
        assert state["step_count"] == len(rewards) == 200 and state["done"] and state["seed"] == 5
        np.testing.assert_allclose(state["cumulative_reward"], sum(rewards), rtol=1e-9)
        np.testing.assert_allclose(rewards, heuristic_rewards(5), rtol=RTOL, atol=ATOL)
        with pytest.raises(RuntimeError, match="409"):
            env.step({"batch_size": 64})
        result = env.reset(seed=5, task_id=TASK)  # the same episode again, now with knob values
        first = env.step({"batch_size": 64, "kv_budget": 0.5, "spec_length": 2})
        assert first.observation["clipped"] == ["spec_length"]  # task 1 masks speculation
        assert first.observation["applied_action"]["batch_size"] == 64
        assert set(first.observation["reward_components"]) and "tokens_per_s" in first.observation["metrics"]
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"batch_size": 10_000})


def test_a_stateless_step_starts_the_default_episode_and_says_so(server, http):
    """OpenEnv's stateless POST /step without a /reset: episode 0 of seed 0's stream on the served
    task, stepped once (the session API's first step of seed 0), and the metadata says so; over
    /ws a connection's first message, a step, starts the same episode and later steps go on."""
    action = {"batch_size": 64, "kv_budget": 0.5}
    response = http.post("/step", json={"action": action})
    assert response.status_code == 200, response.text
    body = response.json()
    started = {"episode_started": True, "task_id": TASK, "seed": 0, "episode": 0}
    assert body["metadata"] == started and body["observation"]["metadata"] == started
    assert body["observation"]["step_count"] == 1 and not body["done"]
    session = new_session(http, seed=0)["session_id"]
    same = http.post(f"/sessions/{session}/step", json={"action": action}).json()
    http.delete(f"/sessions/{session}")
    assert body["reward"] == same["reward"] and body["observation"]["metrics"] == same["metrics"]
    assert http.post("/step", json={"action": action}).json() == body  # a fresh environment each time
    by_policy = http.post("/step", json={"action": {"policy": "heuristic"}})
    assert by_policy.status_code == 200 and by_policy.json()["metadata"] == started
    bad = http.post("/step", json={"action": {"batch_size": 10_000}})
    assert bad.status_code == 422 and "batch_size" in bad.text
    described = " ".join(http.get("/openapi.json").json()["paths"]["/step"]["post"]["description"].split())
    assert "no prior `POST /reset` is needed" in described and '"episode_started": true' in described
    with GenericEnvClient(base_url=server.url).sync() as env:
        first = env.step(action)
        assert first.observation["metadata"] == started and first.reward == body["reward"]
        second = env.step(action)
        assert second.observation["step_count"] == 2 and second.observation["metadata"] == {}
        assert env.state()["seed"] == 0


def test_openenv_validate_passes_on_the_server_and_the_manifest(server, tmp_path):
    openenv_cli = shutil.which("openenv", path=str(Path(sys.executable).parent)) or "openenv"
    url = subprocess.run([openenv_cli, "validate", "--url", server.url], capture_output=True, text=True, timeout=300)
    assert url.returncode == 0 and "Verdict: PASS" in url.stdout, url.stdout + url.stderr
    # The package source as checked out (virtual environments, caches and runs left out:
    # openenv refuses trees with symbolic links, which a venv has).
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv*", ".git", ".jax-test-cache", "runs", "__pycache__", "*.egg-info", "build"))
    static = subprocess.run([openenv_cli, "validate", str(source), "--level", "static"], capture_output=True,
                            text=True, timeout=300)
    assert static.returncode == 0 and "PASS  static.manifest" in static.stdout, static.stdout + static.stderr
    # Full level: the runtime checks need a Docker execution plan (none here), so they are
    # skipped with a warning; nothing fails.
    full = subprocess.run([openenv_cli, "validate", str(source)], capture_output=True, text=True, timeout=300)
    assert "PASS  static.manifest" in full.stdout and "Verdict: FAIL" not in full.stdout, full.stdout


def test_readme_curl_quick_start_runs(server):
    block = re.search(r"```bash\n(# server quick start.*?)```", README.read_text(), flags=re.S)
    assert block, "README.md needs the '# server quick start' bash block"
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "BASE": server.url})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert '"score"' in proc.stdout and '"session_id"' in proc.stdout


def test_readme_openenv_client_snippet_runs(server):
    block = re.search(r"```py\n(.*?GenericEnvClient.*?)```", README.read_text(), flags=re.S)
    assert block, "README.md needs the OpenEnv client example (a ```py block)"
    code = block.group(1).replace("http://127.0.0.1:8000", server.url)
    exec(compile(code, "README.md[OpenEnv client]", "exec"), {})


def test_a_session_among_49_others_is_the_same_as_alone(server, http):
    """Over HTTP: 20 steps of one seed alone, then the same among 49 concurrent sessions; the
    batcher ran them together (several operations per program run) and nothing changed."""
    def action(t):
        return {"batch_size": (16, 64, 256)[t % 3], "kv_budget": 0.4 + 0.05 * (t % 4)}

    alone_id = new_session(http, seed=21)["session_id"]
    alone = [http.post(f"/sessions/{alone_id}/step", json={"action": action(t)}).json()["reward"] for t in range(20)]
    http.delete(f"/sessions/{alone_id}")

    async def crowd():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            made = await asyncio.gather(*(client.post("/sessions", json={"task_id": TASK, "seed": s})
                                          for s in [21] + list(range(100, 149))))
            ids = [m.json()["session_id"] for m in made]
            before = (await client.get("/stats")).json()
            mine = []
            for t in range(20):
                steps = await asyncio.gather(*(client.post(f"/sessions/{i}/step", json={"action": action(t)})
                                               for i in ids))
                assert all(s.status_code == 200 for s in steps)
                mine.append(steps[0].json()["reward"])
            after = (await client.get("/stats")).json()
            await asyncio.gather(*(client.delete(f"/sessions/{i}") for i in ids))
            return mine, before, after

    among, before, after = asyncio.run(crowd())
    assert among == alone
    runs, ops = after["batches"] - before["batches"], after["operations"] - before["operations"]
    # >=: the server is shared with the other test process, whose sessions may step meanwhile
    assert ops >= 50 * 20 and runs < ops, (runs, ops)
    assert after["compilations"] == {TASK: 2}  # one per batch size, at start-up


def test_grader_route_grades_a_session_log_and_names_bad_fields(server, http):
    session = new_session(http, seed=4)["session_id"]
    for _ in range(30):
        assert http.post(f"/sessions/{session}/step", json={"policy": "random"}).status_code == 200
    log = http.get(f"/sessions/{session}/log").json()
    http.delete(f"/sessions/{session}")
    answer = http.post("/grader", json=log)
    assert answer.status_code == 200, answer.text
    assert answer.json() == http.post("/grader", json=log).json()  # stateless and deterministic
    env, params = ig.make(TASK)
    records = log["intervals"]
    traj = {
        "metrics": {f: jnp.asarray([[r["metrics"][f] for r in records]]) for f in graders.METRIC_FIELDS},
        "action": {k: jnp.asarray([[r["action"][k] for r in records]]) for k in KNOBS},
        "offered_tokens": jnp.asarray([[r["offered_tokens"] for r in records]]),
        "valid": jnp.ones((1, len(records)), bool),
    }
    expected = graders.grade(traj, params, TASK)
    np.testing.assert_allclose(answer.json()["score"], float(expected.score[0]), rtol=1e-6, atol=1e-7)
    assert answer.json()["feedback"] == graders.feedback(expected, TASK)[0]

    def refused(body, where):
        r = http.post("/grader", content=body if isinstance(body, str) else None,
                      json=None if isinstance(body, str) else body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert where in str(r.json()["detail"]), r.text

    first = records[0]
    missing = {**first, "metrics": {k: v for k, v in first["metrics"].items() if k != "oom"}}
    refused({"task_id": TASK, "intervals": [missing]}, "'oom'")
    refused({"task_id": TASK, "intervals": [{**first, "offered_tokens": -1.0}]}, "offered_tokens")
    refused({"task_id": TASK, "intervals": [{**first, "offered_tokens": "12"}]}, "offered_tokens")
    refused({"task_id": TASK, "intervals": [{**first, "action": {**first["action"], "batch_size": 9999}}]},
            "batch_size")
    refused('{"task_id": 1, "intervals": [{"metrics": {}, "action": {}, "offered_tokens": NaN}]}', "offered_tokens")
    refused({"task_id": "InferenceGym-Task2-v0", "intervals": records}, "serves")
    refused({"task_id": TASK, "intervals": [first] * 4097}, "intervals")


def test_baseline_route_is_reproducible(http):
    one = http.get("/baseline", params={"task_id": TASK, "seed": 3, "episodes": 8})
    assert one.status_code == 200, one.text
    rows = one.json()["policies"]
    assert [r["policy"] for r in rows] == ["random", "vllm_default", "heuristic", "best_static"]
    assert one.json() == http.get("/baseline", params={"task_id": TASK, "seed": 3, "episodes": 8}).json()
    other = http.get("/baseline", params={"task_id": TASK, "seed": 4, "episodes": 8}).json()["policies"]
    assert other[0]["score"] != rows[0]["score"]  # the random policy on other episodes
    for params, where in (({"episodes": 0}, "episodes"), ({"episodes": 257}, "episodes"), ({"seed": -1}, "seed")):
        r = http.get("/baseline", params={"task_id": TASK, **params})
        assert r.status_code == 422 and where in r.text, r.text


def test_tasks_info_and_health(http):
    tasks = http.get("/tasks").json()
    assert tasks["ready"] and tasks["max_sessions"] == MAX_SESSIONS
    (task,) = tasks["tasks"]
    assert task["id"] == TASK and task["horizon_intervals"] == 200
    assert task["active_knobs"] == ["kv_budget", "batch_size"]
    info = http.get("/info").json()
    assert info["reward"]["range"] == [-1.0, 1.0] and info["knobs"] == list(KNOBS)
    assert info["reward"]["kind"] == {TASK: "increments" if TASK.endswith("-v1") else "rates"}
    assert info["observation_fields"]["ttft_p99_s"]["unit"] == "s"
    assert "batch_size" in info["action_schema"]["properties"]
    assert http.get("/health").json()["status"] == "healthy"
    assert "<canvas" in http.get("/view").text


def test_bad_input_and_faults_get_clear_errors_and_the_server_lives_on(server, http):
    bystander = new_session(http, seed=8)["session_id"]
    session = new_session(http, seed=9)["session_id"]
    step = f"/sessions/{session}/step"

    def status(method, url, **kwargs):
        return http.request(method, url, **kwargs)

    cases = [
        (status("POST", step, content="{not json", headers={"content-type": "application/json"}), 422, "json"),
        (status("POST", step, json={"action": {"batch_size": 64}, "extra": 1}), 422, "extra"),
        (status("POST", step, json={"action": {"batch_sise": 64}}), 422, "batch_sise"),
        (status("POST", step, json={"action": {"batch_size": 1000}}), 422, "batch_size"),
        (status("POST", step, json={"action": {"batch_size": "64"}}), 422, "batch_size"),
        (status("POST", step, content='{"action": {"kv_budget": NaN}}', headers={"content-type": "application/json"}),
         422, "kv_budget"),
        (status("POST", step, json={"action": {"batch_size": 64}, "policy": "heuristic"}), 422, "exactly one"),
        (status("POST", step, json={"policy": "nope"}), 422, "nope"),
        (status("POST", "/sessions", json={"task_id": 2}), 422, "serves"),
        (status("POST", "/sessions", json={"task_id": TASK, "seed": 2**32}), 422, "seed"),
        (status("POST", "/sessions/not-a-session/step", json={"policy": "random"}), 404, "no session"),
        (status("POST", step, content=b"x" * (5 * 2**20), headers={"content-type": "application/json"}), 413, "body"),
    ]
    for response, code, text in cases:
        assert response.status_code == code and text in response.text, (code, response.status_code, response.text)

    def chunks():  # no content-length: the limit counts what arrives
        for _ in range(80):
            yield b"x" * 2**16

    assert http.post(step, content=chunks(), headers={"content-type": "application/json"}).status_code == 413
    for _ in range(200):
        assert http.post(step, json={"policy": "best_static"}).status_code == 200
    done = http.post(step, json={"policy": "best_static"})
    assert done.status_code == 409 and "reset" in done.text
    assert http.post(f"/sessions/{session}/reset", json={"seed": 9}).json()["step_count"] == 0
    http.delete(f"/sessions/{session}")
    assert http.post(step, json={"policy": "random"}).status_code == 404  # closed
    # Nothing above touched another session, and the server still serves.
    assert http.post(f"/sessions/{bystander}/step", json={"policy": "random"}).json()["step_count"] == 1
    assert http.get("/health").status_code == 200 and server.alive()
    http.delete(f"/sessions/{bystander}")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,1000", "--virtual-time-budget=60000"]


def test_live_view_runs_an_episode_in_headless_chromium(server, tmp_path):
    """The page loads from the server, runs episodes with a server policy, and draws them: the
    charts hold more ink after 12 steps than after 1 (all but the queue's: task 1's queue stays
    empty, a line on the axis); a screenshot is taken."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("INFERENCEGYM_REQUIRE_BROWSER"):
            pytest.fail("INFERENCEGYM_REQUIRE_BROWSER is set but chromium is not installed")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")

    def page(steps, *extra):
        url = f"{server.url}/view?autostart=1&delay=0&policy=heuristic&seed=2&steps={steps}"
        proc = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / f'profile{steps}'}", *extra,
                               url], capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    def status(steps):
        dom = page(steps, "--dump-dom")
        found = re.search(r'<output id="status"([^>]*)>([^<]*)', dom)
        assert found, dom[-2000:]
        return dict(re.findall(r'data-([a-z]+)="([^"]*)"', found.group(1))), found.group(0)

    attrs, text = status(12)
    assert attrs["steps"] == "12" and attrs["points"] == "12" and attrs["done"] == "true", text
    one, _ = status(1)
    names = ("knobs", "queue", "ttft", "tokens", "cost")
    charts = dict(zip(names, zip(attrs["ink"].split(","), one["ink"].split(","))))
    assert all(int(a) > int(b) for name, (a, b) in charts.items() if name != "queue"), charts
    shot = tmp_path / "view.png"
    page(12, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--port", "70000"], "argument --port: '70000' must be an integer in [1, 65535]"),
    (["--task", "9"], "argument --task: '9' is not a task"),
    (["--max-sessions", "0"], "argument --max-sessions: '0' must be a positive integer"),
    (["--checkpoint", "/nonexistent/run"], "--checkpoint '/nonexistent/run'"),
])
def test_serve_refuses_bad_options_in_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "inferencegym_jax.cli", "serve", *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"inferencegym: error: {message}") and proc.stderr.count("\n") == 1, proc.stderr


def test_concurrent_requests_on_one_session_run_one_after_another(server, http):
    sid = new_session(http, seed=30)["session_id"]

    async def burst():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            return await asyncio.gather(*(client.post(f"/sessions/{sid}/step", json={"policy": "random"})
                                          for _ in range(12)))

    counts = sorted(r.json()["step_count"] for r in asyncio.run(burst()))
    assert counts == list(range(1, 13))
    log = http.get(f"/sessions/{sid}/log").json()["intervals"]
    assert len(log) == 12
    http.delete(f"/sessions/{sid}")


def _evicts_the_least_recently_used_session_at_the_limit(http: httpx.Client, limit: int) -> None:
    assert http.get("/stats").json()["sessions"] == 0
    first = new_session(http)["session_id"]
    rest = [new_session(http)["session_id"] for _ in range(limit - 1)]
    assert http.get("/stats").json()["sessions"] == limit
    newest = new_session(http)["session_id"]  # one over: `first` goes
    gone = http.post(f"/sessions/{first}/step", json={"policy": "random"})
    assert gone.status_code == 410 and "evicted" in gone.text
    assert http.post(f"/sessions/{newest}/step", json={"policy": "random"}).status_code == 200
    for sid in rest + [newest]:
        http.delete(f"/sessions/{sid}")


@pytest.mark.slow
def test_the_asgi_module_openenv_yaml_names_serves_under_plain_uvicorn():
    """openenv.yaml's `app:` is inferencegym_jax.server.asgi:app; uvicorn runs it as is. A server
    of this test alone, so it also checks that the least recently used session is evicted at the
    session limit (the shared `server` has other tests' sessions)."""
    manifest = (ROOT / "openenv.yaml").read_text()
    assert "app: inferencegym_jax.server.asgi:app" in manifest and "range: [-1.0, 1.0]" in manifest
    port = _free_port()
    env = {**os.environ, "INFERENCEGYM_SERVE_TASKS": TASK, "INFERENCEGYM_SERVE_MAX_SESSIONS": "8"}
    command = [sys.executable, "-m", "uvicorn", "inferencegym_jax.server.asgi:app", "--host", "127.0.0.1",
               "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            try:
                tasks = httpx.get(f"http://127.0.0.1:{port}/tasks", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "uvicorn did not serve the asgi app within 600 s"
                time.sleep(0.5)
        assert tasks.json()["max_sessions"] == 8 and [t["id"] for t in tasks.json()["tasks"]] == [TASK]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            _evicts_the_least_recently_used_session_at_the_limit(http, 8)
        with GenericEnvClient(base_url=f"http://127.0.0.1:{port}").sync() as client:
            client.reset(seed=1)
            assert client.step({"policy": "heuristic"}).observation["step_count"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)
