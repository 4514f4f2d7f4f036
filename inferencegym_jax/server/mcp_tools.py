"""MCP tools over one OpenEnv environment, so that an LLM agent can run the server.

Each `openenv_env.InferenceGymEnvironment` carries a FastMCP server with the five tools below
(`build_server`); OpenEnv serves them on `POST /mcp` (JSON-RPC; `openenv/session/create` gives
a session whose environment, core session and episode persist across calls, and OpenEnv's
`MCPToolClient` speaks it), on `WS /mcp` (one environment per connection) and as `{"type":
"mcp"}` messages on `WS /ws`. The tools drive the environment's own core session through its
`reset_async` / `step_async`, the calls `WS /ws` makes, so an episode played with the tools is
the episode `/ws` plays with the same actions, number for number.

    reset_episode(task_id?, seed?, episode?)  start episode `episode` of seed `seed`'s key stream
    reset_episode(split, index)               or task `index` of a split of the task API: "train"
                                              (seed 0's stream) or "test" (the held-out episodes
                                              of evaluate.evaluation_key(0) that /baseline grades)
    observe()                                 the latest observation, nothing advances
    configure(kv_budget?, ...)                set knobs; every later step_interval applies them
    step_interval(kv_budget?, ...)            one control interval with the configured knobs,
                                              or with the values given (for this interval only)
    grade()                                   the episode so far, graded as POST /grader grades it

`reset` and `step` are OpenEnv's reserved tool names (the orchestrator's `/ws` messages; an
`MCPEnvironment` refuses tools so named), hence `reset_episode` and `step_interval`. Knobs never
configured take the task's default; a new episode (by the tool or by a `/ws` reset) starts with
no knob configured. Every tool answers text an LLM reads (each observation field with its unit)
and structured content: the raw numbers beside a table of name, value, unit and meaning.

An invalid call is an MCP tool error (`isError`; over OpenEnv's HTTP `/mcp` a JSON-RPC error
whose message is the tool's) and changes nothing in the session: a knob out of its range or off
its type, an unknown task, a seed or episode out of range, an unknown split, an index out of
its split, a split with a task, seed or episode, `observe`, `configure`,
`step_interval` or `grade` before an episode was started (no default episode is started for
them, unlike OpenEnv's stateless `POST /step`), and `step_interval` after the horizon.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import HTTPException
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools import FunctionTool, ToolResult
from mcp.types import ToolAnnotations  # fastmcp's own dependency: the type its tools take
from pydantic import Field

from inferencegym_jax.actions import GRID, KNOB_RANGES, KNOBS
from inferencegym_jax.observation import FEATURES
from inferencegym_jax.server.core import MAX_SEED, ServerCore
from inferencegym_jax.server.schemas import (
    KNOB_DOCS,
    KNOB_UNITS,
    MAX_EPISODE,
    TASKS_PER_SPLIT,
    ServingAction,
    ServingObservation,
    Split,
)
from inferencegym_jax.server.sessions import Session
from inferencegym_jax.server.task_api import SPLIT_DOCS

SERVER_NAME = "inferencegym"


def knob_doc(name: str) -> str:
    """A knob's unit, meaning, range and grid (actions.KNOB_RANGES, actions.GRID, schemas)."""
    lo, hi = KNOB_RANGES[KNOBS.index(name)]
    grid = GRID[KNOBS.index(name)]
    values = "continuous" if name == "kv_budget" else f"grid {[int(v) for v in grid]}"
    return f"[{KNOB_UNITS[name]}] {KNOB_DOCS[name]}; in [{lo:g}, {hi:g}], {values}"


def _knob(name: str, kind: type) -> Any:
    lo, hi = KNOB_RANGES[KNOBS.index(name)]
    return Annotated[kind | None, Field(ge=lo, le=hi, allow_inf_nan=False, description=knob_doc(name))]


if TYPE_CHECKING:  # the argument types as mypy sees them; at run time with their bounds and docs
    KvBudget = float | None
    SpecLength = int | None
    BatchSize = int | None
    PrefillDisagg = int | None
    QuantTier = int | None
    Seed = int | None
    TaskId = str | int | None
    Episode = int
    SplitName = str | None
    Index = int | None
