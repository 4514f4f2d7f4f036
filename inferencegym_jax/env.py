"""The reinforcement-learning environment: gymnax 1.0 call shape over `serving.serve_interval`.

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

`step` is `step_env` followed by an auto-reset: when an episode ends (at the horizon, a
truncation; the serving task has no terminal state, so `terminated` is always False) the
returned `obs` and `state` are those of a fresh episode and `info["final_observation"]` holds
the observation the episode ended on, for bootstrapping. `reset` and `step` check concrete
params (`param_checks`) and actions on the host first; `reset_env` and `step_env` are the same
without checks. Keys are `jax.random.key(seed)` or legacy `jax.random.PRNGKey(seed)` keys (the
same draws for the same seed; `sampling.as_key`), one per env: vmap over a batch of them.

Keys: `step_env(key)` draws the interval's traffic from `sampling.uniforms(key, STEP_DRAWS +
RESET_DRAWS)`, and `step(key)` resets from the last RESET_DRAWS of those same uniforms: one PRNG
call per step, and `step` and `step_env` make the same transition for the same key. A reset is a
handful of zeros and two uniform draws, so it costs little when it runs every step under vmap.

Observations are `observation.Observation` pytrees; `env.flatten_observation(obs, params)` is
the normalised float32 (OBS_SIZE,) vector networks use. The reward is `reward.reward`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax import observation, param_checks, serving, spaces, validation
from inferencegym_jax.actions import GRID_SIZES, KNOBS, ServingAction, clip_action
from inferencegym_jax.observation import OBS_SIZE, Observation
from inferencegym_jax.reward import RewardParams, reward
from inferencegym_jax.traffic import sampling, workload

__all__ = ["OBS_SIZE", "EnvParams", "EnvState", "InferenceGymEnv", "Observation", "RewardParams"]
# Arrival-rate EMA weight of the newest interval: a memory of ~3 intervals, long enough to
# smooth Poisson noise, short enough to see a burst within one or two intervals.
RATE_EMA_WEIGHT = 0.3
# Uniforms of one step: the interval's traffic, then an auto-reset's.
DRAWS_PER_STEP = workload.STEP_DRAWS + workload.RESET_DRAWS


@struct.dataclass
class EnvParams:
    """Everything that defines a task; a pytree, so it can be vmapped and swept.

    Attributes:
      server: serving.ServerParams (hardware profiles, SLOs, engine constants).
      workload: workload.WorkloadParams (traffic).
      reward: reward.RewardParams.
      default_action: ServingAction applied to the knobs the task masks (and the vLLM-style
        starting configuration).
      max_steps_in_episode: int32, the horizon in control intervals.
      active_knobs: static tuple of 5 bools, the knobs the agent controls (KNOBS order).
    """

    server: serving.ServerParams
    workload: workload.WorkloadParams
    reward: RewardParams
    default_action: ServingAction
    max_steps_in_episode: Array
    active_knobs: tuple[bool, ...] = struct.field(pytree_node=False, default=(True,) * 5)


@struct.dataclass
class EnvState:
    """Environment state.

    Attributes:
      server: serving.ServerState (queue, running batch, configuration).
      workload: workload.WorkloadState (burst phase, trace offset).
      time: int32, control intervals since the episode began.
      arrival_rate_ema: float32 [req/s], EMA of the observed arrival rate.
      cost_so_far: float32 [$] spent in the episode.
      last: serving.IntervalMetrics of the last interval (`serving.zero_metrics()` after reset).
    """

    server: serving.ServerState
    workload: workload.WorkloadState
    time: Array
    arrival_rate_ema: Array
    cost_so_far: Array
    last: serving.IntervalMetrics


def params_fingerprint(params: Any) -> str:
    """SHA-256 of a concrete params pytree: its structure (static fields included), and every
    leaf's shape, dtype and bytes. Equal exactly when two params define the same task."""
    digest = hashlib.sha256()
    leaves, treedef = jax.tree_util.tree_flatten(params)
    digest.update(str(treedef).encode())
    for leaf in leaves:
        array = np.asarray(leaf)
        digest.update(str((array.shape, array.dtype)).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def auto_reset(done: jax.Array, reset: Any, stepped: Any) -> Any:
    """`reset` where the episode is `done`, else `stepped` (same-structured pytrees): the
    auto-reset of a gymnax-style `step`."""
    return jax.tree_util.tree_map(lambda x, y: jnp.where(done, x, y), reset, stepped)


ParamsT = TypeVar("ParamsT")


class TaskIdentity(Generic[ParamsT]):
    """An env's name, default params and identity, shared by every task family's env class.

    Envs are static arguments of jitted programs (evaluation, baselines, the gymnasium adapters):
    equal envs (same class, same id, same default params value for value) share compiled programs,
    so that making the same task twice, as a server or a sweep driver does in a loop, compiles
    nothing new. Subclasses set `env_id` (str) and `_default_params` (their params pytree).
    """

    env_id: str
    _default_params: ParamsT

    @property
    def default_params(self) -> ParamsT:
        return self._default_params

    @property
    def name(self) -> str:
        return self.env_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id!r})"

    def _identity(self) -> tuple[type, str, str]:
        if not hasattr(self, "_fingerprint"):
            concrete = validation.is_concrete(self._default_params)
            self._fingerprint = params_fingerprint(self._default_params) if concrete else f"object {id(self)}"
        return type(self), self.env_id, self._fingerprint

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskIdentity) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


