"""TrafficForecastWrapper and traffic_belief.forecast: the burst forecast a causal policy may see."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import default_action_episode  # tests/, which conftest puts on sys.path

import inferencegym_jax as ig
from inferencegym_jax import wrappers
from inferencegym_jax.control import traffic_belief
from inferencegym_jax.observation import OBS_SIZE
from inferencegym_jax.traffic import workload

PERIODIC = "InferenceGym-Task2-v1"  # a 10 s burst every 60 s
MMPP = "InferenceGym-Task3-v1"      # random document bursts: mean 60 s every 120 s
AHEAD = 15  # [intervals] forecast
run_episode = jax.jit(default_action_episode, static_argnums=(0, 3, 4))


def test_the_forecast_is_the_belief_of_the_arrivals_seen_and_knows_the_bursts_after_one():
    env, params = ig.make(PERIODIC)
    wrapped = wrappers.TrafficForecastWrapper(env, AHEAD)
    assert wrapped.observation_space(params).shape == (OBS_SIZE + AHEAD,)
    steps = 130
    # step (auto-reset), as the auto-reset test below: one compiled program (no reset in 130 intervals)
    obs0, (obs, state, info) = run_episode(wrapped, params, jax.random.key(5), steps, False)
    obs, obs0 = np.asarray(obs), np.asarray(obs0)
    share = float(workload.burst_time_fraction(params.workload))
    np.testing.assert_allclose(obs0[OBS_SIZE:], share, atol=0.01)  # the prior: any phase alike
    # The filter run by hand on the episode's own per-class counts gives the same forecast.
    dt, wp = params.server.dt_s, params.workload
    belief = traffic_belief.init(wp)
    counts = np.asarray(info["arrivals"].count)
    for t in range(steps):
        belief = traffic_belief.update(belief, counts[t], t * dt, dt, wp)
        want = traffic_belief.forecast(belief, (t + 1) * dt, dt, AHEAD, wp)
        np.testing.assert_allclose(obs[t, OBS_SIZE:], np.asarray(want), atol=1e-5, err_msg=f"t={t}")
    # After a whole period (one burst seen) it knows when the next bursts are on, but for the
    # interval at either edge of a burst.
    phases = np.asarray(state.env_state.workload.phase_s)
    assert np.ptp(phases) == 0.0
    phase = float(phases[0])  # fixed over the episode
    times = (np.arange(60, steps)[:, None] + 1 + np.arange(AHEAD)[None, :]) * float(dt)
    truth = np.mod(times + phase, float(wp.burst_period_s)) < float(wp.burst_duration_s)
    right = np.sum((obs[60:, OBS_SIZE:] > 0.5) == truth)
    assert right >= 0.95 * (steps - 60) * AHEAD, right
    assert obs.min() >= 0.0 and obs.max() <= 1.0


def test_the_mmpp_forecast_is_the_chain_run_ahead_and_bursts_free_schedules_forecast_nothing():
    env, params = ig.make(MMPP)
    wp, dt = params.workload, params.server.dt_s
    _, (obs, state, _) = run_episode(wrappers.TrafficForecastWrapper(env, AHEAD), params, jax.random.key(2), 200)
    p = np.asarray(obs)[:, OBS_SIZE:]
    on_next = np.asarray(state.env_state.workload.in_burst)  # the burst state of the interval after each
    assert 0 < on_next.sum() < on_next.size
    assert np.mean((p[:, 0] > 0.5) == on_next) > 0.9
    a, b = (float(x) for x in workload.mmpp_flip_probabilities(dt, wp))
    # one interval ahead is one step of the on/off chain from the interval before
    np.testing.assert_allclose(p[:, 1:], p[:, :-1] * (1 - b) + (1 - p[:, :-1]) * a, atol=1e-5)
    stationary = float(workload.burst_time_fraction(wp))
    assert np.all(np.abs(p[:, -1] - stationary) <= np.abs(p[:, 0] - stationary) + 1e-6)
    steady, steady_params = ig.make("InferenceGym-Task1-v1")
    obs0, _ = wrappers.TrafficForecastWrapper(steady, 4).reset(jax.random.key(0), steady_params)
    np.testing.assert_array_equal(np.asarray(obs0)[OBS_SIZE:], 0.0)


def test_an_auto_reset_restarts_the_belief_and_the_final_observation_keeps_it():
    env, params = ig.make(PERIODIC)
    params = params.replace(max_steps_in_episode=jnp.asarray(70, jnp.int32))
    wrapped = wrappers.TrafficForecastWrapper(env, AHEAD)
    _, (obs, state, info) = run_episode(wrapped, params, jax.random.key(2), 130, False)
    obs, final = np.asarray(obs), np.asarray(info["final_observation"])
    prior = np.asarray(wrapped.reset(jax.random.key(0), params)[0])[OBS_SIZE:]
    np.testing.assert_allclose(obs[69, OBS_SIZE:], prior)  # interval 69 ended the episode
    ended = final[69, OBS_SIZE:]
    assert np.all(np.minimum(ended, 1.0 - ended) < 0.01) and not np.allclose(ended, prior), "it was sharp"
    assert int(state.time[69]) == 0 and int(state.time[71]) == 2
    np.testing.assert_array_equal(obs[68], final[68])


def test_jitted_vmapped_forecast_step_traces_once_and_settings_are_checked():
    env, params = ig.make(PERIODIC)
    wrapped = wrappers.TrafficForecastWrapper(wrappers.ArrivalHistoryWrapper(env, 3, 5), AHEAD)
    keys = jax.random.split(jax.random.key(0), 8)
    obs, states = jax.vmap(wrapped.reset, in_axes=(0, None))(keys, params)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(keys, states, actions):
        return jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)

    for _ in range(3):
        obs, states, reward, *_ = step(keys, states, jnp.zeros((8, 5), jnp.int32))
    chex.assert_shape(obs, (8, OBS_SIZE + 3 + AHEAD))
    chex.assert_tree_all_finite((obs, reward))
    assert wrapped == wrappers.TrafficForecastWrapper(wrappers.ArrivalHistoryWrapper(env, 3, 5), AHEAD)
    assert wrapped != wrappers.TrafficForecastWrapper(wrappers.ArrivalHistoryWrapper(env, 3, 5), 4)
    with pytest.raises(ValueError, match="TrafficForecastWrapper reads past intervals"):
        wrappers.base_action_policy(wrapped, lambda key, obs, params: jnp.zeros(5, jnp.int32))
    with pytest.raises(ValueError, match="intervals=0"):
        wrappers.TrafficForecastWrapper(env, 0)


def test_ppo_config_forecast_intervals_wraps_the_layout_env_outermost():
    from inferencegym_jax.training_setup import ServingSetup
    from training import probes

    config = ServingSetup.from_dict(dict(task=PERIODIC, action_mode="hold", history_windows=3,
                                         forecast_intervals=AHEAD))
    made = config.build()
    assert isinstance(made.env, wrappers.TrafficForecastWrapper)
    assert isinstance(made.env.env, wrappers.ArrivalHistoryWrapper) and isinstance(made.env.env.env,
                                                                                    wrappers.HoldActions)
    assert made.env.observation_space(made.params).shape == (OBS_SIZE + 3 + AHEAD,)
    with pytest.raises(ValueError, match="keeps a memory of past intervals already"):
        config.build(made.env.env)
    with pytest.raises(ValueError, match="'forecast_intervals' = 15: the traffic forecast needs a serving env"):
        ServingSetup.from_dict(dict(task=PERIODIC, forecast_intervals=AHEAD)).build(probes.ActionReward())
    with pytest.raises(ValueError, match="forecast_intervals"):
        ServingSetup.from_dict(dict(task=PERIODIC, forecast_intervals=-1))
