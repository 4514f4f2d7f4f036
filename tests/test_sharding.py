"""Envs and episodes split across 4 host devices give the single-device results (float32 rounding).

XLA reads its flags when JAX starts, so the 4-device check runs in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

from inferencegym_jax import sharding

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate, sharding
    from inferencegym_jax.traffic import sampling
    from inferencegym_jax.env import DRAWS_PER_STEP

    assert jax.device_count() == 4, jax.devices()

    def compare(a, b):
        # (bit-identical leaves, largest relative difference of the others)
        same, worst = 0, 0.0
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            x, y = np.asarray(x), np.asarray(y)
            if np.array_equal(x, y):
                same += 1
            elif not np.issubdtype(x.dtype, np.floating):
                worst = float("inf")
            else:
                worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30))))
        return same, len(jax.tree_util.tree_leaves(a)), worst

    out = {}
    env, params = ig.make("InferenceGym-Task3-v0", max_steps=8)
    policy = baselines.random_policy(env)
    key = evaluate.evaluation_key(0)
    # the evaluator: 6 episodes on 4 devices (padded to 8) against one device
    one = evaluate.run_episodes(env, params, policy, key, 6, num_steps=12)
    four = evaluate.run_episodes(env, params, policy, key, 6, num_steps=12, devices=4)
    out["evaluate"] = compare(one, four) + (list(four.reward.shape), len(four.reward.sharding.device_set))

    # GSPMD: the env batch constrained across the 4 devices inside jit (reset and draws)
    n, mesh = 8, sharding.batch_mesh(4)

    def first_draws(keys, constrain):
        if constrain:
            keys = sharding.constrain_leading(keys, mesh)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        return state, jax.vmap(lambda k: sampling.uniforms(k, DRAWS_PER_STEP))(keys)

    keys = jax.random.split(jax.random.key(2), n)
    single = jax.jit(first_draws, static_argnums=1)(keys, False)
    split = jax.jit(first_draws, static_argnums=1)(keys, True)
    out["gspmd"] = compare(single, split) + (len(split[1].sharding.device_set),)
    print(json.dumps(out))
    """
)


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_four_host_devices_match_one_device(tmp_path):
    """Every leaf equal to float32 rounding, nearly all bit for bit, on 4 devices.

    XLA compiles the partitioned program with its own fusions, so a product summed into
    another (a*b + c*d, an FMA either way) may round differently in the last place: TTFT
    quantiles differ by about 1 ulp per step, and the state carries it (< 1e-5 after 20 steps;
    the tolerance is test_env's batch-width contract, 1e-4). Everything else is bit-identical.
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)  # not the checkout: the installed package
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    same, total, worst, shape, num_devices = out["evaluate"]
    assert shape == [6, 12] and num_devices == 4
    assert worst <= 1e-4 and same >= total - 6, f"run_episodes(devices=4): {same}/{total} leaves equal, worst {worst}"
    same, total, worst, num_devices = out["gspmd"]
    assert num_devices == 4
    assert same == total, f"constrain_leading: {same}/{total} leaves equal, worst {worst}"


def test_batch_mesh_rejects_more_devices_than_exist():
    with pytest.raises(ValueError, match="device_count"):
        sharding.batch_mesh(jax.device_count() + 1)
    assert sharding.batch_mesh(1).size == 1
