"""The day-ahead reservation task (`fleet.reservation`, InferenceGym-Reserve1-v1): the gymnax
contract, reproducibility, one compile, refused commitments (state and accumulated cost unchanged,
no reward), bad input outside jit, termination after the episode's commitments, the day model
against a hand computation, causality of the observation, the splits, and the clairvoyant oracle
against every other plan tried on the same day."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.fleet import reservation_baselines as rb
from inferencegym_jax.fleet.reservation import ReservationEnv, obs_size
from inferencegym_jax.fleet.reservation_day import (
    DAY_WINDOWS,
    HOURS_PER_DAY,
    MAX_LAG_WINDOWS,
    WINDOW_S,
    DayPrices,
    windows_outcome,
)
from inferencegym_jax.fleet.reservation_tasks import client_pool

ENV_ID = "InferenceGym-Reserve1-v1"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reserve():
    """The env, its training params and jitted reset / step (step traced at most once)."""
    env, params = ig.make(ENV_ID)
    chex.clear_trace_counter()
    return env, params, jax.jit(env.reset), jax.jit(chex.assert_max_traces(env.step, n=1))


def same(a, b) -> bool:
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def test_spaces_and_observation(reserve):
    env, params, reset, _ = reserve
    assert tuple(env.action_space(params).nvec) == (params.max_reserved + 1,) * HOURS_PER_DAY
    obs, state = reset(jax.random.PRNGKey(0), params)
    flat = env.flatten_observation(obs, params)
    space = env.observation_space(params)
    assert flat.shape == space.shape == (obs_size(params),)
    assert bool(jnp.all((flat >= space.low) & (flat <= space.high)))
    assert obs.history.shape == (params.history_days, HOURS_PER_DAY)
    # The service is scaled so that the week before its first commitment has a mean of
    # history_mean_replicas at the target.
    first = params.first_day * DAY_WINDOWS
    week = state.rate[first - params.history_days * DAY_WINDOWS: first]
    np.testing.assert_allclose(float(week.mean() / params.prices.hpa_target),
                               float(params.history_mean_replicas), rtol=1e-5)


def test_same_key_same_bits_and_one_compile(reserve):
    env, params, reset, step = reserve
    runs = []
    for _ in range(2):
        obs, state = reset(jax.random.PRNGKey(7), params)
        rewards = []
        for d in range(3):
            obs, state, r, *_ = step(jax.random.PRNGKey(d), state, jnp.full(HOURS_PER_DAY, 3, jnp.int32), params)
            rewards.append(np.asarray(r))
        runs.append((jax.tree_util.tree_map(np.asarray, state), rewards))
    assert same(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    _, other = reset(jax.random.PRNGKey(8), params)
    assert not bool(jnp.array_equal(other.rate, runs[0][0].rate))  # another key, another service


def test_refused_commitment_changes_nothing(reserve):
    env, params, reset, step = reserve
    _, state = reset(jax.random.PRNGKey(1), params)
    _, state, *_ = step(jax.random.PRNGKey(0), state, jnp.full(HOURS_PER_DAY, 2, jnp.int32), params)
    for bad in (jnp.full(HOURS_PER_DAY, params.max_reserved + 1, jnp.int32),
                jnp.zeros(HOURS_PER_DAY, jnp.int32).at[5].set(-1)):
        _, after, reward, terminated, truncated, info = step(jax.random.PRNGKey(0), state, bad, params)
        assert same(after, state)  # day, service, on-demand tail, last day and episode totals
        assert float(reward) == 0.0 and not bool(terminated) and not bool(truncated)
        assert bool(info["refused"]) and float(info["day"].cost_usd) == 0.0


def test_bad_input_outside_jit(reserve):
    env, params, reset, _ = reserve
    _, state = env.reset(jax.random.PRNGKey(0), params)
    for bad in (np.full(HOURS_PER_DAY, 99), np.full(HOURS_PER_DAY, 1.5), np.zeros(3, np.int32)):
        with pytest.raises(ValueError, match=r"action=.*each in \[0, 32\]"):
            env.step(jax.random.PRNGKey(0), state, bad, params)
    with pytest.raises(ValueError, match="split='test'"):
        ig.make(ENV_ID, split="test")
    with pytest.raises(ValueError, match="max_reserved"):
        ig.make(ENV_ID, reservation={"max_reserved": 0})
    with pytest.raises(ValueError, match=r"reservation.train_days=\[5, 8\]: allowed .* first >= history_days"):
        ig.make(ENV_ID, reservation={"train_days": [5, 8]})
    with pytest.raises(ValueError, match=r"reservation.heldout_days=\[11, 14\]: .* each in \[1, 13\]"):
        ig.make(ENV_ID, split="heldout", reservation={"heldout_days": [11, 14]})
    with pytest.raises(ValueError, match="committed days 12..14 .* last day <= 13"):
        env.reset(jax.random.PRNGKey(0), params.replace(first_day=12, decision_days=3))
    with pytest.raises(ValueError, match="unknown reservation env id"):
        ig.make("InferenceGym-Reserve9-v1")


def test_episode_terminates_and_resets(reserve):
    env, params, reset, step = reserve
    obs, state = reset(jax.random.PRNGKey(2), params)
    total = 0.0
    for d in range(params.decision_days):
        obs, state, reward, terminated, truncated, info = step(
            jax.random.PRNGKey(d), state, jnp.full(HOURS_PER_DAY, 4, jnp.int32), params)
        total += float(reward)
        assert bool(terminated) == (d == params.decision_days - 1) and not bool(truncated)
        np.testing.assert_allclose(float(reward), -float(info["day"].cost_j), rtol=1e-6)
        parts = info["reward_components"]
        np.testing.assert_allclose(float(reward), -float(parts["gpu"] + parts["slo"]), rtol=1e-5)
        assert float(info["day"].reserved_gpu_h) == 4 * HOURS_PER_DAY
    assert float(info["final_observation"].days_left) == 0.0
    assert int(state.day) == 0 and float(obs.days_left) == 1.0  # auto-reset
    assert total < 0


def test_day_model_by_hand():
    """A rate step from 1 to 5 req/s with nothing reserved: the autoscaler sees it one window late
    and its replicas serve 830.5 s after the ask, so 3.55 req/s are missed for two windows and the
    first 230.5 s of the third; a window's requests beyond capacity, at 1.45 req/s per replica."""
    prices = DayPrices(capacity=jnp.float32(1.45), hpa_target=jnp.float32(1.0), provision_s=jnp.float32(830.5),
                       reserved_price=jnp.float32(1.0), on_demand_price=jnp.float32(2.0))
    rate = jnp.asarray([1.0] * 10 + [5.0] * 20, jnp.float32)
    observed = jnp.concatenate([jnp.ones(1), rate[:-1]])
    missed, wanted, serving = windows_outcome(rate, observed, jnp.zeros(30), jnp.ones(MAX_LAG_WINDOWS), prices)
    expected = np.zeros(30)
    expected[10] = expected[11] = 3.55 * WINDOW_S
    expected[12] = 3.55 * 230.5
    np.testing.assert_allclose(np.asarray(missed), expected, rtol=1e-5, atol=1e-3)
    assert np.asarray(wanted).tolist() == [1.0] * 11 + [5.0] * 19
    np.testing.assert_allclose(float(serving[12]), (1 * 230.5 + 5 * 369.5) / WINDOW_S, rtol=1e-6)
    # 4 reserved replicas carry the step (5.8 req/s) but the autoscaler keeps its target's
    # headroom with one on-demand replica; 5 reserved leave it nothing to ask for.
    for reserved, on_demand in ((4.0, 19.0), (5.0, 0.0)):
        missed, wanted, _ = windows_outcome(rate, observed, jnp.full(30, reserved), jnp.zeros(MAX_LAG_WINDOWS), prices)
        assert float(missed.sum()) == 0.0 and float(wanted.sum()) == on_demand


