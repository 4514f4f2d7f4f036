"""The mixed engine's iterations in NumPy (serving.iteration), for N envs at once.

Every iteration is one forward pass: a decode step of the pool and, under the token budget,
chunk = max_batched_tokens - decode tokens prompt tokens. An iteration carrying k prompt tokens
takes D + g(k), D the pool's decode-only step, g(k) = mixed_step_time(pool, k) - D (a lone
prefill pass on an empty engine or on a prefill GPU, where D is the step overhead). g is read
off a table at 1 token and at KNOT_FRACTIONS of the chunk, linear between the knots (from g(1)
at 0 tokens) and at the last segment's slope past the chunk. A prompt of p tokens takes
n = ceil(p / chunk) iterations: S(p) = n D + (n - 1) g(chunk) + g(last chunk) + the attention
of its later chunks over its earlier ones.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from inferencegym_jax.testing.reference import roofline
from inferencegym_jax.testing.reference.arrays import safe_div
from inferencegym_jax.testing.reference.constants import F32, KNOT_FRACTIONS, MIN_KNOT_WIDTH


class Iterations(NamedTuple):
    """The interval's iteration model (serving.iteration.Iterations); (N,) float32 unless noted.

    Attributes:
      step_s: [s] a decode-only step of max(B, 1) sequences.
      decode_s: [s] D, a decode-only iteration of the pool (0 on an empty engine).
      token_s: [s/token] a full chunk's time per prompt token.
      chunk_tokens: [tokens] prompt tokens one iteration carries (>= 1).
      pair_s: [s] attention time of one (query, key) pair, compute-bound.
      prefill_share: share of engine time full iterations give to prompts, in (0, 1].
      pool: [sequences] the decoding pool B.
      context: [tokens] its mean context.
      spec_length: [tokens] speculative tokens per decode step.
      disaggregated: bool, prompts are served by a prefill GPU.
      knots_k: (N, 1 + len(KNOT_FRACTIONS)) [tokens] 0 and the chunk's KNOT_FRACTIONS.
      knots_s: (N, 1 + len(KNOT_FRACTIONS)) [s] g at 1 token and at those fractions.
    """

    step_s: np.ndarray
    decode_s: np.ndarray
    token_s: np.ndarray
    chunk_tokens: np.ndarray
    pair_s: np.ndarray
    prefill_share: np.ndarray
    pool: np.ndarray
    context: np.ndarray
    spec_length: np.ndarray
    disaggregated: np.ndarray
    knots_k: np.ndarray
    knots_s: np.ndarray

    @property
    def prefill_rate(self) -> np.ndarray:
        """[tokens/s] prompt tokens per second of engine time with every iteration full."""
        return (self.prefill_share / self.token_s).astype(F32)


def chunk_s(profile: Any, it: Iterations, tokens: np.ndarray) -> np.ndarray:
    """g(k) [s] from the roofline (serving.iteration.chunk_s): the iteration of the pool with `tokens`
    (N,) prompt tokens minus its decode-only step; a lone pass on a prefill GPU; 0 for no tokens."""
    pool = np.where(it.disaggregated, F32(0.0), it.pool)
    step = roofline.mixed_step_time(profile, pool, it.context, it.spec_length, tokens)
    added = step - np.where(it.disaggregated, F32(0.0), it.decode_s)
    return np.where(tokens > 0, added, F32(0.0)).astype(F32)


def iterations(profile: Any, pool: np.ndarray, context: np.ndarray, spec_length: np.ndarray,
               max_batched_tokens: Any, disaggregated: np.ndarray) -> Iterations:
    """The iteration model of a pool of `pool` (N,) sequences of mean context `context` [tokens]
    (serving.iteration.iterations): below one sequence, D and the chunk are interpolated linearly
    from an empty engine (D = 0, a chunk of max_batched_tokens)."""
    present = np.clip(pool, 0.0, 1.0)
    b = np.maximum(pool, F32(1.0))
    alone_chunk = np.maximum(max_batched_tokens, F32(1.0))
    mixed_chunk = np.maximum(max_batched_tokens - b * (spec_length + 1.0), F32(1.0))
    chunk = np.where(disaggregated, alone_chunk, present * mixed_chunk + (1.0 - present) * alone_chunk)
    step = roofline.decode_step_time(profile, b, context, spec_length)
    decode_s = np.where(disaggregated, profile.step_overhead_s, present * step)
    pair_s = profile.attn_flops_per_token_context / profile.bf16_flops
    knots_k = np.stack([np.zeros_like(chunk)] + [F32(f) * chunk for f in KNOT_FRACTIONS], axis=1).astype(F32)
    decode_s, chunk = decode_s.astype(F32), chunk.astype(F32)
    zero = np.zeros_like(chunk)
    pool_only = Iterations(step, decode_s, zero, chunk, pair_s, zero, pool, context, spec_length, disaggregated,
                           knots_k, np.zeros_like(knots_k))  # what chunk_s reads
    at = [np.ones_like(chunk)] + [knots_k[:, i] for i in range(1, knots_k.shape[1])]  # g(1 token), then the fractions
    knots_s = np.stack([chunk_s(profile, pool_only, k) for k in at], axis=1)
    token_s = knots_s[:, -1] / chunk
    full = chunk * token_s
    return Iterations(step, decode_s, token_s, chunk, pair_s, safe_div(full, decode_s + full), pool, context,
                      spec_length, disaggregated, knots_k, knots_s)


def chunks(it: Iterations, prompt: np.ndarray) -> np.ndarray:
    """Iterations a prompt of `prompt` tokens needs, ceil(prompt / chunk) >= 1; prompt (N, ...)."""
    chunk = it.chunk_tokens.reshape((-1,) + (1,) * (np.ndim(prompt) - 1))
    return np.maximum(np.ceil(prompt / chunk), F32(1.0))


def later_chunk_pairs(it: Iterations, prompt: np.ndarray, prompt_sq: np.ndarray) -> np.ndarray:
    """Attention pairs of prompts' later chunks over their earlier ones [pairs]:
    (sum p^2 - chunk sum p) / 2, 0 within one chunk; prompt (N, ...)."""
    chunk = it.chunk_tokens.reshape((-1,) + (1,) * (np.ndim(prompt) - 1))
    return 0.5 * np.maximum(prompt_sq - chunk * prompt, F32(0.0))


def chunk_time_s(it: Iterations, tokens: np.ndarray) -> np.ndarray:
    """g(k) [s] off the knot table for `tokens` (N, ...) >= 0 (serving.iteration.chunk_time_s): on
    the segment [k_j, k_j+1] that holds it (the last one past the chunk), g_j + slope_j (k - k_j);
    0 for no tokens."""
    n = it.knots_k.shape[0]
    flat = np.asarray(tokens, F32).reshape(n, -1)
    width = np.diff(it.knots_k, axis=1)
    slope = np.diff(it.knots_s, axis=1) / np.maximum(width, MIN_KNOT_WIDTH)  # (N, segments)
    inner = it.knots_k[:, 1:-1]  # the knots between segments
    j = np.sum(flat[:, :, None] >= inner[:, None, :], axis=2)  # (N, M) segment of each amount
    rows = np.arange(n)[:, None]
    g = it.knots_s[rows, j] + slope[rows, j] * (flat - it.knots_k[rows, j])
    return np.where(flat > 0, g, F32(0.0)).astype(F32).reshape(np.shape(tokens))


def prompt_service_s(it: Iterations, prompt: np.ndarray) -> np.ndarray:
    """S(p) [s], a prompt's own service from its first chunk to its first token when alone in the
    engine (serving.iteration.prompt_service_s); prompt (N, ...)."""
    shape = (-1,) + (1,) * (np.ndim(prompt) - 1)
    n = chunks(it, prompt)
    last = prompt - (n - 1.0) * it.chunk_tokens.reshape(shape)
    full = it.knots_s[:, -1].reshape(shape)
    return (n * it.decode_s.reshape(shape) + (n - 1.0) * full + chunk_time_s(it, last)
            + it.pair_s.reshape(shape) * later_chunk_pairs(it, prompt, prompt * prompt)).astype(F32)


def prefill_cost_s(it: Iterations, tokens: np.ndarray, sum_sq: np.ndarray, carrying: np.ndarray) -> np.ndarray:
    """[s] engine time of prefilling `tokens` (N,) prompt tokens (squares summing to `sum_sq`) in
    `carrying` iterations, at least tokens / chunk: their chunks at the mean size, plus the later
    chunks' attention (serving.iteration.prefill_cost_s)."""
    n = np.maximum(carrying, tokens / it.chunk_tokens)
    return (n * chunk_time_s(it, safe_div(tokens, n)) + it.pair_s * later_chunk_pairs(it, tokens, sum_sq)).astype(F32)
