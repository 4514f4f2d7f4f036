"""Tasks come from their TOML files; one validator checks every key against the schema."""

from __future__ import annotations

import dataclasses
import tomllib
import typing

import jax
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import tasks, validation
from inferencegym_jax.files import shipped
from inferencegym_jax.task_config import LengthConfig, TaskConfig, WorkloadConfig


def test_every_task_file_is_registered_by_its_id():
    folder = shipped("configs").joinpath("tasks")
    ids = sorted(tomllib.loads(p.read_text())["id"] for p in folder.iterdir() if p.name.endswith(".toml"))
    assert ig.registered_envs() == ids and len(ids) >= 4


def test_every_shipped_task_parses_and_uses_every_key_it_sets():
    for env_id in ig.registered_envs():
        cfg = tasks.task_config(env_id)
        assert isinstance(cfg, TaskConfig) and cfg.id == env_id
        wl = cfg.workload
        for name in WorkloadConfig.OPTIONAL:
            assert (getattr(wl, name) is not None) == (name in WorkloadConfig.REQUIRED[wl.schedule]), (env_id, name)


def test_every_v2_task_is_its_v1_task_on_the_mixed_engine():
    """v2 changed the engine model alone (issue 41): every other parameter is v1's, leaf for leaf."""
    for n in (1, 2, 3, 4):
        env1, p1 = ig.make(f"InferenceGym-Task{n}-v1")
        env2, p2 = ig.make(f"InferenceGym-Task{n}-v2")
        assert (p1.server.engine, p2.server.engine) == ("fluid", "mixed")
        mixed = dataclasses.replace(p1, server=dataclasses.replace(p1.server, engine="mixed"))
        assert jax.tree_util.tree_structure(mixed) == jax.tree_util.tree_structure(p2), n
        for a, b in zip(jax.tree_util.tree_leaves(mixed), jax.tree_util.tree_leaves(p2)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"task {n}")
        assert type(env1) is type(env2)


def test_schema_describes_every_key_with_its_range():
    rows = validation.describe(TaskConfig)
    keys = {key for key, _, _ in rows}
    assert {"server.dt_s", "workload.prompt.high", "reward.cost_budget_per_1k", "default_action.kv_budget"} <= keys
    allowed = dict((k, a) for k, a, _ in rows)
    assert allowed["workload.prompt.high"] == "a finite number in [1, 131072] [tokens]"
    assert allowed["max_steps"] == "an integer in [1, 1000000] [intervals]"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"workload": {"prompt": {"high": float("inf")}}},
         "workload.prompt.high=inf: must be a finite number in [1, 131072] [tokens]"),
        ({"server": {"memory_limit_gb": -1}}, "server.memory_limit_gb=-1: must be a finite number in [1, 1000] [GB]"),
        ({"server": {"dt_s": "fast"}}, "server.dt_s='fast': must be a finite number"),
        ({"workload": {"base_rate": 0}}, "workload.base_rate=0: must be a finite number in [0.001, 10000] [req/s]"),
        ({"workload": {"prompt": {"sigma2": 2.0}}},
         "'workload.prompt.sigma2' is not used by workload.prompt.kind='lognormal'"),
        ({"workload": {"burst_gap_s": 30.0}}, "'workload.burst_gap_s' is not used by workload.schedule='periodic'"),
        ({"workload": {"prompt": {"median1": None}}}, "'workload.prompt.median1' is missing"),
        ({"workload": {"prompt": {"low": 900, "high": 800}}}, "workload.prompt.low=900 and workload.prompt.high=800"),
        ({"workload": {"class_mix": [0.5, 0.6, 0.0]}}, "class_mix=[0.5, 0.6, 0.0]: must sum to 1"),
        ({"workload": {"bogus": 1}}, "unknown config key 'workload.bogus'"),
        ({"workload": 5}, "workload must be a table"),
        ({"active_knobs": ["kv_budget", "kv_budget"]},
         "active_knobs=['kv_budget', 'kv_budget']: must be a list of distinct"),
        ({"max_steps": 2**31}, "max_steps=2147483648: must be an integer in [1, 1000000]"),
        ({"reward": {"weights": [0.4, float("nan"), 0.3, 0.1, 0.0]}}, "reward.weights=[0.4, nan"),
        ({"gpu": "tpu-v5"}, "gpu='tpu-v5': must be one of ['a100-80gb', 'h100-sxm']"),
    ],
)
def test_a_bad_override_names_its_key(overrides, message):
    with pytest.raises(ValueError) as err:
        ig.make("InferenceGym-Task2-v0", **overrides)
    assert message in str(err.value)


