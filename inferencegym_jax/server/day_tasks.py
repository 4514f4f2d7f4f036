"""The day tasks on the server: the fleet tasks and the day-ahead reservation tasks, described for
the HTTP and OpenEnv front ends (`day_sessions` runs their episodes).

A day task is one of `fleet.tasks.fleet_envs()` ("InferenceGym-Fleet1-v1": an autoscaler and a
router over a day of 1,440 one-minute control intervals) or of
`fleet.reservation_tasks.reservation_envs()` ("InferenceGym-Reserve1-v1": each step commits the
next day's 24 hourly reserved replicas). The server plays them through their gymnasium adapters
(`interop.fleet_gym.FleetGymnasiumEnv`, `interop.reservation_gym.ReservationGymnasiumEnv`), so an
episode over HTTP is the adapter's episode, reward for reward.

Actions over HTTP and OpenEnv are JSON objects with named entries (`DayTask.action_vector`):

    fleet:        {"replicas": int in [0, R], "routing": 0 (least_loaded) or 1 (even)}   (R: Fleet1 16)
    reservation:  {"reserved": [24 ints, each in [0, max_reserved]]}                     (Reserve1 32)

both entries required; a bad one raises `ActionError` (a ValueError whose message is the
adapter's: it names the entry and its range; `loc` is its path in the action, ("reserved", 3)).

Observations (`DayTask.named`) are the adapter's flat float32 vector (`vector`) and the same
numbers by name (`fields`), in the scaled units GET /info lists per task (`DayTask.info`):
`fleet.env.FleetEnv.flatten_observation` (12 entries in [0, 1]) and
`fleet.reservation.ReservationEnv.flatten_observation` (history days x 24 hourly peaks, a one-hot
day of the week, given here as its index, days left, the last day's GPU cost and missed fraction).

GET /baseline (`DayTask.baseline_frame`): the task's non-learning baselines on its held-out split,
episodes 0..N-1 of `evaluate.evaluation_key(seed)`, graded as the library grades them:
`fleet.evaluate.graded_table` (fleet.baselines.fleet_baselines; score 0 static_for_peak, 1 the
oracle) and `fleet.reservation_baselines.reservation_table` (score 0 week_peak, 1 the oracle).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.fleet import reservation_tasks
from inferencegym_jax.fleet import tasks as fleet_tasks
from inferencegym_jax.fleet.env import ACTION_NAMES, ROUTING_RULES
from inferencegym_jax.fleet.reservation import DAYS_PER_WEEK, obs_size
from inferencegym_jax.fleet.reservation_day import HOURS_PER_DAY

FLEET = "fleet"
RESERVATION = "reservation"
# The days or episode windows a day task's episodes come from (fleet.tasks.SPLITS, reservation_tasks.SPLITS).
DAY_SPLITS = ("train", "heldout")
assert DAY_SPLITS == fleet_tasks.SPLITS == reservation_tasks.SPLITS
NAMESPACE = "InferenceGym"
# The action entries each family takes (fleet.env.ACTION_NAMES; the reservation's 24 hours as one list).
ACTION_FIELDS = {FLEET: ACTION_NAMES, RESERVATION: ("reserved",)}
# Bound of a JSON integer the action's entries may hold before the range check [int64's]: larger ones
# are out of every range, refused with the range in the message (numpy cannot hold them).
INT64_MAX = 2**63 - 1
# GET /baseline's episodes per family: (default, maximum) [episodes]. Fleet: a held-out episode is a
# whole day (1,440 steps of 16 replicas) and fleet.evaluate.run_fleet_episodes pads its batch to
# evaluate.BATCH_MULTIPLE = 8 lanes, so 1 to 8 episodes run one program in the same time (~30 s
# per baseline on 2 busy cores, measured; 9 would double it): 8 at most, all 8 by default (computed
# on the first request of a seed, day_sessions).
# Reservation: at most 64, the held-out table's size (scripts/reservation_baselines.py --heldout);
# its episodes run as one batch of exactly N (reservation_table), so each new N compiles 7 programs
# (~14 s and ~50 MB on 2 busy cores, measured); 16 by default, as the serving tasks', warmed at start-up.
FLEET_LANES = evaluate.BATCH_MULTIPLE
BASELINE_EPISODES = {FLEET: (FLEET_LANES, FLEET_LANES), RESERVATION: (16, 64)}


class ActionError(ValueError):
    """A day task's action refused: `loc` is the entry's path in the action ("replicas",) or
    ("reserved", 3); the message names the entry and its allowed range."""

    def __init__(self, loc: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.loc = loc


def day_task_id(task: Any) -> str | None:
    """The registered id of a fleet or reservation task ("InferenceGym-Fleet1-v1"), given it or
    its gymnasium id ("InferenceGym/Fleet1-v1"); None for anything else (a serving task, a number)."""
    if not isinstance(task, str):
        return None
    env_id = task.replace("/", "-", 1) if task.startswith(NAMESPACE + "/") else task
    if fleet_tasks.is_fleet_id(env_id) or reservation_tasks.is_reservation_id(env_id):
        return env_id
    return None


def family_of(env_id: str) -> str:
    """FLEET or RESERVATION of a day task id."""
    return FLEET if fleet_tasks.is_fleet_id(env_id) else RESERVATION


def all_day_ids() -> list[str]:
    """Every registered day task id: the fleets, then the reservation tasks."""
    return fleet_tasks.fleet_envs() + reservation_tasks.reservation_envs()


def check_split(split: Any) -> str:
    """A day split ("train" when None); ValueError naming day_split otherwise."""
    if split is None:
        return "train"
    if split not in DAY_SPLITS:
        raise ValueError(f"day_split={split!r}: must be one of {list(DAY_SPLITS)}")
    return str(split)


def _fleet_fields(params: Any) -> dict[str, dict[str, str]]:
    """The fleet observation's entries: unit and scale (fleet.env.FleetObservation, flatten_observation)."""
    rate = f"req/s over rate_norm = {float(params.rate_norm):g} req/s (the curve's highest minute)"
    replicas = f"replicas over R = {int(params.num_replicas)}"
    queue = f"requests over rate_norm x control_interval_s = {float(params.rate_norm * params.control_interval_s):g}"
    ttft = "p99 / (p99 + the strictest TTFT SLO) of the last interval's TTFT p99 [s]"
    return {
        "time_of_day": {"unit": "day fraction", "doc": "start of the next interval, UTC, in [0, 1)"},
        "weekend": {"unit": "bool", "doc": "1 on Saturday and Sunday (UTC)"},
        "arrival_rate": {"unit": rate, "doc": "arrivals over the last control interval"},
        "rate_yesterday": {"unit": rate, "doc": "the curve 24 h before the next interval"},
        "rate_yesterday_ahead": {"unit": rate, "doc": "the curve 24 h before a replica started now first serves"},
        "serving": {"unit": replicas, "doc": "replicas serving"},
        "warming": {"unit": replicas, "doc": "replicas provisioning"},
        "draining": {"unit": replicas, "doc": "replicas draining"},
        "queue_depth": {"unit": queue, "doc": "requests waiting, all replicas"},
        "slo_attainment": {"unit": "fraction", "doc": "of the last interval's judged requests that met their SLO"},
        "ttft_p99_s": {"unit": "[0, 1)", "doc": ttft},
        "episode_fraction": {"unit": "fraction", "doc": "intervals stepped over the horizon"},
    }


