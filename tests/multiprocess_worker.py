"""One process of tests/test_multiprocess.py: an evaluation and a short PPO run over every device.

    python tests/multiprocess_worker.py OUT.npz

Started by the test twice with JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES=2 and JAX_PROCESS_ID
(the two processes of one run, one CPU device each), and once without them under
XLA_FLAGS=--xla_force_host_platform_device_count=2 (the single-process reference). Every process
writes what it holds afterwards to OUT.npz: float and int arrays named by their pytree paths.
"""

from __future__ import annotations

import io
import sys
from typing import Any

import jax
import numpy as np

from inferencegym_jax import sharding

TASK = "InferenceGym-Task1-v0"
EPISODES = 16  # 8 per device: one SIMD-width block each (evaluate.BATCH_MULTIPLE)


def flat(prefix: str, tree: Any) -> dict[str, np.ndarray]:
    """Host copies of the leaves of `tree`, keyed `prefix` + their path (keys as key data)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out[prefix + jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def graded(env: Any, params: Any, policy: Any, prefix: str) -> dict[str, np.ndarray]:
    """A graded evaluation of `policy`, EPISODES episodes split over every device."""
    from inferencegym_jax import evaluate

    result = evaluate.evaluate(env, params, policy, evaluate.evaluation_key(0), EPISODES, TASK,
                               devices=jax.device_count())
    return flat(prefix, {"scores": result.scores, "breakdown": result.breakdown, "metrics": result.metrics})


def main(out_path: str) -> None:
    """Evaluate a baseline and train 2 PPO updates (on a probe env) over every device; save it."""
    sharding.initialize_distributed()  # before any JAX computation: importing baselines makes arrays
    import inferencegym_jax as ig
    from inferencegym_jax import baselines
    from inferencegym_jax.files import atomic_write_bytes
    from training import probes
    from training.config import PPOConfig
    from training.ppo import make_train

    env, params = ig.make(TASK, max_steps=8)
    out = graded(env, params, baselines.random_policy(env), "random")

    # The trainer is env-agnostic and the evaluation above splits the serving env already: a
    # probe env compiles in a third of the time (2 cores run the three processes).
    probe = probes.ObservationReward()
    config = PPOConfig(num_envs=8, num_steps=4, num_updates=2, update_epochs=1,
                       num_minibatches=2, actor_widths=(16,), critic_widths=(16,), num_devices=jax.device_count())
    trainer = make_train(config, probe, probe.default_params)
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())
    runner = sharding.gather(runner)  # the env state is spread over the processes
    out.update(flat("runner", runner))
    out.update(flat("metrics", metrics))

    out["process"] = np.asarray([jax.process_index(), jax.process_count(), jax.device_count()])
    buffer = io.BytesIO()
    np.savez(buffer, **out)
    atomic_write_bytes(out_path, buffer.getvalue())


if __name__ == "__main__":
    main(sys.argv[1])
