"""The per-interval reward: R = alpha T - beta L - gamma V - delta C - epsilon S, clipped to [-1, 1].

docs/DESIGN.md's four terms plus an anti-thrashing term. Each is the per-interval analogue of a
grader component, so the reward an agent maximises is what it is graded on (tasks 3 and 4
weight the terms as their grader weighs its components; configs/tasks/*.toml):
  T = goodput (`serving.goodput`: at admission on v0 tasks, as generated on v1 tasks), quality-
      weighted (INT4 0.96), over the mean offered output tokens per interval; clipped to [0, 2];
  L = mean over requests of min(TTFT / class SLO, 4) / 4, in [0, 1];
  V = SLO-violation rate, in [0, 1];
  C = spend over budget: (cost - budget x output tokens) / (budget x mean offered output
      tokens per interval), clipped to [-1, 1]; its episode mean is (cost per 1k / budget - 1)
      x produced / offered tokens, negative within budget;
  S = 1 when the applied configuration changed from the previous interval (the first
      configuration is free), else 0.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from inferencegym_jax import serving
from inferencegym_jax.actions import ServingAction

Array = Any


# The reward's terms, in the order of RewardParams.weights (alpha .. epsilon); `reward` returns
# its components under these names.
COMPONENTS = ("throughput", "latency", "violations", "cost", "stability")


@struct.dataclass
class RewardParams:
    """Reward weights and references.

    Attributes:
      weights: float32 (5,), (alpha, beta, gamma, delta, epsilon) of throughput, latency, SLO
        violations, cost and knob changes.
      throughput_ref: float32 [tokens/s], the offered output-token rate (mean arrival rate x
        mean output length): T = 1 when the server keeps up on average.
      cost_budget_per_1k: float32 [$ per 1k output tokens].
    """

    weights: Array
    throughput_ref: Array
    cost_budget_per_1k: Array


def reward(
    m: serving.IntervalMetrics, params: RewardParams, server: serving.ServerParams, applied: ServingAction,
    changed: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Per-interval reward in [-1, 1] and its components (the module docstring's T, L, V, C, S).

    Args:
      m: the interval's metrics.
      applied: the configuration applied in the interval (its precision's quality loss).
      changed: bool, whether it differs from the previous interval's.
    """
    quality = 1.0 - serving.select_profile(server.profiles, applied.quant_tier).quality_loss
    offered = params.throughput_ref * server.dt_s
    throughput = jnp.clip(m.good_tokens * quality / offered, 0.0, 2.0)
    # Spend over budget, in units of the budget for the offered tokens. A per-interval ratio
    # would charge every quiet interval (few tokens, the same GPU-seconds) in full, though busy
    # intervals pay for it in the episode's cost per token.
    spend_budget = params.cost_budget_per_1k * offered / 1000.0
    over = m.cost_usd - params.cost_budget_per_1k * m.output_tokens / 1000.0
    cost = jnp.clip(over / spend_budget, -1.0, 1.0)
    components = {
        "throughput": throughput,
        "latency": m.ttft_slo_ratio,
        "violations": m.slo_violation_rate,
        "cost": cost,
        "stability": changed.astype(jnp.float32),
    }
    w = params.weights
    total = (w[0] * components["throughput"] - w[1] * components["latency"] - w[2] * components["violations"]
             - w[3] * components["cost"] - w[4] * components["stability"])
    return jnp.clip(total, -1.0, 1.0).astype(jnp.float32), components

