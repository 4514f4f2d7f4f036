"""The serving setup of a PPO run: what is trained (the task in its action layout, memory wrappers,
the initial action's prior) and the imitation teacher, built into what `training.make_train` takes.

`training` knows nothing of the serving env: `PPOConfig` holds the algorithm, and the trainer
takes any env with the gymnax call shape, an optional prior on one action, a warm-up action and
an optional teacher (`training.imitation.Teacher`). `ServingSetup` holds the rest of a
configs/train file and builds those inputs (`build`):

* the env: `ig.make(task)` (or a given env), wrapped by `inferencegym_jax.wrappers` for
  action_mode 'hold' or 'relative' (a plain serving env is the 'absolute' layout) and, with
  `history_windows`, by `ArrivalHistoryWrapper` outside that and, with `forecast_intervals`, by
  `TrafficForecastWrapper` outside that;
* the initial action (`initial_action`, when `default_logit > 0`) the initial policy favours,
  in the wrapped env's action space (`wrappers.initial_action`);
* the warm-up action `desync_envs` steps the envs with: the task default ('default');
* with `imitation_episodes`, the teacher (`teachers`: the causal MPC or the switching rule) whose
  episodes the policy is fitted to before PPO.

A fleet (`inferencegym_jax.fleet`, a registered `InferenceGym-Fleet*` id or a `FleetEnv`) is
trained as is, in the absolute layout: its prior ('default', with `default_logit > 0`) and its
warm-up action are the fleet's default configuration, every replica up and least-loaded routing
([R, 0]), as a vLLM default is a server's; its imitation teachers are its causal baselines
(`imitation_teacher` "forecast", "hpa" or "hpa_pooled", `fleet.baselines`: their numbers chosen on
the training days); memory wrappers and 'best_static' are refused.
A reservation task (`fleet.reservation`, a registered `InferenceGym-Reserve*` id) and any other
env (the probes of `training.probes`) are trained as is: absolute layout only, no prior, warm-up
action all zeros (a reservation's: nothing reserved), no memory wrapper; a setting they lack is
refused naming its key. A reservation task may imitate one of its causal baselines first
(`imitation_teacher` "week_peak", "flat_fraction" or "rolling_quantile", `fleet.reservation_baselines`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from inferencegym_jax import wrappers
from inferencegym_jax.control.mpc import HORIZON
from inferencegym_jax.fleet.env import ROUTING_RULES, FleetEnv
from inferencegym_jax.fleet.reservation import ReservationEnv
from inferencegym_jax.fleet.reservation_tasks import is_reservation_id
from inferencegym_jax.fleet.tasks import is_fleet_id
from inferencegym_jax.training_setup import teachers
from training.config import describe_fields, field_names, field_values, fields_toml, static_field, to_dict
from training.imitation import Teacher

# Teachers the imitation before PPO may fit (`imitation_teacher`).
IMITATION_TEACHERS = ("mpc", "switch_rule", "forecast", "hpa", "hpa_pooled", "week_peak", "flat_fraction",
                      "rolling_quantile")
# A fleet's teachers: its causal baselines (`fleet.baselines`: the seasonal forecast, the HPA and the
# pooled HPA, their numbers chosen on the training days); the others plan or switch with a serving
# env's simulator.
FLEET_TEACHERS = ("forecast", "hpa", "hpa_pooled")
# A reservation task's teachers: its causal baselines (`fleet.reservation_baselines`, the
# fraction chosen on the training services), which read the observation alone.
RESERVATION_TEACHERS = ("week_peak", "flat_fraction", "rolling_quantile")
# A fleet's default routing rule: least-loaded (fleet.env.ROUTING_RULES index 0).
FLEET_DEFAULT_ROUTING = ROUTING_RULES.index("least_loaded")


@dataclasses.dataclass(frozen=True)
class ServingSetup:
    """The serving side of a configs/train file (module docstring); an `training.config.EnvConfig`.
    Unknown keys, wrong types and out-of-range values raise `ValueError` naming the key."""

    task: str = static_field("InferenceGym-Task1-v0", "env id, or a task number (its newest version)")
    action_mode: str = static_field(
        "absolute", "'absolute': the policy picks each knob's grid index; 'relative': it moves each knob by -1, 0 or "
        "+1 grid step from the value in force; 'hold': it keeps each knob's value in force or sets any grid index",
        lambda v: v in ("absolute", "relative", "hold"), "'absolute', 'relative' or 'hold'")
    history_windows: int = static_field(
        0, "observe the arrivals of the last history_windows windows of history_window_intervals intervals each "
        "(wrappers.ArrivalHistoryWrapper), so a policy can see a burst cycle or a trend; 0: the observation alone",
        lambda v: 0 <= v <= 1024, "in [0, 1024]")
    history_window_intervals: int = static_field(5, "intervals per window of the arrival history [intervals]",
                                                 lambda v: 1 <= v <= 1024, "in [1, 1024]")
    forecast_intervals: int = static_field(
        0, "observe the traffic belief's probability of a burst in each of the next forecast_intervals intervals "
        "(wrappers.TrafficForecastWrapper: the posterior the causal mpc plans from); 0: no forecast",
        lambda v: 0 <= v <= 1024, "in [0, 1024]")
    imitation_episodes: int = static_field(
        0, "episodes of the teacher (imitation_teacher: by default the causal mpc) whose choices the policy is "
        "fitted to before PPO (training.imitation: behaviour cloning with PPOConfig's imitation_epochs, "
        "imitation_rounds and imitation_lr, then PPO from that start); absolute action_mode only; 0: no imitation",
        lambda v: 0 <= v <= 65536, "in [0, 65536]")
    imitation_teacher: str = static_field(
        "mpc", "whose choices the imitation fits: 'mpc' (the causal mpc, imitation_horizon and imitation_samples "
        "below) or 'switch_rule' (the switching rule inferencegym_jax.control.switch_rule selects for the task); "
        "a fleet: 'forecast', 'hpa' or 'hpa_pooled' (its causal baselines, inferencegym_jax.fleet.baselines); a "
        "reservation task: 'week_peak', 'flat_fraction' or 'rolling_quantile' (its causal baselines, "
        "inferencegym_jax.fleet.reservation_baselines)",
        lambda v: v in IMITATION_TEACHERS, f"one of {list(IMITATION_TEACHERS)}")
    imitation_teacher_choice: str = static_field(
        "rule", "a fleet teacher's numbers: 'rule' (its baselines file's choice, the fewest GPU-hours at the SLO "
        "target on the training days) or 'lowest_cost' (the training search's candidate with the lowest mean "
        "episode cost, the reward PPO maximises; fleet.baselines.lowest_cost_numbers)",
        lambda v: v in ("rule", "lowest_cost"), "'rule' or 'lowest_cost'")
    imitation_horizon: int = static_field(
        HORIZON, "[intervals] the teacher mpc looks ahead (its MPCConfig.horizon; default mpc.HORIZON); it should "
        "cover the slowest reconfiguration's start-up and its payback (the v1 tasks' prefill engine starts in 10 s: "
        "docs, the MPC horizon table)",
        lambda v: 1 <= v <= 1024, "in [1, 1024]")
    # 4, not mpc.SAMPLES (16): the shipped imitations of tasks 3-v1 and 4-v1 were measured with 4 (task
    # 2-v1's config sets 16), and a checkpoint written before this key existed reads back with its
    # default, so the default must be what it ran.
    imitation_samples: int = static_field(
        4, "sampled futures the teacher mpc averages each candidate over (MPCConfig.samples; one on a replayed "
        "trace; the mpc baseline uses mpc.SAMPLES = 16); each costs a rollout per candidate per interval",
        lambda v: 1 <= v <= 1024, "in [1, 1024]")
    # The prior on one action (training.make_train's initial_action and initial_logit): which action
    # is the task's (its default or best static configuration), so both keys are the setup's.
    default_logit: float = static_field(
        0.0, "initial logit bonus per knob of the action initial_action names: the task's default action (absolute "
        "mode), 'no change' (relative and hold modes) or the best static configuration; 0: a uniform start",
        lambda v: 0.0 <= v <= 20.0, "in [0, 20]")
    initial_action: str = static_field(
        "default", "what the initial policy favours with default_logit: 'default', the task's default action "
        "(absolute mode) or 'no change' (relative, hold); 'best_static' (absolute, hold), setting the graders' best "
        "static configuration (searched on training keys, data/grader_constants.json): PPO then refines the best "
        "fixed configuration instead of searching the grid from scratch",
        lambda v: v in ("default", "best_static"), "'default' or 'best_static'")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ServingSetup:
        """A validated setup from a flat mapping of its keys (the task resolved to its id)."""
        allowed = field_names(cls)
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise ValueError(f"unknown serving setup key {unknown[0]!r}; allowed: {sorted(allowed)}")
        values = dict(raw)
        task = values.get("task")
        if task is not None and not is_fleet_id(task) and not is_reservation_id(task):  # registered as they are
            from inferencegym_jax.tasks import resolve_id

            values["task"] = resolve_id(values["task"], key="config key 'task' = ")
        setup = cls(**field_values(cls, values))
        setup.check()
        return setup

    def check(self) -> None:
        """ValueError naming the key for settings that do not fit together."""
        if self.initial_action != "default" and self.action_mode == "relative":
            raise ValueError(f"config key 'initial_action' = {self.initial_action!r} needs action_mode = 'absolute' "
                             "or 'hold': a relative policy moves one grid step from the knobs in force")
        if self.initial_action != "default" and self.default_logit == 0.0:
            raise ValueError(f"config key 'initial_action' = {self.initial_action!r} needs default_logit > 0 (the "
                             "size of the prior on it); with 0 the initial policy is uniform")
        if self.imitation_episodes and self.action_mode != "absolute":
            raise ValueError(f"config key 'imitation_episodes' = {self.imitation_episodes} needs action_mode = "
                             f"'absolute' (the teacher's actions are grid indices), not {self.action_mode!r}")
        if self.imitation_teacher_choice != "rule" and not is_fleet_id(self.task):
            raise ValueError(f"config key 'imitation_teacher_choice' = {self.imitation_teacher_choice!r} is a fleet "
                             "teacher's; allowed here: 'rule'")
        if is_fleet_id(self.task):
            self._check_fleet(self.task)
        elif is_reservation_id(self.task):
            self._check_as_is(self.task)
        elif self.imitation_episodes and self.imitation_teacher in (*FLEET_TEACHERS, *RESERVATION_TEACHERS):
            whose = "a fleet's" if self.imitation_teacher in FLEET_TEACHERS else "a reservation task's"
            raise ValueError(f"config key 'imitation_teacher' = {self.imitation_teacher!r} is {whose} teacher; a "
                             "serving task imitates 'mpc' or 'switch_rule'")

    def _check_fleet(self, env_id: str) -> None:
        """ValueError naming the key for a setting a fleet task does not have (module docstring)."""
        allowed = {"action_mode": "absolute", "initial_action": "default", "history_windows": 0,
                   "forecast_intervals": 0}
        for key, value in allowed.items():
            if getattr(self, key) != value:
                raise ValueError(f"config key {key!r} = {getattr(self, key)!r}: the fleet task {env_id} allows "
                                 f"only {value!r} (a fleet trains in its own action layout, without memory "
                                 "wrappers; its prior is its default configuration)")
        if self.imitation_episodes and self.imitation_teacher not in FLEET_TEACHERS:
            raise ValueError(f"config key 'imitation_teacher' = {self.imitation_teacher!r}: the fleet task {env_id} "
                             f"imitates only one of {list(FLEET_TEACHERS)} (fleet.baselines)")

    def _check_as_is(self, env_id: str) -> None:
        """ValueError naming the key for a setting a task trained as is (a reservation) lacks."""
        allowed = {"action_mode": "absolute", "initial_action": "default", "default_logit": 0.0,
                   "history_windows": 0, "forecast_intervals": 0}
        for key, value in allowed.items():
            if getattr(self, key) != value:
                raise ValueError(f"config key {key!r} = {getattr(self, key)!r}: the task {env_id} allows only "
                                 f"{value!r} (it trains as is: its own action layout, no memory wrapper, no prior)")
        if self.imitation_episodes and self.imitation_teacher not in RESERVATION_TEACHERS:
            raise ValueError(f"config key 'imitation_teacher' = {self.imitation_teacher!r}: the task {env_id} "
                             f"imitates only one of {list(RESERVATION_TEACHERS)} (fleet.reservation_baselines)")

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value."""
        return to_dict(self)

    def to_toml(self) -> str:
        """The fields as TOML lines, each with its doc."""
        return fields_toml(self)

    def describe(self) -> str:
        """One line per field: name = value [static]."""
        return describe_fields(self)

    def build(self, env: Any = None, env_params: Any = None) -> TrainingEnv:
        """The env, params, actions and teacher PPO trains with (module docstring).

        Args:
          env: None: `ig.make(task)`; else this env (a serving env, plain or wrapped, or any env
            with the call shape, trained in the absolute layout).
          env_params: None: the env's default params.

        Raises:
          ValueError: an action_mode the env cannot have, or a setting a non-serving env lacks.
        """
        if env is None:
            import inferencegym_jax as ig

            env, default_params = ig.make(self.task)
        else:
            default_params = env.default_params
        params = default_params if env_params is None else env_params
        if wrappers.is_memory_wrapper(env):
            raise ValueError(f"the env given keeps a memory of past intervals already ({env!r}): pass the env under "
                             "it, and set config keys 'history_windows' or 'forecast_intervals' to add one")
        if isinstance(env, FleetEnv):
            return self._fleet(env, params)
        if isinstance(env, ReservationEnv):
            return self._reservation(env, params)
        env = self._in_layout(env)
        if not is_serving_env(env):
            for key, what in (("history_windows", "the arrival history needs a serving env (its arrivals)"),
                              ("forecast_intervals", "the traffic forecast needs a serving env (its arrivals)"),
                              ("imitation_episodes", "imitating the mpc needs a serving env (the mpc plans in it)")):
                if getattr(self, key):
                    raise ValueError(f"config key {key!r} = {getattr(self, key)}: {what}")
            return TrainingEnv(env, params, None, np.zeros(len(env.action_space(params).nvec), np.int32))
        initial = wrappers.initial_action(env, params, self.initial_action) if self.default_logit > 0 else None
        warmup = wrappers.initial_action(env, params, "default")
        if self.history_windows:  # outermost: it changes the observation only, not the actions priors are in
            env = wrappers.ArrivalHistoryWrapper(env, self.history_windows, self.history_window_intervals)
        if self.forecast_intervals:
            env = wrappers.TrafficForecastWrapper(env, self.forecast_intervals)
        return TrainingEnv(env, params, initial, warmup, self._teacher(env, params))

    def _fleet(self, env: FleetEnv, params: Any) -> TrainingEnv:
        """A fleet as it is: the prior and the warm-up on its default configuration, [R, least-loaded]."""
        self._check_fleet(env.env_id)
        default = np.array([params.num_replicas, FLEET_DEFAULT_ROUTING], np.int32)
        teacher = None
        if self.imitation_episodes:
            from inferencegym_jax.fleet import baselines as fb

            chosen = fb.load_chosen(env.env_id)
            if self.imitation_teacher_choice == "lowest_cost" and self.imitation_teacher in chosen:
                chosen[self.imitation_teacher] = fb.lowest_cost_numbers(env.env_id, self.imitation_teacher)
            baselines = fb.make_controllers(params, chosen, fb.load_capacity(env.env_id))
            if self.imitation_teacher not in baselines:
                raise ValueError(f"config key 'imitation_teacher' = {self.imitation_teacher!r}: {env.env_id}'s "
                                 f"baselines file has none; allowed: {sorted(set(baselines) & set(FLEET_TEACHERS))}")
            policy = baselines[self.imitation_teacher]
            teacher = teachers.ControllerTeacher(env, params, self.imitation_episodes, policy)
        return TrainingEnv(env, params, default if self.default_logit > 0 else None, default, teacher)

    def _reservation(self, env: ReservationEnv, params: Any) -> TrainingEnv:
        """A reservation task as it is: no prior, warm-up nothing reserved, its baseline teacher."""
        self._check_as_is(env.env_id)
        teacher = None
        if self.imitation_episodes:
            from inferencegym_jax import evaluate
            from inferencegym_jax.fleet.reservation_baselines import reservation_baselines

            policy = reservation_baselines(env, params)[self.imitation_teacher]
            teacher = teachers.ControllerTeacher(env, params, self.imitation_episodes, evaluate.as_controller(policy))
        return TrainingEnv(env, params, None, np.zeros(len(env.action_space(params).nvec), np.int32), teacher)

    def _in_layout(self, env: Any) -> Any:
        """`env` in action_mode's layout: a plain serving env is wrapped, a wrapped one must match."""
        have = wrappers.action_mode_of(env)
        if have == self.action_mode:
            return env
        if have != wrappers.ABSOLUTE:
            raise ValueError(f"config key 'action_mode' = {self.action_mode!r}, but the env given is already in "
                             f"the {have!r} layout ({env!r})")
        if not is_serving_env(env):
            raise ValueError(f"action_mode={self.action_mode!r} needs an env whose observation has the knobs in "
                             "force (config)")
        return wrappers.wrap(env, self.action_mode)

    def _teacher(self, env: Any, params: Any) -> Teacher | None:
        """The imitation teacher in `env` (wrappers included); None without imitation_episodes."""
        if not self.imitation_episodes:
            return None
        if self.imitation_teacher == "switch_rule":
            return teachers.rule_teacher(env, params, env.env_id, self.imitation_episodes)
        return teachers.mpc_teacher(env, params, env.env_id, self.imitation_episodes, self.imitation_horizon,
                                    self.imitation_samples)


@dataclasses.dataclass(frozen=True)
class TrainingEnv:
    """What `ServingSetup.build` makes, the inputs of `training.make_train`.

    Attributes:
      env: the env PPO acts in (gymnax call shape; a wrapper for hold and relative layouts).
      params: its params.
      initial_action: int32 (K,) in env's action space, the action the initial policy favours
        by default_logit per knob; None: no prior.
      warmup_action: int32 (K,) in env's action space, the action desync_envs steps with.
      teacher: the teacher whose episodes PPO imitates first (`teachers`, with
        imitation_episodes); None: no imitation.
    """

    env: Any
    params: Any
    initial_action: np.ndarray | None
    warmup_action: np.ndarray
    teacher: Teacher | None = None


def is_serving_env(env: Any) -> bool:
    """Whether `env` (plain or wrapped) has the serving env's knobs in force, which the wrappers need."""
    return hasattr(env, "knobs_in_force")
