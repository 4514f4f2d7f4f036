"""PPO configuration: one frozen dataclass of the algorithm's settings, loaded from TOML.

    config = load_config("path/to/ppo.toml", lr=1e-3)  # a file of PPOConfig keys, with overrides
    config = PPOConfig(num_envs=64, num_updates=10)    # or directly

`PPOConfig` holds the algorithm only: nothing here knows what the env is. The files in
`configs/train/` also name what is trained (the task, its action layout, memory wrappers, the
imitation teacher, the initial action): those keys belong to the serving setup,
`inferencegym_jax.training_setup`, whose `load_config` splits such a file into a PPOConfig and a
`ServingSetup`. `load_config` here refuses them with a message saying so. An env's own settings
travel beside the PPOConfig through the `EnvConfig` protocol (checkpoints store and verify both).

Fields are of two kinds:

* **traced** (`HParams`): numbers that change no shape (learning rate, entropy coefficient,
  clip range, gamma, lambda, ...). They enter the jitted program as arrays, so one compiled
  program trains any of them, and `jax.vmap` over an `HParams` batch runs a sweep.
* **static**: everything that sets a shape or a loop length (envs, steps, minibatches, epochs,
  network widths, updates), plus the seed. Changing one recompiles.

Unknown keys, wrong types and out-of-range values raise `ValueError` naming the key.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, Self

import jax.numpy as jnp
from flax import struct

from inferencegym_jax.files import shipped

TRACED = "traced"
# Where a configs/train file's other keys go: named in messages (training imports nothing of it).
SETUP_MODULE = "inferencegym_jax.training_setup"


def _traced(default: float, doc: str, lo: float, hi: float, lo_open: bool = False) -> Any:
    return dataclasses.field(default=default, metadata={"kind": TRACED, "doc": doc, "range": (lo, hi, lo_open)})


def static_field(default: Any, doc: str, check: Any = None, allowed: str = "") -> Any:
    """A static (shape-setting or host-side) dataclass field with its doc and range check, as
    `field_values` validates (also used by the serving setup's fields)."""
    return dataclasses.field(default=default, metadata={"kind": "static", "doc": doc, "check": check,
                                                        "allowed": allowed})


@struct.dataclass
class HParams:
    """The traced hyperparameters, float32 scalars (or a leading sweep axis under vmap).

    Attributes:
      lr: Adam learning rate at update 0 (annealed linearly to 0 when `anneal_lr`).
      ent_coef: weight of the policy entropy bonus.
      clip_eps: PPO ratio clip range.
      gamma: discount per control interval.
      gae_lambda: GAE lambda.
      vf_coef: weight of the value loss.
      max_grad_norm: global gradient-norm clip.
    """

    lr: Any
    ent_coef: Any
    clip_eps: Any
    gamma: Any
    gae_lambda: Any
    vf_coef: Any
    max_grad_norm: Any


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """A PPO run. `hparams()` gives the traced part; the rest is static."""

    # --- static: the shapes of the program, the loop, the seed
    # jax.random.key keeps the low 32 bits of a seed: a larger one would repeat a smaller one.
    seed: int = static_field(0, "training seed: every key comes from evaluate.training_key(seed)",
                        lambda v: 0 <= v <= 2**32 - 1, "in [0, 2**32 - 1]")
    num_envs: int = static_field(256, "parallel environments", lambda v: v >= 1, ">= 1")
    num_steps: int = static_field(64, "rollout length per update [intervals]", lambda v: v >= 1, ">= 1")
    num_updates: int = static_field(100, "PPO updates in the run", lambda v: v >= 1, ">= 1")
    update_epochs: int = static_field(4, "passes over each rollout", lambda v: v >= 1, ">= 1")
    num_minibatches: int = static_field(4, "minibatches per epoch (must divide num_envs * num_steps)",
                                   lambda v: v >= 1, ">= 1")
    actor_widths: tuple[int, ...] = static_field((64, 64), "hidden widths of the actor MLP",
                                            lambda v: len(v) >= 1 and all(w >= 1 for w in v),
                                            "a non-empty list of ints >= 1")
    critic_widths: tuple[int, ...] = static_field((64, 64), "hidden widths of the critic MLP",
                                             lambda v: len(v) >= 1 and all(w >= 1 for w in v),
                                             "a non-empty list of ints >= 1")
    # The fit to a teacher's demonstrations before PPO (make_train's `teacher`, training.imitation):
    # the algorithm's side of imitation; which teacher and how many of its episodes is the env's.
    imitation_epochs: int = static_field(200, "epochs of fitting to the teacher's episodes (each over minibatches "
                                              "of minibatch_size intervals); used only with a teacher",
                                         lambda v: v >= 1, ">= 1")
    imitation_rounds: int = static_field(0, "DAgger rounds after the first fit: the fitted policy plays the "
                                            "teacher's number of episodes, the teacher's choice in each state it "
                                            "reached joins the data, and the fit goes on for imitation_epochs; "
                                            "0: the teacher's own episodes only",
                                         lambda v: 0 <= v <= 64, "in [0, 64]")
    imitation_lr: float = static_field(1e-3, "Adam learning rate of the fit to the teacher's episodes",
                                       lambda v: 0.0 < v <= 1.0, "in (0, 1]")
    # Off by default, as the shipped configs and the README's results were trained. It was
    # switched off when 256 envs x 3 seeds vmapped hung on tasks 2 and 3 (every thread waiting on
    # a futex): the LAPACK QR deadlock of `networks._orthonormal_columns`, gone since the networks
    # stopped calling LAPACK (3 seeds, task 2, desync on: finished 2 of 2).
    desync_envs: bool = static_field(False, "start env i k_i ~ U{0..horizon-1} intervals into an episode (default "
                                       "action), so rollouts do not all cover the same episode phase")
    anneal_lr: bool = static_field(True, "anneal the learning rate linearly to 0 over the run")
    normalize_obs: bool = static_field(True, "normalise observations by running mean/std")
    scale_rewards: bool = static_field(True, "divide rewards by the running std of the discounted return")
    bootstrap_truncation: bool = static_field(True, "bootstrap truncated episodes from V(final obs); "
                                               "False treats truncation as termination (wrong; for tests)")
    checkpoint_every: int = static_field(25, "updates between checkpoints (host loop)", lambda v: v >= 1, ">= 1")
    eval_episodes: int = static_field(256, "held-out episodes of the final graded evaluation",
                                 lambda v: v >= 1, ">= 1")
    deterministic_eval: bool = static_field(True, "evaluate the policy's mode (True) or sample it (False)")
    num_devices: int = static_field(1, "devices the env batch is split across (inferencegym_jax.sharding; on CPU "
                                  "start with XLA_FLAGS=--xla_force_host_platform_device_count=N)",
                               lambda v: v >= 1, ">= 1")

    # --- traced: HParams
    lr: float = _traced(3e-4, "Adam learning rate", 0.0, 1.0, lo_open=True)
    ent_coef: float = _traced(0.01, "entropy bonus weight", 0.0, 1.0)
    clip_eps: float = _traced(0.2, "PPO clip range", 0.0, 1.0, lo_open=True)
    gamma: float = _traced(0.99, "discount per interval", 0.0, 1.0)
    gae_lambda: float = _traced(0.95, "GAE lambda", 0.0, 1.0)
    vf_coef: float = _traced(0.5, "value-loss weight", 0.0, 100.0)
    max_grad_norm: float = _traced(0.5, "global gradient-norm clip", 0.0, 1e6, lo_open=True)

    @property
    def batch_size(self) -> int:
        """Transitions per update: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def total_env_steps(self) -> int:
        return self.batch_size * self.num_updates

    def hparams(self) -> HParams:
        """The traced fields as float32 scalars."""
        return HParams(**{f: jnp.float32(getattr(self, f)) for f in traced_fields()})

    def replace(self, **changes: Any) -> PPOConfig:
        """A validated copy with some fields changed."""
        return from_dict({**to_dict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value."""
        return to_dict(self)

    def to_toml(self) -> str:
        """The resolved config as TOML that `load_config` reads back to an equal config."""
        return "# resolved PPO config (training/config.py documents every field)\n" + fields_toml(self)

    def describe(self) -> str:
        """One line per field: name = value (traced or static)."""
        return describe_fields(self)


class EnvConfig(Protocol):
    """What the env a Trainer acts in was built from (a serving setup), beside its PPOConfig.

    Flat keys, none of them a PPOConfig key; checkpoints store them with the PPOConfig and, on
    load, rebuild them with `from_dict` (defaults for keys an older file lacks) and compare."""

    def to_dict(self) -> dict[str, Any]:
        """Key -> a TOML-writable value (bool, int, float, str or a tuple of those)."""
        ...

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        """The validated config of such a mapping; ValueError naming a bad key."""
        ...


def traced_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(HParams))


