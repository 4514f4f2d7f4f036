"""Model-predictive controllers over the simulator: a clairvoyant oracle bound and a causal MPC.

Every interval t the controller copies the env state, rolls each candidate configuration (a
fixed grid-index action) `horizon` intervals ahead in the simulator, scores each rollout (the
objective below), and applies the best candidate for interval t only (receding horizon). Two
ways to see the future:

  * clairvoyant (`mpc_oracle`): the rollouts use the episode's own keys, fold_in(k_env, t + h),
    so they see the very arrivals and lengths the episode will get. An ORACLE BOUND, not a
    policy: no causal controller knows them. `refined_oracle` refines its episodes into a
    stronger one.
  * causal (`mpc`): the rollouts use `samples` futures drawn from keys the episode never uses
    (fold_in(fold_in(fold_in(k_plan, t), s), h)), and a candidate's score is its mean over them.
    A replayed trace draws nothing from keys, so on a trace task the futures are stretches of
    the trace itself (`trace_forecast`): "persistence" (the default, what the imitation teacher
    plans with), one future, the trace's last `horizon` intervals replayed again
    (`_recent_trace_offset`), the current regime of the real load; "analogs", `samples` futures,
    the stretches of the trace's past that followed a load like the one seen now
    (`trace_analogs`), which average over the burst timing persistence repeats exactly. (An
    earlier forecast, other stretches of the trace drawn at random, planned for the trace's
    average load and scored 0.089 below the best static configuration on task 4-v1: README
    "Graders and baselines".)
    The traffic's hidden state (a periodic burst's phase, whether an MMPP burst is on) is, for
    each future, a draw from the posterior given the arrivals seen so far (`traffic_belief`,
    `traffic_state="belief"`, the default): with the true one (`traffic_state="true"`) a plan
    would know when every future periodic burst comes. The server's state (queue, KV cache,
    running batch) is the true one, which a policy sees through its observation's summaries:
    the strongest fair non-learning baseline, a policy with a perfect model of the server.

Objectives (`objective`):
  * "grade" (the default): the task grader's value (`graders`, with the served fraction itself as
    its throughput) of the episode so far plus the rollout, computed from their summed statistics
    (`graders.SUM_FIELDS`): the configuration that most raises the episode's final grade. A
    window alone would be gamed: the graders count SLO attainment over the requests decided, so
    a configuration that admits nothing leaves its backlog undecided and looks perfect. Here a
    rollout that ends before the episode does counts its backlog as decided violations: the
    requests still waiting, and under "completion" accounting the running ones already past an
    SLO (serving.goodput).
  * "reward": the env's reward summed over the rollout, the per-interval analogue of the grade.
    It ranks configurations otherwise where the grade's ratios and the reward's per-interval
    terms disagree (v1 task 4: the reward-MPC oracle scores below the best static configuration).
Reconfiguration costs are in the physics (weight reloads and stalls in `serving`) and in the
objective (the stability component, the reward's change penalty), both inside the rollout of a
candidate that differs from the configuration in force.

Move blocking (`replan_every` = D, default 1): the controller plans at intervals 0, D, 2D, ...
and holds its choice in between, as in move-blocking receding-horizon control (Cagienard,
Grieder, Kerrigan and Morari, "Move blocking strategies in receding horizon control", Journal
of Process Control 17(6), 2007). A plan costs 1/D of the rollouts, and a choice is not undone
the next interval on a forecast that changed by one interval. Which D pays is the task's:
with D = 10 the oracle gained more on the v1 tasks with a 10-s prefill start (3-4) and less on
task 2-v1, where bursts are short (README "Graders and baselines", scripts/mpc_gap.py
--replan-every).

Candidates (`candidate_actions`, defined in `baselines`): the stored best static configuration, every value of each
active knob with the others at the best static one (its one-knob neighbourhood, whole axes), and
the vLLM default: 30-35 configurations on tasks 2-4.

Rollout with a base policy (`base`, a `switch_rule.SwitchRule`): a rollout that holds its
candidate for the whole horizon judges a prefill GPU turned on now as if it stayed on for 30 s,
whatever the load does next. With a base policy each rollout holds its candidate for the
`replan_every` intervals until the next plan and then lets the base policy decide, from its own
memory carried along the rollout's arrivals, and following the base policy from now is an option
too, which wins ties: the rollout algorithm (Bertsekas, Tsitsiklis and Wu, "Rollout algorithms
for combinatorial optimization", Journal of Heuristics 3(3), 1997; for stochastic problems
Bertsekas and Castanon, "Rollout algorithms for stochastic scheduling problems", Journal of
Heuristics 5(1), 1999). With the episode's own future and a horizon to its end, it never does
worse than its base policy (the choice made at t is an option again at t + 1: tests/test_mpc.py);
on a forecast it improves on its base by what the forecast tells apart. A causal baseline if its
base is causal (the switching rule is: selected on training keys, it sees only past arrivals).

A margin before leaving the base (`margin` = z): with many candidates and a few sampled futures
the best mean is often a false winner, a candidate whose rollouts beat the base's by the luck of
these futures (the winner's curse: the maximum of noisy estimates is biased up). With z > 0 a
candidate replaces the base only where its gain over the base, paired future by future, has a
mean above z standard errors (a one-sided test at the plan; the base's own choice needs no test).
A gain the same on every future (no spread: near the episode's end, where the futures' arrivals
no longer count) is certain and clears any margin.

Episodes use `evaluate.run_episode`'s keys ((k_reset, k_env, k_plan) = split(key, 3), interval t
steps with fold_in(k_env, t)), so episode i of `run_mpc_episodes(..., key, ...)` is paired with
episode i of `evaluate.run_episodes(..., key, ...)`: the same arrivals for every policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import graders
from inferencegym_jax.baselines import candidate_actions  # defined there for switch_rule too; mpc's name stays
from inferencegym_jax.control import switch_rule, trace_analogs, traffic_belief
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
from inferencegym_jax.evaluate import BATCH_MULTIPLE, Trajectory, in_batches, interval_record
from inferencegym_jax.traffic import workload

# [intervals] The default look-ahead: three start-ups of the v1 tasks' prefill engine
# (prefill_start_s = 10 s at 1-s intervals, configs/tasks/task3_v1.toml and task4_v1.toml), so a
# rollout that turns disaggregation on also sees it pay back. At 10 intervals it saw only the
# start-up, and the v1 oracles found less room (results/mpc_gap_v1.json against
# results/mpc_gap_v1_h30.json, README "Graders and baselines").
HORIZON = 30
# Futures the causal MPC averages each candidate over by default (one on a replayed trace, `plan`).
# 4 were too few: on 64 held-out episodes 16 scored +0.073 on task 2-v1 (4: +0.044, 64: +0.075)
# and +0.065 on task 3-v1 (4: +0.042), README "Graders and baselines". The imitation's teacher
# has its own default, 4 (training.config's `imitation_samples`; task 2-v1's config sets 16).
SAMPLES = 16


@struct.dataclass
class Handover:
    """Where a rollout hands over to the base policy (module docstring, "Rollout with a base policy").

    Attributes:
      rule: the base policy, a switch_rule.SwitchRule.
      memory: the rule's memory at the plan's interval (switch_rule.start_memory: float32
        (window,) [tokens], bool ()).
      t: int32 (), the plan's interval.
      hold: int32 () [intervals], the rollout holds its candidate for its first `hold` intervals
        and the rule decides from then on; 0: the base policy's own rollout.
    """

    rule: switch_rule.SwitchRule
    memory: tuple[jax.Array, jax.Array]
    t: jax.Array
    hold: jax.Array


def _rollout_action(action: jax.Array, handover: Handover | None, memory: tuple, h: jax.Array,
                    dt_s: jax.Array) -> tuple[tuple, jax.Array]:
    """(the rule's memory, int32 (5,) the configuration) for the rollout's interval h: `action`,
    or from the handover on, the rule's choice. Without a handover the memory is ()."""
    if handover is None:
        return memory, action
    memory, by_rule = switch_rule.decide(handover.rule, memory, handover.t + h, dt_s)
    return memory, jnp.where(h >= handover.hold, by_rule, action)


def _rollout_memory(handover: Handover | None, memory: tuple, h: jax.Array, info: dict) -> tuple:
    """The rule's memory after the rollout's interval h, whose step returned `info`."""
    return memory if handover is None else switch_rule.remember(handover.rule, memory, handover.t + h, info)


def _window_reward(env: InferenceGymEnv, params: EnvParams, state: EnvState, action: jax.Array, keys: jax.Array, *,
                   valid: jax.Array, past: dict, grader: str, is_open: jax.Array,
                   handover: Handover | None = None) -> jax.Array:
    """Summed reward of holding `action` from `state` for len(keys) intervals (or until the
    `handover`), counting only the intervals inside the episode (`valid`); float32. (`past`,
    `grader`, `is_open`: unused.)"""

    def body(carry, inputs):
        state, memory = carry
        key, h = inputs
        memory, act = _rollout_action(action, handover, memory, h, params.server.dt_s)
        _, state, reward, _, _, info = env.step_env(key, state, act, params)
        return (state, _rollout_memory(handover, memory, h, info)), reward

    start = () if handover is None else handover.memory
    _, rewards = jax.lax.scan(body, (state, start), (keys, jnp.arange(keys.shape[0])))
    return jnp.sum(valid * rewards)


def step_sums(info: dict, params: EnvParams, first: jax.Array) -> dict:
    """One interval's contribution to the episode's graders.SUM_FIELDS (float32 scalars) from
    its step's `info`; `first` (bool): the interval is the episode's first, whose configuration
    has no predecessor to count a change against."""
    sums = graders.interval_sums(info["metrics"], jnp.sum(info["arrivals"].output_tokens),
                                 info["applied_action"].quant_tier, params)
    not_first = 1.0 - first.astype(jnp.float32)
    return {**sums, "changes": info["reward_components"]["stability"], "pairs": not_first,
            "num_valid": jnp.float32(1.0)}


def _window_grade(env: InferenceGymEnv, params: EnvParams, state: EnvState, action: jax.Array, keys: jax.Array, *,
                  valid: jax.Array, past: dict, grader: str, is_open: jax.Array,
                  handover: Handover | None = None) -> jax.Array:
    """The grader's value of the episode so far (`past` sums) plus holding `action` from `state`
    for len(keys) intervals (or until the `handover`; those inside the episode, `valid`), with
    the backlog left at the end counted as decided violations when the episode goes on
    (`is_open`); float32."""

    def body(carry, inputs):
        state, memory = carry
        key, ok, h = inputs
        memory, act = _rollout_action(action, handover, memory, h, params.server.dt_s)
        _, nxt, _, _, _, info = env.step_env(key, state, act, params)
        sums = step_sums(info, params, ~state.server.started)
        return (nxt, _rollout_memory(handover, memory, h, info)), {k: ok * v for k, v in sums.items()}

    start = () if handover is None else handover.memory
    (end, _), window = jax.lax.scan(body, (state, start),
                                    (keys, valid.astype(jnp.float32), jnp.arange(keys.shape[0])))
    total = {k: past[k] + jnp.sum(window[k]) for k in graders.SUM_FIELDS}
    server = end.server
    backlog = jnp.sum(server.queue.count)
    if params.server.slo_accounting == "completion":
        backlog = backlog + server.on_time.late_seqs
    backlog = jnp.where(is_open, backlog, 0.0)
    total = {**total, "decided": total["decided"] + backlog, "violations": total["violations"] + backlog}
    return graders.value_from_sums(total, params, grader)


OBJECTIVES = {"grade": _window_grade, "reward": _window_reward}


def future_keys(k_env: jax.Array, k_plan: jax.Array, t: jax.Array, horizon: int, samples: int,
                clairvoyant: bool) -> jax.Array:
    """The keys the rollouts planned at interval t step with: typed keys (futures, horizon).

    Clairvoyant: one future, the episode's own keys fold_in(k_env, t + h). Causal: `samples`
    futures fold_in(fold_in(fold_in(k_plan, t), s), h), from a stream the episode never steps with.
    """
    ahead = jnp.arange(horizon)
    if clairvoyant:
        return jax.vmap(lambda h: jax.random.fold_in(k_env, t + h))(ahead)[None]
    k_t = jax.random.fold_in(k_plan, t)
    return jax.vmap(lambda s: jax.vmap(lambda h: jax.random.fold_in(jax.random.fold_in(k_t, s), h))(ahead))(
        jnp.arange(samples))


# Fold-in tag of a causal plan's trace offset where the trace has no past to replay (`_planning_state`).
FORECAST_OFFSET_TAG = 1


# Fold-in tag of a causal plan's draw of the hidden traffic state from its belief (`_planning_state`).
BELIEF_SAMPLE_TAG = 2
# Where a causal plan's hidden traffic state comes from (`run_mpc_episodes(traffic_state=...)`).
TRAFFIC_STATES = ("belief", "true")
# A causal plan's futures on a replayed trace (`run_mpc_episodes(trace_forecast=...)`, module docstring).
TRACE_FORECASTS = ("persistence", "analogs")


def _planning_state(state: EnvState, params: EnvParams, keys: jax.Array, clairvoyant: bool,
                    num_steps: int, horizon: int, belief: traffic_belief.TrafficBelief | None = None,
                    analog: tuple[jax.Array, jax.Array] | None = None) -> EnvState:
    """The state a rollout on future `keys` (`horizon` intervals) starts from: the true one,
    except in a causal plan
      * on a replayed trace (which draws nothing from keys, so every rollout would see the
        episode's own future): the stretch of the trace that starts at `analog`'s time [s] on
        the trace's clock where it has one (`trace_analogs.analog_starts`: (start, found),
        float32 (), bool ()), else the trace's own last `horizon` intervals replayed again, a
        persistence forecast (`_recent_trace_offset`);
      * with a `belief`: the hidden traffic state (a periodic burst's phase, an MMPP burst's
        on/off) drawn from the posterior given the arrivals seen so far (`traffic_belief`).
    """
    if clairvoyant:
        return state
    if belief is not None:
        k_sample = jax.random.fold_in(keys[0], BELIEF_SAMPLE_TAG)
        state = state.replace(workload=traffic_belief.sample(belief, k_sample, state.workload, params.workload))
    if params.workload.schedule != "trace":
        return state
    offset = _recent_trace_offset(state, params, keys, num_steps, horizon)
    if analog is not None:
        start_s, found = analog  # the replay reads the trace at offset + time x dt (workload._trace_arrivals)
        offset = jnp.where(found, start_s - state.time.astype(jnp.float32) * params.server.dt_s, offset)
    return state.replace(workload=state.workload.replace(phase_s=offset))


def _trace_now(state: EnvState, params: EnvParams) -> jax.Array:
    """[s] float32 (): the start of `state`'s interval on the replayed trace's clock."""
    return state.workload.phase_s + state.time.astype(jnp.float32) * params.server.dt_s


def _recent_trace_offset(state: EnvState, params: EnvParams, keys: jax.Array, num_steps: int,
                         horizon: int) -> jax.Array:
    """[s] float32 (): the replay offset under which a rollout from `state` replays, in its
    `horizon` intervals, the trace's `horizon` intervals just before `state`'s: the recent past
    repeats (a persistence forecast, the trace's own regime: its load is correlated over tens of
    seconds, README "Graders and baselines"). Those intervals are in the past of the server, if
    partly before the episode began (a server that ran before it saw them). Where the trace has
    fewer than `horizon` intervals before `state`, another stretch of it, from an offset drawn
    from the future's first key as a reset draws one.
    """
    lookback = horizon * params.server.dt_s
    now = _trace_now(state, params)
    u = jax.random.uniform(jax.random.fold_in(keys[0], FORECAST_OFFSET_TAG))
    draws = jnp.stack([u, jnp.float32(0.0)])  # a reset's draws: the offset, no burst (a trace has none)
    elsewhere = workload.init_from_draws(draws, params.workload, num_steps * params.server.dt_s).phase_s
    return jnp.where(now >= lookback, state.workload.phase_s - lookback, elsewhere)


def plan(env: InferenceGymEnv, params: EnvParams, candidates: jax.Array, state: EnvState, past: dict,
         belief: traffic_belief.TrafficBelief | None, t: jax.Array, k_env: jax.Array, k_plan: jax.Array,
         num_steps: int, horizon: int, samples: int, clairvoyant: bool, grader: str = "throughput",
         objective: str = "grade", trace_forecast: str = "persistence",
         analog_window: int = trace_analogs.WINDOW) -> jax.Array:
    """The controller's choice at interval t: the candidate (int32 (5,), a row of `candidates`)
    with the best mean score over the futures (module docstring) from `state`.

    Args:
      past: the episode's graders.SUM_FIELDS sums before interval t (`start_memory`, `advance`).
      belief: the traffic belief given the arrivals before interval t (a causal plan's hidden
        traffic state); None: the true one.
      k_env, k_plan: the episode's step and planning keys.
      trace_forecast: a causal plan's futures on a replayed trace, one of TRACE_FORECASTS
        (module docstring): "persistence" plans on one, "analogs" on `samples`.
      analog_window: [intervals] the load the analogs match (`trace_analogs.analog_starts`).
    """
    score = _scorer(env, params, state, past, belief, t, k_env, k_plan, num_steps, horizon, samples, clairvoyant,
                    grader, objective, trace_forecast, analog_window)
    return candidates[jnp.argmax(jax.vmap(lambda action: jnp.mean(score(action, None)))(candidates))]


def plan_with_base(env: InferenceGymEnv, params: EnvParams, candidates: jax.Array, base: switch_rule.SwitchRule,
                   base_memory: tuple[jax.Array, jax.Array], hold: int, state: EnvState, past: dict,
                   belief: traffic_belief.TrafficBelief | None, t: jax.Array, k_env: jax.Array, k_plan: jax.Array,
                   num_steps: int, horizon: int, samples: int, clairvoyant: bool, grader: str = "throughput",
                   objective: str = "grade", trace_forecast: str = "persistence",
                   analog_window: int = trace_analogs.WINDOW, margin: float = 0.0) -> tuple[jax.Array, jax.Array]:
    """The rollout controller's choice at interval t (module docstring, "Rollout with a base
    policy"): (follow: bool (), the base policy's rollout scored best, so it decides the next
    `hold` intervals; else action: int32 (5,), the row of `candidates` to hold for them, whose
    rollout (held `hold` intervals, then the base policy) scored best). Ties go to the base.

    Args:
      base: the base policy; base_memory: its memory before interval t (switch_rule.start_memory,
        switch_rule.remember). The other arguments are `plan`'s.
      margin: [standard errors] >= 0. With margin > 0 a candidate may replace the base only if
        its mean gain over the base's rollout on the same futures exceeds `margin` standard errors
        of that paired gain (module docstring, "A margin before leaving the base"); 0: the best
        mean wins.
    """
    score = _scorer(env, params, state, past, belief, t, k_env, k_plan, num_steps, horizon, samples, clairvoyant,
                    grader, objective, trace_forecast, analog_window)
    actions = jnp.concatenate([candidates[:1], candidates])  # row 0: the base's own rollout (its action unused)
    holds = jnp.full(actions.shape[0], hold, jnp.int32).at[0].set(0)
    per_future = jax.vmap(lambda action, h: score(action, Handover(base, base_memory, t, h)))(actions, holds)
    if margin == 0.0:  # margin is static
        scores = jnp.mean(per_future, axis=1)
    else:
        gain = per_future - per_future[:1]  # (options, futures), paired with the base's rollout
        mean = jnp.mean(gain, axis=1)
        standard_error = jnp.std(gain, axis=1, ddof=1) / np.sqrt(gain.shape[1])
        scores = jnp.where(mean > margin * standard_error, mean, 0.0)  # the base's row is 0: none clears, it wins
    best = jnp.argmax(scores)
    return best == 0, actions[best]


def _scorer(env: InferenceGymEnv, params: EnvParams, state: EnvState, past: dict,
            belief: traffic_belief.TrafficBelief | None, t: jax.Array, k_env: jax.Array, k_plan: jax.Array,
            num_steps: int, horizon: int, samples: int, clairvoyant: bool, grader: str, objective: str,
            trace_forecast: str, analog_window: int) -> Callable[[jax.Array, Handover | None], jax.Array]:
    """`plan`'s scoring: a function (action int32 (5,), handover: Handover | None) -> float32
    (futures,), the objective of the rollout from `state` at interval t on each future."""
    ahead = jnp.arange(horizon)
    valid = (t + ahead) < num_steps
    analogs = None
    if params.workload.schedule == "trace":
        if clairvoyant or trace_forecast == "persistence":
            samples = 1  # the episode's own future, or its recent past (`_recent_trace_offset`): one future
        else:
            analogs = trace_analogs.analog_starts(params.workload.trace, _trace_now(state, params), horizon, samples,
                                                  params.server.dt_s, analog_window)
    futures = future_keys(k_env, k_plan, t, horizon, samples, clairvoyant)
    score = functools.partial(OBJECTIVES[objective], env, params, valid=valid, past=past, grader=grader,
                              is_open=(t + horizon) < num_steps)

    def future_scores(action: jax.Array, handover: Handover | None) -> jax.Array:
        def one_future(keys, analog):
            state_h = _planning_state(state, params, keys, clairvoyant, num_steps, horizon, belief, analog)
            return score(state_h, action, keys, handover=handover)

        return jax.vmap(one_future)(futures, analogs)

    return future_scores


def run_mpc_episode(env: InferenceGymEnv, params: EnvParams, candidates: jax.Array, key: jax.Array, num_steps: int,
                    horizon: int, samples: int, clairvoyant: bool, grader: str = "throughput",
                    objective: str = "grade", traffic_state: str = "belief", replan_every: int = 1,
                    trace_forecast: str = "persistence", analog_window: int = trace_analogs.WINDOW,
                    base: switch_rule.SwitchRule | None = None, margin: float = 0.0) -> Trajectory:
    """One episode of the controller (module docstring); a Trajectory like run_episode's. It plans
    at intervals t with t % replan_every == 0 and holds that choice until the next plan; with a
    `base` policy, the choice is a candidate or the base policy (`plan_with_base`, its `margin`)."""
    k_reset, k_env, k_plan = jax.random.split(key, 3)
    _, state = env.reset_env(k_reset, params)
    use_belief = not clairvoyant and traffic_state == "belief"
    args = (num_steps, horizon, samples, clairvoyant, grader, objective, trace_forecast, analog_window)

    def body(carry, t):
        state, past, belief, held, memory = carry
        belief_seen = belief if use_belief else None
        # t is the scan's (not vmapped) index, so the cond stays a branch under vmap: no plan is
        # computed in the intervals that hold.
        if base is None:
            held = jax.lax.cond(t % replan_every == 0, lambda: plan(env, params, candidates, state, past, belief_seen,
                                                                    t, k_env, k_plan, *args), lambda: held)
            action = held
        else:
            held = jax.lax.cond(t % replan_every == 0,
                                lambda: plan_with_base(env, params, candidates, base, memory, replan_every, state,
                                                       past, belief_seen, t, k_env, k_plan, *args, margin),
                                lambda: held)
            memory, by_rule = switch_rule.decide(base, memory, t, params.server.dt_s)
            action = jnp.where(held[0], by_rule, held[1])
        _, nxt, reward, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)
        past, belief = advance(past, belief, state, info, t, params)
        memory = memory if base is None else switch_rule.remember(base, memory, t, info)
        return (nxt, past, belief, held, memory), interval_record(reward, info)

    held, memory = ((candidates[0], ()) if base is None
                    else ((jnp.bool_(True), candidates[0]), switch_rule.start_memory(base)))
    _, traj = jax.lax.scan(body, (state, *start_memory(params), held, memory), jnp.arange(num_steps))
    return traj


