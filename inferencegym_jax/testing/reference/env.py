"""The environment in NumPy (env), for N envs at once: reset, one interval (`step_env`), the
auto-reset around it (`step`), the action grid and the reward; and `ReferenceEnv`, N envs with
their own NumPy sampler (the benchmark's baseline).

step = step_env, then, where the episode reached its horizon (truncated; the task never
terminates), the state and observation of a fresh episode, with the pre-reset observation in
info["final_observation"].
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from inferencegym_jax.actions import ServingAction
from inferencegym_jax.env import EnvState
from inferencegym_jax.observation import Observation
from inferencegym_jax.serving import IntervalMetrics, OnTime, Queue, Sequences, ServerState
from inferencegym_jax.testing.reference import goodput, roofline, server, traffic
from inferencegym_jax.testing.reference.arrays import select_where, to_numpy
from inferencegym_jax.testing.reference.constants import (
    CHANGE_TOLERANCE,
    F32,
    KNOB_GRID,
    KNOBS,
    NUM_CLASSES,
    RATE_EMA_WEIGHT,
    RESET_DRAWS,
    THROUGHPUT_MAX,
    TOKENS_PER_BUDGET_UNIT,
)
from inferencegym_jax.testing.reference.observation import knob_vector, observe
from inferencegym_jax.traffic.workload import Draws

StepResult = tuple[Observation, EnvState, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


def clip_action(
    indices: np.ndarray, default: ServingAction, active: tuple[bool, ...]
) -> tuple[ServingAction, np.ndarray]:
    """(N, 5) int grid indices -> the applied ServingAction (N,) leaves and a bool (N, 5) of the
    knobs changed (actions.clip_action): indices clipped to the grid, masked knobs at the task
    default (a masked knob given an index other than 0 counts as changed)."""
    indices = np.asarray(indices)
    values, changed = [], []
    for i, (grid, on) in enumerate(zip(KNOB_GRID, active)):
        index = np.clip(indices[:, i], 0, len(grid) - 1)
        values.append(grid[index] if on else np.full(len(indices), getattr(default, KNOBS[i]), F32))
        changed.append(index != indices[:, i] if on else indices[:, i] != 0)
    return ServingAction(*values), np.stack(changed, axis=1)


def reward(m: IntervalMetrics, params: Any, server_params: Any, applied: ServingAction,
           changed: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-interval reward in [-1, 1] and its components (reward.reward):
    R = w0 T - w1 L - w2 V - w3 C - w4 S, T goodput over the offered tokens (quality-weighted),
    L the TTFT ratio, V the violation rate, C spend over budget, S a configuration change.
    Kind "increments": V is 1 - requests that met their SLOs over the mean requests per
    interval, T and C unclipped, and the sum divided by the peak-to-mean rate ratio before the clip."""
    increments = params.kind == "increments"
    quality = 1.0 - roofline.select_profile(server_params.profiles, applied.quant_tier).quality_loss
    offered = params.throughput_ref * server_params.dt_s  # [tokens] per interval
    spend_budget = params.cost_budget_per_1k * offered / TOKENS_PER_BUDGET_UNIT
    over_budget = m.cost_usd - params.cost_budget_per_1k * m.output_tokens / TOKENS_PER_BUDGET_UNIT
    throughput = (m.good_tokens * quality / offered).astype(F32)
    judged = m.admitted if server_params.slo_accounting == "admission" else m.completed
    met_slo = np.maximum(judged + m.timeouts + m.failed - m.slo_violations, 0.0)  # [requests] within their SLOs
    cost = (over_budget / spend_budget).astype(F32)
    components = {
        "throughput": throughput if increments else np.clip(throughput, 0.0, THROUGHPUT_MAX).astype(F32),
        "latency": m.ttft_slo_ratio,
        "violations": (1.0 - met_slo / params.requests_ref).astype(F32) if increments else m.slo_violation_rate,
        "cost": cost if increments else np.clip(cost, -1.0, 1.0).astype(F32),
        "stability": changed.astype(F32),
    }
    w = params.weights
    total = (w[0] * components["throughput"] - w[1] * components["latency"] - w[2] * components["violations"]
             - w[3] * components["cost"] - w[4] * components["stability"])
    if increments:
        total = total / params.peak_ratio
    return np.clip(total, -1.0, 1.0).astype(F32), components


def zero_metrics(n: int) -> IntervalMetrics:
    """The metrics before any interval (serving.zero_metrics): zeros, an even class share."""
    fields = {name: np.zeros(n, F32) for name in IntervalMetrics.__dataclass_fields__}
    fields["class_share"] = np.full((n, NUM_CLASSES), 1.0 / NUM_CLASSES, F32)
    return IntervalMetrics(**fields)


def initial_state(n: int, default: ServingAction, num_ages: int, slo_accounting: str = "admission") -> ServerState:
    """N idle servers, empty queues, not yet started, reporting `default` as in force, with empty
    TPOT cohorts under "request" accounting (serving.initial_state)."""
    z = np.zeros(n, F32)
    bins = np.zeros((n, NUM_CLASSES, num_ages), F32)
    config = ServingAction(*(np.full(n, getattr(default, k), F32) for k in KNOBS))
    return ServerState(Queue(bins, bins.copy(), bins.copy(), bins.copy()), Sequences(z, z.copy(), z.copy()),
                       Sequences(z.copy(), z.copy(), z.copy()), z.copy(), z.copy(), config, np.zeros(n, bool),
                       OnTime(np.zeros((n, NUM_CLASSES), F32), np.zeros((n, NUM_CLASSES), F32), np.zeros(n, F32)),
                       goodput.empty_cohorts(n) if slo_accounting == "request" else None)


