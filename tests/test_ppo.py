"""PPO building blocks (GAE, sampling, normaliser, network layout), the action layouts a config
trains in, and short runs on real tasks."""

from __future__ import annotations

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import wrappers
from inferencegym_jax.training_setup import TrainConfig, make_train
from inferencegym_jax.training_setup import from_dict as serving_config
from training import probes
from training.networks import (
    MASKED_LOGIT,
    ActionLayout,
    ActorCritic,
    orthogonal,
    policy_distribution,
    sample_actions,
)
from training.normalize import RunningStats
from training.ppo import Trainer, compute_gae


def _config(**keys) -> TrainConfig:
    """A training config of a serving task: PPOConfig and serving setup keys together."""
    return serving_config(keys)


def training_env(config: TrainConfig, env=None, env_params=None):
    """What the config's serving setup builds (the env in its layout, prior, warm-up action)."""
    return config.setup.build(env, env_params)


def _gae_reference(r, v, nv, term, done, gamma, lam):
    adv = np.zeros_like(r)
    last = np.zeros_like(r[0])
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * nv[t] * (1.0 - term[t]) - v[t]
        last = delta + gamma * lam * (1.0 - done[t]) * last
        adv[t] = last
    return adv


def test_gae_matches_a_reference_loop():
    rng = np.random.default_rng(0)
    t, n = 12, 5
    r, v, nv = (rng.normal(size=(t, n)).astype(np.float32) for _ in range(3))
    done = rng.random((t, n)) < 0.3
    term = done & (rng.random((t, n)) < 0.5)
    adv, targets = compute_gae(r, v, nv, term, done, 0.97, 0.9)
    expected = _gae_reference(r, v, nv, term.astype(np.float32), done.astype(np.float32), 0.97, 0.9)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, expected + v, rtol=1e-5, atol=1e-5)


def test_sampling_matches_the_distribution_and_never_picks_padding():
    layout = ActionLayout((3, 1, 5))
    assert layout.active == (0, 2) and layout.width == 5
    raw = jnp.asarray([[0.5, -1.0, 2.0, 9.0, 9.0], [0.0, 1.0, -1.0, 0.3, 2.0]])
    logits = jnp.where(layout.valid(), raw, MASKED_LOGIT)
    samples = jax.vmap(lambda k: sample_actions(k, logits))(jax.random.split(jax.random.key(0), 40_000))
    probs = np.asarray(jax.nn.softmax(logits, -1))
    for knob in range(2):
        freq = np.bincount(np.asarray(samples[:, knob]), minlength=5) / samples.shape[0]
        np.testing.assert_allclose(freq, probs[knob], atol=0.01)
    assert np.all(np.asarray(samples[:, 0]) < 3)
    full = layout.to_env(samples[:3])
    assert full.shape == (3, 3) and np.all(np.asarray(full[:, 1]) == 0)
    dist = policy_distribution(logits)
    assert np.isfinite(float(dist.entropy())) and np.isfinite(float(dist.log_prob(samples[0])))


def test_masked_knobs_are_not_in_the_policy():
    env, params = ig.make("InferenceGym-Task1-v0")
    layout = ActionLayout(env.action_space(params).nvec)
    assert layout.active == (0, 2)  # kv_budget, batch_size
    net = ActorCritic(layout, (8,), (8,))
    variables = net.init(jax.random.key(0), jnp.zeros((1, 21)))
    logits, value = net.apply(variables, jnp.zeros((4, 21)))
    assert logits.shape == (4, 2, 13) and value.shape == (4,)
    assert np.all(np.asarray(logits[:, 0, 10:]) == MASKED_LOGIT)  # kv_budget has 10 values
    with pytest.raises(ValueError, match="no knob with more than one choice"):
        ActionLayout((1, 1))


def test_running_stats_merge_equals_the_pooled_moments():
    rng = np.random.default_rng(1)
    a, b = rng.normal(2.0, 3.0, (100, 4)), rng.normal(-1.0, 0.5, (37, 4))
    stats = RunningStats.create((4,))
    stats = stats.merge(RunningStats.of(jnp.asarray(a), (4,))).update(jnp.asarray(b))
    pooled = np.concatenate([a, b])
    np.testing.assert_allclose(stats.mean, pooled.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats.var, pooled.var(0), rtol=1e-3)
    assert float(stats.count) == pytest.approx(137, abs=1e-3)


