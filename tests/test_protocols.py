"""The env contracts of `inferencegym_jax.protocols`: the serving env, every wrapper and the
training probes meet them, by member (runtime_checkable) and by call shape (the arguments the
trainer, the wrappers and `evaluate` pass bind to each method). mypy checks the types of the
same members (scripts/run_tests.sh)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import pytest

import inferencegym_jax as ig
from inferencegym_jax import wrappers
from inferencegym_jax.protocols import Environment, ServingEnvironment
from training import probes

TASK = "InferenceGym-Task1-v0"

# The positional arguments each caller passes (keys, states, actions and params as placeholders).
CALLS: dict[str, int] = {
    "reset": 2,  # (key, params)
    "step": 4,  # (key, state, action, params)
    "observation_space": 1,  # (params)
    "action_space": 1,
    "flatten_observation": 2,  # (obs, params)
    "reset_env": 2,
    "step_env": 4,
    "get_obs": 2,  # (state, params)
    "flat_observation_space": 1,
    "knobs_in_force": 2,  # (state, params)
}
GYMNAX_CALLS = ("reset", "step", "observation_space", "action_space", "flatten_observation")


@functools.cache
def serving_envs() -> tuple[tuple[str, Any], ...]:
    """The serving env and each wrapper around it (and a stack of two)."""
    env, _ = ig.make(TASK)
    flat = wrappers.FlattenObservationWrapper(env)
    return (
        ("InferenceGymEnv", env),
        ("HoldActions", wrappers.HoldActions(env)),
        ("RelativeActions", wrappers.RelativeActions(env)),
        ("FlattenObservationWrapper", flat),
        ("ArrivalHistoryWrapper", wrappers.ArrivalHistoryWrapper(env)),
        ("TrafficForecastWrapper", wrappers.TrafficForecastWrapper(env)),
        ("JointDiscreteActionWrapper", wrappers.JointDiscreteActionWrapper(flat)),
        ("GymnaxEnv", wrappers.to_gymnax(env)[0]),
        ("History(RelativeActions)", wrappers.ArrivalHistoryWrapper(wrappers.RelativeActions(env))),
    )


def binds(env: Any, method: str, num_args: int) -> bool:
    """True when `env.method` accepts `num_args` positional arguments (and, for a method with a
    defaulted params, one fewer)."""
    signature = inspect.signature(getattr(env, method))
    try:
        signature.bind(*[None] * num_args)
    except TypeError:
        return False
    return True


def test_every_wrapper_is_listed():
    listed = {type(env) for _, env in serving_envs()}
    public = [getattr(wrappers, name) for name in wrappers.__all__]
    concrete = {c for c in public if isinstance(c, type) and issubclass(c, wrappers.Wrapper)}
    assert wrappers.FlattenObservationWrapper in concrete
    assert concrete - {wrappers.Wrapper, wrappers.KnobActions, wrappers.MemoryWrapper} <= listed


@pytest.mark.parametrize("name, env", serving_envs(), ids=[n for n, _ in serving_envs()])
def test_serving_env_and_wrappers_meet_the_serving_contract(name, env):
    assert isinstance(env, ServingEnvironment), name
    assert isinstance(env, Environment), name
    for method, num_args in CALLS.items():
        assert binds(env, method, num_args), f"{name}.{method} does not take {num_args} arguments"
    for method in ("reset", "step", "observation_space", "action_space", "flatten_observation"):
        assert binds(env, method, CALLS[method] - 1), f"{name}.{method}: params is not optional"


@pytest.mark.parametrize("probe", [probes.ConstantReward, probes.ObservationReward, probes.TwoStepDiscount,
                                   probes.ActionReward])
def test_training_probes_meet_the_trainer_contract(probe):
    env = probe()
    assert isinstance(env, Environment)
    for method in GYMNAX_CALLS:
        assert binds(env, method, CALLS[method]), f"{probe.__name__}.{method}"


def test_a_class_without_step_is_not_an_environment():
    class NoStep:
        default_params = None

        def reset(self, key, params=None):
            return None, None

        def observation_space(self, params=None):
            return None

        def action_space(self, params=None):
            return None

        def flatten_observation(self, obs, params=None):
            return obs

    assert not isinstance(NoStep(), Environment)
    NoStep.step = lambda self, key, state, action, params=None: None
    assert isinstance(NoStep(), Environment)
    assert not isinstance(NoStep(), ServingEnvironment)
    assert not binds(NoStep(), "flatten_observation", 3)