def test_observation_is_causal(reserve):
    """The observation of a state shows nothing of the day to be committed or later."""
    env, params, reset, step = reserve
    _, state = reset(jax.random.PRNGKey(3), params)
    _, state, *_ = step(jax.random.PRNGKey(0), state, jnp.full(HOURS_PER_DAY, 2, jnp.int32), params)
    future = (params.first_day + int(state.day)) * DAY_WINDOWS
    changed = state.replace(rate=state.rate.at[future:].multiply(3.0))
    assert same(env.get_obs(state, params), env.get_obs(changed, params))
    for name, policy in rb.reservation_baselines(env, params).items():
        if name != "oracle":
            before, after = env.get_obs(state, params), env.get_obs(changed, params)
            assert same(policy(None, before, params), policy(None, after, params)), name


def test_splits_divide_the_clients_and_the_days():
    _, train = ig.make(ENV_ID)
    _, heldout = ig.make(ENV_ID, split="heldout")
    train_days = set(range(train.first_day, train.first_day + train.decision_days))
    heldout_days = set(range(heldout.first_day, heldout.first_day + heldout.decision_days))
    assert train_days == {7, 8, 9, 10} and heldout_days == {11, 12, 13}
    a, b = np.asarray(train.client_pool), np.asarray(heldout.client_pool)
    assert np.all(a + b == 1.0) and abs(a.sum() - b.sum()) <= 1
    rates = np.asarray(train.client_rates)
    assert client_pool(rates, "train")[np.argmax(rates.mean(axis=1))] == 1.0  # the busiest client trains


