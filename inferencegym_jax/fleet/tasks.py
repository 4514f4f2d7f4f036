"""Fleet task registry: the TOML files of configs/fleet, built into `fleet.env.FleetParams`.

    env, params = inferencegym_jax.make("InferenceGym-Fleet1-v1")
    env, params = inferencegym_jax.make("InferenceGym-Fleet1-v1", split="heldout")   # evaluation days

A fleet file names its replica's serving task (`[replica] task`, a registered single-server id,
frozen) and may replace that task's `workload` table and merge keys into its `server` and
`default_action` tables; the result is checked as a task file is (`task_config.TaskConfig`).
`[fleet]` and `[traffic]` are checked against the schemas below. `split` picks the episode
windows: "train" (the default) or "heldout".

How Fleet1's size was chosen (configs/fleet/fleet1_v1.toml), before any controller was run: one
replica saturates at 4.9 code requests per second with the file's lengths, and its TPOT stays
under the 50-ms SLO up to about 2.5 req/s (`inferencegym loadtest --gpu a100-80gb --batch-size 32
--engine mixed --prompt ... --output ... --rate 2 3 4 5 --saturation`: TPOT 28.5 ms at 2 req/s,
54.6 ms at 3), so 16 replicas meet the SLOs up to ~40 req/s. At a share of 0.4 the service's
busiest hour of the week is 33 req/s and its busiest minute 39 req/s: the whole fleet holds the
peak, a fleet sized for the peak leaves a few replicas spare, and the night needs one or two.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import tomllib
from typing import Any

import jax.numpy as jnp

from inferencegym_jax import tasks, validation
from inferencegym_jax.files import shipped
from inferencegym_jax.fleet.day_traffic import DAY_MIN, DAY_TRACES, day_curve, requests_per_minute, window_starts
from inferencegym_jax.fleet.env import ROUTING_UNITS, FleetEnv, FleetParams
from inferencegym_jax.task_config import TaskConfig
from inferencegym_jax.validation import choice, integer, number, text

SPLITS = ("train", "heldout")
_REPLICA_TABLES = ("task", "server", "workload", "default_action")


@dataclasses.dataclass(frozen=True)
class FleetTable:
    """[fleet]: the replicas and the autoscaler's actuator."""

    num_replicas: int = integer("replicas", 1, 256, "R, the most replicas the fleet may run")
    initial_replicas: int = integer("replicas", 0, 256, "replicas serving when an episode starts")
    control_interval_s: float = number("s", 1.0, 3600.0, "one control interval (a whole number of the "
                                                         "replica server's dt_s)")
    provision_s: float = number("s", 0.0, 7200.0, "scale-up request to a serving replica")
    slo_target: float = number("", 0.5, 0.9999, "SLO attainment the task asks for")
    least_loaded_unit: str | None = choice(ROUTING_UNITS, "what the least-loaded rule sends a replica: a share of "
                                           "every request (fluid, the default) or whole requests (request)",
                                           optional=True)
    even_unit: str | None = choice(ROUTING_UNITS, "what the even rule sends a replica: a share of every request "
                                   "(fluid, the v1 tasks' and the default) or whole requests at random (request)",
                                   optional=True)


@dataclasses.dataclass(frozen=True)
class TrafficTable:
    """[traffic]: the day curve and the episode windows."""

    trace: str = choice(tuple(DAY_TRACES), "shipped day trace (data/traces/day)")
    fleet_share: float = number("", 0.0, 1.0, "fraction of the service's requests the fleet serves", low_open=True)
    train_days: tuple[float, ...] = validation.vector("day", 2, 0, 365, "first and last day of training windows")
    heldout_days: tuple[float, ...] = validation.vector("day", 2, 0, 365, "first and last day of held-out windows")
    start_every_min: int = integer("min", 1, DAY_MIN, "spacing of the windows' start minutes")


@dataclasses.dataclass(frozen=True)
class FleetTaskConfig:
    """A whole fleet file (the replica table is checked apart, as a task file)."""

    id: str = text("versioned env id, InferenceGym-Fleet<N>-v<k>")
    name: str = text("human-readable name")
    max_steps: int = integer("control intervals", 1, 10**6, "horizon of an episode")
    fleet: FleetTable = None  # type: ignore[assignment]
    traffic: TrafficTable = None  # type: ignore[assignment]

    def check(self, path: str) -> None:
        for table in ("fleet", "traffic"):
            if getattr(self, table) is None:
                raise ValueError(f"config table {table!r} is missing")
        if self.fleet.initial_replicas > self.fleet.num_replicas:
            raise ValueError(f"fleet.initial_replicas={self.fleet.initial_replicas} must be <= "
                             f"fleet.num_replicas={self.fleet.num_replicas}")


