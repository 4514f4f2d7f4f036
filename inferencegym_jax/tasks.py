"""Task registry: the TOML files of configs/tasks, discovered by their `id`, built into params.

    env, params = inferencegym_jax.make("InferenceGym-Task3-v2")   # task 3's newest version
    env, params = inferencegym_jax.make("InferenceGym-Task2-v2", gpu="h100-sxm")
    env, params = inferencegym_jax.make("InferenceGym-Task1-v2", workload={"base_rate": 40.0})
    env, params = inferencegym_jax.make("InferenceGym-Task3-v1")   # frozen, to reproduce v1 results

Every `*.toml` in configs/tasks is a task; its `id` is what `make` accepts. Overrides are merged
into the file's tables (a value of None removes a key), then the whole is checked against
`task_config.TaskConfig`: unknown keys, wrong types and out-of-range values raise ValueError
naming the key. Ids carry a version ("InferenceGym-Task<N>-v<k>"): bump it when the dynamics or
a task's numbers change, so results stay comparable. Older versions stay registered, frozen, for
reproduction; a bare task number (`resolve_id`: the CLI's `--task 3`, a config's `task = 3`)
means the task's newest version.
"""

from __future__ import annotations

import copy
import functools
import re
import tomllib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax import perf_model, validation
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.env import EnvParams, InferenceGymEnv, RewardParams
from inferencegym_jax.files import shipped
from inferencegym_jax.profiles import QUANT_TIERS
from inferencegym_jax.serving import ServerParams
from inferencegym_jax.task_config import LengthConfig, TaskConfig, WorkloadConfig
from inferencegym_jax.traffic import workload

# Values of the params leaves a task's traffic does not use (see task_config): no bursts (a
# multiplier of 1; any positive period, duration and gap), no rate for a replay, and lognormal
# components that are never drawn. They enter no quantity the task computes.
_NO_BURSTS = {"burst_multiplier": 1.0, "burst_period_s": 60.0, "burst_duration_s": 10.0, "burst_gap_s": 60.0}
_UNUSED_LOGNORMAL = {"median1": 1.0, "sigma1": 1.0, "median2": 1.0, "sigma2": 1.0, "weight2": 0.0}
_UNUSED_LENGTHS = LengthConfig(kind="uniform", low=1.0, high=1.0)


@functools.cache
def _task_files() -> dict[str, str]:
    """{env id: file name} of every task file, sorted by id; ValueError for a duplicate id."""
    found: dict[str, str] = {}
    for path in sorted(shipped("configs").joinpath("tasks").iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".toml"):
            continue
        env_id = tomllib.loads(path.read_text()).get("id")
        if not isinstance(env_id, str):
            raise ValueError(f"configs/tasks/{path.name} has no string `id`")
        if env_id in found:
            raise ValueError(f"task id {env_id!r} is defined twice: {found[env_id]} and {path.name}")
        found[env_id] = path.name
    return dict(sorted(found.items()))


def registered_envs() -> list[str]:
    """The ids `make` accepts."""
    return list(_task_files())


# A registered id names its task's number and version: "InferenceGym-Task<N>-v<k>".
_VERSIONED_ID = re.compile(r"InferenceGym-Task(\d+)-v(\d+)")


def task_versions() -> dict[int, list[str]]:
    """{task number: its registered ids, oldest version first} (ids of another form left out).
    The last id of each list is the task's newest version, what a bare number resolves to."""
    versions: dict[int, list[tuple[int, str]]] = {}
    for env_id in registered_envs():
        match = _VERSIONED_ID.fullmatch(env_id)
        if match:
            versions.setdefault(int(match.group(1)), []).append((int(match.group(2)), env_id))
    return {number: [env_id for _, env_id in sorted(found)] for number, found in sorted(versions.items())}


def newest_version(number: int) -> str | None:
    """The registered id of task `number`'s newest version ("InferenceGym-Task3-v2" for 3);
    None when no task has that number."""
    found = task_versions().get(number)
    return found[-1] if found else None


def _versions_listing() -> str:
    """The tasks and their versions, for messages: "1: InferenceGym-Task1-v0, InferenceGym-Task1-v1; ..."."""
    return "; ".join(f"{n}: {', '.join(ids)}" for n, ids in task_versions().items())


def resolve_id(value: Any, key: str = "task=") -> str:
    """A registered id from a task number N (its newest version: 3 -> "InferenceGym-Task3-v2"
    while v2 is task 3's newest; older versions stay reachable by their full ids, frozen for
    reproduction) or from a registered id; ValueError naming `key` (how the user typed the option
    or config key) otherwise, listing the tasks and their versions."""
    is_number = (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and value.isascii() and value.isdigit())
    if is_number:
        newest = newest_version(int(value))
        if newest is not None:
            return newest
        raise ValueError(f"{key}{value!r} is not a task: no task {int(value)} is registered. A number means its "
                         f"task's newest version; the tasks and their versions: {_versions_listing()}")
    if isinstance(value, str) and value in _task_files():
        return value
    raise ValueError(f"{key}{value!r} is not a task: use a task number (its newest version) or one of "
                     f"{registered_envs()}")


