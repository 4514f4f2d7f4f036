"""The fuzz campaign (scripts/fuzz.py, docs/RELIABILITY.md), run small, and its counters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.testing import fuzz, random_configs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz.py"


@pytest.mark.slow
def test_small_campaign_on_the_trace_task_finds_nothing():
    """Task 4 (trace replay) here; the synthetic tasks' in-range params run in test_properties."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "2000", "--episode-steps", "20", "--tasks", "4"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| InferenceGym-")]
    assert len(rows) == len(fuzz.FAMILIES) * 2  # GPUs x families
    assert out.stdout.splitlines()[len(rows) + 2].startswith("| all | | | ")


def test_counters_see_nan_out_of_range_values_and_kv_overflow():
    env, params = ig.make("InferenceGym-Task1-v0")
    _, state = env.reset(jax.random.key(0), params)
    obs, state, reward, _, _, info = jax.jit(env.step)(jax.random.key(1), state, jnp.zeros(5, jnp.int32), params)
    flat = env.flatten_observation(obs, params)
    context, metrics = state.server.running.context, info["metrics"]
    assert fuzz.violations(flat, reward, context, metrics, state).tolist() == [0, 0, 0, 0]
    bad_flat = flat.at[0].set(jnp.nan).at[1].set(2.0)
    overfull = metrics.kv_capacity_tokens * 2 + 10
    assert fuzz.violations(bad_flat, jnp.float32(1.5), overfull, metrics, state).tolist() == [1, 1, 1, 1]


def test_random_configs_stay_inside_every_range_and_make_valid_tasks():
    rng = np.random.default_rng(0)
    for env_id in ig.registered_envs():
        for _ in range(5):
            ig.make(env_id, **random_configs.random_overrides(env_id, random_configs.numpy_draw(rng)))
