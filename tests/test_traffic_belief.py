"""The traffic belief: the posterior over a schedule's hidden state given the arrivals so far,
against the truth it should find and against brute-force enumeration."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import poisson

import inferencegym_jax as ig
from inferencegym_jax.control import mpc, mpc_planning, traffic_belief
from inferencegym_jax.traffic import workload


def run_mpc(env, params, task_id, key, episodes, *, candidates=None, base=None, num_steps=None, **settings):
    """mpc.run_mpc_episodes of the controller with these settings (mpc.MPCConfig's fields)."""
    ctrl = mpc.controller(env, params, task_id, mpc.MPCConfig(**settings), candidates=candidates, base=base,
                          num_steps=num_steps)
    return mpc.run_mpc_episodes(ctrl, params, key, episodes)



def _episode(task_id: str, seed: int, steps: int):
    """(params, per-interval true burst state bool (T,), counts (T, 3), belief after each interval)."""
    _, params = ig.make(task_id)
    wp, dt = params.workload, params.server.dt_s
    state = workload.init(jax.random.key(seed), wp, steps * dt)

    def body(carry, t):
        state, belief = carry
        t_s = t.astype(jnp.float32) * dt
        on = workload.burst_on(state, t_s, wp)
        nxt, arrivals = workload.step(jax.random.fold_in(jax.random.key(seed + 1), t), state, t_s, dt, wp)
        belief = traffic_belief.update(belief, arrivals.count, t_s, dt, wp)
        return (nxt, belief), (on, arrivals.count, belief)

    _, (on, counts, beliefs) = jax.lax.scan(body, (state, traffic_belief.init(wp)), jnp.arange(steps))
    return params, np.asarray(on), np.asarray(counts), beliefs, state


def test_the_periodic_posterior_finds_the_burst_phase_after_one_burst():
    params, on, _, beliefs, state = _episode("InferenceGym-Task2-v1", 0, 130)
    wp, dt = params.workload, params.server.dt_s
    last = jax.tree_util.tree_map(lambda x: x[-1], beliefs)
    # After two bursts it predicts the next 60 intervals' bursts almost surely right.
    future = [float(traffic_belief.probability_on(last, jnp.float32((130 + h) * dt), wp)) for h in range(60)]
    truth = [bool(workload.burst_on(state, jnp.float32((130 + h) * dt), wp)) for h in range(60)]
    assert np.mean([abs(p - t) < 0.05 for p, t in zip(future, truth)]) >= 58 / 60
    # Drawn phases burst when the truth does (up to a burst edge).
    keys = jax.random.split(jax.random.key(3), 64)
    draws = jax.vmap(lambda k: traffic_belief.sample(last, k, state, wp).phase_s)(keys)
    cell = wp.burst_period_s / traffic_belief.PHASE_GRID
    err = np.abs((np.asarray(draws) - float(state.phase_s) + 30.0) % 60.0 - 30.0)
    assert err.max() <= dt + cell
    # Before anything is seen every phase is as likely.
    prior = traffic_belief.init(wp)
    assert float(traffic_belief.probability_on(prior, jnp.float32(0.0), wp)) == pytest.approx(10 / 60, abs=0.01)


def _mmpp_brute_force(counts: np.ndarray, params) -> float:
    """P(burst on in the next interval | counts) by summing over every on/off path."""
    wp, dt = params.workload, float(params.server.dt_s)
    lam = [float(wp.base_rate) * dt * np.asarray(wp.class_mix),
           float(wp.base_rate) * dt * np.asarray(wp.burst_class_mix) * float(wp.burst_multiplier)]
    p_on = float(wp.burst_duration_s) / float(wp.burst_duration_s + wp.burst_gap_s)
    leave = [dt / float(wp.burst_gap_s), dt / float(wp.burst_duration_s)]
    total = np.zeros(2)
    for path in itertools.product((0, 1), repeat=len(counts)):
        p = p_on if path[0] else 1.0 - p_on
        for t, s in enumerate(path):
            p *= np.prod(poisson.pmf(counts[t], lam[s]))
            if t + 1 < len(path):
                p *= leave[s] if path[t + 1] != s else 1.0 - leave[s]
        last = path[-1]
        total += p * np.array([1.0 - leave[last], leave[last]] if last == 0 else [leave[last], 1.0 - leave[last]])
    return total[1] / total.sum()


def test_the_mmpp_filter_is_the_exact_posterior_of_its_chain():
    params, _, counts, beliefs, _ = _episode("InferenceGym-Task3-v1", 4, 10)
    want = _mmpp_brute_force(counts, params)
    last = jax.tree_util.tree_map(lambda x: x[-1], beliefs)
    got = float(traffic_belief.probability_on(last, jnp.float32(0.0), params.workload))
    assert got == pytest.approx(want, rel=1e-4)


def test_the_mmpp_filter_tracks_the_bursts():
    params, on, _, beliefs, _ = _episode("InferenceGym-Task3-v1", 1, 300)
    p_next = np.exp(np.asarray(beliefs.log_burst[:, 1]) - np.logaddexp(*np.asarray(beliefs.log_burst).T))
    # p_next[t] is the prediction for interval t + 1: right in most intervals (a burst's batch
    # tenant, absent between bursts, gives it away within a few intervals).
    assert on.any() and (~on).any()
    assert np.mean((p_next[:-1] > 0.5) == on[1:]) > 0.9


def test_nothing_hidden_leaves_the_state_alone():
    _, params = ig.make("InferenceGym-Task1-v1")
    wp = params.workload
    state = workload.init(jax.random.key(0), wp, 200.0)
    belief = traffic_belief.update(traffic_belief.init(wp), jnp.array([3.0, 0.0, 0.0]), 0.0, 1.0, wp)
    assert traffic_belief.sample(belief, jax.random.key(1), state, wp) is state


def test_the_causal_plan_draws_the_phase_from_the_belief_not_the_episode():
    env, params = ig.make("InferenceGym-Task2-v1")
    _, state = env.reset_env(jax.random.key(0), params)
    other = state.replace(workload=state.workload.replace(phase_s=state.workload.phase_s + 17.0))
    belief = traffic_belief.init(params.workload)
    keys = mpc_planning.future_keys(jax.random.key(1), jax.random.key(2), 3, 3, 4, clairvoyant=False)
    a = [float(mpc_planning._planning_state(state, params, k, False, 200, 3, belief).workload.phase_s) for k in keys]
    b = [float(mpc_planning._planning_state(other, params, k, False, 200, 3, belief).workload.phase_s) for k in keys]
    assert a == b and len(set(a)) == 4
    with pytest.raises(ValueError, match="traffic_state='exact'"):
        run_mpc(env, params, "InferenceGym-Task2-v1", jax.random.key(0), 1, clairvoyant=False,
                             traffic_state="exact")