@functools.cache
def _fleet_files() -> dict[str, str]:
    """{env id: file name} of every fleet file."""
    found: dict[str, str] = {}
    for path in sorted(shipped("configs").joinpath("fleet").iterdir(), key=lambda p: p.name):
        if path.name.endswith(".toml"):
            found[tomllib.loads(path.read_text())["id"]] = path.name
    return found


def fleet_envs() -> list[str]:
    """The registered fleet task ids."""
    return list(_fleet_files())


def is_fleet_id(env_id: Any) -> bool:
    """Whether `env_id` names a registered fleet task."""
    return isinstance(env_id, str) and env_id in _fleet_files()


def raw_fleet_config(env_id: str) -> dict[str, Any]:
    """A copy of a fleet file's raw tables; ValueError for an unknown id."""
    if not is_fleet_id(env_id):
        raise ValueError(f"unknown fleet env id {env_id!r}; registered: {fleet_envs()}")
    return tomllib.loads(shipped("configs").joinpath("fleet", _fleet_files()[env_id]).read_text())


def replica_config(raw_replica: dict[str, Any]) -> TaskConfig:
    """The replica's serving task config: its registered task with the fleet file's tables."""
    unknown = sorted(set(raw_replica) - set(_REPLICA_TABLES))
    if unknown:
        raise ValueError(f"unknown config key 'replica.{unknown[0]}'; allowed: {list(_REPLICA_TABLES)}")
    if "task" not in raw_replica:
        raise ValueError("config key 'replica.task' is missing")
    raw = tasks.raw_task_config(tasks.resolve_id(raw_replica["task"], "replica.task="))
    if "workload" in raw_replica:
        raw["workload"] = copy.deepcopy(raw_replica["workload"])
    for table in ("server", "default_action"):
        raw[table].update(copy.deepcopy(raw_replica.get(table, {})))
    return validation.parse(raw, TaskConfig)


def build_fleet_params(cfg: FleetTaskConfig, replica: TaskConfig, split: str = "train") -> FleetParams:
    """FleetParams of a checked fleet config; `split` picks the episode windows."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {list(SPLITS)}")
    single = tasks.build_params(replica)
    substeps = cfg.fleet.control_interval_s / float(replica.server.dt_s)
    if abs(substeps - round(substeps)) > 1e-9:
        raise ValueError(f"fleet.control_interval_s={cfg.fleet.control_interval_s} must be a whole number of the "
                         f"replica's server.dt_s={replica.server.dt_s}")
    episode_min = int(-(-cfg.max_steps * cfg.fleet.control_interval_s // 60.0))
    days = cfg.traffic.train_days if split == "train" else cfg.traffic.heldout_days
    starts = window_starts(int(days[0]), int(days[1]), episode_min, cfg.traffic.start_every_min)
    curve = day_curve(cfg.traffic.trace, cfg.traffic.fleet_share, starts)
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    return FleetParams(
        server=single.server,
        workload=single.workload,
        replica_config=single.default_action,
        curve=curve,
        provision_s=f32(cfg.fleet.provision_s),
        initial_replicas=jnp.asarray(cfg.fleet.initial_replicas, jnp.int32),
        slo_target=f32(cfg.fleet.slo_target),
        rate_norm=f32(requests_per_minute(cfg.traffic.trace).max() * cfg.traffic.fleet_share / 60.0),
        max_steps_in_episode=jnp.asarray(cfg.max_steps, jnp.int32),
        num_replicas=cfg.fleet.num_replicas,
        substeps=int(round(substeps)),
        routing_units=(cfg.fleet.least_loaded_unit or "fluid", cfg.fleet.even_unit or "fluid"),
    )


def fleet_task_config(env_id: str, **overrides: Any) -> tuple[FleetTaskConfig, TaskConfig]:
    """The checked config of a fleet task and of its replica, with overrides merged into the
    file's tables (as `tasks.make` merges them)."""
    raw = raw_fleet_config(env_id)
    tasks._merge(raw, overrides)
    replica_raw = raw.pop("replica", None)
    if replica_raw is None:
        raise ValueError("config table 'replica' is missing")
    return validation.parse(raw, FleetTaskConfig), replica_config(replica_raw)


def make_fleet(env_id: str, split: str = "train", **overrides: Any) -> tuple[FleetEnv, FleetParams]:
    """The fleet env and its params for a registered fleet id (`split`: "train" or "heldout")."""
    cfg, replica = fleet_task_config(env_id, **overrides)
    params = build_fleet_params(cfg, replica, split)
    return FleetEnv(params, env_id), params
