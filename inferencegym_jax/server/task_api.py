"""OpenEnv's task API over the server's episodes: splits, task specs, and `reset(split, index)`.

A task spec is one episode a client can start: `{"id": "<split>-<index>", "index", "split",
"task_id", "seed", "episode", "stream"}`, episode `episode` of the key stream `stream` of seed
`seed` on task `task_id` (the keys of `pool`'s module docstring). Two splits, the same for every
server, both of seed 0:

  * "train": TASKS_PER_SPLIT (1,024) episodes per served task of the plain stream, root =
    jax.random.key(0): the episodes `POST /sessions {"seed": 0, "episode": i}` and gymnasium's
    `reset(seed=0)` start, and the stateless `POST /step` (episode 0). The project's trainers
    draw their keys from evaluate.training_key(seed) = fold_in(key(seed), TRAIN_STREAM), another
    stream: "train" is not the trainers' own episodes, only episodes disjoint from "test".
  * "test": as many of the held-out stream, root = evaluate.evaluation_key(0) =
    fold_in(key(0), EVAL_STREAM): test index i of a task is exactly episode i that
    `evaluate.evaluate(env, params, policy, evaluate.evaluation_key(0), n, task)` (n > i) grades,
    the held-out episodes of `/baseline` (seed 0) and of the README's tables, so a client
    playing it with a policy gets that episode's trajectory, reward for reward to float32
    rounding (the pool and evaluate's scan are two compiled programs; tests/test_server_contract.py).
    Disjoint from "train" and from every trainer's key stream.

Index i of a split is task `task_ids[i // 1024]` (in the order the server serves them, GET
/tasks), episode `i % 1024`. `reset(split=..., index=i)` (POST /reset, /ws, the MCP tool
`reset_episode`) and `POST /sessions {"split", "index"}` start it; the session's state says its
`stream` ("plain" or "held_out").

`TaskProvider` gives an OpenEnv environment the methods OpenEnv's task protocol names
(`list_splits`, `list_tasks`, `num_tasks`, `get_task`, `get_task_range`) and `task_reset`,
which turns `reset(split=..., index=...)` into the (task, seed, episode, held_out) it starts
(`reset_target`; `POST /sessions {"split", "index"}` uses it too).
`add_task_routes` serves them over HTTP at OpenEnv's paths (`/inferencegym/splits`, ...), with
typed bodies and the server's error shape.
"""

from __future__ import annotations

import typing
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from inferencegym_jax.server.core import ServerCore
from inferencegym_jax.server.schemas import MAX_EPISODE, TASKS_PER_SPLIT, Split, WholeNumbers
from inferencegym_jax.server.sessions import HELD_OUT, PLAIN, Stream

# split -> (seed, stream (sessions.PLAIN or HELD_OUT)); TASKS_PER_SPLIT episodes per served task each,
# so that an index's bound does not depend on the split.
SPLITS: dict[str, tuple[int, Stream]] = {"train": (0, PLAIN), "test": (0, HELD_OUT)}
SPLIT_DOCS = {"train": f"episodes 0..{TASKS_PER_SPLIT - 1} of seed 0's plain stream (jax.random.key(0)), "
                       "per served task",
              "test": f"episodes 0..{TASKS_PER_SPLIT - 1} of the held-out stream evaluate.evaluation_key(0), per "
                      "served task: the episodes /baseline and the README's tables grade (disjoint from train)"}
assert set(typing.get_args(Split)) == set(SPLITS) and TASKS_PER_SPLIT <= MAX_EPISODE


def invalid(loc: list[str | int], msg: str) -> HTTPException:
    """A 422 in the server's error shape (schemas.ErrorResponse)."""
    return HTTPException(422, [{"loc": loc, "msg": msg, "type": "value_error"}])


def split_size(core: ServerCore, split: str, loc: list[str | int]) -> int:
    """How many task specs `split` holds; a 422 at `loc` for an unknown split."""
    if split not in SPLITS:
        raise invalid(loc, f"split={split!r}: the splits are {list(SPLITS)}")
    return TASKS_PER_SPLIT * len(core.task_ids)