def test_none_removes_a_key_so_a_schedule_can_be_switched():
    env, params = ig.make("InferenceGym-Task2-v0", workload={
        "schedule": "constant", "burst_multiplier": None, "burst_period_s": None, "burst_duration_s": None})
    assert params.workload.schedule == "constant" and float(params.workload.burst_multiplier) == 1.0


def test_unused_lengths_and_bursts_get_inert_values():
    _, params = ig.make("InferenceGym-Task4-v0")  # a replay: no rate, no lengths, no bursts
    assert params.workload.schedule == "trace" and float(params.workload.burst_multiplier) == 1.0
    length = tasks._lengths(LengthConfig(kind="lognormal", low=8.0, high=2048.0, median1=100.0, sigma1=1.0))
    assert float(length.weight2[0]) == 0.0  # the second component is never drawn


def test_schema_fields_all_carry_a_spec_or_a_nested_schema():
    for schema in (TaskConfig, WorkloadConfig, LengthConfig):
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            nested = validation.nested_schema(hints[f.name])
            assert "spec" in f.metadata or nested is not None, (schema.__name__, f.name)


def test_a_burst_regime_is_checked_and_used_only_by_the_burst_schedules():
    with pytest.raises(ValueError, match=r"workload.burst_class_mix=\[0.5, 0.5, 0.5\]: must sum to 1"):
        ig.make("InferenceGym-Task3-v1", workload={"burst_class_mix": [0.5, 0.5, 0.5]})
    with pytest.raises(ValueError, match=r"config key 'workload.burst_class_mix' is not used by "
                                         r"workload.schedule='constant'"):
        ig.make("InferenceGym-Task1-v1", workload={"burst_class_mix": [0.0, 1.0, 0.0]})
    with pytest.raises(ValueError, match=r"workload.burst_prompt.high"):
        ig.make("InferenceGym-Task3-v1", workload={"burst_prompt": {"high": -1}})
    # without a burst regime of its own a burst repeats the base traffic's mix and lengths
    _, params = ig.make("InferenceGym-Task2-v1")
    assert params.workload.burst_class_mix.tolist() == params.workload.class_mix.tolist()
    assert params.workload.burst_prompt.median1.tolist() == params.workload.prompt.median1.tolist()


def test_tpot_slos_are_per_class_and_the_accounting_is_named():
    with pytest.raises(ValueError, match=r"server.tpot_slo_s=0.05: must be a list of 3 finite numbers"):
        ig.make("InferenceGym-Task1-v1", server={"tpot_slo_s": 0.05})
    with pytest.raises(ValueError, match=r"server.slo_accounting='later': must be one of"):
        ig.make("InferenceGym-Task1-v1", server={"slo_accounting": "later"})
    _, params = ig.make("InferenceGym-Task3-v1", server={"tpot_slo_s": [0.03, 0.05, 0.2]})
    assert params.server.tpot_slo_s.shape == (3,) and float(params.server.tpot_slo_s[2]) == pytest.approx(0.2)


def test_a_bare_task_number_is_the_newest_version_of_that_task():
    versions = tasks.task_versions()
    assert sorted(i for ids in versions.values() for i in ids) == ig.registered_envs()
    for number, ids in versions.items():
        newest = max(ids, key=lambda i: int(i.rsplit("-v", 1)[1]))
        assert tasks.newest_version(number) == ids[-1] == newest
        assert tasks.resolve_id(number) == tasks.resolve_id(str(number)) == newest
        assert all(tasks.resolve_id(i) == i for i in ids)  # a full id, older versions included, is itself
    assert tasks.resolve_id(3) == "InferenceGym-Task3-v2" and tasks.resolve_id("InferenceGym-Task3-v0").endswith("v0")
    assert tasks.newest_version(99) is None


@pytest.mark.parametrize("value", [99, -1, "0", "99"])
def test_a_number_with_no_task_is_refused_naming_the_key_and_listing_the_versions(value):
    with pytest.raises(ValueError) as refused:
        tasks.resolve_id(value, key="--task ")
    message = str(refused.value)
    assert message.startswith(f"--task {value!r} is not a task: no task {int(value)} is registered")
    assert "newest version" in message and all(i in message for i in ig.registered_envs())


@pytest.mark.parametrize("value", [True, "-1", "InferenceGym-Task3-v9", "3.0", "\u00b3", None])
def test_anything_else_than_a_number_or_a_registered_id_is_refused(value):
    with pytest.raises(ValueError, match=r"^task=.* is not a task: use a task number \(its newest version\) or one of"):
        tasks.resolve_id(value)
