"""The host side shared by the gymnasium adapters (`gymnasium_env`): task ids, argument checks
(ValueError naming the argument) and the conversion of step infos to Python and NumPy values;
for the one-env adapters of the other task families (`fleet_gym`, `reservation_gym`) their task
family (`AdapterTask`) and the stream of episodes their resets start (`StreamedEnv`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from inferencegym_jax import tasks
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.env import EnvParams, InferenceGymEnv
from inferencegym_jax.traffic import sampling

__all__ = ["MAX_SEED", "NAMESPACE", "RENDER_MODES", "RESET_OPTIONS", "AdapterTask", "StreamedEnv", "batched_info",
           "check_actions", "check_entries", "check_options", "check_render_mode", "describe", "gymnasium_id",
           "json_scalars", "make_task", "register_ids", "task_id_of", "to_python"]

NAMESPACE = "InferenceGym"
RENDER_MODES = ["ansi"]
MAX_SEED = sampling.MAX_SEED
RESET_OPTIONS = ("key", "episode")


# ----------------------------------------------------------------------------- ids


def gymnasium_id(env_id: str) -> str:
    """The gymnasium id of a task id: "InferenceGym-Task1-v0" -> "InferenceGym/Task1-v0"."""
    return env_id.replace("-", "/", 1)


def task_id_of(task: str | int) -> str:
    """The registered task id ("InferenceGym-Task1-v0") of a task id, its gymnasium id
    ("InferenceGym/Task1-v0") or a task number; ValueError naming what was typed otherwise."""
    if isinstance(task, str) and task.startswith(NAMESPACE + "/"):
        candidate = task.replace("/", "-", 1)
        if candidate in tasks.registered_envs():
            return candidate
    try:
        return tasks.resolve_id(task, key="task_id=")
    except ValueError:
        allowed = [gymnasium_id(i) for i in tasks.registered_envs()]
        raise ValueError(f"task_id={task!r}: must be a task number, one of {tasks.registered_envs()} "
                         f"or one of {allowed}") from None


# ----------------------------------------------------------------------------- host-side checks


def check_options(options: Mapping[str, Any] | None, seed: Any) -> tuple[jax.Array, int] | None:
    """(root key, episode) of reset's options, None when they name no stream; ValueError otherwise."""
    if not options:
        return None
    if not isinstance(options, Mapping) or set(options) - set(RESET_OPTIONS):
        unknown = sorted(set(options) - set(RESET_OPTIONS)) if isinstance(options, Mapping) else options
        raise ValueError(f"reset options {unknown!r}: allowed keys are {list(RESET_OPTIONS)}")
    if "key" not in options:
        raise ValueError("reset options: 'episode' needs 'key' (the root key of its stream)")
    if seed is not None:
        raise ValueError("reset: pass seed= or options['key'], not both")
    episode = options.get("episode", 0)
    if isinstance(episode, bool) or not isinstance(episode, (int, np.integer)) or not 0 <= episode < 2**31:
        raise ValueError(f"options['episode']={episode!r}: must be an integer in [0, {2**31 - 1}]")
    return sampling.as_key(options["key"]), int(episode)


def next_stream(root: jax.Array | None, episode: int, seed: int | None, stream: tuple[jax.Array, int] | None,
                np_random: np.random.Generator) -> tuple[jax.Array, int]:
    """(stream root, episode) a reset starts, as the adapters' module docstrings say: a seed starts
    the stream jax.random.key(seed) at episode 0, options' (key, episode) that episode, a first
    reset without either a stream drawn from gymnasium's `np_random`, any other the next episode."""
    if seed is not None:
        return jax.random.key(seed), 0
    if stream is not None:
        return stream
    if root is None:
        return jax.random.key(int(np_random.integers(MAX_SEED + 1))), 0
    return root, episode + 1


def check_actions(actions: Any, nvec: np.ndarray, name: str = "action") -> np.ndarray:
    """int32 grid indices of `actions`, shape nvec.shape ((5,), or (N, 5) for a batch).

    Raises:
      ValueError: wrong shape, a non-integer dtype, or an index outside [0, nvec - 1] (the
        message names the entry, its knob, the value and the allowed range).
    """
    values = np.asarray(actions)
    if values.shape != nvec.shape:
        raise ValueError(f"{name} must be an int array of shape {nvec.shape} (grid indices of {KNOBS}), "
                         f"got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype (grid indices), got {values.dtype}")
    bad = np.argwhere((values < 0) | (values >= nvec))
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        knob = KNOBS[where[-1]]
        masked = " (the task masks this knob)" if nvec[where] == 1 else ""
        index = ", ".join(map(str, where))
        raise ValueError(f"{name}[{index}] ({knob}) = {int(values[where])} is outside its range "
                         f"[0, {int(nvec[where]) - 1}]{masked}")
    return values.astype(np.int32)


