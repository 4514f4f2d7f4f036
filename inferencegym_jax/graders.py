"""Graders: pure, jittable reductions of a trajectory to a score in [0, 1] per episode.

`grade(trajectory, params, task_id)` grades a whole batch (leading axes (episodes, time)) in
one call; each task's grader is a function of one episode, vmapped over episodes. Every
component is in [0, 1] and the score is their weighted sum. A masked interval
(`trajectory.valid` False) counts for nothing; an episode with no valid interval scores 0.

Per-episode quantities (sums over valid intervals t):
  served fraction x = sum_t good_tokens_t / sum_t offered_tokens_t: the output tokens of the
    requests admitted within their TTFT and TPOT SLOs, weighted by the precision's quality
    (INT4 tokens count 0.96), over the output tokens of the requests that arrived. Requests
    that missed their SLO, timed out or failed earn nothing. x = 1 when nothing was offered.
  SLO attainment a = 1 - violations / requests decided (admitted, or on a task with "completion"
    SLO accounting completed (serving.goodput), + timed out + failed).
  OOM-free fraction m = 1 - intervals with an out-of-memory restart / intervals.
  cost per 1k output tokens c, against the task budget B.
  knob changes: intervals whose applied configuration differs from the previous one.

Components:
  throughput = clip((x - x_random) / (x_optimum - x_random), 0, 1) on a "best_static" task: the
    served fraction normalised between the random policy (0) and the best static configuration
    found by exhaustive search (1), the Atari-style "human-normalised" convention with the
    searched optimum as the reference; clip(x, 0, 1) on an "oracle" task (below). The constants
    come from `data/grader_constants.json`, written by `scripts/grader_constants.py`.
  slo (task 3) / ttft (task 2) = a.
  memory = m.
  cost = clip(2 - c / B, 0, 1): 1 within budget, 0 at twice the budget or more.
  stability = 1 - knob changes / (intervals - 1): anti-thrashing.

Task graders (the `grader` key of each task config):
  "throughput"   (task 1): throughput.
  "ttft_memory"  (task 2): ttft x memory. Memory compliance is a hard constraint that gates
    the latency score: a policy out of memory in 10 % of the intervals keeps 90 % of it.
  "multi_tenant" (task 3, 4): 0.40 throughput + 0.30 slo + 0.20 cost + 0.10 stability
    (docs/DESIGN.md's weights).

Score scale (the `score_scale` key of each task config):
  "best_static" (v0 tasks): the grader's value, clipped to [0, 1]. Its throughput component is
    capped at the best static configuration, so no policy scores above it on task 1.
  "oracle" (v1 tasks): score = max((g - g_floor) / (g_oracle - g_floor), 0), with g the grader's
    value (throughput unnormalised), g_floor the random policy's mean and g_oracle the mean, on
    the constants' keys, of the better per episode of two clairvoyant controllers: the
    model-predictive oracle (`inferencegym_jax.control.mpc`) and the episode's best static configuration
    in hindsight (`generate.grader_constants`). Oracles score ~1, a policy better than the best
    static configuration scores higher than it, and nothing caps the score at 1: a policy may
    beat these oracles, which are bounds only over their candidate configurations and horizon.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax import validation
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.env import EnvParams
from inferencegym_jax.files import shipped
from inferencegym_jax.serving.types import judged_metric

# Components of each grader and their weights; "ttft_memory" multiplies its components.
GRADER_WEIGHTS: dict[str, dict[str, float]] = {
    "throughput": {"throughput": 1.0},
    "ttft_memory": {"ttft": 1.0, "memory": 1.0},
    "multi_tenant": {"throughput": 0.40, "slo": 0.30, "cost": 0.20, "stability": 0.10},
}
PRODUCT_GRADERS = frozenset({"ttft_memory"})
# Fields of a trajectory the graders read: name -> rank of its leaves (episodes, time[, ...]).
REQUIRED_FIELDS: dict[str, int] = {"metrics": 2, "action": 2, "offered_tokens": 2, "valid": 2}
METRIC_FIELDS = ("good_tokens", "output_tokens", "slo_violations", "admitted", "completed", "timeouts", "failed",
                 "oom", "cost_usd")


@struct.dataclass
class Grade:
    """Grades of a batch of episodes.

    Attributes:
      score: float32 (N,), >= 0: in [0, 1] on "best_static" tasks, ~1 for the oracle on "oracle"
        tasks (module docstring).
      breakdown: dict of float32 (N,) components, each in [0, 1].
      served_fraction: float32 (N,), x of the module docstring.
      slo_attainment: float32 (N,), a.
      oom_free: float32 (N,), m.
      cost_per_1k: float32 (N,) [$ per 1k output tokens].
      knob_changes: float32 (N,) [intervals with a configuration change].
      num_valid: float32 (N,) [valid intervals].
    """

    score: Array
    breakdown: dict[str, Array]
    served_fraction: Array
    slo_attainment: Array
    oom_free: Array
    cost_per_1k: Array
    knob_changes: Array
    num_valid: Array


@functools.cache
def _load_constants_file() -> dict[str, Any]:
    text = shipped("data").joinpath("grader_constants.json").read_text()
    return json.loads(text)


def load_constants(task_id: str) -> dict[str, Any]:
    """The normalising constants of one task (served fraction of random and of the optimum)."""
    table = _load_constants_file()["tasks"]
    if task_id not in table:
        raise ValueError(
            f"no grader constants for task {task_id!r}; known: {sorted(table)}. "
            "Run scripts/grader_constants.py after registering a task."
        )
    return table[task_id]


def grader_name(task_id: str) -> str:
    from inferencegym_jax.tasks import task_config

    return task_config(task_id).grader


def score_scale(task_id: str) -> str:
    """The task's score scale, one of task_config.SCORE_SCALES (module docstring)."""
    from inferencegym_jax.tasks import task_config

    return task_config(task_id).score_scale


