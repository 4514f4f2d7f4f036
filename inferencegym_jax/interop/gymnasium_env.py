"""Gymnasium adapters: the serving env as a `gymnasium.Env` and as a jitted `gymnasium.vector.VectorEnv`.

    import gymnasium
    import inferencegym_jax.interop.gymnasium_env  # registers InferenceGym/Task1-v0 .. InferenceGym/Task4-v0

    env = gymnasium.make("InferenceGym/Task1-v0")
    obs, info = env.reset(seed=0)                     # float32 (21,), entries in [0, 1]
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    envs = gymnasium.make_vec("InferenceGym/Task1-v0", num_envs=8)   # one jit(vmap) step for all 8

Ids. Task "InferenceGym-TaskN-v0" of `inferencegym_jax.registered_envs()` is registered as
"InferenceGym/TaskN-v0" (gymnasium namespace "InferenceGym", name "TaskN", version 0: the first
"-" becomes "/"; `gymnasium_id` and `task_id_of` map the two spellings). Importing this module
registers them (`register_envs`), so `gymnasium.make("inferencegym_jax.interop.gymnasium_env:InferenceGym/Task1-v0")`
works without an import of your own. Each id has a `vector_entry_point`: `gymnasium.make_vec` uses
`GymnasiumVectorEnv` (one jitted, vmapped step) unless told `vectorization_mode="sync"`.

Spaces. Observations are `env.flatten_observation`: float32 (OBS_SIZE,) = (21,), each entry in
[0, 1] (`observation.flat_observation_space`). Actions are int grid indices (`actions.KNOBS` order:
kv_budget, spec_length, batch_size, prefill_disagg, quant_tier), `gymnasium.spaces.MultiDiscrete`
of the task's `env.action_space(params).nvec`; a knob the task masks has nvec 1 (index 0).

Keys. `reset(seed=s)` starts the stream root = `jax.random.key(s)` (s an int in [0, 2**32 - 1]: a
key keeps 32 bits) at episode 0, and each `reset()` without a seed starts the stream's next
episode. Episode e of a stream, in plain JAX (`tests/test_gymnasium_env.py` checks it):

    k_reset, k_env, _ = jax.random.split(jax.random.fold_in(root, e), 3)
    obs, state = env.reset_env(k_reset, params)
    obs, state, reward, terminated, truncated, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)

for intervals t = 0, 1, ...; these are `evaluate.run_episode`'s keys, so episode e of a stream is
episode e of `evaluate.run_episodes(env, params, policy, root, ...)` given the same actions.
`reset(options={"key": k, "episode": e})` starts episode e of the stream of any root key k (such
as `evaluate.evaluation_key(0)`, the held-out episodes of the README's tables). A first `reset()`
without a seed draws s = `np_random.integers(2**32)` from gymnasium's `np_random` (itself seeded
from OS entropy). `GymnasiumVectorEnv` gives sub-env i its own stream, exactly as
`SyncVectorEnv` over `GymnasiumEnv`s does: `reset(seed=s)` seeds env i with s + i.

Tasks. Both adapters take a task id (or its gymnasium id, or a task number) and either
`params=` (EnvParams, e.g. `params.replace(max_steps_in_episode=jnp.int32(5))`) or task overrides
as `inferencegym_jax.make` takes them (`max_steps=5`, `workload={"base_rate": 20.0}`). Reset and
step are jitted once per task: the compiled programs are keyed by the task's env, and params are
their arguments, so another horizon or rate compiles nothing new.

Episodes end only at the horizon, `params.max_steps_in_episode` intervals (task 1: 200):
`terminated` is always False and `truncated` True on the last interval. Step info (reset info is
{}), plain Python scalars and NumPy arrays:
  reward_components: {throughput, latency, violations, cost, stability: float}, the reward's terms.
  metrics: every field of `serving.IntervalMetrics` (float, units there; class_share float32 (3,)).
  applied_action: {knob: float}, the configuration applied, in knob units.
  clipped: bool (5,), knobs the env clipped or masked to the task default.
  offered_tokens: float [tokens], output tokens of the requests that arrived in the interval.
  timestep: int [intervals] since the episode began.
`stack_infos` and `trajectory_from_infos` turn them into an `evaluate.Trajectory`, which the graders
score; `evaluate_policy` grades any host-side policy (SB3's, say) on the evaluator's episodes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.gymnasium_env needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate, serving, tasks
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
from inferencegym_jax.observation import OBS_SIZE
from inferencegym_jax.traffic import sampling

__all__ = ["GymnasiumEnv", "GymnasiumVectorEnv", "check_actions", "evaluate_policy", "gymnasium_id", "register_envs",
           "stack_infos", "task_id_of", "trajectory_from_infos"]

NAMESPACE = "InferenceGym"
ENTRY_POINT = "inferencegym_jax.interop.gymnasium_env:GymnasiumEnv"
VECTOR_ENTRY_POINT = "inferencegym_jax.interop.gymnasium_env:GymnasiumVectorEnv"
RENDER_MODES = ["ansi"]
MAX_SEED = sampling.MAX_SEED
METRIC_NAMES = tuple(f.name for f in dataclasses.fields(serving.IntervalMetrics))
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


def register_envs() -> list[str]:
    """Register one gymnasium id per task (see the module docstring); returns the ids.

    Idempotent: ids already registered are left as they are.
    """
    ids = []
    for env_id in tasks.registered_envs():
        gym_id = gymnasium_id(env_id)
        if gym_id not in gymnasium.registry:
            gymnasium.register(gym_id, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT,
                               kwargs={"task_id": env_id})
        ids.append(gym_id)
    return ids


# ----------------------------------------------------------------------------- jitted programs
# Two programs per task and batch width: `_start_batch` and `_step_batch`. `GymnasiumEnv` runs
# them on a batch of one, so that any number of single envs (SB3's DummyVecEnv, say) and a
# vector env of one share them.
# The env is a static argument and params an argument: the adapters pass the task's env with its
# default params (equal envs compare equal), so every adapter of a task shares the compiled
# programs, and params of the same structure (another horizon, another rate, given as params= or
# as overrides) compile nothing new.


def _start(env: InferenceGymEnv, params: EnvParams, root: jax.Array, episode: jax.Array) -> tuple[jax.Array, EnvState]:
    """float32 (OBS_SIZE,) observation and state of the first interval of an episode."""
    obs, state = env.reset_env(evaluate.stream_episode_keys(root, episode)[0], params)
    return env.flatten_observation(obs, params), state


def _interval(
    env: InferenceGymEnv, params: EnvParams, state: EnvState, root: jax.Array, episode: jax.Array, action: jax.Array
) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
    """One interval of an episode: obs float32 (OBS_SIZE,), state, reward float32, terminated,
    truncated (bool), and the info arrays of the module docstring."""
    key = jax.random.fold_in(evaluate.stream_episode_keys(root, episode)[1], state.time)
    obs, state, reward, terminated, truncated, info = env.step_env(key, state, action, params)
    m = info["metrics"]
    out = {
        "reward_components": dict(info["reward_components"]),
        "metrics": {name: getattr(m, name) for name in METRIC_NAMES},
        "applied_action": {name: getattr(info["applied_action"], name) for name in KNOBS},
        "clipped": info["clipped"],
        "offered_tokens": jnp.sum(info["arrivals"].output_tokens),
        "timestep": state.time,
    }
    return env.flatten_observation(obs, params), state, reward, terminated, truncated, out


def _pack(tree: Any, batch_dims: int) -> jax.Array:
    """Every leaf of `tree` as float32, concatenated on the last axis (one device-to-host
    transfer instead of one per leaf). Lossless here: the leaves are float32, bools and int32
    interval counts below 2**24."""
    leaves = jax.tree_util.tree_leaves(tree)
    lead = leaves[0].shape[:batch_dims]
    return jnp.concatenate([x.astype(jnp.float32).reshape(lead + (-1,)) for x in leaves], axis=-1)


class _Layout:
    """Where `_pack` put each leaf of a tree, from the tree's unbatched `jax.eval_shape`."""

    def __init__(self, like: Any):
        leaves, self.treedef = jax.tree_util.tree_flatten(like)
        self.parts, start = [], 0
        for leaf in leaves:
            size = int(np.prod(leaf.shape))
            self.parts.append((start, start + size, tuple(leaf.shape), np.dtype(leaf.dtype)))
            start += size

    def unpack(self, packed: np.ndarray) -> Any:
        """The tree as NumPy arrays from `packed` float32 (..., size), batch axes first."""
        lead = packed.shape[:-1]
        return self.treedef.unflatten(
            [packed[..., a:b].reshape(lead + shape).astype(dtype) for a, b, shape, dtype in self.parts])


