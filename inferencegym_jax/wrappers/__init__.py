"""Wrappers for the serving env, gymnax-wrapper style: the same env in other spaces.

| wrapper                      | observation                  | action                                     |
|------------------------------|------------------------------|--------------------------------------------|
| HoldActions / RelativeActions| unchanged                    | MultiDiscrete, relative to the knobs in force |
| FlattenObservationWrapper    | float32 (OBS_SIZE,) in [0, 1]| unchanged                                  |
| ArrivalHistoryWrapper        | flat + arrivals per window   | unchanged (a stateful policy: no inner one) |
| TrafficForecastWrapper       | flat + P(burst) ahead        | unchanged (a stateful policy: no inner one) |
| JointDiscreteActionWrapper   | unchanged                    | Discrete(prod(nvec)), one joint action     |
| `to_gymnax(env, params)`     | flat, gymnax Box             | joint, gymnax Discrete; optional 5-value step |

Every wrapper is a `Wrapper` (base): it holds `env`, passes what it does not change through,
is jittable and vmappable like the env (its spaces and static settings are Python values, the
rest pure functions of arrays), compares equal by value, and turns a policy of its spaces into
one of the env it wraps (`inner_policy`), so `base_action_policy(env, policy)` runs any wrapped
policy on the serving env, as `evaluate` and the graders need.
"""

from inferencegym_jax.wrappers.base import (
    ABSOLUTE,
    StepResult,
    Wrapper,
    action_mode_of,
    base_action_policy,
    flag_clipped,
)
from inferencegym_jax.wrappers.flatten import FlattenObservationWrapper
from inferencegym_jax.wrappers.forecast import ForecastState, TrafficForecastWrapper
from inferencegym_jax.wrappers.gymnax_compat import GymnaxEnv, to_gymnax
from inferencegym_jax.wrappers.history import ArrivalHistoryWrapper, HistoryState
from inferencegym_jax.wrappers.joint_discrete import JointDiscreteActionWrapper
from inferencegym_jax.wrappers.knob_actions import (
    ACTION_MODES,
    HOLD,
    INITIAL_ACTIONS,
    RELATIVE,
    WRAPPERS,
    HoldActions,
    KnobActions,
    RelativeActions,
    initial_action,
    wrap,
)
from inferencegym_jax.wrappers.memory import MemoryWrapper, is_memory_wrapper

__all__ = [
    "ABSOLUTE",
    "ACTION_MODES",
    "ArrivalHistoryWrapper",
    "HOLD",
    "INITIAL_ACTIONS",
    "RELATIVE",
    "WRAPPERS",
    "FlattenObservationWrapper",
    "ForecastState",
    "GymnaxEnv",
    "HistoryState",
    "HoldActions",
    "JointDiscreteActionWrapper",
    "KnobActions",
    "MemoryWrapper",
    "RelativeActions",
    "StepResult",
    "TrafficForecastWrapper",
    "Wrapper",
    "action_mode_of",
    "base_action_policy",
    "flag_clipped",
    "initial_action",
    "is_memory_wrapper",
    "to_gymnax",
    "wrap",
]
