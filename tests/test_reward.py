"""The reward's two kinds (inferencegym_jax.reward): per-interval rates (v0) and the grade's
increments (v1), whose episode sums are the grader's sums."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax.traffic import workload

STEPS = 60  # [intervals]: a burst of task 2 (every 60 s) and the queues it leaves


def test_every_v1_and_v2_task_rewards_increments_with_its_graders_weights_and_every_v0_task_rates():
    for env_id in ig.registered_envs():
        _, params = ig.make(env_id)
        assert params.reward.kind == ("rates" if env_id.endswith("-v0") else "increments"), env_id
    weights = {"throughput": [1, 0, 0, 0, 0], "ttft_memory": [0, 0, 1, 0, 0], "multi_tenant": [0.4, 0, 0.3, 0.2, 0.1]}
    for env_id in (f"InferenceGym-Task{n}-v{k}" for n in (1, 2, 3, 4) for k in (1, 2)):
        _, params = ig.make(env_id)
        np.testing.assert_allclose(params.reward.weights, weights[graders.grader_name(env_id)], err_msg=env_id)


def test_increments_add_up_to_the_graders_episode_sums():
    """An episode's V and T terms are the grader's sums: sum_t V = T - requests within their
    SLOs / mean requests per interval, sum_t T = quality-weighted goodput / mean offered tokens
    (task 2-v1: bursts, completion accounting; the reference test covers the other v1 paths)."""
    env, params = ig.make("InferenceGym-Task2-v1")
    policies = [baselines.fixed_default_policy(), baselines.random_policy(env)]
    for policy in policies:
        traj = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(3), 8, num_steps=STEPS)
        comps = {k: np.asarray(v, np.float64).sum(axis=1) for k, v in traj.reward_components.items()}
        for i in range(8):
            one = jax.tree_util.tree_map(lambda x, i=i: x[i], traj)
            sums = {k: float(v) for k, v in graders.episode_sums(one, params).items()}
            met = sums["decided"] - sums["violations"]
            requests_ref = float(params.reward.requests_ref)
            np.testing.assert_allclose(comps["violations"][i], STEPS - met / requests_ref, rtol=1e-4, atol=1e-3)
            offered_ref = float(params.reward.throughput_ref * params.server.dt_s)
            np.testing.assert_allclose(comps["throughput"][i], sums["good"] / offered_ref, rtol=1e-4, atol=1e-3)


def test_increments_are_scaled_by_the_peak_so_a_burst_interval_is_weighed_not_clipped():
    _, params = ig.make("InferenceGym-Task2-v1")  # 2.5 req/s, bursts of 8x for 10 s of every 60 s
    mean = float(workload.mean_rate(params.workload))
    assert mean == pytest.approx(2.5 * (1 + 10 / 60 * 7))
    assert float(params.reward.peak_ratio) == pytest.approx(20.0 / mean)
    assert float(params.reward.requests_ref) == pytest.approx(mean * 1.0)
    env, params = ig.make("InferenceGym-Task2-v1")
    traj = evaluate.run_episodes(env, params, baselines.fixed_default_policy(), evaluate.evaluation_key(0), 8,
                                 num_steps=STEPS)
    reward = np.asarray(traj.reward)
    assert np.isfinite(reward).all() and reward.min() >= -1.0 and reward.max() <= 1.0
    assert np.mean(np.abs(reward) >= 1.0) < 0.05, "the clip binds in few intervals"


def test_a_replayed_traces_peak_is_its_busiest_minute():
    _, params = ig.make("InferenceGym-Task4-v1")
    arrivals = np.asarray(params.workload.trace.arrival_s[:, 1:]).ravel()
    arrivals = np.sort(arrivals[np.isfinite(arrivals)])
    busiest = max(np.searchsorted(arrivals, a + workload.PEAK_WINDOW_S) - i for i, a in enumerate(arrivals))
    assert float(workload.peak_rate(params.workload)) == pytest.approx(busiest / workload.PEAK_WINDOW_S)
    assert 1.5 < float(params.reward.peak_ratio) < 4.0, "the Azure load curve's peak-to-mean"


def test_rates_are_unchanged_on_the_v0_tasks():
    """The v0 reward is the interval's violation rate and clipped terms (golden files pin its bits)."""
    env, params = ig.make("InferenceGym-Task2-v0")
    traj = evaluate.run_episodes(env, params, baselines.fixed_default_policy(), evaluate.evaluation_key(0), 8,
                                 num_steps=STEPS)
    m, comps = traj.metrics, traj.reward_components
    np.testing.assert_array_equal(comps["violations"], m.slo_violation_rate)
    assert float(jnp.max(comps["throughput"])) <= 2.0
