"""The performance model and the serving dynamics obey the physics they claim to."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rollout

import inferencegym_jax as ig
from inferencegym_jax import perf_model
from inferencegym_jax.profiles import GPUS, MODELS, PRECISIONS

A100 = perf_model.get_profile("a100-80gb")
H100 = perf_model.get_profile("h100-sxm")


def test_get_profile_rejects_unknown_names():
    for kwargs, field in (({"gpu": "v100"}, "gpu"), ({"quant": "fp4"}, "quant"), ({"model": "gpt-5"}, "model")):
        with pytest.raises(ValueError, match=field):
            perf_model.get_profile(**kwargs)


def test_profiles_are_vmappable_pytrees():
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), A100, H100)
    t = jax.vmap(perf_model.decode_step_time, in_axes=(0, None, None))(stacked, 8, 512)
    assert t.shape == (2,) and t.dtype == jnp.float32
    assert float(t[1]) < float(t[0])


def test_kv_capacity_matches_design_anchor():
    # docs/DESIGN.md: BF16 on 80 GB, about 46 k tokens at kv_budget 0.1 and 465 k at 1.0.
    assert abs(float(perf_model.kv_capacity_tokens(A100, 1.0)) - 465e3) / 465e3 < 0.01
    assert abs(float(perf_model.kv_capacity_tokens(A100, 0.1)) - 46.5e3) / 46.5e3 < 0.01
    int4 = perf_model.get_profile(quant="int4")
    assert float(perf_model.kv_capacity_tokens(int4, 1.0)) > float(perf_model.kv_capacity_tokens(A100, 1.0))


def test_more_batch_more_throughput_until_bound():
    batches = jnp.asarray([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], jnp.float32)
    step = jax.vmap(perf_model.decode_step_time, in_axes=(None, 0, None))(A100, batches, 512.0)
    throughput = np.asarray(batches / step)
    assert np.all(np.diff(throughput) > 0)
    # ... but with diminishing returns once compute-bound: the last doubling gains < 40 %
    assert throughput[-1] / throughput[-2] < 1.4
    assert np.all(np.diff(np.asarray(step)) > 0)  # and each step takes longer


def test_int4_decodes_faster_than_fp16_at_batch_one_but_not_when_compute_bound():
    int4 = perf_model.get_profile(quant="int4")
    fp16_1, int4_1 = float(perf_model.decode_step_time(A100, 1, 512)), float(perf_model.decode_step_time(int4, 1, 512))
    assert fp16_1 / int4_1 > 2.0
    fp16_big = float(perf_model.prefill_time(A100, 8192))
    int4_big = float(perf_model.prefill_time(int4, 8192))
    assert int4_big >= fp16_big  # dequantisation penalty once compute-bound


def test_h100_faster_than_a100():
    for fn, args in ((perf_model.decode_step_time, (1, 512)), (perf_model.decode_step_time, (256, 1024)),
                     (perf_model.prefill_time, (4096,))):
        assert float(fn(H100, *args)) < float(fn(A100, *args))


def test_speculation_gains_at_small_batch_and_loses_at_large_batch():
    def per_token(batch, k):
        return float(perf_model.decode_step_time(A100, batch, 512, k) / perf_model.tokens_per_step(A100, k))

    assert per_token(1, 4) < per_token(1, 0)
    assert per_token(512, 4) > per_token(512, 0)
    assert float(perf_model.tokens_per_step(A100, 0)) == 1.0
    np.testing.assert_allclose(float(perf_model.tokens_per_step(A100, 4)), 2.39, rtol=1e-6)


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
@pytest.mark.parametrize("quant", ["fp16", "int8", "int4"])
def test_times_never_below_the_peak_roofline_floor(gpu, quant):
    profile = perf_model.get_profile(gpu, quant=quant)
    g, m, q = GPUS[gpu], MODELS["llama-3-8b"], PRECISIONS[quant]
    peak_flops = g.peak_flops_8bit if (q.uses_8bit_compute and g.peak_flops_8bit > 0) else g.peak_flops_bf16
    weight_read = q.bytes_per_weight * m.params_linear + 2 * m.params_lm_head
    for batch in (1, 8, 64, 512):
        for ctx in (128, 2048):
            t = float(perf_model.decode_step_time(profile, batch, ctx))
            floor_mem = (weight_read + batch * ctx * m.kv_bytes_per_token) / g.peak_hbm_bw
            floor_flops = 2 * (m.params_linear + m.params_lm_head) * batch / peak_flops
            assert t >= max(floor_mem, floor_flops)
    for n in (1, 512, 8192):
        t = float(perf_model.prefill_time(profile, n))
        floor = max(2 * m.params_linear * n / peak_flops, weight_read / g.peak_hbm_bw)
        assert t >= floor
    assert float(perf_model.prefill_time(profile, 0)) == 0.0


def test_memory_accounting_is_exact():
    env, params = ig.make("InferenceGym-Task1-v0")
    action = jnp.asarray([4, 0, 9, 0, 0], jnp.int32)
    state, (_, _, _, _, info, _) = rollout(env, params, jax.random.key(0), lambda t: action, 30)
    # the last state's KV tokens give exactly the reported memory (FP16 profile, tier 0)
    profile = jax.tree_util.tree_map(lambda x: x[0], params.server.profiles)
    expected = profile.weight_bytes + state.server.running.context * profile.kv_bytes_per_token + profile.reserve_bytes
    np.testing.assert_allclose(float(info["metrics"].gpu_memory_bytes[-1]), float(expected), rtol=1e-6)
    cap = float(info["metrics"].kv_capacity_tokens[-1])
    np.testing.assert_allclose(cap, float(perf_model.kv_capacity_tokens(profile, 0.5)), rtol=1e-6)
    assert float(state.server.running.context) <= cap * (1 + 1e-5)


@functools.partial(jax.jit, static_argnames=("env", "steps"))
def _fixed_action_rollout(env, params, action, key, steps):
    """One program per env (equal envs compare equal) and horizon, whatever the action."""
    return rollout(env, params, key, lambda t: action, steps)


def _episode_means(env_id, action, steps=120, **overrides):
    env, params = ig.make(env_id, **overrides)
    action = jnp.asarray(action, jnp.int32)
    _, (_, reward, _, _, info, _) = _fixed_action_rollout(env, params, action, jax.random.key(1), steps)
    m = info["metrics"]
    fields = ("tokens_per_s", "evictions", "completed", "queue_depth", "tpot_s", "ttft_p50_s")
    return {k: float(np.mean(np.asarray(getattr(m, k)))) for k in fields}


def test_more_batch_serves_more_under_overload():
    overload = {"base_rate": 15.0}  # twice what batch 32 serves
    low = _episode_means("InferenceGym-Task1-v0", [9, 0, 5, 0, 0], workload=overload)  # batch 32
    high = _episode_means("InferenceGym-Task1-v0", [9, 0, 9, 0, 0], workload=overload)  # batch 192
    assert high["tokens_per_s"] > 1.5 * low["tokens_per_s"]
    assert high["queue_depth"] < low["queue_depth"] and high["ttft_p50_s"] < low["ttft_p50_s"]
    assert high["tpot_s"] > low["tpot_s"]  # the price: each token takes longer


def test_more_kv_budget_never_more_evictions():
    """At a fixed batch cap, a larger KV cache never preempts a request more often, and never
    once the batch fits.

    Long outputs make contexts grow faster than completions free KV, so a small cache preempts.
    The count per interval is not monotone: a larger cache that is still too small admits more
    sequences, and more of them grow past it; the preemptions per completed request fall.
    """
    long_outputs = {"output": {"kind": "uniform", "low": 1024, "high": 2048}, "base_rate": 8.0}
    means = [_episode_means("InferenceGym-Task1-v0", [kv, 0, 8, 0, 0], workload=long_outputs) for kv in (0, 1, 2, 3, 9)]
    evictions = [m["evictions"] / m["completed"] for m in means]
    assert evictions[0] > 0, "a 0.1 budget with batch 128 and long outputs must preempt"
    assert all(a >= b for a, b in zip(evictions, evictions[1:]))
    assert evictions[-1] == 0.0


def test_hardware_is_a_config_and_h100_serves_more():
    overload = {"base_rate": 15.0}  # more than either GPU serves at batch 32
    a100 = _episode_means("InferenceGym-Task1-v0", [9, 0, 5, 0, 0], workload=overload)
    h100 = _episode_means("InferenceGym-Task1-v0", [9, 0, 5, 0, 0], gpu="h100-sxm", workload=overload)
    assert h100["tokens_per_s"] > 1.2 * a100["tokens_per_s"]
