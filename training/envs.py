"""What a PPOConfig trains on: the env in the action layout `config.action_mode` names, and its priors.

`training.ppo.Trainer` knows nothing of the serving env: it trains any env with the gymnax call
shape, optionally with a prior on one action. This module turns a config into those inputs:

* the env: `ig.make(config.task)` (or a given env), wrapped by `inferencegym_jax.wrappers` for
  action_mode 'hold' or 'relative' (a plain serving env is the 'absolute' layout) and, with
  `config.history_windows`, by `ArrivalHistoryWrapper` outside that and, with
  `config.forecast_intervals`, by `TrafficForecastWrapper` outside that;
* the initial action (`config.initial_action`, when `config.default_logit > 0`) the initial
  policy favours, in the wrapped env's action space (`wrappers.initial_action`);
* the warm-up action `desync_envs` steps the envs with: the task default ('default');
* with `config.imitation_episodes`, the causal MPC teacher whose episodes the policy is fitted
  to before PPO (`training.imitation`).

An env that is not a serving env (the probes of `training.probes`) is trained as is: absolute
layout only, no prior, warm-up action all zeros.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from inferencegym_jax import wrappers
from training.config import PPOConfig
from training.imitation import MPCTeacher, RuleTeacher


@dataclasses.dataclass(frozen=True)
class TrainingEnv:
    """Attributes:
      env: the env PPO acts in (gymnax call shape; a wrapper for hold and relative layouts).
      params: its params.
      initial_action: int32 (K,) in env's action space, the action the initial policy favours
        by config.default_logit per knob; None: no prior.
      warmup_action: int32 (K,) in env's action space, the action desync_envs steps with.
      teacher: the causal MPC whose episodes PPO imitates first (`imitation.MPCTeacher`, with
        config.imitation_episodes); None: no imitation.
    """

    env: Any
    params: Any
    initial_action: np.ndarray | None
    warmup_action: np.ndarray
    teacher: MPCTeacher | None = None


def is_serving_env(env: Any) -> bool:
    """Whether `env` (plain or wrapped) has the serving env's knobs in force, which the wrappers need."""
    return hasattr(env, "knobs_in_force")


def _in_layout(config: PPOConfig, env: Any) -> Any:
    """`env` in config.action_mode's layout: a plain serving env is wrapped, a wrapped one must match."""
    have = wrappers.action_mode_of(env)
    if have == config.action_mode:
        return env
    if have != wrappers.ABSOLUTE:
        raise ValueError(f"config key 'action_mode' = {config.action_mode!r}, but the env given is already in "
                         f"the {have!r} layout ({env!r})")
    if not is_serving_env(env):
        raise ValueError(f"action_mode={config.action_mode!r} needs an env whose observation has the knobs in "
                         "force (config)")
    return wrappers.wrap(env, config.action_mode)


def training_env(config: PPOConfig, env: Any = None, env_params: Any = None) -> TrainingEnv:
    """The env, params and actions PPO trains `config` with.

    Args:
      env: None: `ig.make(config.task)`; else this env (a serving env, plain or wrapped, or any
        env with the call shape, trained in the absolute layout).
      env_params: None: the env's default params.

    Raises:
      ValueError: an action_mode the env cannot have, or an initial_action it has no value for.
    """
    if env is None:
        import inferencegym_jax as ig

        env, default_params = ig.make(config.task)
    else:
        default_params = env.default_params
    params = default_params if env_params is None else env_params
    if wrappers.is_memory_wrapper(env):
        raise ValueError(f"the env given keeps a memory of past intervals already ({env!r}): pass the env under it, "
                         "and set config keys 'history_windows' or 'forecast_intervals' to add one")
    env = _in_layout(config, env)
    if not is_serving_env(env):
        for key, what in (("history_windows", "the arrival history needs a serving env (its arrivals)"),
                          ("forecast_intervals", "the traffic forecast needs a serving env (its arrivals)"),
                          ("imitation_episodes", "imitating the mpc needs a serving env (the mpc plans in it)")):
            if getattr(config, key):
                raise ValueError(f"config key {key!r} = {getattr(config, key)}: {what}")
        return TrainingEnv(env, params, None, np.zeros(len(env.action_space(params).nvec), np.int32))
    initial = wrappers.initial_action(env, params, config.initial_action) if config.default_logit > 0 else None
    warmup = wrappers.initial_action(env, params, "default")
    if config.history_windows:  # outermost: it changes the observation only, not the actions priors are in
        env = wrappers.ArrivalHistoryWrapper(env, config.history_windows, config.history_window_intervals)
    if config.forecast_intervals:
        env = wrappers.TrafficForecastWrapper(env, config.forecast_intervals)
    teacher = None
    if config.imitation_episodes and config.imitation_teacher == "switch_rule":
        teacher = RuleTeacher.build(env, params, env.env_id, config.imitation_episodes)
    elif config.imitation_episodes:
        teacher = MPCTeacher.build(env, params, env.env_id, config.imitation_episodes, config.imitation_horizon,
                                   config.imitation_samples)
    return TrainingEnv(env, params, initial, warmup, teacher)