def static_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(PPOConfig) if f.metadata["kind"] != TRACED)


def field_names(cls: Any) -> tuple[str, ...]:
    """The field names of a config dataclass."""
    return tuple(f.name for f in dataclasses.fields(cls))


def toml_value(v: Any) -> str:
    """`v` (bool, int, float, str, tuple of those) as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def fields_toml(config: Any) -> str:
    """A config dataclass's fields as TOML lines `name = value  # doc`."""
    return "".join(f"{f.name} = {toml_value(getattr(config, f.name))}  # {f.metadata['doc']}\n"
                   for f in dataclasses.fields(config))


def describe_fields(config: Any) -> str:
    """One line per field of a config dataclass: name = value [kind]."""
    width = max(len(f.name) for f in dataclasses.fields(config))
    return "\n".join(f"  {f.name.ljust(width)} = {getattr(config, f.name)!r}  [{f.metadata['kind']}]"
                     for f in dataclasses.fields(config))


def to_dict(config: Any) -> dict[str, Any]:
    """Field name -> value of a config dataclass."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """The value converted to the field's type, or ValueError naming the key."""
    origin = typing.get_origin(annotation)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"config key {name!r} must be a bool, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config key {name!r} must be an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config key {name!r} must be a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"config key {name!r} must be a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, int) for x in value):
            raise ValueError(f"config key {name!r} must be a list of integers, got {value!r}")
        return tuple(value)
    return value


