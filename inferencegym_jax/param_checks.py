"""Checks of a concrete `env.EnvParams`, leaf by leaf: type, shape, finiteness and range.

Params built or edited by hand (`params.replace(...)`, a sweep's grid, domain randomisation)
fail as clearly as a task file does. A leaf that a task-file field becomes is checked against
that field's `validation.Spec` (`task_config`), in the leaf's unit (GB -> B), so params are
accepted exactly where a task file would be: ranges in which the physics stays finite. Leaves
no task field sets (hardware profiles, derived references) must be finite and non-negative.
Messages name the leaf by its path: `params.server.dt_s=[nan]: must be a finite number in
(0, 3600] [s]`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from inferencegym_jax import validation
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.profiles import QUANT_TIERS
from inferencegym_jax.task_config import (
    HOUR_S,
    MAX_TOKENS,
    ActionConfig,
    LengthConfig,
    RewardConfig,
    ServerConfig,
    TaskConfig,
    WorkloadConfig,
)
from inferencegym_jax.traffic.workload import LENGTH_KINDS, LENGTH_STRATA_RULES, NUM_CLASSES, SCHEDULES
from inferencegym_jax.validation import Spec

_LENGTH_FIELDS = ("low", "high", "median1", "sigma1", "median2", "sigma2", "weight2")
_SERVER_FIELDS = ("dt_s", "ttft_slo_s", "tpot_slo_s", "max_batched_tokens", "kv_watermark", "restart_s",
                  "prefill_start_s")
_BURST_FIELDS = ("burst_multiplier", "burst_period_s", "burst_duration_s", "burst_gap_s")
# The largest mean arrival rate a task file allows: base rate x burst multiplier [req/s].
_MAX_RATE = 1e4 * 1e3


def _spec(schema: type, name: str, *, scale: float = 1.0, unit: str | None = None) -> Spec:
    """The Spec of a task-file field, its bounds scaled to the leaf's unit."""
    spec = next(f.metadata["spec"] for f in dataclasses.fields(schema) if f.name == name)
    if scale == 1.0:
        return spec
    return dataclasses.replace(spec, low=spec.low * scale, high=spec.high * scale, unit=unit or spec.unit)


def _leaf_specs() -> dict[str, tuple[Spec, tuple[int, ...]]]:
    """{leaf path: (Spec of each entry, shape)} of every range-checked leaf."""
    out: dict[str, tuple[Spec, tuple[int, ...]]] = {}
    for name in _SERVER_FIELDS:
        spec = _spec(ServerConfig, name)
        out[f"server.{name}"] = (spec, (spec.length,) if spec.kind == "vector" else ())
    out["server.memory_limit_bytes"] = (_spec(ServerConfig, "memory_limit_gb", scale=1e9, unit="B"), ())
    # A replayed trace has no base rate (0 is its inert value).
    out["workload.base_rate"] = (Spec("number", "mean arrival rate", "req/s", 0, 1e4), ())
    out["workload.class_mix"] = (_spec(WorkloadConfig, "class_mix"), (NUM_CLASSES,))
    out["workload.burst_class_mix"] = (_spec(WorkloadConfig, "burst_class_mix"), (NUM_CLASSES,))
    for name in _BURST_FIELDS:
        out[f"workload.{name}"] = (_spec(WorkloadConfig, name), ())
    for dist in ("prompt", "output", "burst_prompt"):
        out[f"workload.{dist}.kind"] = (Spec("integer", "length kind", "", 0, len(LENGTH_KINDS) - 1), (NUM_CLASSES,))
        for name in _LENGTH_FIELDS:
            out[f"workload.{dist}.{name}"] = (_spec(LengthConfig, name), (NUM_CLASSES,))
    out["reward.weights"] = (_spec(RewardConfig, "weights"), (5,))
    out["reward.throughput_ref"] = (
        Spec("number", "offered output-token rate", "tokens/s", 0, _MAX_RATE * MAX_TOKENS, low_open=True), ())
    out["reward.cost_budget_per_1k"] = (_spec(RewardConfig, "cost_budget_per_1k"), ())
    out["reward.requests_ref"] = (
        Spec("number", "mean arrivals per interval", "requests", 0, _MAX_RATE * HOUR_S, low_open=True), ())
    # Peak over mean rate: at most the burst multiplier's bound, or a trace's busiest minute.
    out["reward.peak_ratio"] = (Spec("number", "peak over mean arrival rate", "", 1, _MAX_RATE), ())
    for name in KNOBS:
        out[f"default_action.{name}"] = (_spec(ActionConfig, name), ())
    out["max_steps_in_episode"] = (_spec(TaskConfig, "max_steps"), ())
    return out


LEAF_SPECS = _leaf_specs()


def _get(tree: Any, path: str) -> Any:
    for name in path.split("."):
        if not hasattr(tree, name):
            raise ValueError(f"params.{path}: missing (params must be an env.EnvParams, as inferencegym_jax.make "
                             f"builds; got a {type(tree).__name__} where {name!r} should be)")
        tree = getattr(tree, name)
    return tree


