"""PPO on probe environments: value learning, discounting, advantage signs, truncation bootstrapping.

Each probe's value function or best action is known exactly (training/probes.py). Rewards are
not scaled here, so the critic's output is in reward units.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from training import probes
from training.config import PPOConfig
from training.networks import ActorCritic
from training.ppo import compute_gae, make_train

GAMMA = 0.9
PROBE_CONFIG = PPOConfig(
    num_envs=16, num_steps=8, num_updates=60, update_epochs=2, num_minibatches=2,
    lr=3e-3, gamma=GAMMA, ent_coef=0.0, anneal_lr=False, scale_rewards=False, normalize_obs=False,
)


def _train(env, config=PROBE_CONFIG):
    trainer = make_train(config, env)
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())
    return trainer, runner, metrics


def _values(trainer, runner, obs):
    return np.asarray(trainer.network.apply(runner.params, jnp.asarray(obs, jnp.float32)[:, None],
                                            method=ActorCritic.value))


def test_probes_follow_the_env_call_shape():
    for cls in probes.PROBES.values():
        env = cls()
        params = env.default_params
        obs, state = env.reset(jax.random.key(0), params)
        assert env.flatten_observation(obs, params).shape == (1,)
        action = env.action_space(params).sample(jax.random.key(1))
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(2), state, action, params)
        assert reward.dtype == jnp.float32 and "final_observation" in info
        assert bool(terminated) != bool(truncated) or not (bool(terminated) or bool(truncated))
    with pytest.raises(ValueError, match="horizon=0"):
        probes.ConstantReward(horizon=0)


def test_value_of_constant_reward_is_one():
    trainer, runner, _ = _train(probes.ConstantReward())
    assert _values(trainer, runner, [0.0]) == pytest.approx([1.0], abs=0.05)


def test_value_follows_the_observation():
    trainer, runner, _ = _train(probes.ObservationReward())
    assert _values(trainer, runner, [-1.0, 1.0]) == pytest.approx([-1.0, 1.0], abs=0.1)


def test_two_step_value_is_discounted():
    trainer, runner, _ = _train(probes.TwoStepDiscount())
    assert _values(trainer, runner, [0.0, 1.0]) == pytest.approx([GAMMA, 1.0], abs=0.05)


def test_policy_learns_the_rewarded_action_and_advantages_have_the_right_sign():
    env = probes.ActionReward()
    trainer = make_train(PROBE_CONFIG, env)
    runner = trainer.init(trainer.root_key())
    # Advantages of the first rollout: positive for the rewarded action, negative otherwise.
    _, traj, _ = trainer.rollout(runner, trainer.default_hparams(), jax.random.key(3))
    adv, _ = compute_gae(traj.reward, traj.value, traj.next_value, traj.terminated, traj.done,
                         jnp.float32(GAMMA), jnp.float32(0.95))
    chose = np.asarray(traj.action[..., 0]) == 1
    assert chose.any() and (~chose).any()
    assert np.all(np.asarray(adv)[chose] > 0) and np.all(np.asarray(adv)[~chose] < 0)
    # The masked knob is not part of the policy; the env action has index 0 there.
    assert traj.action.shape[-1] == 1
    _, runner, _ = _train(env)
    policy = trainer.policy(runner.params, runner.obs_stats, deterministic=False)
    keys = jax.random.split(jax.random.key(4), 256)
    actions = jax.vmap(lambda k: policy(k, jnp.zeros((1,)), env.default_params))(keys)
    assert actions.shape == (256, 2) and np.all(np.asarray(actions[:, 1]) == 0)
    assert np.mean(np.asarray(actions[:, 0]) == 1) > 0.95


def test_gae_masks_with_terminated_and_bootstraps_truncation():
    """A fixed 5-step horizon, reward 1, value at its true fixed point 1/(1-gamma).

    Bootstrapping the truncated step from V(final obs) gives zero advantage everywhere (the
    value is exact); treating truncation as termination (terminated = done) gives a large
    negative advantage at the horizon, which would teach the critic a wrong value.
    """
    horizon, steps, lam = 5, 10, 0.95
    v = 1.0 / (1.0 - GAMMA)
    done = (np.arange(steps) % horizon == horizon - 1)[:, None]
    rewards = np.ones((steps, 1), np.float32)
    values = np.full((steps, 1), v, np.float32)
    terminated = np.zeros_like(done)
    adv, targets = compute_gae(rewards, values, values, terminated, done, GAMMA, lam)
    np.testing.assert_allclose(adv, 0.0, atol=1e-5)
    np.testing.assert_allclose(targets, v, rtol=1e-6)
    wrong, _ = compute_gae(rewards, values, values, done, done, GAMMA, lam)
    assert float(wrong[horizon - 1, 0]) == pytest.approx(1.0 - v)


def test_trainer_bootstraps_truncated_episodes():
    """Constant reward with a 5-step time limit the agent cannot see: V = 1/(1-gamma) = 10."""
    env = probes.ConstantReward(horizon=5, terminal=False)
    config = PROBE_CONFIG.replace(num_updates=100)
    trainer, runner, _ = _train(env, config)
    right = float(_values(trainer, runner, [0.0])[0])
    trainer, runner, _ = _train(env, config.replace(bootstrap_truncation=False))
    wrong = float(_values(trainer, runner, [0.0])[0])
    assert right == pytest.approx(1.0 / (1.0 - GAMMA), rel=0.1)
    # Treating the time limit as terminal: the mean over the 5 steps of (1 - g^k) / (1 - g).
    expected_wrong = np.mean([(1 - GAMMA ** k) / (1 - GAMMA) for k in range(1, 6)])
    assert wrong == pytest.approx(expected_wrong, rel=0.15)