def _outputs(env: InferenceGymEnv, params: EnvParams, state: EnvState, root: jax.Array, episode: jax.Array,
             action: jax.Array) -> tuple[EnvState, dict[str, Any]]:
    """(state, outputs) of one interval: outputs = {obs, reward, terminated, truncated, info}."""
    obs, state, reward, terminated, truncated, info = _interval(env, params, state, root, episode, action)
    return state, {"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}


def _layout(env: InferenceGymEnv) -> dict[str, Any]:
    """`jax.eval_shape` of `_outputs`'s outputs for one env (the same for every params)."""
    params = env.default_params
    _, state = jax.eval_shape(functools.partial(_start, env), params, jax.random.key(0), jnp.int32(0))
    action = jnp.zeros(len(KNOBS), jnp.int32)
    return jax.eval_shape(functools.partial(_outputs, env), params, state, jax.random.key(0), jnp.int32(0), action)[1]


@functools.cache
def _output_layout(env: InferenceGymEnv) -> _Layout:
    """The layout of each row of `_step_batch`'s packed outputs."""
    return _Layout(_layout(env))


@functools.partial(jax.jit, static_argnums=0)
def _start_batch(env: InferenceGymEnv, params: EnvParams, roots: jax.Array, episodes: jax.Array) -> tuple:
    """`_start` of N envs: roots typed keys (N,), episodes int32 (N,)."""
    return jax.vmap(lambda r, e: _start(env, params, r, e))(roots, episodes)


@functools.partial(jax.jit, static_argnums=0)
def _step_batch(env: InferenceGymEnv, params: EnvParams, state: EnvState, roots: jax.Array, episodes: jax.Array,
                actions: jax.Array) -> tuple[EnvState, jax.Array]:
    """One interval of N envs, without auto-reset (`GymnasiumVectorEnv` starts the next
    episodes with `_start_batch`): (state, `_pack`ed outputs float32 (N, size)).

    Args: state (N,) leaves, roots typed keys (N,), episodes int32 (N,), actions int32 (N, 5).
    """
    state, outputs = jax.vmap(lambda s, r, e, a: _outputs(env, params, s, r, e, a))(state, roots, episodes, actions)
    return state, _pack(outputs, 1)


@jax.jit
def _select(mask: jax.Array, fresh: EnvState, stepped: EnvState) -> EnvState:
    """`fresh` where `mask` (bool (N,)), else `stepped`: leaves (N, ...)."""
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), fresh, stepped)


