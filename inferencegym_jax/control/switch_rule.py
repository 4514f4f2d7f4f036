"""A causal switching rule: two configurations and a hysteresis threshold on the recent load.

The controller an operator would write after looking at the load curve: serve with the `low`
configuration while the offered prompt-token rate over the last `window` intervals stays below
`on_rate`, switch to `high` when it rises above, and go back only when it falls below
`off_rate` <= `on_rate`. The gap between the two thresholds is hysteresis (the Schmitt trigger's,
as in every thermostat): a switch reloads weights or starts a prefill engine (10 s on the v1
tasks), so it must not be undone by the next lull of a bursty trace. The rate is what a server
sees: the prompt tokens of the requests that arrived in the window, nothing of the future.

`select` picks the rule's five numbers by exhaustive search on training keys, the way
`baselines.search_static` picks the best static configuration: one of the two configurations
is the task's best static one, the other one of the causal MPC's candidates
(`baselines.candidate_actions`: the best static configuration itself, so that a rule that never
switches competes, its one-knob neighbourhood and the vLLM default), served above the
threshold (a configuration for peaks) or below it (one for lulls); the window one of WINDOWS,
`on_rate` a quantile (ON_QUANTILES) of the windowed rate in the training episodes and
`off_rate` = HYSTERESIS x `on_rate`. A strong causal non-learning baseline beside the MPC: on
task 4-v1 the rule gains over best_static what PPO gains (README "Graders and baselines").

A rule is a `protocols.Controller` (its memory: the recent prompt tokens and its last choice), so
`evaluate.run_episode` plays it with the keys it gives every policy ((k_reset, k_env, _) =
split(key, 3), interval t steps with fold_in(k_env, t)): episode i of `run_rule_episodes(..., key,
...)` is paired with episode i of `evaluate.run_episodes(..., key, ...)`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.typing import ArrayLike

from inferencegym_jax import evaluate, graders
from inferencegym_jax.baselines import candidate_actions
from inferencegym_jax.env import EnvParams, InferenceGymEnv
from inferencegym_jax.evaluate import Trajectory, episode_keys
from inferencegym_jax.protocols import Seen, StepOutput

# The search grid of `select`. Windows [intervals]: 10 s to a minute, the span of the traces'
# bursts and of their load's correlation (README "Graders and baselines"), 1 s intervals.
WINDOWS = (10, 30, 60)
ON_QUANTILES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
HYSTERESIS = (0.6, 0.8, 1.0)  # off_rate / on_rate; 1: no hysteresis
# The first stage ranks every pair of configurations on this part of the grid; the second
# searches the whole grid for the best SHORTLIST of them.
FIRST_STAGE = {"window": 30, "on_quantiles": (0.4, 0.6, 0.8), "hysteresis": 0.8}
SHORTLIST = 3
# Fold-in tag of the selection's training episodes: beside grader_constants' SEARCH_STREAM (7)
# and its random/oracle stream (8), so the rule is not selected on the episodes that set them.
SELECTION_STREAM = 9


@struct.dataclass
class SwitchRule:
    """A rule of the module docstring.

    Attributes:
      low: int32 (5,), grid indices of the configuration served below the thresholds.
      high: int32 (5,), grid indices of the configuration served above them.
      on_rate: float32 () [prompt tokens/s], switch to `high` when the window's rate exceeds it.
      off_rate: float32 () [prompt tokens/s], back to `low` when the rate falls below it.
      window: [intervals] (static) over which the rate is averaged.
    """

    low: jax.Array
    high: jax.Array
    on_rate: jax.Array
    off_rate: jax.Array
    window: int = struct.field(pytree_node=False)

    def init(self, key: jax.Array, seen: Seen, params: EnvParams) -> tuple[jax.Array, jax.Array]:
        """The memory at t = 0 (`start_memory`)."""
        return start_memory(self)

    def act(self, memory: tuple[jax.Array, jax.Array], key: jax.Array, seen: Seen,
            params: EnvParams) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """(int32 (5,) the configuration for interval seen.t, the memory with that choice): `decide`.
        Interval t serves with the choice made from the arrivals of intervals t - window .. t - 1
        (those of them the episode has had; the first interval, with no past, serves `low`)."""
        memory, action = decide(self, memory, seen.t, params.server.dt_s)
        return action, memory

    def update(self, memory: tuple[jax.Array, jax.Array], step: StepOutput,
               params: EnvParams) -> tuple[jax.Array, jax.Array]:
        """The memory after interval step.t: its arrivals' prompt tokens kept (`remember`)."""
        return remember(self, memory, step.t, step.info)

    def describe(self) -> dict:
        """The rule as plain JSON values."""
        return {"low": np.asarray(self.low).tolist(), "high": np.asarray(self.high).tolist(),
                "on_rate": float(self.on_rate), "off_rate": float(self.off_rate), "window": self.window}