else:
    # The knob arguments of configure and step_interval: omitted (null) leaves the knob as it is.
    KvBudget = _knob("kv_budget", float)
    SpecLength = _knob("spec_length", int)
    BatchSize = _knob("batch_size", int)
    PrefillDisagg = _knob("prefill_disagg", int)
    QuantTier = _knob("quant_tier", int)
    TaskId = Annotated[str | int | None, Field(description="a served task: id, gymnasium id or number "
                                                           "(GET /tasks); omitted: the first served")]
    Seed = Annotated[int | None, Field(ge=0, le=MAX_SEED, description="seed of the episode's key stream; "
                                                                       "omitted: a random one")]
    Episode = Annotated[int, Field(ge=0, le=MAX_EPISODE, description="episode of that stream")]
    SplitName = Annotated[Split | None, Field(description=(
        "a split of the task API, with `index` and without task_id, seed or episode: "
        + "; ".join(f"{k}: {v}" for k, v in SPLIT_DOCS.items())))]
    Index = Annotated[int | None, Field(ge=0, le=MAX_EPISODE, description=(
        f"a task's index in `split`: task {TASKS_PER_SPLIT} * k + e is episode e of the k-th served task"))]


class ToolHost(Protocol):
    """What the tools drive: an OpenEnv environment holding one core session (openenv_env)."""

    knobs: dict[str, Any]  # knob -> value configured for the next intervals (cleared at a reset)

    @property
    def core(self) -> ServerCore: ...

    @property
    def session(self) -> Session | None: ...

    @property
    def latest(self) -> ServingObservation | None: ...

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task_id: Any = None,
                          episode: int = 0, split: str | None = None,
                          index: int | None = None) -> ServingObservation: ...

    async def step_async(self, action: Any, timeout_s: float | None = None) -> Any: ...


# FastMCP logs every refused call (its argument checks at WARNING, a ToolError at the error's
# level): like a 422, which `serve` does not log, a refused call is the client's error, not the
# server's. Errors a tool did not expect are still logged, with their traceback.
logging.getLogger("fastmcp.server.server").setLevel(logging.ERROR)


def refused(message: str) -> ToolError:
    """The tool error of an invalid call (not logged: the logger above)."""
    return ToolError(message, log_level=logging.INFO)


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def observation_content(obs: ServingObservation, horizon: int) -> dict[str, Any]:
    """An observation as structured content: the raw numbers (`observation`: the fields of /ws's
    observation) beside `fields`, each field's name, value, unit and meaning."""
    raw = {name: getattr(obs, name) for name, _ in FEATURES}
    return {
        "task_id": obs.task_id, "step_count": obs.step_count, "horizon": horizon, "done": obs.done,
        "reward": obs.reward, "reward_components": obs.reward_components, "observation": raw,
        "fields": [{"name": name, "value": raw[name], "unit": f.unit, "meaning": f.doc} for name, f in FEATURES],
        "metrics": obs.metrics, "applied_action": obs.applied_action, "clipped": obs.clipped,
    }


def observation_text(content: Mapping[str, Any]) -> str:
    """The observation as lines an LLM reads: where the episode is, the reward, every field with
    its unit, and the knobs the interval applied."""
    reward = "none yet (episode start)" if content["reward"] is None else _fmt(content["reward"])
    if content["reward_components"]:
        reward += " (terms: " + ", ".join(f"{k} {_fmt(v)}" for k, v in content["reward_components"].items()) + ")"
    lines = [f"{content['task_id']}: interval {content['step_count']} of {content['horizon']}"
             f"{' (episode over)' if content['done'] else ''}; reward {reward}"]
    lines += [f"- {f['name']} = {_fmt(f['value'])} {f['unit']} ({f['meaning']})" for f in content["fields"]]
    if content["applied_action"]:
        applied = ", ".join(f"{k} {_fmt(v)} {KNOB_UNITS[k]}" for k, v in content["applied_action"].items())
        lines.append(f"knobs applied: {applied}; clipped or masked: {content['clipped'] or 'none'}")
    return "\n".join(lines)


def knob_table(host: ToolHost, session: Session) -> list[dict[str, Any]]:
    """The knobs the next interval applies: value, unit, whether configured or the task's
    default, and whether the task uses the knob (a masked one stays at its default)."""
    task = next(t for t in host.core.task_table if t["id"] == session.task_id)
    return [{"name": k, "value": host.knobs.get(k, task["default_action"][k]), "unit": KNOB_UNITS[k],
             "source": "configured" if k in host.knobs else "task default", "active": k in task["active_knobs"]}
            for k in KNOBS]


