"""Per-request TPOT for "request" SLO accounting: the good running sequences by cohort.

vLLM's benchmark and AISimulate report a request's time per output token as its mean over the
request, (e2e latency - TTFT) / (output tokens - 1) (experiments/crosscheck/reference.json's
settings, "tpot"; experiments/crosscheck/README.md), and an SLO on TPOT is judged on that mean.
The "completion" accounting (`serving.goodput`) judges every interval a request decodes in
instead: one interval slowed past the SLO by a long prompt's chunks turns every request decoding
in it late, whatever its mean (docs/FLEET.md, "What the fleet's pooling rests on": 0.78 % of a
lone Fleet1 replica's requests at 0.2 req/s).

Here the good running sequences (first token within their class's TTFT SLO, never preempted)
are kept by cohort: the interval of their first token, k = 0 (this one) to H - 1 (H - 1 or more
ago, `TPOT_COHORTS`). Every sequence of a cohort has decoded in the same intervals, so in the
fluid engine they share their decode time since the first token and the tokens emitted in it:
the cohort's mean TPOT is the one of each of its requests. Completions are memoryless
(`engine.emit`), the same share of every cohort; those of a cohort whose mean TPOT is above its
class's SLO count as missed, the others as good.

Approximations, each named: a cohort's first interval counts whole, like the others (its
sequences start part-way through it, which weights it less in their mean); an interval adds
dt [s] and dt / TPOT tokens, the engine's interval TPOT being the wall time per token of a
sequence running through it (`engine.interval_tpot`; capped at dt, so an interval without a
token adds one); the oldest cohort merges the two oldest, its time and tokens averaged over
their sequences.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import xla_ops
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving.goodput import Decoded
from inferencegym_jax.serving.iteration import Iterations
from inferencegym_jax.serving.tpot_spread import Bursts, bursts_of, finisher_tokens, miss_share
from inferencegym_jax.serving.types import TPOT_COHORTS, OnTime, Sequences, ServerParams, TpotCohorts
from inferencegym_jax.traffic.workload import Arrivals

# [s per token] floor of the interval TPOT a cohort's tokens are counted with: a guard only
# (`engine.interval_tpot` is at least one decode step's time per token).
MIN_TPOT_S = 1e-9


def aged(cohorts: TpotCohorts) -> TpotCohorts:
    """One interval later: cohort k becomes k + 1, the two oldest merge (their time and tokens
    averaged over their sequences), cohort 0 is empty for this interval's admissions."""
    weight = jnp.sum(cohorts.seqs, axis=0)  # (H,)
    w_a, w_b = weight[-2], weight[-1]

    def merged(x: Array) -> Array:
        return jnp.where(w_a + w_b > 0.0, safe_div(w_a * x[-2] + w_b * x[-1], w_a + w_b), x[-2])

    def shift(x: Array, last: Array) -> Array:
        return jnp.concatenate([jnp.zeros_like(x[..., :1]), x[..., :-2], last[..., None]], axis=-1)

    return TpotCohorts(shift(cohorts.seqs, cohorts.seqs[:, -2] + cohorts.seqs[:, -1]),
                       shift(cohorts.remaining, cohorts.remaining[:, -2] + cohorts.remaining[:, -1]),
                       shift(cohorts.decode_s, merged(cohorts.decode_s)), shift(cohorts.tokens, merged(cohorts.tokens)))


def admitted(cohorts: TpotCohorts, seqs: Array, remaining: Array) -> TpotCohorts:
    """Cohort 0 with the good admissions: `seqs` (3,) [sequences], `remaining` (3,) [tokens]."""
    first = jnp.arange(TPOT_COHORTS) == 0
    return TpotCohorts(jnp.where(first, cohorts.seqs + seqs[:, None], cohorts.seqs),
                       jnp.where(first, cohorts.remaining + remaining[:, None], cohorts.remaining),
                       cohorts.decode_s, cohorts.tokens)


def through_interval(cohorts: TpotCohorts, tpot_s: Array, dt: Array) -> TpotCohorts:
    """Every cohort one interval of `dt` [s] further through its decode at `tpot_s` [s per token]:
    dt more wall time and dt / tpot_s more tokens per sequence (module docstring)."""
    return TpotCohorts(cohorts.seqs, cohorts.remaining, cohorts.decode_s + dt,
                       cohorts.tokens + dt / jnp.maximum(tpot_s, MIN_TPOT_S))


