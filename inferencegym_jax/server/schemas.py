"""The server's typed messages: OpenEnv's Action / Observation / State, and the HTTP bodies.

Every field is bounded and documented with its unit; the bounds come from the declarations
they describe (actions.KNOB_RANGES, observation.FEATURES, graders.METRIC_FIELDS), so they
cannot drift apart. Every model forbids unknown fields, and knob values and log numbers must
be finite JSON numbers of the right type (strict: "3" is not 3, true is not 1), so bad input is
a 422 that names the field. An integer field takes what JSON Schema counts as an integer: 4 and
4.0 (`WholeNumbers`). A field whose schema allows null takes null as "omitted"; a field whose
schema does not (StepSession's action and policy) refuses it.

Every 4xx body is `ErrorResponse`: FastAPI's `{"detail": [{"loc", "msg", "type"}, ...]}`.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema

from inferencegym_jax import actions
from inferencegym_jax.actions import KNOB_RANGES, KNOBS
from inferencegym_jax.graders import METRIC_FIELDS
from inferencegym_jax.observation import FEATURES
from inferencegym_jax.server.core import MAX_LOG_INTERVALS, MAX_SEED

KNOB_DOCS = {
    "kv_budget": "fraction of the HBM after weights and reserve given to the KV cache",
    "spec_length": f"speculative draft tokens per step, snapped to {list(actions.GRID[1])}",
    "batch_size": "max concurrent sequences, snapped to the grid " + str(list(actions.BATCH_SIZES)),
    "prefill_disagg": "1: prefill on a second GPU, 0: on the decode GPU",
    "quant_tier": "weight precision: 0 FP16, 1 INT8 (FP8 on H100), 2 INT4",
}
KNOB_UNITS = {"kv_budget": "fraction", "spec_length": "tokens", "batch_size": "sequences",
              "prefill_disagg": "bool", "quant_tier": "tier"}
STRICT = ConfigDict(extra="forbid", strict=True)


def _takes_int(annotation: Any) -> bool:
    """Whether a field's type is int or a union with int (bool is not an int here)."""
    return annotation is int or int in typing.get_args(annotation)


class WholeNumbers(BaseModel):
    """A model whose integer fields take integer-valued floats (4.0 -> 4), as JSON Schema counts
    them integers; other floats, booleans and strings stay refused (the fields are strict)."""

    @pydantic.model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        ints = {name for name, field in cls.model_fields.items() if _takes_int(field.annotation)}
        return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in data.items()}


class ErrorDetail(BaseModel):
    """One error of a 4xx answer: `loc` is where ("body", "query" or "path", then the field's
    path as the client sent it: ["body", "action", "batch_size"]), `msg` what is wrong, `type`
    its kind (pydantic's error types for a 422, "session_not_found", "session_gone",
    "episode_done", "body_too_large", "no_free_slot", "not_found", "method_not_allowed")."""

    model_config = ConfigDict(extra="allow")

    loc: list[str | int] = Field(..., description="where: body / query / path, then the field path")
    msg: str = Field(..., description="what is wrong")
    type: str = Field(..., description="the error's kind")


class ErrorResponse(BaseModel):
    """The body of every 4xx answer (FastAPI's validation-error shape)."""

    detail: list[ErrorDetail]


def _knob_field(name: str, required: bool) -> tuple[Any, Any]:
    lo, hi = KNOB_RANGES[KNOBS.index(name)]
    # Values as the client sends them are strict JSON ints for integer knobs; a grader record
    # holds the applied values as float32 gives them (64.0), so required knobs are floats.
    kind = float if name == "kv_budget" or required else int
    doc = f"[{KNOB_UNITS[name]}] {KNOB_DOCS[name]}, in [{lo:g}, {hi:g}]"
    if not required:
        doc += "; omitted or null: the task's default (GET /tasks)"
    field = Field(... if required else None, ge=lo, le=hi, allow_inf_nan=False, strict=True, description=doc)
    return (kind if required else kind | None), field


if TYPE_CHECKING:  # models whose fields are made at run time, from KNOBS, FEATURES, METRIC_FIELDS

    class KnobValues(BaseModel): ...

    class AppliedKnobs(BaseModel): ...

    class _ObservationFields(Observation): ...

    class GraderMetrics(BaseModel): ...

else:
    # Knob values; omitted knobs take the task default, knobs the task masks are reported clipped.
    class _StrictWholeNumbers(WholeNumbers):
        model_config = STRICT

    KnobValues = pydantic.create_model(
        "KnobValues", __base__=_StrictWholeNumbers, **{k: _knob_field(k, required=False) for k in KNOBS})
    # All five knobs, as a grader record has them.
    AppliedKnobs = pydantic.create_model(
        "AppliedKnobs", __config__=STRICT, **{k: _knob_field(k, required=True) for k in KNOBS})