@functools.cache
def _load_task_file(filename: str) -> dict[str, Any]:
    return tomllib.loads(shipped("configs").joinpath("tasks", filename).read_text())


def raw_task_config(env_id: str) -> dict[str, Any]:
    """A copy of the raw tables of a registered task file."""
    if env_id not in _task_files():
        raise ValueError(f"unknown env id {env_id!r}; registered: {registered_envs()}")
    return copy.deepcopy(_load_task_file(_task_files()[env_id]))


def _merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Overrides into the raw tables: a table merges key by key, None removes a key (to switch a
    schedule or a length kind, whose fields differ), anything else replaces."""
    for key, value in overrides.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def task_config(env_id: str, **overrides: Any) -> TaskConfig:
    """The validated config of a registered task, with overrides (as `make` takes them)."""
    raw = raw_task_config(env_id)
    _merge(raw, overrides)
    return validation.parse(raw, TaskConfig)


def _lengths(cfg: LengthConfig) -> workload.LengthDist:
    values = {k: getattr(cfg, k) for k in _UNUSED_LOGNORMAL if getattr(cfg, k) is not None}
    return workload.length_dist(cfg.kind, cfg.low, cfg.high, **{**_UNUSED_LOGNORMAL, **values})


def _workload(cfg: WorkloadConfig) -> workload.WorkloadParams:
    def f32(x: Any) -> jax.Array:
        return jnp.asarray(x, jnp.float32)

    bursts = {k: _NO_BURSTS[k] if getattr(cfg, k) is None else getattr(cfg, k) for k in _NO_BURSTS}
    trace = None
    if cfg.schedule == "trace":
        from inferencegym_jax.traffic import traces  # data files are only read by trace tasks

        if cfg.trace is None or cfg.trace_keep_one_in is None:  # task_config requires both for "trace"
            raise ValueError("config keys 'workload.trace' and 'workload.trace_keep_one_in' are required by "
                             "workload.schedule = 'trace'")
        trace = traces.load_trace(cfg.trace, cfg.trace_keep_one_in)
    return workload.WorkloadParams(
        base_rate=f32(cfg.base_rate or 0.0),
        class_mix=f32(cfg.class_mix),
        **{k: f32(v) for k, v in bursts.items()},
        burst_class_mix=f32(cfg.burst_class_mix or cfg.class_mix),
        prompt=_lengths(cfg.prompt or _UNUSED_LENGTHS),
        output=_lengths(cfg.output or _UNUSED_LENGTHS),
        burst_prompt=_lengths(cfg.burst_prompt or cfg.prompt or _UNUSED_LENGTHS),
        trace=trace,
        schedule=cfg.schedule,
        length_strata=cfg.length_strata or "moments",
    )


def build_params(cfg: TaskConfig) -> EnvParams:
    """EnvParams of a validated TaskConfig."""
    def f32(x: Any) -> jax.Array:
        return jnp.asarray(x, jnp.float32)

    profiles = [perf_model.get_profile(cfg.gpu, cfg.model, q, cfg.draft) for q in QUANT_TIERS]
    s = cfg.server
    server = ServerParams(
        profiles=jax.tree_util.tree_map(lambda *x: jnp.stack(x), *profiles),
        dt_s=f32(s.dt_s),
        ttft_slo_s=f32(s.ttft_slo_s),
        tpot_slo_s=f32(s.tpot_slo_s),
        memory_limit_bytes=f32(s.memory_limit_gb * 1e9),
        max_batched_tokens=f32(s.max_batched_tokens),
        kv_watermark=f32(s.kv_watermark),
        restart_s=f32(s.restart_s),
        prefill_start_s=f32(s.prefill_start_s),
        num_age_buckets=s.num_age_buckets,
        slo_accounting=s.slo_accounting,
        engine=s.engine or "fluid",
        tpot_spread=s.tpot_spread or "cohort",
    )
    wl = _workload(cfg.workload)
    _, mean_output = workload.mean_lengths(wl)
    mean_rate = workload.mean_rate(wl)
    reward = RewardParams(
        weights=f32(cfg.reward.weights),
        throughput_ref=f32(mean_rate * mean_output),
        cost_budget_per_1k=f32(cfg.reward.cost_budget_per_1k),
        requests_ref=f32(mean_rate * s.dt_s),
        peak_ratio=f32(jnp.maximum(workload.peak_rate(wl) / mean_rate, 1.0)),
        kind=cfg.reward.kind,
    )
    return EnvParams(
        server=server,
        workload=wl,
        reward=reward,
        default_action=ServingAction(*[f32(getattr(cfg.default_action, k)) for k in KNOBS]),
        max_steps_in_episode=jnp.asarray(cfg.max_steps, jnp.int32),
        active_knobs=tuple(k in cfg.active_knobs for k in KNOBS),
    )


def make(env_id: str, **overrides: Any) -> tuple[InferenceGymEnv, EnvParams]:
    """The environment and its default params for a registered id, with optional overrides.

    Raises:
      ValueError: unknown id (the message lists the registered ones), unknown override key,
        wrong type or out-of-range value (the message names the key).
    """
    params = build_params(task_config(env_id, **overrides))
    return InferenceGymEnv(params, env_id), params