def start_memory(params: EnvParams) -> tuple[dict, traffic_belief.TrafficBelief]:
    """(the grader sums of no interval, the prior belief): what a controller remembers at t = 0."""
    return {k: jnp.float32(0.0) for k in graders.SUM_FIELDS}, traffic_belief.init(params.workload)


def advance(past: dict, belief: traffic_belief.TrafficBelief, state: EnvState, info: dict, t: jax.Array,
            params: EnvParams) -> tuple[dict, traffic_belief.TrafficBelief]:
    """The grader sums and the traffic belief after interval t, stepped from `state` with `info`."""
    step = step_sums(info, params, ~state.server.started)
    dt = params.server.dt_s
    belief = traffic_belief.update(belief, info["arrivals"].count, t.astype(jnp.float32) * dt, dt, params.workload)
    return {k: past[k] + step[k] for k in graders.SUM_FIELDS}, belief


@functools.partial(jax.jit, static_argnames=("env", "num_steps", "horizon", "samples", "clairvoyant", "grader",
                                             "objective", "traffic_state", "replan_every", "trace_forecast",
                                             "analog_window", "margin"))
def _run_batch(env, params, candidates, keys, num_steps, horizon, samples, clairvoyant, grader, objective,
               traffic_state, replan_every, trace_forecast, analog_window, base, margin):
    return jax.vmap(lambda k: run_mpc_episode(env, params, candidates, k, num_steps, horizon, samples,
                                              clairvoyant, grader, objective, traffic_state, replan_every,
                                              trace_forecast, analog_window, base, margin))(keys)