class InferenceGymEnv(TaskIdentity[EnvParams]):
    """LLM inference-serving control (see the module docstring and README for the tables)."""

    def __init__(self, default_params: EnvParams, env_id: str = "InferenceGym-Custom-v0"):
        self._check_params(default_params)
        self._default_params = default_params
        self.env_id = env_id

    # ------------------------------------------------------------------ spaces

    def action_space(self, params: EnvParams | None = None) -> spaces.MultiDiscrete:
        """Factored discrete grid (see `actions`); masked knobs have a single choice, 0."""
        params = params or self._default_params
        nvec = tuple(n if a else 1 for n, a in zip(GRID_SIZES, params.active_knobs))
        return spaces.MultiDiscrete(nvec, KNOBS)

    def observation_space(self, params: EnvParams | None = None) -> spaces.Dict:
        """Structured observation space (bounds in the fields' units)."""
        return observation.observation_space()

    def flat_observation_space(self, params: EnvParams | None = None) -> spaces.Box:
        """Space of `flatten_observation`: OBS_SIZE float32 values, each in [0, 1]."""
        return observation.flat_observation_space()

    # ------------------------------------------------------------------ reset and step

    def reset(self, key: jax.Array, params: EnvParams | None = None) -> tuple[Observation, EnvState]:
        """A fresh episode from `key`; concrete params are checked first (ValueError)."""
        params = self._check_params(self._default_params if params is None else params)
        return self.reset_env(key, params)

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
        """A fresh episode from `key`, without host-side checks."""
        return self._reset_from_uniforms(workload.reset_draws(key), params)

    def step(
        self, key: jax.Array, state: EnvState, action: Any, params: EnvParams | None = None
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One control interval (`step_env`), then an auto-reset where the episode ended.

        Args:
          action: int32 (5,) grid indices (see `actions`) or a `ServingAction`.

        Returns obs, state, reward (float32), terminated (bool), truncated (bool), info: the
        interval's `metrics` (serving.IntervalMetrics), its `arrivals` (workload.Arrivals),
        `applied_action` (ServingAction), `clipped` (bool (5,)), `reward_components`,
        `discount`, `first_token` (serving.RequestLatency: the TTFT distribution of the requests
        whose first token came in the interval, which `ttft_tally` folds into an episode's) and
        `final_observation` (the observation before the auto-reset).

        Raises:
          ValueError: outside jit, for an action of the wrong shape, dtype or range.
        """
        params = self._check_params(self._default_params if params is None else params)
        validation.check_action(action)
        u = sampling.uniforms(key, DRAWS_PER_STEP)
        obs, state_next, reward_, terminated, truncated, info = self._transition(u, state, action, params)
        reset = self._reset_from_uniforms(u[workload.STEP_DRAWS:], params)
        info["final_observation"] = obs
        obs, state_next = auto_reset(terminated | truncated, reset, (obs, state_next))
        return obs, state_next, reward_, terminated, truncated, info

    def step_env(
        self, key: jax.Array, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One control interval without auto-reset or host-side checks (the transition `step`
        makes for the same key)."""
        return self._transition(sampling.uniforms(key, DRAWS_PER_STEP), state, action, params)

    @staticmethod
    def _check_params(params: Any) -> EnvParams:
        """`params`, checked leaf by leaf (`param_checks`) when concrete; ValueError otherwise."""
        if not isinstance(params, EnvParams):
            raise ValueError(f"params must be an env.EnvParams (as inferencegym_jax.make returns), "
                             f"got {type(params).__name__}")
        if validation.is_concrete(params):
            param_checks.check_params(params)
        return params

    def _reset_from_uniforms(self, u: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
        horizon_s = params.max_steps_in_episode * params.server.dt_s
        state = EnvState(
            server=serving.initial_state(params.default_action, params.server.num_age_buckets,
                                         params.server.slo_accounting),
            workload=workload.init_from_draws(u, params.workload, horizon_s),
            time=jnp.zeros((), jnp.int32),
            arrival_rate_ema=jnp.zeros((), jnp.float32),
            cost_so_far=jnp.zeros((), jnp.float32),
            last=serving.zero_metrics(),
        )
        return self.get_obs(state, params), state

    def _transition(
        self, u: jax.Array, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One interval from its uniforms (the first workload.STEP_DRAWS of `u` are used)."""
        applied, clipped = clip_action(action, params.default_action, params.active_knobs)
        dt = params.server.dt_s
        t_s = state.time.astype(jnp.float32) * dt
        draws = workload.draws_from_uniforms(u[: workload.STEP_DRAWS], state.workload, t_s, dt, params.workload)
        wl_state, arrivals = workload.advance(draws, state.workload, t_s, dt, params.workload)
        server, m, first_token = serving.serve_interval(state.server, arrivals, applied, params.server,
                                                        with_requests=True)
        ema = (1.0 - RATE_EMA_WEIGHT) * state.arrival_rate_ema + RATE_EMA_WEIGHT * jnp.sum(arrivals.count) / dt
        time = state.time + 1
        new_state = EnvState(server, wl_state, time, ema, state.cost_so_far + m.cost_usd, m)
        previous = state.server.config.as_vector()
        changed = state.server.started & jnp.any(jnp.abs(applied.as_vector() - previous) > 1e-6)
        reward_, components = reward(m, params.reward, params.server, applied, changed)
        terminated = jnp.zeros((), bool)
        info = {
            "metrics": m,
            "arrivals": dataclasses.replace(arrivals, prompt_strata=None, prompt_law=None),  # engine inputs, not counts
            "applied_action": applied,
            "clipped": clipped,
            "reward_components": components,
            "discount": 1.0 - terminated.astype(jnp.float32),
            "first_token": first_token,
        }
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(new_state, params), new_state, reward_, terminated, truncated, info

    # ------------------------------------------------------------------ observation

    def knobs_in_force(self, state: EnvState, params: EnvParams) -> ServingAction:
        """The configuration the server runs with (the task default before the first interval)."""
        return state.server.config

    def get_obs(self, state: EnvState, params: EnvParams) -> Observation:
        """The observation of a state (`observation.Observation`)."""
        return observation.observe(state)

    def flatten_observation(self, obs: Observation, params: EnvParams | None = None) -> jax.Array:
        """The normalised float32 (..., OBS_SIZE) vector of an observation, entries in [0, 1]."""
        return observation.flatten(obs, params or self._default_params)