def _reservation_fields(params: Any) -> dict[str, dict[str, str]]:
    """The reservation observation's entries (fleet.reservation.ReservationObservation)."""
    days = int(params.history_days)
    return {
        "history": {"unit": "peak rate over what max_reserved replicas serve at the target",
                    "doc": f"{days} days x 24 hourly peaks, oldest day first (lists of 24)"},
        "day_of_week": {"unit": "day", "doc": "the next day's index in the trace mod 7 (the flat vector's one-hot)"},
        "days_left": {"unit": "fraction", "doc": "commitments left over decision_days"},
        "last_gpu_cost": {"unit": "1", "doc": "the last day's GPU term of J"},
        "last_missed": {"unit": f"fraction x slo_weight ({float(params.slo_weight):g})",
                        "doc": "the last day's missed requests over its arrivals, times slo_weight"},
    }


@dataclasses.dataclass(frozen=True)
class DayTask:
    """One served day task: its id, family, and the params of each split.

    Attributes:
      id: the task id; family: FLEET or RESERVATION.
      params: split -> the task's params for that split (FleetParams / ReservationParams).
    """

    id: str
    family: str
    params: Mapping[str, Any]

    @classmethod
    def load(cls, env_id: str) -> DayTask:
        """The task's params of both splits (`ig.make`'s `split`)."""
        family = family_of(env_id)
        make = fleet_tasks.make_fleet if family == FLEET else reservation_tasks.make_reservation
        return cls(env_id, family, {split: make(env_id, split)[1] for split in DAY_SPLITS})

    def make_env(self, split: str) -> Any:
        """A fresh gymnasium adapter env of `split` (its programs are the task's: compiled once)."""
        if self.family == FLEET:
            from inferencegym_jax.interop.fleet_gym import FleetGymnasiumEnv

            return FleetGymnasiumEnv(self.id, params=self.params[split])
        from inferencegym_jax.interop.reservation_gym import ReservationGymnasiumEnv

        return ReservationGymnasiumEnv(self.id, params=self.params[split])

    def horizon(self, split: str) -> int:
        """[steps] per episode of `split`: control intervals (fleet) or commitments (reservation)."""
        p = self.params[split]
        return int(p.max_steps_in_episode if self.family == FLEET else p.decision_days)

    @functools.cached_property
    def nvec(self) -> np.ndarray:
        """int64 (entries,): each action entry's count of values (the adapter's action space)."""
        p = self.params["train"]
        if self.family == FLEET:
            return np.asarray([int(p.num_replicas) + 1, len(ROUTING_RULES)], np.int64)
        return np.full(HOURS_PER_DAY, int(p.max_reserved) + 1, np.int64)

    def entry_names(self) -> list[tuple[str | int, ...]]:
        """Each action entry's path in the JSON action: ("replicas",), ("reserved", 3)."""
        if self.family == FLEET:
            return [(name,) for name in ACTION_FIELDS[FLEET]]
        return [("reserved", hour) for hour in range(len(self.nvec))]

    def _action_doc(self) -> str:
        if self.family == FLEET:
            return (f'{{"replicas": target replicas in [0, {self.nvec[0] - 1}], "routing": 0 (least_loaded) '
                    'or 1 (even)}')
        return f'{{"reserved": [{HOURS_PER_DAY} ints, the replicas reserved for each hour of the next day, each in ' \
               f'[0, {self.nvec[0] - 1}]]}}'

    def action_vector(self, action: Mapping[str, Any]) -> np.ndarray:
        """int64 (entries,) of a JSON action (null entries count as omitted): the values the
        adapter checks. ActionError for an unknown or missing entry or a value no int64 holds."""
        given = {k: v for k, v in action.items() if v is not None}
        fields = ACTION_FIELDS[self.family]
        for key in given:
            if key not in fields:
                raise ActionError((key,), f"action.{key}: not an action entry of {self.family} task {self.id}; "
                                          f"its action is {self._action_doc()}")
        for key in fields:
            if key not in given:
                raise ActionError((key,), f"action.{key}: required; {self.id}'s action is {self._action_doc()}")
        values = [given[k] for k in fields] if self.family == FLEET else given["reserved"]
        if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ActionError(("reserved",), f"action.reserved: must be a list of integers; {self._action_doc()}")
        for path, value, n in zip(self.entry_names(), values, self.nvec):
            if abs(value) > INT64_MAX:
                raise ActionError(path, f"action.{'.'.join(map(str, path))} = {value} is outside its range "
                                        f"[0, {n - 1}]")
        return np.asarray(values, np.int64)

    def locate(self, vector: np.ndarray) -> tuple[str | int, ...]:
        """The path of the first entry of `vector` outside its range (the action itself when
        its length is wrong)."""
        if vector.shape != self.nvec.shape:
            return (ACTION_FIELDS[self.family][0],) if self.family == RESERVATION else ()
        bad = np.flatnonzero((vector < 0) | (vector >= self.nvec))
        return self.entry_names()[int(bad[0])] if bad.size else ()

    def named(self, vector: np.ndarray) -> dict[str, Any]:
        """The flat observation's entries by name (module docstring), as Python floats."""
        values = np.asarray(vector, np.float64)
        if self.family == FLEET:
            return dict(zip(_fleet_fields(self.params["train"]), values.tolist()))
        hours = int(self.params["train"].history_days) * HOURS_PER_DAY
        history = values[:hours].reshape(-1, HOURS_PER_DAY)
        week, rest = values[hours:hours + DAYS_PER_WEEK], values[hours + DAYS_PER_WEEK:]
        return {"history": history.tolist(), "day_of_week": int(np.argmax(week)), "days_left": float(rest[0]),
                "last_gpu_cost": float(rest[1]), "last_missed": float(rest[2])}

    def row(self) -> dict[str, Any]:
        """GET /tasks' entry: id, family, horizons, action entries and their ranges."""
        return {"id": self.id, "family": self.family,
                "horizon_steps": {split: self.horizon(split) for split in DAY_SPLITS},
                "step": "a 60-s control interval" if self.family == FLEET else "a day (one commitment)",
                "splits": list(DAY_SPLITS), "action": self._action_doc(),
                "action_ranges": {name: [0, int(n) - 1] for name, n in zip(ACTION_FIELDS[self.family], self.nvec)},
                "baseline_episodes": dict(zip(("default", "max"), BASELINE_EPISODES[self.family]))}

    def info(self) -> dict[str, Any]:
        """GET /info's entry: the action, the observation's fields with units, the reward."""
        p = self.params["train"]
        fields = _fleet_fields(p) if self.family == FLEET else _reservation_fields(p)
        reward = ("minus the interval's cost: GPU-time fraction + slo_weight x missed / expected requests "
                  "(fleet.env); an episode's return is -J" if self.family == FLEET else
                  "minus the day's J: GPU cost over the fleet's whole on-demand budget + slo_weight x "
                  "missed / arrived requests (fleet.reservation); an episode's return is -J")
        return {"family": self.family, "action": self._action_doc(), "observation_fields": fields,
                "vector_size": self.vector_size(),
                "reward": {"range": "<= 0", "doc": reward, "slo_weight": float(p.slo_weight)},
                "info_doc": ("totals, episode_totals (fleet.env.ControlTotals), reward_components {gpu, slo}, "
                             "applied_action, timestep" if self.family == FLEET else
                             "day, episode_totals (fleet.reservation.DayTotals), reward_components {gpu, slo}, "
                             "day_index")}

    @functools.cached_property
    def heldout(self) -> tuple[Any, Any, dict[str, Any]]:
        """(env, held-out params, {name: baseline}) of GET /baseline: `make_fleet(id, "heldout")` with
        `fleet_baselines`, or `make_reservation(id, "heldout")` with `reservation_baselines`."""
        if self.family == FLEET:
            from inferencegym_jax.fleet.baselines import fleet_baselines

            env, params = fleet_tasks.make_fleet(self.id, "heldout")
            return env, params, fleet_baselines(env, params)
        from inferencegym_jax.fleet.reservation_baselines import reservation_baselines

        reserve_env, reserve_params = reservation_tasks.make_reservation(self.id, "heldout")
        return reserve_env, reserve_params, reservation_baselines(reserve_env, reserve_params)

    def check_baseline_episodes(self, episodes: Any) -> int:
        """GET /baseline's episode count (None: the family's default); ValueError naming episodes
        and its range for this family (BASELINE_EPISODES)."""
        default, most = BASELINE_EPISODES[self.family]
        if episodes is None:
            return default
        if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= most:
            raise ValueError(f"episodes={episodes!r}: must be an integer in [1, {most}] for {self.family} task "
                             f"{self.id}")
        return episodes

    def fleet_runs(self, seed: int) -> dict[str, Any]:
        """Fleet: each baseline's held-out episodes 0..FLEET_LANES-1 of evaluate.evaluation_key(seed)
        ({name: fleet.evaluate.FleetEpisodes}, `run_fleet_episodes`: one padded batch, so their first
        N are bit for bit those of any run of N <= FLEET_LANES)."""
        from inferencegym_jax.fleet.evaluate import run_fleet_episodes

        env, params, controllers = self.heldout
        return {name: run_fleet_episodes(env, params, controller, evaluate.evaluation_key(seed), FLEET_LANES)
                for name, controller in controllers.items()}

    def baseline_frame(self, seed: int, episodes: int, runs: Mapping[str, Any] | None = None) -> Any:
        """The graded held-out table (pandas, one row per baseline) of episodes 0..episodes-1 of
        evaluate.evaluation_key(seed): fleet, `graded_table`'s (table_of(grade) of `runs`, this
        seed's `fleet_runs`, their first `episodes`); reservation, `reservation_table`'s."""
        if self.family == FLEET:
            from inferencegym_jax.fleet.evaluate import grade, table_of

            runs = self.fleet_runs(seed) if runs is None else runs
            first = {name: jax.tree_util.tree_map(lambda x: x[:episodes], r) for name, r in runs.items()}
            return table_of(first, grade(first))
        from inferencegym_jax.fleet.reservation_baselines import reservation_table

        env, params, policies = self.heldout
        return reservation_table(env, params, policies, evaluate.evaluation_key(seed), episodes)[0]

    def vector_size(self) -> int:
        """Length of the flat observation."""
        if self.family == FLEET:
            return len(_fleet_fields(self.params["train"]))
        return obs_size(self.params["train"])


def json_rows(frame: Any) -> list[dict[str, Any]]:
    """A graded table's rows as JSON objects (its index a column; NaN and infinities None)."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
            for row in frame.reset_index().to_dict(orient="records")]
