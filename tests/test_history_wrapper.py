"""ArrivalHistoryWrapper: the flat observation plus the arrivals of past windows, reset with the episode."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import default_action_episode  # tests/, which conftest puts on sys.path

import inferencegym_jax as ig
from inferencegym_jax import observation, wrappers
from inferencegym_jax.observation import OBS_SIZE
from inferencegym_jax.traffic import workload

TASK = "InferenceGym-Task2-v1"  # a periodic burst: 10 s of every 60 s
WINDOWS, WIDTH = 4, 3  # [windows], [intervals per window]
run_episode = jax.jit(default_action_episode, static_argnums=(0, 3, 4))


@pytest.fixture(scope="module")
def base():
    return ig.make(TASK)


def test_history_is_the_arrivals_of_each_completed_window_newest_first(base):
    env, params = base
    wrapped = wrappers.ArrivalHistoryWrapper(env, WINDOWS, WIDTH)
    assert wrapped.observation_space(params).shape == (OBS_SIZE + WINDOWS,)
    steps = 20
    obs0, (obs, _, info) = run_episode(wrapped, params, jax.random.key(7), steps)
    base_obs0, (base_obs, _, base_info) = run_episode(env, params, jax.random.key(7), steps)
    obs, obs0 = np.asarray(obs), np.asarray(obs0)
    per_window = float(observation.scales(params).peak_rate * params.server.dt_s * WIDTH)
    before = float(workload.mean_rate(params.workload)) * WIDTH / per_window  # windows before the episode
    np.testing.assert_allclose(obs0[OBS_SIZE:], before, rtol=1e-6)
    # The wrapped env is the same env: its own observation is the base env's, flattened (to
    # float32 rounding: two compiled programs may fuse the normalisation differently).
    np.testing.assert_allclose(obs[:, :OBS_SIZE], np.asarray(jax.vmap(env.flatten_observation, (0, None))(
        base_obs, params)), rtol=1e-6, atol=1e-7)
    arrivals = np.asarray(base_info["arrivals"].count).sum(-1)
    np.testing.assert_array_equal(np.asarray(info["arrivals"].count).sum(-1), arrivals)
    for t in range(steps):
        done = (t + 1) // WIDTH  # windows completed after interval t
        want = np.full(WINDOWS, before)
        for j in range(min(done, WINDOWS)):
            w = done - 1 - j  # the j-th newest completed window covers intervals w*WIDTH .. w*WIDTH+WIDTH-1
            want[j] = arrivals[w * WIDTH:(w + 1) * WIDTH].sum() / per_window
        np.testing.assert_allclose(obs[t, OBS_SIZE:], np.clip(want, 0, 1), rtol=1e-5, err_msg=f"t={t}")
    assert obs.min() >= 0.0 and obs.max() <= 1.0
    assert 0.0 < before < 1.0 and len(np.unique(obs[:, OBS_SIZE])) > 3, "the bursts show"


def test_an_auto_reset_empties_the_history_and_the_final_observation_keeps_it(base):
    env, params = base
    params = params.replace(max_steps_in_episode=jnp.asarray(7, jnp.int32))
    wrapped = wrappers.ArrivalHistoryWrapper(env, WINDOWS, WIDTH)
    _, (obs, state, info) = run_episode(wrapped, params, jax.random.key(3), 9, False)
    obs, final = np.asarray(obs), np.asarray(info["final_observation"])
    assert final.shape == obs.shape
    _, fresh = wrapped.reset(jax.random.key(0), params)
    fresh = np.asarray(wrapped.get_obs(fresh, params))[OBS_SIZE:]
    # interval 6 ends the episode: its final observation has two windows of its own, the next
    # episode's observation none (every window at the schedule's mean)
    assert not np.allclose(final[6, OBS_SIZE:OBS_SIZE + 2], fresh[:2])
    np.testing.assert_allclose(final[6, OBS_SIZE + 2:], fresh[2:])
    np.testing.assert_allclose(obs[6, OBS_SIZE:], fresh)
    assert int(state.age[6]) == 0 and int(state.age[8]) == 2
    np.testing.assert_array_equal(obs[5, OBS_SIZE:], final[5, OBS_SIZE:])  # no reset: the same


def test_jitted_vmapped_history_step_traces_once(base):
    env, params = base
    wrapped = wrappers.ArrivalHistoryWrapper(env, WINDOWS, WIDTH)
    keys = jax.random.split(jax.random.key(0), 8)
    obs, states = jax.vmap(wrapped.reset, in_axes=(0, None))(keys, params)
    actions = jnp.zeros((8, 5), jnp.int32)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(keys, states, actions):
        return jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)

    for _ in range(3):
        obs, states, reward, *_ = step(keys, states, actions)
    chex.assert_shape(obs, (8, OBS_SIZE + WINDOWS))
    chex.assert_tree_all_finite((obs, reward))
    # equal settings, equal wrappers (one compiled program per task and layout)
    assert wrapped == wrappers.ArrivalHistoryWrapper(env, WINDOWS, WIDTH) != wrappers.ArrivalHistoryWrapper(env, 5, 3)


def test_a_history_policy_has_no_stateless_inner_policy_and_bad_settings_are_refused(base):
    env, _ = base
    wrapped = wrappers.ArrivalHistoryWrapper(wrappers.HoldActions(env), WINDOWS, WIDTH)
    assert wrapped.action_mode == "hold" and wrapped.unwrapped is env
    with pytest.raises(ValueError, match="reads past intervals"):
        wrappers.base_action_policy(wrapped, lambda key, obs, params: jnp.zeros(5, jnp.int32))
    with pytest.raises(ValueError, match="windows=0"):
        wrappers.ArrivalHistoryWrapper(env, 0, WIDTH)


@pytest.mark.slow
def test_ppo_trains_and_grades_a_history_policy_in_its_wrapper(tmp_path):
    """history_windows wraps the layout env (hold) outermost. A policy whose prior is the best
    static configuration plays it in every interval (its deterministic mode): graded through the
    wrappers on the same held-out episodes, it scores what the best static baseline scores on
    the plain env, in both evaluation paths (training.evaluation and the sweep's), to float32
    rounding (other compiled programs). The server, which steps sessions interval by interval
    with a stateless policy, refuses it."""
    from inferencegym_jax import evaluate
    from inferencegym_jax.server.core import checkpoint_policy
    from inferencegym_jax.training_setup import from_dict, make_train
    from training.checkpoint import save_checkpoint
    from training.evaluation import evaluate_against_baselines
    from training.sweep import graded_episodes

    config = from_dict(dict(task=TASK, history_windows=WINDOWS, history_window_intervals=WIDTH, action_mode="hold",
                       default_logit=6.0, initial_action="best_static", num_envs=4, num_steps=2, num_minibatches=1,
                       actor_widths=(8,), critic_widths=(8,)))
    trainer = make_train(config)
    assert isinstance(trainer.env, wrappers.ArrivalHistoryWrapper) and isinstance(trainer.env.env,
                                                                                  wrappers.HoldActions)
    assert trainer.obs_dim == OBS_SIZE + WINDOWS
    runner = trainer.jit_init(trainer.root_key())
    table, results, rewards = evaluate_against_baselines(trainer, runner, 2, eval_seed=0,
                                                         baseline_names=["best_static"])
    assert list(table.index) == ["ppo", "best_static"]
    np.testing.assert_array_equal(results["ppo"].metrics["knob_changes"], 0.0)
    np.testing.assert_allclose(results["ppo"].scores, results["best_static"].scores, rtol=1e-6)
    np.testing.assert_allclose(rewards["ppo"], rewards["best_static"], rtol=1e-6)
    graded = graded_episodes(trainer, runner.params, runner.obs_stats, evaluate.evaluation_key(0), 2, TASK)
    np.testing.assert_allclose(graded["score"], results["best_static"].scores, rtol=1e-6)
    save_checkpoint(tmp_path / "run", trainer, runner)
    with pytest.raises(ValueError, match=r"--checkpoint .*run': a policy of ArrivalHistoryWrapper reads past"):
        checkpoint_policy(str(tmp_path / "run"), TASK, trainer.env_params)
    with pytest.raises(ValueError, match="'history_windows' = 4: the arrival history needs a serving env"):
        from training import probes

        config.replace(action_mode="absolute").setup.build(probes.ActionReward())
    with pytest.raises(ValueError, match="keeps a memory of past intervals already"):
        config.setup.build(trainer.env)
