"""The model-predictive controllers: with one candidate they are that fixed configuration on the
same episodes, the oracle sees the episode's own future and the causal one does not, and both are
reproducible."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.control import mpc, mpc_planning, mpc_rollout, switch_rule

TASK = "InferenceGym-Task2-v0"
STEPS, HORIZON = 12, 3


def run_mpc(env, params, task_id, key, episodes, *, candidates=None, base=None, num_steps=None, **settings):
    """mpc.run_mpc_episodes of the controller with these settings (mpc.MPCConfig's fields)."""
    ctrl = mpc.controller(env, params, task_id, mpc.MPCConfig(**settings), candidates=candidates, base=base,
                          num_steps=num_steps)
    return mpc.run_mpc_episodes(ctrl, params, key, episodes)



@pytest.fixture(scope="module")
def task():
    return ig.make(TASK)


def test_candidates_are_the_best_static_neighbourhood(task):
    env, params = task
    cands = mpc.candidate_actions(env, params, TASK)
    best = np.asarray(baselines.best_static_policy(TASK)(None, None, params))
    assert np.array_equal(cands[0], best) and len(np.unique(cands, axis=0)) == len(cands)
    nvec = env.action_space(params).nvec
    assert np.all(cands < nvec) and np.all(cands >= 0)
    # every candidate but the vLLM default is the best static configuration with one knob changed
    far = sum(int(np.sum(c != best) > 1) for c in cands)
    assert far <= 1 and len(cands) == 1 + sum(int(n) - 1 for n in nvec) + far


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_one_candidate_is_that_fixed_configuration_on_the_same_episodes(task):
    env, params = task
    best = mpc.candidate_actions(env, params, TASK)[:1]
    key = evaluate.evaluation_key(2)
    for clairvoyant in (True, False):
        traj = run_mpc(env, params, TASK, key, 8, clairvoyant=clairvoyant, horizon=HORIZON, samples=2,
                                    candidates=best, num_steps=STEPS)
        fixed = evaluate.run_episodes(env, params, baselines.fixed_policy(best[0]), key, 8, num_steps=STEPS)
        np.testing.assert_allclose(np.asarray(traj.reward), np.asarray(fixed.reward), rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(traj.action.batch_size), np.asarray(fixed.action.batch_size))


def test_the_oracle_plans_on_the_episodes_future_and_the_causal_mpc_does_not():
    _, k_env, k_plan = jax.random.split(jax.random.key(5), 3)
    steps = jax.random.key_data(jax.vmap(lambda t: jax.random.fold_in(k_env, t))(np.arange(40)))  # the episode's
    for t in (0, 7, 30):
        oracle = jax.random.key_data(mpc_planning.future_keys(k_env, k_plan, t, HORIZON, 4, clairvoyant=True))
        np.testing.assert_array_equal(oracle[0], steps[t:t + HORIZON])
        causal = jax.random.key_data(mpc_planning.future_keys(k_env, k_plan, t, HORIZON, 4, clairvoyant=False))
        assert causal.shape[:2] == (4, HORIZON)
        flat = {tuple(k) for k in causal.reshape(-1, causal.shape[-1]).tolist()}
        assert len(flat) == 4 * HORIZON and not flat & {tuple(k) for k in steps.tolist()}


def test_controllers_are_reproducible_and_the_oracle_beats_a_fixed_bad_configuration(task):
    env, params = task
    key = evaluate.evaluation_key(4)
    cands = mpc.candidate_actions(env, params, TASK)
    bad = cands[[i for i, c in enumerate(cands) if c[2] == 0][0]]  # batch size 1
    a = run_mpc(env, params, TASK, key, 8, clairvoyant=True, horizon=HORIZON, num_steps=STEPS,
                             candidates=np.stack([bad, cands[0]]))
    b = run_mpc(env, params, TASK, key, 8, clairvoyant=True, horizon=HORIZON, num_steps=STEPS,
                             candidates=np.stack([bad, cands[0]]))
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
    fixed_bad = evaluate.run_episodes(env, params, baselines.fixed_policy(bad), key, 8, num_steps=STEPS)
    assert float(np.mean(a.reward)) > float(np.mean(fixed_bad.reward))
    with pytest.raises(ValueError, match="horizon=0"):
        run_mpc(env, params, TASK, key, 8, clairvoyant=True, horizon=0)
    with pytest.raises(ValueError, match="objective='score'"):
        run_mpc(env, params, TASK, key, 8, clairvoyant=True, objective="score")
    with pytest.raises(ValueError, match="replan_every=0"):
        run_mpc(env, params, TASK, key, 8, clairvoyant=True, replan_every=0)


# In the slow tier: about 55 s of compiling for the oracle, 75 s for the causal MPC.
@pytest.mark.slow
@pytest.mark.parametrize("clairvoyant", [True, False])
def test_move_blocking_plans_every_dth_interval_and_holds_in_between(task, clairvoyant):
    """replan_every=D: the applied configuration changes only at multiples of D; the first plan is
    the every-interval controller's (same state, same keys), and with D = the episode it is held."""
    env, params = task
    key = evaluate.evaluation_key(6)
    cands = mpc.candidate_actions(env, params, TASK)
    run = functools.partial(run_mpc, env, params, TASK, key, 8, clairvoyant=clairvoyant,
                            horizon=HORIZON, samples=2, num_steps=STEPS, candidates=cands)

    def applied(traj):  # (episodes, time, 5) applied knob values
        return np.stack([np.asarray(getattr(traj.action, k)) for k in KNOBS], axis=-1)

    every, blocked = applied(run()), applied(run(replan_every=4))
    changed = np.any(blocked[:, 1:] != blocked[:, :-1], axis=-1)  # (episodes, time - 1): t -> t + 1
    assert not np.any(np.delete(changed, [3, 7], axis=1))  # intervals 1-3, 5-7 and 9-11 hold
    assert np.any(changed)  # the controller does switch (else this checks nothing)
    np.testing.assert_array_equal(blocked[:, 0], every[:, 0])
    np.testing.assert_array_equal(applied(run(replan_every=STEPS)), np.repeat(every[:, :1], STEPS, axis=1))


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
@pytest.mark.parametrize("env_id", ["InferenceGym-Task3-v1"])
def test_the_grade_objective_of_a_rollout_to_the_end_is_the_graders_value_of_that_episode(env_id):
    """Past sums + a rollout reaching the episode's end = the grader's (unnormalised) value of the
    whole episode; a rollout that ends earlier counts its backlog as violations."""
    env, params = ig.make(env_id)
    grader = graders.grader_name(env_id)
    action = jnp.asarray(mpc.candidate_actions(env, params, env_id)[0])
    key = evaluate.episode_keys(evaluate.evaluation_key(6), 0, 1)[0]
    traj = evaluate.run_episode(env, params, baselines.fixed_policy(action), key, STEPS)
    want = graders.grade_episodes(jax.tree_util.tree_map(lambda x: x[None], traj), params, grader, 0.0, 1.0, 0.0,
                                  1.0).score[0]
    k_reset, k_env, _ = jax.random.split(key, 3)
    _, state = env.reset_env(k_reset, params)
    keys = jax.vmap(lambda t: jax.random.fold_in(k_env, t))(jnp.arange(STEPS))
    past = {k: jnp.float32(0.0) for k in graders.SUM_FIELDS}
    valid = jnp.ones(STEPS, bool)
    got = mpc_rollout._window_grade(env, params, state, action, keys, valid=valid, past=past, grader=grader,
                            is_open=jnp.asarray(False))
    assert float(got) == pytest.approx(float(want), rel=1e-5, abs=1e-6)
    # split after 5 intervals: the first part's sums as the past, the rest rolled out
    first = jax.tree_util.tree_map(lambda x: x[None, :5], traj)
    past = graders.episode_sums(jax.tree_util.tree_map(lambda x: x[0], first), params)
    mid, _ = jax.lax.scan(lambda s, k: (env.step_env(k, s, action, params)[1], None), state, keys[:5])
    past = {**past, "pairs": past["pairs"] + 1.0}  # the pair of intervals across the split
    rest = mpc_rollout._window_grade(env, params, mid, action, keys[5:], valid=valid[5:], past=past, grader=grader,
                             is_open=jnp.asarray(False))
    assert float(rest) == pytest.approx(float(want), rel=1e-5, abs=1e-6)
    open_end = mpc_rollout._window_grade(env, params, state, action, keys, valid=valid,
                                 past={k: jnp.float32(0.0) for k in past}, grader=grader, is_open=jnp.asarray(True))
    assert float(open_end) <= float(got) + 1e-6


def test_a_causal_plan_on_a_replayed_trace_replays_its_recent_past():
    env, params = ig.make("InferenceGym-Task4-v1")
    _, state = env.reset_env(jax.random.key(0), params)
    action = jnp.asarray(mpc.candidate_actions(env, params, "InferenceGym-Task4-v1")[0])
    horizon, now = 6, 10

    def counts(state, steps):
        def body(state, _):
            _, state, _, _, _, info = env.step_env(jax.random.key(0), state, action, params)
            return state, info["arrivals"].count
        return jax.lax.scan(body, state, None, steps)

    state, seen = counts(state, now)
    keys = mpc_planning.future_keys(jax.random.key(1), jax.random.key(2), now, horizon, 1, clairvoyant=False)[0]
    planned = mpc_planning._planning_state(state, params, keys, False, 600, horizon)
    _, forecast = counts(planned, horizon)
    np.testing.assert_array_equal(np.asarray(forecast), np.asarray(seen[now - horizon:]))
    assert float(np.sum(seen)) > 0  # the trace's own arrivals, not an empty stretch
    assert mpc_planning._planning_state(state, params, keys, True, 600, horizon) is state  # the oracle replays its own


def test_a_trace_with_no_past_to_replay_forecasts_from_other_stretches_of_it():
    env, params = ig.make("InferenceGym-Task4-v1")
    _, state = env.reset_env(jax.random.key(0), params)
    state = state.replace(workload=state.workload.replace(phase_s=jnp.float32(2.0)))  # 2 s into the trace
    keys = mpc_planning.future_keys(jax.random.key(1), jax.random.key(2), 0, HORIZON, 4, clairvoyant=False)
    phases = [float(mpc_planning._planning_state(state, params, k, False, 600, HORIZON).workload.phase_s) for k in keys]
    assert len(set(phases)) == 4 and all(p >= 0.0 for p in phases)


@pytest.mark.slow
def test_mpc_gap_script_writes_the_rows_it_prints(tmp_path):
    """experiments/mpc_gap.py (the README's controller tables): best_static, oracle, refined oracle and
    causal rows with the grader's components and configuration changes, planning every
    `--replan-every` intervals (so at most episode / D - 1 changes; refined in blocks of D, as
    many), written to --json."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "mpc_gap.py"
    out = tmp_path / "gap.json"
    printed = subprocess.run([sys.executable, str(script), "--task", "2", "--episodes", "2", "--horizon", "2",
                              "--samples", "1", "--replan-every", "50", "--refine-block", "50", "--json", str(out)],
                             capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    payload = json.loads(out.read_text())
    assert payload["replan_every"] == payload["refine_block"] == 50 and payload["episodes"] == 2
    rows = payload["rows"]
    assert [r["policy"] for r in rows] == ["best_static", "mpc_oracle (oracle bound)",
                                           "mpc_oracle, refined (oracle bound)", "mpc (causal)"]
    assert rows[2]["score"] >= rows[1]["score"] - 1e-5  # refinement never lowers an episode's grade
    steps = int(ig.make("InferenceGym-Task2-v0")[1].max_steps_in_episode)
    for row in rows:
        assert 0.0 <= row["changes"] <= steps // 50 - 1
        assert {"component_ttft", "component_memory"} <= set(row)
        assert f"| {row['task']} | {row['policy']} | {row['score']:.3f}" in printed
    assert rows[0]["changes"] == 0.0 and rows[0]["gain"] == 0.0


@pytest.mark.slow
def test_mpc_gap_script_adds_the_switching_rule_it_selected(tmp_path):
    """`--rule-episodes N --no-mpc`: best_static and the switching rule's row, which names the rule;
    with `--rollout`, the rollout MPC on that rule too."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "mpc_gap.py"
    out = tmp_path / "rule.json"
    subprocess.run([sys.executable, str(script), "--task", "2", "--episodes", "2", "--rule-episodes", "2",
                    "--no-mpc", "--rollout", "--samples", "2", "--horizon", "3", "--json", str(out)],
                   capture_output=True, text=True, check=True, cwd=tmp_path)
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    assert payload["rollout"] and [r["policy"] for r in rows] == [
        "best_static", "switch_rule (causal)", "mpc (causal, rollout on the switching rule)"]
    rule = rows[1]["rule"]
    fixed = [knob for i, knob in enumerate(KNOBS) if rule["low"][i] == rule["high"][i]]
    assert all(rows[2][f"off_static_{knob}"] == 0.0 for knob in fixed)  # it serves the rule's configurations
    assert rows[2]["over_rule"] == pytest.approx(rows[2]["gain"] - rows[1]["gain"], abs=1e-5)
    assert list(graders.load_constants("InferenceGym-Task2-v0")["best_static_action"]) in (rule["low"], rule["high"])
    assert rule["window"] in switch_rule.WINDOWS and 0.0 <= rule["off_rate"] <= rule["on_rate"]


def poor_rule(env, params, env_id: str, key, episodes: int) -> switch_rule.SwitchRule:
    """A poor base policy: the best static configuration, and batch size 1 above the 30 % quantile
    of the prompt-token rate over 2 intervals of these episodes (back below the 20 % quantile)."""
    cands = mpc.candidate_actions(env, params, env_id)
    bad = cands[[i for i, c in enumerate(cands) if c[2] == 0][0]]  # batch size 1
    tokens = switch_rule.offered_prompt_tokens(env, params, key, episodes, STEPS)
    rates = switch_rule.windowed_rates(tokens, 2, float(params.server.dt_s))
    return switch_rule.make_rule(cands[0], bad, float(np.quantile(rates, 0.3)), float(np.quantile(rates, 0.2)), 2)


@pytest.mark.slow
def test_a_rollout_controller_that_sees_the_future_never_does_worse_than_its_base_policy():
    """The rollout algorithm's improvement (mpc docstring): with the episode's own future and a
    horizon to its end, every episode's grade (the planner's objective) is at least its base
    rule's; with a poor base (batch size 1 above a low load) it is far better on some."""
    env_id = "InferenceGym-Task3-v1"
    env, params = ig.make(env_id)
    key = evaluate.evaluation_key(3)
    rule = poor_rule(env, params, env_id, key, 8)
    grader = graders.grader_name(env_id)

    def grades(traj):
        return np.asarray(graders.grade_episodes(traj, params, grader, 0.0, 1.0, 0.0, 1.0).score)

    base = grades(switch_rule.run_rule_episodes(env, params, rule, key, 8, num_steps=STEPS))
    rollout = grades(run_mpc(env, params, env_id, key, 8, clairvoyant=True, horizon=STEPS,
                                          num_steps=STEPS, candidates=np.stack([rule.low, rule.high]), base=rule))
    assert np.all(rollout >= base - 1e-5)
    assert np.max(rollout - base) > 0.01


@pytest.mark.slow
def test_an_unreachable_margin_leaves_the_base_policy_in_charge(task):
    """mpc, "A margin before leaving the base": while the futures differ no candidate clears a
    margin of 1e9 standard errors, so the controller plays its base rule's own episodes; with no
    margin a poor base (batch size 1 above a low load) is left somewhere. (In the last intervals,
    where a rollout's arrivals no longer count, a gain can be the same on every future: certain,
    it clears any margin.)"""
    env, params = task
    key = evaluate.evaluation_key(6)
    rule = poor_rule(env, params, TASK, key, 4)
    ruled = switch_rule.run_rule_episodes(env, params, rule, key, 4, num_steps=STEPS)
    run = functools.partial(run_mpc, env, params, TASK, key, 4, clairvoyant=False, horizon=HORIZON,
                            samples=4, num_steps=STEPS, base=rule)
    inside = STEPS - HORIZON  # the intervals whose rollouts end before the episode does
    held = jax.tree_util.tree_map(lambda x: x[:, :inside], run(margin=1e9))
    ruled = jax.tree_util.tree_map(lambda x: x[:, :inside], ruled)
    jax.tree_util.tree_map(np.testing.assert_array_equal, held.action, ruled.action)
    np.testing.assert_allclose(np.asarray(held.reward), np.asarray(ruled.reward), rtol=2e-5, atol=1e-6)
    free = run(margin=0.0)
    assert np.any(np.asarray(free.action.batch_size)[:, :inside] != np.asarray(ruled.action.batch_size))


def test_a_margin_needs_a_base_policy_and_sampled_futures(task):
    env, params = task
    key = evaluate.evaluation_key(6)
    cands = mpc.candidate_actions(env, params, TASK)
    rule = switch_rule.make_rule(cands[0], cands[1], 2.0, 1.0, 2)
    refused = ((-1.0, {"base": rule}), (float("nan"), {"base": rule}), (2.0, {}),
               (2.0, {"base": rule, "clairvoyant": True}), (2.0, {"base": rule, "samples": 1}))
    for margin, kwargs in refused:
        with pytest.raises(ValueError, match=f"margin={margin}"):
            run_mpc(env, params, TASK, key, 2, **{"clairvoyant": False, **kwargs}, margin=margin)
