"""DistServe goodput in the fluid model: the running sequences still meeting both SLOs.

Under `ServerParams.slo_accounting == "completion"` a request is *good* when it is admitted
within its class's TTFT SLO and then decodes in no interval whose time per output token is
above its class's TPOT SLO (a per-interval TPOT check: a stall of one interval is a visible
freeze, whatever the request's mean). Preemption (KV overflow, a shrinking budget, a weight
reload) and out-of-memory failures end a request's good status: its user waits for a
recompute or gets an error. Goodput is the output tokens good requests generate, counted as
they are generated; a request's SLO outcome is decided when it finishes (DistServe, Zhong et
al., OSDI 2024: goodput counts the requests meeting both TTFT and TPOT SLOs).

The "admission" accounting of the v0 tasks decides a request at admission, against its TTFT
and the TPOT of its admission interval, and credits its whole output then: a policy could
admit in a fast interval and decode in slow ones (batch size flipped every interval) at full
credit. `types.OnTime` closes that: it splits the running pool into a good and a late part,
and since decode is memoryless (`engine.decode`) both finish, emit tokens and get preempted in
the same proportions as the running pool they belong to.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import xla_ops
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving.latency import FirstToken
from inferencegym_jax.serving.types import OnTime, Queue, Sequences, ServerParams


def kept_share(before: Sequences, after: Sequences) -> Array:
    """Fraction of a pool's sequences still in it after a preemption or failure, in [0, 1]."""
    return jnp.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0)


def admit_on_time(on_time: OnTime, admitted: Queue, readmitted: Sequences, ttft: FirstToken,
                  params: ServerParams) -> OnTime:
    """The standing with this interval's admissions: the bins whose TTFT centre is within their
    class's TTFT SLO join the good pool, the others and the readmitted preempted sequences the
    late one (the fluid engine's per-bin outcome)."""
    in_slo = (ttft.centre_s <= params.ttft_slo_s[:, None]).astype(jnp.float32)
    return admit_share_on_time(on_time, admitted, readmitted, in_slo)


def admit_share_on_time(on_time: OnTime, admitted: Queue, readmitted: Sequences, in_slo: Array) -> OnTime:
    """`admit_on_time` with the share `in_slo` (3, A) of each bin's admitted requests whose first
    token came within their class's TTFT SLO."""
    seqs, remaining, late = xla_ops.sums((in_slo * admitted.count, in_slo * admitted.output,
                                          (1.0 - in_slo) * admitted.count), axes=(1,))
    return OnTime(on_time.seqs + seqs, on_time.remaining + remaining,
                  on_time.late_seqs + xla_ops.class_sum(late) + readmitted.seqs)


class Decoded(NamedTuple):
    """What the decode phase decided; float32 scalars.

    Attributes:
      good_tokens: [tokens] output tokens generated for good requests within their TPOT SLO.
      good_completed: [requests] good requests that finished.
      missed: [requests] finished requests that had missed an SLO (now or before).
    """

    good_tokens: Array
    good_completed: Array
    missed: Array


def decode_on_time(
    on_time: OnTime, before: Sequences, after: Sequences, tpot_s: Array, params: ServerParams
) -> tuple[OnTime, Decoded]:
    """The standing through the decode phase: the running pool went from `before` to `after`
    at `tpot_s` [s per token]; the good sequences of classes whose TPOT SLO it broke turn late."""
    left_share = jnp.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0)
    done = 1.0 - left_share
    within = (tpot_s <= params.tpot_slo_s).astype(jnp.float32)  # (3,)
    broke = xla_ops.class_sum((1.0 - within) * on_time.seqs)
    decoded = Decoded(
        good_tokens=xla_ops.class_sum(within * on_time.remaining) * done,
        good_completed=xla_ops.class_sum(within * on_time.seqs) * done,
        missed=(on_time.late_seqs + broke) * done,
    )
    left = OnTime(within * on_time.seqs * left_share, within * on_time.remaining * left_share,
                  (on_time.late_seqs + broke) * left_share)
    return left, decoded