# ----------------------------------------------------------------------------- host-side checks


def _check_options(options: Mapping[str, Any] | None, seed: Any) -> tuple[jax.Array, int] | None:
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


def _check_render_mode(render_mode: str | None) -> str | None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode={render_mode!r}: must be None or one of {RENDER_MODES}")
    return render_mode


def _make_task(task_id: str | int, params: EnvParams | None, overrides: Mapping[str, Any]) -> tuple:
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


def _to_python(tree: Any) -> Any:
    """Info arrays of one env as plain Python scalars (0-d) and NumPy arrays (the rest)."""
    if isinstance(tree, Mapping):
        return {k: _to_python(v) for k, v in tree.items()}
    array = np.asarray(tree)
    return array.copy() if array.ndim else array.item()


def _batched(tree: Any, mask: np.ndarray) -> dict[str, Any]:
    """Info arrays of N envs (leading axis N) as `gymnasium.vector.VectorEnv._add_info` would
    batch the infos of N `GymnasiumEnv`s of which those in `mask` (bool (N,)) have one: values
    where the mask is False are zeros, every key k has its mask "_k", and nothing has no key."""
    if not mask.any():
        return {}
    everywhere = bool(mask.all())
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out[key] = _batched(value, mask)
        else:
            array = np.asarray(value)  # a fresh array of this step (`_Layout.unpack`)
            if array.ndim == 1:  # scalars of one env are Python ints, floats and bools
                array = array.astype({"i": np.int64, "u": np.int64, "f": np.float64}.get(array.dtype.kind, array.dtype))
            if not everywhere:
                array = np.where(mask.reshape(mask.shape + (1,) * (array.ndim - 1)), array, np.zeros_like(array))
            out[key] = array
        out[f"_{key}"] = mask.copy()
    return out


