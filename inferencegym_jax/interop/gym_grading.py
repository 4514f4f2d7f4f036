"""Grading what the gymnasium adapters return: step infos stacked into an `evaluate.Trajectory`
for the graders, and `evaluate_policy`, which grades a host-side policy (SB3's, say) on the
evaluator's episodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from gymnasium.vector import AutoresetMode
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.gym_grading needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

import jax
import numpy as np

from inferencegym_jax import evaluate, serving
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.env import EnvParams
from inferencegym_jax.interop.gym_programs import METRIC_NAMES
from inferencegym_jax.interop.gym_vector import GymnasiumVectorEnv

__all__ = ["evaluate_policy", "stack_infos", "trajectory_from_infos"]


def stack_infos(infos: Sequence[Mapping[str, Any]], axis: int = 0) -> dict[str, Any]:
    """Step infos of one structure (a `GymnasiumEnv`'s, or a `GymnasiumVectorEnv`'s batched ones)
    stacked along a new axis `axis` of every array; the vector env's "_k" masks are dropped."""
    out: dict[str, Any] = {}
    for key, value in infos[0].items():
        if key.startswith("_"):
            continue
        if isinstance(value, Mapping):
            out[key] = stack_infos([info[key] for info in infos], axis)
        else:
            out[key] = np.stack([np.asarray(info[key]) for info in infos], axis)
    return out


def trajectory_from_infos(infos: Mapping[str, Any], rewards: Any = None) -> evaluate.Trajectory:
    """An `evaluate.Trajectory` of whole episodes' step infos, for
    `evaluate.grade_trajectory(trajectory, params, task_id)` and the graders. The infos carry no
    TTFT mixture: grade with the episodes' tallies (`GymnasiumVectorEnv.episode_ttft`, as
    `evaluate_policy` does) for the request-level TTFT columns (NaN without); the scores and every
    other metric equal `evaluate.evaluate`'s.

    Args:
      infos: step infos stacked (`stack_infos`) to leading axes (episodes, time).
      rewards: float (episodes, time), the rewards (default zeros: the graders do not read them).
    """
    shape = np.shape(infos["offered_tokens"])
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"infos must be stacked to leading axes (episodes, time), got {shape}")

    def f32(x: Any, dtype: Any = np.float32) -> Any:
        """A host (NumPy) array where the Trajectory's fields say jax.Array: the graders take both."""
        return np.asarray(x, dtype)

    return evaluate.Trajectory(
        reward=f32(np.zeros(shape, np.float32) if rewards is None else rewards),
        reward_components={k: f32(v) for k, v in infos["reward_components"].items()},
        metrics=serving.IntervalMetrics(**{name: f32(infos["metrics"][name]) for name in METRIC_NAMES}),
        action=ServingAction(**{k: f32(infos["applied_action"][k]) for k in KNOBS}),
        clipped=f32(infos["clipped"], bool),
        offered_tokens=f32(infos["offered_tokens"]),
        valid=f32(np.ones(shape, bool), bool),
    )


def evaluate_policy(
    policy: Callable[[np.ndarray], Any], task_id: str | int, key: jax.Array, num_episodes: int, *,
    params: EnvParams | None = None, num_envs: int = 8, **overrides: Any,
) -> evaluate.EvalResult:
    """Grade a host-side policy (SB3, torch, NumPy) on episodes 0 .. num_episodes-1 of the stream
    `key`: the episodes `evaluate.evaluate(env, params, policy, key, num_episodes, task)` runs
    (same keys), so scores pair with the baselines' on `evaluate.evaluation_key(seed)`.

    Args:
      policy: obs float32 (num_envs, OBS_SIZE) -> int grid indices (num_envs, 5).
      num_envs: episodes stepped together (one jitted step and one policy call per interval).
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes={num_episodes!r}: must be an integer >= 1")
    envs = GymnasiumVectorEnv(num_envs, task_id, params=params, autoreset_mode=AutoresetMode.NEXT_STEP, **overrides)
    chunks = []
    for start in range(0, num_episodes, envs.num_envs):
        obs, _ = envs.reset(options={"key": key, "episode": start})
        infos, rewards = [], []
        for _ in range(envs._horizon):  # NEXT_STEP: the last interval's info is the step's own
            obs, reward, _, _, info = envs.step(policy(obs))
            infos.append(info)
            rewards.append(reward)
        count = min(envs.num_envs, num_episodes - start)
        trajectory = trajectory_from_infos(stack_infos(infos, axis=1), np.stack(rewards, axis=1))
        played = (trajectory, envs.episode_ttft())  # NEXT_STEP: the tallies of the episodes just played
        chunks.append(jax.tree_util.tree_map(lambda x, count=count: x[:count], played))
    trajectory, ttft = jax.tree_util.tree_map(lambda *x: np.concatenate(x), *chunks)
    return evaluate.grade_trajectory(trajectory, envs.params, envs.task_id, ttft)

