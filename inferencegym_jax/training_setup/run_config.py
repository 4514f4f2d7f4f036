"""A configs/train file as two configs: the algorithm's (`training.PPOConfig`) and the serving
setup's (`ServingSetup`), and the trainer they make.

    from inferencegym_jax.training_setup import load_config, make_train
    config = load_config("ppo_task3_v1", num_updates=10)   # a TrainConfig: .ppo and .setup
    trainer = make_train(config)                           # a training.Trainer on the task
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())

The files keep one flat table of keys; `from_dict` sends each to the config that has it (a key
neither has is refused, naming both key lists). A `TrainConfig` reads like the one flat config
it was (`config.num_envs`, `config.task`: each name is a field of exactly one of the two) and
writes back to one flat TOML file. A checkpoint stores the same flat keys (`training.checkpoint`:
the PPOConfig's, then the setup's), so checkpoints written before the split load unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferencegym_jax.training_setup.serving_setup import ServingSetup
from training.checkpoint import read_raw_config
from training.config import PPOConfig, field_names, read_toml
from training.config import from_dict as ppo_from_dict
from training.ppo import Trainer
from training.ppo import make_train as make_ppo_train


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A configs/train file: the PPO algorithm's settings and the serving setup's.

    Attributes:
      ppo: the `training.PPOConfig` (what the trainer runs).
      setup: the `ServingSetup` (what it trains on, and the imitation teacher).

    Every other attribute is the field of that name of `ppo` or `setup` (their names are disjoint).
    """

    ppo: PPOConfig
    setup: ServingSetup

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("ppo", "setup"):  # copy and pickle probe before __init__
            raise AttributeError(name)
        for part in (self.ppo, self.setup):
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(f"'TrainConfig' has no field {name!r} (neither PPOConfig nor ServingSetup has it)")

    def replace(self, **changes: Any) -> TrainConfig:
        """A validated copy with some keys (of either part) changed."""
        return from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Every key of both parts: the PPOConfig's, then the setup's."""
        return {**self.ppo.to_dict(), **self.setup.to_dict()}

    def to_toml(self) -> str:
        """The resolved file, both parts as one flat table, that `load_config` reads back to an equal config."""
        return ("# resolved training config: PPOConfig keys (training/config.py), then the serving setup's "
                "(inferencegym_jax/training_setup/serving_setup.py)\n" + self.ppo.to_toml().split("\n", 1)[1]
                + self.setup.to_toml())

    def describe(self) -> str:
        """One line per key: name = value (traced or static), the PPOConfig's then the setup's."""
        return self.ppo.describe() + "\n" + self.setup.describe()


def from_dict(raw: Mapping[str, Any]) -> TrainConfig:
    """A validated TrainConfig from one flat mapping: each key to the part that has it.

    Raises:
      ValueError: a key neither part has (both lists named), or a part's own ValueError.
    """
    ppo_keys, setup_keys = field_names(PPOConfig), field_names(ServingSetup)
    for name in raw:
        if name not in ppo_keys and name not in setup_keys:
            raise ValueError(f"unknown config key {name!r}; PPOConfig's keys: {sorted(ppo_keys)}; the serving "
                             f"setup's keys: {sorted(setup_keys)}")
    ppo = ppo_from_dict({k: v for k, v in raw.items() if k in ppo_keys})
    setup = ServingSetup.from_dict({k: v for k, v in raw.items() if k in setup_keys})
    return TrainConfig(ppo, setup)


def load_config(source: str | Path, **overrides: Any) -> TrainConfig:
    """A configs/train file (a TOML path or a shipped name, `ppo_task3_v1`) with overrides.

    Raises:
      ValueError: unknown name, unreadable TOML, unknown key, wrong type, out-of-range value.
    """
    return from_dict({**read_toml(source), **overrides})


def read_config(directory: str | Path) -> TrainConfig:
    """The config a checkpoint in `directory` was written with (checksum verified, validated);
    ValueError as `training.checkpoint.read_config`'s."""
    raw = read_raw_config(directory)
    try:
        return from_dict(raw)
    except ValueError as err:
        raise ValueError(f"checkpoint in {directory} holds a config this program rejects: {err}") from None


def make_train(config: TrainConfig, env: Any = None, env_params: Any = None) -> Trainer:
    """The PPO program of `config`: `training.make_train` on what `config.setup.build(env,
    env_params)` makes (the task wrapped by action_mode and memory wrappers, the prior of
    initial_action with default_logit, the warm-up action, the teacher), the setup kept as the
    trainer's `env_config` (checkpoints store and verify it)."""
    made = config.setup.build(env, env_params)
    return make_ppo_train(config.ppo, made.env, made.params, initial_action=made.initial_action,
                          initial_logit=config.setup.default_logit, warmup_action=made.warmup_action,
                          teacher=made.teacher, env_config=config.setup)