@pytest.mark.parametrize("shape", [(7, 64), (64, 64), (64, 3), (1, 4)])
def test_orthogonal_init_is_flaxs_without_lapack(shape):
    import flax.linen as nn

    key = jax.random.key(3)
    q = orthogonal(1.5)(key, shape)
    np.testing.assert_allclose(q, nn.initializers.orthogonal(1.5)(key, shape), atol=2e-5)
    small = min(shape)
    gram = q.T @ q if shape[0] >= shape[1] else q @ q.T
    np.testing.assert_allclose(gram, 1.5**2 * np.eye(small), atol=1e-4)
    with pytest.raises(ValueError, match="2-D"):
        orthogonal(1.0)(key, (2, 3, 4))


def test_vmapped_training_program_calls_no_lapack():
    # jaxlib's LAPACK QR deadlocks XLA:CPU when several vmapped QRs run at once
    # (scripts/lapack_qr_deadlock.py); a sweep vmaps `train`, network initialisation included.
    config = _config(task="InferenceGym-Task1-v0", num_envs=4, num_steps=2, num_updates=1, update_epochs=1,
                       num_minibatches=1, actor_widths=(8, 8), critic_widths=(8, 8))
    trainer = make_train(config)
    keys = jnp.stack([trainer.root_key()] * 4)
    hps = jax.tree_util.tree_map(lambda x: jnp.full((4,), x), trainer.default_hparams())
    # LAPACK calls are custom calls from lowering on (`stablehlo.custom_call @lapack_sgeqrf_ffi`
    # for a QR): the lowered program shows them without compiling it.
    lowered = jax.jit(jax.vmap(trainer.train)).lower(keys, hps).as_text()
    targets = set(re.findall(r"custom_call @(\w+)", lowered))
    assert not {t for t in targets if "lapack" in t}, targets


def test_short_run_on_task1_is_finite_reproducible_and_traces_once():
    config = _config(task="InferenceGym-Task1-v0", num_envs=8, num_steps=4, num_updates=2, update_epochs=1,
                       num_minibatches=2, actor_widths=(16,), critic_widths=(16,), desync_envs=True)
    trainer = make_train(config)
    trainer.update_step = chex.assert_max_traces(trainer.update_step, n=1)
    runner = trainer.jit_init(trainer.root_key())
    # Envs start spread over the episode (desync_envs), not all at interval 0.
    times = np.asarray(runner.env_state.time)
    assert len(set(times.tolist())) > 1 and times.max() < int(trainer.env_params.max_steps_in_episode)
    hp = trainer.default_hparams()
    runner_a, metrics = trainer.jit_run_updates(runner, hp, 2)
    runner_b, _ = trainer.jit_run_updates(runner, hp, 2)  # cached: no second trace
    chex.assert_tree_all_finite((runner_a.params, metrics))
    chex.assert_trees_all_equal(runner_a.params, runner_b.params)
    assert int(runner_a.update) == 2
    assert set(metrics) >= {"reward", "entropy", "value_loss", "actor_loss", "approx_kl", "grad_norm"}
    assert metrics["reward"].shape == (2,)
    # The policy acts on the env's structured observation and returns a valid grid action.
    policy = trainer.policy(runner_a.params, runner_a.obs_stats)
    obs, _ = trainer.env.reset(jax.random.key(0), trainer.env_params)
    action = policy(jax.random.key(1), obs, trainer.env_params)
    assert trainer.env.action_space(trainer.env_params).contains(np.asarray(action))


def _assert_initial_mode_keeps_the_default_configuration(trainer, nvec):
    """Relative and hold modes act through a wrapper of the task, and default_logit makes "keep
    the knobs in force" the initial mode: from reset, the task's default configuration."""
    env, params = trainer.env, trainer.env_params
    assert isinstance(env, wrappers.KnobActions) and env.action_mode == trainer.env_config.action_mode
    assert trainer.nvec == trainer.layout.nvec == nvec
    obs, state = env.reset(jax.random.key(0), params)
    runner = trainer.jit_init(trainer.root_key())
    action = trainer.policy(runner.params, runner.obs_stats)(jax.random.key(1), obs, params)
    np.testing.assert_array_equal(action, wrappers.initial_action(env, params, "default"))
    default = np.asarray(ig.actions.indices_from_action(params.default_action))
    np.testing.assert_array_equal(env.base_action(action, env.knobs_in_force(state, params), params)[0],
                                  np.where(np.asarray(env.unwrapped.action_space(params).nvec) > 1, default, 0))


