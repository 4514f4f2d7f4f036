"""The serving dynamics, reward and observation in plain NumPy, vectorised over envs.

A second implementation of the environment, standing on its own: its own constants
(`constants`, each mirroring a JAX one it must equal), every task number read from the params,
and one function per phase of the JAX simulator, with the same name, in the module of its
concept:

  roofline     perf_model: forward pass, decode step, prefill, KV capacity
  traffic      workload: length moments, arrivals, trace replay, traffic state
  engine       serving.engine: reconfigure, preempt_to_fit, decode, check_memory
  admission    serving.admission: enqueue, admission_limits, admit, prefill, age_queue
  latency      serving.latency: time_to_first_token, latency_statistics
  server       serving.serve_interval and its metrics
  observation  observation: observe, flatten
  env          env: reset, step_env, step, the action grid, the reward; ReferenceEnv

It has two uses. **Parity**: fed the same state, actions and random draws as the JAX env, it
returns the same observation, reward, flags and next state within float32 tolerance
(tests/test_reference.py, every registered task). **Speed baseline**: `ReferenceEnv`, with its
own NumPy sampler, is what `inferencegym bench` sets the JAX env against. It also documents the
dynamics in their plainest form: cumulative sums as cumsum, quantiles by search, divisions as
divisions, where the JAX side uses the formulations of `xla_ops`.

Shapes: N envs lead every array; per-env scalars (N,), per-class values (N, 3), queue bins
(N, 3, A), float32. States, draws and metrics are the JAX env's pytree classes holding NumPy
arrays; `to_numpy` converts a pytree of JAX arrays (the params too).
"""

from inferencegym_jax.testing.reference.arrays import to_numpy
from inferencegym_jax.testing.reference.env import ReferenceEnv, reset, step, step_env
from inferencegym_jax.testing.reference.observation import flatten_observation
from inferencegym_jax.testing.reference.server import serve_interval
from inferencegym_jax.testing.reference.traffic import length_moments, sample_draws

__all__ = [
    "ReferenceEnv",
    "flatten_observation",
    "length_moments",
    "reset",
    "sample_draws",
    "serve_interval",
    "step",
    "step_env",
    "to_numpy",
]
