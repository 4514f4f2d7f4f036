"""The reinforcement-learning environment: gymnax 1.0 call shape over `serving.serve_interval`.

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

`step` auto-resets: when an episode ends (at the horizon, a truncation; the serving task has
no terminal state, so `terminated` is always False) the returned `obs` and `state` are those of
a fresh episode and `info["final_observation"]` holds the observation the episode ended on,
for bootstrapping. Reset is a handful of zeros and two uniform draws, so it costs little when
it runs every step under `vmap`.

Observations are a structured `Observation` pytree; `env.flatten_observation(obs, params)`
turns one into the normalised float32 vector networks use.

Reward per interval (DESIGN.md's R = alpha*T - beta*L - gamma*V - delta*C, plus an
anti-thrashing term epsilon*S; clipped to [-1, 1]). Each term is the per-interval analogue of a
grader component, so the reward an agent maximises is what it is graded on (tasks 3 and 4
weight the terms as their grader weighs its components; configs/tasks/*.toml):
  T = goodput: output tokens of the requests admitted within their SLOs, quality-weighted
      (INT4 0.96), over the mean offered output tokens per interval; clipped to [0, 2];
  L = mean over requests of min(TTFT / class SLO, 4) / 4, in [0, 1];
  V = SLO-violation rate, in [0, 1];
  C = spend over budget: (cost - budget x output tokens) / (budget x mean offered output
      tokens per interval), clipped to [-1, 1]; its episode mean is (cost per 1k / budget - 1)
      x produced / offered tokens, negative within budget;
  S = 1 when the applied configuration changed from the previous interval (the first
      configuration is free), else 0.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import serving, spaces, workload
from inferencegym_jax.actions import GRID_SIZES, KNOBS, ServingAction, check_action, clip_action
from inferencegym_jax.workload import NUM_CLASSES

Array = Any
OBS_SIZE = 21
# Arrival-rate EMA weight of the newest interval: a memory of ~3 intervals, long enough to
# smooth Poisson noise, short enough to see a burst within one or two intervals.
RATE_EMA_WEIGHT = 0.3
# Queues beyond this many requests are off the observation's log scale [requests].
QUEUE_SCALE = 10_000.0
# Longest context of Llama-3-8B, the scale of prompt lengths [tokens].
CONTEXT_SCALE = 8192.0
MAX_BATCH = 512.0


@struct.dataclass
class RewardParams:
    """Reward weights and references.

    Attributes:
      weights: float32 (5,), (alpha, beta, gamma, delta, epsilon) of throughput, latency, SLO
        violations, cost and knob changes.
      throughput_ref: float32 [tokens/s], the offered output-token rate (mean arrival rate x
        mean output length): T = 1 when the server keeps up on average.
      cost_budget_per_1k: float32 [$ per 1k output tokens].
    """

    weights: Array
    throughput_ref: Array
    cost_budget_per_1k: Array


@struct.dataclass
class EnvParams:
    """Everything that defines a task; a pytree, so it can be vmapped and swept.

    Attributes:
      server: serving.ServerParams (hardware profiles, SLOs, engine constants).
      workload: workload.WorkloadParams (traffic).
      reward: RewardParams.
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
      last: serving.IntervalMetrics of the last interval (zeros after reset).
    """

    server: serving.ServerState
    workload: workload.WorkloadState
    time: Array
    arrival_rate_ema: Array
    cost_so_far: Array
    last: serving.IntervalMetrics


@struct.dataclass
class Observation:
    """What the agent sees after each interval; float32 scalars unless noted.

    Attributes:
      queue_depth: [requests] waiting.
      mean_prompt_len: [tokens] mean prompt of the waiting requests.
      arrival_rate_ema: [req/s] smoothed arrival rate.
      kv_occupancy: resident KV tokens / capacity, [0, 1].
      ttft_p50_s: [s] median time to first token.
      ttft_p99_s: [s] 99th percentile of time to first token.
      tpot_p50_s: [s] time per output token.
      slo_violation_rate: fraction of requests that missed their SLO in the interval.
      gpu_memory_gb: [GB] memory in use on the decode GPU.
      spec_acceptance: fraction of draft tokens accepted.
      priority_mix: float32 (3,), share of waiting and new requests per priority class.
      timestep: [intervals] since the episode began.
      cost_so_far: [$] GPU cost in the episode.
      running_seqs: [sequences] in the decode batch.
      config: float32 (5,), the knobs in force (kv_budget, spec_length, batch_size,
        prefill_disagg, quant_tier) in physical units.
    """

    queue_depth: Array
    mean_prompt_len: Array
    arrival_rate_ema: Array
    kv_occupancy: Array
    ttft_p50_s: Array
    ttft_p99_s: Array
    tpot_p50_s: Array
    slo_violation_rate: Array
    gpu_memory_gb: Array
    spec_acceptance: Array
    priority_mix: Array
    timestep: Array
    cost_so_far: Array
    running_seqs: Array
    config: Array


def zero_metrics() -> serving.IntervalMetrics:
    z = jnp.zeros((), jnp.float32)
    fields = {f: z for f in serving.IntervalMetrics.__dataclass_fields__}
    fields["class_share"] = jnp.full((NUM_CLASSES,), 1.0 / NUM_CLASSES, jnp.float32)
    return serving.IntervalMetrics(**fields)


def _is_concrete(tree: Any) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def check_params(params: EnvParams) -> None:
    """Host-side checks of a concrete `EnvParams`; ValueError names the field and its range."""
    workload.validate_workload(params.workload)
    s = params.server
    checks = [
        ("server.dt_s", s.dt_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.ttft_slo_s", s.ttft_slo_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.tpot_slo_s", s.tpot_slo_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.memory_limit_bytes", s.memory_limit_bytes, lambda x: np.all(x > 0), "> 0 [B]"),
        ("server.max_batched_tokens", s.max_batched_tokens, lambda x: np.all(x >= 1), ">= 1 [tokens]"),
        ("server.kv_watermark", s.kv_watermark, lambda x: np.all((x >= 0) & (x < 1)), "in [0, 1)"),
        ("server.restart_s", s.restart_s, lambda x: np.all(x >= 0), ">= 0 [s]"),
        ("server.prefill_start_s", s.prefill_start_s, lambda x: np.all(x >= 0), ">= 0 [s]"),
        ("reward.throughput_ref", params.reward.throughput_ref, lambda x: np.all(x > 0), "> 0 [tokens/s]"),
        ("reward.cost_budget_per_1k", params.reward.cost_budget_per_1k, lambda x: np.all(x > 0), "> 0 [$]"),
        ("max_steps_in_episode", params.max_steps_in_episode, lambda x: np.all(x >= 1), ">= 1"),
        ("default_action.kv_budget", params.default_action.kv_budget,
         lambda x: np.all((x >= 0.1) & (x <= 1.0)), "in [0.1, 1]"),
    ]
    for name, value, ok, allowed in checks:
        value = np.asarray(value)
        if not ok(value):
            raise ValueError(f"{name}={value.tolist()} out of range: must be {allowed}")
    if len(params.active_knobs) != len(KNOBS):
        raise ValueError(f"active_knobs must have {len(KNOBS)} entries ({KNOBS})")


class InferenceGymEnv:
    """LLM inference-serving control (see the module docstring and README for the tables)."""

    def __init__(self, default_params: EnvParams, env_id: str = "InferenceGym-Custom-v0"):
        check_params(default_params)
        self._default_params = default_params
        self.env_id = env_id

    @property
    def default_params(self) -> EnvParams:
        return self._default_params

    @property
    def name(self) -> str:
        return self.env_id

    def __repr__(self) -> str:
        return f"InferenceGymEnv({self.env_id!r})"

    # ------------------------------------------------------------------ spaces

    def action_space(self, params: EnvParams | None = None) -> spaces.MultiDiscrete:
        """Factored discrete grid (see `actions`); masked knobs have a single choice, 0."""
        params = params or self._default_params
        nvec = tuple(n if a else 1 for n, a in zip(GRID_SIZES, params.active_knobs))
        return spaces.MultiDiscrete(nvec, KNOBS)

    def observation_space(self, params: EnvParams | None = None) -> spaces.Dict:
        """Structured observation space (bounds in the fields' units)."""
        inf = np.inf
        box = lambda lo, hi, shape=(): spaces.Box(lo, hi, shape)  # noqa: E731
        return spaces.Dict({
            "queue_depth": box(0, inf), "mean_prompt_len": box(0, inf), "arrival_rate_ema": box(0, inf),
            "kv_occupancy": box(0, 1), "ttft_p50_s": box(0, inf), "ttft_p99_s": box(0, inf),
            "tpot_p50_s": box(0, inf), "slo_violation_rate": box(0, 1), "gpu_memory_gb": box(0, inf),
            "spec_acceptance": box(0, 1), "priority_mix": box(0, 1, (NUM_CLASSES,)),
            "timestep": box(0, inf), "cost_so_far": box(0, inf), "running_seqs": box(0, inf),
            "config": spaces.Box([0.1, 0, 1, 0, 0], [1, 8, 512, 1, 2], (len(KNOBS),)),
        })

    def flat_observation_space(self, params: EnvParams | None = None) -> spaces.Box:
        """Space of `flatten_observation`: OBS_SIZE float32 values, each in [0, 1]."""
        return spaces.Box(0.0, 1.0, (OBS_SIZE,))

    # ------------------------------------------------------------------ core

    def reset(self, key: jax.Array, params: EnvParams | None = None) -> tuple[Observation, EnvState]:
        params = params or self._default_params
        if _is_concrete(params):
            check_params(params)
        return self.reset_env(key, params)

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
        """Reset without host-side checks."""
        return self.reset_from_draws(workload.reset_draws(key), params)

    def reset_from_draws(self, u: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
        """Reset from `workload.RESET_DRAWS` uniforms (what `step` runs every interval)."""
        horizon_s = params.max_steps_in_episode * params.server.dt_s
        state = EnvState(
            server=serving.initial_state(params.default_action, params.server.num_age_buckets),
            workload=workload.init_from_draws(u, params.workload, horizon_s),
            time=jnp.zeros((), jnp.int32),
            arrival_rate_ema=jnp.zeros((), jnp.float32),
            cost_so_far=jnp.zeros((), jnp.float32),
            last=zero_metrics(),
        )
        return self.get_obs(state, params), state

    def step(
        self, key: jax.Array, state: EnvState, action: Any, params: EnvParams | None = None
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One control interval, then auto-reset when the episode ends.

        Args:
          action: int32 (5,) grid indices (see `actions`) or a `ServingAction`.

        Returns obs, state, reward (float32), terminated (bool), truncated (bool), info (dict
        of per-interval metrics, `clipped` (bool (5,)), `applied_action`, `reward_components`,
        `final_observation`).

        Raises:
          ValueError: outside jit, for an action of the wrong shape, dtype or range.
        """
        params = params or self._default_params
        check_action(action)
        draws, u_reset = self.step_draws(key, state, params)
        obs, state_next, reward, terminated, truncated, info = self.step_from_draws(draws, state, action, params)
        obs_reset, state_reset = self.reset_from_draws(u_reset, params)
        done = terminated | truncated
        select = lambda a, b: jax.tree_util.tree_map(lambda x, y: jnp.where(done, x, y), a, b)  # noqa: E731
        info["final_observation"] = obs
        return select(obs_reset, obs), select(state_reset, state_next), reward, terminated, truncated, info

    def step_env(
        self, key: jax.Array, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One control interval without auto-reset."""
        t_s = state.time.astype(jnp.float32) * params.server.dt_s
        draws = workload.draw(key, state.workload, t_s, params.server.dt_s, params.workload)
        return self.step_from_draws(draws, state, action, params)

    def step_draws(self, key: jax.Array, state: EnvState, params: EnvParams) -> tuple[workload.Draws, jax.Array]:
        """The random draws `step` makes from `key`: the interval's `workload.Draws` and the
        `workload.RESET_DRAWS` uniforms of the auto-reset, all from one PRNG call."""
        u = workload.uniforms(key, workload.STEP_DRAWS + workload.RESET_DRAWS)
        t_s = state.time.astype(jnp.float32) * params.server.dt_s
        draws = workload.draws_from_uniforms(u[: workload.STEP_DRAWS], state.workload, t_s, params.server.dt_s, params.workload)
        return draws, u[workload.STEP_DRAWS:]

    def step_from_draws(
        self, draws: workload.Draws, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One control interval without auto-reset, given its random draws (deterministic)."""
        applied, clipped = clip_action(action, params.default_action, params.active_knobs)
        dt = params.server.dt_s
        t_s = state.time.astype(jnp.float32) * dt
        wl_state, arrivals = workload.advance(draws, state.workload, t_s, dt, params.workload)
        server, m = serving.serve_interval(state.server, arrivals, applied, params.server)
        ema = (1.0 - RATE_EMA_WEIGHT) * state.arrival_rate_ema + RATE_EMA_WEIGHT * jnp.sum(arrivals.count) / dt
        time = state.time + 1
        new_state = EnvState(server, wl_state, time, ema, state.cost_so_far + m.cost_usd, m)
        previous = state.server.config.as_vector()
        changed = (previous[4] >= 0) & jnp.any(jnp.abs(applied.as_vector() - previous) > 1e-6)
        reward, components = self.reward(m, params, applied, changed)
        terminated = jnp.zeros((), bool)
        truncated = time >= params.max_steps_in_episode
        info = {
            "ttft_p50_s": m.ttft_p50_s,
            "ttft_p99_s": m.ttft_p99_s,
            "tpot_s": m.tpot_s,
            "tokens_per_s": m.tokens_per_s,
            "gpu_memory_gb": m.gpu_memory_bytes / 1e9,
            "cost_per_1k_tokens": cost_per_1k_tokens(m),
            "cost_usd": m.cost_usd,
            "spec_acceptance": m.spec_acceptance,
            "evictions": m.evictions,
            "slo_violations": m.slo_violations,
            "slo_violation_rate": m.slo_violation_rate,
            "timeouts": m.timeouts,
            "oom": m.oom,
            "arrivals": jnp.sum(arrivals.count),
            "offered_tokens": jnp.sum(arrivals.output_tokens),
            "metrics": m,
            "clipped": clipped,
            "applied_action": applied,
            "reward_components": components,
            "discount": 1.0 - terminated.astype(jnp.float32),
        }
        return self.get_obs(new_state, params), new_state, reward, terminated, truncated, info

    # ------------------------------------------------------------------ observation and reward

    def knobs_in_force(self, state: EnvState, params: EnvParams) -> ServingAction:
        """The configuration the server runs with (the task default before the first interval)."""
        c = state.server.config
        started = c.quant_tier >= 0  # a server not yet started has quant_tier -1
        return c.replace(quant_tier=jnp.where(started, c.quant_tier, params.default_action.quant_tier))

    def get_obs(self, state: EnvState, params: EnvParams) -> Observation:
        m = state.last
        config = self.knobs_in_force(state, params).as_vector()
        return Observation(
            queue_depth=m.queue_depth,  # the sum of state.server.queue_count, kept by serve_interval
            mean_prompt_len=m.queue_mean_prompt,
            arrival_rate_ema=state.arrival_rate_ema,
            kv_occupancy=m.kv_occupancy,
            ttft_p50_s=m.ttft_p50_s,
            ttft_p99_s=m.ttft_p99_s,
            tpot_p50_s=m.tpot_s,
            slo_violation_rate=m.slo_violation_rate,
            gpu_memory_gb=m.gpu_memory_bytes / 1e9,
            spec_acceptance=m.spec_acceptance,
            priority_mix=m.class_share,
            timestep=state.time.astype(jnp.float32),
            cost_so_far=state.cost_so_far,
            running_seqs=state.server.run_seqs,
            config=config,
        )

    def flatten_observation(self, obs: Observation, params: EnvParams | None = None) -> jax.Array:
        """The normalised float32 (OBS_SIZE,) vector of an observation, each entry in [0, 1].

        Scales are derived from the task: TTFT against the mix-weighted SLO (up to 4x), TPOT
        against its SLO, the arrival rate against the peak scheduled rate, memory against the
        limit, cost against the most the episode could cost (two GPUs all the time).
        """
        params = params or self._default_params
        s, wl = params.server, params.workload
        slo_ref = jnp.sum(wl.class_mix * s.ttft_slo_s)
        peak_rate = workload.mean_rate(wl) + wl.base_rate * (wl.burst_multiplier - 1.0)
        horizon = params.max_steps_in_episode.astype(jnp.float32)
        max_cost = 2.0 * jnp.max(s.profiles.price_per_hour) * horizon * s.dt_s / 3600.0
        c = obs.config
        parts = [
            jnp.log1p(obs.queue_depth) / jnp.log1p(QUEUE_SCALE),
            obs.mean_prompt_len / CONTEXT_SCALE,
            obs.arrival_rate_ema / jnp.maximum(peak_rate, 1e-6),
            obs.kv_occupancy,
            obs.ttft_p50_s / (4.0 * slo_ref),
            obs.ttft_p99_s / (4.0 * slo_ref),
            obs.tpot_p50_s / (4.0 * s.tpot_slo_s),
            obs.slo_violation_rate,
            obs.gpu_memory_gb * 1e9 / s.memory_limit_bytes,
            obs.spec_acceptance,
            *[obs.priority_mix[..., i] for i in range(NUM_CLASSES)],
            obs.timestep / horizon,
            obs.cost_so_far / max_cost,
            obs.running_seqs / MAX_BATCH,
            (c[..., 0] - 0.1) / 0.9,
            c[..., 1] / 8.0,
            jnp.log2(jnp.maximum(c[..., 2], 1.0)) / 9.0,
            c[..., 3],
            c[..., 4] / 2.0,
        ]
        return jnp.clip(jnp.stack(parts, axis=-1), 0.0, 1.0).astype(jnp.float32)

    def reward(
        self, m: serving.IntervalMetrics, params: EnvParams, applied: ServingAction, changed: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Per-interval reward in [-1, 1] and its components (see the module docstring).

        Args:
          m: the interval's metrics.
          applied: the configuration applied in the interval (its precision's quality loss).
          changed: bool, whether it differs from the previous interval's.
        """
        r = params.reward
        quality = 1.0 - serving.select_profile(params.server.profiles, applied.quant_tier).quality_loss
        offered = r.throughput_ref * params.server.dt_s
        throughput = jnp.clip(m.good_tokens * quality / offered, 0.0, 2.0)
        latency = m.ttft_slo_ratio
        violations = m.slo_violation_rate
        # Spend over budget, in units of the budget for the offered tokens. Averaged over an episode
        # it is (cost per 1k / budget - 1) x produced / offered tokens: the grader's episode-level
        # cost term. A per-interval ratio would charge every quiet interval (few tokens, the same
        # GPU-seconds) in full, though busy intervals pay for it in the episode's cost per token.
        spend_budget = r.cost_budget_per_1k * offered / 1000.0
        over = m.cost_usd - r.cost_budget_per_1k * m.output_tokens / 1000.0
        cost = jnp.clip(over / spend_budget, -1.0, 1.0)
        stability = changed.astype(jnp.float32)
        w = r.weights
        total = w[0] * throughput - w[1] * latency - w[2] * violations - w[3] * cost - w[4] * stability
        components = {
            "throughput": throughput, "latency": latency, "violations": violations, "cost": cost, "stability": stability,
        }
        return jnp.clip(total, -1.0, 1.0).astype(jnp.float32), components


# Cost per 1k tokens is capped here when almost nothing is generated [$].
COST_PER_1K_CAP = 100.0


def cost_per_1k_tokens(m: serving.IntervalMetrics) -> jax.Array:
    """GPU cost per 1,000 output tokens in the interval [$], capped at COST_PER_1K_CAP."""
    per_1k = m.cost_usd / jnp.maximum(m.output_tokens, 1e-9) * 1000.0
    return jnp.minimum(per_1k, COST_PER_1K_CAP)
