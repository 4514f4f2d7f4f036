"""The MCP tools (inferencegym_jax/server/mcp_tools.py) as an LLM agent uses them: OpenEnv's own
MCP client (`MCPToolClient`: JSON-RPC on `POST /mcp`, in a session `openenv/session/create`
made) against the shared live server (tests/served.py).

A scripted agent plays a whole episode of every served task through the tools, and the same
actions through `WS /ws` (OpenEnv's GenericEnvClient) give the same observations, rewards and
metrics, number for number; `grade` is `POST /grader` of the episode's log; invalid calls are
tool errors that leave the session as it was; the README's agent loop runs.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv", reason="the [server] extra is not installed")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.mcp_client import MCPToolClient  # noqa: E402

from inferencegym_jax.actions import GRID, KNOB_RANGES, KNOBS  # noqa: E402
from inferencegym_jax.observation import FEATURES  # noqa: E402
from inferencegym_jax.server import mcp_tools  # noqa: E402
from inferencegym_jax.server.schemas import KNOB_UNITS  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
SEED, EPISODE = 11, 3
# What a step's observation holds beside its fields: compared between the two transports.
STEP_KEYS = ("reward", "done", "reward_components", "metrics", "applied_action", "clipped", "step_count")


def schedule(t: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The scripted agent's calls before interval t: knobs to configure (or None), and knob values
    given to step_interval for that interval only."""
    configure = {0: {"kv_budget": 0.8, "batch_size": 64}, 60: {"batch_size": 128, "quant_tier": 1},
                 140: {"kv_budget": 0.35, "spec_length": 2}}.get(t)
    given = {"batch_size": 16} if t % 9 == 4 else {"kv_budget": 0.6} if t % 13 == 7 else {}
    return configure, given