def _started(host: ToolHost) -> tuple[Session, ServingObservation]:
    session, latest = host.session, host.latest
    if session is None or latest is None or not session.started or session.closed:
        raise refused("no episode started: call reset_episode first")
    return session, latest


def _result(content: dict[str, Any], text: str) -> ToolResult:
    return ToolResult(content=text, structured_content=content)


def _given(**knobs: Any) -> dict[str, Any]:
    return {k: v for k, v in knobs.items() if v is not None}


class ToolServer(FastMCP):
    """The FastMCP server of one environment: the shared tools find it, and so their host, in
    their request's Context (tools shared by every server: FastMCP parses a tool's signature
    once, and caches per function what it builds to validate calls)."""

    def __init__(self, host: ToolHost):
        super().__init__(SERVER_NAME, instructions=__doc__)
        self.host = host


def _host(ctx: Context) -> ToolHost:
    server = ctx.fastmcp
    if not isinstance(server, ToolServer):  # pragma: no cover - the tools are only on ToolServers
        raise ToolError("this tool needs an InferenceGym environment's server")
    return server.host


def _observed(host: ToolHost, obs: ServingObservation, session: Session) -> ToolResult:
    content = observation_content(obs, session.horizon)
    content["next_knobs"] = knob_table(host, session)
    # which episode: of seed `seed`'s plain stream, or held_out (the test split's, evaluate's)
    content["episode"] = {"seed": session.seed, "episode": session.episode, "stream": session.stream}
    return _result(content, observation_text(content))


def _serving_task(core: ServerCore, task_id: Any) -> None:
    """Refuse a fleet or reservation task (the tools play the serving tasks' knobs); any other
    bad task id is the environment's to refuse."""
    try:
        target, day = core.resolve_any(core.default_task if task_id is None else task_id)
    except ValueError:
        return
    if day:
        raise refused(f"task_id={target!r} is a fleet or reservation task: the MCP tools play the serving tasks "
                      f"{list(core.task_ids)}; play it over WS /ws or the /sessions routes")


async def reset_episode(ctx: Context, task_id: TaskId = None, seed: Seed = None, episode: Episode = 0,
                        split: SplitName = None, index: Index = None) -> ToolResult:
    host = _host(ctx)
    if split is None and index is None:
        _serving_task(host.core, task_id)
    try:  # the environment checks the task, split and index before it touches its session
        obs = await host.reset_async(seed=seed, task_id=task_id, episode=episode, split=split, index=index)
    except (ValueError, HTTPException) as err:
        raise refused(_message(err)) from None
    session, _ = _started(host)
    return _observed(host, obs, session)


async def observe(ctx: Context) -> ToolResult:
    host = _host(ctx)
    session, latest = _started(host)
    return _observed(host, latest, session)


async def configure(ctx: Context, kv_budget: KvBudget = None, spec_length: SpecLength = None,
                    batch_size: BatchSize = None, prefill_disagg: PrefillDisagg = None,
                    quant_tier: QuantTier = None) -> ToolResult:
    host = _host(ctx)
    session, _ = _started(host)
    host.knobs.update(_given(kv_budget=kv_budget, spec_length=spec_length, batch_size=batch_size,
                             prefill_disagg=prefill_disagg, quant_tier=quant_tier))
    table = knob_table(host, session)
    text = "the next intervals apply: " + ", ".join(
        f"{k['name']} {_fmt(k['value'])} {k['unit']} ({k['source']}{'' if k['active'] else ', masked'})"
        for k in table)
    return _result({"task_id": session.task_id, "next_knobs": table}, text)


async def step_interval(ctx: Context, kv_budget: KvBudget = None, spec_length: SpecLength = None,
                        batch_size: BatchSize = None, prefill_disagg: PrefillDisagg = None,
                        quant_tier: QuantTier = None) -> ToolResult:
    host = _host(ctx)
    session, _ = _started(host)
    knobs = {**host.knobs, **_given(kv_budget=kv_budget, spec_length=spec_length, batch_size=batch_size,
                                    prefill_disagg=prefill_disagg, quant_tier=quant_tier)}
    try:
        obs = await host.step_async(ServingAction(**knobs))
    except (ValueError, HTTPException) as err:
        raise refused(_message(err)) from None
    return _observed(host, obs, session)


