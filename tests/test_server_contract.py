"""The server's contract, finding by finding (issue 43, "What was measured" 2-6), against the
shared live server (tests/served.py): one error shape, every status declared, the schema and the
server agreeing on valid input, Allow listing every method, and OpenEnv's task API. Schemathesis
checks the same at random (tests/test_schemathesis.py); these name each case.
"""

from __future__ import annotations

import pytest
from served import TASK

SEED_MAX = 2**32 - 1
NOT_UTF8 = b'{"task_id": "\x80"}'


def new_session(http, **body):
    r = http.post("/sessions", json={"task_id": TASK, "seed": 0, **body})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


@pytest.fixture(scope="module")
def doc(server):
    import httpx

    return httpx.get(f"{server.url}/openapi.json", timeout=60).json()


def errors(response, status):
    """The errors of an ErrorResponse body, checked to be that shape, with `status`."""
    assert response.status_code == status, (response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail, response.text
    for error in detail:
        assert isinstance(error["loc"], list) and isinstance(error["msg"], str) and isinstance(error["type"], str)
    return detail


def test_every_4xx_is_a_list_of_errors_whose_loc_names_the_field(http):
    """Finding 3: the core's ValueErrors are FastAPI's list of {loc, msg, type} with the field's
    path; OpenEnv's own example action on POST /step is refused at ["body", "action", "value"]."""
    session = new_session(http)
    cases = [
        (http.get("/baseline", params={"task_id": "nope"}), ["query", "task_id"]),
        (http.post("/grader", json={"task_id": 99, "intervals": []}), ["body", "task_id"]),
        (http.post("/sessions", json={"task_id": "nope"}), ["body", "task_id"]),
        (http.post(f"/sessions/{session}/step", json={"policy": "nope"}), ["body", "policy"]),
        (http.post("/reset", json={"task_id": "nope"}), ["body", "task_id"]),
        (http.post("/step", json={"action": {"value": 1}}), ["body", "action", "value"]),
        (http.post("/step", json={"action": {"policy": "nope"}}), ["body", "action", "policy"]),
        (http.post("/step", json={"action": {"batch_size": 1e9}}), ["body", "action", "batch_size"]),
    ]
    for response, loc in cases:
        assert [e["loc"] for e in errors(response, 422)] == [loc], response.text
    gone = errors(http.get("/sessions/not-a-session"), 404)
    assert gone == [{"loc": ["path", "session_id"], "msg": gone[0]["msg"], "type": "session_not_found"}]
    too_big = errors(http.post("/grader", content=b" " * (5 * 2**20), headers={"content-type": "application/json"}),
                     413)
    assert too_big[0]["type"] == "body_too_large"
    assert errors(http.get("/no-such-route"), 404)[0]["type"] == "not_found"
    http.delete(f"/sessions/{session}")


def test_every_status_is_declared_and_a_body_that_is_not_utf8_is_a_422(http, doc):
    """Finding 4: 404 / 409 / 410 / 413 / 422 / 503 in the document where routes answer them, with
    the one error schema; a body that is not UTF-8 is a 422 on every JSON POST (as malformed JSON
    is, the README says), never a 400."""
    paths = doc["paths"]
    declared = {(m.upper(), p): set(op["responses"]) for p, ops in paths.items() for m, op in ops.items()}
    assert {"404", "409", "410", "413", "422"} <= declared[("POST", "/sessions/{session_id}/step")]
    for method in ("GET", "DELETE"):
        assert {"404", "410"} <= declared[(method, "/sessions/{session_id}")]
    for path in ("/sessions", "/step", "/reset"):
        assert {"413", "422", "503"} <= declared[("POST", path)]
    assert all("400" not in codes and "501" not in codes for codes in declared.values())
    for (method, path), codes in declared.items():
        if method == "POST":
            assert "413" in codes, path
        for code in codes - {"200", "201", "204"}:
            schema = paths[path][method.lower()]["responses"][code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, code)
    session = new_session(http)
    posts = [p.replace("{session_id}", session) for p, ops in paths.items()
             if "post" in ops and "requestBody" in ops["post"]]
    assert len(posts) >= 10, posts
    for path in posts:
        detail = errors(http.post(path, content=NOT_UTF8, headers={"content-type": "application/json"}), 422)
        assert detail[0]["loc"][0] == "body" and detail[0]["type"] == "json_invalid", (path, detail)
    http.delete(f"/sessions/{session}")


def test_the_schema_and_the_server_agree_on_valid_input(http, doc):
    """Finding 5: integer-valued floats are integers (same episode, same step, same baseline);
    booleans are not; a seed past 2**32 - 1 is refused and the document says so everywhere;
    StepSession's action and policy are not nullable in the document nor on the server."""
    as_ints = http.post("/reset", json={"seed": 21565, "episode": 4}).json()
    as_floats = http.post("/reset", json={"seed": 21565.0, "episode": 4.0})
    assert as_floats.status_code == 200 and as_floats.json() == as_ints
    session = new_session(http, seed=3.0, episode=2.0)
    assert http.get(f"/sessions/{session}").json()["state"]["seed"] == 3
    step = http.post(f"/sessions/{session}/step", json={"action": {"batch_size": 64.0, "spec_length": 0.0}})
    assert step.status_code == 200 and step.json()["applied_action"]["batch_size"] == 64.0, step.text
    for bad in (False, True, SEED_MAX + 1, -1, 2.5, "3"):
        for path, body in (("/reset", {"seed": bad}), ("/sessions", {"task_id": TASK, "seed": bad}),
                           (f"/sessions/{session}/reset", {"seed": bad})):
            assert errors(http.post(path, json=body), 422)[0]["loc"] == ["body", "seed"], (path, bad)
    null_both = errors(http.post(f"/sessions/{session}/step", json={"action": None, "policy": None}), 422)
    assert {tuple(e["loc"]) for e in null_both} == {("body", "action"), ("body", "policy")}
    step_schema = doc["components"]["schemas"]["StepSession"]
    assert "null" not in str(step_schema["properties"]) and step_schema["oneOf"]
    for name in ("OpenEnvReset", "ResetSession", "CreateSession"):
        seed = doc["components"]["schemas"][name]["properties"]["seed"]["anyOf"][0]
        assert seed["minimum"] == 0 and seed["maximum"] == SEED_MAX, name
    http.delete(f"/sessions/{session}")


def test_allow_lists_every_method_of_a_path(http, doc):
    """Finding 6: a 405 (OPTIONS, or any method a path does not answer) lists in Allow every
    method of the document's path (Starlette's named only the first route's)."""
    for path, ops in doc["paths"].items():
        url = path.replace("{session_id}", "some-id")
        response = http.request("OPTIONS", url)
        assert response.status_code == 405, (path, response.status_code)
        assert set(response.headers["allow"].split(", ")) == {m.upper() for m in ops}, (path, response.headers)
        assert errors(response, 405)[0]["type"] == "method_not_allowed"


def test_openenv_task_api_lists_splits_and_reset_starts_a_task(http):
    """Finding 2: OpenEnv's task routes answer (not 501): splits train and test, 1,024 tasks per
    served task each, a task spec is (task, seed, episode, stream), and POST /reset {split:
    "train", index} starts exactly that episode (as POST /sessions with seed 0 and the episode
    does); whole episodes of both splits: test_test_split_is_the_held_out_episodes_evaluate_grades."""
    splits = http.get("/inferencegym/splits").json()
    assert [(s["name"], s["num_tasks"], s["seed"], s["stream"]) for s in splits] == [
        ("train", 1024, 0, "plain"), ("test", 1024, 0, "held_out")]
    assert http.post("/inferencegym/num_tasks", json={"split": "test"}).json() == {"num_tasks": 1024}
    spec = http.post("/inferencegym/task", json={"split": "test", "index": 5}).json()["task"]
    assert spec == {"id": "test-5", "index": 5, "split": "test", "task_id": TASK, "seed": 0, "episode": 5,
                    "stream": "held_out"}
    listed = http.post("/inferencegym/tasks", json={"split": "train"}).json()["tasks"]
    assert len(listed) == 1024 and listed[7]["seed"] == 0 and listed[7]["episode"] == 7
    assert http.post("/inferencegym/task_range", json={"split": "test", "start": 5, "stop": 6}).json() == {
        "tasks": [spec]}
    by_split = {s: http.post("/reset", json={"split": s, "index": 5}).json()["observation"] for s in ("train", "test")}
    session = http.post("/sessions", json={"task_id": TASK, "seed": 0, "episode": 5}).json()
    assert session["state"]["stream"] == "plain"
    assert {k: v for k, v in by_split["train"].items() if k in session["observation"]} == session["observation"]
    http.delete(f"/sessions/{session['session_id']}")
    assert errors(http.post("/inferencegym/task", json={"split": "test", "index": 1024}), 422)[0]["loc"] == [
        "body", "index"]
    assert errors(http.post("/reset", json={"split": "test"}), 422)[0]["loc"] == ["body", "index"]
    assert errors(http.post("/reset", json={"split": "test", "index": 1, "seed": 3}), 422)[0]["loc"] == [
        "body", "seed"]
    assert errors(http.post("/inferencegym/tasks", json={"split": "validation"}), 422)[0]["loc"] == [
        "body", "split"]
    assert errors(http.post("/sessions", json={}), 422)[0]["loc"] == ["body", "task_id"]
    assert errors(http.post("/sessions", json={"split": "test", "index": 3, "task_id": TASK}), 422)[0]["loc"] == [
        "body", "task_id"]


def test_test_split_is_the_held_out_episodes_evaluate_grades(server, http):
    """Test index 3, played over /ws with the server's random policy (it draws from the policy
    key too), is episode 3 of evaluate.run_episodes(random, evaluate.evaluation_key(0)), the
    episodes evaluate.evaluate grades; train index 3 is episode 3 of jax.random.key(0), as
    POST /sessions {"seed": 0, "episode": 3} plays it (test_server_pool). Reward for reward to
    float32 rounding (the pool and the scan are two compiled programs: test_server_pool's
    tolerance); the state says the stream. POST /sessions {split, index} starts the same
    episode (the same program: exactly equal)."""
    import jax
    import numpy as np
    from openenv.core.generic_client import GenericEnvClient

    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    env, params = ig.make(TASK)
    roots = {"test": ("held_out", evaluate.evaluation_key(0)), "train": ("plain", jax.random.key(0))}
    for split, (stream, root) in roots.items():
        with GenericEnvClient(base_url=server.url).sync() as client:
            result = client.reset(split=split, index=3)
            rewards = []
            while not result.done:
                result = client.step({"policy": "random"})
                rewards.append(result.reward)
            state = client.state()
        assert (state["seed"], state["episode"], state["stream"], state["step_count"]) == (0, 3, stream, 200)
        session = http.post("/sessions", json={"split": split, "index": 3}).json()  # the same episode over HTTP
        assert session["state"]["stream"] == stream and session["state"]["episode"] == 3
        url = f"/sessions/{session['session_id']}/step"
        assert [http.post(url, json={"policy": "random"}).json()["reward"] for _ in range(8)] == rewards[:8]
        http.delete(f"/sessions/{session['session_id']}")
        expected = evaluate.run_episodes(env, params, baselines.random_policy(env), root, 4).reward
        np.testing.assert_allclose(rewards, np.asarray(expected[3]), rtol=2e-5, atol=1e-6, err_msg=split)
        assert not np.allclose(rewards, np.asarray(expected[2]), rtol=2e-5, atol=1e-6)