def test_oracle_beats_every_other_plan(reserve):
    """The DP's plan has the least J of the day among the baselines' plans and 300 perturbations
    of its own (each hour moved by -2..2 replicas)."""
    env, params, reset, _ = reserve
    obs, state = reset(jax.random.PRNGKey(4), params)

    def day_j(plan):
        o = ReservationEnv.play_day(state, jnp.asarray(plan, jnp.int32), params)
        return float(o.cost_usd / (params.max_reserved * HOURS_PER_DAY * params.prices.on_demand_price)
                     + params.slo_weight * o.missed / o.arrived)

    best = np.asarray(rb.hindsight_reservation(state, params))
    best_j = day_j(best)
    for name, policy in rb.reservation_baselines(env, params).items():
        if name != "oracle":
            assert best_j <= day_j(policy(None, obs, params)) + 1e-6, name
    rng = np.random.default_rng(0)
    for _ in range(300):
        plan = np.clip(best + rng.integers(-2, 3, HOURS_PER_DAY), 0, params.max_reserved)
        assert best_j <= day_j(plan) + 1e-6


@pytest.mark.slow
def test_baseline_choice_is_current():
    """data/fleet/reserve1_v1_baselines.json's choice is what the script chooses today."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "reservation_baselines.py"), "--check"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr


def test_doc_tables_are_current():
    """docs/RESERVATION.md holds the held-out tables of data/fleet/reserve1_v1_baselines.json and of
    results/reserve1_v1.json (the shipped PPO run's eval.json)."""
    import importlib.util
    import json

    path = ROOT / "scripts" / "reservation_baselines.py"
    spec = importlib.util.spec_from_file_location("reservation_baselines_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = json.loads((ROOT / "data" / "fleet" / "reserve1_v1_baselines.json").read_text())["heldout"]["table"]
    doc = (ROOT / "docs" / "RESERVATION.md").read_text()
    start, end = script.DOC_MARKERS
    assert f"{start}\n{script.markdown(rows)}{end}" in doc
    ppo_rows = json.loads((ROOT / "results" / "reserve1_v1.json").read_text())["table"]
    assert f"<!-- reserve1-ppo:start -->\n{script.markdown(ppo_rows)}<!-- reserve1-ppo:end -->" in doc