def _describe(timestep: int, horizon: int, reward: float | None, info: Mapping[str, Any] | None) -> str:
    """One line about the last interval (the "ansi" rendering)."""
    if info is None:
        return f"t=0/{horizon}: episode start, no interval served yet"
    m, knobs = info["metrics"], info["applied_action"]
    config = " ".join(f"{k}={knobs[k]:g}" for k in KNOBS)
    return (f"t={timestep}/{horizon} reward {reward:+.3f} | queue {m['queue_depth']:.0f} req, "
            f"{m['tokens_per_s']:.0f} tokens/s, TTFT p50/p99 {m['ttft_p50_s']:.2f}/{m['ttft_p99_s']:.2f} s, "
            f"SLO violations {100 * m['slo_violation_rate']:.1f}%, KV {100 * m['kv_occupancy']:.0f}% | {config}")


# ----------------------------------------------------------------------------- single env


class GymnasiumEnv(gymnasium.Env):
    """One serving env as a `gymnasium.Env` (spaces, keys, info: the module docstring).

    Args:
      task_id: a task id ("InferenceGym-Task1-v0"), its gymnasium id ("InferenceGym/Task1-v0")
        or a task number.
      params: EnvParams to run instead of the task's defaults (e.g. `params.replace(
        max_steps_in_episode=jnp.int32(5))`); checked as the env checks params.
      render_mode: None or "ansi" (`render()` returns a line about the last interval).
      **overrides: task overrides, as `inferencegym_jax.make` takes them (`max_steps=5`,
        `workload={"base_rate": 20.0}`, `gpu="h100-sxm"`).

    Attributes:
      env: the task's serving env (with its default params); params: the EnvParams that run;
      task_id: the registered task id.
    """

    metadata = {"render_modes": RENDER_MODES, "render_fps": 1}  # one 1 s control interval per frame

    def __init__(self, task_id: str | int = "InferenceGym-Task1-v0", params: EnvParams | None = None,
                 render_mode: str | None = None, **overrides: Any):
        self.render_mode = _check_render_mode(render_mode)
        self.task_id, self.env, self.params = _make_task(task_id, params, overrides)
        self._nvec = np.asarray(self.env.action_space(self.params).nvec, np.int64)
        self.action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self._horizon = int(self.params.max_steps_in_episode)
        self._root: jax.Array | None = None
        self._episode = 0
        self._state: EnvState | None = None
        self._last: tuple[int, float | None, dict[str, Any] | None] = (0, None, None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (see the module docstring for which one); returns (obs, {}).

        obs: float32 (OBS_SIZE,), entries in [0, 1].
        """
        stream = _check_options(options, seed)
        seed = None if seed is None else sampling.check_seed(seed)
        super().reset(seed=seed)
        if seed is not None:
            self._root, self._episode = jax.random.key(seed), 0
        elif stream is not None:
            self._root, self._episode = stream
        elif self._root is None:
            self._root, self._episode = jax.random.key(int(self.np_random.integers(MAX_SEED + 1))), 0
        else:
            self._episode += 1
        obs, self._state = _start_batch(self.env, self.params, self._root[None], np.int32([self._episode]))
        self._last = (0, None, None)
        return np.array(obs[0]), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One control interval (1 s of serving): (obs float32 (OBS_SIZE,), reward float in
        [-1, 1], terminated (always False), truncated (True on the horizon's last interval), info).

        Raises:
          ValueError: before `reset`, or for an action of the wrong shape, dtype or range.
        """
        if self._state is None:
            raise ValueError("call reset() before step()")
        indices = check_actions(action, self._nvec)
        self._state, packed = _step_batch(self.env, self.params, self._state, self._root[None],
                                          np.int32([self._episode]), indices[None])
        out = _output_layout(self.env).unpack(np.asarray(packed)[0])  # the state stays on the device
        info = _to_python(out["info"])
        reward = float(out["reward"])
        self._last = (info["timestep"], reward, info)
        return out["obs"], reward, bool(out["terminated"]), bool(out["truncated"]), info

    def render(self) -> str | None:
        """A line about the last interval for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        return _describe(self._last[0], self._horizon, self._last[1], self._last[2])


# ----------------------------------------------------------------------------- vector env


class GymnasiumVectorEnv(gymnasium.vector.VectorEnv):
    """N serving envs stepped together by one jitted, vmapped program.

    Results equal `gymnasium.vector.SyncVectorEnv` over N `GymnasiumEnv`s with the same seeds
    and autoreset mode (to float32 rounding: the batch is vectorised), info masks included.

    Args:
      num_envs: N >= 1.
      task_id, params, render_mode, **overrides: as `GymnasiumEnv`'s.
      autoreset_mode: `AutoresetMode.SAME_STEP` (default; the step that ends an episode returns
        the next episode's first observation, the last one in info["final_obs"] (object array,
        None elsewhere) with mask info["_final_obs"], and that step's info in
        info["final_info"] / info["_final_info"]) or `AutoresetMode.NEXT_STEP` (the step after
        the end returns the next episode's first observation with reward 0, terminated and
        truncated False, and no info), or their names.
    """

    def __init__(self, num_envs: int = 1, task_id: str | int = "InferenceGym-Task1-v0",
                 params: EnvParams | None = None, render_mode: str | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP, **overrides: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: must be an integer >= 1")
        modes = (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP)
        if autoreset_mode not in modes and autoreset_mode not in [m.value for m in modes]:
            raise ValueError(f"autoreset_mode={autoreset_mode!r}: must be one of {[m.value for m in modes]}")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.render_mode = _check_render_mode(render_mode)
        self.task_id, self.env, self.params = _make_task(task_id, params, overrides)
        self.num_envs = int(num_envs)
        self.metadata = {"render_modes": RENDER_MODES, "render_fps": 1, "autoreset_mode": self.autoreset_mode}
        self._nvec = np.asarray(self.env.action_space(self.params).nvec, np.int64)
        self.single_action_space = gymnasium.spaces.MultiDiscrete(self._nvec)
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._batch_nvec = np.broadcast_to(self._nvec, (self.num_envs, len(self._nvec)))
        self._horizon = int(self.params.max_steps_in_episode)
        self._roots: jax.Array | None = None
        self._episodes: np.ndarray | None = None  # int32 (N,), each env's episode of its stream
        self._state: EnvState | None = None
        self._restart = np.zeros(self.num_envs, bool)
        self._last: list[tuple[int, float | None, dict[str, Any] | None]] = [(0, None, None)] * self.num_envs

    def _seed_list(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """One seed (or None) per env, checked; ValueError naming the offending entry."""
        if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
            return [None if seed is None else sampling.check_seed(int(seed) + i, f"seed={seed} + {i}")
                    for i in range(self.num_envs)]
        if isinstance(seed, Sequence) and not isinstance(seed, str) and len(seed) == self.num_envs:
            return [None if s is None else sampling.check_seed(s, f"seed[{i}]") for i, s in enumerate(seed)]
        raise ValueError(f"seed={seed!r}: must be None, an int or a list of {self.num_envs} ints or Nones")

    def _set_streams(self, seed: int | Sequence[int | None] | None, stream: tuple[jax.Array, int] | None) -> None:
        """Every env's root key and episode for `reset` (see its docstring)."""
        if stream is not None:
            root, first = stream
            data = jax.random.key_data(root)
            self._roots = jax.random.wrap_key_data(jnp.broadcast_to(data, (self.num_envs, *data.shape)),
                                                   impl=jax.random.key_impl(root))
            self._episodes = np.arange(first, first + self.num_envs, dtype=np.int32)
            return
        seeds = self._seed_list(seed)
        if self._roots is None:  # no stream yet: random ones, from gymnasium's np_random
            seeds = [int(self.np_random.integers(MAX_SEED + 1)) if s is None else s for s in seeds]
        fresh = np.array([s is not None for s in seeds])
        if fresh.any():
            new = jax.random.key_data(jax.vmap(jax.random.key)(  # = jax.random.key(seed) of each env
                np.asarray([0 if s is None else s for s in seeds], np.uint32)))
            old = new if self._roots is None else jax.random.key_data(self._roots)
            self._roots = jax.random.wrap_key_data(jnp.where(fresh[:, None], new, old))
        previous = np.zeros(self.num_envs, np.int32) if self._episodes is None else self._episodes
        self._episodes = np.where(fresh, 0, previous + 1).astype(np.int32)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode in every env: obs float32 (N, OBS_SIZE) and info {}.

        seed: None (each env's next episode; random streams the first time), an int s (env i
        seeded with s + i) or a list of N ints or Nones (None: that env's next episode).
        options: {"key": k, "episode": e} starts episodes e, e + 1, ..., e + N - 1 of the stream
        of root key k in envs 0 .. N-1 (held-out evaluation: `evaluate_policy`); a later
        `reset()` moves every env on by one episode of that stream.
        """
        stream = _check_options(options, seed)
        super().reset(seed=seed if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None)
        self._set_streams(seed, stream)
        obs, self._state = _start_batch(self.env, self.params, self._roots, self._episodes)
        self._restart = np.zeros(self.num_envs, bool)
        self._last = [(0, None, None)] * self.num_envs
        return np.array(obs), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One interval in every env: obs float32 (N, OBS_SIZE), reward float64 (N,),
        terminated bool (N,), truncated bool (N,), info (batched as `SyncVectorEnv` batches it).

        Raises:
          ValueError: before `reset`, or for actions of the wrong shape (N, 5), dtype or range.
        """
        if self._state is None:
            raise ValueError("call reset() before step()")
        indices = check_actions(actions, self._batch_nvec, "actions")
        restart = self._restart  # NEXT_STEP: the envs that ended on the previous step start again
        self._restart = np.zeros(self.num_envs, bool)
        if restart.all():  # every env ended together (one horizon): nothing steps
            obs = self._next_episodes(restart)
            self._remember(None, restart)
            zeros = np.zeros(self.num_envs, bool)
            return obs, np.zeros(self.num_envs), zeros, zeros.copy(), {}
        stepped, packed = _step_batch(self.env, self.params, self._state, self._roots, self._episodes, indices)
        self._state = stepped
        out = _output_layout(self.env).unpack(np.asarray(packed))
        ended = out["terminated"] | out["truncated"]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            out["reward"][restart], out["terminated"][restart], out["truncated"][restart] = 0.0, False, False
            self._restart = ended & ~restart
        else:
            restart = ended
        obs, info = out["obs"], _batched(out["info"], ~restart)
        if restart.any():
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(restart):
                    final_obs[i] = obs[i].copy()
                info.update(final_obs=final_obs, _final_obs=restart.copy(),
                            final_info=_batched(out["info"], restart), _final_info=restart.copy())
            obs = np.where(restart[:, None], self._next_episodes(restart), obs)
        self._remember(out, restart)
        return obs, out["reward"].astype(np.float64), out["terminated"], out["truncated"], info

    def _next_episodes(self, mask: np.ndarray) -> np.ndarray:
        """Start the next episode of the envs in `mask` (bool (N,)); their first observations
        float32 (N, OBS_SIZE) (rows outside the mask: unused)."""
        self._episodes = (self._episodes + mask).astype(np.int32)
        obs, fresh = _start_batch(self.env, self.params, self._roots, self._episodes)
        self._state = fresh if mask.all() else _select(mask, fresh, self._state)
        return np.asarray(obs)

    def _remember(self, out: dict[str, Any] | None, restart: np.ndarray) -> None:
        """Keep what `render` shows, only when rendering (the conversion costs time)."""
        if self.render_mode != "ansi":
            return
        for i in range(self.num_envs):
            if restart[i] or out is None:
                self._last[i] = (0, None, None)
            else:
                one = _to_python(jax.tree_util.tree_map(lambda x, i=i: x[i], out["info"]))
                self._last[i] = (one["timestep"], float(out["reward"][i]), one)

    def render(self) -> tuple[str, ...] | None:
        """One line per env about its last interval for render_mode "ansi", else None."""
        if self.render_mode != "ansi":
            return None
        return tuple(_describe(t, self._horizon, r, info) for t, r, info in self._last)


# ----------------------------------------------------------------------------- grading


def stack_infos(infos: Sequence[Mapping[str, Any]], axis: int = 0) -> dict[str, Any]:
    """Step infos of one structure (a `GymnasiumEnv`'s, or a `GymnasiumVectorEnv`'s batched ones)
    stacked along a new axis `axis` of every array; the vector env's "_k" masks are dropped."""
    out: dict[str, Any] = {}
    for key, value in infos[0].items():
        if key.startswith("_"):
            continue
        if isinstance(value, Mapping):
            out[key] = stack_infos([info[key] for info in infos], axis)
        else:
            out[key] = np.stack([np.asarray(info[key]) for info in infos], axis)
    return out


def trajectory_from_infos(infos: Mapping[str, Any], rewards: Any = None) -> evaluate.Trajectory:
    """An `evaluate.Trajectory` of whole episodes' step infos, for
    `evaluate.grade_trajectory(trajectory, params, task_id)` and the graders.

    Args:
      infos: step infos stacked (`stack_infos`) to leading axes (episodes, time).
      rewards: float (episodes, time), the rewards (default zeros: the graders do not read them).
    """
    shape = np.shape(infos["offered_tokens"])
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"infos must be stacked to leading axes (episodes, time), got {shape}")

    def f32(x: Any) -> np.ndarray:
        return np.asarray(x, np.float32)

    return evaluate.Trajectory(
        reward=np.zeros(shape, np.float32) if rewards is None else f32(rewards),
        reward_components={k: f32(v) for k, v in infos["reward_components"].items()},
        metrics=serving.IntervalMetrics(**{name: f32(infos["metrics"][name]) for name in METRIC_NAMES}),
        action=ServingAction(**{k: f32(infos["applied_action"][k]) for k in KNOBS}),
        clipped=np.asarray(infos["clipped"], bool),
        offered_tokens=f32(infos["offered_tokens"]),
        valid=np.ones(shape, bool),
    )