def scale_constants(task_id: str) -> tuple[float, float, float | None, float | None]:
    """(x_random, x_optimum, floor, ceiling) of `grade_episodes` for a registered task: the
    throughput normalisation, and the score's (None, None on a "best_static" task; on an
    "oracle" task the served fraction itself, (0, 1), and the grader's random and oracle means)."""
    consts = load_constants(task_id)
    if score_scale(task_id) == "best_static":
        return consts["x_random"], consts["x_optimum"], None, None
    return 0.0, 1.0, consts["score_floor"], consts["score_ceiling"]


def normalise(value: Array, floor: float | Array | None, ceiling: float | Array | None) -> Array:
    """A grader's value as a score: clipped to [0, 1] without a floor and ceiling, else
    max((value - floor) / (ceiling - floor), 0) (module docstring, "Score scale")."""
    if floor is None:
        return jnp.clip(value, 0.0, 1.0)
    span = jnp.maximum(jnp.float32(ceiling) - jnp.float32(floor), 1e-6)
    return jnp.maximum((value - jnp.float32(floor)) / span, 0.0)


def _get(traj: Any, name: str) -> Any:
    return traj.get(name) if isinstance(traj, Mapping) else getattr(traj, name, None)


def check_trajectory(trajectory: Any) -> tuple[int, int]:
    """Host-side structure checks; ValueError names the missing or misshapen field.

    Returns (episodes, time).
    """
    shapes: dict[str, tuple[int, int]] = {}
    for name, rank in REQUIRED_FIELDS.items():
        value = _get(trajectory, name)
        if value is None:
            raise ValueError(f"trajectory is missing field {name!r}; required: {sorted(REQUIRED_FIELDS)}")
        for leaf_path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            where = name + jax.tree_util.keystr(leaf_path)
            if jnp.ndim(leaf) < rank:
                raise ValueError(f"trajectory.{where} must have leading axes (episodes, time), "
                                 f"got shape {jnp.shape(leaf)}")
            episodes, time = jnp.shape(leaf)[:2]
            shapes[where] = (episodes, time)
    metrics = _get(trajectory, "metrics")
    for field in METRIC_FIELDS:
        if _get(metrics, field) is None:
            raise ValueError(f"trajectory.metrics is missing field {field!r}")
    action = _get(trajectory, "action")
    for field in KNOBS:
        if _get(action, field) is None:
            raise ValueError(f"trajectory.action is missing knob {field!r}; required: {list(KNOBS)}")
    lead = shapes["valid"]
    for where, shape in shapes.items():
        if shape != lead:
            raise ValueError(f"trajectory.{where} has leading shape {shape}, expected {lead} (episodes, time) "
                             "like valid")
    return lead


def judged_field(params: EnvParams) -> str:
    """The metric counting the requests an interval judged against their SLOs: "admitted", or
    "completed" under "completion" SLO accounting (serving.types.judged_metric)."""
    return judged_metric(params.server.slo_accounting)


# The per-episode sums the statistics are ratios of (`episode_sums`): name -> what it adds up.
SUM_FIELDS = ("good", "offered", "decided", "violations", "oom", "tokens", "cost", "changes", "pairs", "num_valid")


