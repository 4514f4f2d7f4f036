"""`inferencegym bench` runs end to end on tiny sizes and writes its table, JSON and figure."""

from __future__ import annotations

import json
import os

import jaxlib
import pytest

from inferencegym_jax.cli import XLA_CPU_FLAGS, main


@pytest.mark.slow
def test_bench_writes_rows_json_and_figure(tmp_path, capsys, monkeypatch):
    # The user-loop row runs in a child with the XLA flags the command started with, not the CLI's.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    out, png = tmp_path / "bench.json", tmp_path / "scaling.png"
    main(["bench", "--tasks", "InferenceGym-Task1-v0", "--envs", "4", "--steps", "3", "--numpy-steps", "2",
          "--repeats", "1", "--no-ppo", "--no-grade", "--json", str(out), "--plot", str(png)])
    record = json.loads(out.read_text())
    rows = record["rows"]
    assert [(r["impl"], r["num_envs"]) for r in rows] == [("numpy", 4), ("jax", 4), ("jax-user-loop", 4)]
    for r in rows:
        assert r["task"] == "InferenceGym-Task1-v0" and r["steps_per_sec"] > 0 and r["median_s"] > 0
        assert r["compile_s"] > 0 if r["impl"].startswith("jax") else r["compile_s"] == 0
        assert r["memory_mb"] is None or r["memory_mb"] > 0
    user = rows[2]
    assert user["xla_flags"] == "--xla_cpu_enable_fast_math=false" and user["steps"] == 3
    added = " " + XLA_CPU_FLAGS if jaxlib.__version__.startswith("0.10.") else ""  # the CLI's own, where measured
    assert record["machine"]["xla_flags"] == "--xla_cpu_enable_fast_math=false" + added
    table = capsys.readouterr().out
    assert "| jax | Task1 | 4 |" in table and "x |" in table  # the jax/numpy ratio column
    assert "| jax-user-loop | Task1 | 4 |" in table
    assert png.stat().st_size > 10_000


def test_user_loop_samples_actions_and_returns_only_summed_rewards():
    import jax
    import numpy as np

    import inferencegym_jax as ig
    from inferencegym_jax.cli import bench

    env, params = ig.make("InferenceGym-Task1-v0")
    run = bench.user_loop(env, params, num_envs=3, steps=2)
    total = jax.jit(run)(jax.random.key(1))
    assert total.shape == (3,) and total.dtype == np.float32
    # The same rollout written out step by step: reset, then per step split, sample, step.
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    sample = jax.jit(jax.vmap(env.action_space(params).sample))
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    k_reset, k_steps = jax.random.split(jax.random.key(1))
    _, state = reset(jax.random.split(k_reset, 3), params)
    expected = np.zeros(3, np.float32)
    for k in jax.random.split(k_steps, 2):
        k_action, k_step = jax.random.split(k)
        _, state, reward, *_ = step(jax.random.split(k_step, 3), state, sample(jax.random.split(k_action, 3)), params)
        expected += np.asarray(reward)
    np.testing.assert_allclose(np.asarray(total), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_xla_cpu_options_script_compares_options_and_bits():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "xla_cpu_options.py"
    out = subprocess.run([sys.executable, str(script), "--task", "InferenceGym-Task1-v0", "--envs", "4", "--steps", "2",
                          "--rounds", "1", "--option", 'min/max={"xla_cpu_enable_fast_min_max": true}'],
                         capture_output=True, text=True, check=True).stdout
    assert "| default | " in out and "| 1.00x |" in out and "0.0e+00" in out
    assert 'min/max `{"xla_cpu_enable_fast_min_max": true}`' in out


def test_cli_xla_flags_only_where_measured_and_never_over_the_users(monkeypatch):
    import jaxlib

    from inferencegym_jax import cli  # re-exported from inferencegym_jax.cli.common

    monkeypatch.setattr(jaxlib, "__version__", "0.10.2")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert cli.use_xla_cpu_flags()
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 " + cli.XLA_CPU_FLAGS
    assert not cli.use_xla_cpu_flags()  # already there: not added twice
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")  # the user's choice stands
    assert not cli.use_xla_cpu_flags() and os.environ["XLA_FLAGS"].endswith("=dot")
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(jaxlib, "__version__", "0.11.0")  # not measured there; XLA aborts on unknown flags
    assert not cli.use_xla_cpu_flags() and "XLA_FLAGS" not in os.environ
