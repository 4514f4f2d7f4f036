"""Imitation before PPO: the serving setup's teachers (inferencegym_jax.training_setup.teachers: the
causal MPC's or the switching rule's episodes played in the env PPO acts in, and the learner's
labelled by them) and training.imitation's fit of the policy to them."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax.actions import indices_from_action
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.training_setup import ServingSetup, TrainConfig, load_config, make_train
from inferencegym_jax.training_setup.teachers import ControllerTeacher, mpc_teacher
from training import probes
from training.config import PPOConfig
from training.networks import ActorCritic, policy_distribution
from training.ppo import Trainer

TASK = "InferenceGym-Task2-v1"
STEPS, EPISODES = 12, 4
# The MPC at its smallest: the test checks the plumbing, not the plans.
HORIZON, SAMPLES = 3, 2


@pytest.fixture(scope="module")
def short_task():
    return ig.make(TASK, max_steps=STEPS)


def _config(**changes) -> TrainConfig:
    return load_config("ppo_task2_v1", num_envs=8, num_steps=STEPS, num_updates=1, num_minibatches=2,
                       update_epochs=1, history_windows=2, history_window_intervals=3, forecast_intervals=4,
                       imitation_episodes=EPISODES, imitation_epochs=300, **changes)


@pytest.fixture(scope="module")
def trainer(short_task):
    return make_train(_config(), *short_task)


@pytest.fixture(scope="module")
def demos(trainer):
    """The teacher of `trainer`'s kind (the MPC in the wrapped env), at its smallest, on key 3."""
    small = mpc_teacher(trainer.env, trainer.env_params, TASK, EPISODES, HORIZON, SAMPLES)
    return small, jax.jit(small)(jax.random.key(3))


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_the_teacher_plays_the_mpc_episode_in_the_wrapped_env(short_task, trainer, demos):
    env, params = short_task
    teacher, demos = demos
    assert teacher.env == trainer.env and teacher.episodes == EPISODES
    assert demos.obs.shape == (EPISODES, STEPS, trainer.obs_dim)
    candidates = {tuple(a) for a in np.asarray(teacher.controller.candidates).tolist()}
    keys = jax.random.split(jax.random.key(3), EPISODES)
    ctrl = mpc.controller(env, params, TASK, mpc.MPCConfig(horizon=HORIZON, samples=SAMPLES))
    traj = jax.jit(jax.vmap(lambda k: evaluate.run_episode(env, params, ctrl, k, STEPS)))(keys)
    # The MPC's own episode (evaluate.run_episode): its actions (grid indices, candidates only) and rewards.
    np.testing.assert_array_equal(np.asarray(demos.action), np.asarray(indices_from_action(traj.action)))
    assert {tuple(a) for a in np.asarray(demos.action).reshape(-1, 5).tolist()} <= candidates
    np.testing.assert_allclose(np.asarray(demos.reward), np.asarray(traj.reward), rtol=1e-5, atol=1e-6)
    # ... seen through the wrappers: the first observation is the wrapped env's reset observation.
    first, _ = trainer.env.reset_env(jax.random.split(keys[0], 3)[0], params)
    np.testing.assert_array_equal(np.asarray(demos.obs[0, 0]), np.asarray(first))
    assert np.all(np.isfinite(np.asarray(demos.obs))) and np.all(np.isfinite(np.asarray(demos.final_obs)))


@pytest.mark.slow
def test_a_dagger_episode_is_the_learners_labelled_by_the_mpc(short_task, trainer, demos):
    env, params = short_task
    teacher, own = demos
    best = np.asarray(teacher.controller.candidates[0], np.int32)  # the best static configuration
    learner = jax.jit(lambda k: teacher(k, act=baselines.fixed_policy(best)))(jax.random.key(3))
    fixed = jax.jit(jax.vmap(lambda k: evaluate.run_episode(trainer.env, params, baselines.fixed_policy(best), k,
                                                            STEPS)))(jax.random.split(jax.random.key(3), EPISODES))
    np.testing.assert_allclose(np.asarray(learner.reward), np.asarray(fixed.reward), rtol=1e-5, atol=1e-6)
    # Labels are the MPC's choices in the learner's states: at t = 0 the state is the MPC's own.
    np.testing.assert_array_equal(np.asarray(learner.action[:, 0]), np.asarray(own.action[:, 0]))
    candidates = {tuple(a) for a in np.asarray(teacher.controller.candidates).tolist()}
    assert {tuple(a) for a in np.asarray(learner.action).reshape(-1, 5).tolist()} <= candidates
    np.testing.assert_array_equal(np.asarray(learner.obs[:, 0]), np.asarray(own.obs[:, 0]))


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_init_starts_ppo_from_the_policy_fitted_to_the_teacher(trainer, demos):
    _, demos = demos
    config = trainer.config.replace(imitation_rounds=1)
    calls = []

    def teacher(key, act=None):  # the fixture's episodes, for the learner's too (DAgger's round 1)
        calls.append(act)
        return demos

    fixed = Trainer(config, trainer.env, trainer.env_params, warmup_action=np.zeros(5, np.int32), teacher=teacher)
    key, hp = fixed.root_key(), fixed.default_hparams()
    runner = fixed.jit_init(key, hp)
    # Round 1 asked for the learner's episodes (with its greedy policy) and fitted to both sets.
    assert calls[0] is None and callable(calls[1])
    assert float(runner.obs_stats.count) == 2 * EPISODES * STEPS == float(runner.ret_stats.count)
    np.testing.assert_allclose(np.asarray(runner.obs_stats.mean), np.asarray(demos.obs).mean(axis=(0, 1)),
                               rtol=1e-5, atol=1e-6)
    # PPO starts from the fit: 48 intervals, 64x64 networks, it learns the teacher's every choice.
    logits = fixed.network.apply(runner.params, runner.obs_stats.normalize(demos.obs), method=ActorCritic.logits)
    mode = np.asarray(fixed.layout.to_env(policy_distribution(logits).mode()))
    assert np.mean(np.all(mode == np.asarray(demos.action), axis=-1)) >= 0.9
    # The teacher has a key stream of its own: the envs start as in a run without imitation.
    _, env_state = fixed._env_reset(jax.random.split(key, 3)[1])
    jax.tree_util.tree_map(np.testing.assert_array_equal, runner.env_state, env_state)
    runner, metrics = jax.jit(fixed.run_updates, static_argnums=2)(runner, hp, 1)
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())


