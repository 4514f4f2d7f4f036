"""Model-predictive controllers over the simulator: a clairvoyant oracle bound and a causal MPC.

Every interval t the controller copies the env state, rolls each candidate configuration (a
fixed grid-index action) `horizon` intervals ahead in the simulator, scores each rollout (the
objective below), and applies the best candidate for interval t only (receding horizon). Two
ways to see the future:

  * clairvoyant (`mpc_oracle`): the rollouts use the episode's own keys, fold_in(k_env, t + h),
    so they see the very arrivals and lengths the episode will get. An ORACLE BOUND, not a
    policy: no causal controller knows them. experiments/refined_oracle.py refines its
    episodes into a stronger one.
  * causal (`mpc`): the rollouts use `samples` futures drawn from keys the episode never uses
    (fold_in(fold_in(fold_in(k_plan, t), s), h)), and a candidate's score is its mean over them.
    A replayed trace draws nothing from keys, so on a trace task the futures are stretches of
    the trace itself (`trace_forecast`): "persistence" (the default, what the imitation teacher
    plans with), one future, the trace's last `horizon` intervals replayed again
    (`mpc_planning._recent_trace_offset`), the current regime of the real load; "analogs", `samples` futures,
    the stretches of the trace's past that followed a load like the one seen now
    (`trace_analogs`), which average over the burst timing persistence repeats exactly. (An
    earlier forecast, other stretches of the trace drawn at random, planned for the trace's
    average load and scored 0.089 below the best static configuration on task 4-v1: docs/CONTROLLERS.md.)
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
task 2-v1, where bursts are short (docs/CONTROLLERS.md, experiments/mpc_gap.py
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

The controller (`MPC`) meets `protocols.Controller`: `evaluate.run_episode` plays it with the keys
it gives every policy ((k_reset, k_env, k_plan) = split(key, 3), interval t steps with
fold_in(k_env, t)), so episode i of `run_mpc_episodes(..., key, ...)` is paired with episode i of
`evaluate.run_episodes(..., key, ...)`: the same arrivals for every policy. Its settings are one
`MPCConfig` (`mpc_config`); a plan is `mpc_planning`'s, a rollout's score `mpc_rollout`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import evaluate, graders
from inferencegym_jax.baselines import candidate_actions  # defined there for switch_rule too; mpc's name stays
from inferencegym_jax.control import switch_rule, traffic_belief
from inferencegym_jax.control.mpc_config import (  # noqa: F401 (the settings' names, re-exported)
    HORIZON,
    OBJECTIVE_NAMES,
    SAMPLES,
    TRACE_FORECASTS,
    TRAFFIC_STATES,
    MPCConfig,
)
from inferencegym_jax.control.mpc_planning import Moment, Planner, plan, plan_with_base
from inferencegym_jax.control.mpc_rollout import OBJECTIVES, step_sums  # noqa: F401 (re-exported)
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
from inferencegym_jax.evaluate import BATCH_MULTIPLE, Trajectory
from inferencegym_jax.protocols import Seen, StepOutput


@struct.dataclass
class MPCMemory:
    """What the MPC remembers between intervals (leaves of one episode).

    Attributes:
      k_env, k_plan: the episode's step and planning keys (typed keys ()).
      past: the episode's graders.SUM_FIELDS sums so far, float32 ().
      belief: the traffic belief given the arrivals so far (`traffic_belief.TrafficBelief`).
      held: the choice of the last plan: int32 (5,) without a base policy, else (follow: bool (),
        action: int32 (5,)) (`mpc_planning.plan_with_base`).
      rule: the base policy's memory (switch_rule.SwitchRule.init); () without one.
    """

    k_env: jax.Array
    k_plan: jax.Array
    past: dict
    belief: traffic_belief.TrafficBelief
    held: Any
    rule: Any


def serving_state(state: Any) -> EnvState:
    """The serving env's state under any memory wrappers' states (each holds it in `env_state`)."""
    while not isinstance(state, EnvState):
        state = state.env_state
    return state


@struct.dataclass
class MPC(Planner):
    """The model-predictive controller (module docstring), a `protocols.Controller`; made by
    `controller`. Its fields are `mpc_planning.Planner`'s; it plans on the serving env's true state
    under the state it is shown (a wrapped env's too)."""

    def init(self, key: jax.Array, seen: Seen, params: EnvParams) -> MPCMemory:
        """The memory at t = 0 from the episode's key (whose step keys a clairvoyant plan reads)."""
        _, k_env, k_plan = jax.random.split(key, 3)
        past, belief = start_memory(params)
        held: Any
        rule: Any
        if self.base is None:
            held, rule = self.candidates[0], ()
        else:
            held, rule = (jnp.bool_(True), self.candidates[0]), switch_rule.start_memory(self.base)
        return MPCMemory(k_env, k_plan, past, belief, held, rule)

    def act(self, memory: MPCMemory, key: jax.Array, seen: Seen, params: EnvParams) -> tuple[jax.Array, MPCMemory]:
        """(int32 (5,) the configuration for interval seen.t, the memory): a plan at the intervals
        t % replan_every == 0, held in between; with a base policy, the candidate or its choice."""
        cfg, t = self.config, seen.t
        belief = memory.belief if not cfg.clairvoyant and cfg.traffic_state == "belief" else None
        now = Moment(serving_state(seen.state), memory.past, belief, t, memory.k_env, memory.k_plan, memory.rule)
        # t is the scan's (not vmapped) index, so the cond stays a branch under vmap: no plan is
        # computed in the intervals that hold.
        if self.base is None:
            held = jax.lax.cond(t % cfg.replan_every == 0, lambda: plan(self, params, now), lambda: memory.held)
            return held, dataclasses.replace(memory, held=held)
        held = jax.lax.cond(t % cfg.replan_every == 0, lambda: plan_with_base(self, params, now),
                            lambda: memory.held)
        rule, by_rule = switch_rule.decide(self.base, memory.rule, t, params.server.dt_s)
        return jnp.where(held[0], by_rule, held[1]), dataclasses.replace(memory, held=held, rule=rule)

    def update(self, memory: MPCMemory, step: StepOutput, params: EnvParams) -> MPCMemory:
        """The grader sums, the belief and the base policy's memory after interval step.t."""
        past, belief = advance(memory.past, memory.belief, serving_state(step.state), step.info, step.t, params)
        rule = memory.rule if self.base is None else switch_rule.remember(self.base, memory.rule, step.t, step.info)
        return dataclasses.replace(memory, past=past, belief=belief, rule=rule)


def controller(env: InferenceGymEnv, params: EnvParams, task_id: str, config: MPCConfig | None = None, *,
               candidates: np.ndarray | None = None, base: switch_rule.SwitchRule | None = None,
               num_steps: int | None = None) -> MPC:
    """The MPC of `config` for `task_id` on the serving env `env`: its grader objective, its
    `candidates` (int32 (C, 5) index actions; default `candidate_actions`), an optional `base`
    policy (module docstring, "Rollout with a base policy"), for episodes of `num_steps` intervals
    (default the task's; `config` default MPCConfig()). ValueError for a margin the setting
    cannot use (MPCConfig.check_margin)."""
    config = MPCConfig() if config is None else config
    config.check_margin(base is not None, params.workload.schedule == "trace")
    cands = jnp.asarray(candidate_actions(env, params, task_id) if candidates is None else candidates, jnp.int32)
    return MPC(cands, base, env, config, graders.grader_name(task_id),
               int(num_steps or int(params.max_steps_in_episode)))


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


def run_mpc_episodes(ctrl: MPC, params: EnvParams, key: jax.Array, num_episodes: int, *,
                     batch_size: int = BATCH_MULTIPLE) -> Trajectory:
    """Episodes 0 .. num_episodes-1 of the controller `ctrl` (`controller`), its num_steps intervals
    each, episode i from fold_in(key, i) (paired with evaluate.run_episodes' episode i); batches of
    `batch_size` episodes per jitted call (`evaluate.run_episodes`)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    return evaluate.run_episodes(ctrl.env, params, ctrl, key, num_episodes, batch_size=batch_size,
                                 num_steps=ctrl.num_steps)
