"""inferencegym_jax: a JAX-accelerated, pure-functional RL environment for LLM inference serving.

    import inferencegym_jax as ig
    env, params = ig.make("InferenceGym-Task3-v2")   # the newest version of task 3, where control pays
    env, params = ig.make("InferenceGym-Fleet1-v1")  # a fleet: replicas and routing over a day of real traffic

The names below are imported on first use, so that `import inferencegym_jax.cli` (the
`inferencegym` command's `--help`) does not load JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
_EXPORTS = {
    "KNOBS": "inferencegym_jax.actions",
    "ServingAction": "inferencegym_jax.actions",
    "EnvParams": "inferencegym_jax.env",
    "EnvState": "inferencegym_jax.env",
    "InferenceGymEnv": "inferencegym_jax.env",
    "Observation": "inferencegym_jax.observation",
    "make": "inferencegym_jax.registry",
    "all_envs": "inferencegym_jax.registry",
    "registered_envs": "inferencegym_jax.tasks",
}
__all__ = ["KNOBS", "EnvParams", "EnvState", "InferenceGymEnv", "Observation", "ServingAction", "all_envs",
           "make", "registered_envs"]

if TYPE_CHECKING:
    from inferencegym_jax.actions import KNOBS, ServingAction
    from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv
    from inferencegym_jax.observation import Observation
    from inferencegym_jax.registry import all_envs, make
    from inferencegym_jax.tasks import registered_envs


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'inferencegym_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