def field_values(cls: Any, raw: Mapping[str, Any]) -> dict[str, Any]:
    """`raw`'s values (every key a field of the config dataclass `cls`) converted to the fields'
    types and range-checked (`static_field`'s check, `_traced`'s range); ValueError naming the key."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, value in raw.items():
        value = _coerce(name, value, hints[name])
        meta = fields[name].metadata
        if meta["kind"] == TRACED:
            lo, hi, lo_open = meta["range"]
            if not ((lo < value if lo_open else lo <= value) and value <= hi):
                bracket = "(" if lo_open else "["
                raise ValueError(f"config key {name!r} = {value!r} out of range {bracket}{lo}, {hi}]")
        elif meta["check"] is not None and not meta["check"](value):
            raise ValueError(f"config key {name!r} = {value!r} out of range: must be {meta['allowed']}")
        values[name] = value
    return values


def unknown_key_error(name: str, allowed: Any) -> ValueError:
    """The error of a key no PPOConfig field has: it may be a serving setup's key (task, action
    layout, memory wrappers, imitation teacher, initial action), which moved out of PPOConfig."""
    return ValueError(f"unknown config key {name!r}; PPOConfig's keys: {sorted(allowed)}. PPOConfig holds the "
                      "algorithm only: the task, action layout, history, forecast, imitation teacher and initial "
                      f"action keys of a configs/train file moved to the serving setup: load such a file with "
                      f"{SETUP_MODULE}.load_config")


def from_dict(raw: Mapping[str, Any]) -> PPOConfig:
    """A validated PPOConfig from a flat mapping (TOML tables are not used)."""
    allowed = field_names(PPOConfig)
    for name in raw:
        if name not in allowed:
            raise unknown_key_error(name, allowed)
    config = PPOConfig(**field_values(PPOConfig, raw))
    if config.num_envs % config.num_devices:
        raise ValueError(f"config key 'num_devices' = {config.num_devices} must divide num_envs = {config.num_envs}")
    if config.batch_size % config.num_minibatches:
        raise ValueError(
            f"config key 'num_minibatches' = {config.num_minibatches} must divide "
            f"num_envs * num_steps = {config.batch_size}"
        )
    return config


def shipped_configs() -> list[str]:
    """Names of the configs in configs/train/ (without .toml)."""
    folder = shipped("configs").joinpath("train")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def read_toml(source: str | Path) -> dict[str, Any]:
    """The flat mapping of a TOML file path or a shipped config name (configs/train/NAME.toml).

    Raises:
      ValueError: unknown name, missing file, unreadable TOML.
    """
    path = Path(source)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ValueError(f"config file {str(path)!r} does not exist")
        text = path.read_text()
    else:
        name = str(source)
        if name not in shipped_configs():
            raise ValueError(f"unknown config {name!r}: not a file, nor one of {shipped_configs()}")
        text = shipped("configs").joinpath("train", f"{name}.toml").read_text()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config {str(source)!r} is not valid TOML: {err}") from None


def load_config(source: str | Path, **overrides: Any) -> PPOConfig:
    """A PPOConfig from a TOML file of PPOConfig keys (path or shipped name), with overrides.

    A configs/train file also names the env (task, ...): load it with the serving setup's
    `load_config` (`inferencegym_jax.training_setup`), which splits it.

    Raises:
      ValueError: unknown name, unreadable TOML, unknown key (a serving setup's key says so),
        wrong type, out-of-range value.
    """
    return from_dict({**read_toml(source), **overrides})
