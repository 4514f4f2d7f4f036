"""The engine's own phases: reconfiguration, KV preemption, decode and out-of-memory restarts.

* **Reconfiguration**: a new precision tier loads new weights (weight_bytes / weight_load_bw)
  and restarts the engine (restart_s): the server stalls and the KV cache is lost (running
  sequences are preempted). Turning disaggregation on starts a prefill engine on a second GPU
  (weight load + prefill_start_s), billed from the request, while this engine keeps serving;
  it takes over prefill once ready. Turning it off releases the GPU at once.
* **KV capacity**: when resident tokens exceed the capacity (the budget shrank, or decode grew
  the contexts), the newest sequences are preempted and later recomputed, as vLLM does.
* **Decode**: the running set decodes for the rest of the interval at the roofline's step time;
  each sequence emits `tokens_per_step(spec_length)` tokens per step. Completions are
  memoryless: with mean remaining output m and e tokens emitted per sequence, a fraction
  1 - exp(-e / m) of the sequences finishes and exactly that fraction of the outstanding output
  tokens is produced (the expected tokens of min(e, Exp(m)) draws). Finished sequences free
  their KV cache.
* **Memory**: weights + resident KV + reserve. Above `memory_limit_bytes` the engine runs out of
  memory: every running and preempted sequence fails and the engine restarts.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import perf_model
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.types import Sequences, ServerParams, ServerState


class Engine(NamedTuple):
    """The engine's condition for one interval; float32 scalars unless noted.

    Attributes:
      busy_s: [s] of the interval lost to a reload or restart.
      serving_s: [s] left for prefill and decode (dt - busy_s).
      stall_s: [s] of stall owed from the start of the interval (busy_s of it is sat out now).
      disaggregated: bool, a prefill GPU is ready and does the prefill.
      prefill_warmup_s: [s] until a requested prefill GPU is ready, after this interval.
      num_gpus: GPUs billed (2 from the moment disaggregation is requested).
    """

    busy_s: Array
    serving_s: Array
    stall_s: Array
    disaggregated: Array
    prefill_warmup_s: Array
    num_gpus: Array


def reconfigure(
    state: ServerState, config: ServingAction, profile: perf_model.Profile, params: ServerParams
) -> tuple[Engine, Sequences, Sequences, Array]:
    """Apply `config` at the start of an interval.

    The first configuration of a fresh engine is free. A new precision reloads the weights:
    a stall of weight_bytes / weight_load_bw + restart_s [s], and the running sequences are
    dropped to the preempted pool (their KV cache is gone). Turning disaggregation on starts a
    prefill GPU that is ready after weight_bytes / weight_load_bw + prefill_start_s [s].

    Returns (engine, running, preempted, dropped [sequences]).
    """
    dt = params.dt_s
    requested = config.prefill_disagg > 0.5
    weights_changed = state.started & (config.quant_tier != state.config.quant_tier)
    newly_on = state.started & requested & (state.config.prefill_disagg < 0.5)
    load_s = profile.weight_bytes / profile.weight_load_bw
    warmup = jnp.where(requested, jnp.where(newly_on, load_s + params.prefill_start_s, state.prefill_warmup_s), 0.0)
    stall = state.stall_s + jnp.where(weights_changed, load_s + params.restart_s, 0.0)
    busy = jnp.minimum(stall, dt)
    engine = Engine(
        busy_s=busy,
        serving_s=dt - busy,
        stall_s=stall,
        disaggregated=requested & (warmup <= 0.0),
        prefill_warmup_s=jnp.maximum(warmup - dt, 0.0),
        num_gpus=jnp.where(requested, jnp.float32(2.0), jnp.float32(1.0)),  # strong float32, as reset makes it
    )
    kept = jnp.where(weights_changed, 0.0, 1.0)
    dropped = state.running.scaled(1.0 - kept)
    return engine, state.running.scaled(kept), state.preempted + dropped, dropped.seqs


def preempt_to_fit(running: Sequences, preempted: Sequences, capacity: Array) -> tuple[Sequences, Sequences, Array]:
    """Preempt the newest running sequences until the resident context fits `capacity` [tokens].

    The preempted share is excess / context of every field (the newest sequences are an
    average sample of the pool in the fluid model). Returns (running, preempted, evicted
    [sequences]).
    """
    share = jnp.clip(safe_div(running.context - capacity, running.context), 0.0, 1.0)
    evicted = running.scaled(share)
    return running - evicted, preempted + evicted, evicted.seqs


class Decode(NamedTuple):
    """What the decode phase produced; float32 scalars.

    Attributes:
      generated: [tokens] output tokens emitted.
      completed: [sequences] finished.
      tpot_s: [s] wall time per output token of a running sequence (stalls and prefill
        included); a lone step's time per token when nothing ran.
    """

    generated: Array
    completed: Array
    tpot_s: Array


def emit(running: Sequences, per_seq_tokens: Array) -> tuple[Sequences, Array, Array]:
    """Memoryless completions when each sequence of `running` emits `per_seq_tokens` tokens
    (module docstring). Returns (the pool after, generated [tokens], completed [sequences])."""
    mean_remaining = jnp.maximum(safe_div(running.remaining, running.seqs), 1.0)
    done_frac = -jnp.expm1(-per_seq_tokens / mean_remaining)
    left_frac = jnp.exp(-per_seq_tokens / mean_remaining)  # 1 - done_frac without cancellation
    generated = running.remaining * done_frac
    completed = running.seqs * done_frac
    after = Sequences(
        seqs=running.seqs * left_frac,
        context=(running.context + generated) * left_frac,
        remaining=running.remaining * left_frac,
    )
    return after, generated, completed


def interval_tpot(after: Sequences, completed: Array, per_seq_tokens: Array, step_s: Array,
                  tokens_per_step: Array, dt: Array) -> Array:
    """[s] wall time per output token of a running sequence that emitted `per_seq_tokens` in the
    interval of `dt` [s] (at most dt); a lone step's time per token (`step_s` / `tokens_per_step`)
    when nothing ran (`after` empty and nothing `completed`)."""
    return jnp.where(
        after.seqs + completed > EPS,
        jnp.minimum(dt / jnp.maximum(per_seq_tokens, EPS), dt),
        step_s / tokens_per_step,
    )


def decode(
    running: Sequences, decode_s: Array, tokens_per_step: Array, config: ServingAction,
    profile: perf_model.Profile, dt: Array,
) -> tuple[Sequences, Decode]:
    """Decode the running set for `decode_s` [s]; memoryless completions (module docstring).

    Up to batch_size sequences decode at once; each emits tokens_per_step per engine step.
    Returns (running after completions, what was produced).
    """
    concurrent = jnp.minimum(running.seqs, config.batch_size)
    context = safe_div(running.context, running.seqs)
    step_s = perf_model.decode_step_time(profile, jnp.maximum(concurrent, 1.0), context, config.spec_length)
    per_seq_tokens = (decode_s / step_s) * tokens_per_step * safe_div(concurrent, running.seqs)
    after, generated, completed = emit(running, per_seq_tokens)
    tpot = interval_tpot(after, completed, per_seq_tokens, step_s, tokens_per_step, dt)
    return after, Decode(generated, completed, tpot)


class Memory(NamedTuple):
    """The memory check at the end of an interval; float32 scalars unless noted.

    Attributes:
      oom: bool, the engine ran out of memory.
      failed: [requests] lost with it (every running and preempted sequence).
      used_bytes: [B] in use on the decode GPU (at the peak when it ran out).
      stall_s: [s] of stall owed at the start of the next interval (a restart after an OOM).
    """

    oom: Array
    failed: Array
    used_bytes: Array
    stall_s: Array


def check_memory(
    running: Sequences, preempted: Sequences, engine: Engine, profile: perf_model.Profile, params: ServerParams
) -> tuple[Sequences, Sequences, Memory]:
    """Weights + resident KV + reserve against the memory limit; an OOM fails every sequence
    and restarts the engine (restart_s). Returns (running, preempted, memory)."""
    used = profile.weight_bytes + running.context * profile.kv_bytes_per_token + profile.reserve_bytes
    oom = used > params.memory_limit_bytes
    failed = jnp.where(oom, running.seqs + preempted.seqs, 0.0)
    kept = jnp.where(oom, 0.0, 1.0)
    running, preempted = running.scaled(kept), preempted.scaled(kept)
    after = profile.weight_bytes + running.context * profile.kv_bytes_per_token + profile.reserve_bytes
    stall_next = engine.stall_s - engine.busy_s + jnp.where(oom, params.restart_s, 0.0)
    return running, preempted, Memory(oom, failed, jnp.where(oom, used, after), stall_next)
