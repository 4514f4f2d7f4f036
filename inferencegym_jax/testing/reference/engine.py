"""The engine's phases in NumPy (serving.engine): reconfiguration, KV preemption, decode and
out-of-memory restarts, for N envs at once.

* A new precision tier reloads the weights (weight_bytes / weight_load_bw + restart_s of stall)
  and drops the KV cache: the running sequences move to the preempted pool. Turning
  disaggregation on starts a prefill GPU, ready after weight_bytes / weight_load_bw +
  prefill_start_s and billed from the request. A fresh engine's first configuration is free.
* Resident tokens above the KV capacity preempt the newest sequences, an average share of the
  pool (excess / context of every field).
* Decode: each sequence emits tokens_per_step tokens per step; completions are memoryless
  (`emit`), so with e tokens emitted per sequence and m mean remaining output a fraction
  1 - exp(-e / m) of the sequences and of the outstanding output finishes.
* Weights + resident KV + reserve above the memory limit: every sequence fails and the engine
  restarts.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.serving import Sequences, ServerState
from inferencegym_jax.testing.reference import roofline
from inferencegym_jax.testing.reference.arrays import add_pools, safe_div, scale_pool, subtract_pools
from inferencegym_jax.testing.reference.constants import DISAGG_GPUS, EPS, F32, SWITCH_ON


class Engine(NamedTuple):
    """The engine's condition for one interval (serving.engine.Engine); (N,) float32 unless noted.

    Attributes:
      busy_s: [s] of the interval lost to a reload or restart.
      serving_s: [s] left for prefill and decode.
      stall_s: [s] of stall owed from the start of the interval.
      disaggregated: bool, a ready prefill GPU does the prefill.
      prefill_warmup_s: [s] until a requested prefill GPU is ready, after this interval.
      num_gpus: [GPUs] billed.
    """

    busy_s: np.ndarray
    serving_s: np.ndarray
    stall_s: np.ndarray
    disaggregated: np.ndarray
    prefill_warmup_s: np.ndarray
    num_gpus: np.ndarray


def reconfigure(
    state: ServerState, config: Any, profile: Any, params: Any
) -> tuple[Engine, Sequences, Sequences, np.ndarray]:
    """Apply `config` at the start of an interval (serving.engine.reconfigure; module docstring).

    Returns (engine, running, preempted, dropped [sequences] (N,)).
    """
    dt = params.dt_s
    previous = state.config
    requested = config.prefill_disagg > SWITCH_ON
    weights_changed = state.started & (config.quant_tier != previous.quant_tier)
    newly_on = state.started & requested & (previous.prefill_disagg < SWITCH_ON)
    load_s = profile.weight_bytes / profile.weight_load_bw
    warmup = np.where(newly_on, load_s + params.prefill_start_s, state.prefill_warmup_s)
    warmup = np.where(requested, warmup, F32(0.0))
    stall = state.stall_s + np.where(weights_changed, load_s + params.restart_s, F32(0.0))
    busy = np.minimum(stall, dt)
    engine = Engine(
        busy_s=busy,
        serving_s=dt - busy,
        stall_s=stall,
        disaggregated=requested & (warmup <= 0.0),
        prefill_warmup_s=np.maximum(warmup - dt, F32(0.0)),
        num_gpus=np.where(requested, DISAGG_GPUS, F32(1.0)),
    )
    dropped = scale_pool(state.running, np.where(weights_changed, F32(1.0), F32(0.0)))
    return engine, subtract_pools(state.running, dropped), add_pools(state.preempted, dropped), dropped.seqs


def preempt_to_fit(
    running: Sequences, preempted: Sequences, capacity: np.ndarray
) -> tuple[Sequences, Sequences, np.ndarray]:
    """Preempt the newest running sequences until the resident context fits `capacity` [tokens]
    (serving.engine.preempt_to_fit). Returns (running, preempted, evicted [sequences])."""
    share = np.clip(safe_div(running.context - capacity, running.context), 0.0, 1.0)
    evicted = scale_pool(running, share)
    return subtract_pools(running, evicted), add_pools(preempted, evicted), evicted.seqs


class Decode(NamedTuple):
    """What decode produced (serving.engine.Decode); (N,) float32.

    Attributes:
      generated: [tokens] output tokens emitted.
      completed: [sequences] finished.
      tpot_s: [s] wall time per output token of a running sequence (a lone step's per token
        when nothing ran).
    """

    generated: np.ndarray
    completed: np.ndarray
    tpot_s: np.ndarray


def emit(running: Sequences, tokens_per_seq: np.ndarray) -> tuple[Sequences, np.ndarray, np.ndarray]:
    """Memoryless completions when each sequence of `running` emits `tokens_per_seq` (N,) tokens
    (serving.engine.emit): with m the mean remaining output, a fraction 1 - exp(-e / m) of the
    sequences and of the outstanding output finishes. Returns (the pool after, generated
    [tokens], completed [sequences])."""
    mean_remaining = np.maximum(safe_div(running.remaining, running.seqs), F32(1.0))
    done = -np.expm1(-tokens_per_seq / mean_remaining)  # 1 - exp(-e / m), accurate for small e / m
    left = np.exp(-tokens_per_seq / mean_remaining)
    generated = running.remaining * done
    completed = running.seqs * done
    after = Sequences(running.seqs * left, (running.context + generated) * left, running.remaining * left)
    return after, generated.astype(F32), completed.astype(F32)


def interval_tpot(after: Sequences, completed: np.ndarray, tokens_per_seq: np.ndarray, step_s: np.ndarray,
                  tokens_per_step: np.ndarray, dt: Any) -> np.ndarray:
    """[s] wall time per output token of a sequence that emitted `tokens_per_seq` in the interval,
    at most dt; a lone step's time per token when nothing ran (serving.engine.interval_tpot)."""
    ran = after.seqs + completed > EPS
    return np.where(ran, np.minimum(dt / np.maximum(tokens_per_seq, EPS), dt), step_s / tokens_per_step).astype(F32)