def from_ws(obs: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    """The compared part of a /ws observation (GenericEnvClient's result)."""
    return {"observation": {n: obs[n] for n, _ in FEATURES}, **{k: obs[k] for k in STEP_KEYS[2:]},
            "reward": reward, "done": done}


def from_mcp(content: dict[str, Any]) -> dict[str, Any]:
    """The compared part of a tool's structured content."""
    return {"observation": content["observation"], **{k: content[k] for k in STEP_KEYS}}


def play_mcp(env: Any, task: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """A whole episode through the tools; each result, and the knobs each interval was given."""
    first = env.call_tool("reset_episode", task_id=task, seed=SEED, episode=EPISODE)
    assert first["step_count"] == 0 and first["reward"] is None and not first["done"]
    assert [f["name"] for f in first["fields"]] == [n for n, _ in FEATURES]
    assert all(f["value"] == first["observation"][f["name"]] for f in first["fields"])
    results, knobs, sent = [first], {}, []
    while not results[-1]["done"]:
        configure, given = schedule(len(results) - 1)
        if configure:
            table = env.call_tool("configure", **configure)["next_knobs"]
            knobs.update(configure)
            assert {k["name"]: k["value"] for k in table if k["source"] == "configured"} == knobs
        results.append(env.call_tool("step_interval", **given))
        sent.append({**knobs, **given})
    return results, sent


def play_ws(url: str, task: str, sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same episode and knob values over /ws."""
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=SEED, task_id=task, episode=EPISODE)
        out = [from_ws(result.observation, None, result.done)]
        for knobs in sent:
            result = env.step(knobs)
            out.append(from_ws(result.observation, result.reward, result.done))
    return out


def test_an_mcp_client_plays_every_served_task_as_ws_does(server, http):
    """Every served task (GET /tasks): a scripted agent's whole episode through the tools equals
    the same actions over /ws bit for bit; grade is POST /grader of the session's log; a step
    after the horizon is refused and changes nothing."""
    tasks = [t["id"] for t in http.get("/tasks").json()["tasks"]]
    assert tasks
    for task in tasks:
        with MCPToolClient(base_url=server.url).sync() as env:
            results, sent = play_mcp(env, task)
            ws = play_ws(server.url, task, sent)
            assert [from_mcp(r) for r in results] == ws  # bit-identical, not merely close
            assert len(results) - 1 == results[-1]["horizon"] and results[-1]["task_id"] == task
            assert results[-1]["applied_action"]["batch_size"] == sent[-1]["batch_size"]
            grade = env.call_tool("grade")
            log = http.get(f"/sessions/{env.state().episode_id}/log").json()
            assert grade == http.post("/grader", json=log).json() and grade["intervals"] == len(sent)
            assert math.isfinite(grade["score"])
            before = env.call_tool("observe")
            with pytest.raises(RuntimeError, match="ended after"):
                env.call_tool("step_interval")
            assert env.call_tool("observe") == before and env.state().step_count == len(sent)


def test_tools_list_their_knobs_with_grids_ranges_and_units(server):
    with MCPToolClient(base_url=server.url).sync() as env:
        tools = {t.name: t for t in env.list_tools()}
    assert set(tools) == set(mcp_tools.TOOL_NAMES)
    for name in ("configure", "step_interval"):
        schema = tools[name].input_schema["properties"]
        for knob, (lo, hi), grid in zip(KNOBS, KNOB_RANGES, GRID):
            bounds = next(s for s in schema[knob]["anyOf"] if s["type"] != "null")
            assert (bounds["minimum"], bounds["maximum"]) == (lo, hi)
            assert f"[{KNOB_UNITS[knob]}]" in schema[knob]["description"]
            assert knob == "kv_budget" or str([int(v) for v in grid]) in schema[knob]["description"]
            assert knob in tools["configure"].description


def _invalid_calls(task: str) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, what the error says) of calls that must change nothing."""
    return [
        ("configure", {"batch_size": 1000}, "less than or equal"),
        ("configure", {"spec_length": 2.5}, "integer"),
        ("step_interval", {"quant_tier": 7}, "less than or equal"),
        ("step_interval", {"batch_size": "many"}, "integer"),
        ("reset_episode", {"task_id": "InferenceGym-Task99-v1"}, "task"),
        ("reset_episode", {"task_id": task, "seed": 2**32}, "less than or equal"),
        ("reset_episode", {"task_id": task, "episode": -1}, "greater than or equal"),
        ("reset_episode", {"split": "validation", "index": 0}, "'train' or 'test'"),
        ("reset_episode", {"split": "test", "index": 1024}, "holds tasks 0..1023"),
        ("reset_episode", {"split": "test"}, "split and index together"),
        ("reset_episode", {"split": "test", "index": 3, "seed": 3}, "a split's task sets it"),
        ("no_such_tool", {}, "no_such_tool"),
    ]


def test_invalid_tool_calls_are_errors_that_change_nothing(server, http):
    task = http.get("/tasks").json()["tasks"][0]["id"]
    with MCPToolClient(base_url=server.url).sync() as env:
        for tool in ("observe", "configure", "step_interval", "grade"):  # nothing started yet
            with pytest.raises(RuntimeError, match="call reset_episode first"):
                env.call_tool(tool)
        env.call_tool("reset_episode", task_id=task, seed=5)
        env.call_tool("configure", batch_size=32)
        for _ in range(3):
            env.call_tool("step_interval")
        before, state = env.call_tool("observe"), env.state()
        assert before["step_count"] == state.step_count == 3
        for tool, arguments, message in _invalid_calls(task):
            with pytest.raises(RuntimeError, match=message):
                env.call_tool(tool, **arguments)
            assert env.call_tool("observe") == before, (tool, arguments)
            assert env.state().step_count == 3 and env.state().episode_id == state.episode_id
        # NaN, which JSON cannot carry (the client refuses to send it), as a raw JSON-RPC call on
        # the client's own session
        session_id = env._async._production_session_id
        body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "configure", '
                f'"arguments": {{"kv_budget": NaN}}, "session_id": "{session_id}"}}}}')
        answer = http.post("/mcp", content=body, headers={"content-type": "application/json"}).json()
        assert "finite" in answer.get("error", {}).get("message", ""), answer
        assert env.call_tool("observe") == before
        after = env.call_tool("step_interval")  # the configuration survived the refused calls
        assert after["applied_action"]["batch_size"] == 32 and after["step_count"] == 4
        started = env.call_tool("reset_episode", split="test", index=3)  # a held-out episode evaluate grades
        assert started["episode"] == {"seed": 0, "episode": 3, "stream": "held_out"} and started["step_count"] == 0


def test_readme_mcp_agent_loop_runs(server, capsys):
    block = re.search(r"```py\n((?:(?!```).)*?MCPToolClient.*?)```", README.read_text(), flags=re.S)
    assert block, "README.md needs the MCP agent example (a ```py block with MCPToolClient)"
    code = block.group(1).replace("http://127.0.0.1:8000", server.url)
    exec(compile(code, "README.md[MCP agent]", "exec"), {})
    assert "score" in capsys.readouterr().out