def task_spec(core: ServerCore, split: str, index: int, loc: list[str | int]) -> dict[str, Any]:
    """Task spec `index` of `split` (module docstring); a 422 at `loc` (+ "index") out of range."""
    size = split_size(core, split, loc)
    if size == 0:
        raise invalid([*loc[:-1], "index"], f"index={index!r}: split {split!r} is empty (its episodes are the "
                                            "serving tasks', and this server serves none)")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise invalid([*loc[:-1], "index"], f"index={index!r}: split {split!r} holds tasks 0..{size - 1}")
    seed, stream = SPLITS[split]
    return {"id": f"{split}-{index}", "index": index, "split": split,
            "task_id": core.task_ids[index // TASKS_PER_SPLIT], "seed": seed, "episode": index % TASKS_PER_SPLIT,
            "stream": stream}


class TaskProvider:
    """OpenEnv's task protocol (openenv.core.env_server.interfaces.TaskProvider) for an
    environment holding a `ServerCore` as `self._core`. Side-effect free."""

    _core: ServerCore

    def list_splits(self) -> list[dict[str, Any]]:
        """The splits: name, OpenEnv's type, size, seed, stream and description."""
        return [{"name": name, "type": name, "num_tasks": split_size(self._core, name, ["split"]), "seed": seed,
                 "stream": stream, "description": SPLIT_DOCS[name]} for name, (seed, stream) in SPLITS.items()]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task spec of `split`."""
        return self.get_task_range(split)

    def num_tasks(self, split: str) -> int:
        """How many task specs `split` holds."""
        return split_size(self._core, split, ["body", "split"])

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """Task spec `index` of `split`."""
        return task_spec(self._core, split, index, ["body", "split"])

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Task specs start..stop-1 of `split`, as Python's slice bounds take them."""
        indices = range(split_size(self._core, split, ["body", "split"]))[start:stop]
        return [task_spec(self._core, split, i, ["body", "split"]) for i in indices]

    def task_reset(self, split: str | None, index: int | None, task_id: Any, seed: int | None,
                   episode: int) -> tuple[Any, int | None, int, bool]:
        """`reset_target` over this environment's core."""
        return reset_target(self._core, split, index, task_id, seed, episode)


def reset_target(core: ServerCore, split: str | None, index: int | None, task_id: Any, seed: int | None,
                 episode: int) -> tuple[Any, int | None, int, bool]:
    """(task_id, seed, episode, held_out) a reset starts: task spec `index` of `split` when given
    (then neither task_id nor seed may be, nor an episode other than 0), else the arguments on
    the plain stream. A 422 naming the body's field otherwise."""
    if split is None and index is None:
        return task_id, seed, episode, False
    if split is None or index is None:
        raise invalid(["body", "split" if split is None else "index"], "give split and index together")
    given = [k for k, v in (("task_id", task_id), ("seed", seed), ("episode", episode or None)) if v is not None]
    if given:
        raise invalid(["body", given[0]], f"{given[0]}: a split's task sets it; give split and index alone")
    spec = task_spec(core, split, index, ["body", "split"])
    return spec["task_id"], spec["seed"], spec["episode"], spec["stream"] == HELD_OUT


class SplitBody(BaseModel):
    """A split's name."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"split": "test"}]})

    split: Split = Field(..., description="a split: " + "; ".join(f"{k}: {v}" for k, v in SPLIT_DOCS.items()))


class TaskBody(SplitBody, WholeNumbers):
    """A split and an index in it."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"split": "test", "index": 3}]})

    index: int = Field(..., ge=0, description="index in the split, from 0 (POST .../num_tasks)")


class TaskRangeBody(SplitBody, WholeNumbers):
    """A split and slice bounds (Python's: negative counts from the end)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"split": "train", "start": 0, "stop": 4}]})

    start: int | None = Field(None, ge=-(2**31), le=2**31, description="first index (default 0)")
    stop: int | None = Field(None, ge=-(2**31), le=2**31, description="one past the last index (default: the end)")


def add_task_routes(app: FastAPI, core: ServerCore, env_name: str) -> None:
    """OpenEnv's task routes under /{env_name}/ over `core` (module docstring), replacing the
    ones `create_app` adds (which take any env name and answer 501 for ours)."""
    provider = TaskProvider()
    provider._core = core
    app.router.routes[:] = [r for r in app.router.routes if not getattr(r, "path", "").startswith("/{env_name}/")]
    router, prefix = app.router, f"/{env_name}"  # on the app itself, where `contract` finds them

    @router.get(f"{prefix}/splits", tags=["Task API"], summary="The splits: train and test (held-out evaluation)")
    async def list_splits() -> list[dict[str, Any]]:
        return provider.list_splits()

    @router.post(f"{prefix}/tasks", tags=["Task API"], summary="Every task spec of a split")
    async def list_tasks(body: SplitBody) -> dict[str, Any]:
        return {"tasks": provider.list_tasks(body.split), "env_name": env_name}

    @router.post(f"{prefix}/num_tasks", tags=["Task API"], summary="How many task specs a split holds")
    async def num_tasks(body: SplitBody) -> dict[str, Any]:
        return {"num_tasks": provider.num_tasks(body.split)}

    @router.post(f"{prefix}/task", tags=["Task API"], summary="One task spec: what reset(split, index) starts")
    async def get_task(body: TaskBody) -> dict[str, Any]:
        return {"task": provider.get_task(body.split, body.index)}

    @router.post(f"{prefix}/task_range", tags=["Task API"], summary="The task specs of a slice of a split")
    async def get_task_range(body: TaskRangeBody) -> dict[str, Any]:
        return {"tasks": provider.get_task_range(body.split, body.start, body.stop)}