async def grade(ctx: Context) -> ToolResult:
    host = _host(ctx)
    session, _ = _started(host)
    result = host.core.grade(session.task_id, list(session.log))
    text = (f"{result['task_id']}: score {_fmt(result['score'])} over {result['intervals']} intervals "
            f"(of {session.horizon}); {result['feedback']}")
    return _result(result, text)


TOOLS = (reset_episode, observe, configure, step_interval, grade)
TOOL_NAMES = tuple(tool.__name__ for tool in TOOLS)


def _message(err: Exception) -> str:
    """The message of a refused call (an HTTPException's detail, whatever its shape)."""
    if isinstance(err, HTTPException):
        detail = err.detail
        if isinstance(detail, list):  # [{"loc", "msg", "type"}, ...]
            return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
        return str(detail)
    return str(err)


def _descriptions(core: ServerCore) -> dict[str, str]:
    """Each tool's description, with the served tasks' horizons, knobs in use and defaults."""
    served = "; ".join(f"{t['id']} ({t['name']}, {t['horizon_intervals']} intervals of {t['interval_s']:g} s, "
                       f"knobs used: {', '.join(t['active_knobs'])})" for t in core.task_table)
    knobs = "\n".join(f"- {k}: {knob_doc(k)}" for k in KNOBS)
    observed = ("Returns every observation field with its unit (queue depth, TTFT/TPOT latencies, KV "
                "occupancy, SLO violation rate, cost, ...), the reward in [-1, 1] and its terms, the "
                "interval's serving metrics, the knobs applied and those clipped, and the knobs the next "
                "interval applies.")
    return {
        "reset_episode": f"Start an episode (any episode in progress ends): episode `episode` of seed `seed` "
                         "on task `task_id`, or task `index` of `split` (train, or test: the held-out episodes "
                         f"the project's evaluation grades). Tasks served: {served}. "
                         f"Knobs configured before are dropped. {observed}",
        "observe": f"The latest observation again; nothing advances. {observed}",
        "configure": "Set serving knobs; every later step_interval applies them until changed (omitted "
                     "knobs keep their value; never configured: the task's default; knobs a task does not "
                     f"use stay at its default). The knobs:\n{knobs}",
        "step_interval": "Advance one control interval (1 s of serving) with the configured knobs; knob values "
                         "given here apply to this interval only, over the configured ones. An error after "
                         f"the episode's last interval (reset_episode starts another). {observed}",
        "grade": "Grade the episode so far as POST /grader does: score in [0, 1], its breakdown, served "
                 "fraction, SLO attainment, OOM-free fraction, cost per 1k tokens, knob changes, feedback.",
    }


def non_finite(arguments: Mapping[str, Any] | None) -> list[str]:
    """The arguments whose value is a NaN or infinite float."""
    return [k for k, v in (arguments or {}).items() if isinstance(v, float) and not math.isfinite(v)]


class FiniteClient(Client):
    """FastMCP's in-process client of an environment's tools (what OpenEnv's `/mcp` calls), refusing
    NaN and infinite arguments: its JSON-RPC encoding would turn them into null, an omitted
    argument, so `configure(kv_budget=NaN)` would pass as `configure()`."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None,
                        **kwargs: Any) -> Any:
        if arguments is not None and not isinstance(arguments, dict):
            raise refused(f"{name}: the arguments must be an object, not {type(arguments).__name__}")
        bad = non_finite(arguments)
        if bad:
            raise refused(f"{name}: {', '.join(bad)} must be a finite number")
        return await super().call_tool(name, arguments, **kwargs)


@functools.lru_cache(maxsize=16)
def tool_templates(core: ServerCore) -> tuple[FunctionTool, ...]:
    """The five tools as FastMCP parses them (schemas; descriptions with `core`'s tasks), once per
    core: parsing costs ~5 ms, and OpenEnv makes an environment per stateless request."""
    docs = _descriptions(core)
    reading = ToolAnnotations(readOnlyHint=True, idempotentHint=True)
    return tuple(FunctionTool.from_function(tool, name=tool.__name__, description=docs[tool.__name__],
                                            annotations=reading if tool in (observe, grade) else None)
                 for tool in TOOLS)


def build_server(host: ToolHost) -> ToolServer:
    """A FastMCP server with the five tools over `host` (module docstring)."""
    server = ToolServer(host)
    for template in tool_templates(host.core):
        server.add_tool(template)
    return server
