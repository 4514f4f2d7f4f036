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
    with pytest.raises(ValueError, match=r"workload.base_rate=-1.0: must be a finite number in \[0.001, 10000\]"):
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


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("task, overrides, named", [
    (1, {"server": {"dt_s": INF}}, r"server.dt_s=inf: must be a finite number in \[0.01, 3600\] \[s\]"),
    (1, {"server": {"dt_s": 1e30}}, r"server.dt_s=1e\+30"),
    (1, {"server": {"max_batched_tokens": INF}}, "server.max_batched_tokens=inf"),
    (1, {"server": {"restart_s": INF}}, "server.restart_s=inf"),
    (1, {"server": {"prefill_start_s": INF}}, "server.prefill_start_s=inf"),
    (1, {"server": {"ttft_slo_s": [INF] * 3}}, "server.ttft_slo_s"),
    (1, {"server": {"ttft_slo_s": [1.0, 2.0]}}, r"server.ttft_slo_s=\[1.0, 2.0\]: must be a list of 3"),
    (1, {"server": {"memory_limit_gb": -1}}, r"server.memory_limit_gb=-1: .*\[GB\]"),
    (1, {"server": {"num_age_buckets": 2**31}}, r"server.num_age_buckets=2147483648: must be an integer in \[2, 1024"),
    (1, {"max_steps": 2**31}, r"max_steps=2147483648: must be an integer in \[1, 1000000\]"),
    (1, {"workload": {"base_rate": INF}}, "workload.base_rate=inf"),
    (1, {"workload": {"base_rate": 0}}, r"workload.base_rate=0: must be a finite number in \[0.001, 10000\]"),
    (1, {"workload": {"base_rate": "a"}}, "workload.base_rate='a': must be a finite number"),
    (1, {"workload": {"output": {"high": INF}}}, "workload.output.high=inf"),
    (1, {"workload": {"schedule": "trace"}}, "workload.base_rate' is not used by workload.schedule='trace'"),
    (1, {"workload": {"class_mix": [0.5, 0.5, 0.5]}}, "workload.class_mix.*must sum to 1"),
    (1, {"reward": {"weights": [1, 1, NAN, 1, 1]}}, "reward.weights"),
    (1, {"reward": {"cost_budget_per_1k": INF}}, "reward.cost_budget_per_1k=inf"),
    (3, {"workload": {"burst_multiplier": INF}}, "workload.burst_multiplier=inf"),
    (3, {"workload": {"burst_period_s": INF}}, "workload.burst_period_s=inf"),
    (3, {"workload": {"burst_duration_s": INF}}, "workload.burst_duration_s=inf"),
    (3, {"workload": {"prompt": {"high": INF}}}, r"workload.prompt.high=inf: must be a finite number in \[1, 131072\] "
                                                 r"\[tokens\]"),
    (3, {"workload": {"prompt": {"median1": 1e30}}}, r"workload.prompt.median1=1e\+30"),
    (3, {"workload": {"prompt": {"sigma1": 6.5}}}, r"workload.prompt.sigma1=6.5: must be a finite number in \[0.01, 3"),
    (3, {"workload": {"prompt": {"sigma2": 7}}}, "workload.prompt.sigma2=7"),
    (3, {"workload": {"output": {"median1": 1e30}}}, "workload.output.median1"),
])
def test_bad_task_values_name_the_key_the_user_typed(task, overrides, named):
    """Every value outside the range in which the physics stays finite is refused, and the
    message names the key as the user typed it (not a derived quantity)."""
    with pytest.raises(ValueError, match=named):
        ig.make(f"InferenceGym-Task{task}-v0", **overrides)


def _replace(params, path, value):
    """params with the leaf at a dotted path replaced."""
    head, _, rest = path.partition(".")
    if not rest:
        return params.replace(**{head: value})
    return params.replace(**{head: _replace(getattr(params, head), rest, value)})