def _check_leaf(path: str, value: Any, spec: Spec, shape: tuple[int, ...] | None) -> np.ndarray:
    """`value` as a NumPy array, or ValueError naming `params.<path>`."""
    array = np.asarray(value)
    where = f"params.{path}"
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{where} must be a numeric array, got {array.dtype} {value!r}")
    if shape is not None and array.shape != shape:
        raise ValueError(f"{where} has shape {array.shape}, expected {shape} (unbatched; vmap over batched params)")
    if spec.kind == "integer" and array.dtype.kind == "f":
        raise ValueError(f"{where} must have an integer dtype, got {array.dtype}")
    # Compared in the leaf's own precision: a float32 leaf holds its config value rounded, and
    # rounding is monotonic, so a value inside the range stays inside the rounded range.
    kind = array.dtype.type if array.dtype.kind == "f" else np.float64
    x, low, high = array.astype(kind), kind(spec.low), kind(spec.high)
    finite = np.isfinite(x)
    low_ok = x > low if spec.low_open else x >= low
    if not np.all(finite & low_ok & (x <= high)):
        raise ValueError(f"{where}={array.tolist()}: must be {spec.allowed()}")
    return array


def _check_profiles(profiles: Any) -> None:
    """Every profile leaf: float, one row per precision tier, finite, >= 0."""
    if not dataclasses.is_dataclass(profiles):
        raise ValueError(f"params.server.profiles must be a perf_model.Profile, got {type(profiles).__name__}")
    spec = Spec("number", "hardware constant", "", 0, np.inf)
    for name in (f.name for f in dataclasses.fields(profiles)):
        array = _check_leaf(f"server.profiles.{name}", getattr(profiles, name), spec, None)
        if array.shape[:1] != (len(QUANT_TIERS),):
            raise ValueError(f"params.server.profiles.{name} has shape {array.shape}: its leading axis must be the "
                             f"{len(QUANT_TIERS)} precision tiers {QUANT_TIERS}")


def _check_trace(trace: Any) -> None:
    """A replayed trace: no NaN (arrival times are padded with +-inf), times sorted."""
    for name in ("arrival_s", "prompt_cumsum", "output_cumsum", "prompt_sq_cumsum", "duration_s"):
        array = np.asarray(getattr(trace, name))
        if array.dtype.kind != "f" or np.isnan(array).any():
            raise ValueError(f"params.workload.trace.{name} must be a float array without NaN")
    arrival = np.asarray(trace.arrival_s)
    if not np.all(arrival[..., 1:] >= arrival[..., :-1]):
        raise ValueError("params.workload.trace.arrival_s must be sorted along each class")


def _check_across_leaves(params: Any) -> None:
    wl = params.workload
    for name in ("class_mix", "burst_class_mix"):
        mix = np.asarray(getattr(wl, name))
        if abs(float(np.sum(mix)) - 1.0) > 1e-4:
            raise ValueError(f"params.workload.{name}={mix.tolist()}: must sum to 1")
    for dist in ("prompt", "output", "burst_prompt"):
        d = getattr(wl, dist)
        if np.any(np.asarray(d.low) > np.asarray(d.high)):
            raise ValueError(f"params.workload.{dist}.low must be <= params.workload.{dist}.high")
    if wl.schedule not in SCHEDULES:
        raise ValueError(f"params.workload.schedule={wl.schedule!r}: must be one of {list(SCHEDULES)}")
    if wl.length_strata not in LENGTH_STRATA_RULES:
        raise ValueError(f"params.workload.length_strata={wl.length_strata!r}: must be one of "
                         f"{list(LENGTH_STRATA_RULES)}")
    if (wl.schedule == "trace") != (wl.trace is not None):
        raise ValueError("params.workload.trace must be set exactly when params.workload.schedule='trace'")
    knobs = params.active_knobs
    if not (isinstance(knobs, tuple) and len(knobs) == len(KNOBS) and all(isinstance(k, bool) for k in knobs)):
        raise ValueError(f"params.active_knobs={knobs!r}: must be a tuple of {len(KNOBS)} bools ({KNOBS})")
    buckets = params.server.num_age_buckets
    validation.check_value("params.server.num_age_buckets", buckets, _spec(ServerConfig, "num_age_buckets"))
    validation.check_value("params.server.slo_accounting", params.server.slo_accounting,
                           _spec(ServerConfig, "slo_accounting"))
    validation.check_value("params.server.engine", params.server.engine, _spec(ServerConfig, "engine"))
    validation.check_value("params.server.tpot_spread", params.server.tpot_spread, _spec(ServerConfig, "tpot_spread"))


def check_params(params: Any) -> None:
    """ValueError naming the first leaf of a concrete EnvParams that is malformed or out of range."""
    for path, (spec, shape) in LEAF_SPECS.items():
        _check_leaf(path, _get(params, path), spec, shape)
    _check_profiles(params.server.profiles)
    if params.workload.trace is not None:
        _check_trace(params.workload.trace)
    _check_across_leaves(params)
