"""The serving setup of PPO training: what `training` trains on, and the imitation teachers.

`training` is env-agnostic: `PPOConfig` holds the algorithm, `training.make_train(config, env,
...)` trains any env with the gymnax call shape. A configs/train file also names the task, its
action layout, memory wrappers, the initial action's prior and the imitation teacher: this
package reads such a file into a `TrainConfig` (`.ppo`, `.setup`), builds the env and the teacher
(`ServingSetup.build`, `teachers`) and the trainer (`make_train`).

    from inferencegym_jax.training_setup import load_config, make_train
    trainer = make_train(load_config("ppo_task3_v1", num_updates=10))

Modules: serving_setup (`ServingSetup`, `TrainingEnv`), teachers (the MPC and switching-rule
teachers), run_config (`TrainConfig`, `load_config`, `read_config`, `make_train`), uniform_start
(the overrides of a run from a uniform start, scripts/ppo_results.py --uniform-start).
"""

from __future__ import annotations

from inferencegym_jax.training_setup.run_config import TrainConfig, from_dict, load_config, make_train, read_config
from inferencegym_jax.training_setup.serving_setup import ServingSetup, TrainingEnv

__all__ = ["ServingSetup", "TrainConfig", "TrainingEnv", "from_dict", "load_config", "make_train", "read_config"]
