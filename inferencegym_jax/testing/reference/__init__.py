"""The serving dynamics, reward and observation in plain NumPy, vectorised over envs.

A second implementation of the environment, standing on its own: its own constants
(`constants`, each mirroring a JAX one it must equal), every task number read from the params,
and one function per phase of the JAX simulator, with the same name, in the module of its
concept:

  roofline     perf_model: forward pass, decode step, mixed step, prefill, KV capacity
  traffic      workload and traffic.strata: length moments, arrivals, trace replay, traffic
               state, prompt-length strata
  engine       serving.engine: reconfigure, preempt_to_fit, emit, decode, check_memory
  admission    serving.admission: enqueue, admission_limits, admit, prefill, age_queue
  latency      serving.latency: time_to_first_token, latency_statistics, shared_latency_statistics
  iteration    serving.iteration: the mixed engine's iterations, chunk times, prompt service
  fresh_ttft   serving.fresh_ttft: the iteration chain, fresh arrivals' TTFT law
  mixed        serving.mixed: the mixed engine's phases (mixed_admission_limits, mixed_prefill,
               mixed_first_token, mixed_decode)
  server       serving.serve_interval (both engines, by params.engine) and its metrics
  observation  observation: observe, flatten
  env          env: reset, step_env, step, the action grid, the reward; ReferenceEnv

It has two uses. **Parity**: fed the same state, actions and random draws as the JAX env, it
returns the same observation, reward, flags and next state within float32 tolerance
(tests/test_reference.py, on tasks of both engines and every schedule kind). **Speed
baseline**: `ReferenceEnv`, with its own NumPy sampler, is what `inferencegym bench` sets the
JAX env against. It also documents the dynamics in their plainest form: cumulative sums as
cumsum, quantiles by search, divisions as divisions, a table read on the segment a search finds,
where the JAX side uses the formulations of `xla_ops` and unrolled sums.

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
