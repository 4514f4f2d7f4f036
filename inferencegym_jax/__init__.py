"""inferencegym_jax: a JAX-accelerated, pure-functional RL environment for LLM inference serving."""

from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.env import EnvParams, EnvState, InferenceGymEnv, Observation
from inferencegym_jax.tasks import make, registered_envs

__version__ = "0.1.0"
__all__ = [
    "KNOBS",
    "EnvParams",
    "EnvState",
    "InferenceGymEnv",
    "Observation",
    "ServingAction",
    "make",
    "registered_envs",
]
