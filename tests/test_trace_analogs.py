"""The analog forecast of a replayed trace (inferencegym_jax.control.trace_analogs) and the causal MPC
that plans on it (mpc, trace_forecast="analogs")."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.control import mpc, mpc_planning, trace_analogs

TASK = "InferenceGym-Task4-v1"


def run_mpc(env, params, task_id, key, episodes, *, candidates=None, base=None, num_steps=None, **settings):
    """mpc.run_mpc_episodes of the controller with these settings (mpc.MPCConfig's fields)."""
    ctrl = mpc.controller(env, params, task_id, mpc.MPCConfig(**settings), candidates=candidates, base=base,
                          num_steps=num_steps)
    return mpc.run_mpc_episodes(ctrl, params, key, episodes)



@pytest.fixture(scope="module")
def task():
    return ig.make(TASK)


def _numpy_tokens_before(trace, time_s: float) -> float:
    """The trace's prompt tokens that arrived before time_s, counted request by request."""
    arrival = np.asarray(trace.arrival_s)[:, 1:]
    prompts = np.diff(np.asarray(trace.prompt_cumsum), axis=1)
    return float(np.sum(np.where(arrival < time_s, prompts, 0.0)))


def test_prompt_tokens_and_rates_are_the_traces_own(task):
    _, params = task
    trace = params.workload.trace
    times = np.array([0.0, 0.5, 17.25, 600.0, 3000.0], np.float32)
    got = np.asarray(trace_analogs.prompt_tokens_before(trace, jnp.asarray(times)))
    want = [_numpy_tokens_before(trace, t) for t in times]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    rate = float(trace_analogs.prompt_rate(trace, jnp.float32(600.0), jnp.float32(30.0)))
    assert rate == pytest.approx((want[3] - _numpy_tokens_before(trace, 570.0)) / 30.0, rel=1e-4)
    assert rate > 0.0


def test_analogs_are_the_nearest_loads_of_the_past_whose_futures_ended_before_now(task):
    _, params = task
    trace, dt = params.workload.trace, params.server.dt_s
    now, horizon, count, window, lookback = jnp.float32(1500.3), 30, 8, 30, 400
    starts, found = trace_analogs.analog_starts(trace, now, horizon, count, dt, window, lookback)
    starts, found = np.asarray(starts), np.asarray(found)
    assert found.all()
    assert np.all(starts + horizon * float(dt) <= float(now) + 1e-3)  # each analog's future is past
    assert np.all(starts >= window * float(dt))
    # brute force over the same grid: the `count` nearest rates, nearest first
    taus = float(now) - (horizon + np.arange(lookback)) * float(dt)
    rate = lambda t: (_numpy_tokens_before(trace, t) - _numpy_tokens_before(trace, t - window)) / window  # noqa: E731
    distance = np.abs(np.array([rate(t) for t in taus]) - rate(float(now)))
    chosen = np.abs(np.array([rate(t) for t in starts]) - rate(float(now)))
    np.testing.assert_allclose(chosen, np.sort(distance)[:count], rtol=1e-3, atol=1e-2)


def test_early_in_the_trace_there_are_fewer_analogs_than_asked(task):
    _, params = task
    trace, dt = params.workload.trace, params.server.dt_s
    # at 65 s with a 30-s horizon and window, only starts in [30, 35] s have a whole window and a past future
    _, found = trace_analogs.analog_starts(trace, jnp.float32(65.0), 30, 16, dt)
    assert int(np.sum(np.asarray(found))) == 6


def test_a_plan_on_an_analog_replays_the_trace_from_its_start(task):
    env, params = task
    _, state = env.reset_env(jax.random.key(0), params)
    action = jnp.asarray(mpc.candidate_actions(env, params, TASK)[0])

    @functools.partial(jax.jit, static_argnums=1)
    def counts(state, steps):
        def body(state, _):
            _, state, _, _, _, info = env.step_env(jax.random.key(0), state, action, params)
            return state, info["arrivals"].count
        return jax.lax.scan(body, state, None, steps)

    state, _ = counts(state, 10)
    keys = mpc_planning.future_keys(jax.random.key(1), jax.random.key(2), 10, 6, 1, clairvoyant=False)[0]
    start = jnp.float32(812.0)
    planned = mpc_planning._planning_state(state, params, keys, False, 600, 6, analog=(start, jnp.bool_(True)))
    _, forecast = counts(planned, 6)
    replay = state.replace(workload=state.workload.replace(phase_s=start), time=jnp.int32(0))
    _, want = counts(replay, 6)
    np.testing.assert_array_equal(np.asarray(forecast), np.asarray(want))
    # an analog not found: the persistence forecast
    fallback = mpc_planning._planning_state(state, params, keys, False, 600, 6, analog=(start, jnp.bool_(False)))
    persistence = mpc_planning._planning_state(state, params, keys, False, 600, 6)
    assert float(fallback.workload.phase_s) == float(persistence.workload.phase_s)


def _run(env, params, forecast: str, samples: int = 2):
    return run_mpc(env, params, TASK, jax.random.key(3), 2, clairvoyant=False, horizon=3,
                                samples=samples, num_steps=4, trace_forecast=forecast)


@pytest.mark.slow
def test_the_analog_mpc_runs_reproducibly(task):
    env, params = task
    a, b = _run(env, params, "analogs"), _run(env, params, "analogs")
    np.testing.assert_array_equal(np.asarray(a.reward), np.asarray(b.reward))
    assert np.all(np.isfinite(np.asarray(a.reward)))


def test_the_analog_mpc_is_refused_bad_forecasts(task):
    env, params = task
    run = lambda forecast, samples=2: _run(env, params, forecast, samples)  # noqa: E731
    with pytest.raises(ValueError, match="trace_forecast='weather'"):
        run("weather")
    with pytest.raises(ValueError, match="samples=3601"):
        run("analogs", samples=trace_analogs.LOOKBACK + 1)
    with pytest.raises(ValueError, match="analog_window=0"):
        run_mpc(env, params, TASK, jax.random.key(3), 1, clairvoyant=False, trace_forecast="analogs",
                             analog_window=0)


@pytest.mark.slow
def test_the_scripts_name_the_analog_forecast_they_ran(tmp_path):
    """experiments/mpc_gap.py --trace-forecast analogs (the README's analog row) and
    experiments/trace_forecast_sweep.py (how its numbers were chosen, the rollout MPC's too) write the
    rows they print."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[1] / "experiments"
    gap = tmp_path / "gap.json"
    subprocess.run([sys.executable, str(scripts / "mpc_gap.py"), "--version", "1", "--task", "4", "--episodes", "1",
                    "--horizon", "2", "--samples", "2", "--replan-every", "300", "--trace-forecast", "analogs",
                    "--json", str(gap)], capture_output=True, text=True, check=True, cwd=tmp_path)
    payload = json.loads(gap.read_text())
    assert payload["trace_forecast"] == "analogs"
    assert [r["policy"] for r in payload["rows"]] == ["best_static", "mpc_oracle (oracle bound)",
                                                       "mpc (causal, analog forecast)"]
    sweep = tmp_path / "sweep.json"
    printed = subprocess.run([sys.executable, str(scripts / "trace_forecast_sweep.py"), "--episodes", "1",
                              "--points", "2", "--json", str(sweep)],
                             capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    rows = json.loads(sweep.read_text())["rows"]
    assert [(r["forecast"], r["futures"], r["replan_every"]) for r in rows] == [("analogs", 64, 10),
                                                                                 ("persistence", 1, 1)]
    for r in rows:
        assert f"{r['gain']:+.3f} ± {r['gain_ci95']:.3f}" in printed and 0.0 <= r["stability"] <= 1.0
    rollout = tmp_path / "rollout.json"  # the rollout MPC's sweep, on a short task: its first point
    printed = subprocess.run([sys.executable, str(scripts / "trace_forecast_sweep.py"), "--task", "2", "--rollout",
                              "--episodes", "1", "--rule-episodes", "1", "--points", "1", "--json", str(rollout)],
                             capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    payload = json.loads(rollout.read_text())
    assert payload["rule_episodes"] == 1 and set(payload["rule"]) == {"low", "high", "on_rate", "off_rate", "window"}
    (r,) = payload["rows"]
    assert (r["candidates"], r["futures"], r["replan_every"]) == ("rule", 16, 1)
    assert f"{r['over_rule']:+.4f} ± {r['over_rule_ci95']:.4f}" in printed
