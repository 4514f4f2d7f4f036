"""An analog forecast of a replayed trace: the stretches of its past that followed the load seen now.

A causal planner on a trace task (`mpc`, `trace_forecast="analogs"`) cannot sample the trace's
future from keys: a replay draws nothing. Its persistence forecast replays the last `horizon`
intervals, the exact burst timing of a trace whose inter-arrival CV is ~13 (task 4-v1), and
plans on that one future. The method of analogues forecasts instead with what followed the
past moments that looked like now (Lorenz, "Atmospheric predictability as revealed by naturally
occurring analogues", Journal of the Atmospheric Sciences 26(4), 1969; as an ensemble: Delle
Monache, Eckel, Rife, Nagarajan and Searight, "Probabilistic weather prediction with an analog
ensemble", Monthly Weather Review 141(10), 2013): the `count` start times tau of the trace's past
whose offered prompt-token rate over the `WINDOW` intervals before tau is nearest the rate over
the `WINDOW` intervals before now. Each analog's future, [tau, tau + horizon), ended before now,
so the forecast sees only what the server saw (the trace before the episode began included: a
server that ran before it saw that load). The plan scores each candidate by its mean over them.

All times are on the trace's clock [s]: `workload.WorkloadState.phase_s` (the replay's offset)
plus the interval's start.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from inferencegym_jax.traffic import workload

# [intervals] The load an analog must match: the offered prompt tokens over the last 30 intervals.
# Chosen on 64 training episodes of task 4-v1 (the switching rule's selection episodes; planning
# every 10th interval, horizon 30, 64 analogs; experiments/trace_forecast_sweep.py,
# experiments/results/trace_forecast_sweep_v1.json): windows 10 / 30 / 60 gained +0.025 / +0.038 / +0.026
# over the best static configuration. The switching rule's search chose 30 too
# (experiments/results/switch_rule_v1.json).
WINDOW = 30
# [intervals] How far back before now - horizon an analog may start: an hour at 1-s intervals,
# the Azure trace's whole span (3,424 s, configs/tasks/task4_v1.toml). A fixed size keeps the
# plan's shapes static; starts before the trace's beginning are masked.
LOOKBACK = 3600


def prompt_tokens_before(trace: workload.Trace, time_s: jax.Array) -> jax.Array:
    """[tokens] float32, shape of `time_s`: prompt tokens of every class that arrived before
    `time_s` [s] on the trace's clock."""
    _, prompt, _, _ = workload.trace_totals_before(trace, time_s)
    return jnp.sum(prompt, axis=0)


def prompt_rate(trace: workload.Trace, time_s: jax.Array, window_s: jax.Array) -> jax.Array:
    """[prompt tokens/s] float32, shape of `time_s`: the offered rate over [time_s - window_s, time_s)."""
    return (prompt_tokens_before(trace, time_s) - prompt_tokens_before(trace, time_s - window_s)) / window_s


def analog_starts(trace: workload.Trace, now_s: jax.Array, horizon: int, count: int, dt_s: jax.Array,
                  window: int = WINDOW, lookback: int = LOOKBACK) -> tuple[jax.Array, jax.Array]:
    """The `count` analogs of the moment `now_s` [s]: (start times tau [s] float32 (count,),
    found bool (count,)), nearest first.

    Candidates are tau_j = now_s - (horizon + j) x dt_s, j = 0 .. lookback - 1 (j = 0: the
    persistence forecast's stretch), each with a whole `window` of trace before it; `found` is
    False where fewer than `count` candidates exist (early in the trace), and that start is
    then meaningless.
    """
    window_s = window * dt_s
    taus = now_s - (horizon + jnp.arange(lookback, dtype=jnp.float32)) * dt_s
    distance = jnp.abs(prompt_rate(trace, taus, window_s) - prompt_rate(trace, now_s, window_s))
    distance = jnp.where(taus >= window_s, distance, jnp.inf)
    negative, nearest = jax.lax.top_k(-distance, count)
    return taus[nearest], jnp.isfinite(negative)
