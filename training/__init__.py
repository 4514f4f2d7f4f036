"""PPO trainer for inferencegym_jax (PureJaxRL style).

    from training import load_config, make_train
    trainer = make_train(load_config("ppo_task1"))
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())

Modules: config (PPOConfig, TOML loading), networks (actor/critic, factored categorical),
normalize (running statistics), ppo (the env-agnostic Trainer, make_train), envs (what a config
trains on: the task in its action layout, the initial action), loop (checkpointed host loop),
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
