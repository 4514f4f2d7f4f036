"""The agent's observation in NumPy (observation): what is read from the state, and its
normalisation to [0, 1], for N envs at once.

Scales from the task: TTFT against TTFT_SLOS times the class-mix-weighted SLO, TPOT against
TTFT_SLOS times its SLO, the arrival rate against the peak scheduled rate (mean rate plus one
burst's extra rate), memory against the limit, cost against MAX_COST_GPUS GPUs at the highest
price for the whole episode; queue depth on a log scale up to QUEUE_SCALE; knobs by their
position in their range, batch size on a log2 scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.env import EnvState
from inferencegym_jax.observation import Observation
from inferencegym_jax.testing.reference import traffic
from inferencegym_jax.testing.reference.constants import (
    BYTES_PER_GB,
    CONTEXT_SCALE,
    F32,
    KNOB_RANGES,
    KNOBS,
    MAX_BATCH,
    MAX_COST_GPUS,
    NUM_CLASSES,
    QUEUE_SCALE,
    RATE_SCALE_FLOOR,
    SECONDS_PER_HOUR,
    TTFT_SLOS,
)


def knob_vector(config: Any) -> np.ndarray:
    """The knobs of a ServingAction with (N,) leaves, stacked in KNOBS order: (N, 5) float32."""
    return np.stack([np.asarray(getattr(config, k), F32) for k in KNOBS], axis=1)


def observe(state: EnvState) -> Observation:
    """The observation of N env states (observation.observe)."""
    m = state.last
    return Observation(
        queue_depth=m.queue_depth,
        mean_prompt_len=m.queue_mean_prompt,
        arrival_rate_ema=state.arrival_rate_ema,
        kv_occupancy=m.kv_occupancy,
        ttft_p50_s=m.ttft_p50_s,
        ttft_p99_s=m.ttft_p99_s,
        tpot_p50_s=m.tpot_s,
        slo_violation_rate=m.slo_violation_rate,
        gpu_memory_gb=(m.gpu_memory_bytes / BYTES_PER_GB).astype(F32),
        spec_acceptance=m.spec_acceptance,
        priority_mix=m.class_share,
        timestep=state.time.astype(F32),
        cost_so_far=state.cost_so_far,
        running_seqs=state.server.running.seqs,
        config=knob_vector(state.server.config),
    )


def scales(params: Any) -> dict[str, np.ndarray]:
    """The task's normalisation scales (observation.scales): TTFT and (tightest) TPOT SLOs [s], peak rate
    [req/s], memory limit [B], horizon [intervals], max cost [$]."""
    s, wl = params.server, params.workload
    horizon = np.asarray(params.max_steps_in_episode).astype(F32)
    return {
        "ttft_slo_s": np.sum(wl.class_mix * s.ttft_slo_s),
        "tpot_slo_s": np.min(s.tpot_slo_s),  # the tightest class's
        "peak_rate": traffic.mean_rate(wl) + wl.base_rate * (wl.burst_multiplier - 1.0),
        "memory_limit_bytes": s.memory_limit_bytes,
        "horizon": horizon,
        "max_cost_usd": MAX_COST_GPUS * np.max(s.profiles.price_per_hour) * horizon * s.dt_s / SECONDS_PER_HOUR,
    }


def knob_positions(config: np.ndarray) -> list[np.ndarray]:
    """Each knob's position in its range (N,) per knob; batch size as log2 of its top."""
    out = []
    for i, (name, (low, high)) in enumerate(zip(KNOBS, KNOB_RANGES)):
        if name == "batch_size":
            out.append(np.log2(np.maximum(config[:, i], low)) / np.log2(high))
        else:
            out.append((config[:, i] - low) / (high - low))
    return out


def flatten_observation(obs: Observation, params: Any) -> np.ndarray:
    """The normalised (N, 21) float32 vector of N observations, entries in [0, 1]
    (observation.flatten; order of the fields as declared there)."""
    s = scales(params)
    ttft_scale = TTFT_SLOS * s["ttft_slo_s"]
    parts = [
        np.log1p(obs.queue_depth) / np.log1p(QUEUE_SCALE),
        obs.mean_prompt_len / CONTEXT_SCALE,
        obs.arrival_rate_ema / np.maximum(s["peak_rate"], RATE_SCALE_FLOOR),
        obs.kv_occupancy,
        obs.ttft_p50_s / ttft_scale,
        obs.ttft_p99_s / ttft_scale,
        obs.tpot_p50_s / (TTFT_SLOS * s["tpot_slo_s"]),
        obs.slo_violation_rate,
        obs.gpu_memory_gb * BYTES_PER_GB / s["memory_limit_bytes"],
        obs.spec_acceptance,
        *(obs.priority_mix[:, c] for c in range(NUM_CLASSES)),
        obs.timestep / s["horizon"],
        obs.cost_so_far / s["max_cost_usd"],
        obs.running_seqs / MAX_BATCH,
        *knob_positions(obs.config),
    ]
    return np.clip(np.stack(parts, axis=1), 0.0, 1.0).astype(F32)
