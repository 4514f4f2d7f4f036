"""The running requests still meeting both SLOs, in NumPy (serving.goodput), for N envs at once.

Written per phase as the share of each part that survives it: every phase that removes a share
of the running pool (preemption, failure, completion) removes the same share of its good and
its late part, and an interval above a class's TPOT SLO moves all of that class's good
sequences to the late part.

Under "request" accounting (serving.request_tpot) the good part is kept by cohort instead, the
interval of the first token: a cohort's sequences share the wall time and tokens since then,
and finish late when that mean TPOT is above their class's SLO. Written here with an explicit
loop over cohorts and the oldest merge spelled out, the JAX side with array shifts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym_jax.serving import OnTime, Queue, Sequences
from inferencegym_jax.serving.types import TpotCohorts
from inferencegym_jax.testing.reference.arrays import safe_div
from inferencegym_jax.testing.reference.constants import F32, MIN_TPOT_S, TPOT_COHORTS


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


def empty_cohorts(n: int) -> TpotCohorts:
    """N envs without a good running sequence: (N, 3, H) counts and tokens to go, (N, H) time and tokens."""
    return TpotCohorts(np.zeros((n, 3, TPOT_COHORTS), F32), np.zeros((n, 3, TPOT_COHORTS), F32),
                       np.zeros((n, TPOT_COHORTS), F32), np.zeros((n, TPOT_COHORTS), F32))


def scale_cohorts(c: TpotCohorts, share: np.ndarray) -> TpotCohorts:
    """Every cohort's sequences and tokens to go times a per-env share (N,)."""
    return TpotCohorts((c.seqs * share[:, None, None]).astype(F32), (c.remaining * share[:, None, None]).astype(F32),
                       c.decode_s, c.tokens)


def age_cohorts(c: TpotCohorts) -> TpotCohorts:
    """One interval later: cohort k moves to k + 1; the last holds the two oldest, its time and
    tokens the sequence-weighted mean of theirs (the older one's where both are empty)."""
    h = TPOT_COHORTS
    seqs, remaining = np.zeros_like(c.seqs), np.zeros_like(c.remaining)
    decode_s, tokens = np.zeros_like(c.decode_s), np.zeros_like(c.tokens)
    for k in range(h - 2):
        seqs[:, :, k + 1], remaining[:, :, k + 1] = c.seqs[:, :, k], c.remaining[:, :, k]
        decode_s[:, k + 1], tokens[:, k + 1] = c.decode_s[:, k], c.tokens[:, k]
    older, oldest = c.seqs[:, :, h - 2].sum(axis=1), c.seqs[:, :, h - 1].sum(axis=1)
    both = older + oldest
    seqs[:, :, h - 1] = c.seqs[:, :, h - 2] + c.seqs[:, :, h - 1]
    remaining[:, :, h - 1] = c.remaining[:, :, h - 2] + c.remaining[:, :, h - 1]
    for out, x in ((decode_s, c.decode_s), (tokens, c.tokens)):
        mean = safe_div(older * x[:, h - 2] + oldest * x[:, h - 1], both)
        out[:, h - 1] = np.where(both > 0, mean, x[:, h - 2])
    return TpotCohorts(seqs, remaining, decode_s, tokens)


def admit_cohorts(on_time: OnTime, c: TpotCohorts) -> tuple[OnTime, TpotCohorts]:
    """The good admissions (on_time's good part) into cohort 0; on_time keeps its late part."""
    seqs, remaining = c.seqs.copy(), c.remaining.copy()
    seqs[:, :, 0] += on_time.seqs
    remaining[:, :, 0] += on_time.remaining
    late_only = OnTime(np.zeros_like(on_time.seqs), np.zeros_like(on_time.remaining), on_time.late_seqs)
    return late_only, TpotCohorts(seqs.astype(F32), remaining.astype(F32), c.decode_s, c.tokens)


def decode_cohorts(c: TpotCohorts, before: Sequences, after: Sequences, tpot_s: np.ndarray, params: Any
                   ) -> tuple[TpotCohorts, np.ndarray, np.ndarray, np.ndarray]:
    """Through decode: every cohort adds dt and dt / TPOT tokens; the finished share of each is good
    when its mean TPOT is within the class's SLO. Returns (cohorts left, good tokens, good requests
    finished, late requests finished), the last three (N,)."""
    left = surviving(before, after)
    finished = 1.0 - left
    decode_s = (c.decode_s + params.dt_s).astype(F32)
    tokens = (c.tokens + params.dt_s / np.maximum(tpot_s, MIN_TPOT_S)[:, None]).astype(F32)
    mean = safe_div(decode_s, tokens)  # (N, H)
    good_tokens, good, late = (np.zeros(len(left), np.float64) for _ in range(3))
    for k in range(TPOT_COHORTS):
        met = (mean[:, k, None] <= params.tpot_slo_s[None, :]).astype(F32)  # (N, 3)
        good_tokens += (met * c.remaining[:, :, k]).sum(axis=1)
        good += (met * c.seqs[:, :, k]).sum(axis=1)
        late += ((1.0 - met) * c.seqs[:, :, k]).sum(axis=1)
    kept = scale_cohorts(TpotCohorts(c.seqs, c.remaining, decode_s, tokens), left)
    return (kept, (good_tokens * finished).astype(F32), (good * finished).astype(F32),
            (late * finished).astype(F32))
