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

Two kinds (`RewardParams.kind`, the task file's `reward.kind`):
  "rates" (v0 tasks): as above; V is the interval's violation *rate*, so a quiet interval with
      one late request of two weighs as much as a burst interval with 20 of 40.
  "increments" (v1 tasks): each term is what the interval adds to the grader's episode sums
      (`graders.interval_sums`), in units of a mean interval's share, so that an episode's
      rewards add up (to first order) to its grade, a ratio of sums that weighs intervals by
      their requests and tokens. V = 1 - requests that met their SLOs / mean requests per
      interval: an episode's mean V is 1 - SLO attainment, with the requests still undecided at
      its end counted as unmet, so a configuration that only delays requests gains nothing. T
      and C as above without their per-term clips; L and S as above. The weighted sum is divided
      by the schedule's peak-to-mean arrival-rate ratio before the [-1, 1] clip, so an interval
      at peak load stays inside the clip: a burst interval is weighed by its requests, not cut.
      The weights are the task grader's (configs/tasks/*_v1.toml). Why, measured on task 2-v1
      (`experiments/mpc_gap.py --version 1 --task 2 --episodes 32 --horizon 10 --objective reward`, the task's
      reward against v0's with `--task-set`): a model-predictive controller planning on v0's
      reward gained +0.002 +- 0.042 over the best static configuration (clairvoyant: +0.097),
      on this reward +0.028 +- 0.043 (+0.125), on the grade itself +0.035 +- 0.041 (+0.157).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax import serving
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.serving.types import judged_metric

# The reward's terms, in the order of RewardParams.weights (alpha .. epsilon); `reward` returns
# its components under these names.
COMPONENTS = ("throughput", "latency", "violations", "cost", "stability")
KINDS = ("rates", "increments")


@struct.dataclass
class RewardParams:
    """Reward weights and references.

    Attributes:
      weights: float32 (5,), (alpha, beta, gamma, delta, epsilon) of throughput, latency, SLO
        violations, cost and knob changes.
      throughput_ref: float32 [tokens/s], the offered output-token rate (mean arrival rate x
        mean output length): T = 1 when the server keeps up on average.
      cost_budget_per_1k: float32 [$ per 1k output tokens].
      requests_ref: float32 [requests], mean arrivals per interval (mean rate x dt): the unit of
        the "increments" kind's V.
      peak_ratio: float32 >= 1, peak over mean scheduled arrival rate (`workload.peak_rate`):
        the "increments" kind's scale.
      kind: static, one of KINDS (module docstring).
    """

    weights: Array
    throughput_ref: Array
    cost_budget_per_1k: Array
    requests_ref: Array
    peak_ratio: Array
    kind: str = struct.field(pytree_node=False, default="rates")


def met_slo(m: serving.IntervalMetrics, server: serving.ServerParams) -> jax.Array:
    """[requests] decided in the interval within their SLOs: the decided ones (admitted, or
    completed under "completion" accounting, + timed out + failed) less the violations."""
    judged = getattr(m, judged_metric(server.slo_accounting))
    return jnp.maximum(judged + m.timeouts + m.failed - m.slo_violations, 0.0)


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
    if params.kind not in KINDS:
        raise ValueError(f"reward kind={params.kind!r} is not one of {list(KINDS)}")
    increments = params.kind == "increments"
    quality = 1.0 - serving.select_profile(server.profiles, applied.quant_tier).quality_loss
    offered = params.throughput_ref * server.dt_s
    throughput = m.good_tokens * quality / offered
    # Spend over budget, in units of the budget for the offered tokens. A per-interval ratio
    # would charge every quiet interval (few tokens, the same GPU-seconds) in full, though busy
    # intervals pay for it in the episode's cost per token.
    spend_budget = params.cost_budget_per_1k * offered / 1000.0
    over = m.cost_usd - params.cost_budget_per_1k * m.output_tokens / 1000.0
    cost = over / spend_budget
    components = {
        "throughput": throughput if increments else jnp.clip(throughput, 0.0, 2.0),
        "latency": m.ttft_slo_ratio,
        "violations": 1.0 - met_slo(m, server) / params.requests_ref if increments else m.slo_violation_rate,
        "cost": cost if increments else jnp.clip(cost, -1.0, 1.0),
        "stability": changed.astype(jnp.float32),
    }
    w = params.weights
    total = (w[0] * components["throughput"] - w[1] * components["latency"] - w[2] * components["violations"]
             - w[3] * components["cost"] - w[4] * components["stability"])
    if increments:
        total = total / params.peak_ratio
    return jnp.clip(total, -1.0, 1.0).astype(jnp.float32), components

