"""Sweeps: hyperparameter settings x seeds trained as one vmapped program, ranked on held-out episodes."""

from __future__ import annotations

import chex
import numpy as np
import pytest

from training import probes
from training.config import PPOConfig
from training.ppo import make_train
from training.sweep import grid_settings, parse_grid, run_sweep

CONFIG = PPOConfig(num_envs=8, num_steps=8, num_updates=20, update_epochs=2, num_minibatches=2,
                   scale_rewards=False, ent_coef=0.0, deterministic_eval=False)


def test_sweep_is_one_program_and_finds_the_working_learning_rate():
    trainer = make_train(CONFIG, probes.ActionReward())
    trainer.train = chex.assert_max_traces(trainer.train, n=1)  # one trace for all 2 x 2 runs
    result = run_sweep(trainer, {"lr": [1e-6, 3e-3]}, num_seeds=2, eval_episodes=32)
    runs = result.runs
    assert len(runs) == 4 and sorted(set(runs["seed"])) == [0, 1]
    slow, fast = runs[runs["lr"] == 1e-6], runs[runs["lr"] == 3e-3]
    assert np.all(fast["train_reward"] > 0.9) and np.all(slow["train_reward"] < 0.5)
    assert np.all(fast["eval_reward"] > 0.9)
    assert result.best == {"lr": pytest.approx(3e-3)}
    assert list(result.summary.columns) == ["lr", "train_reward", "eval_reward", "eval_reward_ci95"]



def test_grid_validation():
    assert parse_grid(["lr=1e-4,3e-4", "ent-coef=0,0.01"]) == {"lr": [1e-4, 3e-4], "ent_coef": [0.0, 0.01]}
    with pytest.raises(ValueError, match="NAME=V1,V2"):
        parse_grid(["lr"])
    with pytest.raises(ValueError, match="must be numbers"):
        parse_grid(["lr=fast"])
    with pytest.raises(ValueError, match="'num_envs' is not a traced hyperparameter"):
        grid_settings(CONFIG, {"num_envs": [8.0]})
    with pytest.raises(ValueError, match="'gamma' = 2.0 out of range"):
        grid_settings(CONFIG, {"gamma": [0.9, 2.0]})
    settings = grid_settings(CONFIG, {"lr": [1e-3, 2e-3], "clip_eps": [0.1, 0.2, 0.3]})
    assert len(settings) == 6 and settings[0]["gamma"] == CONFIG.gamma
