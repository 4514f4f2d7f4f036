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
credit. The good pool `types.OnTime` closes that: decode is memoryless (`engine.decode`), so
the good sequences finish, emit tokens and get preempted in the same proportions as the
running pool they belong to.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from inferencegym_jax import xla_ops
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving.latency import FirstToken
from inferencegym_jax.serving.types import OnTime, Queue, Sequences, ServerParams

Array = Any


def kept_share(before: Sequences, after: Sequences) -> Array:
    """Fraction of a pool's sequences still in it after a preemption or failure, in [0, 1]."""
    return jnp.clip(safe_div(after.seqs, before.seqs), 0.0, 1.0)


def admit_on_time(on_time: OnTime, admitted: Queue, ttft: FirstToken, params: ServerParams) -> OnTime:
    """The good pool with the requests admitted within their class's TTFT SLO added."""
    in_slo = ttft.centre_s <= params.ttft_slo_s[:, None]
    seqs, remaining = xla_ops.sums((jnp.where(in_slo, admitted.count, 0.0), jnp.where(in_slo, admitted.output, 0.0)),
                                   axes=(1,))
    return OnTime(on_time.seqs + seqs, on_time.remaining + remaining)


class Decoded(NamedTuple):
    """What the good pool produced in the decode phase; float32 scalars.

    Attributes:
      good_tokens: [tokens] output tokens generated for good requests within their TPOT SLO.
      good_completed: [requests] good requests that finished.
    """

    good_tokens: Array
    good_completed: Array


def decode_on_time(
    on_time: OnTime, before: Sequences, after: Sequences, tpot_s: Array, params: ServerParams
) -> tuple[OnTime, Decoded]:
    """The good pool through the decode phase: the running pool went from `before` to `after`
    at `tpot_s` [s per token]; classes whose TPOT SLO it broke lose their good sequences."""
    done = jnp.clip(1.0 - safe_div(after.seqs, before.seqs), 0.0, 1.0)
    within = (tpot_s <= params.tpot_slo_s).astype(jnp.float32)  # (3,)
    generated = on_time.remaining * done
    completed = on_time.seqs * done
    decoded = Decoded(xla_ops.class_sum(within * generated), xla_ops.class_sum(within * completed))
    left = OnTime(on_time.seqs - completed, on_time.remaining - generated)
    return left.scaled(within), decoded