# JSON Schema of "not both": either no policy, or no knob value (null counts as omitted).
NOT_BOTH: JsonDict = {"anyOf": [{"properties": {"policy": {"type": "null"}}},
                      {"properties": {k: {"type": "null"} for k in KNOBS}}]}


class ServingAction(WholeNumbers, Action):
    """One interval's action over OpenEnv: knob values in physical units, or a server policy.

    Give knob fields (omitted ones take the task default; values are clipped to the grid and
    knobs the task masks are reported in `clipped`), or `policy`: the name of a policy the
    server runs for this interval (GET /tasks lists them), not both.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, json_schema_extra=NOT_BOTH)

    kv_budget: float | None = _knob_field("kv_budget", False)[1]
    spec_length: int | None = _knob_field("spec_length", False)[1]
    batch_size: int | None = _knob_field("batch_size", False)[1]
    prefill_disagg: int | None = _knob_field("prefill_disagg", False)[1]
    quant_tier: int | None = _knob_field("quant_tier", False)[1]
    policy: str | None = Field(None, max_length=64, description="a server policy to act instead (GET /tasks)")

    @pydantic.model_validator(mode="after")
    def _not_both(self) -> ServingAction:
        if self.policy is not None and any(v is not None for v in self.knobs().values()):
            raise ValueError("give knob values or a policy, not both")
        return self

    def knobs(self) -> dict[str, Any]:
        """The knob values given (None for omitted ones)."""
        return {k: getattr(self, k) for k in KNOBS}


def _obs_field(name: str, feature: Any) -> tuple[Any, Any]:
    kind = float if feature.size == 1 else list[float]
    shape = "" if feature.size == 1 else f" ({feature.size} values)"
    return kind, Field(0.0 if feature.size == 1 else [0.0] * feature.size,
                       description=f"[{feature.unit}] {feature.doc}{shape}")


if not TYPE_CHECKING:
    _ObservationFields = pydantic.create_model(
        "_ObservationFields", __base__=Observation, **{n: _obs_field(n, f) for n, f in FEATURES})


class ServingObservation(_ObservationFields):
    """What the agent sees after a reset or a step: the observation's fields in their units,
    plus the reward's terms, the interval's serving metrics and the knobs applied."""

    reward_components: dict[str, float] = Field(default_factory=dict, description="the reward's terms (reward.reward)")
    metrics: dict[str, Any] = Field(
        default_factory=dict, description="serving.IntervalMetrics of the interval, with units as GET /info lists")
    applied_action: dict[str, float] = Field(default_factory=dict, description="knob -> value applied [knob units]")
    clipped: list[str] = Field(default_factory=list, description="knobs clipped, snapped or masked in this step")
    step_count: int = Field(0, description="[intervals] stepped in the episode")
    task_id: str = Field("", description="the task of the episode")


class ServingState(State):
    """A session's episode: OpenEnv's episode_id and step_count, and the rest of its record."""

    task_id: str = Field("", description="the task of the episode")
    seed: int = Field(0, description="seed of the episode's key stream, [0, 2**32 - 1]")
    episode: int = Field(0, description="episode of that stream")
    stream: Literal["plain", "held_out"] = Field(
        "plain", description="the key stream: plain (root jax.random.key(seed)) or held_out (root "
                             "evaluate.evaluation_key(seed), the held-out episodes evaluate grades: split test)")
    horizon: int = Field(0, description="[intervals] per episode")
    done: bool = Field(False, description="the episode reached its horizon")
    cumulative_reward: float = Field(0.0, description="sum of the episode's rewards")


MAX_EPISODE = 2**31 - 1


# The task API's splits (task_api) and how many episodes each holds per served task.
Split = Literal["train", "test"]
TASKS_PER_SPLIT = 1024
# JSON Schema of a task of the task API: split and index, and no task_id, seed or episode.
SPLIT_FORM: JsonDict = {"required": ["split", "index"], "properties": {
    "split": {"type": "string"}, "index": {"type": "integer"}, "task_id": {"type": "null"}, "seed": {"type": "null"},
    "episode": {"const": 0}}}
# JSON Schema of a reset's two forms: no split and index, or SPLIT_FORM.
RESET_FORMS: JsonDict = {"anyOf": [{"properties": {"split": {"type": "null"}, "index": {"type": "null"}}}, SPLIT_FORM]}
# JSON Schema of a new session's two forms: a task_id and no split and index, or SPLIT_FORM.
CREATE_FORMS: JsonDict = {"anyOf": [
    {"required": ["task_id"], "properties": {"task_id": {"not": {"type": "null"}}, "split": {"type": "null"},
                                             "index": {"type": "null"}}},
    SPLIT_FORM,
]}


class ResetSession(WholeNumbers):
    """Start an episode: episode `episode` of the key stream of `seed` (random when omitted)."""

    model_config = STRICT

    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="seed of the key stream; omitted or null: random")
    episode: int = Field(0, ge=0, le=MAX_EPISODE, description="episode of the stream")
    episode_id: str | None = Field(None, max_length=255, description="a label for the episode")


class CreateSession(ResetSession):
    """A new session of a served task, reset at once: episode `episode` of seed `seed`'s stream on
    `task_id`, or task spec `index` of `split` (the task API's: "test" is the held-out episodes
    evaluate grades), then without task_id, seed or episode."""

    model_config = ConfigDict(json_schema_extra=CREATE_FORMS)

    task_id: str | int | None = Field(None, description="a served task: id, gymnasium id or number (GET /tasks); "
                                                         "required unless split and index are given")
    split: Split | None = Field(None, description="a split of the task API (GET /inferencegym/splits)")
    index: int | None = Field(None, ge=0, le=MAX_EPISODE, description="a task's index in `split`")


class StepSession(BaseModel):
    """One interval: `action` (knob values) or `policy` (a server policy), exactly one of them
    (neither may be null: leave the other out)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "oneOf": [{"required": ["action"]}, {"required": ["policy"]}]})

    action: KnobValues | SkipJsonSchema[None] = Field(
        None, description="knob values; omitted knobs take the task default")
    policy: str | SkipJsonSchema[None] = Field(None, max_length=64, description="a server policy (GET /tasks)")

    @pydantic.field_validator("action", "policy", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("null is not allowed: leave the field out")
        return value

    @pydantic.model_validator(mode="after")
    def _one_of(self) -> StepSession:
        if (self.action is None) == (self.policy is None):
            raise ValueError("give exactly one of action and policy")
        return self


if not TYPE_CHECKING:
    GraderMetrics = pydantic.create_model(
        "GraderMetrics", __config__=STRICT,
        **{name: (float, Field(..., ge=0.0, allow_inf_nan=False, description=f"IntervalMetrics.{name}"))
           for name in METRIC_FIELDS})


class IntervalRecord(BaseModel):
    """One interval of an episode log (GET /sessions/{id}/log gives them)."""

    model_config = STRICT

    metrics: GraderMetrics
    action: AppliedKnobs
    offered_tokens: float = Field(..., ge=0.0, allow_inf_nan=False,
                                  description="[tokens] output tokens of the requests that arrived")


class GraderRequest(WholeNumbers):
    """An episode log to grade with a task's grader."""

    model_config = STRICT

    task_id: str | int = Field(..., description="a served task (GET /tasks)")
    intervals: list[IntervalRecord] = Field(..., max_length=MAX_LOG_INTERVALS, description="the episode's intervals")


class OpenEnvReset(ResetSession):
    """OpenEnv's POST /reset: episode `episode` of seed `seed`'s stream on task `task_id` (the
    first served task when omitted), or task spec `index` of `split` (OpenEnv's task API: POST
    /inferencegym/task), then without task_id, seed or episode."""

    model_config = ConfigDict(json_schema_extra=RESET_FORMS)

    task_id: str | int | None = Field(None, description="a served task: id, gymnasium id or number (GET /tasks)")
    split: Split | None = Field(None, description="a split of the task API (GET /inferencegym/splits)")
    index: int | None = Field(None, ge=0, le=MAX_EPISODE, description="a task's index in `split`")


class OpenEnvStep(BaseModel):
    """OpenEnv's POST /step: one interval's action, and OpenEnv's optional timeout and request id."""

    model_config = ConfigDict(extra="forbid")

    action: ServingAction = Field(..., description="knob values in physical units, or a server policy")
    timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False, strict=True,
                                    description="[s] OpenEnv's action timeout (a step takes milliseconds)")
    request_id: str | None = Field(None, max_length=255, strict=True, description="a label for the request")