def interval_sums(metrics: Any, offered_tokens: Array, quant_tier: Array, params: EnvParams) -> dict[str, Array]:
    """What one interval (or each interval of a time axis, elementwise) adds to the episode's
    sums: quality-weighted goodput [tokens], offered [tokens], decided and violating requests,
    OOM intervals, output tokens, cost [$]. Knob changes need two intervals (`episode_sums`)."""
    tier = jnp.clip(jnp.round(jnp.asarray(quant_tier)).astype(jnp.int32), 0, 2)
    quality = 1.0 - params.server.profiles.quality_loss[tier]
    return {
        "good": quality * _get(metrics, "good_tokens"),
        "offered": jnp.asarray(offered_tokens),
        "decided": _get(metrics, judged_field(params)) + _get(metrics, "timeouts") + _get(metrics, "failed"),
        "violations": _get(metrics, "slo_violations"),
        "oom": _get(metrics, "oom"),
        "tokens": _get(metrics, "output_tokens"),
        "cost": _get(metrics, "cost_usd"),
    }


def episode_sums(traj: Any, params: EnvParams) -> dict[str, Array]:
    """The SUM_FIELDS of one episode (arrays with a time axis first) over its valid intervals;
    `changes` counts consecutive valid intervals whose configurations differ, of `pairs`."""
    action = _get(traj, "action")
    valid = _get(traj, "valid").astype(jnp.float32)
    per_interval = interval_sums(_get(traj, "metrics"), _get(traj, "offered_tokens"), _get(action, "quant_tier"),
                                 params)
    sums = {name: jnp.sum(valid * value) for name, value in per_interval.items()}
    knobs = jnp.stack([jnp.asarray(x, jnp.float32) for x in jax.tree_util.tree_leaves(action)], axis=-1)
    both_valid = valid[1:] * valid[:-1]
    changed = jnp.any(jnp.abs(knobs[1:] - knobs[:-1]) > 1e-6, axis=-1).astype(jnp.float32)
    return {**sums, "changes": jnp.sum(both_valid * changed), "pairs": jnp.sum(both_valid), "num_valid": jnp.sum(valid)}


def statistics_from_sums(sums: dict[str, Array], params: EnvParams) -> dict[str, Array]:
    """Quantities of the module docstring from an episode's SUM_FIELDS."""
    offered, decided, tokens = sums["offered"], sums["decided"], sums["tokens"]
    served = jnp.where(offered > 0, sums["good"] / jnp.maximum(offered, 1e-9), 1.0)
    attainment = jnp.where(decided > 0, 1.0 - sums["violations"] / jnp.maximum(decided, 1e-9), 1.0)
    oom_free = 1.0 - sums["oom"] / jnp.maximum(sums["num_valid"], 1.0)
    cost_per_1k = sums["cost"] / jnp.maximum(tokens / 1000.0, 1e-9)
    return {
        "served_fraction": jnp.clip(served, 0.0, 2.0),
        "slo_attainment": jnp.clip(attainment, 0.0, 1.0),
        "oom_free": jnp.clip(oom_free, 0.0, 1.0),
        "cost_per_1k": jnp.minimum(cost_per_1k, 1e6),
        "cost_score": jnp.clip(2.0 - cost_per_1k / params.reward.cost_budget_per_1k, 0.0, 1.0),
        "knob_changes": sums["changes"],
        "stability": 1.0 - sums["changes"] / jnp.maximum(sums["pairs"], 1.0),
        "num_valid": sums["num_valid"],
    }


def episode_statistics(traj: Any, params: EnvParams) -> dict[str, Array]:
    """Quantities of the module docstring for one episode (arrays with a time axis first).

    Args:
      traj: a Trajectory (or mapping) of one episode.
      params: the task's EnvParams (quality loss per precision tier, cost budget).
    """
    return statistics_from_sums(episode_sums(traj, params), params)


def components(stats: dict[str, Array], grader: str, x_random: float | Array,
               x_optimum: float | Array) -> dict[str, Array]:
    """A grader's components from one episode's (or a batch's) statistics; each in [0, 1]."""
    span = jnp.maximum(x_optimum - x_random, 1e-6)
    throughput = jnp.clip((stats["served_fraction"] - x_random) / span, 0.0, 1.0)
    available = {
        "throughput": throughput,
        "ttft": stats["slo_attainment"],
        "slo": stats["slo_attainment"],
        "memory": stats["oom_free"],
        "cost": stats["cost_score"],
        "stability": stats["stability"],
    }
    return {name: available[name] for name in GRADER_WEIGHTS[grader]}


