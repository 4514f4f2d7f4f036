"""PPO trainer for inferencegym_jax (PureJaxRL style), env-agnostic.

    from training import PPOConfig, make_train
    trainer = make_train(PPOConfig(num_envs=64), env, env_params)   # any env with the gymnax call shape
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())

A serving task from a configs/train file (its action layout, memory wrappers, prior and imitation
teacher) is built by the serving setup: `inferencegym_jax.training_setup.make_train(
inferencegym_jax.training_setup.load_config("ppo_task3_v1"))`. training imports nothing of it, nor
of the controllers (tests/test_layers.py).

Modules: config (PPOConfig, TOML loading, the EnvConfig protocol), networks (actor/critic,
factored categorical), normalize (running statistics), ppo (the Trainer, make_train), imitation
(the fit to a teacher's demonstrations, the Teacher protocol), loop (checkpointed host loop),
checkpoint, sweep, probes, evaluation (graded comparison with baselines), plots.
Names are imported lazily so that `inferencegym --help` does not load JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PPOConfig": "training.config",
    "HParams": "training.config",
    "load_config": "training.config",
    "make_train": "training.ppo",
    "Trainer": "training.ppo",
    "RunnerState": "training.ppo",
    "run_training": "training.loop",
    "run_sweep": "training.sweep",
    "save_checkpoint": "training.checkpoint",
    "load_checkpoint": "training.checkpoint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")