# ----------------------------------------------------------------------------- the day tasks' messages
#
# A server that serves day tasks (server.day_tasks: fleet and reservation) takes their actions and
# day_split in the same bodies: its models are the ones above plus the fields below, under the
# same names (so the OpenAPI document's patches and examples find them); a server of serving
# tasks only keeps the models above, unchanged (`body_models`).

DaySplit = Literal["train", "heldout"]
DAY_SPLIT_DOC = ("fleet and reservation tasks only: the split of days (reservation) or episode windows (fleet) "
                 "the episode comes from, ig.make(task_id, split=...); omitted or null: train")
HOURS_PER_DAY = 24  # entries of a reservation action (fleet.reservation_day.HOURS_PER_DAY)


def _day_action_fields() -> dict[str, Any]:
    """The day tasks' action entries (server.day_tasks; ranges per task: GET /tasks)."""
    return {
        "replicas": (int | None, Field(None, strict=True, description=(
            "fleet tasks: [replicas] target replicas, in [0, R] (Fleet1: 16; GET /tasks)"))),
        "routing": (int | None, Field(None, strict=True, description=(
            "fleet tasks: routing rule, 0 least_loaded or 1 even"))),
        "reserved": (list[int] | None, Field(None, max_length=HOURS_PER_DAY, strict=True, description=(
            f"reservation tasks: [replicas] reserved for each of the next day's {HOURS_PER_DAY} hours, each in "
            "[0, max_reserved] (Reserve1: 32; GET /tasks)"))),
    }