def check_render_mode(render_mode: str | None) -> str | None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode={render_mode!r}: must be None or one of {RENDER_MODES}")
    return render_mode


def make_task(task_id: str | int, params: EnvParams | None, overrides: Mapping[str, Any]) -> tuple:
    """(task id, env, params): the task's env with its default params, the key of the compiled
    programs, and what runs: `params` (checked as the env checks params), the task with
    `overrides` (as `inferencegym_jax.make` takes them) or its defaults."""
    env_id = task_id_of(task_id)
    if params is not None and overrides:
        raise ValueError(f"pass params= or task overrides ({', '.join(sorted(overrides))}), not both")
    env, default = tasks.make(env_id)
    if overrides:
        default = tasks.make(env_id, **overrides)[1]
    elif params is not None:
        InferenceGymEnv(params, env_id)  # the env's own checks (ValueError naming the field)
        default = params
    return env_id, env, default


# ----------------------------------------------------------------------------- host-side conversion


def to_python(tree: Any) -> Any:
    """Info arrays of one env as plain Python scalars (0-d) and NumPy arrays (the rest)."""
    if isinstance(tree, Mapping):
        return {k: to_python(v) for k, v in tree.items()}
    array = np.asarray(tree)
    return array.copy() if array.ndim else array.item()


def batched_info(tree: Any, mask: np.ndarray) -> dict[str, Any]:
    """Info arrays of N envs (leading axis N) as `gymnasium.vector.VectorEnv._add_info` would
    batch the infos of N `GymnasiumEnv`s of which those in `mask` (bool (N,)) have one: values
    where the mask is False are zeros, every key k has its mask "_k", and nothing has no key."""
    if not mask.any():
        return {}
    everywhere = bool(mask.all())
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out[key] = batched_info(value, mask)
        else:
            array = np.asarray(value)  # a fresh array of this step (`_Layout.unpack`)
            if array.ndim == 1:  # scalars of one env are Python ints, floats and bools
                array = array.astype({"i": np.int64, "u": np.int64, "f": np.float64}.get(array.dtype.kind, array.dtype))
            if not everywhere:
                array = np.where(mask.reshape(mask.shape + (1,) * (array.ndim - 1)), array, np.zeros_like(array))
            out[key] = array
        out[f"_{key}"] = mask.copy()
    return out


def describe(timestep: int, horizon: int, reward: float | None, info: Mapping[str, Any] | None) -> str:
    """One line about the last interval (the "ansi" rendering)."""
    if info is None:
        return f"t=0/{horizon}: episode start, no interval served yet"
    m, knobs = info["metrics"], info["applied_action"]
    config = " ".join(f"{k}={knobs[k]:g}" for k in KNOBS)
    return (f"t={timestep}/{horizon} reward {reward:+.3f} | queue {m['queue_depth']:.0f} req, "
            f"{m['tokens_per_s']:.0f} tokens/s, TTFT p50/p99 {m['ttft_p50_s']:.2f}/{m['ttft_p99_s']:.2f} s, "
            f"SLO violations {100 * m['slo_violation_rate']:.1f}%, KV {100 * m['kv_occupancy']:.0f}% | {config}")



# ----------------------------------------------------------------------------- one-env adapters of other families


def check_entries(action: Any, nvec: np.ndarray, names: Sequence[str], name: str = "action",
                  notes: Mapping[int, str] | None = None, what: str | None = None) -> np.ndarray:
    """int32 copy of one env's `action`, shape nvec.shape (1-d), entry i in [0, nvec[i] - 1].

    Args:
      names: the entries' names (the messages name them); notes: a text added after entry i's
        range (the meaning of its values); what: the entries described in the shape message
        (default: their names).

    Raises:
      ValueError: wrong shape, a non-integer dtype, or an entry outside its range (the message
        names the entry, its name, the value and the allowed range).
    """
    values = np.asarray(action)
    what = what or str(list(names))
    if values.shape != nvec.shape:
        raise ValueError(f"{name} must be an int array of shape {nvec.shape} ({what}), got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype ({what}), got {values.dtype}")
    bad = np.flatnonzero((values < 0) | (values >= nvec))
    if bad.size:
        i = int(bad[0])
        note = (notes or {}).get(i, "")
        raise ValueError(f"{name}[{i}] ({names[i]}) = {int(values[i])} is outside its range "
                         f"[0, {int(nvec[i]) - 1}]{note}")
    return values.astype(np.int32)


