"""`inferencegym_jax.make`: every registered env by its id, single servers and fleets.

    env, params = ig.make("InferenceGym-Task3-v2")                      # a single server (tasks.make)
    env, params = ig.make("InferenceGym-Fleet1-v1")                     # a fleet (fleet.tasks.make_fleet)
    env, params = ig.make("InferenceGym-Fleet1-v1", split="heldout")    # the fleet's evaluation days
    env, params = ig.make("InferenceGym-Reserve1-v1")                   # day-ahead reservation
"""

from __future__ import annotations

from typing import Any

from inferencegym_jax import tasks
from inferencegym_jax.fleet.reservation_tasks import is_reservation_id, make_reservation, reservation_envs
from inferencegym_jax.fleet.tasks import fleet_envs, is_fleet_id, make_fleet


def make(env_id: str, **overrides: Any) -> tuple[Any, Any]:
    """The env and its default params for a registered id, with optional overrides: a fleet id
    gives a `fleet.env.FleetEnv` and its `FleetParams`, any other a `env.InferenceGymEnv` and its
    `EnvParams` (`tasks.make`), a reservation id a `fleet.reservation.ReservationEnv` and its
    `ReservationParams` (`fleet.reservation_tasks.make_reservation`).

    Raises:
      ValueError: unknown id (the message lists every registered one), unknown override key,
        wrong type or out-of-range value (the message names the key).
    """
    if is_fleet_id(env_id):
        return make_fleet(env_id, **overrides)
    if is_reservation_id(env_id):
        return make_reservation(env_id, **overrides)
    if isinstance(env_id, str) and env_id.startswith("InferenceGym-Fleet"):
        raise ValueError(f"unknown fleet env id {env_id!r}; registered fleets: {fleet_envs()}")
    if isinstance(env_id, str) and env_id.startswith("InferenceGym-Reserve"):
        raise ValueError(f"unknown reservation env id {env_id!r}; registered: {reservation_envs()}")
    return tasks.make(env_id, **overrides)


def all_envs() -> list[str]:
    """Every registered id: the single-server tasks, the fleets, the reservation tasks."""
    return tasks.registered_envs() + fleet_envs() + reservation_envs()
