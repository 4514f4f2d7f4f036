"""Bad input raises a clear ValueError outside jit; inside jit actions are clipped, never NaN."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig


@pytest.fixture(scope="module")
def task1():
    env, params = ig.make("InferenceGym-Task1-v0")
    _, state = env.reset(jax.random.key(0), params)
    return env, params, state


def test_unknown_env_id_lists_registered_ids():
    with pytest.raises(ValueError, match="InferenceGym-Task1-v0"):
        ig.make("InferenceGym-Task9-v0")


def test_negative_arrival_rate():
    with pytest.raises(ValueError, match=r"workload.base_rate=-1.0: must be a finite number in \(0, 10000\] \[req/s\]"):
        ig.make("InferenceGym-Task1-v0", workload={"base_rate": -1.0})


def test_unknown_and_mistyped_config_keys():
    with pytest.raises(ValueError, match="bogus"):
        ig.make("InferenceGym-Task1-v0", bogus=1)
    with pytest.raises(ValueError, match="server.dt_s"):
        ig.make("InferenceGym-Task1-v0", server={"dt_s": "fast"})
    with pytest.raises(ValueError, match="gpu"):
        ig.make("InferenceGym-Task1-v0", gpu="tpu-v5")


def test_default_kv_budget_outside_range():
    with pytest.raises(ValueError, match=r"kv_budget.*\[0.1, 1"):
        ig.make("InferenceGym-Task1-v0", default_action={"kv_budget": 1.5})


def test_params_with_bad_values_rejected_at_reset(task1):
    env, params, _ = task1
    bad = params.replace(workload=params.workload.replace(base_rate=jnp.float32(-3.0)))
    with pytest.raises(ValueError, match="base_rate"):
        env.reset(jax.random.key(0), bad)


@pytest.mark.parametrize(
    "action, match",
    [
        (jnp.zeros((4,), jnp.int32), r"shape \(5,\)"),
        (jnp.zeros((5,), jnp.float32), "integer dtype"),
        (jnp.asarray([10, 0, 0, 0, 0], jnp.int32), r"kv_budget.*\[0, 9\]"),
        (jnp.asarray([0, 0, -1, 0, 0], jnp.int32), r"batch_size.*\[0, 12\]"),
    ],
)
def test_bad_index_actions(task1, action, match):
    env, params, state = task1
    with pytest.raises(ValueError, match=match):
        env.step(jax.random.key(0), state, action, params)


def test_structured_action_out_of_range(task1):
    env, params, state = task1
    action = ig.ServingAction(kv_budget=1.7, spec_length=0.0, batch_size=32.0, prefill_disagg=0.0, quant_tier=0.0)
    with pytest.raises(ValueError, match=r"kv_budget=1.7.*\[0.1, 1.0\]"):
        env.step(jax.random.key(0), state, action, params)


def test_inside_jit_actions_are_clipped_and_nan_never_propagates():
    env, params = ig.make("InferenceGym-Task3-v0")
    step = jax.jit(env.step)
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    nan_action = ig.ServingAction(*[jnp.float32(v) for v in (np.nan, 100.0, -5.0, np.inf, 7.0)])
    _, state, reward, _, _, info = step(key, state, nan_action, params)
    chex.assert_tree_all_finite((state, reward, info["metrics"]))
    assert info["clipped"].tolist() == [True, True, True, True, True]
    applied = info["applied_action"]
    assert float(applied.kv_budget) == 1.0  # NaN -> the task default
    assert float(applied.spec_length) == 8.0 and float(applied.batch_size) == 1.0 and float(applied.quant_tier) == 2.0
    bad_index = jnp.asarray([99, -3, 40, 5, 9], jnp.int32)
    _, state, reward, _, _, info = step(key, state, bad_index, params)
    chex.assert_tree_all_finite((state, reward))
    assert info["clipped"].tolist() == [True, True, True, True, True]
    assert float(info["applied_action"].batch_size) == 512.0
