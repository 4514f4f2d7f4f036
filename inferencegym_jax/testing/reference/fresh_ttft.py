"""TTFT of the requests served in the interval they arrive in, in NumPy (serving.fresh_ttft), for N
envs at once.

A Poisson arrival waits for the iteration in flight (length-biased, M~) at a uniform point U of it,
then for the work of the arrivals before it in that iteration and the chunks co-batched in its last
one, then its own service S(p): TTFT = S(p) + X. The iteration lengths form the chain
M' = D + (sum of the work w of the arrivals during M); its stationary cumulants to order 3 follow
from K(s) = s D + K(lambda (E[exp(s w)] - 1)), order by order. The law of X is a shifted
exponential of X's mean and standard deviation. Each class's prompts sit at 5 length nodes (the
arrivals' strata times the class's mean prompt), the chain's rate is the interval's arrivals minus
the tagged one, and its load is kept below RHO_CLIP of the prefill share.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from inferencegym_jax.testing.reference.arrays import per_env, safe_div
from inferencegym_jax.testing.reference.constants import (
    EPS,
    F32,
    GAUSS_LEGENDRE_U,
    GAUSS_LEGENDRE_W,
    RHO_CLIP,
    STRATA_W,
)
from inferencegym_jax.testing.reference.iteration import Iterations, chunks, prompt_service_s


class FreshLaw(NamedTuple):
    """Engine-time TTFT of each class's fresh requests per length node: `service_s` + X, X of mean
    `wait_mean_s` and variance `wait_var_s2` (serving.fresh_ttft.FreshLaw); (N, 3, 5) float32.

    Attributes:
      node_weight: share of the class's fresh requests at the node (STRATA_W).
      prompt: [tokens] the node's prompt length.
      service_s: [s] its own service S(p).
      wait_mean_s: [s] mean of X.
      wait_var_s2: [s^2] variance of X.
      iteration_s: (N,) [s] the chain's mean iteration length E[M].
    """

    node_weight: np.ndarray
    prompt: np.ndarray
    service_s: np.ndarray
    wait_mean_s: np.ndarray
    wait_var_s2: np.ndarray
    iteration_s: np.ndarray


def chain_length_moments(decode_s: np.ndarray, rate: np.ndarray, w1: np.ndarray, w2: np.ndarray,
                         w3: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E[M] [s] of the stationary chain, and E[M~] [s], E[M~^2] [s^2] of the length-biased iteration
    an arrival sees (serving.fresh_ttft.chain_length_moments); w1..w3 the moments of the work an
    arrival adds [s^n], all (N,)."""
    a1, a2, a3 = rate * w1, rate * w2 / 2.0, rate * w3 / 6.0
    c0 = decode_s / (1.0 - a1)  # the cumulant generating function's coefficients, order by order
    c1 = c0 * a2 / (1.0 - a1**2)
    c2 = (c0 * a3 + 2.0 * c1 * a1 * a2) / (1.0 - a1**3)
    k1, k2, k3 = c0, 2.0 * c1, 6.0 * c2  # cumulants
    m1, m2, m3 = k1, k2 + k1**2, k3 + 3.0 * k2 * k1 + k1**3  # raw moments
    return m1, safe_div(m2, m1), safe_div(m3, m1)


def fresh_law(it: Iterations, count: np.ndarray, prompt: np.ndarray, strata: np.ndarray, dt: float) -> FreshLaw:
    """The TTFT law of each class's fresh arrivals ((N, 3) counts and prompt sums, (N, 3, 5) length
    strata) on the engine `it` over an interval of `dt` [s] (serving.fresh_ttft.fresh_law)."""
    nodes = (safe_div(prompt, count)[:, :, None] * strata).astype(F32)
    weight = np.broadcast_to(STRATA_W, nodes.shape)
    service = prompt_service_s(it, nodes)
    added = service - per_env(it.decode_s)  # engine time each request adds to the cycle
    total = np.sum(count, axis=1)
    mix = weight * safe_div(count, total[:, None])[:, :, None]  # over classes and nodes: sums to 1 or 0
    rate = np.maximum(total - 1.0, F32(0.0)) / dt  # [req/s] the others a tagged request sees

    def mean_over(x: np.ndarray) -> np.ndarray:
        return np.sum(mix * x, axis=(1, 2))

    w1, w2, w3, p1, p2 = (mean_over(x) for x in (added, added**2, added**3, nodes, nodes**2))
    rate = rate * np.minimum(F32(1.0), safe_div(RHO_CLIP * it.prefill_share, rate * w1))  # load below RHO_CLIP
    mean_iteration, biased1, biased2 = (per_env(x) for x in chain_length_moments(it.decode_s, rate, w1, w2, w3))
    # co-batched: the mean later prompt, up to the room its last chunk leaves in the iteration
    chunk, token_s = per_env(it.chunk_tokens), per_env(it.token_s)
    room = np.maximum(chunk - (nodes - (chunks(it, nodes) - 1.0) * chunk), F32(0.0))
    v1 = token_s * np.minimum(per_env(p1), room)
    v2 = token_s**2 * np.minimum(per_env(p2), room**2)
    rate, w1, w2 = per_env(rate), per_env(w1), per_env(w2)
    before = rate * w1
    alpha = 1.0 - before + rate * v1
    mean, second = np.zeros_like(nodes), np.zeros_like(nodes)
    for u, g in zip(GAUSS_LEGENDRE_U, GAUSS_LEGENDRE_W):  # X's moments averaged over U
        a = u * alpha + before
        mean = mean + g * biased1 * a
        second = second + g * (biased2 * a**2 + rate * biased1 * ((1.0 - u) * w2 + u * v2))
    var = np.maximum(second - mean**2, F32(0.0))
    return FreshLaw(weight, nodes, service, np.maximum(mean, F32(0.0)).astype(F32), var.astype(F32),
                    mean_iteration[:, 0, 0])


def backlog_wait(ahead_s: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean [s] and second moment [s^2] of max(A - t, 0), t uniform on [0, dt], behind A = `ahead_s`
    seconds of older work started at the interval's start (serving.fresh_ttft.backlog_wait)."""
    a = np.minimum(ahead_s, dt)
    return (ahead_s * a - 0.5 * a**2) / dt, (ahead_s**3 - (ahead_s - a) ** 3) / (3.0 * dt)


def exponential_parts(mean_s: np.ndarray, var_s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift [s] and scale [s] of the shifted exponential of mean `mean_s` and standard deviation
    min(sd, mean) (serving.fresh_ttft.exponential_parts); scale >= EPS."""
    scale = np.maximum(np.minimum(np.sqrt(var_s2), mean_s), EPS)
    return np.maximum(mean_s - scale, F32(0.0)), scale
