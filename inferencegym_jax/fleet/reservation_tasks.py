"""Reservation task registry: the TOML files of configs/reservation, built into
`fleet.reservation.ReservationParams`.

    env, params = inferencegym_jax.make("InferenceGym-Reserve1-v1")                    # training services
    env, params = inferencegym_jax.make("InferenceGym-Reserve1-v1", split="heldout")   # evaluation services

The splits divide both the trace's clients and its days. Clients: ranked by their mean rate over
the two weeks, the 1st, 3rd, 5th, ... are the training pool, the 2nd, 4th, ... the held-out pool,
so each pool has big and small clients. Days: training episodes commit for `train_days`, held-out
ones for the later `heldout_days` (each after its own week of history), so a held-out service is
other clients on days no policy committed for. Both are needed: every service of a split shares
the split's calendar (the platform's holidays and events), and a policy that saw the held-out days
could learn them instead of reading its history.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tomllib
from typing import Any

import jax.numpy as jnp
import numpy as np

from inferencegym_jax import tasks, validation
from inferencegym_jax.files import shipped
from inferencegym_jax.fleet.reservation import ReservationEnv, ReservationParams
from inferencegym_jax.fleet.reservation_day import DayPrices
from inferencegym_jax.fleet.servegen import SERVEGEN_TRACES, client_rates
from inferencegym_jax.validation import choice, integer, number, text

SPLITS = ("train", "heldout")
GPUS = ("a100-80gb", "h100-sxm")


@dataclasses.dataclass(frozen=True)
class ReservationTable:
    """[reservation]: the commitments and the scale of a service."""

    max_reserved: int = integer("replicas", 1, 256, "most replicas one hour may reserve")
    history_days: int = integer("days", 1, 13, "days seen before each commitment")
    train_days: tuple[float, ...] = validation.vector("day", 2, 1, 13, "first and last committed day of "
                                                      "training episodes (0-based trace days)")
    heldout_days: tuple[float, ...] = validation.vector("day", 2, 1, 13, "first and last committed day of "
                                                        "held-out episodes")
    history_mean_replicas: float = number("replicas", 0.0, 256.0, "replicas at hpa_target for the "
                                          "history's mean rate", low_open=True)
    inclusion_prob: float = number("", 0.0, 1.0, "chance a pool client is in a service", low_open=True)
    slo_target: float = number("", 0.5, 0.9999, "SLO attainment the task asks for")


@dataclasses.dataclass(frozen=True)
class ReplicaTable:
    """[replica]: one replica's capacity and the on-demand autoscaler."""

    capacity: float = number("req/s", 0.0, 1000.0, "rate one serving replica carries in SLO", low_open=True)
    hpa_target: float = number("req/s", 0.0, 1000.0, "autoscaler's target rate per replica", low_open=True)
    provision_s: float = number("s", 0.0, 3000.0, "on-demand request to a serving replica")
    gpu: str = choice(GPUS, "GPU whose prices apply (data/fleet/provisioning.json)")


@dataclasses.dataclass(frozen=True)
class ReservationTraffic:
    """[traffic]: the trace whose clients make the services."""

    trace: str = choice(tuple(SERVEGEN_TRACES), "shipped client trace (data/traces/servegen)")


@dataclasses.dataclass(frozen=True)
class ReservationTaskConfig:
    """A whole reservation file."""

    id: str = text("versioned env id, InferenceGym-Reserve<N>-v<k>")
    name: str = text("human-readable name")
    reservation: ReservationTable = None  # type: ignore[assignment]
    replica: ReplicaTable = None  # type: ignore[assignment]
    traffic: ReservationTraffic = None  # type: ignore[assignment]

    def check(self, path: str) -> None:
        for table in ("reservation", "replica", "traffic"):
            if getattr(self, table) is None:
                raise ValueError(f"config table {table!r} is missing")
        r = self.reservation
        for key in ("train_days", "heldout_days"):
            first, last = getattr(r, key)
            if not (first == int(first) and last == int(last) and r.history_days <= first <= last):
                typed = [int(d) if d == int(d) else d for d in (first, last)]
                raise ValueError(f"reservation.{key}={typed}: allowed whole days first <= last, first >= "
                                 f"history_days={r.history_days}")


@functools.cache
def _files() -> dict[str, str]:
    """{env id: file name} of every reservation file."""
    folder = shipped("configs").joinpath("reservation")
    return {tomllib.loads(p.read_text())["id"]: p.name
            for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".toml")}


def reservation_envs() -> list[str]:
    """The registered reservation task ids."""
    return list(_files())


def is_reservation_id(env_id: Any) -> bool:
    """Whether `env_id` names a registered reservation task."""
    return isinstance(env_id, str) and env_id in _files()


def reservation_task_config(env_id: str, **overrides: Any) -> ReservationTaskConfig:
    """The checked config of a reservation task, with overrides merged into its tables."""
    if not is_reservation_id(env_id):
        raise ValueError(f"unknown reservation env id {env_id!r}; registered: {reservation_envs()}")
    raw = tomllib.loads(shipped("configs").joinpath("reservation", _files()[env_id]).read_text())
    tasks._merge(raw, overrides)
    return validation.parse(raw, ReservationTaskConfig)


@functools.cache
def gpu_prices(gpu: str) -> tuple[float, float]:
    """(on-demand, 1-year reserved) [$/GPU-hour], the typical prices of data/fleet/provisioning.json."""
    prices = json.loads(shipped("data").joinpath("fleet", "provisioning.json").read_text())["prices"][gpu]
    return float(prices["on_demand"]["typical"]), float(prices["reserved_1y"]["typical"])


def client_pool(rates: np.ndarray, split: str) -> np.ndarray:
    """float32 (C,): 1 for the split's clients (module docstring: alternate ranks by mean rate)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {list(SPLITS)}")
    rank = np.empty(rates.shape[0], np.int64)
    rank[np.argsort(-rates.mean(axis=1), kind="stable")] = np.arange(rates.shape[0])
    return (rank % 2 == SPLITS.index(split)).astype(np.float32)


def build_reservation_params(cfg: ReservationTaskConfig, split: str = "train") -> ReservationParams:
    """ReservationParams of a checked config; `split` picks the client pool."""
    rates = client_rates(cfg.traffic.trace)
    on_demand, reserved = gpu_prices(cfg.replica.gpu)
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    r = cfg.reservation
    first, last = (int(d) for d in (r.train_days if split == "train" else r.heldout_days))
    return ReservationParams(
        client_rates=f32(rates),
        client_pool=f32(client_pool(rates, split)),
        inclusion_prob=f32(r.inclusion_prob),
        history_mean_replicas=f32(r.history_mean_replicas),
        prices=DayPrices(capacity=f32(cfg.replica.capacity), hpa_target=f32(cfg.replica.hpa_target),
                         provision_s=f32(cfg.replica.provision_s), reserved_price=f32(reserved),
                         on_demand_price=f32(on_demand)),
        slo_target=f32(r.slo_target),
        max_reserved=r.max_reserved,
        history_days=r.history_days,
        first_day=first,
        decision_days=last - first + 1,
    )


def make_reservation(env_id: str, split: str = "train", **overrides: Any) -> tuple[ReservationEnv, ReservationParams]:
    """The reservation env and its params for a registered id (`split`: "train" or "heldout")."""
    params = build_reservation_params(reservation_task_config(env_id, **overrides), split)
    env = ReservationEnv(params, env_id)
    env._check_days(params)
    return env, params
