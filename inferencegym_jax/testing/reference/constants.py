"""The reference's own constants, each with its unit and the JAX constant it mirrors.

None is imported from the JAX side: each is typed here again, so that a wrong shared value
cannot pass the parity test (tests/test_reference.py fails when any of these differs from the
simulator's). Everything task-specific (profiles, SLOs, rates, limits) is read from the params.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32

# ----------------------------------------------------------------------------- numerics
# Smallest amount treated as present [the quantity's own unit: requests, tokens, s]; ratios of
# smaller denominators are 0. Mirrors numerics.EPS.
EPS = F32(1e-6)

# ----------------------------------------------------------------------------- structure
# Priority classes [classes]. Mirrors workload.NUM_CLASSES.
NUM_CLASSES = 3
# Uniforms a reset uses (burst phase or trace offset, initial burst state) [draws].
# Mirrors workload.RESET_DRAWS.
RESET_DRAWS = 2

# ----------------------------------------------------------------------------- roofline
# Draft lengths of the tokens-per-step table, the knots of its linear interpolation [tokens].
# Mirrors profiles.SPEC_LENGTHS (the x of perf_model.tokens_per_step's jnp.interp).
SPEC_TABLE_LENGTHS = np.asarray([0.0, 1.0, 2.0, 4.0, 8.0], F32)
# Prefill chunk at which admission estimates the engine's prefill throughput [tokens].
# Mirrors perf_model.PREFILL_REF_TOKENS.
PREFILL_REF_TOKENS = F32(2048.0)

# ----------------------------------------------------------------------------- serving
# A binary knob (prefill_disagg) is on above this [knob units]. Mirrors the 0.5 thresholds of
# serving.engine.reconfigure.
SWITCH_ON = F32(0.5)
# GPUs billed while disaggregated: the decode GPU and the prefill GPU [GPUs]. Mirrors the 2.0
# of serving.engine.reconfigure.
DISAGG_GPUS = F32(2.0)
# TTFT counts at most this many SLOs in the latency ratio [SLOs]. Mirrors
# serving.latency.TTFT_RATIO_CAP.
TTFT_RATIO_CAP = F32(4.0)
# Percentiles of TTFT reported [fraction of requests]. Mirrors the (0.5, 0.99) of
# serving.latency.latency_statistics.
TTFT_QUANTILES = (0.5, 0.99)
SECONDS_PER_HOUR = F32(3600.0)  # [s/h], GPU prices are per hour

# ----------------------------------------------------------------------------- env
# Arrival-rate EMA weight of the newest interval [1]. Mirrors env.RATE_EMA_WEIGHT.
RATE_EMA_WEIGHT = F32(0.3)
# A knob counts as changed when it moved by more than this [knob units]. Mirrors the 1e-6 of
# env.InferenceGymEnv._transition.
CHANGE_TOLERANCE = F32(1e-6)
# Reward: the throughput term is clipped to [0, THROUGHPUT_MAX] [offered rates], the cost term
# and the total to [-1, 1]. Mirrors the clips of reward.reward.
THROUGHPUT_MAX = F32(2.0)
TOKENS_PER_BUDGET_UNIT = F32(1000.0)  # [tokens], the cost budget is per 1k output tokens

# ----------------------------------------------------------------------------- knobs
# The action grid, knob by knob in this order. Mirrors actions.KNOBS and actions.GRID
# (KV_BUDGETS, SPEC_LENGTHS, BATCH_SIZES, DISAGG, TIERS).
KNOBS = ("kv_budget", "spec_length", "batch_size", "prefill_disagg", "quant_tier")
KNOB_GRID = (
    np.asarray([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], F32),  # [fraction]
    np.asarray([0, 1, 2, 4, 8], F32),  # [tokens]
    np.asarray([1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512], F32),  # [sequences]
    np.asarray([0, 1], F32),  # off / on
    np.asarray([0, 1, 2], F32),  # FP16, INT8, INT4
)
# Physical range of each knob [knob units]. Mirrors actions.KNOB_RANGES.
KNOB_RANGES = ((0.1, 1.0), (0.0, 8.0), (1.0, 512.0), (0.0, 1.0), (0.0, 2.0))
# Highest precision tier index. Mirrors the clip to [0, 2] of serving.types.select_profile.
MAX_TIER = 2

# ----------------------------------------------------------------------------- observation
# Queues beyond this are off the log scale [requests]. Mirrors observation.QUEUE_SCALE.
QUEUE_SCALE = F32(10_000.0)
# Scale of prompt lengths [tokens]. Mirrors observation.CONTEXT_SCALE.
CONTEXT_SCALE = F32(8192.0)
# Latencies are observed up to this many SLOs [SLOs]. Mirrors observation.TTFT_SLOS.
TTFT_SLOS = F32(4.0)
# Scale of the running batch [sequences]. Mirrors observation.MAX_BATCH.
MAX_BATCH = F32(512.0)
# Floor of the arrival-rate scale [req/s]. Mirrors the 1e-6 of observation's arrival_rate_ema.
RATE_SCALE_FLOOR = F32(1e-6)
# The cost scale bills this many GPUs for the whole episode [GPUs]. Mirrors the 2.0 of
# observation.scales.
MAX_COST_GPUS = F32(2.0)
BYTES_PER_GB = F32(1e9)  # [B/GB], memory is observed in GB

# ----------------------------------------------------------------------------- mixed engine
# Per-request overhead on TTFT of the mixed engine [s]: 9.36 ms of client-side overhead plus
# 1.90 ms from arrival to scheduled, measured on a real vLLM 0.11 server (experiments/crosscheck/
# published_vllm.json, "request_overhead"). Mirrors mixed.MEASURED_REQUEST_OVERHEAD_S.
MEASURED_REQUEST_OVERHEAD_S = F32(0.00936 + 0.00190)
# Where the chunk time g(k) is tabulated, as fractions of the chunk [1]. Mirrors
# iteration.KNOT_FRACTIONS.
KNOT_FRACTIONS = (1.0 / 32.0, 1.0 / 8.0, 1.0 / 4.0, 1.0 / 2.0, 1.0)
# Smallest knot spacing a slope divides by [tokens]. Mirrors the 1e-6 of iteration.chunk_time_s.
MIN_KNOT_WIDTH = F32(1e-6)
# Prompt-length strata: probability of each [1] and the standard-normal quantile of its middle
# [standard deviations] (scipy.stats.norm.ppf of 0.2, 0.55, 0.8, 0.94, 0.99). Mirrors
# strata.LENGTH_STRATA_W and strata.LENGTH_STRATA_Z.
STRATA_W = np.asarray([0.4, 0.3, 0.2, 0.08, 0.02], F32)
STRATA_Z = np.asarray([-0.8416212335729142, 0.12566134685507416, 0.8416212335729143, 1.5547735945968535,
                       2.3263478740408408], F32)
# The iteration chain's load is kept below this share of the prefill share of full iterations [1].
# Mirrors fresh_ttft.RHO_CLIP.
RHO_CLIP = F32(0.9)
# 3-point Gauss-Legendre rule on [0, 1]: nodes [1] and weights [1] of the average over the
# position in the iteration in flight. Mirrors fresh_ttft.GL_U and fresh_ttft.GL_W.
GAUSS_LEGENDRE_U = (0.1127016653792583, 0.5, 0.8872983346207417)
GAUSS_LEGENDRE_W = (5.0 / 18.0, 8.0 / 18.0, 5.0 / 18.0)
# Below this total completion hazard [1] the pool's mean presence is its first-order series
# 1 - h / 2. Mirrors the 1e-4 of mixed.mean_presence.
PRESENCE_SERIES_BELOW = F32(1e-4)
# Cohorts of good running sequences under "request" SLO accounting [intervals]. Mirrors
# serving.types.TPOT_COHORTS.
TPOT_COHORTS = 16
# Floor of the interval TPOT a cohort's tokens are counted with [s per token]. Mirrors
# serving.request_tpot.MIN_TPOT_S.
MIN_TPOT_S = F32(1e-9)