def run_mpc_episodes(env: InferenceGymEnv, params: EnvParams, task_id: str, key: jax.Array, num_episodes: int, *,
                     clairvoyant: bool, horizon: int = HORIZON, samples: int = SAMPLES,
                     candidates: np.ndarray | None = None, batch_size: int = BATCH_MULTIPLE,
                     num_steps: int | None = None, objective: str = "grade",
                     traffic_state: str = "belief", replan_every: int = 1,
                     trace_forecast: str = "persistence", analog_window: int = trace_analogs.WINDOW,
                     base: switch_rule.SwitchRule | None = None, margin: float = 0.0) -> Trajectory:
    """Episodes 0 .. num_episodes-1 of the controller, episode i from fold_in(key, i) (paired
    with evaluate.run_episodes' episode i); batches of `batch_size` episodes per jitted call.

    Args:
      clairvoyant: True for the oracle bound (the episode's own future), False for the causal
        MPC (`samples` futures from fresh keys; on a replayed trace `trace_forecast`'s).
      horizon: [intervals] each rollout looks ahead, >= 1.
      candidates: int32 (C, 5) index actions (default: `candidate_actions`).
      objective: "grade" (the task grader's value of the episode so far plus the rollout) or
        "reward" (the rollout's summed reward); module docstring.
      traffic_state: where the causal MPC's hidden traffic state comes from: "belief" (the
        posterior given the arrivals so far, `traffic_belief`: the fair baseline) or "true" (the
        episode's own burst phase or MMPP state: a reference for a perfect traffic-state estimate).
      replan_every: [intervals] >= 1 between plans, the choice held in between (move blocking,
        module docstring); 1 plans every interval.
      trace_forecast: the causal MPC's futures on a replayed trace: "persistence" (one, its
        recent past) or "analogs" (`samples`, at most trace_analogs.LOOKBACK, the stretches that
        followed a load like now's); module docstring.
      analog_window: [intervals] >= 1, the load over which analogs match now's (`trace_analogs`).
      base: a base policy (module docstring, "Rollout with a base policy"): each rollout holds
        its candidate `replan_every` intervals and then follows it, and following it is an
        option too. None: the candidate is held the whole rollout.
      margin: [standard errors] >= 0, with a base policy and two or more sampled futures: how
        far a candidate's mean gain over the base must clear its standard error to be chosen
        (module docstring, "A margin before leaving the base"); 0: the best mean wins.
    """
    if horizon < 1 or samples < 1 or num_episodes < 1 or batch_size < 1 or replan_every < 1:
        raise ValueError(f"horizon={horizon}, samples={samples}, num_episodes={num_episodes}, "
                         f"batch_size={batch_size} and replan_every={replan_every} must be >= 1")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: must be one of {sorted(OBJECTIVES)}")
    if traffic_state not in TRAFFIC_STATES:
        raise ValueError(f"traffic_state={traffic_state!r}: must be one of {list(TRAFFIC_STATES)}")
    if trace_forecast not in TRACE_FORECASTS:
        raise ValueError(f"trace_forecast={trace_forecast!r}: must be one of {list(TRACE_FORECASTS)}")
    if analog_window < 1:
        raise ValueError(f"analog_window={analog_window}: must be >= 1 [intervals]")
    if trace_forecast == "analogs" and samples > trace_analogs.LOOKBACK:
        raise ValueError(f"samples={samples}: at most {trace_analogs.LOOKBACK} analogs (trace_analogs.LOOKBACK)")
    one_future = clairvoyant or (params.workload.schedule == "trace" and trace_forecast == "persistence")
    if not 0 <= margin < np.inf or (margin > 0 and (base is None or one_future or samples < 2)):
        raise ValueError(f"margin={margin}: must be finite and >= 0, and 0 without a base policy or with fewer "
                         "than two sampled futures (clairvoyant, a trace's persistence forecast, samples < 2)")
    num_steps = int(num_steps or int(params.max_steps_in_episode))
    cands = jnp.asarray(candidate_actions(env, params, task_id) if candidates is None else candidates, jnp.int32)
    grader = graders.grader_name(task_id)

    def run_batch(keys: jax.Array, start: int, count: int) -> Trajectory:
        return _run_batch(env, params, cands, keys, num_steps, horizon, 1 if clairvoyant else samples, clairvoyant,
                          grader, objective, traffic_state, replan_every, trace_forecast, analog_window, base,
                          float(margin))

    return in_batches(run_batch, key, num_episodes, batch_size)