def evaluate_policy(
    policy: Callable[[np.ndarray], Any], task_id: str | int, key: jax.Array, num_episodes: int, *,
    params: EnvParams | None = None, num_envs: int = 8, **overrides: Any,
) -> evaluate.EvalResult:
    """Grade a host-side policy (SB3, torch, NumPy) on episodes 0 .. num_episodes-1 of the stream
    `key`: the episodes `evaluate.evaluate(env, params, policy, key, num_episodes, task)` runs
    (same keys), so scores pair with the baselines' on `evaluate.evaluation_key(seed)`.

    Args:
      policy: obs float32 (num_envs, OBS_SIZE) -> int grid indices (num_envs, 5).
      num_envs: episodes stepped together (one jitted step and one policy call per interval).
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes={num_episodes!r}: must be an integer >= 1")
    envs = GymnasiumVectorEnv(num_envs, task_id, params=params, autoreset_mode=AutoresetMode.NEXT_STEP, **overrides)
    chunks = []
    for start in range(0, num_episodes, envs.num_envs):
        obs, _ = envs.reset(options={"key": key, "episode": start})
        infos, rewards = [], []
        for _ in range(envs._horizon):  # NEXT_STEP: the last interval's info is the step's own
            obs, reward, _, _, info = envs.step(policy(obs))
            infos.append(info)
            rewards.append(reward)
        count = min(envs.num_envs, num_episodes - start)
        trajectory = trajectory_from_infos(stack_infos(infos, axis=1), np.stack(rewards, axis=1))
        chunks.append(jax.tree_util.tree_map(lambda x, count=count: x[:count], trajectory))
    trajectory = jax.tree_util.tree_map(lambda *x: np.concatenate(x), *chunks)
    return evaluate.grade_trajectory(trajectory, envs.params, envs.task_id)


register_envs()
