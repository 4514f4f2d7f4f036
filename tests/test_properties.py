"""Property tests (hypothesis): random valid configs give finite, bounded episodes; random
invalid values give a ValueError naming the field, never another exception.

Valid configs redraw every numeric field of a task file inside its range
(`inferencegym_jax.testing.random_configs`); the ranges promise finite physics anywhere in them.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers import PHYSICS_TASK_IDS, physics_task_params
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import inferencegym_jax as ig
from inferencegym_jax.testing import fuzz, random_configs
from inferencegym_jax.validation import Spec

STEPS, ENVS = 24, 4
# No shrinking: each example is an env episode, and the report of a failure shows every draw.
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _number(spec: Spec) -> st.SearchStrategy[float]:
    return st.floats(spec.low, spec.high, exclude_min=spec.low_open, allow_nan=False, allow_infinity=False)


def hypothesis_draw(data: st.DataObject) -> random_configs.Draw:
    """A random_configs.Draw from hypothesis: bounds and tiny values come up by design."""

    def draw(spec: Spec, key: str) -> Any:
        if spec.kind == "integer":
            return data.draw(st.integers(int(spec.low), int(spec.high)), label=key)
        if spec.kind == "vector":
            return data.draw(st.lists(_number(spec), min_size=spec.length, max_size=spec.length), label=key)
        return data.draw(_number(spec), label=key)

    return draw


_PROGRAMS: dict[str, Any] = {}


def episode_program(env_id: str) -> Any:
    """jit(params) -> per-step outputs of ENVS envs under random grid actions (masked knobs too);
    one compilation per task, whatever the params' values."""
    if env_id not in _PROGRAMS:
        env, _ = ig.make(env_id)

        def one(key: jax.Array, params: Any) -> Any:
            _, state = env.reset(key, params)

            def body(state: Any, k: jax.Array) -> tuple[Any, Any]:
                k_act, k_env = jax.random.split(k)
                action = jax.random.randint(k_act, (5,), 0, jnp.asarray(ig.actions.GRID_SIZES))
                _, state, reward, _, _, info = env.step(k_env, state, action, params)
                flat = env.flatten_observation(info["final_observation"], params)
                return state, (flat, reward, info["metrics"], state.server.running.context)

            return jax.lax.scan(body, state, jax.random.split(jax.random.fold_in(key, 1), STEPS))

        keys = jax.random.split(jax.random.key(0), ENVS)
        _PROGRAMS[env_id] = jax.jit(lambda p: jax.vmap(one, (0, None))(keys, p))
    return _PROGRAMS[env_id]


@pytest.mark.parametrize("env_id", physics_task_params())
@SETTINGS
@given(data=st.data())
def test_valid_configs_give_finite_bounded_episodes(env_id, data):
    overrides = random_configs.random_overrides(env_id, hypothesis_draw(data))
    _, params = ig.make(env_id, **overrides)
    state, (flat, reward, metrics, context) = episode_program(env_id)(params)
    # [non-finite, reward outside [-1, 1], flat obs outside [0, 1], KV over capacity] (the fuzz's counters)
    assert fuzz.violations(flat, reward, context, metrics, state).tolist() == [0, 0, 0, 0], overrides


def _fields() -> list[tuple[str, str, Spec]]:
    return [(env_id, key, spec) for env_id in PHYSICS_TASK_IDS
            for key, spec in random_configs.numeric_fields(env_id, static=True)]


@settings(max_examples=150, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
def test_invalid_values_are_a_value_error_naming_the_field(data):
    env_id, key, spec = data.draw(st.sampled_from(_fields()), label="field")
    value = data.draw(st.sampled_from(random_configs.invalid_values(spec)), label="value")
    with pytest.raises(ValueError) as err:
        ig.make(env_id, **random_configs.set_key({}, key, value))
    assert key in str(err.value), (key, value, str(err.value))


def test_invalid_values_cover_every_kind_of_field():
    kinds = {spec.kind for _, _, spec in _fields()}
    assert kinds == {"number", "integer", "vector"}
    assert all(any(isinstance(v, float) and math.isnan(v) for v in random_configs.invalid_values(s))
               for _, _, s in _fields() if s.kind == "number")