@pytest.mark.parametrize("path, value, named", [
    ("server.dt_s", np.float32(NAN), r"params.server.dt_s=nan: must be a finite number in \[0.01, 3600\]"),
    ("server.memory_limit_bytes", np.float32(-1.0), r"params.server.memory_limit_bytes=-1.0: .* \[B\]"),
    ("server.ttft_slo_s", np.ones(2, np.float32), r"params.server.ttft_slo_s has shape \(2,\), expected \(3,\)"),
    ("server.profiles.price_per_hour", np.full(3, NAN, np.float32), "params.server.profiles.price_per_hour"),
    ("server.profiles.mem_bw", np.ones(2, np.float32), "params.server.profiles.mem_bw has shape"),
    ("workload.base_rate", np.float32(NAN), "params.workload.base_rate=nan"),
    ("workload.class_mix", np.full(4, 0.25, np.float32), r"params.workload.class_mix has shape \(4,\)"),
    ("workload.prompt.sigma1", np.full(3, NAN, np.float32), "params.workload.prompt.sigma1"),
    ("reward.throughput_ref", np.float32(NAN), "params.reward.throughput_ref=nan"),
    ("default_action.spec_length", np.float32(NAN), "params.default_action.spec_length=nan"),
    ("max_steps_in_episode", np.float32(200.0), "params.max_steps_in_episode must have an integer dtype"),
    ("max_steps_in_episode", np.int32(0), r"params.max_steps_in_episode=0: must be an integer in \[1, 1000000\]"),
    ("server.dt_s", "fast", "params.server.dt_s must be a numeric array"),
])
def test_hand_built_params_are_checked_leaf_by_leaf_in_reset_and_step(task1, path, value, named):
    env, params, state = task1
    bad = _replace(params, path, value)
    action = jnp.zeros(5, jnp.int32)
    with pytest.raises(ValueError, match=named):
        env.reset(jax.random.key(0), bad)
    with pytest.raises(ValueError, match=named):
        env.step(jax.random.key(0), state, action, bad)


def test_params_that_are_not_env_params_are_refused(task1):
    env, params, state = task1
    with pytest.raises(ValueError, match="params must be an env.EnvParams.*got dict"):
        env.step(jax.random.key(0), state, jnp.zeros(5, jnp.int32), {"server": params.server})
    with pytest.raises(ValueError, match="params.server.dt_s: missing"):
        env.reset(jax.random.key(0), params.replace(server={"dt_s": 1.0}))


@pytest.mark.parametrize("key, what", [
    (7, "got 7"),
    (None, "got None"),
    (np.zeros(2, np.float32), r"got float32 array of shape \(2,\)"),
    (np.zeros(2, np.int32), r"got int32 array of shape \(2,\)"),
    (np.zeros(3, np.uint32), r"got uint32 array of shape \(3,\)"),
    (jax.random.split(jax.random.key(0), 4), r"a batch of keys of shape \(4,\): vmap over them"),
    (jax.random.split(jax.random.PRNGKey(0), 4), r"a batch of legacy keys of shape \(4, 2\): vmap over them"),
])
def test_keys_of_the_wrong_kind_get_one_message_saying_what_is_accepted(task1, key, what):
    env, params, state = task1
    accepted = r"key must be a jax.random.key\(seed\) or a legacy jax.random.PRNGKey\(seed\)"
    with pytest.raises(ValueError, match=f"{accepted}.*{what}"):
        env.reset(key, params)
    with pytest.raises(ValueError, match=f"{accepted}.*{what}"):
        env.step(key, state, jnp.zeros(5, jnp.int32), params)


def test_legacy_and_new_style_keys_of_a_seed_give_the_same_episode(task1):
    """Every draw of reset and step comes from `sampling.uniforms(key)`: the two spellings of a
    seed give the same uniforms, hence the same episode."""
    from inferencegym_jax import env as env_module
    from inferencegym_jax.traffic import sampling

    env, params, _ = task1
    for seed in (0, 7, 2**32 - 1):
        legacy, typed = jax.random.PRNGKey(seed), jax.random.key(seed)
        chex.assert_trees_all_equal(sampling.uniforms(legacy, env_module.DRAWS_PER_STEP),
                                    sampling.uniforms(typed, env_module.DRAWS_PER_STEP))
        chex.assert_trees_all_equal(env.reset(legacy, params), env.reset(typed, params))


def test_nan_on_a_masked_knob_is_reported_as_clipped():
    env, params = ig.make("InferenceGym-Task1-v0")
    masked = [i for i, active in enumerate(params.active_knobs) if not active]
    assert masked, "task 1 masks some knobs"
    _, state = env.reset(jax.random.key(0), params)
    values = np.array(params.default_action.as_vector())
    values[masked[0]] = np.nan
    action = ig.ServingAction(*[jnp.float32(v) for v in values])
    *_, info = jax.jit(env.step)(jax.random.key(1), state, action, params)
    assert info["clipped"].tolist() == [i == masked[0] for i in range(5)]
    chex.assert_trees_all_close(info["applied_action"], params.default_action)


def test_structured_action_with_a_missing_value_names_the_knob(task1):
    env, params, state = task1
    action = ig.ServingAction(kv_budget=None, spec_length=0.0, batch_size=32.0, prefill_disagg=0.0, quant_tier=0.0)
    with pytest.raises(ValueError, match="action.kv_budget must be a real number, got None"):
        env.step(jax.random.key(0), state, action, params)
