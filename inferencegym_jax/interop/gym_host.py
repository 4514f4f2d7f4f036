"""The host side shared by the gymnasium adapters (`gymnasium_env`): task ids, argument checks
(ValueError naming the argument) and the conversion of step infos to Python and NumPy values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from inferencegym_jax import tasks
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.env import EnvParams, InferenceGymEnv
from inferencegym_jax.traffic import sampling

__all__ = ["MAX_SEED", "NAMESPACE", "RENDER_MODES", "RESET_OPTIONS", "batched_info", "check_actions",
           "check_options", "check_render_mode", "describe", "gymnasium_id", "make_task", "task_id_of", "to_python"]

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

