"""Task registry: versioned ids -> (env, params) built from the TOML files in configs/tasks.

    env, params = inferencegym_jax.make("InferenceGym-Task1-v0")
    env, params = inferencegym_jax.make("InferenceGym-Task2-v0", gpu="h100-sxm")
    env, params = inferencegym_jax.make("InferenceGym-Task1-v0", workload={"base_rate": 40.0})

Overrides are merged into the task's config before it is validated; unknown keys, wrong types
and out-of-range values raise ValueError naming the field. Ids carry a version: bump it when
the dynamics or a task's numbers change, so results stay comparable.
"""

from __future__ import annotations

import copy
import functools
import tomllib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax import perf_model, validation, workload
from inferencegym_jax.actions import KNOB_RANGES, KNOBS, ServingAction
from inferencegym_jax.env import EnvParams, InferenceGymEnv, RewardParams
from inferencegym_jax.package_files import shipped
from inferencegym_jax.profiles import QUANT_TIERS
from inferencegym_jax.serving import ServerParams

TASK_FILES: dict[str, str] = {
    "InferenceGym-Task1-v0": "task1.toml",
    "InferenceGym-Task2-v0": "task2.toml",
    "InferenceGym-Task3-v0": "task3.toml",
    "InferenceGym-Task4-v0": "task4.toml",
}

# The schema of a task file: key -> type, or a nested schema.
_LENGTH_SCHEMA = {
    "kind": str, "low": float, "high": float, "median1": float, "sigma1": float,
    "median2": float, "sigma2": float, "weight2": float,
}
_SCHEMA: dict[str, Any] = {
    "id": str, "name": str, "difficulty": str, "grader": str, "gpu": str, "model": str, "draft": str,
    "active_knobs": list, "max_steps": int,
    "default_action": {k: float for k in KNOBS},
    "server": {
        "dt_s": float, "num_age_buckets": int, "ttft_slo_s": list, "tpot_slo_s": float,
        "memory_limit_gb": float, "max_batched_tokens": float, "kv_watermark": float, "restart_s": float,
        "prefill_start_s": float,
    },
    "workload": {
        "schedule": str, "base_rate": float, "burst_multiplier": float, "burst_period_s": float,
        "burst_duration_s": float, "burst_gap_s": float, "class_mix": list, "trace": str,
        "trace_keep_one_in": int, "prompt": _LENGTH_SCHEMA, "output": _LENGTH_SCHEMA,
    },
    "reward": {"weights": list, "cost_budget_per_1k": float},
}


def registered_envs() -> list[str]:
    """The ids `make` accepts."""
    return list(TASK_FILES)


@functools.cache
def _load_task_file(filename: str) -> dict[str, Any]:
    text = shipped("configs").joinpath("tasks", filename).read_text()
    return tomllib.loads(text)


def task_config(env_id: str) -> dict[str, Any]:
    """A copy of the raw config of a registered task."""
    if env_id not in TASK_FILES:
        raise ValueError(f"unknown env id {env_id!r}; registered: {registered_envs()}")
    return copy.deepcopy(_load_task_file(TASK_FILES[env_id]))


def _merge(base: dict[str, Any], overrides: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> None:
    for key, value in overrides.items():
        where = f"{path}{key}"
        if key not in schema:
            raise ValueError(f"unknown config key {where!r}; allowed: {sorted(schema)}")
        if isinstance(schema[key], Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"config key {where!r} must be a table/dict, got {type(value).__name__}")
            base.setdefault(key, {})
            _merge(base[key], value, schema[key], where + ".")
        else:
            base[key] = value


def _check_types(config: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> None:
    for key, value in config.items():
        where = f"{path}{key}"
        if key not in schema:
            raise ValueError(f"unknown config key {where!r}; allowed: {sorted(schema)}")
        expected = schema[key]
        if isinstance(expected, Mapping):
            _check_types(value, expected, where + ".")
        elif expected is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"config key {where!r} must be a number, got {value!r}")
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"config key {where!r} must be an integer, got {value!r}")
        elif not isinstance(value, expected):
            raise ValueError(f"config key {where!r} must be {expected.__name__}, got {value!r}")


def _length(spec: Mapping[str, Any]) -> workload.LengthDist:
    return workload.length_dist(**{k: (v if k == "kind" else float(v)) for k, v in spec.items()})


