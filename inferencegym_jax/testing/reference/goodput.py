"""The running requests still meeting both SLOs, in NumPy (serving.goodput), for N envs at once.

Written per phase as the share of each part that survives it: every phase that removes a share
of the running pool (preemption, failure, completion) removes the same share of its good and
its late part, and an interval above a class's TPOT SLO moves all of that class's good
sequences to the late part.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.serving import OnTime, Queue, Sequences
from inferencegym_jax.testing.reference.arrays import safe_div
from inferencegym_jax.testing.reference.constants import F32


def surviving(before: Sequences, after: Sequences) -> np.ndarray:
    """(N,) share of each env's running sequences that are still there, in [0, 1]."""
    return np.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0).astype(F32)


def scale(on_time: OnTime, share: np.ndarray) -> OnTime:
    """Every part of the standing times a per-env share (N,)."""
    return OnTime((on_time.seqs * share[:, None]).astype(F32), (on_time.remaining * share[:, None]).astype(F32),
                  (on_time.late_seqs * share).astype(F32))


def admit_on_time(on_time: OnTime, admitted: Queue, readmitted_seqs: np.ndarray, ttft_centre_s: np.ndarray,
                  params: Any) -> OnTime:
    """Add the requests admitted within their TTFT SLO ((N, 3, A) bins) to the good part, the
    others and the readmitted preempted sequences to the late part."""
    met = (ttft_centre_s <= params.ttft_slo_s[None, :, None]).astype(F32)
    return admit_share_on_time(on_time, admitted, readmitted_seqs, met)


def admit_share_on_time(on_time: OnTime, admitted: Queue, readmitted_seqs: np.ndarray, in_slo: np.ndarray) -> OnTime:
    """`admit_on_time` with the share `in_slo` (N, 3, A) of each bin's admitted requests whose first
    token came within their class's TTFT SLO (serving.goodput.admit_share_on_time)."""
    late = ((1.0 - in_slo) * admitted.count).sum(axis=(1, 2)) + readmitted_seqs
    return OnTime((on_time.seqs + (in_slo * admitted.count).sum(axis=2)).astype(F32),
                  (on_time.remaining + (in_slo * admitted.output).sum(axis=2)).astype(F32),
                  (on_time.late_seqs + late).astype(F32))


def decode_on_time(on_time: OnTime, before: Sequences, after: Sequences, tpot_s: np.ndarray,
                   params: Any) -> tuple[OnTime, np.ndarray, np.ndarray, np.ndarray]:
    """Through decode: (standing left, good tokens, good requests finished, late requests
    finished), the last three (N,)."""
    left = surviving(before, after)
    finished = 1.0 - left
    met = (tpot_s[:, None] <= params.tpot_slo_s[None, :]).astype(F32)  # (N, 3)
    late = on_time.late_seqs + ((1.0 - met) * on_time.seqs).sum(axis=1)
    tokens = (met * on_time.remaining).sum(axis=1) * finished
    done = (met * on_time.seqs).sum(axis=1) * finished
    standing = OnTime((met * on_time.seqs * left[:, None]).astype(F32),
                      (met * on_time.remaining * left[:, None]).astype(F32), (late * left).astype(F32))
    return standing, tokens.astype(F32), done.astype(F32), (late * finished).astype(F32)