def test_relative_mode_trains_through_the_relative_wrapper():
    config = _config(task="InferenceGym-Task2-v0", action_mode="relative", default_logit=2.0, num_envs=4,
                       num_steps=2, num_minibatches=1)
    # down / stay / up for kv_budget, spec_length, batch_size
    _assert_initial_mode_keeps_the_default_configuration(make_train(config), (3, 3, 3, 1, 1))


def test_hold_mode_trains_through_the_hold_wrapper():
    config = _config(task="InferenceGym-Task2-v0", action_mode="hold", default_logit=3.0, num_envs=4,
                       num_steps=2, num_minibatches=1)
    # hold + the grid, for kv_budget, spec_length, batch_size
    _assert_initial_mode_keeps_the_default_configuration(make_train(config), (11, 6, 14, 1, 1))


def test_given_envs_are_trained_in_the_configs_layout():
    env, params = ig.make("InferenceGym-Task2-v0")
    hold = _config(task="InferenceGym-Task2-v0", action_mode="hold", default_logit=3.0, num_envs=4,
                     num_steps=2, num_minibatches=1)
    made, given = training_env(hold), training_env(hold, env)  # a plain serving env is wrapped
    assert isinstance(given.env, wrappers.HoldActions) and given.env.env is env
    np.testing.assert_array_equal(made.initial_action, given.initial_action)
    assert training_env(hold, given.env).env is given.env  # already in the layout: as is
    with pytest.raises(ValueError, match="already in the 'hold' layout"):
        training_env(hold.replace(action_mode="relative"), given.env)
    with pytest.raises(ValueError, match="needs an env whose observation has the knobs in force"):
        training_env(hold, probes.ActionReward())
    absolute = training_env(hold.replace(action_mode="absolute"), env, params)
    assert absolute.env is env and absolute.params is params
    np.testing.assert_array_equal(absolute.warmup_action, wrappers.initial_action(env, params, "default"))
    probe = training_env(hold.replace(action_mode="absolute"), probes.ActionReward())  # no prior on a probe
    assert probe.initial_action is None and probe.warmup_action.tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"initial_action = \[5, 0\] is not an int vector in the env's action"):
        Trainer(hold.ppo, probe.env, probe.params, initial_action=np.asarray([5, 0]), initial_logit=1.0)


@pytest.mark.parametrize(("initial_action", "action_mode"),
                         [("default", "absolute"), ("best_static", "absolute"), ("best_static", "hold")])
def test_initial_policy_plays_the_chosen_configuration(initial_action, action_mode):
    from inferencegym_jax import graders

    task = "InferenceGym-Task2-v0"
    config = _config(task=task, default_logit=2.0, initial_action=initial_action, action_mode=action_mode,
                       num_envs=4, num_steps=2, num_minibatches=1)
    trainer = make_train(config)
    env, params = trainer.env, trainer.env_params
    if initial_action == "default":
        target = np.asarray(ig.actions.indices_from_action(params.default_action))
    else:
        target = np.asarray(graders.load_constants(task)["best_static_action"])
    base_nvec = getattr(env, "unwrapped", env).action_space(params).nvec
    target = np.where(np.asarray(base_nvec) > 1, target, 0)
    runner = trainer.jit_init(trainer.root_key())
    obs, _ = env.reset(jax.random.key(0), params)
    policy = wrappers.base_action_policy(env, trainer.policy(runner.params, runner.obs_stats))
    np.testing.assert_array_equal(policy(jax.random.key(1), obs, params), target)
    # A bias, not a constraint: every grid entry keeps a positive probability.
    logits = trainer.network.apply(runner.params, jnp.zeros((trainer.obs_dim,)), method=ActorCritic.logits)
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))[trainer.layout.valid()]
    assert probs.min() > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("version, history_windows", [(0, 0), (1, 2)])
