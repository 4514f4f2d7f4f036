"""The running requests still meeting both SLOs, in NumPy (serving.goodput), for N envs at once.

Written per phase as the share of the good pool that survives it: every phase that removes a
share of the running pool (preemption, failure, completion) removes the same share of its good
part, and an interval above a class's TPOT SLO removes all of that class's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.serving import OnTime, Queue, Sequences
from inferencegym_jax.testing.reference.arrays import safe_div
from inferencegym_jax.testing.reference.constants import F32


def surviving(before: Sequences, after: Sequences) -> np.ndarray:
    """(N, 1) share of each env's running sequences that are still there, in [0, 1]."""
    return np.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0)[:, None].astype(F32)


def scale(on_time: OnTime, share: np.ndarray) -> OnTime:
    return OnTime((on_time.seqs * share).astype(F32), (on_time.remaining * share).astype(F32))


def admit_on_time(on_time: OnTime, admitted: Queue, ttft_centre_s: np.ndarray, params: Any) -> OnTime:
    """Add the requests admitted within their TTFT SLO ((N, 3, A) bins)."""
    met = ttft_centre_s <= params.ttft_slo_s[None, :, None]
    return OnTime((on_time.seqs + np.where(met, admitted.count, 0.0).sum(axis=2)).astype(F32),
                  (on_time.remaining + np.where(met, admitted.output, 0.0).sum(axis=2)).astype(F32))


def decode_on_time(on_time: OnTime, before: Sequences, after: Sequences, tpot_s: np.ndarray,
                   params: Any) -> tuple[OnTime, np.ndarray, np.ndarray]:
    """Through decode: (good pool left, good tokens (N,), good requests finished (N,))."""
    finished = 1.0 - surviving(before, after)  # (N, 1)
    met = (tpot_s[:, None] <= params.tpot_slo_s[None, :]).astype(F32)  # (N, 3)
    tokens = (met * on_time.remaining * finished).sum(axis=1)
    done = (met * on_time.seqs * finished).sum(axis=1)
    left = scale(on_time, (1.0 - finished) * met)
    return left, tokens.astype(F32), done.astype(F32)