def build_params(config: Mapping[str, Any]) -> EnvParams:
    """EnvParams from a validated config mapping (the schema of configs/tasks/*.toml)."""
    _check_types(config, _SCHEMA, "")
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    unknown = [k for k in config["active_knobs"] if k not in KNOBS]
    if unknown:
        raise ValueError(f"active_knobs has unknown knobs {unknown}; allowed: {list(KNOBS)}")
    if config["max_steps"] < 1:
        raise ValueError(f"max_steps={config['max_steps']} must be >= 1")
    default = config["default_action"]
    for name, (lo, hi) in zip(KNOBS, KNOB_RANGES):
        if not lo <= default[name] <= hi:
            raise ValueError(f"default_action.{name}={default[name]} is outside its range [{lo}, {hi}]")
    s = config["server"]
    for name, value, n in (("server.ttft_slo_s", s["ttft_slo_s"], workload.NUM_CLASSES),
                           ("workload.class_mix", config["workload"]["class_mix"], workload.NUM_CLASSES),
                           ("reward.weights", config["reward"]["weights"], 5)):
        if len(value) != n:
            raise ValueError(f"{name} must have {n} entries, got {len(value)}")
    if s["num_age_buckets"] < 2:
        raise ValueError(f"server.num_age_buckets={s['num_age_buckets']} must be >= 2")

    profiles = [perf_model.get_profile(config["gpu"], config["model"], q, config["draft"]) for q in QUANT_TIERS]
    server = ServerParams(
        profiles=jax.tree_util.tree_map(lambda *x: jnp.stack(x), *profiles),
        dt_s=f32(s["dt_s"]),
        ttft_slo_s=f32(s["ttft_slo_s"]),
        tpot_slo_s=f32(s["tpot_slo_s"]),
        memory_limit_bytes=f32(s["memory_limit_gb"] * 1e9),
        max_batched_tokens=f32(s["max_batched_tokens"]),
        kv_watermark=f32(s["kv_watermark"]),
        restart_s=f32(s["restart_s"]),
        prefill_start_s=f32(s["prefill_start_s"]),
        num_age_buckets=int(s["num_age_buckets"]),
    )
    w = config["workload"]
    trace = None
    if w.get("schedule") == "trace":
        from inferencegym_jax import traces  # data files are only read by trace tasks

        trace = traces.load_trace(w["trace"], w.get("trace_keep_one_in", 1))
    wl = workload.WorkloadParams(
        base_rate=f32(w.get("base_rate", 0.0)),
        class_mix=f32(w["class_mix"]),
        burst_multiplier=f32(w.get("burst_multiplier", 1.0)),
        burst_period_s=f32(w.get("burst_period_s", 60.0)),
        burst_duration_s=f32(w.get("burst_duration_s", 10.0)),
        burst_gap_s=f32(w.get("burst_gap_s", 60.0)),
        prompt=_length(w.get("prompt", {"kind": "uniform", "low": 1, "high": 1})),
        output=_length(w.get("output", {"kind": "uniform", "low": 1, "high": 1})),
        trace=trace,
        schedule=w.get("schedule", "constant"),
    )
    validation.check_workload(wl)
    _, mean_output = workload.mean_lengths(wl)
    r = config["reward"]
    reward = RewardParams(
        weights=f32(r["weights"]),
        throughput_ref=f32(workload.mean_rate(wl) * mean_output),
        cost_budget_per_1k=f32(r["cost_budget_per_1k"]),
    )
    return EnvParams(
        server=server,
        workload=wl,
        reward=reward,
        default_action=ServingAction(*[f32(default[k]) for k in KNOBS]),
        max_steps_in_episode=jnp.asarray(config["max_steps"], jnp.int32),
        active_knobs=tuple(k in config["active_knobs"] for k in KNOBS),
    )


def make(env_id: str, **overrides: Any) -> tuple[InferenceGymEnv, EnvParams]:
    """The environment and its default params for a registered id, with optional overrides.

    Raises:
      ValueError: unknown id (the message lists the registered ones), unknown override key,
        wrong type or out-of-range value.
    """
    config = task_config(env_id)
    _merge(config, overrides, _SCHEMA, "")
    params = build_params(config)
    return InferenceGymEnv(params, env_id), params