def reset(u: np.ndarray, params: Any) -> tuple[Observation, EnvState]:
    """N fresh episodes from (N, RESET_DRAWS) uniforms (env.reset_env via workload.init_from_draws)."""
    n = u.shape[0]
    horizon_s = np.asarray(params.max_steps_in_episode).astype(F32) * params.server.dt_s
    state = EnvState(
        server=initial_state(n, params.default_action, params.server.num_age_buckets, params.server.slo_accounting),
        workload=traffic.init_from_draws(u, params.workload, horizon_s),
        time=np.zeros(n, np.int32),
        arrival_rate_ema=np.zeros(n, F32),
        cost_so_far=np.zeros(n, F32),
        last=zero_metrics(n),
    )
    return observe(state), state


def step_env(state: EnvState, action: np.ndarray, draws: Draws, params: Any, moments: traffic.Moments) -> StepResult:
    """One interval of N envs given its draws, no auto-reset (env.InferenceGymEnv.step_env).
    `action` (N, 5) grid indices; `moments` = {"prompt": length_moments(params.workload.prompt), "burst_prompt": ...,
    "output": ...}. Returns obs, state, reward, terminated, truncated, info."""
    applied, clipped = clip_action(action, params.default_action, params.active_knobs)
    dt = params.server.dt_s
    t_s = state.time.astype(F32) * dt
    workload_state, arrivals = traffic.advance(draws, state.workload, t_s, dt, params.workload, moments)
    server_state, m = server.serve_interval(state.server, arrivals, applied, params.server)
    arrival_rate = np.sum(arrivals.count, axis=1) / dt
    ema = (1.0 - RATE_EMA_WEIGHT) * state.arrival_rate_ema + RATE_EMA_WEIGHT * arrival_rate
    time = state.time + 1
    cost = (state.cost_so_far + m.cost_usd).astype(F32)
    new_state = EnvState(server_state, workload_state, time, ema.astype(F32), cost, m)
    moved = np.abs(knob_vector(applied) - knob_vector(state.server.config)) > CHANGE_TOLERANCE
    changed = state.server.started & np.any(moved, axis=1)
    reward_, components = reward(m, params.reward, params.server, applied, changed)
    terminated = np.zeros(len(time), bool)
    truncated = time >= params.max_steps_in_episode
    info = {"metrics": m, "arrivals": dataclasses.replace(arrivals, prompt_strata=None),  # strata: an engine input
            "applied_action": applied, "clipped": clipped,
            "reward_components": components, "discount": 1.0 - terminated.astype(F32)}
    return observe(new_state), new_state, reward_, terminated, truncated, info


def step(state: EnvState, action: np.ndarray, draws: Draws, u_reset: np.ndarray, params: Any,
         moments: traffic.Moments) -> StepResult:
    """env.InferenceGymEnv.step for N envs: `step_env`, then a fresh episode from `u_reset`
    (N, RESET_DRAWS) where the episode ended."""
    obs, next_state, reward_, terminated, truncated, info = step_env(state, action, draws, params, moments)
    obs_reset, state_reset = reset(u_reset, params)
    done = terminated | truncated
    info["final_observation"] = obs
    return (select_where(done, obs_reset, obs), select_where(done, state_reset, next_state), reward_, terminated,
            truncated, info)


class ReferenceEnv:
    """N parallel envs of one task in NumPy with their own sampler (the speed baseline).

        ref = ReferenceEnv(params, num_envs=1024, seed=0)
        obs = ref.reset()
        obs, reward, terminated, truncated, info = ref.step(actions)   # (N, 5) int grid indices
    """

    def __init__(self, params: Any, num_envs: int, seed: int = 0):
        self.params = to_numpy(params)
        self.num_envs = int(num_envs)
        self.rng = np.random.default_rng(seed)
        wl = self.params.workload
        self.moments = {name: traffic.length_moments(getattr(wl, name))
                        for name in ("prompt", "output", "burst_prompt")}
        self.state: EnvState | None = None

    def reset(self) -> Observation:
        """N fresh episodes; returns their observation."""
        obs, self.state = reset(self.rng.random((self.num_envs, RESET_DRAWS), F32), self.params)
        return obs

    def step(self, action: np.ndarray) -> tuple[Observation, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One interval of every env (auto-reset included): obs, reward, terminated, truncated, info."""
        if self.state is None:
            raise ValueError("ReferenceEnv.step before reset(): call reset() first")
        p = self.params
        t_s = self.state.time.astype(F32) * p.server.dt_s
        draws = traffic.sample_draws(self.rng, self.state.workload, t_s, p.server.dt_s, p.workload)
        u_reset = self.rng.random((self.num_envs, RESET_DRAWS), F32)
        obs, self.state, reward_, terminated, truncated, info = step(
            self.state, action, draws, u_reset, p, self.moments
        )
        return obs, reward_, terminated, truncated, info