def make_rule(low: ArrayLike, high: ArrayLike, on_rate: float, off_rate: float, window: int) -> SwitchRule:
    """A SwitchRule from plain values; ValueError naming the bad one."""
    if window < 1:
        raise ValueError(f"window={window}: must be >= 1 interval")
    if not 0.0 <= off_rate <= on_rate:
        raise ValueError(f"off_rate={off_rate} must be in [0, on_rate={on_rate}]")
    return SwitchRule(jnp.asarray(low, jnp.int32), jnp.asarray(high, jnp.int32), jnp.float32(on_rate),
                      jnp.float32(off_rate), int(window))


def start_memory(rule: SwitchRule) -> tuple[jax.Array, jax.Array]:
    """What the rule remembers at t = 0: (recent, high), recent [tokens] float32 (window,) the
    prompt tokens of the last intervals (a ring buffer, none yet), high bool () its last choice."""
    return jnp.zeros(rule.window, jnp.float32), jnp.bool_(False)


def decide(rule: SwitchRule, memory: tuple[jax.Array, jax.Array], t: jax.Array,
           dt_s: jax.Array) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """(memory with the new choice, int32 (5,) the configuration to serve interval t with), from
    the rate over the intervals of the window the episode has had (`dt_s` [s] each)."""
    recent, high = memory
    rate = jnp.sum(recent) / (jnp.maximum(jnp.minimum(t, rule.window), 1).astype(jnp.float32) * dt_s)
    high = jnp.where(high, rate >= rule.off_rate, rate > rule.on_rate)
    return (recent, high), jnp.where(high, rule.high, rule.low)


def remember(rule: SwitchRule, memory: tuple[jax.Array, jax.Array], t: jax.Array,
             info: dict) -> tuple[jax.Array, jax.Array]:
    """The memory after interval t, whose step returned `info`: its arrivals' prompt tokens kept."""
    recent, high = memory
    return recent.at[t % rule.window].set(jnp.sum(info["arrivals"].prompt_tokens)), high


def run_rule_episodes(env: InferenceGymEnv, params: EnvParams, rule: SwitchRule, key: jax.Array,
                      num_episodes: int, *, batch_size: int = 256, num_steps: int | None = None) -> Trajectory:
    """Episodes 0 .. num_episodes-1 of `rule` (`num_steps` intervals, default the task's), episode
    i from fold_in(key, i) (paired with evaluate.run_episodes' episode i); batches of `batch_size`
    episodes per jitted call (`evaluate.run_episodes`), which compiles once per window and task:
    the rule's configurations and thresholds are traced."""
    if num_episodes < 1 or batch_size < 1:
        raise ValueError(f"num_episodes={num_episodes} and batch_size={batch_size} must be >= 1")
    return evaluate.run_episodes(env, params, rule, key, num_episodes, batch_size=batch_size, num_steps=num_steps)


def offered_prompt_tokens(env: InferenceGymEnv, params: EnvParams, key: jax.Array, num_episodes: int,
                          num_steps: int | None = None) -> np.ndarray:
    """[tokens] float32 (episodes, num_steps): the prompt tokens that arrive in each interval of
    episodes 0 .. num_episodes-1 of `key` (`num_steps` intervals, default the task's); the same
    under every policy, so they are drawn under the task's default configuration."""
    num_steps = int(num_steps or int(params.max_steps_in_episode))

    def episode(key):
        k_reset, k_env, _ = jax.random.split(key, 3)
        _, state = env.reset_env(k_reset, params)

        def body(state, t):
            _, state, _, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, params.default_action,
                                                   params)
            return state, jnp.sum(info["arrivals"].prompt_tokens)

        return jax.lax.scan(body, state, jnp.arange(num_steps))[1]

    return np.asarray(jax.jit(jax.vmap(episode))(episode_keys(key, 0, num_episodes)))