def decoded(cohorts: TpotCohorts, done: Array, tpot_s: Array, tpot_slo_s: Array, dt: Array,
            bursts: Bursts | None = None) -> tuple[TpotCohorts, Decoded]:
    """The cohorts through an interval of `dt` [s] whose running sequences decode at `tpot_s`
    [s per token] and finish a share `done` in [0, 1] (memoryless): each cohort adds dt and
    dt / tpot_s tokens, then its finished sequences are judged against their class's `tpot_slo_s`
    (3,) [s]: by the cohort's mean TPOT, or with `bursts` by the share of them whose own TPOT is
    within it (`tpot_spread`). Returns the cohorts left and what finished (late_seqs not included:
    `goodput.decode_on_time` counts those)."""
    tokens_before = cohorts.tokens
    cohorts = through_interval(cohorts, tpot_s, dt)
    if bursts is None:
        within = (cohorts.mean_tpot_s()[None, :] <= tpot_slo_s[:, None]).astype(jnp.float32)  # (3, H)
    else:
        finished = finisher_tokens(tokens_before[None, :], cohorts.tokens[None, :],
                                   safe_div(cohorts.remaining, cohorts.seqs))  # (3, H)
        within = 1.0 - miss_share(cohorts.mean_tpot_s()[None, :], finished, tpot_slo_s[:, None], bursts)
    good, late, good_tokens = xla_ops.sums((within * cohorts.seqs, (1.0 - within) * cohorts.seqs,
                                            within * cohorts.remaining), axes=(0, 1))
    result = Decoded(good_tokens=good_tokens * done, good_completed=good * done, missed=late * done)
    return cohorts.scaled(1.0 - done), result


# ------------------------------------------------------------------ the phases of serve_interval
# Each takes and returns None when the task does not use "request" accounting (ServerState.tpot is
# None), so serve_interval calls them unconditionally and other tasks' programs are unchanged.


def cohorts_at_start(cohorts: TpotCohorts | None, kept: Array, params: ServerParams) -> TpotCohorts | None:
    """The cohorts at the interval's start: one interval older (`aged`), times the share `kept`
    of the running pool that a reconfiguration and a shrunk KV budget left."""
    if (cohorts is None) != (params.slo_accounting != "request"):
        raise ValueError(f"the server state has TPOT cohorts: {cohorts is not None}, but "
                         f"slo_accounting={params.slo_accounting!r}; build it with "
                         "serving.initial_state(..., slo_accounting) of the same params")
    return None if cohorts is None else aged(cohorts).scaled(kept)


def interval_bursts(arrivals: Arrivals, it: Iterations | None, params: ServerParams) -> Bursts | None:
    """The interval's `tpot_spread.Bursts` under tpot_spread "bursts" (`it`: the mixed engine's
    iteration model), else None."""
    if params.tpot_spread == "cohort":
        return None
    if it is None or params.slo_accounting != "request":
        raise ValueError(f"tpot_spread={params.tpot_spread!r} needs engine='mixed' and slo_accounting='request', "
                         f"not engine={params.engine!r}, slo_accounting={params.slo_accounting!r}")
    return bursts_of(arrivals, it)


def admit_to_cohorts(on_time: OnTime, cohorts: TpotCohorts | None) -> tuple[OnTime, TpotCohorts | None]:
    """Move the good admissions that `goodput.admit_share_on_time` put in `on_time` (whose good
    part is otherwise empty under "request" accounting) into cohort 0."""
    if cohorts is None:
        return on_time, None
    keep = OnTime(jnp.zeros_like(on_time.seqs), jnp.zeros_like(on_time.remaining), on_time.late_seqs)
    return keep, admitted(cohorts, on_time.seqs, on_time.remaining)


def judge_cohorts(cohorts: TpotCohorts | None, late: Decoded, before: Sequences, after: Sequences, tpot_s: Array,
                  params: ServerParams, bursts: Bursts | None = None) -> tuple[TpotCohorts | None, Decoded]:
    """The decode phase's outcome: `late` (`goodput.decode_on_time` of the late part) plus the
    cohorts' (`decoded`, with the interval's `bursts` under tpot_spread "bursts") as the running
    pool went from `before` to `after` at `tpot_s`."""
    if cohorts is None:
        return None, late
    cohorts, by_cohort = decoded(cohorts, finished_share(before, after), tpot_s, params.tpot_slo_s, params.dt_s,
                                 bursts)
    return cohorts, Decoded(late.good_tokens + by_cohort.good_tokens, late.good_completed + by_cohort.good_completed,
                            late.missed + by_cohort.missed)


def finished_by_cohort(cohorts: TpotCohorts | None, before: Sequences, after: Sequences, tpot_s: Array,
             params: ServerParams) -> tuple[Array, Array]:
    """The per-request TPOT of the good requests that finish in the interval, for request-level
    statistics (`inferencegym_jax.loadtest`): each cohort's mean TPOT after the interval [s per
    token] and its finished sequences [requests], float32 (H,) each, from the cohorts as `judge_cohorts`
    takes them; (1,) zeros without cohorts."""
    if cohorts is None:
        return jnp.zeros((1,), jnp.float32), jnp.zeros((1,), jnp.float32)
    later = through_interval(cohorts, tpot_s, params.dt_s)
    return later.mean_tpot_s(), jnp.sum(cohorts.seqs, axis=0) * finished_share(before, after)


def finished_share(before: Sequences, after: Sequences) -> Array:
    """The share of the running pool that finished as it went from `before` to `after`, in [0, 1]
    (memoryless completions: every cohort's)."""
    return 1.0 - jnp.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0)


def rescale_cohorts(cohorts: TpotCohorts | None, kept: Array) -> TpotCohorts | None:
    """`cohorts` times the share `kept` of the running pool (KV overflow, an out-of-memory restart)."""
    return None if cohorts is None else cohorts.scaled(kept)
