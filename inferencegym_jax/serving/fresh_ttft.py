"""Time to first token of the requests served in the interval they arrive in (the mixed engine).

Inside a control interval the engine runs iterations back to back (`serving.iteration`): every
prompt waiting when an iteration starts goes into it (up to the chunk budget), one forward with the
decodes. A request that arrives at a Poisson instant therefore waits for the iteration in flight,
then rides in the next one with whoever arrived during the wait, and is done after its own
ceil(p / chunk) iterations. Its TTFT is

    S(p) + X,   X = U M~ + sum of w_j over the arrivals before it in M~ + co-batched chunks after it

with M~ the in-flight iteration seen by an arrival (length-biased), U uniform on [0, 1], w_j the
engine time that an earlier arrival adds to the iteration cycle and the co-batched term the chunks
of later arrivals that share its last iteration. The iteration lengths form the chain
M' = D + sum over the arrivals during M of w, whose stationary cumulants follow from
K(s) = s D + K(h(s)), h(s) = lambda (E[exp(s w)] - 1), order by order: a closed form, no scan.
The law of X is taken as a shifted exponential with X's mean and standard deviation (the cheapest
CDF that keeps the tail's scale).

Prompt lengths: each class's fresh arrivals carry their mean (`Queue`) and their length strata
(`workload.Arrivals.prompt_strata`: a lognormal with the two moments of the class's length law, or
of the whole trace, not of the interval's few draws, whose sum the workload draws from a normal
law), 5 strata of probability (0.4, 0.3, 0.2, 0.08, 0.02), each at its middle quantile (0.2, 0.55,
0.8, 0.94, 0.99), scaled to the bin's mean: the TTFT tail is made by the longest prompts, so the
strata are finest there (a Gauss-Hermite rule puts 1.1 % of the mass at +2.86 standard deviations
and leaves the 99th percentile between two nodes). Fixed lengths give 5 equal nodes.

The arrival rate in the chain is the interval's count minus one per interval: the others a tagged
request sees (given that one arrival is the tagged request, the rest of a Poisson count is Poisson
with one fewer expected). The chain's load is kept below RHO_CLIP of the prefill share of full
iterations; beyond it the queue's age bins, not the chain, carry the backlog.

Derivation and validation against the exact per-iteration scheduler: experiments/crosscheck/
closed_form_wait.py and its README section (TTFT p99 within 25 % on 47/48 FP16 rows up to 75 %
load, with the same kernels).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import xla_ops
from inferencegym_jax.numerics import EPS, safe_div
from inferencegym_jax.serving.iteration import Iterations, chunks, prompt_service_s
from inferencegym_jax.traffic.strata import LENGTH_STRATA_W

NODE_W = LENGTH_STRATA_W  # the length strata (`traffic.strata`)
NUM_NODES = len(NODE_W)
# [1] the chain's load (lambda E[w]) is kept below this share of the prefill share of full
# iterations: the chain's moments diverge as it nears 1 (experiments/crosscheck/closed_form_wait.py).
RHO_CLIP = 0.9
# 3-node Gauss-Legendre rule on [0, 1] for the average over U (exact for X's polynomial moments).
GL_U = (0.1127016653792583, 0.5, 0.8872983346207417)
GL_W = (5.0 / 18.0, 8.0 / 18.0, 5.0 / 18.0)


class FreshLaw(NamedTuple):
    """TTFT of each class's fresh requests per length node, engine time only (no overhead, stall
    or KV transfer): `service_s` + X, X with mean `wait_mean_s` and variance `wait_var_s2`; float32
    (3, NUM_NODES).

    Attributes:
      node_weight: share of the class's fresh requests at the node (NODE_W).
      prompt: [tokens] the node's prompt length.
      service_s: [s] its own service S(p).
      wait_mean_s: [s] mean of X.
      wait_var_s2: [s^2] variance of X.
      iteration_s: float32 () [s] the chain's mean iteration length E[M].
    """

    node_weight: Array
    prompt: Array
    service_s: Array
    wait_mean_s: Array
    wait_var_s2: Array
    iteration_s: Array


def length_nodes(count: Array, prompt: Array, strata: Array) -> Array:
    """Prompt lengths [tokens] at the length strata of each class: the bin's mean times `strata`
    (3, NUM_NODES) (`traffic.strata.length_strata`); float32 (3, NUM_NODES), 0 for an empty class."""
    return safe_div(prompt, count)[:, None] * strata


def chain_length_moments(decode_s: Array, rate: Array, w1: Array, w2: Array, w3: Array
                         ) -> tuple[Array, Array, Array]:
    """E[M] [s] of the stationary iteration length M' = D + sum_{Poisson(rate M)} w, and E[M~] [s]
    and E[M~^2] [s^2] of the iteration in flight that a Poisson arrival sees (length-biased), from
    the chain's cumulants to order 3 (module docstring); w1..w3 are E[w^n] of the added work
    [s^n]."""
    a1, a2, a3 = rate * w1, rate * w2 / 2.0, rate * w3 / 6.0
    c0 = decode_s / (1.0 - a1)
    c1 = c0 * a2 / (1.0 - a1 * a1)
    c2 = (c0 * a3 + c1 * 2.0 * a1 * a2) / (1.0 - a1 * a1 * a1)
    k1, k2, k3 = c0, 2.0 * c1, 6.0 * c2
    m1 = k1
    m2 = k2 + k1 * k1
    m3 = k3 + 3.0 * k2 * k1 + k1 * k1 * k1
    # m2 / m1 stays finite as D -> 0 (an idle prefill-only engine): k2 and k1 are both O(D).
    return m1, safe_div(m2, m1), safe_div(m3, m1)


def fresh_law(it: Iterations, count: Array, prompt: Array, strata: Array, dt: Array) -> FreshLaw:
    """The TTFT law of each class's fresh arrivals ((3,) counts and prompt sums, (3, NUM_NODES)
    length strata of this interval's arrivals) on an engine described by `it`, over an interval of
    `dt` [s] (module docstring)."""
    nodes = length_nodes(count, prompt, strata)
    weight = jnp.broadcast_to(jnp.asarray(NODE_W, jnp.float32), nodes.shape)
    service = prompt_service_s(it, nodes)
    added = service - it.decode_s  # [s] engine time each request adds to the iteration cycle
    total = jnp.sum(count)
    mix = weight * safe_div(count, total)[:, None]  # (3, NUM_NODES), sums to 1 (or 0 when empty)
    rate = jnp.maximum(total - 1.0, 0.0) / dt  # [req/s] the others a tagged request sees
    w1, w2, w3, p1, p2 = xla_ops.sums((mix * added, mix * added * added, mix * added * added * added, mix * nodes,
                                       mix * nodes * nodes), axes=(0, 1))  # one pass (iteration.py)
    rate = rate * jnp.minimum(1.0, safe_div(RHO_CLIP * it.prefill_share, rate * w1))
    mean_iteration, biased1, biased2 = chain_length_moments(it.decode_s, rate, w1, w2, w3)
    # co-batched in a request's last iteration: the chunks of later arrivals that fit beside it
    last = nodes - (chunks(it, nodes) - 1.0) * it.chunk_tokens  # (3, N) [tokens] its last chunk
    room = jnp.maximum(it.chunk_tokens - last, 0.0)  # (3, N)
    # (the mean co-batched prompt against the room, not every pair of nodes: a 15 x 15 table would
    # cost more than the rest of the law; the term is a small part of X)
    v1 = it.token_s * jnp.minimum(p1, room)
    v2 = it.token_s * it.token_s * jnp.minimum(p2, room * room)
    before = rate * w1
    alpha = 1.0 - before + rate * v1
    mean = jnp.zeros_like(nodes)
    second = jnp.zeros_like(nodes)
    for u, g in zip(GL_U, GL_W):
        a = u * alpha + before
        spread = (1.0 - u) * w2 + u * v2
        mean = mean + g * biased1 * a
        second = second + g * (biased2 * a * a + rate * biased1 * spread)
    var = jnp.maximum(second - mean * mean, 0.0)
    return FreshLaw(weight, nodes, service, jnp.maximum(mean, 0.0), var, mean_iteration)


def backlog_wait(ahead_s: Array, dt: Array) -> tuple[Array, Array]:
    """Mean [s] and second moment [s^2] of the wait max(A - t, 0) of a request arriving at t
    uniform on [0, dt] behind `ahead_s` = A seconds of older work that starts at the interval's
    start."""
    a = jnp.minimum(ahead_s, dt)
    mean = (ahead_s * a - 0.5 * a * a) / dt
    second = (ahead_s**3 - (ahead_s - a) ** 3) / (3.0 * dt)
    return mean, second


def exponential_parts(mean_s: Array, var_s2: Array) -> tuple[Array, Array]:
    """Shift [s] and scale [s] of the shifted exponential with mean `mean_s` and standard deviation
    min(sd, mean) (a scale above the mean would need a negative shift); scale >= EPS."""
    scale = jnp.maximum(jnp.minimum(jnp.sqrt(var_s2), mean_s), EPS)
    return jnp.maximum(mean_s - scale, 0.0), scale
