"""OpenEnv's task API over the server's episodes: splits, task specs, and `reset(split, index)`.

A task spec is one episode a client can start: `{"id": "<split>-<index>", "index", "split",
"task_id", "seed", "episode"}`, episode `episode` of the key stream of `seed` on task `task_id`
(the keys of `pool`'s module docstring: root = jax.random.key(seed), as `POST /sessions` and
gymnasium's `reset(seed=seed)` start them). Two splits, the same for every server:

  * "train": TASKS_PER_SPLIT (1,024) episodes per served task, of the stream of seed 0 (the
    stream the stateless `POST /step` starts);
  * "test": as many, of the stream of seed 1, which no "train" task touches (held out: a policy
    trained on "train" has never seen these episodes).

Index i of a split is task `task_ids[i // 1024]` (in the order the server serves them, GET
/tasks), episode `i % 1024`. (The held-out episodes of `/baseline` and
the README's tables are those of `evaluate.evaluation_key(seed)`, a stream a session cannot
start; the "test" split is the server's own held-out stream.)

`TaskProvider` gives an OpenEnv environment the methods OpenEnv's task protocol names
(`list_splits`, `list_tasks`, `num_tasks`, `get_task`, `get_task_range`) and `task_reset`,
which turns `reset(split=..., index=...)` into the (task, seed, episode) it starts.
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

# split -> (seed of its stream, episodes per served task).
# Both the same size, so that an index's bound does not depend on the split.
SPLITS: dict[str, tuple[int, int]] = {"train": (0, TASKS_PER_SPLIT), "test": (1, TASKS_PER_SPLIT)}
SPLIT_DOCS = {"train": f"episodes 0..{TASKS_PER_SPLIT - 1} of seed 0's stream, per served task",
              "test": f"episodes 0..{TASKS_PER_SPLIT - 1} of seed 1's stream, per served task (held out from train)"}
assert set(typing.get_args(Split)) == set(SPLITS) and TASKS_PER_SPLIT <= MAX_EPISODE


def invalid(loc: list[str | int], msg: str) -> HTTPException:
    """A 422 in the server's error shape (schemas.ErrorResponse)."""
    return HTTPException(422, [{"loc": loc, "msg": msg, "type": "value_error"}])


def split_size(core: ServerCore, split: str, loc: list[str | int]) -> int:
    """How many task specs `split` holds; a 422 at `loc` for an unknown split."""
    if split not in SPLITS:
        raise invalid(loc, f"split={split!r}: the splits are {list(SPLITS)}")
    return SPLITS[split][1] * len(core.task_ids)


def task_spec(core: ServerCore, split: str, index: int, loc: list[str | int]) -> dict[str, Any]:
    """Task spec `index` of `split` (module docstring); a 422 at `loc` (+ "index") out of range."""
    size = split_size(core, split, loc)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise invalid([*loc[:-1], "index"], f"index={index!r}: split {split!r} holds tasks 0..{size - 1}")
    seed, per_task = SPLITS[split]
    return {"id": f"{split}-{index}", "index": index, "split": split,
            "task_id": core.task_ids[index // per_task], "seed": seed, "episode": index % per_task}


class TaskProvider:
    """OpenEnv's task protocol (openenv.core.env_server.interfaces.TaskProvider) for an
    environment holding a `ServerCore` as `self._core`. Side-effect free."""

    _core: ServerCore

    def list_splits(self) -> list[dict[str, Any]]:
        """The splits: name, OpenEnv's type, size, seed and description."""
        return [{"name": name, "type": name, "num_tasks": split_size(self._core, name, ["split"]), "seed": seed,
                 "description": SPLIT_DOCS[name]} for name, (seed, _) in SPLITS.items()]

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
                   episode: int) -> tuple[Any, int | None, int]:
        """(task_id, seed, episode) a reset starts: task spec `index` of `split` when given
        (then neither task_id nor seed may be, nor an episode other than 0), else the arguments."""
        if split is None and index is None:
            return task_id, seed, episode
        if split is None or index is None:
            raise invalid(["body", "split" if split is None else "index"], "give split and index together")
        given = [k for k, v in (("task_id", task_id), ("seed", seed), ("episode", episode or None)) if v is not None]
        if given:
            raise invalid(["body", given[0]], f"{given[0]}: a split's task sets it; give split and index alone")
        spec = task_spec(self._core, split, index, ["body", "split"])
        return spec["task_id"], spec["seed"], spec["episode"]


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

    @router.get(f"{prefix}/splits", tags=["Task API"], summary="The splits: train and test (held out)")
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
