"""Host-side checks of concrete env params: ValueError naming the field and its allowed range."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.actions import KNOBS
from inferencegym_jax.workload import SCHEDULES


def _check_all(prefix: str, checks: list[tuple[str, Any, Any, str]]) -> None:
    for name, value, ok, allowed in checks:
        value = np.asarray(value)
        if not ok(value):
            raise ValueError(f"{prefix}{name}={value.tolist()} out of range: must be {allowed}")


def check_workload(params: Any) -> None:
    """Checks of a concrete `workload.WorkloadParams`."""
    _check_all("workload.", [
        ("base_rate", params.base_rate, lambda x: np.all(x >= 0), ">= 0 [req/s]"),
        ("burst_multiplier", params.burst_multiplier, lambda x: np.all(x >= 1), ">= 1"),
        ("burst_period_s", params.burst_period_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("burst_duration_s", params.burst_duration_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("burst_gap_s", params.burst_gap_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("class_mix", params.class_mix, lambda x: np.all(x >= 0) and abs(np.sum(x) - 1) < 1e-4,
         "non-negative, summing to 1"),
    ])
    if params.schedule not in SCHEDULES:
        raise ValueError(f"workload.schedule={params.schedule!r} is not one of {list(SCHEDULES)}")
    if params.schedule == "trace" and params.trace is None:
        raise ValueError("workload.trace is required when workload.schedule='trace'")


def check_params(params: Any) -> None:
    """Checks of a concrete `env.EnvParams`."""
    check_workload(params.workload)
    s = params.server
    _check_all("", [
        ("server.dt_s", s.dt_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.ttft_slo_s", s.ttft_slo_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.tpot_slo_s", s.tpot_slo_s, lambda x: np.all(x > 0), "> 0 [s]"),
        ("server.memory_limit_bytes", s.memory_limit_bytes, lambda x: np.all(x > 0), "> 0 [B]"),
        ("server.max_batched_tokens", s.max_batched_tokens, lambda x: np.all(x >= 1), ">= 1 [tokens]"),
        ("server.kv_watermark", s.kv_watermark, lambda x: np.all((x >= 0) & (x < 1)), "in [0, 1)"),
        ("server.restart_s", s.restart_s, lambda x: np.all(x >= 0), ">= 0 [s]"),
        ("server.prefill_start_s", s.prefill_start_s, lambda x: np.all(x >= 0), ">= 0 [s]"),
        ("reward.throughput_ref", params.reward.throughput_ref, lambda x: np.all(x > 0), "> 0 [tokens/s]"),
        ("reward.cost_budget_per_1k", params.reward.cost_budget_per_1k, lambda x: np.all(x > 0), "> 0 [$]"),
        ("max_steps_in_episode", params.max_steps_in_episode, lambda x: np.all(x >= 1), ">= 1"),
        ("default_action.kv_budget", params.default_action.kv_budget,
         lambda x: np.all((x >= 0.1) & (x <= 1.0)), "in [0.1, 1]"),
    ])
    if len(params.active_knobs) != len(KNOBS):
        raise ValueError(f"active_knobs must have {len(KNOBS)} entries ({KNOBS})")