def test_imitation_needs_grid_actions_and_a_serving_env():
    with pytest.raises(ValueError, match="'imitation_episodes' = 4 needs action_mode = 'absolute'"):
        _config(action_mode="hold")
    with pytest.raises(ValueError, match="'imitation_episodes' = -4 out of range"):
        ServingSetup.from_dict({"imitation_episodes": -4})
    with pytest.raises(ValueError, match="'imitation_horizon' = 0 out of range"):
        ServingSetup.from_dict({"imitation_horizon": 0})
    with pytest.raises(ValueError, match="'imitation_samples' = 0 out of range"):
        ServingSetup.from_dict({"imitation_samples": 0})
    assert ServingSetup().imitation_horizon == mpc.HORIZON
    # What an older checkpoint's teacher ran (and the shipped task 3-v1 and 4-v1 imitations).
    assert ServingSetup().imitation_samples == 4
    # The config reaches the teacher (7 and 5: no default of either).
    teacher = make_train(_config(imitation_horizon=7, imitation_samples=5), *ig.make(TASK, max_steps=STEPS)).teacher
    assert isinstance(teacher, ControllerTeacher) and teacher.episodes == EPISODES
    assert (teacher.controller.config.horizon, teacher.controller.config.samples) == (7, 5)
    probe = probes.ObservationReward()
    setup = TrainConfig(PPOConfig(num_envs=4, num_steps=4, num_minibatches=1), ServingSetup(imitation_episodes=2))
    with pytest.raises(ValueError, match="config key 'imitation_episodes' = 2: imitating the mpc needs a serving env"):
        make_train(setup, probe)


@pytest.mark.slow
def test_the_rule_teacher_plays_the_rule_episode_and_labels_the_learners(short_task, trainer):
    env, params = short_task
    best = np.asarray(graders.load_constants(TASK)["best_static_action"], np.int32)
    other = best.copy()
    other[2] = 2  # another batch size
    rule = switch_rule.make_rule(best, other, 1.0, 0.0, window=3)  # switches once prompt tokens arrive
    teacher = ControllerTeacher(trainer.env, params, EPISODES, rule)
    own = jax.jit(teacher)(jax.random.key(5))
    keys = jax.random.split(jax.random.key(5), EPISODES)
    traj = jax.jit(jax.vmap(lambda k: evaluate.run_episode(env, params, rule, k, STEPS)))(keys)
    np.testing.assert_array_equal(np.asarray(own.action), np.asarray(indices_from_action(traj.action)))
    assert len({tuple(a) for a in np.asarray(own.action).reshape(-1, 5).tolist()}) == 2
    np.testing.assert_allclose(np.asarray(own.reward), np.asarray(traj.reward), rtol=1e-5, atol=1e-6)
    assert own.obs.shape == (EPISODES, STEPS, trainer.obs_dim)
    # The rule decides from the arrivals alone: the learner's episodes get the same labels.
    learner = jax.jit(lambda k: teacher(k, act=baselines.fixed_policy(best)))(jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(learner.action), np.asarray(own.action))


@pytest.mark.slow
def test_the_switch_rule_teacher_is_the_rule_the_baseline_selects(short_task):
    with pytest.raises(ValueError, match="'imitation_teacher' = 'oracle' out of range"):
        ServingSetup.from_dict({"imitation_teacher": "oracle"})
    env, params = short_task
    teacher = make_train(_config(imitation_teacher="switch_rule"), env, params).teacher
    assert isinstance(teacher, ControllerTeacher) and teacher.episodes == EPISODES
    rule, _ = switch_rule.select(env, params, TASK)
    assert teacher.controller.describe() == rule.describe()
