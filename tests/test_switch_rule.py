"""The causal switching rule: paired with the evaluation episodes, switches exactly where its
windowed rate and hysteresis say, compiles once per window, and its search is reproducible."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax.control import switch_rule

TASK = "InferenceGym-Task4-v1"
STEPS, EPISODES = 40, 8


@pytest.fixture(scope="module")
def task():
    return ig.make(TASK)


def best_static(task_id: str = TASK) -> np.ndarray:
    return np.asarray(graders.load_constants(task_id)["best_static_action"], np.int32)


def test_a_rule_that_never_switches_is_the_best_static_episode(task):
    env, params = task
    key = evaluate.evaluation_key(2)
    low = best_static()
    never = switch_rule.make_rule(low, np.zeros(5), np.inf, 0.0, window=5)
    ruled = switch_rule.run_rule_episodes(env, params, never, key, EPISODES, num_steps=STEPS)
    fixed = evaluate.run_episodes(env, params, baselines.best_static_policy(TASK), key, EPISODES, num_steps=STEPS)
    # the same arrivals and configurations; two compiled programs may round apart by an ulp
    np.testing.assert_array_equal(np.asarray(ruled.action.batch_size), np.asarray(fixed.action.batch_size))
    np.testing.assert_allclose(np.asarray(ruled.metrics.completed), np.asarray(fixed.metrics.completed), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ruled.reward), np.asarray(fixed.reward), rtol=2e-5, atol=1e-6)


def expected_high(tokens: np.ndarray, window: int, on: float, off: float) -> np.ndarray:
    """The rule's choice per interval, recomputed in numpy from each interval's prompt tokens."""
    high, out = False, []
    for t in range(len(tokens)):
        past = tokens[max(0, t - window):t]
        rate = past.sum() / max(len(past), 1)  # 1-s intervals
        high = rate >= off if high else rate > on
        out.append(high)
    return np.asarray(out)


def test_the_rule_switches_where_its_windowed_rate_and_hysteresis_say(task):
    env, params = task
    key = evaluate.evaluation_key(3)
    low = best_static()
    high = low.copy()
    high[2] = 2  # another batch size: applied at once, unlike a prefill engine's start
    tokens = switch_rule.offered_prompt_tokens(env, params, key, EPISODES, num_steps=STEPS)
    np.testing.assert_allclose(switch_rule.windowed_rates(tokens, 1, 1.0), tokens, rtol=1e-6)
    on = float(np.quantile(tokens, 0.6))
    rule = switch_rule.make_rule(low, high, on, 0.5 * on, window=4)
    traj = switch_rule.run_rule_episodes(env, params, rule, key, EPISODES, num_steps=STEPS)
    batches = np.asarray(traj.action.batch_size)
    is_high = batches != batches[:, :1]  # interval 0, with no past, serves `low`
    assert 0 < np.mean(is_high) < 1, "the test's threshold should make the rule switch"
    for episode in range(EPISODES):
        want = expected_high(tokens[episode].astype(np.float64), 4, on, 0.5 * on)
        np.testing.assert_array_equal(is_high[episode], want)


def test_one_compile_serves_every_configuration_and_threshold_of_a_window(task):
    env, params = task
    key = evaluate.evaluation_key(4)
    low = best_static()
    switch_rule.run_rule_episodes(env, params, switch_rule.make_rule(low, low, 1e3, 1e2, 7), key, 2, num_steps=6)
    compiled = evaluate._run_batch._cache_size()
    other = low.copy()
    other[3] = 1
    switch_rule.run_rule_episodes(env, params, switch_rule.make_rule(low, other, 5e3, 4e3, 7), key, 2, num_steps=6)
    assert evaluate._run_batch._cache_size() == compiled
    switch_rule.run_rule_episodes(env, params, switch_rule.make_rule(low, other, 5e3, 4e3, 8), key, 2, num_steps=6)
    assert evaluate._run_batch._cache_size() == compiled + 1  # the window is static


def test_select_returns_the_best_rule_of_its_grid_reproducibly(task):
    env, params = task
    grid = switch_rule.RuleGrid(windows=(5, 10), on_quantiles=(0.5, 0.8), hysteresis=(0.6, 1.0),
                                first_stage={"window": 10, "on_quantiles": (0.5,), "hysteresis": 1.0}, shortlist=2)
    rule, score = switch_rule.select(env, params, TASK, num_episodes=4, num_steps=STEPS, grid=grid)
    assert any(np.array_equal(np.asarray(c), best_static()) for c in (rule.low, rule.high))
    assert rule.window in grid.windows and 0.0 <= float(rule.off_rate) <= float(rule.on_rate)
    key = jax.random.fold_in(evaluate.training_key(0), switch_rule.SELECTION_STREAM)
    traj = switch_rule.run_rule_episodes(env, params, rule, key, 4, num_steps=STEPS)
    assert float(np.mean(evaluate.grade_trajectory(traj, params, TASK).scores)) == pytest.approx(score, abs=1e-6)
    # the never-switching rule (high = low) is in the grid: the pick is no worse than best static
    static = evaluate.run_episodes(env, params, baselines.best_static_policy(TASK), key, 4, num_steps=STEPS)
    assert score >= float(np.mean(evaluate.grade_trajectory(static, params, TASK).scores)) - 1e-6
    again, score_again = switch_rule.select(env, params, TASK, num_episodes=4, num_steps=STEPS, grid=grid)
    assert again.describe() == rule.describe() and score_again == score
    # the selected rule scores at least as well as every other point of the grid's second stage
    tokens = switch_rule.offered_prompt_tokens(env, params, key, 4, num_steps=STEPS)
    for window in grid.windows:
        for ratio in grid.hysteresis:
            on = float(np.quantile(switch_rule.windowed_rates(tokens, window, 1.0), 0.8))
            other = switch_rule.make_rule(rule.low, rule.high, on, ratio * on, window)
            traj = switch_rule.run_rule_episodes(env, params, other, key, 4, num_steps=STEPS)
            assert float(np.mean(evaluate.grade_trajectory(traj, params, TASK).scores)) <= score + 1e-6


@pytest.mark.parametrize("kwargs, word", [
    ({"window": 0, "on_rate": 1.0, "off_rate": 0.5}, "window=0"),
    ({"window": 3, "on_rate": 1.0, "off_rate": 2.0}, "off_rate=2.0"),
    ({"window": 3, "on_rate": 1.0, "off_rate": -1.0}, "off_rate=-1.0"),
])
def test_bad_rules_are_refused_naming_the_value(kwargs, word):
    with pytest.raises(ValueError, match=word):
        switch_rule.make_rule(np.zeros(5), np.zeros(5), **kwargs)


def test_a_first_stage_off_the_grid_is_refused():
    with pytest.raises(ValueError, match="first_stage"):
        switch_rule.RuleGrid(windows=(5,), first_stage={"window": 30, "on_quantiles": (0.5,), "hysteresis": 1.0})