DAY_ACTION_FIELDS = tuple(_day_action_fields())


def day_values(action: BaseModel) -> dict[str, Any]:
    """The day-task entries an action model gives (not null), {} for a serving action."""
    return {k: getattr(action, k) for k in DAY_ACTION_FIELDS if getattr(action, k, None) is not None}


class DayObservation(Observation):
    """What the agent sees after a reset or a step of a fleet or reservation task
    (server.day_sessions.DayResult): the flat observation, its entries by name (GET /info lists
    their units per task), the adapter's info, and its two flags."""

    fields: dict[str, Any] = Field(default_factory=dict, description="the observation's entries by name")
    vector: list[float] = Field(default_factory=list, description="the gymnasium adapter's flat float32 observation")
    info: dict[str, Any] = Field(default_factory=dict, description="the gymnasium adapter's info (totals, "
                                                                   "reward_components, ...)")
    terminated: bool = Field(False, description="the adapter's terminated (reservation: the last commitment)")
    truncated: bool = Field(False, description="the adapter's truncated (fleet: the horizon's last interval)")
    step_count: int = Field(0, description="[steps] stepped in the episode")
    task_id: str = Field("", description="the task of the episode")
    family: str = Field("", description="fleet or reservation")


class DayState(ServingState):
    """A session's episode (ServingState), with a day task's family and split."""

    family: str = Field("", description="serving (empty), fleet or reservation")
    day_split: str = Field("", description="a day task's split: train or heldout (empty for serving tasks)")


@dataclasses.dataclass(frozen=True)
class BodyModels:
    """The request models of a server (`body_models`)."""

    action: type[ServingAction]
    create: type[CreateSession]
    reset: type[ResetSession]
    step: type[StepSession]
    openenv_reset: type[OpenEnvReset]
    openenv_step: type[OpenEnvStep]
    state: type[ServingState]


@functools.cache
def body_models(day: bool) -> BodyModels:
    """The request models of a server of serving tasks only (day False: the classes above) or
    of one serving day tasks too (their day fields added, same names)."""
    if not day:
        return BodyModels(ServingAction, CreateSession, ResetSession, StepSession, OpenEnvReset, OpenEnvStep,
                          ServingState)
    split: Any = (DaySplit | None, Field(None, description=DAY_SPLIT_DOC))
    action = pydantic.create_model("ServingAction", __base__=ServingAction, __doc__=(
        (ServingAction.__doc__ or "") + "\nFleet and reservation tasks take their entries instead: replicas and "
        "routing, or reserved (GET /tasks)."), **_day_action_fields())
    values = pydantic.create_model("KnobValues", __base__=KnobValues, **_day_action_fields())
    nullable: Any = values | SkipJsonSchema[None]  # type: ignore[misc]  # a model made at run time
    step = pydantic.create_model("StepSession", __base__=StepSession, action=(
        nullable, Field(None, description="knob values (omitted knobs take the task "
                                                                "default), or a fleet or reservation task's entries")))
    openenv_step = pydantic.create_model("OpenEnvStep", __base__=OpenEnvStep, action=(
        action, Field(..., description="knob values, a server policy, or a fleet or reservation task's entries")))
    return BodyModels(
        action, pydantic.create_model("CreateSession", __base__=CreateSession, day_split=split),
        pydantic.create_model("ResetSession", __base__=ResetSession, day_split=split), step,
        pydantic.create_model("OpenEnvReset", __base__=OpenEnvReset, day_split=split), openenv_step, DayState)