def combine(comps: dict[str, Array], grader: str) -> Array:
    """The score from a grader's components: their weighted sum, or product for PRODUCT_GRADERS."""
    if grader in PRODUCT_GRADERS:
        out: float | Array = 1.0
        for value in comps.values():
            out = out * value
        return jnp.asarray(out)  # a no-op on the product, an array; typed as one
    return jnp.asarray(sum(GRADER_WEIGHTS[grader][k] * v for k, v in comps.items()))


def value_from_sums(sums: dict[str, Array], params: EnvParams, grader: str) -> Array:
    """The grader's value of an episode from its SUM_FIELDS sums, before any normalisation and
    with the served fraction itself as the throughput (the "oracle" scale's g): float32 ()."""
    return combine(components(statistics_from_sums(sums, params), grader, 0.0, 1.0), grader)


def grade_episodes(
    trajectory: Any, params: EnvParams, grader: str, x_random: float | Array, x_optimum: float | Array,
    floor: float | Array | None = None, ceiling: float | Array | None = None,
) -> Grade:
    """Jittable core of `grade`: explicit grader name and normalising constants. Without
    `floor` and `ceiling` the score is the grader's value clipped to [0, 1] ("best_static");
    with them, max((value - floor) / (ceiling - floor), 0) ("oracle")."""
    if grader not in GRADER_WEIGHTS:
        raise ValueError(f"grader={grader!r} is not one of {sorted(GRADER_WEIGHTS)}")
    def one(traj: dict[str, Any]) -> Grade:
        stats = episode_statistics(traj, params)
        comps = components(stats, grader, jnp.float32(x_random), jnp.float32(x_optimum))
        score = normalise(combine(comps, grader), floor, ceiling)
        has_data = stats["num_valid"] > 0
        comps = {k: jnp.where(has_data, v, 0.0) for k, v in comps.items()}
        return Grade(
            score=jnp.where(has_data, score, 0.0).astype(jnp.float32),
            breakdown=comps,
            served_fraction=stats["served_fraction"],
            slo_attainment=stats["slo_attainment"],
            oom_free=stats["oom_free"],
            cost_per_1k=stats["cost_per_1k"],
            knob_changes=stats["knob_changes"],
            num_valid=stats["num_valid"],
        )

    parts = {name: _get(trajectory, name) for name in REQUIRED_FIELDS}
    return jax.vmap(one)(parts)


def grade(trajectory: Any, params: EnvParams, task_id: str) -> Grade:
    """Grade every episode of `trajectory` (leading axes (episodes, time)) for a registered task.

    Jittable in `trajectory` and `params` (task_id is static); outside jit the trajectory's
    structure is checked first.

    Raises:
      ValueError: a missing field or a wrong shape (named), or a task without constants.
    """
    if validation.is_concrete(trajectory):
        check_trajectory(trajectory)
    return grade_episodes(trajectory, params, grader_name(task_id), *scale_constants(task_id))


def feedback(grade_: Grade, task_id: str) -> list[str]:
    """One readable line per episode (host side)."""
    g = jax.tree_util.tree_map(np.asarray, grade_)
    lines = []
    for i in range(g.score.shape[0]):
        if g.num_valid[i] == 0:
            lines.append("score 0.000: no valid intervals in this episode (empty or fully masked), nothing to grade")
            continue
        parts = [f"{k} {float(v[i]):.2f}" for k, v in g.breakdown.items()]
        lines.append(
            f"score {float(g.score[i]):.3f}: " + ", ".join(parts)
            + f" | served {100 * float(g.served_fraction[i]):.0f}% of offered tokens within SLO,"
            f" SLO attainment {100 * float(g.slo_attainment[i]):.1f}%,"
            f" ${float(g.cost_per_1k[i]):.5f}/1k tokens, {int(g.knob_changes[i])} knob changes,"
            f" {100 * (1 - float(g.oom_free[i])):.0f}% intervals with OOM"
        )
    return lines


def to_dataframe(grade_: Grade, policy: str | None = None) -> Any:
    """Per-episode grades as a pandas DataFrame (host side)."""
    import pandas as pd

    g = jax.tree_util.tree_map(np.asarray, grade_)
    frame = pd.DataFrame({
        "score": g.score,
        **{f"breakdown.{k}": v for k, v in g.breakdown.items()},
        "served_fraction": g.served_fraction,
        "slo_attainment": g.slo_attainment,
        "oom_free": g.oom_free,
        "cost_per_1k": g.cost_per_1k,
        "knob_changes": g.knob_changes,
        "num_valid": g.num_valid,
    })
    if policy is not None:
        frame.insert(0, "policy", policy)
    frame.index.name = "episode"
    return frame