def decode(
    running: Sequences, decode_s: np.ndarray, tokens_per_step: np.ndarray, config: Any, profile: Any, dt: Any
) -> tuple[Sequences, Decode]:
    """Decode the running set for `decode_s` [s], up to batch_size sequences at a time, with
    memoryless completions (serving.engine.decode). Returns (running after it, what it made)."""
    concurrent = np.minimum(running.seqs, config.batch_size)
    context = safe_div(running.context, running.seqs)
    step_s = roofline.decode_step_time(profile, np.maximum(concurrent, F32(1.0)), context, config.spec_length)
    steps = decode_s / step_s
    tokens_per_seq = steps * tokens_per_step * safe_div(concurrent, running.seqs)  # a sequence waits its turn
    after, generated, completed = emit(running, tokens_per_seq)
    tpot = interval_tpot(after, completed, tokens_per_seq, step_s, tokens_per_step, dt)
    return after, Decode(generated, completed, tpot)


class Memory(NamedTuple):
    """The end-of-interval memory check (serving.engine.Memory); (N,) float32 unless noted.

    Attributes:
      oom: bool, the engine ran out of memory.
      failed: [requests] lost with it.
      used_bytes: [B] in use on the decode GPU (the peak when it ran out).
      stall_s: [s] of stall owed at the start of the next interval.
    """

    oom: np.ndarray
    failed: np.ndarray
    used_bytes: np.ndarray
    stall_s: np.ndarray


def check_memory(
    running: Sequences, preempted: Sequences, engine: Engine, profile: Any, params: Any
) -> tuple[Sequences, Sequences, Memory]:
    """Weights + resident KV + reserve against the memory limit; out of memory fails every
    sequence and restarts the engine (serving.engine.check_memory)."""

    def used_bytes(pool: Sequences) -> np.ndarray:
        return profile.weight_bytes + pool.context * profile.kv_bytes_per_token + profile.reserve_bytes

    peak = used_bytes(running)
    oom = peak > params.memory_limit_bytes
    failed = np.where(oom, running.seqs + preempted.seqs, F32(0.0))
    kept = np.where(oom, F32(0.0), F32(1.0))
    running, preempted = scale_pool(running, kept), scale_pool(preempted, kept)
    owed = engine.stall_s - engine.busy_s + np.where(oom, params.restart_s, F32(0.0))
    return running, preempted, Memory(oom, failed, np.where(oom, peak, used_bytes(running)), owed)