def test_burst_phase_script_reads_a_checkpoint(tmp_path, version, history_windows):
    """experiments/burst_phases.py grades a checkpoint's policy with knobs replaced, a policy of the
    serving env (v0) and one of the arrival-history wrapper (v1), which acts in the wrapper."""
    import subprocess
    import sys
    from pathlib import Path

    from training.checkpoint import save_checkpoint

    config = _config(task=f"InferenceGym-Task2-v{version}", num_envs=4, num_steps=2, num_updates=1,
                       update_epochs=1, num_minibatches=1, actor_widths=(8,), critic_widths=(8,),
                       history_windows=history_windows)
    trainer = make_train(config)
    save_checkpoint(tmp_path / "run", trainer, trainer.jit_init(trainer.root_key()))
    script = Path(__file__).resolve().parents[1] / "experiments" / "burst_phases.py"
    out = subprocess.run([sys.executable, str(script), "--task", "2", "--version", str(version), "--episodes", "4",
                          "--specs", "1", "--batches", "7", "--checkpoint", str(tmp_path / "run"),
                          "--switch", "batch_size=8", "--switch-fraction", "0", "1"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.startswith(f"InferenceGym-Task2-v{version}, 4 held-out episodes")
    assert "| 1 | 96 |" in out and "policy, burst: mean reward" in out and "policy, all" in out
    assert re.search(r"\| batch_size \| 7 \| 0\.\d{4} \| 0\.\d{4} \|", out), out
    assert re.search(r"\| batch_size \| 128 \| 100% \| 0\.\d{4} \| [+-]\d\.\d{4} ± \d\.\d{4} \|", out), out
    # never switched: the best static configuration itself, up to float rounding across programs
    assert re.search(r"\| batch_size \| 128 \| 0% \| 0\.\d{4} \| [+-]0\.0000 ± 0\.0000 \|", out), out
    if history_windows:  # the wrapper's policy reads the arrival-rate EMA off its flat observation
        # experiments/burst_phases.py is a script, run from its folder in a subprocess
        check = f"""
import jax, jax.numpy as jnp, numpy as np
import burst_phases
import inferencegym_jax as ig
from inferencegym_jax import observation
from inferencegym_jax.training_setup import make_train, read_config
env, params = ig.make({config.task!r})
_, arrival_rate, _ = burst_phases.trained_policy({str(tmp_path / "run")!r}, env, params, 4,
                                                  jax.random.split(jax.random.key(0), 2))
wrapped = make_train(read_config({str(tmp_path / "run")!r})).env
obs, state = wrapped.reset(jax.random.key(0), params)
for t in range(30):  # into the periodic burst's rise, below the peak rate the observation clips at
    obs, state, *_ = wrapped.step(jax.random.key(t + 1), state, jnp.asarray([9, 1, 7, 0, 0]), params)
    np.testing.assert_allclose(arrival_rate(obs), observation.observe(state.env_state).arrival_rate_ema, rtol=1e-5)
"""
        subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, cwd=script.parent)


def test_uniform_start_is_prior_free_with_sets_on_top():
    """scripts/ppo_results.py --uniform-start (the uniform-start results table) runs
    training_setup.uniform_start.run_overrides: on each v1 task 2-4 the shipped config loads with
    no prior on any configuration (hold actions whose initial policy favours keeping the knobs in
    force and sets every grid value alike), no imitation and no forecast, the settings the flag
    documents and 5x the shipped updates of when the table was measured (task 4-v1's have grown
    since), and a --set pair still wins over them."""
    from inferencegym_jax.cli.common import ppo_config_name
    from inferencegym_jax.training_setup import load_config
    from inferencegym_jax.training_setup.uniform_start import UNIFORM_BUDGET, run_overrides

    for n, shipped_updates, uniform_updates in ((2, 200, 1000), (3, 200, 1000), (4, 1600, 2000)):
        task = f"InferenceGym-Task{n}-v1"
        shipped = load_config(ppo_config_name(task))
        assert shipped.default_logit > 0 and shipped.imitation_episodes > 0  # the prior the flag removes
        assert shipped.num_updates == shipped_updates
        config = load_config(ppo_config_name(task), **run_overrides(shipped, True))
        assert (config.action_mode, config.initial_action, config.imitation_episodes) == ("hold", "default", 0)
        assert (config.forecast_intervals, config.lr, config.ent_coef) == (0, 3e-3, 0.0)
        trainer = make_train(config)
        active = trainer.layout.active
        bias = np.asarray(trainer.network.initial_logits).reshape(len(active), trainer.layout.width)
        for row, i in zip(bias, active):  # choice 0 keeps the value in force, choice c >= 1 sets grid index c - 1
            assert row[0] == config.default_logit == 5.0 and not row[1:trainer.nvec[i]].any(), (task, row)
        assert config.num_updates == uniform_updates and config.task == task
        assert run_overrides(shipped, True, {"num_updates": 7})["num_updates"] == 7
        assert run_overrides(shipped, False, {"lr": 0.1}) == {"lr": 0.1}
    # A task without a measured budget gets UNIFORM_BUDGET x its shipped updates.
    task1 = load_config("ppo_task1")
    assert run_overrides(task1, True)["num_updates"] == UNIFORM_BUDGET * task1.num_updates