def windowed_rates(tokens: np.ndarray, window: int, dt_s: float) -> np.ndarray:
    """[prompt tokens/s] float32 (episodes, intervals - window + 1): the rate over every full
    window of `window` intervals of `dt_s` seconds, from `offered_prompt_tokens`' array; a window
    longer than the episodes is the whole episode (as in `decide`, the intervals there are)."""
    window = min(window, tokens.shape[1])
    sums = np.cumsum(np.pad(np.asarray(tokens, np.float64), ((0, 0), (1, 0))), axis=1)
    return ((sums[:, window:] - sums[:, :-window]) / (window * dt_s)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class RuleGrid:
    """`select`'s search grid (module docstring); the defaults are the module's. ValueError
    naming `first_stage` where its window or quantiles are off the grid.

    Attributes:
      windows: [intervals] the rule's windows tried.
      on_quantiles: quantiles of the training episodes' windowed rate tried as `on_rate`.
      hysteresis: off_rate / on_rate ratios tried.
      first_stage: {"window", "on_quantiles", "hysteresis"}: the part of the grid on which every
        pair of configurations is ranked.
      shortlist: pairs of the first stage's ranking searched on the whole grid.
    """

    windows: tuple[int, ...] = WINDOWS
    on_quantiles: tuple[float, ...] = ON_QUANTILES
    hysteresis: tuple[float, ...] = HYSTERESIS
    first_stage: dict = dataclasses.field(default_factory=lambda: dict(FIRST_STAGE))
    shortlist: int = SHORTLIST

    def __post_init__(self) -> None:
        stage = self.first_stage
        if stage["window"] not in self.windows or not set(stage["on_quantiles"]) <= set(self.on_quantiles):
            raise ValueError(f"first_stage={stage} must lie on the grid windows={self.windows}, "
                             f"on_quantiles={self.on_quantiles}")


def select(env: InferenceGymEnv, params: EnvParams, task_id: str, num_episodes: int = 128, seed: int = 0, *,
           grid: RuleGrid | None = None, num_steps: int | None = None) -> tuple[SwitchRule, float]:
    """(the rule with the best mean score over `num_episodes` training episodes, that score): the
    module docstring's two-stage search over `grid` (default RuleGrid()) on
    fold_in(training_key(seed), SELECTION_STREAM)."""
    grid = RuleGrid() if grid is None else grid
    windows, on_quantiles, hysteresis = grid.windows, grid.on_quantiles, grid.hysteresis
    first_stage, shortlist = grid.first_stage, grid.shortlist
    key = jax.random.fold_in(evaluate.training_key(seed), SELECTION_STREAM)
    best = np.asarray(graders.load_constants(task_id)["best_static_action"], np.int32)
    others = candidate_actions(env, params, task_id)  # `best` among them: a rule that never switches
    pairs = [(best, other) for other in others] + [(other, best) for other in others
                                                    if not np.array_equal(other, best)]
    tokens = offered_prompt_tokens(env, params, key, num_episodes, num_steps)
    dt = float(params.server.dt_s)
    on_rates = {w: np.quantile(windowed_rates(tokens, w, dt), on_quantiles) for w in windows}

    @functools.cache  # the first stage's points are the second's too
    def score(pair: int, window: int, q: float, ratio: float) -> tuple[float, SwitchRule]:
        on = float(on_rates[window][on_quantiles.index(q)])
        low, high = pairs[pair]
        rule = make_rule(low, high, on, ratio * on, window)
        traj = run_rule_episodes(env, params, rule, key, num_episodes, num_steps=num_steps)
        return float(np.mean(evaluate.grade_trajectory(traj, params, task_id).scores)), rule

    def first_stage_score(pair: int) -> float:
        return max(score(pair, first_stage["window"], q, first_stage["hysteresis"])[0]
                   for q in first_stage["on_quantiles"])

    ranked = sorted(range(len(pairs)), key=first_stage_score, reverse=True)
    points = itertools.product(ranked[:shortlist], windows, on_quantiles, hysteresis)
    top, rule = max((score(*point) for point in points), key=lambda scored: scored[0])
    return rule, top