def register_ids(env_ids: Sequence[str], entry_point: str, gym: Any) -> list[str]:
    """Register gymnasium id `gymnasium_id(i)` for each task id i at `entry_point` (its class,
    made with task_id=i) in `gym` (the gymnasium module: this module does not import it);
    returns the ids. Idempotent: ids already registered are left as they are."""
    ids = []
    for env_id in env_ids:
        gym_id = gymnasium_id(env_id)
        if gym_id not in gym.registry:
            gym.register(gym_id, entry_point=entry_point, kwargs={"task_id": env_id})
        ids.append(gym_id)
    return ids


def json_scalars(tree: Any) -> Any:
    """Host arrays of 0-d leaves (in nested dicts) as Python ints and floats (JSON-safe)."""
    if isinstance(tree, Mapping):
        return {k: json_scalars(v) for k, v in tree.items()}
    value = np.asarray(tree)
    return int(value) if np.issubdtype(value.dtype, np.integer) else float(value)


@dataclasses.dataclass(frozen=True)
class AdapterTask:
    """A task family behind a one-env adapter (`fleet_gym`, `reservation_gym`).

    Attributes:
      ids: () -> list[str], the family's registered task ids ("InferenceGym-Fleet1-v1", ...).
      make: (env_id, split, **overrides) -> (env, params), the family's `make` (ValueError naming
        a bad split or override).
      env_class: the env's class; `env_class(params, env_id)` checks params (ValueError naming the type).
    """

    ids: Callable[[], list[str]]
    make: Callable[..., tuple[Any, Any]]
    env_class: type

    def task_id(self, task: Any) -> str:
        """The task id ("InferenceGym-Fleet1-v1") of a task id or its gymnasium id
        ("InferenceGym/Fleet1-v1"); ValueError naming what was typed otherwise."""
        ids = self.ids()
        env_id = task.replace("/", "-", 1) if isinstance(task, str) and task.startswith(NAMESPACE + "/") else task
        if not isinstance(env_id, str) or env_id not in ids:
            raise ValueError(f"task_id={task!r}: must be one of {ids + [gymnasium_id(i) for i in ids]}")
        return env_id

    def resolve(self, task_id: Any, split: str | None, params: Any, overrides: Mapping[str, Any]
                ) -> tuple[str, Any, Any]:
        """(task id, the static env, the params that run): `params`, or the task with `split` and
        `overrides` (`make`'s checks: ValueError naming the key). The static env is the task's
        with its training params, one object per task: the jitted programs' static argument."""
        env_id = self.task_id(task_id)
        env = _training_env(self, env_id)
        if params is not None:
            if split is not None or overrides:
                given = ["split"] * (split is not None) + sorted(overrides)
                raise ValueError(f"pass params= or split and task overrides ({', '.join(given)}), not both")
            self.env_class(params, env_id)  # the env's own check (ValueError naming the type)
            return env_id, env, params
        if split is None and not overrides:
            return env_id, env, env.default_params
        return env_id, env, self.make(env_id, "train" if split is None else split, **overrides)[1]


@functools.cache
def _training_env(task: AdapterTask, env_id: str) -> Any:
    """The task's env with its training params (one object per task)."""
    return task.make(env_id)[0]


class StreamedEnv:
    """The state and resets the one-env adapters share (`fleet_gym`, `reservation_gym`): mixed in
    before `gymnasium.Env` (`class FleetGymnasiumEnv(StreamedEnv, gymnasium.Env)`), whose reset
    (seeding `np_random`) `_begin` calls.

    Attributes (set by `_init_task`):
      task_id: the task id; env: the task's env with its training params (the static argument of
      the jitted programs); params: the params that run; render_mode: None or "ansi".
    """

    np_random: np.random.Generator

    def _init_task(self, task: AdapterTask, task_id: Any, split: str | None, params: Any,
                   overrides: Mapping[str, Any], render_mode: str | None) -> None:
        self.render_mode = check_render_mode(render_mode)
        self.task_id, self.env, self.params = task.resolve(task_id, split, params, overrides)
        self._root: jax.Array | None = None
        self._episode = 0
        self._state: Any = None

    def _begin(self, seed: int | None, options: Mapping[str, Any] | None) -> tuple[jax.Array, np.int32]:
        """(root key, episode int32) of the episode a reset starts (`next_stream`); seeds np_random."""
        stream = check_options(options, seed)
        seed = None if seed is None else sampling.check_seed(seed)
        super().reset(seed=seed)  # type: ignore[misc]  # gymnasium.Env.reset, next in the MRO
        self._root, self._episode = next_stream(self._root, self._episode, seed, stream, self.np_random)
        return self._root, np.int32(self._episode)

    def _running(self) -> tuple[Any, jax.Array, np.int32]:
        """(state, root key, episode int32) of the episode under way; ValueError before a reset."""
        if self._state is None or self._root is None:
            raise ValueError("call reset() before step()")
        return self._state, self._root, np.int32(self._episode)
