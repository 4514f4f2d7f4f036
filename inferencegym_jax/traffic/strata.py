"""Length strata of a prompt-length law, for the mixed engine's TTFT (`serving.fresh_ttft`).

A class's prompt lengths are taken as the lognormal with its law's mean and mean square, and
represented by 5 strata of probability `LENGTH_STRATA_W`, each at the standard-normal quantile of
its middle (`LENGTH_STRATA_Z`: scipy.stats.norm.ppf of 0.2, 0.55, 0.8, 0.94, 0.99), finest at the
top, where the longest prompts make the TTFT tail. A stratum's length is given relative to the
mean (`length_strata`), so a bin's mean scales it.

Two rules turn a law's strata into an interval's (`workload.WorkloadParams.length_strata`):
  "moments" (v0-v2 tasks, Fleet1-v1): the law's strata as they are, scaled to the interval's mean.
    The interval's prompt sum is itself drawn (`workload`: the normal law of a sum of n lengths), so
    for a few requests the spread of one length is counted twice, and the lognormal of the law's
    two moments ignores the law's clamp: one request drawn at a clamped law's longest prompt puts
    its top stratum at 4.6 times that (experiments/results/lone_replica_misses.json: a lone
    replica at 0.05 req/s saw 0.44 % of its first tokens past 2 s, where its longest prompt
    prefills in 0.6 s).
  "clamped": the same strata with none above the law's longest prompt (`capped_strata` at
    `LengthDist.high` over the interval's mean), the excess raised onto the strata below. A
    replayed trace keeps "moments" (the trace's longest prompt is not kept).
  Two further rules that also drop the double count (the law's own clamped quantiles whatever the
  drawn mean; the spread shrunk by sqrt(1 - 1/n) within the interval's sum) under-stated the TTFT
  tail against the exact scheduler (experiments/crosscheck/README.md, "Length strata"): the
  interval's sum is drawn from a normal law, thin-tailed for a few requests, and the double count
  made up for it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from inferencegym_jax.numerics import safe_div

LENGTH_STRATA_W = (0.4, 0.3, 0.2, 0.08, 0.02)
LENGTH_STRATA_Z = (-0.8416212335729142, 0.12566134685507416, 0.8416212335729143, 1.5547735945968535,
                   2.3263478740408408)


def log_sd_of(mean: Array, mean_sq: Array) -> Array:
    """Log-space standard deviation of the lognormal with mean `mean` and mean square `mean_sq`
    (sqrt(log(m2 / m1^2)), 0 where m2 <= m1^2 or the mean is 0)."""
    ratio = jnp.where(mean > 0, mean_sq / jnp.maximum(mean * mean, 1e-30), 1.0)
    return jnp.sqrt(jnp.log(jnp.maximum(ratio, 1.0)))


def length_strata(log_sd: Array) -> Array:
    """A length at each stratum relative to the mean, float32 (..., 5), of the lognormal of
    log-space standard deviation `log_sd` (...): exp(log_sd z) over its stratum-weighted mean."""
    shape = jnp.exp(log_sd[..., None] * jnp.asarray(LENGTH_STRATA_Z, jnp.float32))
    return shape / jnp.sum(jnp.asarray(LENGTH_STRATA_W, jnp.float32) * shape, axis=-1, keepdims=True)


def strata_of_sums(count: Array, prompt: Array, prompt_sq: Array) -> Array:
    """`length_strata` of the lognormal with the mean and mean square of `count` lengths summing to
    `prompt` [tokens] and their squares to `prompt_sq` [tokens^2] (any equal shapes)."""
    return length_strata(log_sd_of(safe_div(prompt, count), safe_div(prompt_sq, count)))


def capped_strata(strata: Array, cap: Array) -> Array:
    """`strata` (3, 5) relative to an interval's mean with none above `cap` (3,) (relative to the
    mean too; taken as at least 1, the mean itself): the clipped excess is raised onto the strata
    below in proportion to their room to the cap, so the weighted mean (`LENGTH_STRATA_W`) stays 1
    (a cap >= 1 leaves room enough) and the order is kept; float32 (3, 5)."""
    w = jnp.asarray(LENGTH_STRATA_W, jnp.float32)
    cap = jnp.maximum(cap, 1.0)[:, None]
    clipped = jnp.minimum(strata, cap)
    weighted = jnp.sum(w * clipped, axis=-1, keepdims=True)
    return clipped + (cap - clipped) * safe_div(1.0 - weighted, cap - weighted)
